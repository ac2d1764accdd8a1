"""What an agent or a rerank stage is to a run: its name, builder, options and defaults.

Each graph or stage module declares its own spec beside the builder it names, and
`agents.config.registry` only lists them; kept apart from the registry so that a module can
declare its spec without importing the registry that imports it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol


class OptionSpec(Protocol):
    """What `agents.config.run_config.typed_options` needs of an agent or a stage."""

    name: str
    defaults: Mapping[str, Any]
    check_options: Callable[[dict[str, Any]], None] | None


@dataclass(frozen=True)
class AgentSpec:
    name: str
    description: str
    builder: Callable[..., Any]  # (*bound, ctx) -> graph: the graph module's build_graph
    # prompt families it reads ("hyde", or one file of a family: "search-o1/documents"); the
    # hashes a run records come from the prompts actually loaded, not from this list
    prompts: tuple[str, ...] = ()
    uses_llm: bool = True
    defaults: dict[str, Any] = field(default_factory=dict)  # its options (--max-turns, ...)
    check_options: Callable[[dict[str, Any]], None] | None = None  # raises ValueError
    bound: tuple[Any, ...] = ()  # leading arguments of the builder (generate-retrieve specs)
    # the graph nodes that call the LLM: each gets its sampling (agents.llm.sampling) by name
    llm_nodes: tuple[str, ...] = ()
    # how its texts are read when the model's family does not say (agents.llm.text.PARSERS):
    # None for the model's family; Search-R1's protocol answers in <answer> whatever the model
    parser: str | None = None
    # how a worst-case model answers its calls in a dry run (given an agents.llm.dry.WorstCase,
    # returning a Reply); None: every reply is the longest filler
    worst_case: Callable[..., Any] | None = None

    def build_graph(self, ctx: Any) -> Any:
        return self.builder(*self.bound, ctx)


@dataclass(frozen=True)
class StageSpec:
    name: str
    description: str
    builder: Callable[..., Any]  # (ctx) -> an object with async rerank(...)
    uses_llm: bool = False
    prompts: tuple[str, ...] = ()  # prompt families it reads (for sweeps' prompt variants)
    defaults: dict[str, Any] = field(default_factory=dict)
    check_options: Callable[[dict[str, Any]], None] | None = None
    llm_nodes: tuple[str, ...] = ()  # the nodes its calls are made under (agents.llm.sampling)
    worst_case: Callable[..., Any] | None = None  # as AgentSpec's
    # options naming a model loaded from a folder or the hub, and what it is ("model" or
    # "tokenizer"): checked before any work (retrievers.model_source)
    models: Mapping[str, str] = field(default_factory=dict)
    # (preset, model, server kind) -> the options that preset gives the stage over its
    # defaults (an option given to the stage wins: agents.config.run_config.RunConfig)
    preset_options: Callable[[str, str, str], dict[str, Any]] | None = None
    # (node, options) -> the stage kind and options a call at ``node`` is sampled as
    # (agents.llm.sampling), for a stage made of other stages; None: as this stage
    sampled_as: Callable[[str, Mapping[str, Any]], tuple[str, dict[str, Any]]] | None = None

    def build(self, ctx: Any) -> Any:
        return self.builder(ctx)
