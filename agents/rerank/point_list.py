"""DIVER's point + list merge (`point-list`): a pointwise and a listwise reranking of the same
list, merged by their ranks.

DIVER (AQ-MedAI/Diver at 95b111b) reranks its first stage twice, each reranker over the same
top 100 (``Reranker/reranker_script.sh`` L24-57): the pointwise stage (``rerank_pointwise.py``,
here ``diver-pointwise``, whose interpolated ``None_reranked_score.json`` is read, L53) and a
listwise LLM reranker (``rerank_listwise.py``, L39-47, L52), then merges the two files
(``rerank_merge_point_and_list.py``):

* each file's documents get rank scores by their order in it, ``-log(rank + 1)`` from rank 0
  (``reassign_score`` L14-21): the pointwise file's order is its interpolated order;
* each document of the pointwise file scores ``0.6 * point + 0.4 * list`` (L97-102), and the
  list is sorted best first, stable (L103): ties keep the pointwise order.

Here the two rerankers are stages of this project, built through the registry over the same
input ranking with their own defaults, this stage's model and server, and this stage's
``depth``: ``pointwise`` (``diver-pointwise`` by default, or ``llm-pointwise``, ``rank1``) and
``listwise`` (``llm-listwise`` by default, RankGPT's windows; or ``reasonrank``, ``insertrank``).
DIVER's own listwise reranker (one prompt over all 100 documents, gemini-2.5-flash at
temperature 0.8) is not one of them; its script reads that run's ``None_reranked_score.json``
(L52), a file ``rerank_listwise.py`` does not write (its ``None_score.json`` holds the model's
order). The sub-stages get nothing else of the run's (a preset's options, ``--max-tokens`` as
an option), but their calls are sampled as theirs would be: they are made under the
sub-stages' node names, ``judge`` and ``window``, and each is sent what that stage would be
sent (`agents.llm.sampling`'s table, looked up under the named stage's name; ``--max-tokens``
wins there).

The trace holds every call of both, each step marked with its ``stage`` and its outcome
prefixed by it (``diver-pointwise/read``, ``llm-listwise/permutation``), so that the task's
metrics.json counts the two apart; then a ``merge`` step with both rankings as the sub-stages
returned them, their options and the weights. A document of the pointwise list that the
listwise one lacks has no list rank: the original stops there (``KeyError``, L102), and so does
the query here, naming it (the listwise stages here always return their whole input).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from agents.rerank import StageContext
from agents.shared.specs import StageSpec

DEFAULTS: dict[str, Any] = {
    # the run's --model (and its --api-base); agents.config.run_config fills in the name
    "model": "",
    "api_base": "",
    "pointwise": "diver-pointwise",
    "listwise": "llm-listwise",
    "depth": 100,  # both stages' (DIVER's --input_k 100 for each, reranker_script.sh L32, L42)
    "point_weight": 0.6,  # rerank_merge_point_and_list.py L102
    "list_weight": 0.4,
}
# the node each role's calls are made under: a stage fits a role when these are all it calls
ROLES = {"pointwise": "judge", "listwise": "window"}
# the LLM stages whose calls are all the role's node, with a depth, a model and a server to be
# given (tests/agents/rerank/test_diver_merges.py checks this against the registry)
FITTING = {
    "pointwise": ("diver-pointwise", "llm-pointwise", "rank1"),
    "listwise": ("llm-listwise", "insertrank", "reasonrank"),
}


def check_options(options: dict[str, Any]) -> None:
    for role, kinds in FITTING.items():
        if options[role] not in kinds:
            raise ValueError(f"{role} must be one of {', '.join(kinds)}, got {options[role]!r}")
    if options["depth"] < 1:
        raise ValueError(f"depth must be at least 1, got {options['depth']}")


def role_options(role: str, options: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The stage kind that plays ``role`` and the options it is given: this stage's model,
    server and depth (the rest are its defaults)."""
    return options[role], {k: options[k] for k in ("model", "api_base", "depth")}


def stage_of(node: str, options: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The stage whose calls are made under ``node``, and the options it is given: what its
    calls' sampling is looked up by (`agents.shared.specs.StageSpec.sampled_as`)."""
    role = next(r for r, n in ROLES.items() if n == node)
    return role_options(role, {**DEFAULTS, **options})


def rank_scores(order: Sequence[str]) -> dict[str, float]:
    """``reassign_score`` (L14-21): ``-log(rank + 1)`` by position, the first 0."""
    return {doc_id: -math.log(rank + 1) for rank, doc_id in enumerate(order)}


def merge(
    point: Sequence[str], listed: Sequence[str], point_weight: float, list_weight: float
) -> dict[str, float]:
    """The documents of ``point`` scored ``point_weight * point + list_weight * list`` by their
    rank scores, sorted best first, stable (L97-103). KeyError for one ``listed`` lacks."""
    point_scores, list_scores = rank_scores(point), rank_scores(listed)
    missing = [d for d in point_scores if d not in list_scores]
    if missing:
        raise KeyError(f"the listwise ranking lacks {missing[0]!r} of the pointwise one")
    merged = {
        d: point_weight * point_scores[d] + list_weight * list_scores[d] for d in point_scores
    }
    return dict(sorted(merged.items(), key=lambda x: x[1], reverse=True))


class PointListReranker:
    def __init__(self, ctx: StageContext) -> None:
        if ctx.build_stage is None:
            raise ValueError(
                "point-list builds its stages through the run (StageContext.build_stage)"
            )
        self.options = ctx.options
        self.stages: dict[str, tuple[str, Mapping[str, Any], Any]] = {}
        for role in ROLES:
            kind, given = role_options(role, ctx.options)
            self.stages[role] = (kind, *ctx.build_stage(kind, given))

    async def rerank(
        self, query_id: str, query: str, ranking: Mapping[str, float]
    ) -> dict[str, Any]:
        steps: list[dict[str, Any]] = []
        rankings: dict[str, dict[str, float]] = {}
        for role, (kind, _, stage) in self.stages.items():
            result = await stage.rerank(query_id, query, ranking)  # the same input, each
            rankings[role] = result["ranking"]
            steps += [marked(kind, step) for step in result["steps"]]
        o = self.options
        merged = merge(
            list(rankings["pointwise"]), list(rankings["listwise"]),
            o["point_weight"], o["list_weight"],
        )  # fmt: skip
        steps.append({
            "node": "merge",
            "weights": {"pointwise": o["point_weight"], "listwise": o["list_weight"]},
            **{f"{role}_stage": {"kind": kind, "options": dict(options)}
               for role, (kind, options, _) in self.stages.items()},
            **{role: [[d, s] for d, s in r.items()] for role, r in rankings.items()},
        })  # fmt: skip
        return {"ranking": merged, "steps": steps}


def marked(kind: str, step: dict[str, Any]) -> dict[str, Any]:
    """A sub-stage's step, marked with its stage, and its outcome counted under it."""
    out = {**step, "stage": kind}
    if "outcome" in step:
        out["outcome"] = f"{kind}/{step['outcome']}"
    return out


def build_point_list(ctx: StageContext) -> PointListReranker:
    return PointListReranker(ctx)


POINT_LIST = StageSpec(
    "point-list",
    "DIVER's merge: a pointwise and a listwise stage over the same list, 0.6/0.4 of -log(rank + 1)",
    build_point_list,
    uses_llm=True,
    llm_nodes=tuple(ROLES.values()),
    prompts=("diver-pointwise", "rerank-listwise"),  # the default stages' prompt families
    defaults=DEFAULTS,
    check_options=check_options,
    sampled_as=stage_of,
)
