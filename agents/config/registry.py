"""The agents and rerank stages a run can name, one line each: name -> its spec.

Each spec is declared in the module that builds it (`agents/shared/specs.py`: `AgentSpec`,
`StageSpec`): an agent in its graph module under `agents/graphs/`, a rerank stage in its module
under `agents/rerank/`, beside the builder it names. This module only lists them; the order
here is the order of `--agent`'s choices and of `--help`. Adding an agent or a stage is its
module and one line here (docs/extending.md). Importing a graph module imports no LangGraph
or LLM library (each builder imports LangGraph when a run builds its graph), so naming an agent
costs nothing.
"""

from __future__ import annotations

from agents.graphs.baseline import BASELINE
from agents.graphs.generate_retrieve import HYDE, LAMER, QUERY2DOC, REASON
from agents.graphs.search_o1 import SEARCH_O1
from agents.graphs.search_r1 import SEARCH_R1
from agents.graphs.tool_search import TOOL_SEARCH
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
    spec.name: spec
    for spec in (
        BASELINE,
        HYDE,
        QUERY2DOC,
        LAMER,
        REASON,
        SEARCH_O1,
        SEARCH_R1,
        TOOL_SEARCH,
    )
}

STAGES: dict[str, StageSpec] = {
    spec.name: spec
    for spec in (
        CROSS,
        LISTWISE,
        INSERTRANK,
        POINTWISE,
        REASONRANK,
        RANK1,
        GROUPRANK,
        DIVER_POINTWISE,
        POINT_LIST,
    )
}
