"""The `none` agent: the raw query goes straight to the retriever (the no-LLM baseline)."""

from __future__ import annotations

from typing import Any

from langgraph.graph import END, START, StateGraph

from agents.context import AgentContext, AgentState, search_step
from retrievers.search import SearchRequest


def build_graph(ctx: AgentContext) -> Any:
    async def retrieve(state: AgentState) -> dict:
        ranking, step = search_step(
            ctx.retriever, "retrieve", SearchRequest(query=state["query"]), ctx.depth
        )
        return {"steps": [step], "ranking": ranking}

    graph = StateGraph(AgentState)
    graph.add_node("retrieve", retrieve)
    graph.add_edge(START, "retrieve")
    graph.add_edge("retrieve", END)
    return graph.compile()
