"""The CLI against a real OpenAI-compatible server: llama-cpp-python's, on 127.0.0.1.

The server (`python -m llama_cpp.server`, its extras are in the test dependencies) serves the
embedded SmolLM2-135M GGUF, once without and once with an API key. Requests are counted from
uvicorn's access log, one line per HTTP request, so "no retry" is checked where it matters: at
the server.
"""

from __future__ import annotations

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
from eval.runs import read_records

REPO = Path(__file__).resolve().parents[1]
SERVED = "smollm2"  # the server's model alias: the client asks for openai/smollm2
SERVER_KEY = "srv-key-0123456789"
STARTUP_S = 60.0  # loading a 98 MB model takes ~2 s here; a busy machine gets room
COMPLETIONS = '"POST /v1/chat/completions '


@dataclass
class Server:
    url: str
    log: Path

    def completions(self) -> list[str]:
        """The access-log lines of chat completion requests so far."""
        return [line for line in self.log.read_text().splitlines() if COMPLETIONS in line]


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


def _serve(folder: Path, api_key: str | None):
    pytest.importorskip("llama_cpp.server.app", reason="llama_cpp.server needs its extras")
    from agents.llm.local import model_file

    port = _free_port()
    log = folder / "server.log"
    cmd = [
        sys.executable, "-m", "llama_cpp.server", "--model", str(model_file("smollm2-135m")),
        "--model_alias", SERVED, "--host", "127.0.0.1", "--port", str(port),
        "--n_ctx", "1024", "--n_threads", "1", "--n_threads_batch", "2", "--verbose", "False",
    ]  # fmt: skip
    if api_key:
        cmd += ["--api_key", api_key]
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + STARTUP_S
        while not _answers(f"http://127.0.0.1:{port}/v1/models"):
            if proc.poll() is not None:
                pytest.fail(
                    f"llama_cpp.server exited {proc.returncode}:\n{log.read_text()[-2000:]}"
                )
            if time.monotonic() > deadline:
                pytest.fail(f"llama_cpp.server not up after {STARTUP_S:.0f} s:\n{log.read_text()}")
            time.sleep(0.2)
        yield Server(f"http://127.0.0.1:{port}/v1", log)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


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
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


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


@pytest.mark.parametrize("key", [None, "sk-wrong-key-0123456789"], ids=["no-key", "wrong-key"])
def test_a_refused_key_stops_the_run_after_one_request(keyed_server, tmp_path, key):
    before = len(keyed_server.completions())
    started = time.monotonic()
    done = run_cli(keyed_server, tmp_path, "--limit", "3", "--concurrency", "1", key=key)
    seconds = time.monotonic() - started
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
    assert seconds < 60
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
    assert run_cli(open_server, tmp_path, "--limit", "2", "--rerank",
                   "llm-pointwise,depth=3,doc_words=40", "--max-tokens", "8").returncode == 0
    assert len(open_server.completions()) - before == 2 + 6
