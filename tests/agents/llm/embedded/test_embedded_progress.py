"""The embedded model's long steps on the run's query bar: loading, prompt evaluation and the
tokens generated so far, shown on stderr while a query runs, nothing with progress off, and
the same records either way (real generation with SmolLM2 135M through litellm)."""

from __future__ import annotations

import asyncio
import importlib.util
from typing import Any

import pytest

from agents.execution.task_queries import run_queries
from eval.plumbing import progress

SMOL = "local/smollm2-135m"
QUERIES = {"q01": "Count from 1 to 30, separated by commas.", "q02": "Name five colours."}


class OneCall:
    """A graph of one LLM call per query, through litellm to the embedded provider."""

    async def ainvoke(self, state: dict[str, Any]) -> dict[str, Any]:
        from eval.plumbing.litellm_setup import litellm

        messages = [{"role": "user", "content": state["query"]}]
        reply = await litellm.acompletion(
            model=SMOL, messages=messages, temperature=0, max_tokens=48
        )
        text = reply.choices[0].message.content
        return {"ranking": {"d1": 1.0}, "generated": {"text": text}, "steps": []}


@pytest.fixture(scope="module")
def provider():
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed (it is a dependency of the project)")
    from agents.llm.embedded.provider import register_local_provider

    # a context size of its own: a pool this process has not loaded yet, so loading is seen
    register_local_provider(n_ctx=1536)
    yield
    register_local_provider()


def run(tmp_path, name: str, shown: bool) -> dict[str, dict]:
    out = tmp_path / name / "queries.jsonl"
    return asyncio.run(run_queries(OneCall(), QUERIES, out, concurrency=2, progress=shown))


def test_an_embedded_call_shows_loading_prompt_and_tokens(
    provider, tmp_path, monkeypatch, capsys
) -> None:
    monkeypatch.setattr(progress, "INTERVAL", 0.0)  # every update drawn, for the test to see
    on = run(tmp_path, "on", True)
    err = capsys.readouterr().err
    assert "loading smollm2-135m" in err
    assert "q01 prompt 0/" in err and "q02 prompt 0/" in err
    assert "generated" in err
    last = max(int(line.split(" generated")[0].rsplit(" ", 1)[1].replace(",", ""))
               for line in err.split("\r") if " generated" in line)  # fmt: skip
    assert last > 1  # tokens so far, counted up as they come

    off = run(tmp_path, "off", False)
    assert capsys.readouterr() == ("", "")
    for q in QUERIES:  # the display changes no output
        assert {**on[q], "seconds": 0} == {**off[q], "seconds": 0}
    assert on["q01"]["generated"]["text"].strip()
