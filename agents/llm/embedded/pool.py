"""The embedded models' llama.cpp instances in this process: how many serve a model
(`pool_plan`: the cores, the calls in flight and the memory decide), loading them once
(`load_pool`), the cores they share (`CoreShare`), and a model's vocabulary alone for exact
token counts (`tokenizer`).

Every instance evaluates each prompt in chunks of `prefix_cache.CHUNK` tokens from its first,
so a call's output does not depend on which instance runs it. The loaded models and
tokenizers are process-wide, kept here and closed here at exit. llama.cpp
(llama-cpp-python) is imported when a model or vocabulary is first loaded.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import os
import queue
import random
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.llm.embedded import prefix_cache
from agents.llm.embedded.prefix_cache import PrefixStore
from agents.llm.embedded.weights import LocalModelError, lookup, model_file
from eval.plumbing import progress

# On this 2-core machine llama.cpp's threads wait for each other by spinning, so generation
# with n_threads=2 stalls (~1 token/s measured) and uses one thread. Prompt processing with 2
# batch threads is ~2x faster on an idle machine but 3-5x slower than one thread while another
# process keeps a core busy; R2MED_LLAMA_BATCH_THREADS=1 is for running jobs side by side.
N_THREADS = 1
BATCH_THREADS_SET = os.environ.get("R2MED_LLAMA_BATCH_THREADS")  # also: no pool takes more
N_THREADS_BATCH = int(BATCH_THREADS_SET or "2")


@dataclass
class LoadedModel:
    """A llama.cpp model loaded once per process; `lock` serialises use of its one context."""

    name: str
    llm: Any  # llama_cpp.Llama
    lock: threading.Lock
    rng: random.Random  # per-call seeds when the request gives none: reproducible per process
    end_of_turn: frozenset[int]  # EOS and <|im_end|>, on top of llama.cpp's end-of-generation set
    load_seconds: float
    # the prompt tokens its KV cache holds, whole chunks only (agents.llm.embedded.prefix_cache);
    # None after a call that did not finish
    live: Any = None
    # the cores its pool shares (None: its plan's threads, always)
    share: CoreShare | None = None


@dataclass(frozen=True)
class PoolPlan:
    """How many llama.cpp instances serve a model, and each one's threads: recorded in a run's
    config.json (``machine.local_pool``)."""

    instances: int
    n_threads: int  # generation threads per instance
    n_threads_batch: int  # prompt-evaluation threads per instance
    reason: str  # why this many, in words
    # bytes of evaluated prompt prefixes kept for reuse, shared by the instances
    # (agents.llm.embedded.prefix_cache): a share of the memory left once the instances are counted.
    # Not compared: it follows the free memory, and a pool is not loaded again for it
    prefix_bytes: int = dataclasses.field(default=512 << 20, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


SINGLE = PoolPlan(1, N_THREADS, N_THREADS_BATCH, "one instance")
HEADROOM_BYTES = 1 << 30  # left free for the rest of the process (retrievers, Python, ...)
COMPUTE_BYTES = 64 << 20  # llama.cpp's compute buffers per context, rounded up
# Kept prompt prefixes take a quarter of what the instances leave, at most 2 GiB: the demo's
# main job keeps ~0.5 GB of them (~10 KB a token), and an evicted prefix is only evaluated again
PREFIX_SHARE = 4
PREFIX_MAX_BYTES = 2 << 30


def cpu_count() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def memory_available() -> int | None:
    """Bytes the kernel says can be used without swapping (MemAvailable), where it says."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def instance_bytes(path: Path, n_ctx: int) -> int:
    """What one more instance may take: its weights (counted whole, though the mapped file is
    shared), its f16 KV cache for ``n_ctx`` tokens (from the GGUF's own dimensions) and its
    compute buffers."""
    tok = vocabulary(path)
    meta = dict(tok.llm.metadata)
    tok.llm.close()
    arch = meta.get("general.architecture", "")
    layers = int(meta.get(f"{arch}.block_count", 32))
    heads = int(meta.get(f"{arch}.attention.head_count", 32))
    kv_heads = int(meta.get(f"{arch}.attention.head_count_kv", heads))
    width = int(meta.get(f"{arch}.embedding_length", 4096))
    kv = n_ctx * layers * 2 * kv_heads * (width // heads) * 2
    return path.stat().st_size + kv + COMPUTE_BYTES


def pool_plan(
    name: str,
    cache_dir: Path | None = None,
    requested: int | None = None,
    concurrency: int = 1,
    n_ctx: int | None = None,
    queries: int | None = None,
) -> PoolPlan:
    """The instances a run starts for a model: ``requested`` (None: as many as the cores and
    the run's concurrency allow), never more than the cores, the calls in flight (the
    concurrency, the run's ``queries``) or the available memory allow. A requested count that
    is lowered is said in one line on stderr, and the plan's reason says why."""
    short, model = lookup(name)
    cores = cpu_count()
    wanted, limits = _capped(requested, cores, concurrency, queries)
    available = memory_available()
    prefix_bytes = SINGLE.prefix_bytes
    if available is not None:
        each = instance_bytes(model_file(short, cache_dir), n_ctx or model.n_ctx)
        fits = max(1, (available - HEADROOM_BYTES) // each)
        if fits < wanted:
            wanted = int(fits)
            limits.append(f"memory: {available / 2**30:.1f} GiB available holds {fits}")
        left = available - HEADROOM_BYTES - wanted * each
        prefix_bytes = int(min(PREFIX_MAX_BYTES, max(0, left // PREFIX_SHARE)))
    why = _reason(requested, wanted, cores, concurrency, queries, limits)
    if requested is not None and wanted < requested:
        # 64 instances on 2 cores once took 19 GB and 52 s to do what one did in 14 s
        print(f"note: {why}", file=sys.stderr, flush=True)
    if wanted <= 1:
        why = why if cores > 1 else f"{why} (1 core)"
        return dataclasses.replace(SINGLE, reason=why, prefix_bytes=prefix_bytes)
    # generation runs one thread per instance (two stall here, see N_THREADS); prompts share
    # the cores between the instances
    return PoolPlan(wanted, 1, max(1, cores // wanted), why, prefix_bytes)


def _capped(
    requested: int | None, cores: int, concurrency: int, queries: int | None
) -> tuple[int, list[str]]:
    """The instances the cores and the calls in flight allow, and what lowered a requested
    count: an instance beyond the cores only contends for them, and one beyond the calls in
    flight never runs."""
    bounds = {"cores": cores, "--concurrency": concurrency}
    if queries is not None:
        bounds["queries"] = max(1, queries)
    cap = min(bounds.values())
    if requested is None or requested <= cap:
        return requested or cap, []
    binding = " and ".join(f"{what} ({n})" for what, n in bounds.items() if n == cap)
    return cap, [f"no more than the {binding}"]


def _reason(
    requested: int | None, wanted: int, cores: int, concurrency: int, queries: int | None,
    limits: list[str],
) -> str:  # fmt: skip
    """Why a pool has ``wanted`` instances, in words (config.json's machine.local_pool)."""
    if requested is None:
        why = f"auto: {cores} cores, concurrency {concurrency}"
        why += f", {queries} queries" if queries is not None else ""
        return "; ".join([why, *limits])  # only memory lowers an automatic count
    if wanted >= requested:
        return f"--local-instances {requested}"
    return f"--local-instances {requested} lowered to {wanted}: " + "; ".join(limits)


@dataclass
class CoreShare:
    """The cores a pool's instances share. Generation takes one thread per busy instance;
    a prompt chunk takes the cores divided by the calls in progress, so a call evaluated while
    the other instances are idle uses every core (the thread count changes no float: each
    output element is computed whole by one thread)."""

    cores: int
    busy: int = 0
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)

    def prompt_threads(self) -> int:
        with self.lock:
            return max(1, self.cores // max(1, self.busy))

    def add(self, n: int) -> None:
        with self.lock:
            self.busy += n


@dataclass
class ModelPool:
    """A model's llama.cpp instances; each call takes whichever is free."""

    plan: PoolPlan
    instances: list[LoadedModel]
    _free: queue.SimpleQueue = dataclasses.field(default_factory=queue.SimpleQueue)
    prefixes: PrefixStore = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        for instance in self.instances:
            self._free.put(instance)
        self.prefixes = PrefixStore(self.plan.prefix_bytes)

    @contextlib.contextmanager
    def instance(self) -> Iterator[LoadedModel]:
        loaded = self._free.get()
        if loaded.share is not None:
            loaded.share.add(1)
        try:
            yield loaded
        finally:
            if loaded.share is not None:
                loaded.share.add(-1)
            self._free.put(loaded)


# --- the process's loaded models -----------------------------------------------------------------

_loading = threading.Lock()  # one model or vocabulary is loaded at a time
_pools: dict[tuple[str, int, PoolPlan, int], ModelPool] = {}
_tokenizers: dict[str, Tokenizer] = {}

# Set on Ctrl-C (agents.shared.interrupt): a generation in a worker thread stops at its next token,
# so the interpreter is not kept waiting for it at exit.
CANCEL = threading.Event()


@contextlib.contextmanager
def _native_load() -> Iterator[None]:
    """Around a llama.cpp load. llama.cpp calls back into Python while it loads (its log
    callback); a Ctrl-C handled in the main thread then raises inside the callback, where
    ctypes swallows the KeyboardInterrupt. The handler's CANCEL outlives it: raised here."""
    yield
    if CANCEL.is_set() and threading.current_thread() is threading.main_thread():
        raise KeyboardInterrupt


@atexit.register
def _close_models() -> None:
    # Freed before the interpreter tears down llama_cpp's module globals; left to the
    # garbage collector, every process that loaded a model ends with a TypeError from
    # Llama.__del__ on stderr.
    for pool in _pools.values():
        for loaded in pool.instances:
            loaded.llm.close()
    _pools.clear()
    for tok in _tokenizers.values():
        tok.llm.close()
    _tokenizers.clear()


def load_pool(
    name: str,
    cache_dir: Path | None = None,
    n_ctx: int | None = None,
    seed: int = 0,
    plan: PoolPlan = SINGLE,
) -> ModelPool:
    """The process-wide pool of a local model's instances, loaded at first use. Every
    instance evaluates each prompt in the same chunks from its first token (or restores whole
    chunks bitwise), so a call's output does not depend on which instance runs it; they share
    one seed sequence for requests without a seed and one store of evaluated prefixes."""
    short, model = lookup(name)
    n_ctx = n_ctx or model.n_ctx
    with _loading:
        key = (short, n_ctx, plan, prefix_cache.CHUNK)  # the chunk: bench/local_bench.py
        if key not in _pools:
            path = model_file(short, cache_dir)
            rng = random.Random(seed)
            instances = []
            for i in range(plan.instances):
                of = f" (instance {i + 1} of {plan.instances})" if plan.instances > 1 else ""
                with progress.status(f"loading {short}{of}"):
                    instances.append(_load_instance(short, path, n_ctx, seed, plan, rng))
            if plan.instances > 1 and BATCH_THREADS_SET is None:
                share = CoreShare(cpu_count())
                for loaded in instances:
                    loaded.share = share
            _pools[key] = ModelPool(plan, instances)
        return _pools[key]


def load_model(
    name: str, cache_dir: Path | None = None, n_ctx: int | None = None, seed: int = 0
) -> LoadedModel:
    """The process-wide single llama.cpp instance of a local model, loaded at first use."""
    return load_pool(name, cache_dir, n_ctx, seed).instances[0]


def _load_instance(
    short: str, path: Path, n_ctx: int, seed: int, plan: PoolPlan, rng: random.Random
) -> LoadedModel:
    from llama_cpp import Llama  # imported late: a heavy native library

    start = time.perf_counter()
    with _native_load():
        llm = Llama(
            model_path=str(path),
            n_ctx=n_ctx,
            # every prompt is evaluated in chunks of CHUNK tokens, as one micro-batch each: the
            # chunking decides the floats, and makes evaluated prefixes reusable exactly
            n_batch=prefix_cache.CHUNK,
            n_ubatch=prefix_cache.CHUNK,
            n_threads=plan.n_threads,
            n_threads_batch=plan.n_threads_batch,
            seed=seed,
            verbose=False,
        )
    template = llm.metadata.get("tokenizer.chat_template", "")
    if "<|im_start|>" not in template:
        raise LocalModelError(f"{path}: chat template is not ChatML: {template[:200]!r}")
    im_end = llm.tokenize(b"<|im_end|>", add_bos=False, special=True)
    return LoadedModel(
        name=short,
        llm=llm,
        lock=threading.Lock(),
        rng=rng,
        end_of_turn=frozenset([llm.token_eos(), *im_end[:1]]),
        load_seconds=time.perf_counter() - start,
    )


@dataclass
class Tokenizer:
    """A local model's vocabulary alone (no weights, no context): its exact token counts."""

    name: str
    llm: Any

    def tokenize(self, text: str, add_bos: bool = False) -> list[int]:
        return self.llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=True)

    def detokenize(self, ids: list[int]) -> str:
        # a cut may end inside a UTF-8 sequence: drop the fragment, as generation does
        return self.llm.detokenize(ids, special=True).decode("utf-8", errors="ignore")


def vocabulary(path: Path) -> Tokenizer:
    """A GGUF file's vocabulary and metadata alone (no weights, no context)."""
    from llama_cpp import Llama
    from llama_cpp._utils import suppress_stdout_stderr

    # llama.cpp warns on stderr that a vocabulary has no context size
    with _native_load(), suppress_stdout_stderr(disable=False):
        llm = Llama(model_path=str(path), vocab_only=True, verbose=False)
    return Tokenizer(path.stem, llm)


def tokenizer(name: str, cache_dir: Path | None = None) -> Tokenizer:
    """The process-wide tokenizer of a local model, loaded (vocabulary only) at first use."""
    short, _ = lookup(name)
    with _loading:
        if short not in _tokenizers:
            _tokenizers[short] = dataclasses.replace(
                vocabulary(model_file(short, cache_dir)), name=short
            )
    return _tokenizers[short]
