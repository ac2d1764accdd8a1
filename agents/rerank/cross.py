"""The `cross` stage: a cross-encoder rescores the top `depth` documents.

    --rerank cross:BAAI/bge-reranker-v2-m3,depth=100,batch_size=32,max_length=512,device=auto
    --rerank cross:castorini/rankllama-v1-7b-lora-passage,depth=10

Decisions worth knowing:

* How a pair is scored is option ``scoring`` (`agents.rerank.r2med_rerankers`): R2MED's three
  rerankers (bge-reranker, monobert, rankllama) are scored as R2MED's ``RerankerModel`` scores
  them, chosen by their names; any other 2-label classifier by its "relevant" logit
  (logits[:, 1], as R2MED reads monoBERT); any other model by sentence-transformers'
  CrossEncoder, its activation included, as this stage always has. A PEFT adapter (rankllama)
  is merged into its base model, option ``base`` or the one its adapter_config.json names.
* Only the first `depth` documents of the previous ranking are scored; they are re-sorted by
  the model's score and every document below keeps its previous place under them
  (``keep_rest=false``: the list ends at `depth`, as R2MED's eval_reranker.py L118 keeps only
  the reranked top-k). Equal scores (``ties``) keep their previous order, or, for R2MED's
  rules (``ties=auto``), take the order trec_eval gave R2MED's raw scores: float32 score
  descending, doc id descending (eval_reranker.py L117-121 hands the scores to pytrec_eval;
  eval/evaluate.py). The ranking's scores are rank-based (n, n-1, ..., 1), so they decrease
  strictly whatever the model returns; the model's own scores are in the step (`doc_ids`,
  `scores`, in the new order, and the `scoring` rule).
* Scores are cached on disk under ``cache_dir/rerank/cross/`` (diskcache: SQLite, safe between
  processes), one JSON float per (model id, its revision, max length, scoring rule, base
  model, query text, document text). Nothing about the agent or the run is in the key, so a
  rerun, a resumed run or another agent that retrieved the same documents for the same query
  text pays nothing. A local model's id is its resolved path and its revision a hash of its
  files, so weights replaced in place are scored again.
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
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from agents.rerank.r2med_rerankers import (
    PEFT_MISSING,
    SCORINGS,
    ST,
    Scoring,
    load_scorer,
    peft_available,
    resolve,
    rule_by_name,
)
from agents.shared.specs import StageSpec
from retrievers.model_source import loading
from retrievers.settings import DEVICE_FORMS, is_device

log = logging.getLogger(__name__)

DEFAULTS: dict[str, Any] = {
    "model": "",
    "depth": 100,
    "batch_size": 32,
    "max_length": 512,
    "device": "auto",
    "scoring": "auto",  # r2med_rerankers.SCORINGS
    "base": "",  # a PEFT adapter's base model; "": the one its adapter_config.json names
    "ties": "auto",  # TIES
    "keep_rest": True,  # the documents below depth stay under the reranked ones
}
TIES = ("auto", "previous", "trec")
# Bump when what a cached score means changes (e.g. a new activation): old entries then miss.
# Scores are also keyed by their rule, except sentence-transformers' (the only rule before
# rules were keyed), whose entries cached before keep serving.
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
    for name, allowed in (("scoring", SCORINGS), ("ties", TIES)):
        if options[name] not in allowed:
            raise ValueError(
                f"option {name} must be one of {', '.join(allowed)}, got {options[name]!r}"
            )
    if str(options["base"]).strip() and options["scoring"] not in ("auto", "rankllama"):
        raise ValueError(
            f"option base is for a PEFT adapter (scoring auto or rankllama), not scoring "
            f"{options['scoring']}"
        )


# R2MED's reranker rows score only the reranked top k (R2MED/R2MED at 62b7074)
R2MED_TOP_K = (
    "R2MED src/eval_reranker.py L112-119: each query's list is the reranked top_k alone "
    "(L118 sorts the scores and keeps [:top_k])"
)


def preset_options(preset: str, model: str, server: str) -> dict[str, Any]:
    """``--preset paper`` ends an R2MED reranker's list at its depth (`R2MED_TOP_K`)."""
    return {"keep_rest": False} if preset == "paper" and rule_by_name(model) else {}


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

        from eval.plumbing.files import diskcache_folder

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


@dataclass(frozen=True)
class Ordering:
    """How the scored top is re-sorted and what follows it."""

    ties: str = "auto"  # TIES; auto: trec for R2MED's rules, previous for sentence-transformers
    keep_rest: bool = True


def reorder(doc_ids: Sequence[str], scores: Sequence[float], ties: str) -> list[int]:
    """The positions of ``doc_ids`` by ``scores`` descending; equal scores keep their order
    (``previous``) or go by doc id descending, compared as float32 (``trec``: the order
    trec_eval ranks R2MED's raw scores in, eval/evaluate.py)."""
    # A NaN (an overflowing half-precision head) would make the sort order arbitrary.
    safe = [-math.inf if math.isnan(s) else s for s in scores]
    if ties == "trec":
        import numpy as np

        with np.errstate(over="ignore"):
            keyed = [(np.float32(s), d) for s, d in zip(safe, doc_ids, strict=True)]
        return sorted(range(len(safe)), key=lambda i: keyed[i], reverse=True)
    return sorted(range(len(safe)), key=lambda i: (-safe[i], i))


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
        scoring: str = "auto",
        base: str = "",
        ordering: Ordering | None = None,
    ) -> None:
        from retrievers.dense import resolve_model

        self.corpus = corpus
        self.model_name = model
        self.model_id, self.load_path = resolve_model(model)
        self.depth = depth
        self.batch_size = batch_size
        self.max_length = max_length
        self.device = device
        self.scoring_option, self.base_option = scoring, base
        self.ordering = ordering or Ordering()
        self.cache = ScoreCache(Path(cache_dir) / "rerank" / "cross") if cache_dir else None
        self._model_lock = threading.Lock()
        self._prefix_lock = threading.Lock()  # the rule's files are read (or fetched) once
        self._scoring: Scoring | None = None
        self._key_prefix: dict[str, Any] | None = None

    def scoring(self) -> Scoring:
        """The rule (and a rankllama adapter's base), from the options and the model's files."""
        if self._scoring is None:
            self._scoring = resolve(self.scoring_option, self.model_name, self.load_path,
                                    self.base_option)  # fmt: skip
        return self._scoring

    def ties(self) -> str:
        if self.ordering.ties != "auto":
            return self.ordering.ties
        return "previous" if self.scoring().rule == ST else "trec"

    def model(self):
        scoring = self.scoring()
        with loading(f"--rerank cross model={self.model_name}", self.load_path):
            if scoring.rule == ST:
                return load_cross_encoder(self.load_path, self.max_length, self.device)
            return load_scorer(scoring.rule, self.load_path, scoring.base_path, self.max_length,
                               self.device)  # fmt: skip

    def key_prefix(self) -> dict[str, Any]:
        """What names the model in a score's key: its id, its weights' revision, the max
        length (truncation changes the score) and, for all but sentence-transformers' rule,
        the rule and a base model's id and revision. A hub model not downloaded yet is loaded
        first, so that its revision is known."""
        with self._prefix_lock:
            if self._key_prefix is None:
                scoring = self.scoring()
                prefix = {"format": CACHE_FORMAT, "model": self.model_id,
                          "revision": self._revision(self.load_path),
                          "max_length": self.max_length}  # fmt: skip
                if scoring.rule != ST:
                    prefix["scoring"] = scoring.rule
                if scoring.base_path is not None:
                    prefix["base"] = scoring.base_id
                    prefix["base_revision"] = self._revision(scoring.base_path)
                self._key_prefix = prefix
            return self._key_prefix

    def _revision(self, load_path: str) -> str:
        from retrievers.dense import model_revision

        revision = model_revision(load_path)
        if revision is None:
            with self._model_lock:
                self.model()
            revision = model_revision(load_path) or "unknown"
        return revision

    def _key(self, query: str, text: str) -> str:
        entry = {**self.key_prefix(), "query": query, "doc": text}
        blob = json.dumps(entry, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    def _predict(self, pairs: list[tuple[str, str]]) -> list[float]:
        model = self.model()
        if self.scoring().rule != ST:
            return model.predict(pairs, self.batch_size)
        predicted = model.predict(
            pairs, batch_size=self.batch_size, show_progress_bar=False, convert_to_numpy=True
        )
        if predicted.ndim != 1:  # float() of a row would fail on every query alike
            raise ValueError(
                f"option scoring: {self.model_name} gives {predicted.shape[-1]} scores a pair; "
                "scoring label1 reads logits[:, 1]"
            )
        return [float(s) for s in predicted]

    def scores(self, query: str, doc_ids: Sequence[str]) -> tuple[list[float], int]:
        """The model's score of each document for ``query``, and how many came from the cache."""
        texts = [self.corpus[d] for d in doc_ids]
        keys = [self._key(query, t) for t in texts]
        found = self.cache.get_many(keys) if self.cache is not None else [None] * len(keys)
        missing = [i for i, s in enumerate(found) if s is None]
        if missing:
            with self._model_lock:
                predicted = self._predict([(query, texts[i]) for i in missing])
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
        order = reorder(top, scores, self.ties())
        new = [top[i] for i in order] + (rest if self.ordering.keep_rest else [])
        scoring = self.scoring()
        step = {
            "node": "cross",
            "model": self.model_id,
            "scoring": scoring.rule,
            "doc_ids": [top[i] for i in order],
            "scores": [scores[i] for i in order],
            "cached": cached,
            "seconds": round(time.perf_counter() - started, 4),
        }
        if scoring.base_id is not None:
            step["base"] = scoring.base_id
        return {"ranking": {d: float(len(new) - r) for r, d in enumerate(new)}, "steps": [step]}


def build_stage(ctx) -> CrossStage:
    """The stage for ``ctx`` (an `agents.rerank.StageContext`); loads no weights yet."""
    from retrievers.dense import resolve_device

    options = ctx.options
    try:
        device = resolve_device(options["device"])
    except ValueError as e:  # its message names the dense retriever's option
        raise ValueError(str(e).replace("dense.device", "cross device", 1)) from None
    model = str(options["model"])
    # refused here, before the first query, when the rule is known without the model's files
    wants_peft = options["scoring"] == "rankllama" or (
        options["scoring"] == "auto" and rule_by_name(model) == "rankllama"
    )
    if wants_peft and not peft_available():
        raise ValueError(PEFT_MISSING)
    return CrossStage(
        corpus=ctx.corpus,
        model=model,
        depth=int(options["depth"]),
        batch_size=int(options["batch_size"]),
        max_length=int(options["max_length"]),
        device=device,
        cache_dir=ctx.cache_dir,
        scoring=str(options["scoring"]),
        base=str(options["base"]).strip(),
        ordering=Ordering(ties=str(options["ties"]), keep_rest=bool(options["keep_rest"])),
    )


CROSS = StageSpec(
    "cross",
    "cross-encoder over the top depth documents (model: hub name or path); R2MED's rerankers "
    "scored as R2MED scores them",
    build_stage,
    uses_llm=False,
    defaults=DEFAULTS,
    check_options=check_options,
    models={"model": "model", "base": "model"},
    preset_options=preset_options,
)
