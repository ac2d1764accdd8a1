"""docs/integrations.md's LangGraph ReAct agent, run as a reader runs it.

The doc's server (llama-cpp-python's, on 127.0.0.1, the embedded Qwen2.5-Coder 0.5B with the
``chatml-function-calling`` format) is started as its shell block starts it, the doc's python
block runs against it, and what the block produced is checked against `Pipeline.search`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import serve_llama_cpp

REPO = Path(__file__).resolve().parents[3]
DOC = REPO / "docs" / "integrations.md"
MODEL = "qwen2.5-coder-0.5b"


def doc_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", DOC.read_text(), re.DOTALL | re.MULTILINE)


@pytest.fixture
def server(tmp_path: Path, models_cache: Path, monkeypatch) -> Iterator[str]:
    from agents.llm.embedded.weights import model_file

    monkeypatch.setenv("R2MED_AGENTS_CACHE", str(models_cache))  # the block's default cache
    gguf = model_file(MODEL, models_cache)
    yield from serve_llama_cpp(gguf, MODEL, tmp_path / "server.log", "--n_ctx", "4096",
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
