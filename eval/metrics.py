"""Metric names, parsed in one place: "NDCG@10", "MAP@k", "Recall@k", "P@k", "MRR@k", "MRR".

`eval.evaluate` produces these names, and `eval.score`, `eval.compare` and `eval.report` take
them from users or files; all of them parse and refuse names here, so a name one accepts the
others accept too. No heavy imports, so that reading a name does not load pytrec_eval.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# The families with a cut-off, in reporting order; MRR follows them, with and without one.
CUT_FAMILIES: tuple[str, ...] = ("NDCG", "MAP", "Recall", "P")
FAMILIES: tuple[str, ...] = (*CUT_FAMILIES, "MRR")
DEFAULT_K_VALUES: tuple[int, ...] = (1, 10, 25, 50, 100)
HEADLINE = "NDCG@10"  # R2MED's headline metric: reported first, compared by default

# ASCII digits, no leading zero: "NDCG@010" or "NDCG@١٠" would name no metric evaluate makes
_NAME = re.compile(r"(NDCG|MAP|Recall|P|MRR)@(0|[1-9][0-9]*)|MRR")


def parse_metric(name: str) -> tuple[str, int | None]:
    """``"NDCG@10"`` -> ``("NDCG", 10)``, ``"MRR"`` -> ``("MRR", None)``.

    ValueError for a name no evaluation produces, and for a cut-off below 1.
    """
    match = _NAME.fullmatch(name)
    if not match:
        raise ValueError(f"unknown metric {name!r}: use NDCG@k, MAP@k, Recall@k, P@k, MRR@k or MRR")
    if match.group(2) is None:
        return "MRR", None
    k = int(match.group(2))
    if k < 1:
        raise ValueError(f"metric {name!r}: k must be at least 1")
    return match.group(1), k


def metric_name(text: str) -> str:
    """A metric as a user may spell it (``nDCG@10``, ``ndcg@10``, ``recall@100``) -> the name
    evaluations produce (``NDCG@10``); ValueError as `parse_metric` for no such metric."""
    family, at, k = text.strip().partition("@")
    canonical = {f.lower(): f for f in FAMILIES}.get(family.lower())
    name = f"{canonical}{at}{k}" if canonical is not None else text
    try:
        parse_metric(name)
    except ValueError as e:  # said of the name as the user spelt it
        raise ValueError(str(e).replace(repr(name), repr(text), 1)) from None
    return name


def parse_metrics(text: str) -> list[str]:
    """``"NDCG@10,mrr"`` -> ``["NDCG@10", "MRR"]`` (`metric_name`); unknown names and k < 1
    raise ValueError."""
    metrics = [m.strip() for m in text.split(",") if m.strip()]
    if not metrics:
        raise ValueError(f"no metrics in {text!r}")
    return [metric_name(m) for m in metrics]


def k_values_of(metrics: Iterable[str], default: int = 10) -> list[int]:
    """The cut-offs an evaluation needs to produce every one of ``metrics``, ascending.

    ``default`` stands in when none has one (plain "MRR" needs no cut-off, but an
    evaluation needs at least one).
    """
    ks = {k for _, k in map(parse_metric, metrics) if k is not None}
    return sorted(ks or {default})


def metric_names(k_values: Iterable[int] = DEFAULT_K_VALUES) -> list[str]:
    """Metric names ``eval.evaluate.evaluate_run`` produces for ``k_values``, in reporting order."""
    ks = sorted(set(k_values))
    names = [f"{family}@{k}" for family in CUT_FAMILIES for k in ks]
    return names + [f"MRR@{k}" for k in ks] + ["MRR"]
