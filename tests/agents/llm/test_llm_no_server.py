"""No server at an LLM's address: refused up front in one line naming the flag, and a refused
connection during a run stops at once unless that server answered before (eval.plumbing.retry).

The closed port is real: a socket on 127.0.0.1 binds a free port and closes it, so nothing
listens there and a connection is refused."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import agents.llm.client
import eval.plumbing.retry
from agents.commands.run import main
from agents.llm import LLM
from agents.llm.errors import LLMUnavailable
from tests.helpers import one_line_error, send_body

USER = [{"role": "user", "content": "hi"}]


@pytest.fixture
def closed_url() -> str:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return f"http://127.0.0.1:{port}/v1"


def run(toy_dir, tmp_path, *extra: str) -> int:
    return main([
        "--dataset", str(toy_dir), "--runs-dir", str(tmp_path / "runs"),
        "--cache-dir", str(tmp_path / "cache"), "--run-name", "r", "--quiet", *extra,
    ])  # fmt: skip


@pytest.mark.parametrize("server", ["llamacpp", "vllm", "sglang", "openai"])
def test_no_server_at_api_base_is_one_line_before_any_work(toy_dir, tmp_path, closed_url,
                                                           server, capsys):  # fmt: skip
    started = time.perf_counter()
    code = run(toy_dir, tmp_path, "--agent", "hyde", "--model", "openai/m",
               "--api-base", closed_url, "--server", server)  # fmt: skip
    seconds = time.perf_counter() - started
    assert code == 2
    assert one_line_error(capsys) == (
        f"error: --api-base {closed_url}: no server answers there (connection refused)"
    )
    assert seconds < 3.0, seconds
    assert not (tmp_path / "runs").exists()  # before any work


def test_a_stages_own_server_is_probed_and_named_by_its_option(toy_dir, tmp_path, closed_url,
                                                               capsys):  # fmt: skip
    code = run(toy_dir, tmp_path, "--agent", "none",
               "--rerank", f"llm-pointwise:openai/m,api_base={closed_url}")  # fmt: skip
    assert code == 2
    assert one_line_error(capsys) == (
        f"error: --rerank llm-pointwise api_base={closed_url}: no server answers there "
        "(connection refused)"
    )
    assert not (tmp_path / "runs").exists()


def test_a_host_that_does_not_resolve_is_one_line(toy_dir, tmp_path, capsys):
    url = "http://no-such-host.invalid:8000/v1"  # .invalid never resolves (RFC 2606)
    code = run(toy_dir, tmp_path, "--agent", "hyde", "--model", "openai/m", "--api-base", url)
    assert code == 2
    assert one_line_error(capsys) == (
        f"error: --api-base {url}: no server answers there (cannot resolve no-such-host.invalid)"
    )


def test_a_llamacpp_client_without_a_server_says_so_not_no_template(closed_url):
    llm = LLM("openai/m", api_base=closed_url, server="llamacpp")
    with pytest.raises(ValueError) as refused:
        llm.prepare()
    assert str(refused.value) == (
        f"--api-base {closed_url}: no server answers there (connection refused)"
    )


@pytest.mark.parametrize("model", ["openai/m", "hosted_vllm/m"])
@pytest.mark.parametrize("raw", [False, True])
def test_a_refused_connection_in_a_run_is_not_retried_and_says_so(closed_url, model, raw,
                                                                  monkeypatch):  # fmt: skip
    monkeypatch.setattr(eval.plumbing.retry, "BACKOFF", True)  # the real waits: none are taken
    llm = LLM(model, api_base=closed_url, max_retries=6)
    started = time.perf_counter()
    with pytest.raises(LLMUnavailable) as stopped:
        asyncio.run(llm.complete("hi") if raw else llm.chat(USER))
    seconds = time.perf_counter() - started
    assert str(stopped.value) == (
        f"{model}: no server answers at {closed_url} (connection refused); start it or fix "
        "--api-base (or the stage's api_base=)"
    )
    assert seconds < 3.0, seconds


class Flaky:
    """An OpenAI-compatible server that answers chats until it is closed."""

    def __init__(self) -> None:
        self.requests = 0

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(handler):  # noqa: N805
                handler.rfile.read(int(handler.headers["Content-Length"]))
                self.requests += 1
                send_body(handler, json.dumps({
                    "id": "c", "object": "chat.completion", "created": 0, "model": "m",
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": "ok"}}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                }).encode())  # fmt: skip

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_a_server_that_answered_and_then_refuses_is_retried(monkeypatch):
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    monkeypatch.setattr(agents.llm.client, "_sleep", sleep)
    server = Flaky()
    llm = LLM("openai/m", api_base=server.url, max_retries=4)

    async def calls() -> str:
        first = await llm.chat(USER)
        server.close()  # the port now refuses: a server restarting or dropped
        await llm.chat(USER, sample=1)
        return first.text

    with pytest.raises(LLMUnavailable) as stopped:
        asyncio.run(calls())
    assert server.requests == 1
    assert len(waits) == 3  # four attempts, as for any transient failure
    assert "no server answered in 4 attempts" in str(stopped.value)
