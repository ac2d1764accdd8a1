"""The README's "Adding an agent" example, run as written."""

from __future__ import annotations

import asyncio
import hashlib
import re
import sys
import types
from pathlib import Path

from agents.graphs.context import AgentContext
from agents.llm import LLM, scripted
from agents.registry import AgentSpec
from agents.runner import run_queries
from eval.datasets import load_task
from prompts import PromptBook
from retrievers.search import RetrieverConfig, build_retriever

README = Path(__file__).resolve().parents[1] / "README.md"


def code_block(first_line: str) -> str:
    """The fenced block of the README whose first line is `first_line`, without that line."""
    for block in re.findall(r"```\w*\n(.*?)```", README.read_text(), re.DOTALL):
        if block.startswith(first_line + "\n"):
            return block[len(first_line) + 1 :]
    raise AssertionError(f"README has no code block starting with {first_line!r}")


def test_readme_keywords_agent_runs(tmp_path: Path, toy_dir: Path):
    module = types.ModuleType("keywords_example")
    exec(code_block("# agents/graphs/keywords.py"), module.__dict__)
    prompt_file = tmp_path / "keywords.txt"
    prompt_file.write_text(code_block("# prompts/keywords/default.txt").rstrip("\n"))
    # the registry entry, evaluated as written
    entry = code_block("# agents/registry.py, in AGENTS:")
    spec = eval("{" + entry + "}", {"AgentSpec": AgentSpec})["keywords"]
    assert spec.prompts == ("keywords",)
    assert spec.builder == "agents.graphs.keywords:build_graph"
    sys.modules["agents.graphs.keywords"] = module  # where the entry says the module lives

    seen = []

    def respond(messages, params):
        seen.append(messages[-1]["content"])
        return "statin, HMG-CoA reductase, cholesterol"

    scripted.install(respond)
    task = load_task(str(toy_dir), tmp_path)
    bm25 = build_retriever(RetrieverConfig("bm25"), task, tmp_path, progress=False)
    prompts = PromptBook({"keywords": prompt_file}, task.name)
    ctx = AgentContext(
        retriever=bm25, first_stage=bm25, corpus=task.corpus, task=task.name,
        llm=LLM(model="scripted/readme"), prompts=prompts,
    )  # fmt: skip
    try:
        graph = spec.build_graph(ctx)
    finally:
        del sys.modules["agents.graphs.keywords"]
    [recorded] = prompts.used.values()  # the run records the text the model is sent
    assert recorded == hashlib.sha256(prompt_file.read_bytes()).hexdigest()
    records = asyncio.run(
        run_queries(graph, {"q3": task.queries["q3"]}, tmp_path / "q.jsonl", progress=False)
    )
    assert (
        seen[0].startswith("List the medical terms")
        and "Query: What lowers cholesterol?" in seen[0]
    )
    record = records["q3"]
    assert record["error"] is None
    assert record["generated"]["keywords"] == "statin, HMG-CoA reductase, cholesterol"
    assert record["ranking"][0][0] == "d4"
