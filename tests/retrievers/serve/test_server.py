"""The retrieval server (`python -m retrievers.serve`) and runs that search it
(``--retriever remote:``): Search-R1's API exactly, the native endpoint ranking exactly as
in-process, one-line refusals, batching, a bounded queue, SIGTERM, and every agent giving the
same rankings and metrics through a server as with its own index."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from agents.commands.run import main as run_main
from agents.llm import scripted
from agents.llm.scripted import Reply
from eval.datasets import load_tasks, task_fingerprint
from retrievers.base import SearchRequest
from retrievers.config import RetrieverConfig
from retrievers.remote import RemoteRetriever, RetrieverUnavailable, check_index
from retrievers.serve.app import make_app
from retrievers.serve.batch import Batcher, Busy
from retrievers.serve.index import build_indexes
from retrievers.settings import BM25Config

REPO = Path(__file__).resolve().parents[3]
SERVING = re.compile(r"serving .* at (http://[\d.]+:\d+)")


def start_server(cache: Path, *args: str, dataset: str = "demo") -> tuple[subprocess.Popen, str]:
    """A server subprocess on a free port, and its URL once it answers."""
    cmd = [sys.executable, "-m", "retrievers.serve", "--dataset", dataset, "--port", "0",
           "--cache-dir", str(cache), "--quiet", *args]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=REPO, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "HF_HUB_OFFLINE": "1"})  # fmt: skip
    deadline = time.monotonic() + 120
    assert proc.stderr is not None
    for line in proc.stderr:
        found = SERVING.search(line)
        if found:
            return proc, found.group(1)
        assert time.monotonic() < deadline, line
    raise AssertionError(f"the server exited {proc.wait()} before serving")


def stop(proc: subprocess.Popen) -> tuple[int, str]:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=30)
    return proc.returncode, err


@pytest.fixture(scope="module")
def demo_indexes(tmp_path_factory):
    cache = tmp_path_factory.mktemp("serve-cache")
    tasks = load_tasks("demo", cache)
    return build_indexes(RetrieverConfig(spec="bm25"), tasks, cache, progress=False), cache


@pytest.fixture(scope="module")
def client(demo_indexes):
    indexes, _ = demo_indexes
    app = make_app(indexes, max_query_chars=1000, max_body_bytes=20_000, max_k=200)
    with TestClient(app) as c:
        yield c


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    proc, url = start_server(tmp_path_factory.mktemp("server-cache"), "--retriever", "bm25")
    yield url
    code, err = stop(proc)
    assert code == 0 and "Traceback" not in err, err


# --- the HTTP API ------------------------------------------------------------------------------


def passages2string(retrieval_result: list[dict]) -> str:
    """Search-R1's reader of a /retrieve result (search_r1/llm_agent/generation.py
    `_passages2string`), as it runs there."""
    format_reference = ""
    for idx, doc_item in enumerate(retrieval_result):
        content = doc_item["document"]["contents"]
        title = content.split("\n")[0]
        text = "\n".join(content.split("\n")[1:])
        format_reference += f"Doc {idx + 1}(Title: {title}) {text}\n"
    return format_reference


def test_retrieve_answers_as_search_r1s_server_does(client, demo_indexes):
    indexes, _ = demo_indexes
    index = indexes["demo"]
    queries = ["insulin resistance in pregnancy", "aspirin and platelets"]
    scored = client.post("/retrieve", json={"queries": queries, "topk": 4, "return_scores": True})
    assert scored.status_code == 200
    result = scored.json()["result"]
    assert len(result) == 2 and all(len(r) == 4 for r in result)
    for query, hits in zip(queries, result, strict=True):
        expected = index.retriever.search(SearchRequest(query=query), 4)
        assert [h["document"]["id"] for h in hits] == list(expected)
        assert [h["score"] for h in hits] == list(expected.values())
        assert all(h["document"]["contents"] == index.corpus[h["document"]["id"]] for h in hits)
        assert passages2string(hits).startswith("Doc 1(Title: ")
    # without scores, each result is the list of documents itself; topk missing: the default 3
    plain = client.post("/retrieve", json={"queries": queries[:1]}).json()["result"]
    assert plain == [[h["document"] for h in result[0][:3]]]
    assert client.post("/retrieve", json={"queries": queries[:1], "topk": 0}).json()["result"] == (
        plain
    )  # their `if not request.topk`: 0 falls back too


def test_search_ranks_exactly_as_the_retriever_does_in_process(client, demo_indexes):
    indexes, _ = demo_indexes
    retriever = indexes["demo"].retriever
    requests = [
        SearchRequest("statins and cholesterol"),
        SearchRequest("q", expansion="ignored by BM25", sparse_text="warfarin bleeding risk"),
    ]
    body = {"k": 50, "requests": [{"query": r.query, "expansion": r.expansion,
                                   "sparse_text": r.sparse_text} for r in requests]}  # fmt: skip
    answer = client.post("/search", json=body).json()
    for request, got in zip(requests, answer["results"], strict=True):
        expected = retriever.search(request, 50)
        assert got["ids"] == list(expected) and got["scores"] == list(expected.values())
    assert answer["fingerprint"] == indexes["demo"].fingerprint


def test_health_names_the_index_it_holds(client, demo_indexes):
    indexes, cache = demo_indexes
    health = client.get("/health").json()
    (task,) = load_tasks("demo", cache)
    assert health["status"] == "ok" and health["documents"] == {"demo": len(task.corpus)}
    fp = health["tasks"]["demo"]
    assert fp["corpus"] == task_fingerprint(task)["corpus"]
    assert fp["retriever"] == "bm25" and fp["version"] == health["version"]
    other = build_indexes(RetrieverConfig(spec="bm25", bm25=BM25Config(method="lucene")), [task],
                          cache, progress=False)["demo"]  # fmt: skip
    assert other.fingerprint["settings"] != fp["settings"]  # the settings are part of it


@pytest.mark.parametrize(
    "method, path, body, status, message",
    [
        ("post", "/search", b"{not json", 422, "body: invalid JSON at byte 1"),
        ("post", "/retrieve", {"queries": "one"}, 422, "queries: Input should be a valid list"),
        ("post", "/search", {"k": "x", "requests": [{"query": "a"}]}, 422, "k: Input should be"),
        ("post", "/search", {"k": 0, "requests": [{"query": "a"}]}, 422, "k: Input should be"),
        ("post", "/search", {"k": 500, "requests": [{"query": "a"}]}, 422, "over the server's"),
        ("post", "/search", {"task": "Biology", "requests": [{"query": "a"}]}, 404,
         "no task 'Biology' here"),
        ("post", "/retrieve", {"queries": ["x" * 1001]}, 413, "query 0 is 1,001 characters"),
        ("post", "/retrieve", {"queries": ["x"] * 6000}, 413, "request body of"),
        ("post", "/retrieve", {"queries": ["x"] * 1100}, 413, "1,100 queries in one request"),
        ("get", "/documents/nope", None, 404, "no document 'nope' in task demo"),
    ],
)  # fmt: skip
def test_a_bad_request_gets_a_4xx_with_a_one_line_reason(client, method, path, body, status,
                                                         message):  # fmt: skip
    if isinstance(body, bytes):
        response = client.post(path, content=body, headers={"content-type": "application/json"})
    elif method == "post":
        response = client.post(path, json=body)
    else:
        response = client.get(path)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert message in error and "\n" not in error
    assert client.get("/health").json()["status"] == "ok"  # and it goes on


def test_an_empty_request_gets_an_empty_answer_as_search_r1s_server_gives(client):
    assert client.post("/retrieve", json={"queries": []}).json() == {"result": []}
    assert client.post("/search", json={"requests": []}).json()["results"] == []


def test_documents_are_read_by_id(client, demo_indexes):
    indexes, _ = demo_indexes
    doc = next(iter(indexes["demo"].corpus))
    assert client.get(f"/documents/{doc}").json() == {
        "id": doc, "contents": indexes["demo"].corpus[doc]
    }  # fmt: skip


# --- batching and the queue ---------------------------------------------------------------------


class Recorder:
    """A retriever that records each batch it is asked, and can be held."""

    name = "recorder"

    def __init__(self) -> None:
        self.batches: list[int] = []
        self.gate = None

    def search_many(self, requests, k):
        if self.gate is not None:
            self.gate.wait(30)
        self.batches.append(len(requests))
        return {qid: {f"d-{r.query}": 1.0} for qid, r in requests.items()}

    def search(self, request, k):
        return self.search_many({"q": request}, k)["q"]


def test_queries_that_arrive_together_are_searched_as_one_batch_and_the_queue_is_bounded():
    import threading

    from retrievers.serve.index import ServedIndex

    recorder = Recorder()
    index = ServedIndex(task=type("T", (), {"name": "t", "corpus": {}})(), retriever=recorder,
                        fingerprint={})  # fmt: skip
    batcher = Batcher(max_batch=64, max_queue=12)

    async def scenario():
        worker = asyncio.create_task(batcher.run())
        await asyncio.sleep(0)
        recorder.gate = threading.Event()  # the first search holds the worker
        first = asyncio.create_task(batcher.search(index, [SearchRequest("a")], 10))
        await asyncio.sleep(0.05)
        waiting = [asyncio.create_task(batcher.search(index, [SearchRequest(f"q{i}")], 10))
                   for i in range(10)]  # fmt: skip
        await asyncio.sleep(0.05)
        with pytest.raises(Busy, match="11 queries are waiting"):  # 1 running + 10 + 2 > 12
            await batcher.search(index, [SearchRequest("x"), SearchRequest("y")], 10)
        gone = asyncio.create_task(batcher.search(index, [SearchRequest("gone")], 10))
        await asyncio.sleep(0.01)
        gone.cancel()  # a client that went away: never searched, nobody else disturbed
        recorder.gate.set()
        results = await asyncio.gather(first, *waiting)
        worker.cancel()
        return results

    results = asyncio.run(scenario())
    assert recorder.batches == [1, 10]  # the ten that waited, in one batch; "gone" dropped
    assert [list(r[0]) for r in results] == [["d-a"], *[[f"d-q{i}"] for i in range(10)]]
    assert batcher.stats.largest == 10


@pytest.mark.slow
def test_a_dense_server_encodes_concurrent_queries_at_once(tmp_path, monkeypatch):
    """Concurrent requests to a dense index: fewer encodes than queries. A batch pads its
    queries to its longest, which moves the last bits of an embedding, so near-ties may swap
    (the scores agree to bf16's precision); with --max-batch 1 every ranking is exactly the
    in-process one."""
    from concurrent.futures import ThreadPoolExecutor

    from retrievers.dense import DenseIndex

    tasks = load_tasks("demo", tmp_path)
    indexes = build_indexes(RetrieverConfig(spec="dense"), tasks, tmp_path, progress=False)
    retriever = indexes["demo"].retriever
    queries = list(tasks[0].queries.values())
    alone = [retriever.search(SearchRequest(q), 10) for q in queries]
    encodes: list[int] = []
    real = DenseIndex.encode_requests

    def counted(self, texts, expansions):
        encodes.append(len(texts))
        time.sleep(0.05)  # as a GPU encode takes its time: the next queries gather meanwhile
        return real(self, texts, expansions)

    monkeypatch.setattr(DenseIndex, "encode_requests", counted)

    def served(max_batch: int) -> list[dict[str, float]]:
        encodes.clear()
        with TestClient(make_app(indexes, max_batch=max_batch)) as c:

            def ask(query: str) -> dict[str, float]:
                body = {"k": 10, "requests": [{"query": query}]}
                got = c.post("/search", json=body).json()["results"][0]
                return dict(zip(got["ids"], got["scores"], strict=True))

            with ThreadPoolExecutor(8) as pool:
                return list(pool.map(ask, queries))

    batched = served(64)
    assert sum(encodes) == len(queries) and len(encodes) < len(queries)
    for got, expected in zip(batched, alone, strict=True):
        common = set(got) & set(expected)
        assert len(common) >= 8
        assert max(abs(got[d] - expected[d]) for d in common) < 2e-2
    one_by_one = served(1)
    assert encodes == [1] * len(queries)
    assert [list(r.items()) for r in one_by_one] == [list(r.items()) for r in alone]


# --- the process -------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_served_process_answers_survives_a_broken_client_and_stops_on_sigterm(tmp_path):
    proc, url = start_server(tmp_path / "cache", "--retriever", "bm25")
    host, port = url.removeprefix("http://").split(":")
    held = socket.create_connection((host, int(port)))  # half a request, held open
    try:
        held.sendall(b'POST /search HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n{"k"')
        with socket.create_connection((host, int(port))) as s:  # half a request, then gone
            s.sendall(b'POST /search HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n{"k"')
        info = check_index(url, "demo", task_fingerprint(load_tasks("demo", tmp_path)[0])["corpus"])
        assert info["retriever"] == "bm25"
        remote = RemoteRetriever(url, "demo")
        assert remote.search(SearchRequest("insulin"), 5)
        remote.close()
    finally:
        code, err = stop(proc)  # within the graceful-shutdown limit, the held client or not
        held.close()
    assert code == 0, err
    assert "Traceback" not in err


# --- runs that search a server -------------------------------------------------------------------


BEGIN_QUERY = "<|begin_search_query|>"


def respond(messages, params):
    """One scripted model for every agent: one search where the agent searches, then an
    answer; a passage where it writes one."""
    first = str(messages[0].get("content") or "")
    replies = sum(m["role"] == "assistant" for m in messages)
    if params.get("tools"):  # tool-search: search, then submit what it found
        if not any(m["role"] == "tool" for m in messages):
            return Reply(tool_calls=[("search", {"query": "insulin resistance", "k": 5})])
        seen = re.findall(r'"id": "([^"]+)"', json.dumps([m.get("content") for m in messages]))
        return Reply(tool_calls=[("submit", {"doc_ids": seen[:3]})])
    if first.startswith("**Task Instruction:**"):  # Search-o1's Reason-in-Documents
        return "**Final Information** Insulin resistance drives gestational diabetes."
    if BEGIN_QUERY in first:
        return f"I should search.\n\n{BEGIN_QUERY}insulin resistance" if not replies else (
            "Insulin resistance.")  # fmt: skip
    if "<search>" in first:
        return "<think>look</think>\n<search> insulin resistance " if not replies else (
            "<answer> insulin resistance")  # fmt: skip
    return "Insulin resistance and metformin in type 2 diabetes."


AGENTS = ("none", "hyde", "query2doc", "lamer", "reason", "search-o1", "search-r1", "tool-search")


def run_of(folder: Path) -> tuple[list[str], dict]:
    trec = (folder / "demo" / "run.trec").read_text().splitlines()
    metrics = json.loads((folder / "demo" / "metrics.json").read_text())["metrics"]
    return trec, metrics


@pytest.mark.slow
def test_every_agent_ranks_the_same_through_a_server_as_with_its_own_index(server, tmp_path):
    scripted.install(respond)
    common = ["--model", "scripted/m", "--runs-dir", str(tmp_path / "runs"), "--cache-dir",
              str(tmp_path / "cache"), "--quiet"]  # fmt: skip
    for agent in AGENTS:
        model = common if agent != "none" else common[2:]
        assert run_main(["--agent", agent, "--run-name", f"{agent}-local", *model]) == 0
        assert run_main(["--agent", agent, "--run-name", f"{agent}-remote", *model,
                         "--retriever", f"remote:{server}"]) == 0  # fmt: skip
        local, remote = run_of(tmp_path / "runs" / f"{agent}-local"), run_of(
            tmp_path / "runs" / f"{agent}-remote")  # fmt: skip
        assert remote == local, agent
    config = json.loads((tmp_path / "runs" / "hyde-remote" / "config.json").read_text())
    health = json.loads(__import__("urllib.request").request.urlopen(f"{server}/health").read())
    assert config["retriever_index"] == {"demo": {f"remote:{server}": health["tasks"]["demo"]}}


@pytest.mark.slow
def test_a_server_of_another_corpus_is_refused_in_one_line(tmp_path, capsys):
    import shutil

    from eval.datasets import DEMO_DIR

    other = shutil.copytree(DEMO_DIR, tmp_path / "data" / "demo")
    corpus = other / "corpus.jsonl"
    lines = corpus.read_text().splitlines()
    row = json.loads(lines[0])
    row["text"] += " (changed)"
    corpus.write_text("\n".join([json.dumps(row), *lines[1:]]) + "\n")
    proc, url = start_server(tmp_path / "cache", "--retriever", "bm25", dataset=str(other))
    try:
        argv = ["--agent", "none", "--retriever", f"remote:{url}", "--runs-dir",
                str(tmp_path / "runs"), "--quiet"]  # fmt: skip
        assert run_main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "holds another corpus for task demo" in err
        assert not (tmp_path / "runs").exists()  # refused before a run folder exists
    finally:
        stop(proc)


@pytest.mark.slow
def test_a_server_that_goes_away_fails_those_queries_and_a_rerun_finishes(tmp_path, capsys):
    proc, url = start_server(tmp_path / "cache", "--retriever", "bm25")
    calls = []

    def going(messages, params):
        calls.append(1)
        if len(calls) == 4:  # mid-run: the server is stopped
            stop(proc)
        return "Insulin resistance and metformin."

    scripted.install(going)
    argv = ["--agent", "hyde", "--model", "scripted/m", "--retriever", f"remote:{url}",
            "--runs-dir", str(tmp_path / "runs"), "--run-name", "r", "--concurrency", "1",
            "--cache-dir", str(tmp_path / "cache"), "--quiet"]  # fmt: skip
    assert run_main(argv) == 1
    records = [
        json.loads(x)
        for x in (tmp_path / "runs" / "r" / "demo" / "queries.jsonl").read_text().splitlines()
    ]
    done = [r for r in records if r["error"] is None]
    failed = [r for r in records if r["error"]]
    assert 3 <= len(done) < 15 and failed
    assert all(url in r["error"] and "no answer" in r["error"] for r in failed)
    assert "queries failed; re-run the same command" in capsys.readouterr().err
    # the server back at its address: the same command answers only the failed queries
    port = url.rsplit(":", 1)[1]
    again, _ = start_server(tmp_path / "cache", "--retriever", "bm25", "--port", port)
    try:
        assert run_main(argv) == 0
    finally:
        stop(again)
    after = (tmp_path / "runs" / "r" / "demo" / "queries.jsonl").read_text().splitlines()
    kept = {json.loads(x)["query_id"]: x for x in after}
    assert all(kept[r["query_id"]] == json.dumps(r) or json.loads(kept[r["query_id"]]) == r
               for r in done)  # fmt: skip
    local = ["--agent", "hyde", "--model", "scripted/m", "--runs-dir", str(tmp_path / "runs"),
             "--run-name", "local", "--cache-dir", str(tmp_path / "cache"), "--quiet"]  # fmt: skip
    assert run_main(local) == 0
    assert run_of(tmp_path / "runs" / "r") == run_of(tmp_path / "runs" / "local")


def test_a_remote_search_that_finds_no_server_names_it(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(RetrieverUnavailable, match=f"127.0.0.1:{port}: no answer to /search"):
        RemoteRetriever(f"http://127.0.0.1:{port}", "demo").search(SearchRequest("x"), 3)
    with pytest.raises(ValueError, match="expected remote:http://HOST:PORT"):
        RemoteRetriever("localhost:8000", "demo")
