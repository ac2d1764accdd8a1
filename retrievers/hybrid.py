"""Hybrid retrieval: reciprocal-rank fusion of several retrievers' top lists, via ranx.

RRF (Cormack et al., 2009) scores a document ``sum_r 1 / (rrf_k + rank_r)`` over the member
lists it appears in (rank from 1), so only ranks matter and BM25 and cosine scores need no
normalisation. ``ranx.fuse(..., norm=None, method="rrf", params={"k": rrf_k})`` computes it.

Cost, measured on the 2-core dev box: the first fuse in a process pays ~2 s import plus ~4 s
of numba start-up (~30 s the very first time, before numba's on-disk cache exists); after
that ~34 ms per single-query fuse (building ranx's typed dicts dominates) against ~0.7 ms
per query when a whole batch is fused at once, so ``search_many`` fuses in one call.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .search import Retriever, SearchRequest

RRF_K = 60  # the paper's constant and ranx's default
# How deep each member list goes: RRF of k-deep lists would miss documents that one member
# ranks just below k but another ranks high.
MIN_DEPTH = 100


def rrf_fuse(
    runs: Sequence[dict[str, dict[str, float]]], k: int, rrf_k: int = RRF_K
) -> dict[str, dict[str, float]]:
    """Fuse runs ({qid: {doc: score}}) with ranx's RRF; the top k per query, best first.

    Ties in fused score are broken by doc id, so the order does not depend on dict order.
    """
    from ranx import Run, fuse

    qids = list(runs[0])
    with warnings.catch_warnings():
        # ranx's numba kernel warns about a harmless uint64 -> int64 cast on every call.
        warnings.simplefilter("ignore")
        # ranx needs every query in every run to hold a document: an empty list (BM25 with no
        # matching term) gets a placeholder id "" that fusion ranks alone and we drop below.
        fused = fuse(
            runs=[Run({q: dict(run[q]) or {"": 0.0} for q in qids}) for run in runs],
            norm=None,
            method="rrf",
            params={"k": rrf_k},
        ).to_dict()
    out = {}
    for q in qids:
        ranked = sorted(
            ((d, s) for d, s in fused.get(q, {}).items() if d), key=lambda x: (-x[1], x[0])
        )
        out[q] = dict(ranked[:k])
    return out


@dataclass
class HybridRetriever:
    members: list[Retriever]
    rrf_k: int = RRF_K
    depth: int = MIN_DEPTH
    name: str = field(default="")

    def __post_init__(self) -> None:
        if len(self.members) < 2:
            raise ValueError("a hybrid needs at least two retrievers")
        self.name = self.name or "+".join(m.name for m in self.members)

    def search(self, request: SearchRequest, k: int = 100) -> dict[str, float]:
        return self.search_many({"q": request}, k)["q"]

    def search_many(
        self, requests: dict[str, SearchRequest], k: int = 100
    ) -> dict[str, dict[str, float]]:
        depth = max(k, self.depth)
        runs = [_member_run(m, requests, depth) for m in self.members]
        return rrf_fuse(runs, k, self.rrf_k)


def _member_run(
    retriever: Retriever, requests: dict[str, SearchRequest], k: int
) -> dict[str, dict[str, float]]:
    many = getattr(retriever, "search_many", None)
    if many is not None:
        return many(requests, k)
    return {qid: retriever.search(r, k) for qid, r in requests.items()}
