"""What a retriever is: a `SearchRequest` in, a ranked ``{doc_id: score}`` out.

Every kind of retriever (BM25, dense, API-embedded, hybrid) and the factory in ``search``
import this module; it imports none of them, so the package has no import circle. The index
types are named for type checkers only: the adapters below work on whatever index they get.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from eval.plumbing.argtypes import check_fields

if TYPE_CHECKING:
    from .bm25 import BM25Index
    from .dense import DenseIndex


@dataclass(frozen=True)
class SearchRequest:
    query: str  # the user's original query
    expansion: str = ""  # LLM-generated text (HyDE passage, answer, ...)
    sparse_text: str | None = None  # what BM25 scores; None -> query
    # what a dense retriever embeds (behind its query instruction) and averages with the
    # expansion's embedding; None -> query (query2doc embeds "query[SEP]passage" as one text)
    dense_text: str | None = None
    # the task query this search serves: an embedding retriever that ignores identical ids (as
    # R2MED's dense evaluation does) never returns the document with this id
    query_id: str | None = None
    # the dense query is R2MED's [query, text] pair (src/utils.py L79-90): a generated text,
    # ``expansion``, averaged in even when empty, by a retriever that follows R2MED's rules
    # (dense.r2med_rules); elsewhere an empty expansion means none
    paired: bool = False

    def __post_init__(self) -> None:
        # a wrong-typed field from Python is one line now, not an error inside a retriever
        check_fields(self, "SearchRequest", {})


@runtime_checkable
class Retriever(Protocol):
    name: str

    def search(self, request: SearchRequest, k: int = 100) -> dict[str, float]:
        """Top-k {doc_id: score}, ordered by decreasing score."""
        ...


def search_all(
    retriever: Retriever, requests: Mapping[str, SearchRequest], k: int = 100
) -> dict[str, dict[str, float]]:
    """``{qid: top-k}`` for every request, batched when the retriever can batch."""
    many = getattr(retriever, "search_many", None)
    if many is not None:
        return many(requests, k)
    return {qid: retriever.search(r, k) for qid, r in requests.items()}


@dataclass
class BM25Retriever:
    index: BM25Index
    name: str = "bm25"

    def search(self, request: SearchRequest, k: int = 100) -> dict[str, float]:
        return self.index.search(request.sparse_text or request.query, k)

    def search_many(
        self, requests: Mapping[str, SearchRequest], k: int = 100
    ) -> dict[str, dict[str, float]]:
        queries = {qid: r.sparse_text or r.query for qid, r in requests.items()}
        return self.index.search_many(queries, k, progress=False)


@dataclass
class DenseRetriever:
    """Dense and API embedders alike: both are a `DenseIndex` with a different encoder.

    ``r2med_rules`` (dense.r2med_rules): a paired request's empty expansion is averaged in, as
    R2MED averages its empty texts; otherwise the query's own vector is searched.
    """

    index: DenseIndex
    name: str = "dense"
    r2med_rules: bool = False

    def search(self, request: SearchRequest, k: int = 100) -> dict[str, float]:
        return self.search_many({"q": request}, k)["q"]

    def search_many(
        self, requests: Mapping[str, SearchRequest], k: int = 100
    ) -> dict[str, dict[str, float]]:
        """Batched: all queries (and expansions) are encoded together."""
        reqs = list(requests.values())
        keep_empty = [r.paired and self.r2med_rules and not r.expansion for r in reqs]
        vecs = self.index.encode_requests(
            [r.dense_text if r.dense_text is not None else r.query for r in reqs],
            [r.expansion for r in reqs],
            # only when an empty text is averaged in: otherwise the call it always was
            **({"keep_empty": keep_empty} if any(keep_empty) else {}),
        )
        rankings = self.index.search_vectors(vecs, k, [r.query_id for r in reqs])
        return dict(zip(requests, rankings, strict=True))
