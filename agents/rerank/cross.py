"""The `cross` stage: a sentence-transformers CrossEncoder rescores the top `depth` documents.

    --rerank cross:BAAI/bge-reranker-v2-m3,depth=100,batch_size=32,max_length=512,device=auto

Decisions worth knowing:

* Only the first `depth` documents of the previous ranking are scored; they are re-sorted by
  the cross-encoder's score (equal scores keep their previous order) and every document below
  keeps its previous place under them. The ranking's scores are rank-based (n, n-1, ..., 1),
  so they decrease strictly whatever the model returns; the model's own scores are in the
  step (`doc_ids`, `scores`, in the new order).
* Scores are cached on disk under ``cache_dir/rerank/cross/`` (diskcache: SQLite, safe between
  processes), one JSON float per (model id, max length, query text, document text). Nothing
  about the agent or the run is in the key, so a rerun, a resumed run or another agent that
  retrieved the same documents for the same query text pays nothing. A local model's id is its
  resolved path: retrain into the same folder and the old scores are still served.
* The device is resolved when the stage is built (``auto``: CUDA, else MPS, else CPU, as the
  dense retriever does), so an unusable device is refused before any query runs; the weights
  load at the first query that misses the cache, so a run that is fully cached never loads
  them, and a model is loaded once per process however many tasks build the stage.
* Queries run concurrently, but the model runs in one thread at a time: torch already spreads
  one forward pass over every core, and two at once only fight over them.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import math
import sqlite3
import threading
import time
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

from agents.specs import StageSpec
from retrievers.config import DEVICE_FORMS, is_device

log = logging.getLogger(__name__)

DEFAULTS: dict[str, Any] = {
    "model": "",
    "depth": 100,
    "batch_size": 32,
    "max_length": 512,
    "device": "auto",
}
# Bump when what a cached score means changes (e.g. a new activation): old entries then miss.
CACHE_FORMAT = 1


def check_options(options: dict[str, Any]) -> None:
    if not str(options["model"]).strip():
        raise ValueError(
            "option model is required: --rerank cross:MODEL (a hub name or a local path)"
        )
    for name in ("depth", "batch_size", "max_length"):
        if options[name] < 1:
            raise ValueError(f"option {name} must be at least 1, got {options[name]}")
    if not is_device(options["device"]):
        raise ValueError(
            f"option device must be one of {', '.join(DEVICE_FORMS)}, got {options['device']!r}"
        )


CROSS = StageSpec(
    "cross",
    "sentence-transformers cross-encoder over the top depth documents (model: hub name or path)",
    "agents.rerank.cross:build_stage",
    uses_llm=False,
    defaults=DEFAULTS,
    check_options=check_options,
)


@cache
def load_cross_encoder(load_path: str, max_length: int, device: str):
    """The model, once per argument set; ``device`` is resolved, never ``auto``."""
    from sentence_transformers import CrossEncoder

    model = CrossEncoder(load_path, max_length=max_length, device=device)
    model.eval()
    return model


class ScoreCache:
    """Cross-encoder scores as JSON floats in a diskcache folder; damage costs a recompute."""

    def __init__(self, directory: Path) -> None:
        import diskcache

        from eval.files import diskcache_folder

        try:
            self._store = diskcache.Cache(diskcache_folder(directory))  # umask modes
        except sqlite3.DatabaseError as e:  # a truncated cache.db must not stop the run
            log.warning("cross-encoder cache %s unreadable (%s); not caching", directory, e)
            self._store = None

    def get_many(self, keys: Sequence[str]) -> list[float | None]:
        return [self._get(k) for k in keys]

    def _get(self, key: str) -> float | None:
        if self._store is None:
            return None
        try:
            raw = self._store.get(key, default=None)
            value = None if raw is None else json.loads(raw)
        except Exception as e:  # an unreadable entry is a miss, not a failed query
            log.warning("cross-encoder cache entry %s unreadable (%s)", key[:12], e)
            return None
        return float(value) if isinstance(value, int | float) else None

    def set_many(self, items: Mapping[str, float]) -> None:
        if self._store is None:
            return
        try:
            with self._store.transact():  # one write lock for the batch, not one per score
                for key, value in items.items():
                    self._store.set(key, json.dumps(value))
        except Exception as e:  # a full disk costs a recomputation later, not this answer
            log.warning("cross-encoder scores not cached (%s)", e)


class CrossStage:
    def __init__(
        self,
        corpus: Mapping[str, str],
        model: str,
        depth: int,
        batch_size: int,
        max_length: int,
        device: str,
        cache_dir: Path | None,
    ) -> None:
        from retrievers.dense import resolve_model

        self.corpus = corpus
        self.model_id, self.load_path = resolve_model(model)
        self.depth = depth
        self.batch_size = batch_size
        self.max_length = max_length
        self.device = device
        self.cache = ScoreCache(Path(cache_dir) / "rerank" / "cross") if cache_dir else None
        self._model_lock = threading.Lock()
        self._key_prefix: dict[str, Any] | None = None

    def model(self):
        return load_cross_encoder(self.load_path, self.max_length, self.device)

    def key_prefix(self) -> dict[str, Any]:
        """What names the model in a score's key: its id, its weights' revision and the max
        length (truncation changes the score). A hub model not downloaded yet is loaded
        first, so that its revision is known."""
        if self._key_prefix is None:
            from retrievers.dense import model_revision

            revision = model_revision(self.load_path)
            if revision is None:
                with self._model_lock:
                    self.model()
                revision = model_revision(self.load_path) or "unknown"
            self._key_prefix = {"format": CACHE_FORMAT, "model": self.model_id,
                                "revision": revision, "max_length": self.max_length}  # fmt: skip
        return self._key_prefix

    def _key(self, query: str, text: str) -> str:
        entry = {**self.key_prefix(), "query": query, "doc": text}
        blob = json.dumps(entry, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    def scores(self, query: str, doc_ids: Sequence[str]) -> tuple[list[float], int]:
        """The model's score of each document for ``query``, and how many came from the cache."""
        texts = [self.corpus[d] for d in doc_ids]
        keys = [self._key(query, t) for t in texts]
        found = self.cache.get_many(keys) if self.cache is not None else [None] * len(keys)
        missing = [i for i, s in enumerate(found) if s is None]
        if missing:
            with self._model_lock:
                predicted = self.model().predict(
                    [(query, texts[i]) for i in missing],
                    batch_size=self.batch_size,
                    show_progress_bar=False,
                    convert_to_numpy=True,
                )
            fresh = {keys[i]: float(s) for i, s in zip(missing, predicted, strict=True)}
            if self.cache is not None:
                self.cache.set_many(fresh)
            found = [fresh[keys[i]] if s is None else s for i, s in enumerate(found)]
        return [float(s) for s in found], len(doc_ids) - len(missing)

    async def rerank(
        self, query_id: str, query: str, ranking: Mapping[str, float]
    ) -> dict[str, Any]:
        started = time.perf_counter()
        ids = list(ranking)
        top, rest = ids[: self.depth], ids[self.depth :]
        scores, cached = await asyncio.to_thread(self.scores, query, top)
        # A NaN (an overflowing half-precision head) would make the sort order arbitrary.
        safe = [-math.inf if math.isnan(s) else s for s in scores]
        order = sorted(range(len(top)), key=lambda i: (-safe[i], i))
        new = [top[i] for i in order] + rest
        step = {
            "node": "cross",
            "model": self.model_id,
            "doc_ids": [top[i] for i in order],
            "scores": [scores[i] for i in order],
            "cached": cached,
            "seconds": round(time.perf_counter() - started, 4),
        }
        return {"ranking": {d: float(len(new) - r) for r, d in enumerate(new)}, "steps": [step]}


def build_stage(ctx) -> CrossStage:
    """The stage for ``ctx`` (an `agents.rerank.StageContext`); loads no weights yet."""
    from retrievers.dense import resolve_device

    options = ctx.options
    try:
        device = resolve_device(options["device"])
    except ValueError as e:  # its message names the dense retriever's option
        raise ValueError(str(e).replace("dense.device", "cross device", 1)) from None
    return CrossStage(
        corpus=ctx.corpus,
        model=str(options["model"]),
        depth=int(options["depth"]),
        batch_size=int(options["batch_size"]),
        max_length=int(options["max_length"]),
        device=device,
        cache_dir=ctx.cache_dir,
    )
