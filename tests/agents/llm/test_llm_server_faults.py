"""Servers that misbehave, and Ctrl-C: no hang, no traceback, one line, nothing lost.

Every server here is a real HTTP server on 127.0.0.1 that binds its own port (port 0) before
anything calls it: one that accepts requests and never answers, one that answers with replies
the client must not take as answers, one that rate-limits with Retry-After, and a llama.cpp-like
server that reports its chat template at /props.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import agents.llm.client
from agents.commands.run import main
from agents.shared.interrupt import MESSAGE
from eval.records import unpack_record
from tests.helpers import REPO, send_body


def run(toy_dir: Path, tmp_path: Path, *extra: str, agent: str = "hyde") -> int:
    return main([
        "--agent", agent, "--dataset", str(toy_dir), "--runs-dir", str(tmp_path / "runs"),
        "--cache-dir", str(tmp_path / "cache"), "--run-name", "r", "--quiet", *extra,
    ])  # fmt: skip


def records(tmp_path: Path) -> dict[str, dict]:
    path = tmp_path / "runs" / "r" / "toy" / "queries.jsonl"
    if not path.exists():
        return {}
    return {
        r["query_id"]: r for r in map(unpack_record, map(json.loads, path.read_text().splitlines()))
    }


# --- a server that accepts a request and never answers --------------------------------------


@pytest.fixture
def silent_server():
    """Accepts every connection and reads the request, never writes a byte."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    connections: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            connections.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1", connections
    stop.set()
    thread.join()
    for conn in connections:
        conn.close()
    listener.close()


@pytest.mark.slow
def test_a_server_that_never_answers_ends_the_run_in_one_line(toy_dir, tmp_path, silent_server,
                                                               capsys):  # fmt: skip
    url, connections = silent_server
    code = run(toy_dir, tmp_path, "--model", "openai/m", "--api-base", url, "--timeout", "0.5",
               "--concurrency", "1")  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        f"error: openai/m at {url}: no answer within 0.5 s in 6 attempts; is the server up and "
        "not overloaded? --timeout sets the wait"
    )
    # the up-front probe's connection (no request), then one call, every attempt, and stop
    assert len(connections) == 1 + 6
    assert records(tmp_path) == {}  # the query it stopped has no record: a re-run answers it
    config = json.loads((tmp_path / "runs" / "r" / "config.json").read_text())
    assert config["timeout"] == 0.5


@pytest.mark.slow
def test_an_embedding_server_that_never_answers_is_one_line(toy_dir, tmp_path, silent_server,
                                                             capsys):  # fmt: skip
    url, _ = silent_server
    code = run(toy_dir, tmp_path, "--retriever", "api:openai/e", "--embed-api-base", url,
               "--timeout", "0.5", agent="none")  # fmt: skip
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"error: api:openai/e at {url}: no answer within 0.5 s in 6 attempts")


# --- replies the client must not take as answers ---------------------------------------------


class Replies(BaseHTTPRequestHandler):
    script: list[tuple[int, dict, dict]] = []  # (status, headers, body) per request, in turn
    seen: list[dict] = []

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append(body)
        if type(self).script:
            status, headers, reply = type(self).script.pop(0)
        elif self.path.endswith("/chat/completions"):
            status, headers, reply = OK
        else:
            status, headers, reply = 200, {}, completion("Statins.")
        send_body(self, json.dumps(reply).encode(), status, headers)

    def do_GET(self):  # noqa: N802
        # /props as llama.cpp's server gives it, when the test set a template
        template = getattr(type(self), "template", None)
        if self.path == "/props" and template is not None:
            send_body(self, json.dumps({"chat_template": template}).encode(), content_type=None)
        else:
            send_body(self, b"{}", 404, content_type=None)

    def log_message(self, *args):
        pass


def chat(content, finish="stop") -> dict:
    return {
        "id": "c", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "finish_reason": finish,
                     "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7},
    }  # fmt: skip


OK = (200, {}, chat("Statins inhibit HMG-CoA reductase."))


@pytest.fixture
def replies():
    Replies.script, Replies.seen, Replies.template = [], [], None
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Replies)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()


def test_an_empty_choices_list_is_a_clear_failure(toy_dir, tmp_path, replies, capsys):
    Replies.script = [(200, {}, {**chat("x"), "choices": []})]
    assert run(toy_dir, tmp_path, "--model", "openai/m", "--api-base", replies,
               "--concurrency", "1") == 1  # fmt: skip
    failed = [r for r in records(tmp_path).values() if r["error"]]
    assert len(failed) == 1
    assert failed[0]["error"] == (
        "LLMReplyError: openai/m: the server's reply holds no choices (an empty 'choices' list)"
    )
    assert "holds no choices" in capsys.readouterr().err  # said on the console as it happens


def test_an_answer_emptied_by_the_length_limit_fails_and_is_not_cached(toy_dir, tmp_path, replies,
                                                                       capsys):  # fmt: skip
    # vLLM's reasoning parser: the thinking filled the budget, content is null
    Replies.script = [(200, {}, chat(None, finish="length"))] * 3
    assert run(toy_dir, tmp_path, "--model", "openai/m", "--api-base", replies) == 1
    reason = (
        "LLMReplyError: openai/m: the reply was cut at its 512-token budget before any answer "
        "(a reasoning model's thinking can fill it); raise --max-tokens"
    )
    assert {r["error"] for r in records(tmp_path).values()} == {reason}
    summary = json.loads((tmp_path / "runs" / "r" / "toy" / "metrics.json").read_text())
    assert set(summary["failures"].values()) == {reason} and summary["failed"] == 3
    err = capsys.readouterr().err
    assert err.count("raise --max-tokens") == 1  # one console line for the reason, not three
    # not cached as an answer: the re-run asks again, and this time gets one
    assert run(toy_dir, tmp_path, "--model", "openai/m", "--api-base", replies) == 0
    assert len(Replies.seen) == 6
    assert all(r["error"] is None for r in records(tmp_path).values())


def test_retry_after_is_honoured(toy_dir, tmp_path, replies, monkeypatch):
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    monkeypatch.setattr(agents.llm.client, "_sleep", sleep)
    limited = {"error": {"message": "slow down", "type": "rate_limit"}}
    Replies.script = [(429, {"Retry-After": "7"}, limited), OK, OK, OK]
    assert run(toy_dir, tmp_path, "--model", "openai/m", "--api-base", replies,
               "--concurrency", "1") == 0  # fmt: skip
    assert slept == [7.0]  # the backoff alone is 0 in the tests: the wait is the server's


def test_retry_after_as_an_http_date():
    import email.utils

    class Limited(Exception):
        litellm_response_headers = {
            "retry-after": email.utils.formatdate(time.time() + 30, usegmt=True)
        }

    assert 25 <= agents.llm.client.retry_after_seconds(Limited()) <= 30
    assert agents.llm.client.retry_after_seconds(ValueError()) is None


# --- a served model renders the model's own template ----------------------------------------

QWEN_LIKE = (
    "{%- for m in messages %}{% if loop.first and m.role != 'system' %}<|im_start|>system\n"
    "You are the served model's own default.<|im_end|>\n{% endif %}<|im_start|>{{ m.role }}\n"
    "{{ m.content }}<|im_end|>\n{%- endfor %}{% if add_generation_prompt %}<|im_start|>assistant"
    "\n{% endif %}"
)


def completion(text: str) -> dict:
    return {
        "id": "c", "object": "text_completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop", "text": text, "logprobs": None}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7},
    }  # fmt: skip


def test_llamacpp_without_a_template_uses_the_one_the_server_reports(toy_dir, tmp_path, replies):
    Replies.template = QWEN_LIKE
    assert run(toy_dir, tmp_path, "--model", "openai/m", "--api-base", replies,
               "--server", "llamacpp", agent="search-r1") == 0  # fmt: skip
    prompt = Replies.seen[0]["prompt"]
    assert prompt.startswith("<|im_start|>system\nYou are the served model's own default.")


@pytest.mark.parametrize("server", ["llamacpp", "openai", "vllm"])
@pytest.mark.slow
def test_a_served_run_closes_what_it_opened(toy_dir, tmp_path, replies, server):
    Replies.template = QWEN_LIKE
    cmd = [
        sys.executable, "-m", "agents.run", "--agent", "hyde", "--dataset", str(toy_dir),
        "--model", "openai/m", "--api-base", replies, "--server", server, "--quiet",
        "--runs-dir", str(tmp_path / "runs"), "--cache-dir", str(tmp_path / "cache"),
    ]  # fmt: skip
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Unclosed" not in done.stderr and done.stderr.strip() == ""


def test_llamacpp_reporting_no_template_is_refused_up_front(toy_dir, tmp_path, replies, capsys):
    assert run(toy_dir, tmp_path, "--model", "openai/m", "--api-base", replies,
               "--server", "llamacpp") == 2  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert err == (
        f"error: --server llamacpp: the server at {replies} reports no chat template (GET "
        "/props); give --chat-template: chatml, a Jinja file, or the model's tokenizer folder"
    )
    assert Replies.seen == [] and not (tmp_path / "runs").exists()


# --- what decides a fresh run's outputs is recorded --------------------------------------------


def test_the_machine_is_recorded_but_binds_nothing(toy_dir, tmp_path):
    from agents.llm import scripted

    scripted.install(lambda messages, params: "Statins lower cholesterol.")
    assert run(toy_dir, tmp_path, "--model", "scripted/test") == 0
    path = tmp_path / "runs" / "r" / "config.json"
    config = json.loads(path.read_text())
    assert config["machine"]["cpu"]["arch"] and "llama_cpp" not in config["machine"]
    # another machine may resume the run (a cached rerun is the same anywhere)
    config["machine"] = {"cpu": {"model": "elsewhere", "arch": "aarch64", "features": []}}
    path.write_text(json.dumps(config))
    assert run(toy_dir, tmp_path, "--model", "scripted/test") == 0


# --- Ctrl-C ----------------------------------------------------------------------------------


@pytest.mark.parametrize("when", ["mid-run", "at start-up"])
@pytest.mark.slow
def test_ctrl_c_ends_with_one_line_exit_130_and_loses_nothing(tmp_path, when):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "R2MED_AGENTS_CACHE": str(tmp_path / "cache")}
    cmd = [
        sys.executable, "-m", "agents.run", "--agent", "hyde", "--model", "local/smollm2-135m",
        "--runs-dir", str(tmp_path / "runs"), "--run-name", "r", "--concurrency", "1",
        "--max-tokens", "64",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    recs = tmp_path / "runs" / "r" / "demo" / "queries.jsonl"
    deadline = time.monotonic() + 300
    if when == "mid-run":
        while not (recs.exists() and recs.read_text().count("\n") >= 2):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
    else:
        time.sleep(1.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-2000:]
    assert err.rstrip().splitlines()[-1] == MESSAGE
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    done = recs.read_text().splitlines() if recs.exists() else []
    finished = {json.loads(line)["query_id"]: line for line in done}
    assert all(json.loads(line)["error"] is None for line in done)  # no half-answered record
    # the same command resumes: the finished queries are kept as they were, not answered again
    resumed = subprocess.run(cmd + ["--quiet"], cwd=REPO, env=env, capture_output=True,
                             text=True, timeout=900)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    after = recs.read_text().splitlines()
    assert after[: len(done)] == done and len(after) == 15
    assert {json.loads(line)["query_id"] for line in after[len(done) :]}.isdisjoint(finished)
