"""Constants and helpers shared by the tests: a plain module, imported as ``tests.helpers``.

tests/conftest.py holds only fixtures and hooks (its fixtures use what is here); no test file
imports another test file or conftest. The other plain modules: tests/synthetic.py (the
synthetic task), tests/tiny_models.py (tiny model folders), tests/browser.py (chromium),
tests/printed_report.py (what a run prints, parsed and checked).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[1]
SCIFACT = REPO.parent / "shared" / "data" / "scifact"
# the start of a skip's reason when .ci/run said the shared data is absent (tests/conftest.py)
SHARED_ABSENT = "shared data absent, as .ci/run reported"

# --- the toy task (the ``toy_dir`` fixture) ----------------------------------------------------

DOCS = {
    "d1": "Insulin resistance drives type 2 diabetes mellitus.",
    "d2": "Metformin lowers hepatic glucose production in diabetes.",
    "d3": "Aspirin irreversibly inhibits platelet cyclooxygenase.",
    "d4": "Statins inhibit HMG-CoA reductase and lower cholesterol.",
    "d5": "Warfarin antagonises vitamin K dependent clotting factors.",
}
QUERIES = {
    "q1": "Which drug lowers glucose production by the liver in diabetes?",
    "q2": "How does aspirin act on platelets?",
    "q3": "What lowers cholesterol?",
}
QRELS = [("q1", "d2", 1), ("q2", "d3", 2), ("q3", "d4", 1)]


def write_toy(folder: Path) -> Path:
    """A five-document task in R2MED layout where each query has one clearly relevant doc."""
    folder.mkdir(parents=True)
    with open(folder / "corpus.jsonl", "w") as f:
        for i, t in DOCS.items():
            f.write(json.dumps({"id": i, "text": t}) + "\n")
    with open(folder / "query.jsonl", "w") as f:
        for i, t in QUERIES.items():
            f.write(json.dumps({"id": i, "text": t}) + "\n")
    with open(folder / "qrels.jsonl", "w") as f:
        for q, d, s in QRELS:
            f.write(json.dumps({"q_id": q, "p_id": d, "score": s}) + "\n")
    return folder


# --- runs of an agent on the toy task (``toy``: its data, runs and cache folders) ----------------


def run_agent(toy: dict, agent: str, *extra: str, name: str = "run") -> int:
    """``python -m agents.run`` in this process: ``agent`` on the toy task, scripted model."""
    from agents.commands.run import main

    return main([
        "--agent", agent, "--dataset", str(toy["data"]), "--model", "scripted/test",
        "--runs-dir", str(toy["runs"]), "--cache-dir", str(toy["cache"]),
        "--run-name", name, "--quiet", "--concurrency", "1", *extra,
    ])  # fmt: skip


def records(toy: dict, name: str = "run") -> dict[str, dict]:
    """The records of run ``name`` on the toy task, by query id."""
    from eval.records import read_records

    return read_records(toy["runs"] / name / "toy" / "queries.jsonl")


def nodes(record: dict) -> list[str]:
    """The graph nodes a record's steps went through, in order."""
    return [s["node"] for s in record["steps"]]


# --- the embedded models ----------------------------------------------------------------------


def share_models(cache_dir: Path, session_cache: Path) -> Path:
    """``cache_dir`` with the joined embedded models of ``session_cache`` hard-linked into its
    ``models/`` (the file and its stamp): a test that needs a cache of its own does not join them
    again (the ``models_cache`` fixture)."""
    from agents.llm.embedded.weights import LOCAL_MODELS, model_file, stamp_path

    models = Path(cache_dir) / "models"
    models.mkdir(parents=True, exist_ok=True)
    for name, model in LOCAL_MODELS.items():
        if len(model.parts) < 2:  # shipped whole: read where it is installed
            continue
        joined = model_file(name, session_cache)
        for path in (joined, stamp_path(joined)):
            if not (models / path.name).exists():
                os.link(path, models / path.name)
    return Path(cache_dir)


def one_line_error(capsys) -> str:
    """The one line a refused command wrote to stderr (never a traceback)."""
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


# --- test servers ------------------------------------------------------------------------------


def send_body(
    handler: Any,
    body: bytes,
    status: int = 200,
    headers: dict[str, str] | None = None,
    content_type: str | None = "application/json",
) -> None:
    """A test HTTP server's answer (``handler``: a BaseHTTPRequestHandler): the status, the
    content type (None: none sent) and ``headers``, the length, then ``body``."""
    handler.send_response(status)
    sent = {"Content-Type": content_type} if content_type is not None else {}
    for name, value in {**sent, **(headers or {})}.items():
        handler.send_header(name, value)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def stop_process(proc: subprocess.Popen) -> None:
    """Stop a server the test started: SIGTERM, then SIGKILL if it has not exited in 10 s."""
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


Answer = Callable[[str, dict], bytes]  # (path, request body) -> the raw reply body


class Server:
    """An OpenAI-compatible server on loopback whose every reply is ``answer(path, body)``'s
    bytes, as they are; it counts the requests by path and keeps their bodies."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.requests: Counter[str] = Counter()
        self.bodies: list[dict] = []  # every request's, in order
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.requests[self.path] += 1
                outer.bodies.append(body)
                send_body(self, outer.answer(self.path, body))

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def chat(
    content: str | None,
    logprobs: list | None = None,
    reasoning: str | None = None,
    stop_reason: str | None = None,
) -> bytes:
    """A chat completion's body; ``reasoning`` as a server's reasoning parser sends it
    (``reasoning_content``), ``stop_reason`` the stop string that ended it, as vLLM names it."""
    message = {"role": "assistant", "content": content}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    choice = {"index": 0, "finish_reason": "stop", "message": message}
    if logprobs is not None:
        choice["logprobs"] = {"content": logprobs}
    if stop_reason is not None:
        choice["stop_reason"] = stop_reason
    return json.dumps({
        "id": "c", "object": "chat.completion", "created": 0, "model": "m", "choices": [choice],
        "usage": {"prompt_tokens": 10, "completion_tokens": 2, "total_tokens": 12},
    }).encode()  # fmt: skip


def serve_llama_cpp(model_file: Path, alias: str, log: Path, *flags: str) -> Iterator[str]:
    """llama_cpp.server on a free loopback port, its base URL yielded; stopped when the caller
    is done (a fixture's ``yield from``)."""
    with socket.socket() as s:  # another process may take it first: then the start fails loudly
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(model_file),
           "--model_alias", alias, "--host", "127.0.0.1", "--port", str(port),
           "--verbose", "False", *flags]  # fmt: skip
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"llama_cpp.server did not start:\n{log.read_text()[-2000:]}")
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        stop_process(proc)
