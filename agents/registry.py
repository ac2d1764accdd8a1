"""The agents `agents.run` knows: name -> description, graph builder, and prompts it reads.

Adding an agent is one graph module (a `build_graph(ctx)` returning a compiled LangGraph graph
whose final state holds `ranking`) plus its prompt files, and one entry here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from agents import baseline, generate_retrieve, search_loop, search_o1, search_r1
from agents.context import AgentContext


@dataclass(frozen=True)
class AgentSpec:
    name: str
    description: str
    build_graph: Callable[[AgentContext], Any]
    # prompts it loads, recorded with their hashes: a family ("hyde", resolved per task) or one
    # file of a family ("search-o1/documents")
    prompts: tuple[str, ...] = ()
    uses_llm: bool = True
    defaults: dict[str, Any] = field(default_factory=dict)  # its options (--max-turns, ...)
    check_options: Callable[[dict[str, Any]], None] | None = None  # raises ValueError


AGENTS: dict[str, AgentSpec] = {
    "none": AgentSpec(
        "none", "retrieve with the raw query (no LLM)", baseline.build_graph, uses_llm=False
    ),
    **{
        name: AgentSpec(
            name, spec.description, partial(generate_retrieve.build_graph, spec), spec.prompts
        )
        for name, spec in generate_retrieve.SPECS.items()
    },
    "search-o1": AgentSpec(
        "search-o1",
        "Search-o1: search mid-reasoning, Reason-in-Documents; ranks with the answer",
        search_o1.build_graph,
        search_o1.PROMPTS,
        defaults=search_o1.DEFAULTS,
        check_options=search_loop.check_options,
    ),
    "search-r1": AgentSpec(
        "search-r1",
        "Search-R1: think/search/answer turns; ranks with the last think + answer",
        search_r1.build_graph,
        search_r1.PROMPTS,
        defaults=search_r1.DEFAULTS,
        check_options=search_loop.check_options,
    ),
}
