"""docs/integrations.md's LangGraph ReAct agent, run as a reader runs it.

The doc's server (llama-cpp-python's, on 127.0.0.1, the embedded Qwen2.5-Coder 0.5B with the
``chatml-function-calling`` format) is started as its shell block starts it, the doc's python
block runs against it, and what the block produced is checked against `Pipeline.search`.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import stop_process

REPO = Path(__file__).resolve().parents[3]
DOC = REPO / "docs" / "integrations.md"
MODEL = "qwen2.5-coder-0.5b"
STARTUP_S = 60.0


def doc_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", DOC.read_text(), re.DOTALL | re.MULTILINE)


def serve(model_file: Path, log: Path, *flags: str) -> Iterator[str]:
    """llama_cpp.server on a free loopback port, stopped when the caller is done."""
    with socket.socket() as s:  # another process may take it first: then the start fails loudly
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(model_file),
           "--model_alias", MODEL, "--host", "127.0.0.1", "--port", str(port),
           "--verbose", "False", *flags]  # fmt: skip
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + STARTUP_S
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


@pytest.fixture
def server(tmp_path: Path, models_cache: Path, monkeypatch) -> Iterator[str]:
    from agents.llm.embedded.weights import model_file

    monkeypatch.setenv("R2MED_AGENTS_CACHE", str(models_cache))  # the block's default cache
    gguf = model_file(MODEL, models_cache)
    yield from serve(gguf, tmp_path / "server.log", "--n_ctx", "4096",
                     "--chat_format", "chatml-function-calling")  # fmt: skip


@pytest.mark.slow
def test_the_docs_react_agent_calls_our_retriever_as_a_tool(server: str, monkeypatch, tmp_path):
    from langchain_core.messages import AIMessage, ToolMessage

    monkeypatch.setenv("LLAMA_SERVER_URL", server)
    monkeypatch.chdir(tmp_path)
    [block] = doc_blocks()
    namespace: dict = {}
    exec(compile(block, str(DOC), "exec"), namespace)  # noqa: S102  the doc's own code

    messages = namespace["result"]["messages"]
    pipeline = namespace["pipeline"]
    calls = [c for m in messages if isinstance(m, AIMessage) for c in m.tool_calls]
    # what the doc says the model does at temperature 0: one call to our tool, then the
    # agent ends on its result (return_direct)
    assert [c["name"] for c in calls] == ["search_medical_documents"], messages
    assert isinstance(messages[-1], ToolMessage) and messages[-1].status == "success"
    [reply] = [m for m in messages if isinstance(m, ToolMessage)]
    top = pipeline.search(calls[0]["args"]["query"], 3)
    assert [d.id for d in reply.artifact] == [d for d, _ in top]
    assert [d.metadata["score"] for d in reply.artifact] == [s for _, s in top]
    assert re.findall(r"^\[(d\d+)\] ", reply.content, re.MULTILINE) == [d for d, _ in top]
    assert top[0][0] == "d261"  # the demo's immersion-wrinkling document
