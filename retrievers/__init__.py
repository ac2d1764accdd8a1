"""Retrievers over a task corpus: BM25 variants, dense and API embedders, and their fusion.

The package exports `RetrieverConfig`, `build_retriever` and `SearchRequest`, loaded on first
use (PEP 562), so importing the package costs nothing and torch / sentence-transformers /
litellm / ranx load only when the retriever that needs them is built or searched:

    from retrievers import RetrieverConfig, SearchRequest, build_retriever

    bm25 = build_retriever(RetrieverConfig(spec="bm25"), task, cache_dir)
    bm25.search(SearchRequest(query="why do fingers wrinkle"), 10)  # doc id -> score

The modules:

* ``retrievers.search``: `build_retriever(config, task, cache_dir)` and `check_models(config)`.
* ``retrievers.kinds``: `RETRIEVER_KINDS`, one `RetrieverKind` row per kind a spec can name
  (bm25, dense, api, remote): its spec forms and help (`RETRIEVERS`), its settings, its checks
  and its builder; `parse_spec`. Cheap to import: a builder imports its modules when called.
* ``retrievers.config``: `RetrieverConfig`, the spec and a section per kind with settings, plus
  fusion's. Cheap to import: no numpy.
* ``retrievers.settings``: those sections, `BM25Config`, `DenseConfig`, `ApiEmbedConfig`,
  `FusionConfig`: every setting, its default, its check, its flag, and their vocabulary
  (methods, dtypes, devices, ...). Cheap to import: no numpy.
* ``retrievers.base``: `SearchRequest`, the `Retriever` protocol, the BM25/dense adapters.
* ``retrievers.hybrid``: `HybridRetriever`, `fuse_runs` / `rrf_fuse`.
* ``retrievers.bm25`` / ``retrievers.dense`` / ``retrievers.api_embed`` / ``retrievers.remote``:
  the indexes.

Imports run one way, with no circle: ``settings`` imports only ``families`` (the dense families
it checks a name against); each kind's module (bm25, dense, api_embed, remote, hybrid) imports
``settings``, ``base`` and helpers (analyzer, encoders, families, model_source; api_embed builds
on dense's index), never ``config``; ``kinds`` imports ``settings`` at its top and each kind's
module in that kind's builder; ``config`` imports ``kinds``; ``search``, the factory, imports
``config``.

Adding a kind of retriever (the one recipe; docs/extending.md points here):

1. Its module, ``retrievers/<kind>.py``, implementing `Retriever.search(request, k)`
   (``retrievers/base.py``); it takes its vocabulary from ``settings``, never ``config``.
2. If it has settings: a frozen dataclass in ``settings`` (``SECTION = "<kind>"``, each field's
   metadata from ``flag_metadata(key, help, ...)``, which makes it a flag of ``agents.run`` and
   ``retrievers.serve`` alike), and a field ``<kind>`` of that class in `RetrieverConfig`,
   after the other kinds' and before ``fusion`` (a row without its field fails the tests).
3. One `RetrieverKind` row in ``kinds.RETRIEVER_KINDS``: its spec-argument rule (none /
   optional / required) and help line(s), its settings class, the extras its builder takes
   (``uses_device``, ``calls_server``, ``encodes_on_cluster``), any checks (``check_arg``,
   ``check_config``, ``check_models``), and its builder: a function in ``kinds`` that imports
   the module in its body, so importing ``config`` stays cheap.

Nothing else needs to name the kind to parse, show, configure, build or check it: `parse_spec`,
the help, `RetrieverConfig`'s sections, `build_retriever` and `check_models` read its row.
"""

from __future__ import annotations

from eval.plumbing.lazy import lazy_face

# module -> the public names defined there, each under its own name
__all__, __getattr__, __dir__ = lazy_face(
    globals(),
    {
        "retrievers.config": ("RetrieverConfig",),
        "retrievers.settings": (
            "BM25Config",
            "DenseConfig",
            "ApiEmbedConfig",
            "FusionConfig",
        ),
        "retrievers.search": ("build_retriever",),
        "retrievers.base": ("SearchRequest", "Retriever"),
    },
)
