"""Retrievers over a task corpus: BM25 variants, dense and API embedders, and their fusion.

The package exports `RetrieverConfig`, `build_retriever` and `SearchRequest`, loaded on first
use (PEP 562), so importing the package costs nothing and torch / sentence-transformers /
litellm / ranx load only when the retriever that needs them is built or searched:

    from retrievers import RetrieverConfig, SearchRequest, build_retriever

    bm25 = build_retriever(RetrieverConfig(spec="bm25"), task, cache_dir)
    bm25.search(SearchRequest(query="why do fingers wrinkle"), 10)  # doc id -> score

The modules:

* ``retrievers.search``: `build_retriever(config, task, cache_dir)`, and, re-exported for
  callers, `SearchRequest`, `Retriever`, `RetrieverConfig`, `RETRIEVERS`.
* ``retrievers.config``: `RetrieverConfig` and its parts `BM25Config`, `DenseConfig`,
  `ApiEmbedConfig`, `FusionConfig` — every retriever setting, its default, its check and its
  vocabulary (methods, dtypes, devices, ...). Cheap to import: no numpy.
* ``retrievers.base``: `SearchRequest`, the `Retriever` protocol, the BM25/dense adapters.
* ``retrievers.hybrid``: `HybridRetriever`, `fuse_runs` / `rrf_fuse`.
* ``retrievers.bm25`` / ``retrievers.dense`` / ``retrievers.api_embed``: the indexes.

Imports run one way: ``config`` and ``base`` import no other retriever module; each kind
(bm25, dense, api_embed, hybrid) imports only those two (and the helpers analyzer and
fingerprint; api_embed builds on dense's index); ``search``, the factory, imports the kinds.
Adding a kind of retriever: its module, a spec form in ``config.RETRIEVERS`` and
``config.parse_spec``, a sub-config if it has settings, and one branch in
``search._build_one``.
"""

from __future__ import annotations

from eval.plumbing.lazy import lazy_face

# module -> the public names defined there, each under its own name
__all__, __getattr__, __dir__ = lazy_face(
    globals(),
    {
        "retrievers.config": (
            "RetrieverConfig",
            "BM25Config",
            "DenseConfig",
            "ApiEmbedConfig",
            "FusionConfig",
        ),
        "retrievers.search": ("build_retriever",),
        "retrievers.base": ("SearchRequest", "Retriever"),
    },
)
