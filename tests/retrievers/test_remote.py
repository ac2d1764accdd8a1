"""`--retriever remote:URL` (retrievers/remote.py) trusts nothing a retrieval server answers.

A fake server on 127.0.0.1 (http.server in a thread) answers /health and /search as the real
one does, then in each bad shape: every bad answer fails its query with one line naming the
server and the field, nothing of it lands in queries.jsonl as a ranking, and the same command
answers those queries once the server answers well. A server restarted over another index
mid-run stops the run in one line naming both fingerprints; a server that is not there at the
start is one line; a server that wants a token gets ``R2MED_SERVE_TOKEN`` as a bearer token,
which no file and no line shows.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from agents.commands.run import main
from eval.datasets import load_folder, task_fingerprint
from eval.records import unpack_record
from retrievers import remote
from retrievers.base import SearchRequest
from tests.helpers import QUERIES, send_body

TOKEN = "s3cret-serve-token-0123456789"
RANKED = [("d2", 3.0), ("d3", 2.0), ("d4", 1.0)]


def fingerprint(corpus: str, method: str = "bm25q") -> dict[str, str]:
    return {"corpus": corpus, "retriever": "bm25", "settings": f"{method}-k1-b",
            "version": "0.1.0"}  # fmt: skip


def good(fp: dict, k: int, count: int) -> dict[str, Any]:
    ids, scores = [d for d, _ in RANKED[:k]], [s for _, s in RANKED[:k]]
    return {"results": [{"ids": ids, "scores": scores} for _ in range(count)], "fingerprint": fp}


def bad_answer(mode: str, fp: dict, k: int, count: int) -> dict[str, Any]:
    """A /search answer in one bad shape (the status stays 200)."""
    answer = good(fp, k, count)
    first = answer["results"][0]
    if mode == "no-results":
        del answer["results"]
    elif mode == "fewer-results":
        answer["results"] = []
    elif mode == "string-scores":
        first["scores"] = [str(s) for s in first["scores"]]
    elif mode == "null-scores":
        first["scores"] = None
    elif mode == "null-score":
        first["scores"][1] = None
    elif mode == "nan-scores":
        first["scores"][1] = float("nan")
    elif mode == "unknown-ids":
        first["ids"][1] = "zz9"
    elif mode == "short-scores":
        first["scores"] = first["scores"][:2]
    elif mode == "no-fingerprint":
        del answer["fingerprint"]
    return answer


class Fake:
    """What the fake server answers; tests change it between runs."""

    def __init__(self, corpus: str) -> None:
        self.mode = "ok"
        self.fingerprint = fingerprint(corpus)
        self.restart_after: int | None = None  # searches answered before a "restart"
        self.restarted = fingerprint(corpus, "lucene")
        self.token_paths: tuple[str, ...] = ()  # paths that want ``TOKEN``
        self.searches = 0
        self.seen_auth: list[str | None] = []
        self.paths: list[str] = []

    def answer(self, handler: BaseHTTPRequestHandler) -> tuple[int, str, bytes]:
        self.paths.append(handler.path)
        path = handler.path.split("?")[0]
        auth = handler.headers.get("Authorization")
        self.seen_auth.append(auth)
        if path in self.token_paths and auth != f"Bearer {TOKEN}":
            return 401, "application/json", b'{"error": "this server wants a bearer token"}'
        if path == "/health":
            body = {"status": "ok", "tasks": {"toy": self.fingerprint}}
            return 200, "application/json", json.dumps(body).encode()
        length = int(handler.headers.get("Content-Length", 0))
        request = json.loads(handler.rfile.read(length))
        self.searches += 1
        if self.restart_after is not None and self.searches > self.restart_after:
            self.fingerprint = self.restarted  # restarted over another index, same URL
        if self.mode == "html":
            return 200, "text/html", b"<html><body>Welcome to nginx!</body></html>"
        count, k = len(request["requests"]), request["k"]
        answer = good(self.fingerprint, k, count)
        if self.mode != "ok":
            answer = bad_answer(self.mode, self.fingerprint, k, count)
        return 200, "application/json", json.dumps(answer).encode()


@pytest.fixture
def server(toy_dir: Path) -> Iterator[tuple[str, Fake]]:
    fake = Fake(task_fingerprint(load_folder(toy_dir))["corpus"])

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # quiet test output
            pass

        def _send(self) -> None:
            status, kind, body = fake.answer(self)
            send_body(self, body, status, content_type=kind)

        do_GET = do_POST = _send

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
    thread.daemon = True
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", fake
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


@pytest.fixture(autouse=True)
def no_token(monkeypatch: pytest.MonkeyPatch) -> None:
    """No token unless a test sets one (conftest already takes the back-off out of retries)."""
    monkeypatch.delenv(remote.TOKEN_VARIABLE, raising=False)


def run(toy_dir: Path, runs: Path, url: str, name: str = "run") -> int:
    return main([
        "--agent", "none", "--dataset", str(toy_dir), "--retriever", f"remote:{url}",
        "--runs-dir", str(runs), "--cache-dir", str(runs.parent / "cache"), "--quiet",
        "--concurrency", "1", "--run-name", name, "--timeout", "10",
    ])  # fmt: skip


def records(run_dir: Path) -> dict[str, dict]:
    path = run_dir / "toy" / "queries.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return {r["query_id"]: r for r in map(unpack_record, map(json.loads, lines))}


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.strip()]


# --- every bad shape fails its query in one line; the rerun answers it ------------------------

BAD = [  # mode, what the line says after the server's URL
    ("no-results", "/search answer: results: expected a list, got null"),
    ("fewer-results", "/search answer: results: 0 rankings for 1 requests"),
    (
        "html",
        "/search answered HTTP 200 with text/html, not JSON "
        "('<html><body>Welcome to nginx!</body></html>')",
    ),
    ("string-scores", "/search answer: results[0].scores[0]: expected a number, got str"),
    ("null-scores", "/search answer: results[0].scores: expected a list, got null"),
    ("null-score", "/search answer: results[0].scores[1]: expected a number, got null"),
    ("nan-scores", "/search answer: results[0].scores[1]: nan is not a finite number"),
    ("unknown-ids", "/search answer: results[0].ids[1]: 'zz9' is no document of the corpus"),
    ("short-scores", "/search answer: results[0]: 3 ids but 2 scores"),
    ("no-fingerprint", "/search answer: fingerprint: expected an object, got null"),
]


@pytest.mark.parametrize(("mode", "reason"), BAD, ids=[m for m, _ in BAD])
def test_a_bad_answer_fails_its_query_in_one_line_and_the_rerun_answers_it(
    server, toy_dir, tmp_path, capsys, mode, reason
):
    url, fake = server
    fake.mode = mode
    runs = tmp_path / "runs"
    assert run(toy_dir, runs, url) == 1
    err = capsys.readouterr().err
    said = [line for line in error_lines(err) if "failed:" in line]
    assert len(said) == 1, err  # the same reason once, not once per query
    assert said[0].endswith(f"failed: RemoteAnswerError: {url}: {reason}"), said[0]
    saved = records(runs / "run")
    assert set(saved) == set(QUERIES)
    for record in saved.values():  # failed, never answered: nothing of the answer is kept
        assert record["ranking"] == [] and record["error"].endswith(reason)
    metrics = json.loads((runs / "run" / "toy" / "metrics.json").read_text())
    assert metrics["failed"] == len(QUERIES)
    fake.mode = "ok"  # the server is mended: the same command answers those queries
    assert run(toy_dir, runs, url) == 0
    for record in records(runs / "run").values():
        assert record["error"] is None
        assert record["ranking"] == [list(pair) for pair in RANKED]


def test_the_client_checks_every_field_of_an_answer(server):
    url, fake = server
    retriever = remote.RemoteRetriever(url, "toy", documents=frozenset({"d2", "d3", "d4"}))
    try:
        for mode, reason in BAD:
            fake.mode = mode
            with pytest.raises(remote.RemoteAnswerError) as caught:
                retriever.search(SearchRequest(query="statins"), k=3)
            assert reason in str(caught.value) and "\n" not in str(caught.value), mode
        fake.mode = "ok"
        assert retriever.search(SearchRequest(query="statins"), k=3) == dict(RANKED)
        with pytest.raises(remote.RemoteAnswerError, match="3 documents, more than the 2 asked"):
            remote.rankings(good(fake.fingerprint, 3, 1), 1, 2, None, url)
    finally:
        retriever.close()


# --- the run is bound to the index it started with ---------------------------------------------


def test_a_server_restarted_over_another_index_stops_the_run(server, toy_dir, tmp_path, capsys):
    url, fake = server
    fake.restart_after = 1  # the first query is answered, then the server holds another index
    runs = tmp_path / "runs"
    assert run(toy_dir, runs, url) == 2
    lines = error_lines(capsys.readouterr().err)
    assert lines[-1] == (
        f"error: {url}: the server now holds another index for task toy (its answer's "
        f"fingerprint {remote.describe_fingerprint(fake.restarted)}, the run's "
        f"{remote.describe_fingerprint(fingerprint(fake.fingerprint['corpus']))}): restart it "
        "as the run began, or start a new run (--run-name)"
    ), lines
    assert "lucene" in lines[-1] and "bm25q" in lines[-1]
    saved = records(runs / "run")
    assert list(saved) == ["q1"] and saved["q1"]["error"] is None  # nothing for the others
    assert not (runs / "run" / "toy" / "metrics.json").exists()
    # the same command now meets the restarted server's /health: refused by the binding
    assert run(toy_dir, runs, url) == 2
    assert "differs in: retriever_index" in capsys.readouterr().err
    assert list(records(runs / "run")) == ["q1"]


def test_no_server_at_the_start_is_one_line(toy_dir, tmp_path, capsys):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert run(toy_dir, tmp_path / "runs", f"http://127.0.0.1:{port}") == 2
    lines = error_lines(capsys.readouterr().err)
    assert lines == [
        f"error: http://127.0.0.1:{port}: no answer to /health after {remote.ATTEMPTS} attempts "
        "(ConnectError); is `python -m retrievers.serve` running there?"
    ]
    assert not (tmp_path / "runs").exists()


# --- a server that wants a token ----------------------------------------------------------------


def test_a_server_that_wants_a_token_names_the_variable(server, toy_dir, tmp_path, capsys):
    url, fake = server
    fake.token_paths = ("/health", "/search")
    assert run(toy_dir, tmp_path / "runs", url) == 2
    assert error_lines(capsys.readouterr().err) == [
        f"error: {url}: /health wants a token (HTTP 401): set R2MED_SERVE_TOKEN to the "
        "server's token"
    ]
    fake.token_paths = ("/search",)  # /health open: the first search stops the run
    assert run(toy_dir, tmp_path / "runs", url) == 2
    assert error_lines(capsys.readouterr().err)[-1] == (
        f"error: {url}: /search wants a token (HTTP 401): set R2MED_SERVE_TOKEN to the "
        "server's token"
    )
    assert records(tmp_path / "runs" / "run") == {}  # no query recorded as failed or answered


def test_the_token_is_sent_and_written_nowhere(server, toy_dir, tmp_path, capsys, monkeypatch):
    url, fake = server
    fake.token_paths = ("/health", "/search")
    monkeypatch.setenv(remote.TOKEN_VARIABLE, "not-the-token-0123456789")
    assert run(toy_dir, tmp_path / "runs", url) == 2
    err = capsys.readouterr().err
    assert "refused the token in R2MED_SERVE_TOKEN (HTTP 401)" in err
    assert "not-the-token" not in err
    monkeypatch.setenv(remote.TOKEN_VARIABLE, TOKEN)
    assert run(toy_dir, tmp_path / "runs", url) == 0
    assert f"Bearer {TOKEN}" in fake.seen_auth
    out = capsys.readouterr()
    assert TOKEN not in out.out + out.err
    for path in (tmp_path / "runs").rglob("*"):
        if path.is_file():
            assert TOKEN.encode() not in path.read_bytes(), path


def test_a_url_with_a_query_string_is_searched_at_its_path(server):
    url, fake = server
    retriever = remote.RemoteRetriever(f"{url}/?k=3", "toy")
    try:
        assert retriever.search(SearchRequest(query="statins"), k=3) == dict(RANKED)
        assert fake.paths == ["/search?k=3"]
        fake.mode = "nan-scores"
        with pytest.raises(remote.RemoteAnswerError, match="nan is not a finite") as caught:
            retriever.search(SearchRequest(query="statins"), k=3)
        assert str(caught.value).startswith(f"{url}/: /search answer:")  # no query string
    finally:
        retriever.close()


def test_messages_name_the_server_without_credentials_or_query():
    assert (
        remote.masked("http://user:pw@gpu-box:8000/base?api_key=x#f") == "http://gpu-box:8000/base"
    )
    assert remote.masked("https://[::1]:8000") == "https://[::1]:8000"
