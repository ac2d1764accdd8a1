"""Hybrid retrieval: fusion of several retrievers' top lists, via ranx.

Three fusion methods, all usable without training data (ranx's others either learn from
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
from .config import FUSION_METHODS, MIN_DEPTH, RRF_K

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
) -> dict[str, dict[str, float]]:
    """Fuse runs ({qid: {doc: score}}) with ranx; the top k per query, best first.

    ``rrf_k`` is used by ``rrf`` only. Ties in fused score are broken by doc id, so the order
    does not depend on dict order.
    """
    if method not in _RANX:
        raise ValueError(f"unknown fusion method {method!r}; choose from {', '.join(_RANX)}")
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


@dataclass
class HybridRetriever:
    members: list[Retriever]
    method: str = "rrf"
    rrf_k: int = RRF_K
    depth: int = MIN_DEPTH
    name: str = field(default="")

    def __post_init__(self) -> None:
        if len(self.members) < 2:
            raise ValueError("a hybrid needs at least two retrievers")
        if self.method not in FUSION_METHODS:
            raise ValueError(
                f"unknown fusion method {self.method!r}; choose from {', '.join(FUSION_METHODS)}"
            )
        self.name = self.name or "+".join(m.name for m in self.members)

    def search(self, request: SearchRequest, k: int = 100) -> dict[str, float]:
        return self.search_many({"q": request}, k)["q"]

    def search_many(
        self, requests: Mapping[str, SearchRequest], k: int = 100
    ) -> dict[str, dict[str, float]]:
        depth = max(k, self.depth)
        runs = [search_all(m, requests, depth) for m in self.members]
        return fuse_runs(runs, k, self.method, self.rrf_k)
