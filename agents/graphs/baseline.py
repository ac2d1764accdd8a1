"""The `none` agent: the raw query goes straight to the retriever (the no-LLM baseline).

One step needs no graph: this is a plain object with the compiled graph's `ainvoke`, so a
run without an LLM never imports LangGraph (and starts in well under a second).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agents.graphs.context import AgentContext, search_step
from agents.shared.specs import AgentSpec
from retrievers.base import SearchRequest


@dataclass
class Baseline:
    ctx: AgentContext

    async def ainvoke(self, state: dict[str, Any]) -> dict[str, Any]:
        request = SearchRequest(state["query"])
        ranking, step = search_step(
            self.ctx.retriever, "retrieve", request, self.ctx.depth, state["query_id"]
        )
        return {**state, "steps": [*state.get("steps", []), step], "ranking": ranking}


def build_graph(ctx: AgentContext) -> Baseline:
    return Baseline(ctx)


BASELINE = AgentSpec("none", "retrieve with the raw query (no LLM)", build_graph, uses_llm=False)
