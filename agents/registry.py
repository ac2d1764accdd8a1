"""The agents and rerank stages a run can name: name -> what it is, how to build it, its options.

Adding an agent is one graph module under `agents/graphs/` (a `build_graph(ctx)` returning a
compiled LangGraph graph whose final state holds `ranking`) plus its prompt files, and one
entry in `AGENTS`. Adding a rerank stage is one module under `agents/rerank/` (a
`build_stage(ctx)` returning an object with `async rerank(query_id, query, ranking)`) and one
entry in `STAGES`. Builders are named as "module:function" and imported only when a run
builds them, so naming an agent costs no import of LangGraph or an LLM library.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from agents.graphs.generate_retrieve import SPECS as GENERATE_SPECS
from agents.graphs.search_loop import check_options as check_search_options
from agents.graphs.search_o1 import DEFAULTS as SEARCH_O1_DEFAULTS
from agents.graphs.search_o1 import PROMPTS as SEARCH_O1_PROMPTS
from agents.graphs.search_r1 import DEFAULTS as SEARCH_R1_DEFAULTS
from agents.graphs.search_r1 import PROMPTS as SEARCH_R1_PROMPTS


class OptionSpec(Protocol):
    """What `agents.config.typed_options` needs of an agent or a stage."""

    name: str
    defaults: Mapping[str, Any]
    check_options: Callable[[dict[str, Any]], None] | None


def _resolve(target: str | Callable) -> Callable:
    if callable(target):
        return target
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


@dataclass(frozen=True)
class AgentSpec:
    name: str
    description: str
    builder: str | Callable[..., Any]  # "module:function" or the function; (ctx) -> graph
    # prompt families it reads ("hyde", or one file of a family: "search-o1/documents"); the
    # hashes a run records come from the prompts actually loaded, not from this list
    prompts: tuple[str, ...] = ()
    uses_llm: bool = True
    defaults: dict[str, Any] = field(default_factory=dict)  # its options (--max-turns, ...)
    check_options: Callable[[dict[str, Any]], None] | None = None  # raises ValueError
    bound: tuple[Any, ...] = ()  # leading arguments of the builder (generate-retrieve specs)

    def build_graph(self, ctx: Any) -> Any:
        return _resolve(self.builder)(*self.bound, ctx)


@dataclass(frozen=True)
class StageSpec:
    name: str
    description: str
    builder: str | Callable[..., Any]  # (ctx) -> an object with async rerank(...)
    uses_llm: bool = False
    defaults: dict[str, Any] = field(default_factory=dict)
    check_options: Callable[[dict[str, Any]], None] | None = None

    def build(self, ctx: Any) -> Any:
        return _resolve(self.builder)(ctx)


AGENTS: dict[str, AgentSpec] = {
    "none": AgentSpec(
        "none",
        "retrieve with the raw query (no LLM)",
        "agents.graphs.baseline:build_graph",
        uses_llm=False,
    ),
    **{
        name: AgentSpec(
            name,
            spec.description,
            "agents.graphs.generate_retrieve:build_graph",
            spec.prompts,
            bound=(spec,),
        )
        for name, spec in GENERATE_SPECS.items()
    },
    "search-o1": AgentSpec(
        "search-o1",
        "Search-o1: search mid-reasoning, Reason-in-Documents; ranks with the answer",
        "agents.graphs.search_o1:build_graph",
        SEARCH_O1_PROMPTS,
        defaults=SEARCH_O1_DEFAULTS,
        check_options=check_search_options,
    ),
    "search-r1": AgentSpec(
        "search-r1",
        "Search-R1: think/search/answer turns; ranks with the last think + answer",
        "agents.graphs.search_r1:build_graph",
        SEARCH_R1_PROMPTS,
        defaults=SEARCH_R1_DEFAULTS,
        check_options=check_search_options,
    ),
}

def _stages() -> dict[str, StageSpec]:
    # imported here, after StageSpec exists: the stage modules name their own specs
    from agents.rerank.listwise import INSERTRANK, LISTWISE

    return {spec.name: spec for spec in (LISTWISE, INSERTRANK)}


STAGES: dict[str, StageSpec] = _stages()
