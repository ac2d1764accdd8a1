"""Prompt prefixes the embedded model has already evaluated, kept so that a later prompt
starting the same way skips them without one float changing.

llama.cpp evaluates a prompt in chunks of ``n_batch`` tokens (`CHUNK`; ``n_ubatch`` is set
equal), and a chunk's keys and values depend only on its own tokens and the positions before
it. So the KV cache of the first k·CHUNK positions of an earlier prompt is bitwise what a
fresh evaluation computes for any prompt that starts with the same k·CHUNK tokens, and an
output stays a function of the prompt and CHUNK alone. What is never kept: a prompt's last,
partial chunk (a fresh evaluation of a longer prompt computes those positions in a full
chunk) and generated tokens (decoded one at a time).

Each entry is llama.cpp's serialised state of sequence 0 (``llama_state_seq_get_data``:
~10 KB a token for the 0.5B Qwen), restored into any instance of the same model and context
size in a few milliseconds, so the pool's instances share one store.
"""

from __future__ import annotations

import collections
import ctypes
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agents.llm.embedded.names import is_local

# Tokens per evaluation chunk of the embedded models (n_batch = n_ubatch). It decides the
# floats: recorded in every run's binding and in every local response's cache key. Chosen by
# measurement (docs/benchmarks.md, bench/local_bench.py --chunks).
CHUNK = 128


def aligned(length: int, chunk: int) -> int:
    """The positions of a ``length``-token prompt that lie in whole chunks."""
    return length // chunk * chunk


def reusable(kept: int, prompt_length: int, chunk: int) -> int:
    """How many of ``kept`` shared positions a prompt of ``prompt_length`` tokens may restore:
    whole chunks only, and at least one token left to evaluate (its logits are sampled)."""
    return min(aligned(kept, chunk), aligned(prompt_length - 1, chunk))


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """The length of the longest common prefix of two token arrays."""
    n = min(len(a), len(b))
    differ = np.flatnonzero(a[:n] != b[:n])
    return int(differ[0]) if len(differ) else n


@dataclass
class Prefix:
    tokens: np.ndarray  # int32, a whole number of chunks
    state: bytes  # sequence 0's state holding exactly those positions


@dataclass
class PrefixStats:
    """What the store saved: recorded per run (bench/local_bench.py prints it)."""

    calls: int = 0
    prompt_tokens: int = 0
    restored_tokens: int = 0  # positions not evaluated again
    restores: int = 0  # restored from another call's state (not the instance's own KV)
    evicted: int = 0


class PrefixStore:
    """Aligned prompt prefixes, least recently used first out, within ``budget`` bytes."""

    def __init__(self, budget: int, chunk: int | None = None) -> None:
        self.budget = budget
        self.chunk = chunk or CHUNK
        self.stats = PrefixStats()
        self._entries: collections.OrderedDict[int, Prefix] = collections.OrderedDict()
        self._bytes = 0
        self._next = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        return self._bytes

    def longest(self, tokens: np.ndarray) -> tuple[int, Prefix | None]:
        """The kept prefix a prompt may restore the most positions from, and how many."""
        best, found = 0, None
        with self._lock:
            for key, entry in self._entries.items():
                n = reusable(common_prefix(entry.tokens, tokens), len(tokens), self.chunk)
                if n > best:
                    best, found, found_key = n, entry, key
            if found is not None:
                self._entries.move_to_end(found_key)
        return best, found

    def put(self, tokens: np.ndarray, state: bytes) -> None:
        """Keep ``state`` (of exactly ``tokens``, a whole number of chunks). An entry it
        extends is dropped (this one holds all its positions); one that extends it makes it
        redundant."""
        if len(tokens) == 0 or len(tokens) % self.chunk or len(state) > self.budget:
            return
        with self._lock:
            for key, entry in list(self._entries.items()):
                shared = common_prefix(entry.tokens, tokens)
                if shared == len(tokens):  # already held, whole
                    self._entries.move_to_end(key)
                    return
                if shared == len(entry.tokens):
                    self._drop(key)
            self._entries[self._next] = Prefix(tokens, state)
            self._next += 1
            self._bytes += len(state)
            while self._bytes > self.budget:
                self._drop(next(iter(self._entries)))
                self.stats.evicted += 1

    def _drop(self, key: int) -> None:
        self._bytes -= len(self._entries.pop(key).state)

    def count(self, prompt_tokens: int, restored: int, from_store: bool) -> None:
        with self._lock:
            self.stats.calls += 1
            self.stats.prompt_tokens += prompt_tokens
            self.stats.restored_tokens += restored
            self.stats.restores += from_store


# --- llama.cpp's sequence state ---------------------------------------------------------------


def save_sequence(llm: Any) -> bytes:
    """Sequence 0's KV cache of a llama_cpp.Llama, serialised."""
    import llama_cpp

    ctx = llm._ctx.ctx
    size = llama_cpp.llama_state_seq_get_size(ctx, 0)
    buffer = (ctypes.c_uint8 * size)()
    written = llama_cpp.llama_state_seq_get_data(ctx, buffer, size, 0)
    return bytes(buffer[:written])


def load_sequence(llm: Any, state: bytes, tokens: Sequence[int]) -> None:
    """Replace sequence 0 of a llama_cpp.Llama with ``state`` (of ``tokens``), so that its
    next evaluation continues after them."""
    import llama_cpp

    llm._ctx.kv_cache_seq_rm(-1, 0, -1)
    buffer = (ctypes.c_uint8 * len(state)).from_buffer_copy(state)
    if llama_cpp.llama_state_seq_set_data(llm._ctx.ctx, buffer, len(state), 0) != len(state):
        llm._ctx.kv_cache_seq_rm(-1, 0, -1)
        llm.n_tokens = 0
        raise RuntimeError("llama.cpp refused a saved prompt state")
    llm.input_ids[: len(tokens)] = tokens
    llm.n_tokens = len(tokens)


def evaluation_settings(model: str) -> dict[str, int]:
    """What decides an embedded model's floats besides the request: recorded in a run's
    binding and part of its responses' cache keys (so no response computed with other chunks
    is reused)."""
    return {"n_batch": CHUNK} if is_local(model) else {}
