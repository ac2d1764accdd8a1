"""The retriever factory: `build_retriever(config, task, cache_dir)` builds what a
`RetrieverConfig` describes over a task's corpus.

Spec forms (``config.spec``; see `retrievers.kinds.RETRIEVERS`), each taking its settings from
its kind's sub-config, each built by its row of `retrievers.kinds.RETRIEVER_KINDS`:

* ``bm25``: BM25 over the task corpus (``config.bm25``: method, k1, b); it scores
  ``request.sparse_text`` when given, else ``request.query``.
* ``dense`` / ``dense:<model name or path>``: a sentence-transformers embedder (default
  all-MiniLM-L6-v2, bundled offline); ``config.dense``: device, dtype, batch size, max length,
  instruction set.
* ``api:<litellm embedding model>``, e.g. ``api:text-embedding-3-large``; ``config.api``:
  api_base, batch size and extra litellm params, sent with every call.
* ``remote:<url>``: a retrieval server's index of the task (`retrievers.remote`), searched over
  HTTP: the server's retriever with the server's settings.
* any ``+``-joined combination, e.g. ``bm25+dense``: the members' lists fused
  (``config.fusion``: method, RRF's k, depth per member; diver-minmax's weight and length).

Dense retrievers embed instruction + query and, when ``request.expansion`` is non-empty,
average that with the expansion's embedding, as R2MED's HyDE evaluation does (see dense.py);
under ``dense.r2med_rules`` (on under ``--preset paper``) a paired request's empty expansion
too, as R2MED averages its empty texts, and an API family with ``retry_cuts`` sends a failed
request again cut shorter, as R2MED's ``RetrievalOPENAI`` does.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from eval.datasets import Task

from .base import Retriever
from .config import RetrieverConfig
from .dense import resolve_device
from .hybrid import HybridRetriever
from .kinds import RETRIEVER_KINDS


def build_retriever(
    config: RetrieverConfig,
    task: Task,
    cache_dir: Path | None,
    progress: bool = True,
    transport: Mapping[str, Any] | None = None,
    ray: str | None = None,
) -> Retriever:
    """Build the retriever ``config`` describes over ``task``'s corpus (see the module doc);
    ``transport`` goes to every embedding API call and changes no vector: the run's
    ``timeout``, and a placeholder ``api_key`` for a server that needs none. ``ray``: a Ray
    cluster's address (or auto) whose workers encode a dense member's corpus
    (retrievers.cluster.encode); the vectors are the ones this process would compute on the
    workers' kind of device."""
    if not isinstance(config, RetrieverConfig):
        raise TypeError(
            "build_retriever takes a RetrieverConfig, e.g. RetrieverConfig(spec='bm25'), "
            f"not {type(config).__name__} {config!r}"
        )
    parts = config.parts
    kinds = [RETRIEVER_KINDS[p.kind] for p in parts]
    # Resolved once, so every member that runs a model here runs it on the same device.
    device = resolve_device(config.dense.device) if any(k.uses_device for k in kinds) else None
    members = [
        kind.build_member(p, config, task, cache_dir, progress, device, transport, ray)
        for p, kind in zip(parts, kinds, strict=True)
    ]
    if len(members) == 1:
        return members[0]
    return HybridRetriever(
        members,
        method=config.fusion.method,
        rrf_k=config.fusion.k,
        depth=config.fusion.depth,
        name=config.spec,
        weight=config.fusion.weight,
        keep=config.fusion.keep,
    )


def check_models(config: RetrieverConfig, flag: str = "--retriever") -> None:
    """Every model ``config`` loads from a folder or the hub, checked before any work
    (`retrievers.model_source`), as each member's row checks it: each dense member's weights
    and tokenizer (and NV-Embed's own code, and ReasonIR's), and the hub tokenizer an API
    family cuts texts with (voyage's)."""
    for part in config.parts:
        check = RETRIEVER_KINDS[part.kind].check_models
        if check is not None:
            check(part, config, flag)
