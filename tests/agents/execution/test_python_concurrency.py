"""The library's calls wherever a researcher makes them: in a script, from threads at once,
and where an event loop already runs (a notebook cell), with the same results everywhere.

The model is a real OpenAI-compatible HTTP server on 127.0.0.1 whose reply depends only on the
prompt, so litellm's real HTTP clients are opened, shared and closed as in a served run.
"""

from __future__ import annotations

import _thread
import asyncio
import dataclasses
import hashlib
import json
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from agents import RunConfig, from_settings, run_dataset, run_query
from agents.execution.loop import run_sync
from tests.helpers import send_body

REPO = Path(__file__).resolve().parents[3]


class Passages(BaseHTTPRequestHandler):
    """A chat completion whose passage is a function of the prompt."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        prompt = body["messages"][-1]["content"]
        words = ["nerve", "skin", "water", "vessel", "finger", "sweat", "smell", "sugar"]
        digest = hashlib.sha256(prompt.encode()).digest()
        text = " ".join(words[b % len(words)] for b in digest[:12])
        send_body(self, json.dumps({
            "id": "c", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 12, "total_tokens": 22},
        }).encode())  # fmt: skip


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Passages)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


def config(tmp_path: Path, api_base: str, cache: str = "cache") -> RunConfig:
    return from_settings({
        "agent": "hyde", "dataset": "demo", "model": "openai/m", "api_base": api_base,
        "runs_dir": str(tmp_path / "runs"), "cache_dir": str(tmp_path / cache),
    })  # fmt: skip


QUERIES = [f"q{i:02d}" for i in range(1, 13)]


def test_queries_from_four_threads_get_what_one_at_a_time_gets(server, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    alone = config(tmp_path, server, "alone")
    sequential = {q: run_query(alone, q) for q in QUERIES[:2]}  # earlier calls in the process
    sequential |= {q: run_query(alone, q) for q in QUERIES[2:]}
    together = config(tmp_path, server, "together")  # its own cache: every call is sent
    with ThreadPoolExecutor(4) as pool:
        answers = pool.map(lambda q: run_query(together, q), QUERIES)
        threaded = dict(zip(QUERIES, answers, strict=True))
    for q in QUERIES:
        assert threaded[q].error is None, (q, threaded[q].error)
        assert threaded[q].ranking == sequential[q].ranking, q
        assert threaded[q].usage.calls == 1 and threaded[q].usage.cached_calls == 0
    # and again, on the clients the first threaded round left open: from the cache now
    with ThreadPoolExecutor(4) as pool:
        again = list(pool.map(lambda q: run_query(together, q), QUERIES))
    assert [r.usage.cached_calls for r in again] == [1] * len(QUERIES)


def test_a_whole_run_inside_a_running_loop_is_the_run_outside_it(server, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    plain = dataclasses.replace(config(tmp_path, server, "a"), limit=3, run_name="plain")
    in_loop = dataclasses.replace(plain, cache_dir=str(tmp_path / "b"), run_name="in-loop")

    async def notebook_cell():  # a kernel's cell: a loop runs in this thread
        return run_dataset(in_loop, progress=False)

    outside = run_dataset(plain, progress=False)
    inside = asyncio.run(notebook_cell())
    for name in ("run.trec", "per_query.jsonl"):
        assert (inside.run_dir / "demo" / name).read_bytes() == (
            outside.run_dir / "demo" / name
        ).read_bytes()
    assert inside.tasks["demo"].metrics == outside.tasks["demo"].metrics


def test_a_dry_run_inside_a_running_loop(tmp_path, monkeypatch):
    from agents.execution.dry_run import estimate

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")  # a dry run sends nothing, but checks it

    cfg = from_settings({"agent": "hyde", "dataset": "demo", "model": "openai/gpt-4o-mini",
                         "runs_dir": str(tmp_path / "runs"),
                         "cache_dir": str(tmp_path / "c")})  # fmt: skip

    async def notebook_cell():
        return estimate(cfg)

    assert asyncio.run(notebook_cell()) == estimate(cfg)


def test_an_interrupt_while_waiting_cancels_the_coroutine_and_is_raised():
    unwound = threading.Event()

    async def forever() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            unwound.set()
            raise

    async def notebook_cell() -> None:
        # a kernel's interrupt: KeyboardInterrupt in its main thread, whatever the cell runs
        # (asyncio.run's own handler, which cancels its task instead, is put aside)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        threading.Timer(0.5, _thread.interrupt_main).start()
        run_sync(forever())

    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        asyncio.run(notebook_cell())
    assert unwound.is_set() and time.monotonic() - started < 10


def test_a_script_s_threads_end_without_unclosed_client_warnings(server, tmp_path):
    code = (
        "import os, sys; from concurrent.futures import ThreadPoolExecutor\n"
        "from agents import from_settings, run_query\n"
        "os.environ['OPENAI_API_KEY'] = 'sk-test'\n"
        "cfg = from_settings({'agent': 'hyde', 'dataset': 'demo', 'model': 'openai/m',"
        " 'api_base': sys.argv[1], 'cache_dir': sys.argv[2]})\n"
        "print(run_query(cfg, 'q01').error)\n"
        "with ThreadPoolExecutor(3) as pool:\n"
        "    print([r.error for r in pool.map(lambda q: run_query(cfg, q), ['q02', 'q03'])])\n"
    )
    done = subprocess.run([sys.executable, "-W", "always", "-c", code, server,
                           str(tmp_path / "cache")], cwd=REPO, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == ["None", "[None, None]"]
    assert "Unclosed" not in done.stderr and "Traceback" not in done.stderr


def test_a_keyboard_interrupt_raised_inside_a_call_leaves_the_loop_serving():
    async def interrupted() -> None:
        raise KeyboardInterrupt  # what an interrupt inside a run's own code looks like

    async def fine() -> str:
        return "served"

    with ThreadPoolExecutor(1) as pool:  # a worker thread: the background loop
        with pytest.raises(KeyboardInterrupt):
            pool.submit(run_sync, interrupted()).result()
        assert pool.submit(run_sync, fine()).result(timeout=10) == "served"


class Unreadable(BaseHTTPRequestHandler):
    """A ranking whose bytes are not UTF-8: a reply no stage can read."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers["Content-Length"]))
        body = json.dumps({
            "id": "c", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "[2] > [1] X"}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }).encode().replace(b" X", b" \xe9")  # fmt: skip
        send_body(self, body)


def test_an_unreadable_reply_is_the_same_named_outcome_in_a_script_a_thread_and_the_cli(
    tmp_path, monkeypatch
):
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Unreadable)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    flags = ["--agent", "none", "--dataset", "demo", "--limit", "1", "--quiet",
             "--rerank", "reasonrank,depth=5", "--rerank-model", "openai/m",
             "--rerank-api-base", url]  # fmt: skip

    def settings(name: str) -> dict:
        return {"agent": "none", "dataset": "demo", "limit": 1, "run_name": name,
                "rerank": ["reasonrank,depth=5"], "rerank_model": "openai/m",
                "rerank_api_base": url, "runs_dir": str(tmp_path / "runs"),
                "cache_dir": str(tmp_path / name)}  # fmt: skip

    def outcomes(result) -> dict:
        return result.tasks["demo"].summary.to_dict()["outcomes"]

    try:
        script = outcomes(run_dataset(from_settings(settings("script")), progress=False))
        with ThreadPoolExecutor(1) as pool:
            threaded = outcomes(pool.submit(run_dataset, from_settings(settings("thread")),
                                            progress=False).result())  # fmt: skip
        done = subprocess.run([sys.executable, "-m", "agents.run", *flags, "--run-name", "cli",
                               "--runs-dir", str(tmp_path / "runs"), "--cache-dir",
                               str(tmp_path / "cli")], cwd=REPO, capture_output=True,
                              text=True, timeout=120)  # fmt: skip
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert script == threaded == {"rerank-1-reasonrank": {"unusable-reply": 1}}
    assert done.returncode == 0, done.stderr
    cli = json.loads((tmp_path / "runs" / "cli" / "demo" / "metrics.json").read_text())
    assert cli["outcomes"] == script
