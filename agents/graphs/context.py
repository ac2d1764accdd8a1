"""What every agent graph is given (an LLM, retrievers, the task's kind) and the steps it records.

A graph's state starts as ``{"query_id", "query"}`` and must end with ``ranking`` (doc id ->
score, decreasing). Each node appends plain-dict steps to ``steps``, so a trace can be written
as JSON and read by `python -m agents.trace`.
"""

from __future__ import annotations

import operator
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Annotated, Any, TypedDict

from eval.usage import Usage
from prompts import PromptBook
from retrievers.base import Retriever, SearchRequest

if TYPE_CHECKING:  # the client imports litellm: only a run that calls a model pays for it
    from agents.llm import LLM
    from agents.shared.generations import Generations


@dataclass
class AgentContext:
    """Everything a graph's nodes may use; one per task, shared by its queries.

    ``options`` are the agent's settings, complete and checked (agents.config.run_config builds them
    from the registry's defaults), so a graph reads them and never defaults them again.
    Graphs take their prompts from ``prompts``, which records each one it hands out.
    """

    retriever: Retriever | None
    first_stage: Retriever | None  # BM25, for agents that read a first-pass top-k (LameR)
    corpus: Mapping[str, str]  # doc id -> text, for agents that read documents
    task: str  # the task's name, which picks its prompts (R2MED's are per task or kind)
    llm: LLM | None = None
    depth: int = 100
    prompts: PromptBook = field(default_factory=PromptBook)
    options: Mapping[str, Any] = field(default_factory=dict)
    # a generate-then-retrieve agent's texts when they are read, not generated (--generations)
    generations: Generations | None = None
    # how the model's texts are read (agents.llm.text.PARSERS): "none", or a reasoning family
    # whose response alone is searched
    parser: str = "none"
    # node -> the parameters its LLM calls are sent (agents.llm.sampling), resolved per run
    sampling: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


def _merge(old: dict, new: dict) -> dict:
    return {**old, **new}


class AgentState(TypedDict, total=False):
    query_id: str
    query: str
    steps: Annotated[list[dict[str, Any]], operator.add]  # the trace: for reading only
    generated: Annotated[dict[str, str], _merge]
    retrieved: Annotated[list[list[str]], operator.add]  # doc ids of each search the agent made
    searches: int  # searches the agent chose to make (not its final ranking's)
    ranking: dict[str, float]


def search_step(
    retriever: Retriever, node: str, request: SearchRequest, k: int, query_id: str | None = None
) -> tuple[dict[str, float], dict[str, Any]]:
    """Search and describe it as a trace step; returns (ranking, step).

    ``query_id`` is the task query's id the search serves: a retriever that ignores identical
    ids (R2MED's dense evaluation) never returns the document with that id.

    Graph nodes that search are async so that this runs on the event loop's thread: LangGraph
    runs sync nodes in worker threads, and numba's default threading layer (used by ranx's
    fusion) aborts the process when launched from several threads at once.
    """
    started = time.perf_counter()
    if query_id is not None:
        request = replace(request, query_id=query_id)
    ranking = retriever.search(request, k)
    step = {
        "node": node,
        "retriever": retriever.name,
        "request": {
            "query": request.query,
            "expansion": request.expansion,
            "sparse_text": request.sparse_text,
            **({"dense_text": request.dense_text} if request.dense_text is not None else {}),
        },
        "doc_ids": list(ranking),
        "scores": [round(s, 6) for s in ranking.values()],
        "seconds": round(time.perf_counter() - started, 6),
    }
    return ranking, step


def steps_usage(steps: list[dict[str, Any]]) -> Usage:
    """The LLM usage of one query: the sum over its steps that called the model."""
    return Usage.total(Usage.from_dict(step["usage"]) for step in steps if "usage" in step)


def fuse_lists(lists: list[list[str]], depth: int) -> dict[str, float]:
    """Reciprocal-rank fusion (retrievers.hybrid.rrf_fuse) of ranked doc id lists; one list
    is returned as it is, with scores made from its ranks."""
    runs = [
        # ranks are what RRF uses; scores made from ranks cannot tie by rounding
        {"q": {doc: float(len(ids) - i) for i, doc in enumerate(ids)}}
        for ids in lists
    ]
    if len(runs) == 1:
        return dict(list(runs[0]["q"].items())[:depth])
    from retrievers.hybrid import rrf_fuse

    return rrf_fuse(runs, depth)["q"] if runs else {}
