"""Rerank stages: each takes the previous stage's ranked list per query and returns a new one.

A stage kind is one module here, declaring its `StageSpec` beside its builder, plus one line in
`agents.config.registry` where `STAGES` lists it (docs/extending.md); its builder gets a
`StageContext` and returns an object with ``async rerank(query_id, query, ranking) -> dict``,
the dict holding the new ``ranking`` (doc id -> score, decreasing) and the ``steps`` of its
trace, as an agent graph's final state does. The pipeline runs a stage over the saved
records of the stage before it and saves its own, so a stage never recomputes earlier work.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from prompts import PromptBook


@dataclass
class StageContext:
    corpus: Mapping[str, str]  # doc id -> text
    task: str
    options: Mapping[str, Any]  # complete and checked (agents.config.run_config.typed_options)
    llm: Any = None  # agents.llm.LLM for the stages that call a model
    depth: int = 100
    prompts: PromptBook = field(default_factory=PromptBook)
    cache_dir: Path | None = None
    # node -> the parameters its LLM calls are sent (agents.llm.sampling)
    sampling: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # query id -> the length of its input list, for every query the stage runs over, in the
    # task's order (`agents.execution.plan.Plan.stage_context`): for a stage whose draws run over
    # the whole task in order (GroupRank's shuffle stream); empty when built for one query
    list_lengths: Mapping[str, int] = field(default_factory=dict)
    # (kind, options given) -> (its options typed, the stage built in this context): for a
    # stage made of other stages (point-list); the run fills it (`agents.execution.plan`), which
    # knows every kind
    build_stage: Callable[[str, Mapping[str, Any]], tuple[dict[str, Any], Any]] | None = None


def ranked(order: Sequence[str]) -> dict[str, float]:
    """A stage's new order as its ranking: scores n..1, so that every reader (the evaluator's
    sort among them) keeps exactly this order."""
    n = len(order)
    return {d: float(n - i) for i, d in enumerate(order)}


def by_score(order: Sequence[str], scores: Mapping[str, float]) -> list[str]:
    """The documents ``scores`` judges, best first (ties keep the previous order: sorted() is
    stable), then the rest of ``order`` in its place."""
    judged = [d for d in order if d in scores]
    return sorted(judged, key=lambda d: -scores[d]) + [d for d in order if d not in scores]


class Stage(Protocol):
    async def rerank(
        self, query_id: str, query: str, ranking: Mapping[str, float]
    ) -> dict[str, Any]: ...


@dataclass
class StageGraph:
    """A stage over fixed input rankings, shaped like a compiled graph for the query runner."""

    stage: Stage
    rankings: Mapping[str, Mapping[str, float]]  # query id -> the previous stage's ranking

    async def ainvoke(self, state: Mapping[str, Any]) -> dict[str, Any]:
        query_id = state["query_id"]
        return await self.stage.rerank(query_id, state["query"], self.rankings[query_id])
