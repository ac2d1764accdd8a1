"""The retriever factory: `build_retriever(config, task, cache_dir)` builds what a
`RetrieverConfig` describes over a task's corpus.

Spec forms (``config.spec``; see `RETRIEVERS`), each taking its settings from its kind's
sub-config:

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

import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from eval.datasets import Task

from .api_embed import build_api_dense
from .base import BM25Retriever, DenseRetriever, Retriever
from .bm25 import build_bm25
from .config import RETRIEVER_KINDS, RetrieverConfig, SpecPart
from .dense import DEFAULT_DENSE_MODEL, build_dense, resolve_device, resolve_model
from .families import OWN_CODE_LOADERS, family_for
from .hybrid import HybridRetriever
from .model_source import TOKENIZER, Needs, check_model_source


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
    # Resolved once, so every dense member of a hybrid runs on the same device.
    device = resolve_device(config.dense.device) if any(p.kind == "dense" for p in parts) else None
    members = [
        _build_one(p, config, task, cache_dir, progress, device, transport, ray) for p in parts
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


def _build_one(
    part: SpecPart,
    config: RetrieverConfig,
    task: Task,
    cache_dir: Path | None,
    progress: bool,
    device: str | None,
    transport: Mapping[str, Any] | None = None,
    ray: str | None = None,
) -> Retriever:
    module, _, function = RETRIEVER_KINDS[part.kind].builder.partition(":")
    build = getattr(importlib.import_module(module), function)
    if part.kind in ("api", "remote"):  # the kinds that call a server
        return build(part, config, task, cache_dir, progress, device, transport=transport)
    if part.kind == "dense":  # the kind whose corpus a cluster encodes
        return build(part, config, task, cache_dir, progress, device, ray=ray)
    return build(part, config, task, cache_dir, progress, device)


def build_bm25_member(part, config, task, cache_dir, progress, device) -> Retriever:
    bm25 = config.bm25
    index = build_bm25(
        task.corpus, method=bm25.method, k1=bm25.k1, b=bm25.b, cache_dir=cache_dir,
        progress=progress,
    )  # fmt: skip
    return BM25Retriever(index, name=part.text)


def build_dense_member(part, config, task, cache_dir, progress, device, ray=None) -> Retriever:
    dense = config.dense
    encode_on = None
    if ray is not None:
        from .cluster.encode import on_cluster

        encode_on = on_cluster(ray)
    index = build_dense(
        task.corpus,
        model=part.arg or DEFAULT_DENSE_MODEL,
        task_name=task.name,
        cache_dir=cache_dir,
        progress=progress,
        dtype=dense.dtype,
        batch_size=dense.batch_size,
        max_length=dense.max_length,
        device=device or dense.device,
        instructions=dense.instructions,
        family=dense.family,
        trust_remote_code=dense.trust_remote_code,
        ignore_identical_ids=dense.ignore_identical_ids,
        encode_on=encode_on,
    )
    return DenseRetriever(index, name=part.text, r2med_rules=dense.r2med_rules is True)


def build_api_member(part, config, task, cache_dir, progress, device, transport=None) -> Retriever:
    api = config.api
    index = build_api_dense(
        task.corpus,
        model=part.arg,
        task_name=task.name,
        cache_dir=cache_dir,
        progress=progress,
        batch_size=api.batch_size,
        api_base=api.api_base,
        params=api.params,
        transport=transport,
        # the API family's rule unless dense.ignore_identical_ids says otherwise
        ignore_identical_ids=family_for(part.arg).drops_identical_ids(
            config.dense.ignore_identical_ids
        ),
        r2med_rules=config.dense.r2med_rules is True,
    )
    return DenseRetriever(index, name=part.text, r2med_rules=config.dense.r2med_rules is True)


def build_remote_member(
    part, config, task, cache_dir, progress, device, transport=None
) -> Retriever:
    from .remote import REMOTE_TIMEOUT_S, RemoteRetriever

    timeout = (transport or {}).get("timeout", REMOTE_TIMEOUT_S)
    return RemoteRetriever(part.arg, task.name, timeout=timeout, name=part.text)


def check_models(config: RetrieverConfig, flag: str = "--retriever") -> None:
    """Every model ``config`` loads from a folder or the hub, checked before any work
    (`retrievers.model_source`): each dense member's weights and tokenizer (and NV-Embed's own
    code, and ReasonIR's), and the hub tokenizer an API family cuts texts with (voyage's)."""
    for part in config.parts:
        if part.kind == "dense":
            model_id, load_path = resolve_model(part.arg or DEFAULT_DENSE_MODEL)
            family = family_for(model_id, config.dense.family)
            needs = Needs(own_code=family.loader in OWN_CODE_LOADERS)
            check_model_source(load_path, f"{flag} {part.text}", needs)
        elif part.kind == "api":
            kind, _, name = (family_for(part.arg).tokenizer or "").partition(":")
            if kind == "hub":
                tokenizer = name.format(model=part.arg.split("/")[-1])
                check_model_source(tokenizer, f"{flag} {part.text} (its tokenizer)", TOKENIZER)
