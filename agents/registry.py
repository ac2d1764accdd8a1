"""The agents `agents.run` knows: name -> description, graph builder, and prompts it reads.

Adding an agent is one graph module (a `build_graph(ctx)` returning a compiled LangGraph graph
whose final state holds `ranking`) plus its prompt files, and one entry here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from agents import baseline, generate_retrieve
from agents.context import AgentContext


@dataclass(frozen=True)
class AgentSpec:
    name: str
    description: str
    build_graph: Callable[[AgentContext], Any]
    prompts: tuple[str, ...] = ()  # prompt families it loads, recorded with their hashes
    uses_llm: bool = True
    defaults: dict[str, Any] = field(default_factory=dict)  # its options (--max-turns, ...)


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
}
