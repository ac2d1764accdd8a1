"""What every agent graph is given (an LLM, retrievers, the task's kind) and the steps it records.

A graph's state starts as ``{"query_id", "query"}`` and must end with ``ranking`` (doc id ->
score, decreasing). Each node appends plain-dict steps to ``steps``, so a trace can be written
as JSON and read by `python -m agents.trace`.
"""

from __future__ import annotations

import operator
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypedDict

from agents.llm import LLM, Usage
from retrievers.search import Retriever, SearchRequest

THINK_END = "</think>"


@dataclass
class AgentContext:
    """Everything a graph's nodes may use; one per task, shared by its queries."""

    retriever: Retriever
    first_stage: Retriever  # BM25, for agents that read a first-pass top-k (LameR)
    corpus: Mapping[str, str]  # doc id -> text, for agents that read documents
    task: str  # the task's name, which picks its prompts (R2MED's are per task or kind)
    llm: LLM | None = None
    depth: int = 100
    prompt_overrides: Mapping[str, Path] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)  # the agent's own settings


def _merge(old: dict, new: dict) -> dict:
    return {**old, **new}


class AgentState(TypedDict, total=False):
    query_id: str
    query: str
    steps: Annotated[list[dict[str, Any]], operator.add]
    generated: Annotated[dict[str, str], _merge]
    ranking: dict[str, float]


def answer_text(text: str) -> str:
    """The part of a reasoning model's output after its last `</think>` (all of it otherwise)."""
    return text.rsplit(THINK_END, 1)[-1].strip()


async def llm_step(
    ctx: AgentContext, node: str, messages: list[dict], **params: Any
) -> tuple[str, dict[str, Any]]:
    """Call the LLM and describe the call as a trace step; returns (text, step)."""
    if ctx.llm is None:
        raise RuntimeError(f"node {node!r} needs an LLM but the agent was built without one")
    completion = await ctx.llm.chat(messages, **params)
    step = {
        "node": node,
        "messages": messages,
        "output": completion.text,
        "finish_reason": completion.finish_reason,
        "cached": completion.cached,
        "usage": completion.usage.to_dict(),
    }
    return completion.text, step


def search_step(
    retriever: Retriever, node: str, request: SearchRequest, k: int
) -> tuple[dict[str, float], dict[str, Any]]:
    """Search and describe it as a trace step; returns (ranking, step).

    Graph nodes that search are async so that this runs on the event loop's thread: LangGraph
    runs sync nodes in worker threads, and numba's default threading layer (used by ranx's
    fusion) aborts the process when launched from several threads at once.
    """
    started = time.perf_counter()
    ranking = retriever.search(request, k)
    step = {
        "node": node,
        "retriever": retriever.name,
        "request": {
            "query": request.query,
            "expansion": request.expansion,
            "sparse_text": request.sparse_text,
        },
        "doc_ids": list(ranking),
        "scores": [round(s, 6) for s in ranking.values()],
        "seconds": round(time.perf_counter() - started, 6),
    }
    return ranking, step


def steps_usage(steps: list[dict[str, Any]]) -> Usage:
    """The LLM usage of one query: the sum over its steps that called the model."""
    total = Usage()
    for step in steps:
        if "usage" in step:
            total.add(Usage(**step["usage"]))
    return total
