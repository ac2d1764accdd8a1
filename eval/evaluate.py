"""Score a run against qrels with pytrec_eval, the way BEIR and R2MED report it.

A run is ``{query_id: {doc_id: score}}`` and qrels are ``{query_id: {doc_id: grade}}``, the
pytrec_eval formats. ``evaluate`` returns per-query values and per-task means named as BEIR
prints them ("NDCG@10", "MAP@10", "Recall@10", "P@10", "MRR@10", "MRR"), each mean being the
sum over evaluated queries divided by their number, rounded to 5 decimals (BEIR's
``EvaluateRetrieval.evaluate`` and R2MED's ``calculate_retrieval_metrics``).

Tie order. trec_eval (and pytrec_eval, which embeds it) stores a document's score as a C
``float`` and ranks by that float32 score descending, ties by doc id *descending* (``strcmp``
on the UTF-8 bytes, which is Python's ``str`` order). ``ties="trec"``, the default, is exactly
that order: every metric equals pytrec_eval's on the raw scores, and MRR@k cuts the run at k in
that same order. ``ties="ascending"`` breaks ties by doc id ascending instead and makes the
scores strictly decreasing in float32, so the result no longer depends on trec_eval's rule.
Both are verified against pytrec_eval in tests/eval/test_evaluate.py.

Present. A query is *present* in a run iff its ranking holds at least one document
(``present_run``): the only thing a TREC run file can say about a query, so a metrics.json
and ``eval.score`` on the run.trec written beside it always agree. A query that failed is not
in the run, and a ranking that came back empty is not present either; ``missing`` decides what
both are worth (0, or left out). ``evaluate`` is the one place this is decided.

Grades. Negative grades are scored as 0 (judged non-relevant) before pytrec_eval sees them:
for nDCG, MAP, P, recall and MRR that changes nothing (tested), while a query judged only by
grades of -2 or below crashes pytrec_eval with a segfault unless it is the first query.
Grades must be integers in ``eval.datasets.GRADE_MIN .. GRADE_MAX``: beyond a C ``int``
pytrec_eval raises SystemError, and below that it allocates memory in proportion to the
largest grade.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import pytrec_eval

from eval.datasets import GRADE_MAX, GRADE_MIN
from eval.metrics import CUT_FAMILIES, DEFAULT_K_VALUES, metric_names
from eval.plumbing.quoting import quoted

Run = dict[str, dict[str, float]]
Qrels = dict[str, dict[str, int]]
MissingPolicy = Literal["zero", "present"]
TieOrder = Literal["trec", "ascending"]

MISSING_POLICIES: tuple[str, ...] = ("zero", "present")
TIE_ORDERS: tuple[str, ...] = ("trec", "ascending")
ROUND_DIGITS = 5

# Metric family -> (pytrec_eval measure, pytrec_eval per-query key prefix); in the order of
# eval.metrics, which names what we produce (a family missing here fails at import).
_PYTREC_MEASURES: dict[str, tuple[str, str]] = {
    "NDCG": ("ndcg_cut", "ndcg_cut_"),
    "MAP": ("map_cut", "map_cut_"),
    "Recall": ("recall", "recall_"),
    "P": ("P", "P_"),
}
_CUT_MEASURES = {family: _PYTREC_MEASURES[family] for family in CUT_FAMILIES}


def strictly_decreasing(run: Mapping[str, Mapping[str, float]], ties: TieOrder = "trec") -> Run:
    """Return a copy of ``run`` with every query's documents in rank order.

    ``ties="trec"`` (default): the order trec_eval evaluates, float32 score descending and
    ties by doc id descending; scores are left exactly as they are, since pytrec_eval orders
    them itself and any change could only move the result away from trec_eval's.

    ``ties="ascending"``: ties broken by doc id ascending and made explicit. trec_eval sees
    scores as 32-bit floats, so scores that differ only beyond float32 precision (about 7
    digits) are ties to it too; a score that is not strictly below its predecessor *in
    float32* is replaced by the next float32 below it (``np.nextafter``), the smallest step
    trec_eval can see. Other scores keep their exact value; only where a long tie chain
    reaches the next distinct score is that one pushed down as little, to keep the order.
    The order of documents is (-original score, doc_id).

    Raises ValueError naming query and doc for a score that is not finite in float32.
    """
    _check_ties(ties)
    out: Run = {}
    for qid, docs in run.items():
        if ties == "trec":
            out[qid] = dict(_trec_order(qid, docs))
            continue
        ranked = sorted(((d, float(s)) for d, s in docs.items()), key=lambda t: (-t[1], t[0]))
        out[qid] = made_explicit(qid, ranked)
    return out


def made_explicit(qid: str, ranked: Iterable[tuple[str, float]]) -> dict[str, float]:
    """``ranked`` (doc id, score), in rank order, with every score that is not strictly below
    the one before it in float32 set to the next float32 below that one (``np.nextafter``):
    the order every tool that ranks by score sees, whatever its tie rule or float width."""
    fixed: dict[str, float] = {}
    previous = np.float32(np.inf)
    for doc_id, score in ranked:
        as_seen = _float32(qid, doc_id, score)
        if as_seen >= previous:
            as_seen = np.nextafter(previous, np.float32(-np.inf))
            score = float(as_seen)
        fixed[doc_id] = float(score)
        previous = as_seen
    return fixed


def _trec_order(qid: str, docs: Mapping[str, float]) -> list[tuple[str, float]]:
    # (doc id, raw score) by float32 score descending, then doc id descending; qid is only
    # there to name the query in the error for a score trec_eval cannot hold.
    keyed = [(_float32(qid, d, s), d, float(s)) for d, s in docs.items()]
    keyed.sort(key=lambda t: (t[0], t[1]), reverse=True)
    return [(d, s) for _, d, s in keyed]


def _float32(qid: str, doc_id: str, score: float) -> np.float32:
    # What trec_eval stores: the C double -> float conversion rounds to nearest, as numpy does.
    score = float(score)
    with np.errstate(over="ignore"):
        as_seen = np.float32(score)
    if not (math.isfinite(score) and np.isfinite(as_seen)):
        raise ValueError(
            f"query {quoted(qid)}, doc {quoted(doc_id)}: score is not finite in float32 "
            f"(trec_eval's precision): {score}"
        )
    return as_seen


def _check_ties(ties: str) -> None:
    if ties not in TIE_ORDERS:
        raise ValueError(f"ties must be one of {TIE_ORDERS}, got {ties!r}")


def top_k(run: Mapping[str, Mapping[str, float]], k: int, ties: TieOrder = "trec") -> Run:
    """The ``k`` best documents of every query in ``strictly_decreasing(run, ties)`` order."""
    return _cut(strictly_decreasing(run, ties), k)


def pad_run(run: Mapping[str, Mapping[str, float]], doc_ids: Sequence[str], depth: int) -> Run:
    """Fill every ranking shorter than ``depth`` with documents from ``doc_ids``, in its order.

    R2MED's BM25 script scores every document and keeps the top 100 of the stable sort, so
    when fewer than 100 match, zero-score documents fill the list in corpus order; pass the
    corpus's ids in corpus order to get the same lists. Documents already ranked are skipped.
    The pads score 0.0 when every ranked score is above 0 in float32, as R2MED's do, else the
    next float32 below the lowest ranked score, so pads always rank last. Queries absent from
    ``run`` (failed ones) stay absent; an empty ranking is padded like any short one, so it
    becomes present, as in R2MED's script, which ranks every document for every query.
    Rankings of ``depth`` or more documents are returned unchanged.
    """
    if depth < 0:
        raise ValueError(f"depth must be >= 0, got {depth}")
    out: Run = {}
    for qid, docs in run.items():
        padded = dict(docs)
        if len(padded) < depth:
            seen = [_float32(qid, d, s) for d, s in docs.items()]
            if all(s > 0 for s in seen):
                pad = 0.0
            else:
                pad = float(np.nextafter(min(seen), np.float32(-np.inf)))
            for doc_id in doc_ids:
                if len(padded) >= depth:
                    break
                padded.setdefault(doc_id, pad)
        out[qid] = padded
    return out


@dataclass(frozen=True)
class Evaluation:
    """Scores of one run on one task.

    ``per_query`` holds every query that counts towards ``mean`` (under ``missing="zero"``
    this includes the missing queries, all metrics 0). ``n_missing`` counts the qrels queries
    not present in the run (absent, failed, or ranked with no documents). ``mean`` is rounded
    to 5 decimals (``task_mean``), unrounded values stay in ``per_query``.
    """

    per_query: dict[str, dict[str, float]]
    mean: dict[str, float]
    missing: str
    n_qrels_queries: int
    n_evaluated: int
    n_missing: int
    n_extra: int = 0
    metrics: list[str] = field(default_factory=list)
    ties: str = "trec"

    def describe(self) -> str:
        """One line saying which queries the means are over and how ties were ordered."""
        if self.missing == "zero":
            how = f"{self.n_missing} missing scored 0"
        else:
            how = f"{self.n_missing} missing left out, as in pytrec_eval/R2MED"
        extra = f"; {self.n_extra} run queries without qrels ignored" if self.n_extra else ""
        order = "trec_eval's, doc id descending" if self.ties == "trec" else "doc id ascending"
        return (
            f"averaged over {self.n_evaluated} of {self.n_qrels_queries} qrels queries "
            f"(missing={self.missing}: {how}){extra}; ties={self.ties} ({order})"
        )


def evaluate_run(
    qrels: Mapping[str, Mapping[str, int]],
    run: Mapping[str, Mapping[str, float]],
    k_values: Iterable[int] = DEFAULT_K_VALUES,
    missing: MissingPolicy = "zero",
    ignore_identical_ids: bool = False,
    ties: TieOrder = "trec",
) -> Evaluation:
    """Score ``run`` against ``qrels``: NDCG/MAP/Recall/P at each k, MRR@k and MRR.

    ``missing`` decides what a query of the qrels that is not present in the run (absent, or
    ranked with no documents: see the module docstring) is worth:

    - ``"zero"`` (default): 0 for every metric, and it counts in the mean, so a run cannot
      gain by skipping hard queries.
    - ``"present"``: the average is over the present queries, what pytrec_eval, BEIR and
      R2MED's scripts compute on a run file. (Called on a dict, pytrec_eval would also score
      a query whose ranking is empty, as 0; a run file cannot hold one, so it is left out
      here too, and a run scores the same from its dict and from its run.trec.)

    Queries whose qrels hold only grade-0 documents have nothing to find: pytrec_eval scores
    them 0 on every metric and BEIR/R2MED average them in, so we do too under both policies.

    ``ties`` is the tie order (see the module docstring): ``"trec"`` scores exactly what
    pytrec_eval scores on the raw run; ``"ascending"`` breaks ties by doc id ascending through
    ``strictly_decreasing``. MRR@k is pytrec_eval's ``recip_rank`` on the run cut to its top k
    in that order, averaged over the same queries as every other metric (BEIR's custom MRR@k
    divides by the number of qrels queries instead). Negative grades count as 0; a grade
    outside ``GRADE_MIN .. GRADE_MAX`` or a score that is not finite in float32 raises
    ValueError naming the query and doc.

    ``ignore_identical_ids`` drops documents whose id equals the query id, as BEIR's
    evaluator does by default. It is off here, as in R2MED's BM25 script
    (src/eval_bench_BM25.py); R2MED's dense script goes through BEIR with it on, which only
    matters if a query id is also a doc id.
    """
    if missing not in MISSING_POLICIES:
        raise ValueError(f"missing must be one of {MISSING_POLICIES}, got {missing!r}")
    _check_ties(ties)
    ks = sorted(set(int(k) for k in k_values))
    if not ks or ks[0] < 1:
        raise ValueError(f"k_values must be positive integers, got {list(k_values)}")

    qrels = {qid: {d: _grade(qid, d, g) for d, g in docs.items()} for qid, docs in qrels.items()}
    run_in = present_run(
        {
            qid: {d: s for d, s in docs.items() if not (ignore_identical_ids and d == qid)}
            for qid, docs in run.items()
        }
    )
    # Only queries with qrels are scored; pytrec_eval would ignore the others anyway.
    ranked = strictly_decreasing({qid: docs for qid, docs in run_in.items() if qid in qrels}, ties)

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

    unanswered = [qid for qid in qrels if qid not in ranked]
    if missing == "zero":
        for qid in unanswered:
            per_query[qid] = dict.fromkeys(names, 0.0)
    # Report queries in qrels order, which is the task's own order.
    per_query = {qid: per_query[qid] for qid in qrels if qid in per_query}

    n = len(per_query)
    mean = {name: task_mean([v[name] for v in per_query.values()]) for name in names}
    return Evaluation(
        per_query=per_query,
        mean=mean,
        missing=missing,
        n_qrels_queries=len(qrels),
        n_evaluated=n,
        n_missing=len(unanswered),
        n_extra=sum(1 for qid in run_in if qid not in qrels),
        metrics=names,
        ties=ties,
    )


def present_run(run: Mapping[str, Mapping[str, float]]) -> Run:
    """The queries of ``run`` that are present: those ranking at least one document.

    The one definition of "present" (module docstring); a failed query is simply not in
    ``run``. Order and scores are kept.
    """
    return {qid: dict(docs) for qid, docs in run.items() if docs}


def task_mean(values: Sequence[float]) -> float:
    """The mean a task reports: the sum in the order given over the count, rounded to 5
    decimals (BEIR/R2MED); 0.0 for no values. Every table that re-averages per-query scores
    uses it, so it rounds exactly as metrics.json did."""
    return round(sum(values) / len(values), ROUND_DIGITS) if values else 0.0


def _grade(qid: str, doc_id: str, grade: int) -> int:
    if isinstance(grade, bool) or not isinstance(grade, (int, np.integer)):
        raise ValueError(
            f"query {quoted(qid)}, doc {quoted(doc_id)}: grade {quoted(grade)} is not an integer"
        )
    if not GRADE_MIN <= grade <= GRADE_MAX:
        where = f"query {quoted(qid)}, doc {quoted(doc_id)}"
        raise ValueError(f"{where}: grade {grade} is outside {GRADE_MIN} .. {GRADE_MAX}")
    # A query judged only by negative grades segfaults pytrec_eval; as 0 it scores 0, and
    # every metric of every other query is unchanged (tests/eval/test_evaluate.py).
    return max(int(grade), 0)


def _cut(ranked: Run, k: int) -> Run:
    # ``ranked`` is already in rank order (dicts keep insertion order).
    return {qid: dict(list(docs.items())[:k]) for qid, docs in ranked.items()}
