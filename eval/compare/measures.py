"""What a run is measured by against the baseline: deltas with wins / ties / losses and a
paired p-value, the queries that moved most, and its LLM cost."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from eval.compare.model import Cost, Delta, Mover, RunData
from eval.significance import Test, paired_test
from eval.usage import Usage


def delta(base: Mapping[Any, float], other: Mapping[Any, float], test: Test) -> Delta:
    """``other`` against ``base`` over ``base``'s keys (queries, or (task, query) pooled)."""
    keys = list(base)
    a = [base[k] for k in keys]
    b = [other[k] for k in keys]
    n = len(keys)
    tested = paired_test(a, b, test=test)
    return Delta(
        n=n,
        wins=sum(y > x for x, y in zip(a, b, strict=True)),
        ties=sum(y == x for x, y in zip(a, b, strict=True)),
        losses=sum(y < x for x, y in zip(a, b, strict=True)),
        baseline=sum(a) / n if n else 0.0,
        value=sum(b) / n if n else 0.0,
        p_value=tested.p_value,
        p_reason=tested.reason,
    )


def movers(
    run: RunData,
    base: RunData,
    pooled_base: Mapping[tuple[str, str], float],
    pooled: Mapping[tuple[str, str], float],
    top: int,
) -> tuple[list[Mover], list[Mover]]:
    """The ``top`` queries that went up most and the ``top`` that went down most, with text."""

    def text(task: str, qid: str) -> str:
        for r in (run, base):
            record = r.tasks[task].records.get(qid)
            if record and record.get("query"):
                return " ".join(str(record["query"]).split())
        return ""

    moved = [
        Mover(t, q, pooled_base[(t, q)], pooled[(t, q)], text(t, q))
        for (t, q) in pooled
        if pooled[(t, q)] != pooled_base[(t, q)]
    ]
    up = sorted((m for m in moved if m.delta > 0), key=lambda m: -m.delta)[:top]
    down = sorted((m for m in moved if m.delta < 0), key=lambda m: m.delta)[:top]
    return up, down


def cost(run: RunData, tasks: Sequence[str]) -> Cost:
    """The run's usage over ``tasks``, summed from its per-query records (see `Cost`)."""
    total = Usage()
    priced = Usage()  # the queries whose every call was priced
    queries = n_priced = n_unpriced = failed = 0
    wall_s = 0.0
    for task in tasks:
        files = run.tasks[task]
        for usage in files.usage.values():
            queries += 1
            total.add(usage)
            if usage.calls <= usage.cached_calls:
                continue  # nothing paid: no word on whether the model is priced
            if usage.cost is not None:
                n_priced += 1
                priced.add(usage)
            else:
                n_unpriced += 1
        if files.summary is not None:
            wall_s += float(files.summary.seconds or 0.0)
            failed += int(files.summary.failed or 0)
    return Cost(
        queries=queries,
        calls=total.calls,
        cached_calls=total.cached_calls,
        prompt_tokens=total.prompt_tokens,
        completion_tokens=total.completion_tokens,
        cost=priced.cost or 0.0,  # never None: only priced queries were added
        priced=n_priced,
        llm_s=total.latency_s,
        wall_s=wall_s,
        failed=failed,
        total_cost=total.cost,
        unpriced=n_unpriced,
    )
