"""Hybrid retrieval: fusion of several retrievers' top lists, via ranx, and DIVER's merge.

Three ranx fusion methods, all usable without training data (ranx's others either learn from
qrels — bayesfuse, mapfuse, posfuse, probfuse, segfuse, slidefuse — or need per-run weights
that someone would have to tune — wsum, wmnz, mixed, w_bordafuse, w_condorcet):

* ``rrf`` (default): reciprocal-rank fusion (Cormack et al., 2009) scores a document
  ``sum_r 1 / (rrf_k + rank_r)`` over the member lists it appears in (rank from 1), so only
  ranks matter and BM25 and cosine scores need no normalisation;
  ``ranx.fuse(..., norm=None, method="rrf", params={"k": rrf_k})``.
* ``combsum``: CombSUM (Fox and Shaw, 1993) of min-max normalised scores: each list is
  rescaled to [0, 1] per query, then a document's scores are summed (absent counts 0).
* ``combmnz``: CombMNZ, the same sum times the number of lists the document is in, which
  favours documents several retrievers agree on.

Min-max is the normalisation the score methods use because it is ranx's default and the
usual one for BM25 + dense hybrids; it is part of the method, not a separate setting.

And one that is not ranx's, because its arithmetic differs from ranx's min-max where it moves
a ranking:

* ``diver-minmax``: DIVER's BM25 + dense merge (AQ-MedAI/Diver, ``merge_bm25_dense_score`` in
  ``Retriever/merge_scores.py`` at 2ecd1fc L10-42, the file's last version before 02b1381
  replaced it), `diver_minmax`. Per query, each list is min-max normalised over its own
  scores, and a document missing from a list takes that list's raw score 0 before it is
  normalised (``dict.get(did, 0)``, L36-37): below a BM25 list whose lowest score is above 0,
  it normalises to less than 0, where ranx's CombSUM counts it 0. A list whose scores are all
  equal normalises to 0. The merged score is ``weight * second + (1 - weight) * first``
  (``wgt_dense`` 0.5, L10, L95; DIVER's own script gives 0.7 to BRIGHT's leetcode, pony, aops
  and theoremqa tasks, L96-97), sorted best first and cut to the top ``keep`` (100, L42).
  DIVER's ties fall in the iteration order of a Python ``set`` of doc ids (L32), which string
  hashing randomises per process; here they are broken by doc id, as the ranx methods' are.
  DIVER merges each retriever's top 1,000 (``Retriever/retrievers.py`` L143, L270); the
  member lists are ``fusion.depth`` deep here (``--fusion-depth``, 100 by default, and never
  less than the run's ``--depth``), and the depth moves each list's minimum.

Cost, measured on the 2-core dev box: the first fuse in a process pays ~2 s import plus ~4 s
of numba start-up (~30 s the very first time, before numba's on-disk cache exists); after
that ~34 ms per single-query fuse (building ranx's typed dicts dominates) against ~0.7 ms
per query when a whole batch is fused at once, so ``search_many`` fuses in one call.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from .base import Retriever, SearchRequest, search_all
from .settings import DIVER_KEEP, DIVER_WEIGHT, FUSION_METHODS, MIN_DEPTH, RRF_K

# (ranx normalisation, ranx method) for each of config.FUSION_METHODS.
_RANX: dict[str, tuple[str | None, str]] = {
    "rrf": (None, "rrf"),
    "combsum": ("min-max", "sum"),
    "combmnz": ("min-max", "mnz"),
}


def fuse_runs(
    runs: Sequence[Mapping[str, Mapping[str, float]]],
    k: int,
    method: str = "rrf",
    rrf_k: int = RRF_K,
    weight: float = DIVER_WEIGHT,
    keep: int = DIVER_KEEP,
) -> dict[str, dict[str, float]]:
    """Fuse runs ({qid: {doc: score}}) with ranx (or DIVER's merge); the top k per query, best
    first.

    ``rrf_k`` is used by ``rrf`` only, ``weight`` and ``keep`` by ``diver-minmax`` only (which
    keeps the top ``min(k, keep)``). Ties in fused score are broken by doc id, so the order
    does not depend on dict order.
    """
    if method == "diver-minmax":
        return diver_minmax(runs, min(k, keep), weight)
    if method not in _RANX:
        known = ", ".join(FUSION_METHODS)
        raise ValueError(f"unknown fusion method {method!r}; choose from {known}")
    # ranx costs seconds to import (numba); only a hybrid pays it.
    from ranx import Run, fuse

    norm, ranx_method = _RANX[method]
    qids = list(runs[0])
    with warnings.catch_warnings():
        # ranx's numba kernel warns about a harmless uint64 -> int64 cast on every call.
        warnings.simplefilter("ignore")
        # ranx needs every query in every run to hold a document: an empty list (BM25 with no
        # matching term) gets a placeholder id "" that fusion ranks alone and we drop below.
        fused = fuse(
            runs=[Run({q: dict(run[q]) or {"": 0.0} for q in qids}) for run in runs],
            norm=norm,
            method=ranx_method,
            params={"k": rrf_k} if method == "rrf" else {},
        ).to_dict()
    out = {}
    for q in qids:
        ranked = sorted(
            ((d, s) for d, s in fused.get(q, {}).items() if d), key=lambda x: (-x[1], x[0])
        )
        out[q] = dict(ranked[:k])
    return out


def rrf_fuse(
    runs: Sequence[Mapping[str, Mapping[str, float]]], k: int, rrf_k: int = RRF_K
) -> dict[str, dict[str, float]]:
    """Reciprocal-rank fusion of ``runs``: `fuse_runs` with ``method="rrf"``."""
    return fuse_runs(runs, k, "rrf", rrf_k)


def diver_minmax(
    runs: Sequence[Mapping[str, Mapping[str, float]]], k: int, weight: float = DIVER_WEIGHT
) -> dict[str, dict[str, float]]:
    """DIVER's merge of two runs, the first BM25's and the second the dense retriever's
    (``merge_bm25_dense_score``, merge_scores.py at 2ecd1fc L10-42): the top k per query,
    best first, ties by doc id. ``weight`` is the second's (``wgt_dense``)."""
    if len(runs) != 2:
        raise ValueError(f"diver-minmax merges two runs (BM25's and dense), got {len(runs)}")
    first, second = runs
    out = {}
    for q in dict.fromkeys([*first, *second]):
        merged = merge_minmax(first.get(q, {}), second.get(q, {}), weight)
        out[q] = dict(sorted(merged.items(), key=lambda x: (-x[1], x[0]))[:k])
    return out


def merge_minmax(
    bm25: Mapping[str, float], dense: Mapping[str, float], wgt_dense: float
) -> dict[str, float]:
    """One query's merged scores, each document's as L24-39 compute it (unsorted)."""
    # Python floats, as DIVER's json.load gives them: no float32 arithmetic below
    bm25 = {d: float(s) for d, s in bm25.items()}
    dense = {d: float(s) for d, s in dense.items()}
    wgt_bm25 = 1 - wgt_dense
    dense_min, dense_max = (min(dense.values()), max(dense.values())) if dense else (0, 0)
    bm25_min, bm25_max = (min(bm25.values()), max(bm25.values())) if bm25 else (0, 0)
    dense_span, bm25_span = dense_max - dense_min, bm25_max - bm25_min
    merged = {}
    for did in dict.fromkeys([*dense, *bm25]):
        # a list's missing document is its raw 0, normalised like any score: below 0 where
        # the list's lowest score is above 0 (L36-37); an all-equal list normalises to 0
        dense_norm = (dense.get(did, 0) - dense_min) / dense_span if dense_span != 0 else 0
        bm25_norm = (bm25.get(did, 0) - bm25_min) / bm25_span if bm25_span != 0 else 0
        merged[did] = float(dense_norm * wgt_dense + bm25_norm * wgt_bm25)
    return merged


@dataclass
class HybridRetriever:
    members: list[Retriever]
    method: str = "rrf"
    rrf_k: int = RRF_K
    depth: int = MIN_DEPTH
    name: str = field(default="")
    weight: float = DIVER_WEIGHT  # diver-minmax: the second member's weight
    keep: int = DIVER_KEEP  # diver-minmax: the merged list's length

    def __post_init__(self) -> None:
        if len(self.members) < 2:
            raise ValueError("a hybrid needs at least two retrievers")
        if self.method not in FUSION_METHODS:
            raise ValueError(
                f"unknown fusion method {self.method!r}; choose from {', '.join(FUSION_METHODS)}"
            )
        if self.method == "diver-minmax" and len(self.members) != 2:
            raise ValueError(f"diver-minmax merges two retrievers, got {len(self.members)}")
        self.name = self.name or "+".join(m.name for m in self.members)

    def search(self, request: SearchRequest, k: int = 100) -> dict[str, float]:
        return self.search_many({"q": request}, k)["q"]

    def search_many(
        self, requests: Mapping[str, SearchRequest], k: int = 100
    ) -> dict[str, dict[str, float]]:
        depth = max(k, self.depth)
        runs = [search_all(m, requests, depth) for m in self.members]
        return fuse_runs(runs, k, self.method, self.rrf_k, self.weight, self.keep)
