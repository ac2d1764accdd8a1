"""The cost cell of a comparison: n/a for a model that is not priced (local, self-hosted,
unknown) even when some of its queries were answered from the cache, a lower bound when only
some queries were priced, the sum when all were."""

from __future__ import annotations

from pathlib import Path

from eval.compare.measures import cost
from eval.compare.model import RunData, TaskFiles
from eval.usage import Usage


def _run(usages: list[dict]) -> RunData:
    files = TaskFiles(
        per_query={},
        summary=None,
        records={},
        usage={f"q{i}": Usage.from_dict(u) for i, u in enumerate(usages)},
        run_trec=Path("run.trec"),
    )
    return RunData(path=Path("r"), label="r", config={}, tasks={"t": files})


LOCAL = {"calls": 2, "cached_calls": 0, "prompt_tokens": 50, "completion_tokens": 5, "cost": None}
CACHED = {"calls": 2, "cached_calls": 2, "prompt_tokens": 50, "completion_tokens": 5, "cost": 0.0}
PAID = {"calls": 2, "cached_calls": 0, "prompt_tokens": 50, "completion_tokens": 5, "cost": 0.01}


def test_an_unpriced_model_is_n_a_though_cached_queries_cost_nothing():
    # the local run of the issue: 2 of 15 queries from the cache, the rest unpriced
    c = cost(_run([CACHED] * 2 + [LOCAL] * 13), ["t"])
    assert c.cost_text() == "n/a"
    assert (c.priced, c.unpriced, c.queries, c.calls, c.cached_calls) == (0, 13, 15, 30, 4)


def test_partly_priced_is_a_lower_bound_over_the_queries_that_paid():
    c = cost(_run([CACHED] * 2 + [PAID] * 3 + [LOCAL] * 10), ["t"])
    assert c.cost_text() == ">= $0.0300 (3/13 queries priced)"


def test_all_priced_or_all_cached_or_no_call():
    assert cost(_run([PAID] * 4), ["t"]).cost_text() == "$0.0400"
    assert cost(_run([PAID] * 2 + [CACHED] * 2), ["t"]).cost_text() == "$0.0200"
    assert cost(_run([CACHED] * 3), ["t"]).cost_text() == "$0"
    assert cost(_run([{}] * 3), ["t"]).cost_text() == "$0"  # no LLM: no usage recorded
