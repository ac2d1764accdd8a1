"""The CLI against a real OpenAI-compatible server: llama-cpp-python's, on 127.0.0.1.

The server (`python -m llama_cpp.server`, its extras are in the test dependencies) serves the
embedded SmolLM2-135M GGUF, once without and once with an API key. Requests are counted from
uvicorn's access log, one line per HTTP request, so "no retry" is checked where it matters: at
the server.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from agents.llm.client import NO_KEY_PLACEHOLDER
from eval.records import read_records
from tests.helpers import stop_process

REPO = Path(__file__).resolve().parents[3]
SERVED = "smollm2"  # the server's model alias: the client asks for openai/smollm2
SERVER_KEY = "srv-key-0123456789"
STARTUP_S = 60.0  # loading a 98 MB model takes ~2 s here; a busy machine gets room
BIND_ATTEMPTS = 3
COMPLETIONS = '"POST /v1/chat/completions '
TEXT_COMPLETIONS = '"POST /v1/completions '

pytestmark = pytest.mark.slow  # every test here runs against a real llama.cpp server


@dataclass
class Server:
    url: str
    log: Path

    def completions(self) -> list[str]:
        """The access-log lines of chat completion requests so far."""
        return [line for line in self.log.read_text().splitlines() if COMPLETIONS in line]

    def completions_endpoint(self) -> list[str]:
        """The access-log lines of (raw) completion requests so far."""
        return [line for line in self.log.read_text().splitlines() if TEXT_COMPLETIONS in line]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _answers(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=2).close()
    except urllib.error.HTTPError:  # a 401 from the keyed server: it is up
        return True
    except OSError:
        return False
    return True


def _serve(folder: Path, api_key: str | None, n_ctx: int = 1024, model: str = "smollm2-135m"):
    pytest.importorskip("llama_cpp.server.app", reason="llama_cpp.server needs its extras")
    from agents.llm.embedded.prefix_cache import CHUNK
    from agents.llm.embedded.weights import model_file

    log = folder / "server.log"
    # uvicorn cannot report a port it picked itself, so a free port is chosen here; another
    # process may take it before the server binds it: then the server is started again
    for _ in range(BIND_ATTEMPTS):
        port = _free_port()
        cmd = [
            sys.executable, "-m", "llama_cpp.server", "--model", str(model_file(model)),
            "--model_alias", SERVED, "--host", "127.0.0.1", "--port", str(port),
            "--n_ctx", str(n_ctx), "--n_threads", "1", "--n_threads_batch", "2",
            # evaluated in the embedded provider's chunks, or its floats differ (docs/serving)
            "--n_batch", str(CHUNK), "--n_ubatch", str(CHUNK), "--verbose", "False",
        ]  # fmt: skip
        if api_key:
            cmd += ["--api_key", api_key]
        with open(log, "w") as out:
            proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        if _wait_until_up(proc, port, log):
            break
    else:
        pytest.fail(f"llama_cpp.server found no free port in {BIND_ATTEMPTS} tries")
    try:
        yield Server(f"http://127.0.0.1:{port}/v1", log)
    finally:
        stop_process(proc)


def _wait_until_up(proc: subprocess.Popen, port: int, log: Path) -> bool:
    """True once the server answers; False when its port was taken (start it again)."""
    deadline = time.monotonic() + STARTUP_S
    while not _answers(f"http://127.0.0.1:{port}/v1/models"):
        if proc.poll() is not None:
            text = log.read_text()
            if "address already in use" in text.lower():
                return False
            pytest.fail(f"llama_cpp.server exited {proc.returncode}:\n{text[-2000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"llama_cpp.server not up after {STARTUP_S:.0f} s:\n{log.read_text()}")
        time.sleep(0.2)
    return True


@pytest.fixture(scope="module")
def open_server(tmp_path_factory):
    yield from _serve(tmp_path_factory.mktemp("open-server"), api_key=None)


@pytest.fixture(scope="module")
def keyed_server(tmp_path_factory):
    yield from _serve(tmp_path_factory.mktemp("keyed-server"), api_key=SERVER_KEY)


def run_cli(server: Server, tmp_path: Path, *extra: str, key: str | None = None):
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    if key is not None:
        env["OPENAI_API_KEY"] = key
    cmd = [
        sys.executable, "-m", "agents.run", "--agent", "hyde", "--dataset", "demo",
        "--model", f"openai/{SERVED}", "--api-base", server.url, "--max-tokens", "48",
        "--runs-dir", str(tmp_path / "runs"), "--cache-dir", str(tmp_path / "cache"),
        "--run-name", "r", "--quiet", *extra,
    ]  # fmt: skip
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)


def written(tmp_path: Path) -> list[Path]:
    return [p for d in ("runs", "cache") for p in (tmp_path / d).rglob("*") if p.is_file()]


def test_a_server_that_needs_no_key_needs_none_from_the_user(open_server, tmp_path):
    before = len(open_server.completions())
    done = run_cli(open_server, tmp_path, "--limit", "2")
    assert done.returncode == 0, done.stderr
    records = read_records(tmp_path / "runs" / "r" / "demo" / "queries.jsonl")
    assert len(records) == 2
    assert all(r["error"] is None and r["ranking"] and r["generated"] for r in records.values())
    calls = open_server.completions()[before:]
    assert len(calls) == 2 and all('" 200' in line for line in calls)
    files = written(tmp_path)
    assert any(p.suffix == ".db" for p in files)  # the LLM cache was written
    leaks = [p for p in files if NO_KEY_PLACEHOLDER.encode() in p.read_bytes()]
    assert leaks == []
    assert NO_KEY_PLACEHOLDER not in done.stdout + done.stderr
    assert "Unclosed" not in done.stderr  # every HTTP session the run opened is closed


def test_a_llamacpp_server_that_reports_no_template_is_refused_up_front(open_server, tmp_path):
    """llama-cpp-python's server has no /props: without --chat-template the run would render
    plain ChatML, not the model's own template, so it is refused before any call."""
    before = len(open_server.completions_endpoint())
    done = run_cli(open_server, tmp_path, "--server", "llamacpp")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"error: --server llamacpp: the server at {open_server.url} reports no chat template "
        "(GET /props); give --chat-template: chatml, a Jinja file, or the model's tokenizer "
        "folder"
    )
    assert len(open_server.completions_endpoint()) == before


@pytest.mark.parametrize("key", [None, "sk-wrong-key-0123456789"], ids=["no-key", "wrong-key"])
def test_a_refused_key_stops_the_run_after_one_request(keyed_server, tmp_path, key):
    before = len(keyed_server.completions())
    done = run_cli(keyed_server, tmp_path, "--limit", "3", "--concurrency", "1", key=key)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if "OPENAI_API_KEY" in line]
    why = "the API key was rejected" if key else "the server wants an API key"
    assert lines == [
        f"error: openai/{SERVED}: authentication failed (401: {why}); set OPENAI_API_KEY"
    ]
    calls = keyed_server.completions()[before:]
    assert len(calls) == 1 and '" 401' in calls[0]  # one request: no retry, no other query
    assert read_records(tmp_path / "runs" / "r" / "demo" / "queries.jsonl") == {}
    secrets = [NO_KEY_PLACEHOLDER.encode()] + ([key.encode()] if key else [])
    assert [p for p in written(tmp_path) for s in secrets if s in p.read_bytes()] == []


def test_llm_pointwise_scores_with_the_servers_logprobs(open_server, tmp_path):
    """A served model's logprobs reach the stage: every judgement is read from them."""
    before = len(open_server.completions())
    done = run_cli(
        open_server, tmp_path, "--limit", "2", "--rerank", "llm-pointwise,depth=3,doc_words=40",
        "--max-tokens", "8",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    stage = tmp_path / "runs" / "r" / "demo" / "rerank-1-llm-pointwise" / "queries.jsonl"
    records = read_records(stage)
    steps = [s for r in records.values() for s in r["steps"]]
    assert len(steps) == 6 and all(r["error"] is None for r in records.values())
    assert {s["judged_by"] for s in steps} == {"logprobs"}
    assert all(0.0 <= s["score"] <= 1.0 for s in steps if s["score"] is not None)
    assert sum(s["score"] is not None for s in steps) >= 4  # SmolLM2 mostly offers yes/no
    # hyde's 2 calls, then one per judged passage; a rerun asks the server nothing
    assert len(open_server.completions()) - before == 2 + 6
    assert (
        run_cli(
            open_server,
            tmp_path,
            "--limit",
            "2",
            "--rerank",
            "llm-pointwise,depth=3,doc_words=40",
            "--max-tokens",
            "8",
        ).returncode
        == 0
    )
    assert len(open_server.completions()) - before == 2 + 6


# --- continue mode through the server -------------------------------------------------------


@pytest.fixture(scope="module")
def roomy_server(tmp_path_factory):
    yield from _serve(tmp_path_factory.mktemp("roomy-server"), api_key=None, n_ctx=8192)


@pytest.fixture(scope="module")
def qwen_server(tmp_path_factory):
    yield from _serve(
        tmp_path_factory.mktemp("qwen-server"), api_key=None, n_ctx=8192,
        model="qwen2.5-coder-0.5b",
    )  # fmt: skip


def gguf_template(model: str, folder: Path) -> Path:
    """The chat template the model's GGUF carries, in a file."""
    from llama_cpp import Llama

    from agents.llm.embedded.weights import model_file

    llm = Llama(model_path=str(model_file(model)), vocab_only=True, verbose=False)
    path = folder / f"{model}.jinja"
    path.write_text(llm.metadata["tokenizer.chat_template"])
    llm.close()
    return path


def agent_run(tmp_path: Path, name: str, agent: str, *flags: str) -> dict:
    """A run in a process of its own, as a user starts it; an embedded model's reference run
    (no server) is made in this process instead, where the model stays loaded across tests."""
    args = [
        "--agent", agent, "--dataset", "demo", "--max-tokens", "48", "--max-turns", "2", *flags,
        "--runs-dir", str(tmp_path / "runs"), "--cache-dir", str(tmp_path / "cache"),
        "--run-name", name, "--quiet",
    ]  # fmt: skip
    if "--api-base" not in flags:
        from agents.commands.run import main

        # one instance, as the server has: its prompts evaluated on both cores
        assert main([*args, "--local-instances", "1"]) == 0
    else:
        cmd = [sys.executable, "-m", "agents.run", *args]
        done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        assert "Unclosed" not in done.stderr
    return read_records(tmp_path / "runs" / name / "demo" / "queries.jsonl")


def llm_steps(records: dict) -> list[tuple]:
    return [
        (q, s["node"], s.get("llm_mode"), json.dumps(s["messages"]), s["output"])
        for q, r in sorted(records.items())
        for s in r["steps"]
        if "messages" in s
    ]


# search-o1 with Qwen2.5 0.5B, which searches on the first demo query; SmolLM2 never searches
# there, but Search-R1's invalid-action retries continue its turn on both of two queries
CONTINUE_CASES = [("search-o1", "qwen2.5-coder-0.5b", "1"), ("search-r1", "smollm2-135m", "2")]


@pytest.mark.parametrize(
    ("agent", "model", "limit"), CONTINUE_CASES, ids=["search-o1", "search-r1"]
)
def test_continue_mode_through_the_server_equals_the_in_process_run(
    request, tmp_path, agent, model, limit
):
    server = request.getfixturevalue("qwen_server" if model.startswith("qwen") else "roomy_server")
    template = gguf_template(model, tmp_path)
    local = agent_run(tmp_path, "local", agent, "--limit", limit, "--model", f"local/{model}")
    before = len(server.completions_endpoint())
    served = agent_run(
        tmp_path, "served", agent, "--limit", limit, "--model", f"openai/{SERVED}",
        "--api-base", server.url, "--server", "llamacpp", "--chat-template", str(template),
    )  # fmt: skip
    assert llm_steps(served) == llm_steps(local)  # every call: same messages, same output
    assert {mode for _, _, mode, _, _ in llm_steps(served) if mode} == {"continue"}
    continued = [m for *_, m, _ in llm_steps(served) if json.loads(m)[-1]["role"] == "assistant"]
    assert continued, "no call continued a partial turn"
    for q in local:
        assert served[q]["ranking"] == local[q]["ranking"]
    # each call and, before it, the one-token request that leaves it nothing to reuse
    assert len(server.completions_endpoint()) - before == 2 * len(llm_steps(served))


def test_rank1_forces_through_the_server_with_its_token_ids_as_in_process(qwen_server, tmp_path):
    """Rank1's forced completion (rank1.py L94-162) on a real llama.cpp server: the ids of
    " true" and " false" come from the server's tokenizer, the forced token is restricted by a
    logit bias, and every score equals the embedded model's, restricted by allowed_token_ids
    (the server reports pre-bias logprobs: the same ratio)."""
    import asyncio

    from agents.llm import LLM
    from agents.llm.embedded.pool import tokenizer
    from agents.rerank import StageContext
    from agents.rerank.rank1 import DEFAULTS, build_rank1
    from prompts import PromptBook

    corpus = {"d1": "Aspirin reduces fever.", "d2": "Paris is in France.", "d3": "Rust is fast."}
    ranking = {"d1": 3.0, "d2": 2.0, "d3": 1.0}

    def rerank(llm):
        ctx = StageContext(
            corpus=corpus, task="toy", options={**DEFAULTS, "depth": 3}, llm=llm,
            prompts=PromptBook(task="toy"),
            sampling={"judge": {"temperature": 0.0, "max_tokens": 16}},
        )  # fmt: skip
        return asyncio.run(build_rank1(ctx).rerank("q1", "what reduces fever?", ranking))

    before = len(qwen_server.completions_endpoint())
    served = rerank(LLM(f"openai/{SERVED}", api_base=qwen_server.url, server="llamacpp",
                        cache_dir=tmp_path / "served"))  # fmt: skip
    local = rerank(LLM("local/qwen2.5-coder-0.5b", cache_dir=tmp_path / "local"))
    tok = tokenizer("qwen2.5-coder-0.5b")
    ids = [tok.tokenize(" true")[0], tok.tokenize(" false")[0]]
    forced = [s for s in served["steps"] if "forced" in s]
    assert [s["outcome"] for s in served["steps"]] == [s["outcome"] for s in local["steps"]]
    assert forced and {s["outcome"] for s in forced} == {"forced"}
    assert {s["forced_by"] for s in forced} == {f"logit_bias +100 on {ids}"}
    assert {s.get("forced_by") for s in local["steps"] if "forced" in s} == {
        f"allowed_token_ids {ids}"
    }
    for mine, theirs in zip(served["steps"], local["steps"], strict=True):
        assert mine["output"] == theirs["output"] and mine["score"] == theirs["score"]
        if "forced" in mine:
            assert mine["forced"]["prompt"] == theirs["forced"]["prompt"]
            assert mine["forced"]["output"] == theirs["forced"]["output"]
    assert served["ranking"] == local["ranking"]
    # each call after a reset request (serving.FreshPrompts): its reply, and any forced token
    calls = len(served["steps"]) + len(forced)
    assert len(qwen_server.completions_endpoint()) - before == 2 * calls


def test_served_runs_equal_the_in_process_run_whatever_the_server_ran_before(qwen_server, tmp_path):
    """Search-R1 with several queries in flight, twice, in different orders (2 then 4 in
    flight, the second run after the first's last request): every call's output is the
    in-process run's. llama-cpp-python's server reuses the prefix a prompt shares with the
    previous request and evaluates only the rest; without the reset request before each call
    (serving.FreshPrompts) the same run differed on 1 of 2 queries."""
    model = "qwen2.5-coder-0.5b"
    template = gguf_template(model, tmp_path)
    flags = ["--limit", "4"]
    local = agent_run(tmp_path, "local", "search-r1", *flags, "--model", f"local/{model}")
    continued = [m for *_, m, _ in llm_steps(local) if json.loads(m)[-1]["role"] == "assistant"]
    assert continued, "no call continued a partial turn"
    for concurrency in ("2", "4"):
        served = agent_run(
            tmp_path, f"served-{concurrency}", "search-r1", *flags, "--concurrency", concurrency,
            "--model", f"openai/{SERVED}", "--api-base", qwen_server.url, "--server", "llamacpp",
            "--chat-template", str(template),
        )  # fmt: skip
        assert llm_steps(served) == llm_steps(local), f"--concurrency {concurrency}"
        for q in local:
            assert served[q]["ranking"] == local[q]["ranking"]


def test_tool_search_through_the_server_equals_the_in_process_run(qwen_server, tmp_path):
    """The same tool-calling trajectory in-process (tools written in as text, calls parsed by
    the embedded provider) and through llama.cpp's completions endpoint rendered by the GGUF's
    own template, which writes the tools itself."""
    template = gguf_template("qwen2.5-coder-0.5b", tmp_path)
    flags = ["--limit", "1", "--max-tokens", "96", "--max-turns", "2"]
    local = agent_run(tmp_path, "local", "tool-search", *flags, "--model",
                      "local/qwen2.5-coder-0.5b")  # fmt: skip
    served = agent_run(
        tmp_path, "served", "tool-search", *flags, "--model", f"openai/{SERVED}",
        "--api-base", qwen_server.url, "--server", "llamacpp", "--chat-template", str(template),
    )  # fmt: skip

    def calls(records: dict) -> list:
        return [
            (json.dumps(s["messages"]), s["output"], s.get("tool_calls"))
            for r in records.values() for s in r["steps"] if s["node"] == "reason"
        ]  # fmt: skip

    assert calls(served) == calls(local)
    assert any(tool_calls for *_, tool_calls in calls(local)), "the model called no tool"
    tools = [s for r in local.values() for s in r["steps"] if s["node"] == "tool"]
    assert any(s["tool"] == "search" and not s["error"] for s in tools)
    for q in local:
        assert served[q]["ranking"] == local[q]["ranking"]


def test_chat_mode_through_the_server_hands_results_back_as_user_turns(roomy_server, tmp_path):
    served = agent_run(
        tmp_path, "chat", "search-r1", "--limit", "2", "--model", f"openai/{SERVED}",
        "--api-base", roomy_server.url, "--server", "openai",
    )  # fmt: skip
    steps = llm_steps(served)
    assert len(steps) > 2 and {mode for _, _, mode, _, _ in steps} == {"chat"}
    assert all(json.loads(m)[-1]["role"] == "user" for _, _, _, m, _ in steps)


# --- replicas behind litellm's Router -----------------------------------------------------------


@pytest.fixture
def dead_replica():
    """A port that accepts connections and closes them unanswered: a replica that is down.
    Yields its URL and the list of connections it got."""
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.settimeout(0.2)
    accepted: list[float] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            accepted.append(time.monotonic())
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1", accepted
    stop.set()
    thread.join(2)
    listener.close()


def test_the_router_fails_over_from_a_dead_replica_to_a_live_one(
    roomy_server, dead_replica, tmp_path
):
    dead_url, accepted = dead_replica
    before = len(roomy_server.completions())
    # simple-shuffle picks a replica at random: over 15 queries the dead one is picked at
    # least once but with probability 2^-15; each pick fails over to the live one
    done = run_cli(
        roomy_server, tmp_path, "--limit", "15", "--concurrency", "1",
        "--api-base", f"{dead_url},{roomy_server.url}",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    records = read_records(tmp_path / "runs" / "r" / "demo" / "queries.jsonl")
    assert len(records) == 15
    assert all(r["error"] is None and r["generated"] for r in records.values())
    assert accepted, "the dead replica was never tried"
    served = roomy_server.completions()[before:]
    assert len(served) == 15 and all('" 200' in line for line in served)
    config = json.loads((tmp_path / "runs" / "r" / "config.json").read_text())
    assert config["llm"]["api_base"] == f"{dead_url},{roomy_server.url}"
