"""On-disk cache of LLM completions, shared safely between processes.

litellm's own cache is unusable in 1.110 (the disk backend is gone and a hit imports proxy
code), so completions are keyed here: the key is the sha256 of the canonical JSON of
everything that decides the answer, the value a JSON string. Values are JSON rather than
pickles so the cache stays readable by any tool and never executes code when loaded.

The cache lives in SQLite (diskcache), which is process-safe: several runs may share one
folder. Nothing is held in memory besides the connection. On a Ray cluster every worker reads
and writes the driver's cache, through an actor that owns it (`use_opener`,
agents/execution/cluster/cache.py): the same keys and entries.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import diskcache

from eval.plumbing.files import diskcache_folder

log = logging.getLogger(__name__)

CACHE_MODES = ("use", "refresh", "off")  # read and write; call again and write; neither

# Request parameters that change how a call is made, not what it answers. `api_key` in
# particular must never reach the disk, and the key is the only place a parameter could.
NOT_IN_KEY = frozenset({"api_key", "timeout"})

# Field -> accepted types of a stored completion; anything else is a corrupted entry.
ENTRY_FIELDS: dict[str, tuple[type, ...]] = {
    "text": (str,),
    "finish_reason": (str, type(None)),
    "prompt_tokens": (int,),
    "completion_tokens": (int,),
    "cost": (int, float, type(None)),
    "model": (str,),
}
# Fields added later: an entry without one is whole, and reads as None. "logprobs" is a list
# of [token, logprob, [[alternative, logprob], ...]] per generated token, when asked for.
OPTIONAL_FIELDS: dict[str, tuple[type, ...]] = {
    "logprobs": (list, type(None)),
    "stop_reason": (str, type(None)),  # the stop string that ended the text, if reported
    "tool_calls": (list, type(None)),  # [{"id", "name", "arguments"}, ...] when tools were offered
    "reasoning": (str, type(None)),  # the thinking split off the text (reasoning_content)
}


def canonical_json(obj: Any) -> str:
    """JSON that is identical for equal objects, whatever the order of their dict keys."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def cache_key(
    *,
    model: str,
    api_base: str | None,
    messages: list[dict],
    stop: list[str] | None,
    params: dict,
    sample: int,
) -> str:
    """The sha256 hex digest naming one request.

    `sample` is a sample index: at temperature > 0 samples 0..n-1 of the same prompt are n
    distinct entries, while re-running sample i reproduces sample i.
    """
    request = {
        "model": model,
        "api_base": api_base,
        "messages": messages,
        "stop": stop,
        "params": {k: v for k, v in params.items() if k not in NOT_IN_KEY},
        "sample": sample,
    }
    return hashlib.sha256(canonical_json(request).encode("utf-8")).hexdigest()


def parse_entry(raw: object) -> dict | None:
    """The stored completion, or None if `raw` is not a well-formed entry."""
    if not isinstance(raw, str):
        return None
    try:
        entry = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(entry, dict):
        return None
    for name, types in ENTRY_FIELDS.items():
        value = entry.get(name, ...)
        # bool is an int subclass, but a boolean token count means the entry is garbage.
        if not isinstance(value, types) or isinstance(value, bool):
            return None
    for name, types in OPTIONAL_FIELDS.items():
        entry.setdefault(name, None)
        if not isinstance(entry[name], types):
            return None
    for call in entry["tool_calls"] or ():
        if not isinstance(call, dict) or not all(isinstance(call.get(f), str) for f in _CALL):
            return None
    return entry


_CALL = ("id", "name", "arguments")


class LLMCache:
    """Completions stored as JSON strings in `directory` (a diskcache folder)."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self._store = _open_store(self.directory)

    def get(self, key: str) -> dict | None:
        """The entry under `key`; None on a miss or an unreadable entry (logged, not fatal)."""
        try:
            raw = self._store.get(key, default=None)
        except Exception as exc:  # an undecodable value must not stop a run
            log.warning("LLM cache entry %s unreadable (%s); recomputing", key[:12], exc)
            return None
        if raw is None:
            return None
        entry = parse_entry(raw)
        if entry is None:
            log.warning("LLM cache entry %s is corrupted; recomputing", key[:12])
        return entry

    def set(self, key: str, entry: dict) -> None:
        """Store `entry` (only the known fields) under `key`, replacing what was there."""
        value = {name: entry[name] for name in ENTRY_FIELDS}
        value.update({name: entry[name] for name in OPTIONAL_FIELDS if entry.get(name) is not None})
        try:
            self._store.set(key, canonical_json(value))
        except Exception as exc:  # a damaged or full cache costs a recomputation, not the answer
            log.warning("LLM cache entry %s not stored (%s)", key[:12], exc)

    def close(self) -> None:
        self._store.close()


# What `open_cache` opens: a process's own diskcache folder, or (a cluster's worker) the
# driver's cache through an actor (agents.execution.cluster.cache)
_opener: Callable[[Path], Any] | None = None


def open_cache(directory: Path) -> Any:
    """The response cache for ``directory``: an `LLMCache`, or what `use_opener` installed
    (anything with ``get(key)``, ``set(key, entry)`` and ``close()``)."""
    return LLMCache(directory) if _opener is None else _opener(directory)


def use_opener(opener: Callable[[Path], Any] | None) -> None:
    """Make `open_cache` return ``opener(directory)`` in this process (None: its own again)."""
    global _opener
    _opener = opener


def _open_store(directory: Path) -> diskcache.Cache:
    """Open the diskcache in `directory`; a damaged one (e.g. a truncated cache.db) is moved
    aside to ``<directory>.corrupt-<time>-<pid>`` and replaced by an empty cache."""
    try:
        return diskcache.Cache(diskcache_folder(directory))  # umask modes, not 0755/0644
    except sqlite3.DatabaseError as exc:
        aside = directory.with_name(f"{directory.name}.corrupt-{int(time.time())}-{os.getpid()}")
        try:
            directory.rename(aside)
        except OSError:  # another process moved it first; open whatever is there now
            pass
        log.warning(
            "LLM cache %s unreadable (%s); moved to %s, starting afresh", directory, exc, aside
        )
        return diskcache.Cache(diskcache_folder(directory))
