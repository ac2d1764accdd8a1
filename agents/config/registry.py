"""The agents and rerank stages a run can name: name -> what it is, how to build it, its options.

Adding an agent is one graph module under `agents/graphs/` (a `build_graph(ctx)` returning a
compiled LangGraph graph whose final state holds `ranking`) plus its prompt files, and one
entry in `AGENTS`. Adding a rerank stage is one module under `agents/rerank/` (a
`build_stage(ctx)` returning an object with `async rerank(query_id, query, ranking)`) and one
entry in `STAGES`. Builders are named as "module:function" and imported only when a run
builds them, so naming an agent costs no import of LangGraph or an LLM library.
"""

from __future__ import annotations

from agents.graphs.generate_retrieve import SPECS as GENERATE_SPECS
from agents.graphs.search_loop import check_options as check_search_options
from agents.graphs.search_o1 import DEFAULTS as SEARCH_O1_DEFAULTS
from agents.graphs.search_o1 import PROMPTS as SEARCH_O1_PROMPTS
from agents.graphs.search_r1 import DEFAULTS as SEARCH_R1_DEFAULTS
from agents.graphs.search_r1 import PROMPTS as SEARCH_R1_PROMPTS
from agents.graphs.tool_search import DEFAULTS as TOOL_SEARCH_DEFAULTS
from agents.graphs.tool_search import PROMPTS as TOOL_SEARCH_PROMPTS
from agents.graphs.tool_search import check_options as check_tool_options
from agents.rerank.cross import CROSS
from agents.rerank.diver_pointwise import DIVER_POINTWISE
from agents.rerank.grouprank import GROUPRANK
from agents.rerank.listwise import INSERTRANK, LISTWISE
from agents.rerank.point_list import POINT_LIST
from agents.rerank.pointwise import POINTWISE
from agents.rerank.rank1 import RANK1
from agents.rerank.reasonrank import REASONRANK
from agents.shared.specs import AgentSpec, OptionSpec, StageSpec

__all__ = ["AGENTS", "STAGES", "AgentSpec", "OptionSpec", "StageSpec"]


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
            llm_nodes=("generate",),
        )
        for name, spec in GENERATE_SPECS.items()
    },
    "search-o1": AgentSpec(
        "search-o1",
        "Search-o1: search mid-reasoning, Reason-in-Documents; ranks with the answer",
        "agents.graphs.search_o1:build_graph",
        SEARCH_O1_PROMPTS,
        worst_case="agents.graphs.search_o1:worst_case",
        defaults=SEARCH_O1_DEFAULTS,
        check_options=check_search_options,
        llm_nodes=("reason", "documents"),
    ),
    "search-r1": AgentSpec(
        "search-r1",
        "Search-R1: think/search/answer turns; ranks with its first <answer>",
        "agents.graphs.search_r1:build_graph",
        SEARCH_R1_PROMPTS,
        worst_case="agents.graphs.search_r1:worst_case",
        defaults=SEARCH_R1_DEFAULTS,
        check_options=check_search_options,
        llm_nodes=("reason",),
        parser="search-r1",
    ),
    "tool-search": AgentSpec(
        "tool-search",
        "function calls (search, read, submit); ranks with its submission, then RRF",
        "agents.graphs.tool_search:build_graph",
        TOOL_SEARCH_PROMPTS,
        worst_case="agents.graphs.tool_search:worst_case",
        defaults=TOOL_SEARCH_DEFAULTS,
        check_options=check_tool_options,
        llm_nodes=("reason",),
    ),
}

STAGES: dict[str, StageSpec] = {
    spec.name: spec
    for spec in (CROSS, LISTWISE, INSERTRANK, POINTWISE, REASONRANK, RANK1, GROUPRANK)
    + (DIVER_POINTWISE, POINT_LIST)
}
