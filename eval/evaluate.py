"""Score a run against qrels with pytrec_eval, the way BEIR and R2MED report it.

A run is ``{query_id: {doc_id: score}}`` and qrels are ``{query_id: {doc_id: grade}}``, the
pytrec_eval formats. ``evaluate`` returns per-query values and per-task means named as BEIR
prints them ("NDCG@10", "MAP@10", "Recall@10", "P@10", "MRR@10", "MRR"), each mean being the
sum over evaluated queries divided by their number, rounded to 5 decimals (BEIR's
``EvaluateRetrieval.evaluate`` and R2MED's ``calculate_retrieval_metrics``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pytrec_eval

Run = dict[str, dict[str, float]]
Qrels = dict[str, dict[str, int]]
MissingPolicy = Literal["zero", "present"]

DEFAULT_K_VALUES: tuple[int, ...] = (1, 10, 25, 50, 100)
MISSING_POLICIES: tuple[str, ...] = ("zero", "present")
ROUND_DIGITS = 5

# Metric family -> (pytrec_eval measure, pytrec_eval per-query key prefix).
_CUT_MEASURES: dict[str, tuple[str, str]] = {
    "NDCG": ("ndcg_cut", "ndcg_cut_"),
    "MAP": ("map_cut", "map_cut_"),
    "Recall": ("recall", "recall_"),
    "P": ("P", "P_"),
}


def strictly_decreasing(run: Mapping[str, Mapping[str, float]]) -> Run:
    """Return a copy of ``run`` whose scores strictly decrease in (-score, doc_id) order.

    trec_eval and pytrec_eval order tied documents by doc id *descending*, which is rarely
    what the producer of the run meant. Worse, they hold scores as 32-bit floats, so scores
    that differ only beyond float32 precision (about 7 digits) are ties to them too. Here
    ties are broken by doc id ascending and made explicit: a score that is not strictly
    below its predecessor *in float32* is replaced by the next float32 below it
    (``np.nextafter``), the smallest step trec_eval can see. Other scores keep their exact
    value; only where a long tie chain reaches the next distinct score is that one pushed
    down as little, to keep the order. The order of documents is always
    (-original score, doc_id).
    """
    out: Run = {}
    for qid, docs in run.items():
        ranked = sorted(((float(s), d) for d, s in docs.items()), key=lambda t: (-t[0], t[1]))
        fixed: dict[str, float] = {}
        previous = np.float32(np.inf)
        for score, doc_id in ranked:
            with np.errstate(over="ignore"):
                as_seen = np.float32(score)
            if not (math.isfinite(score) and np.isfinite(as_seen)):
                raise ValueError(
                    f"query {qid!r}, doc {doc_id!r}: score is not finite in float32: {score}"
                )
            if as_seen >= previous:
                as_seen = np.nextafter(previous, np.float32(-np.inf))
                score = float(as_seen)
            fixed[doc_id] = score
            previous = as_seen
        out[qid] = fixed
    return out


def top_k(run: Mapping[str, Mapping[str, float]], k: int) -> Run:
    """The ``k`` best documents of every query, ties broken as in ``strictly_decreasing``."""
    return _cut(strictly_decreasing(run), k)


def metric_names(k_values: Iterable[int] = DEFAULT_K_VALUES) -> list[str]:
    """Metric names ``evaluate`` produces for ``k_values``, in reporting order."""
    ks = sorted(set(k_values))
    names = [f"{family}@{k}" for family in _CUT_MEASURES for k in ks]
    return names + [f"MRR@{k}" for k in ks] + ["MRR"]


@dataclass(frozen=True)
class Evaluation:
    """Scores of one run on one task.

    ``per_query`` holds every query that counts towards ``mean`` (under ``missing="zero"``
    this includes the unanswered queries, all metrics 0). ``mean`` is rounded to 5
    decimals, unrounded values stay in ``per_query``.
    """

    per_query: dict[str, dict[str, float]]
    mean: dict[str, float]
    missing: str
    n_qrels_queries: int
    n_evaluated: int
    n_missing: int
    n_extra: int = 0
    metrics: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """One line saying which queries the means are over."""
        if self.missing == "zero":
            how = f"{self.n_missing} missing scored 0"
        else:
            how = f"{self.n_missing} missing, absent ones left out as in pytrec_eval/R2MED"
        extra = f"; {self.n_extra} run queries without qrels ignored" if self.n_extra else ""
        return (
            f"averaged over {self.n_evaluated} of {self.n_qrels_queries} qrels queries "
            f"(missing={self.missing}: {how}){extra}"
        )


def evaluate(
    qrels: Mapping[str, Mapping[str, int]],
    run: Mapping[str, Mapping[str, float]],
    k_values: Iterable[int] = DEFAULT_K_VALUES,
    missing: MissingPolicy = "zero",
    ignore_identical_ids: bool = False,
) -> Evaluation:
    """Score ``run`` against ``qrels``: NDCG/MAP/Recall/P at each k, MRR@k and MRR.

    ``missing`` decides what a query of the qrels that the run does not answer (absent, or
    present with no documents) is worth:

    - ``"zero"`` (default): 0 for every metric, and it counts in the mean, so a run cannot
      gain by skipping hard queries.
    - ``"present"``: the average is over the queries the run contains, exactly what
      pytrec_eval, BEIR and R2MED's scripts compute. (pytrec_eval still scores a query whose
      run is an empty dict, as 0, so only absent queries drop out.)

    Queries whose qrels hold only grade-0 documents have nothing to find: pytrec_eval scores
    them 0 on every metric and BEIR/R2MED average them in, so we do too under both policies.

    Ties are broken with ``strictly_decreasing`` first, so the result does not depend on
    trec_eval's doc-id tie order. MRR@k is pytrec_eval's ``recip_rank`` on the run cut to its
    top k, averaged over the same queries as every other metric (BEIR's custom MRR@k divides
    by the number of qrels queries instead). ``ignore_identical_ids`` drops documents whose
    id equals the query id, as BEIR's evaluator does by default. It is off here, as in
    R2MED's BM25 script (src/eval_bench_BM25.py); R2MED's dense script goes through BEIR
    with it on, which only matters if a query id is also a doc id.
    """
    if missing not in MISSING_POLICIES:
        raise ValueError(f"missing must be one of {MISSING_POLICIES}, got {missing!r}")
    ks = sorted(set(int(k) for k in k_values))
    if not ks or ks[0] < 1:
        raise ValueError(f"k_values must be positive integers, got {list(k_values)}")

    qrels = {qid: dict(docs) for qid, docs in qrels.items()}
    run_in = {
        qid: {d: s for d, s in docs.items() if not (ignore_identical_ids and d == qid)}
        for qid, docs in run.items()
    }
    # Only queries with qrels are scored; pytrec_eval would ignore the others anyway.
    ranked = strictly_decreasing({qid: docs for qid, docs in run_in.items() if qid in qrels})

    measures = {f"{m}.{','.join(map(str, ks))}" for m, _ in _CUT_MEASURES.values()}
    evaluator = pytrec_eval.RelevanceEvaluator(qrels, measures | {"recip_rank"})
    raw = evaluator.evaluate(ranked)
    rr_evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"})
    rr_at = {k: rr_evaluator.evaluate(_cut(ranked, k)) for k in ks}

    names = metric_names(ks)
    per_query: dict[str, dict[str, float]] = {}
    for qid, values in raw.items():
        row = {
            f"{fam}@{k}": values[f"{prefix}{k}"]
            for fam, (_, prefix) in _CUT_MEASURES.items()
            for k in ks
        }
        row.update({f"MRR@{k}": rr_at[k][qid]["recip_rank"] for k in ks})
        row["MRR"] = values["recip_rank"]
        per_query[qid] = {name: row[name] for name in names}

    unanswered = [qid for qid in qrels if not ranked.get(qid)]
    if missing == "zero":
        for qid in unanswered:
            per_query[qid] = dict.fromkeys(names, 0.0)
    # Report queries in qrels order, which is the task's own order.
    per_query = {qid: per_query[qid] for qid in qrels if qid in per_query}

    n = len(per_query)
    mean = {
        name: round(sum(v[name] for v in per_query.values()) / n, ROUND_DIGITS) if n else 0.0
        for name in names
    }
    return Evaluation(
        per_query=per_query,
        mean=mean,
        missing=missing,
        n_qrels_queries=len(qrels),
        n_evaluated=n,
        n_missing=len(unanswered),
        n_extra=sum(1 for qid in run if qid not in qrels),
        metrics=names,
    )


def _cut(ranked: Run, k: int) -> Run:
    # ``ranked`` is already in rank order (dicts keep insertion order).
    return {qid: dict(list(docs.items())[:k]) for qid, docs in ranked.items()}
