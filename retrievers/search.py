"""The one retriever interface the agents code against, and the factory that builds retrievers.

``build_retriever(spec, task, cache_dir)`` understands:

* ``bm25``: BM25 over the task corpus (options ``bm25_method``, ``k1``, ``b``); it scores
  ``request.sparse_text`` when given, else ``request.query``.
* ``dense`` / ``dense:<model name or path>``: a sentence-transformers embedder (default
  all-MiniLM-L6-v2, bundled offline); options ``dtype``, ``batch_size``, ``max_length``.
* ``api:<litellm embedding model>``, e.g. ``api:text-embedding-3-large``; options
  ``api_batch_size`` and ``embed_kwargs`` (a dict passed to every litellm call).
* any ``+``-joined combination, e.g. ``bm25+dense``: reciprocal-rank fusion of the members
  (options ``rrf_k``, ``rrf_depth``).

Dense retrievers embed instruction + query and, when ``request.expansion`` is non-empty,
average that with the expansion's embedding, as R2MED's HyDE evaluation does (see dense.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from eval.datasets import Task

from .bm25 import BM25Index, build_bm25
from .dense import DEFAULT_DENSE_MODEL, DenseIndex


@dataclass(frozen=True)
class SearchRequest:
    query: str  # the user's original query
    expansion: str = ""  # LLM-generated text (HyDE passage, answer, ...)
    sparse_text: str | None = None  # what BM25 scores; None -> query


@runtime_checkable
class Retriever(Protocol):
    name: str

    def search(self, request: SearchRequest, k: int = 100) -> dict[str, float]:
        """Top-k {doc_id: score}, ordered by decreasing score."""
        ...


RETRIEVERS: dict[str, str] = {
    "bm25": "BM25 over the corpus (bm25q by default, as R2MED scores it)",
    "dense": f"sentence-transformers embedder, default {DEFAULT_DENSE_MODEL} (offline)",
    "dense:<model>": "sentence-transformers embedder by hub name or local path",
    "api:<model>": "litellm embedding model, e.g. api:text-embedding-3-large",
    "<a>+<b>[+...]": "reciprocal-rank fusion of the listed retrievers, e.g. bm25+dense",
}


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
    index: DenseIndex
    name: str = "dense"

    def search(self, request: SearchRequest, k: int = 100) -> dict[str, float]:
        return self.search_many({"q": request}, k)["q"]

    def search_many(
        self, requests: Mapping[str, SearchRequest], k: int = 100
    ) -> dict[str, dict[str, float]]:
        """Batched: all queries (and expansions) are encoded together."""
        reqs = list(requests.values())
        vecs = self.index.encode_requests([r.query for r in reqs], [r.expansion for r in reqs])
        return dict(zip(requests, self.index.search_vectors(vecs, k), strict=True))


def check_spec(spec: str) -> None:
    """Raise ValueError for a retriever spec `build_retriever` would refuse, before any work."""
    for part in (p.strip() for p in spec.split("+")):
        kind, _, arg = part.partition(":")
        if not ((kind == "bm25" and not arg) or kind == "dense" or (kind == "api" and arg)):
            raise ValueError(f"unknown retriever {part!r}; valid: {', '.join(RETRIEVERS)}")


def build_retriever(
    spec: str,
    task: Task,
    cache_dir: Path | None,
    progress: bool = True,
    **options: Any,
) -> Retriever:
    """Build the retriever ``spec`` names over ``task``'s corpus (see the module docstring)."""
    check_spec(spec)
    parts = [p.strip() for p in spec.split("+")]
    if len(parts) > 1:
        from .hybrid import MIN_DEPTH, RRF_K, HybridRetriever

        members = [_build_one(p, task, cache_dir, progress, options) for p in parts]
        return HybridRetriever(
            members,
            rrf_k=options.get("rrf_k", RRF_K),
            depth=options.get("rrf_depth", MIN_DEPTH),
            name=spec,
        )
    return _build_one(parts[0], task, cache_dir, progress, options)


def _build_one(
    spec: str, task: Task, cache_dir: Path | None, progress: bool, options: dict[str, Any]
) -> Retriever:
    kind, _, arg = spec.partition(":")
    if kind == "bm25" and not arg:
        index = build_bm25(
            task.corpus,
            method=options.get("bm25_method", "bm25q"),
            k1=options.get("k1"),
            b=options.get("b"),
            cache_dir=cache_dir,
            progress=progress,
        )
        return BM25Retriever(index, name=spec)
    if kind == "dense":
        from .dense import build_dense

        dense_opts = {o: options[o] for o in ("dtype", "batch_size", "max_length") if o in options}
        index = build_dense(
            task.corpus,
            model=arg or DEFAULT_DENSE_MODEL,
            task_name=task.name,
            cache_dir=cache_dir,
            progress=progress,
            **dense_opts,
        )
        return DenseRetriever(index, name=spec)
    if kind == "api" and arg:
        from .api_embed import build_api_dense

        index = build_api_dense(
            task.corpus,
            model=arg,
            task_name=task.name,
            cache_dir=cache_dir,
            progress=progress,
            batch_size=options.get("api_batch_size", 64),
            **options.get("embed_kwargs", {}),
        )
        return DenseRetriever(index, name=spec)
    raise ValueError(f"unknown retriever {spec!r}; valid: {', '.join(RETRIEVERS)}")
