"""The embedded models' generation loop: a raw completion of a prompt on a loaded llama.cpp
instance (`generate`), with stop strings, logprobs and restricted decoding.

Prompts are evaluated in chunks of `prefix_cache.CHUNK` tokens from their first; the whole
chunks a prompt shares with one evaluated before are restored rather than evaluated again
(`agents/llm/embedded/prefix_cache.py`), bitwise, so an output is a function of the prompt alone.
Logprobs are computed from the raw logits (before temperature), as OpenAI's API gives them.

Ctrl-C sets `CANCEL` (agents.shared.interrupt): a generation in a worker thread stops at its next
token or prompt chunk. llama.cpp (llama-cpp-python) is imported when a generation runs;
litellm is not imported at all (the provider, `agents.llm.embedded.provider`, speaks litellm).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from agents.llm.embedded import prefix_cache
from agents.llm.embedded.pool import CANCEL, N_THREADS, LoadedModel
from agents.llm.embedded.prefix_cache import (
    PrefixStore,
    aligned,
    common_prefix,
    load_sequence,
    reusable,
    save_sequence,
)
from eval.plumbing import progress


class GenerationCancelled(RuntimeError):
    """The process is being interrupted; the query's record is not written."""


class PromptTooLong(Exception):
    """A prompt that does not fit the model's context (the provider reports it as litellm's
    ContextWindowExceededError)."""


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
    same text (agents.llm.embedded.prefix_cache); its own whole chunks are kept for later calls.

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
    with model.lock, progress.status() as shown:
        tokens = llm.tokenize(prompt.encode("utf-8"), add_bos=True, special=True)
        n_ctx = llm.n_ctx()
        if len(tokens) >= n_ctx:
            raise PromptTooLong(
                f"prompt of {len(tokens)} tokens does not fit the context of {n_ctx}"
            )
        budget = n_ctx - len(tokens)
        max_tokens = budget if max_tokens is None or max_tokens <= 0 else min(max_tokens, budget)
        llm.set_seed(seed if seed is not None else model.rng.randrange(2**31))
        ids = np.asarray(tokens, dtype=np.int32)
        start = time.perf_counter()
        keep = _restore(model, ids, prefixes) if prefixes is not None else 0
        restored = f" ({keep:,} restored)" if keep else ""
        shown.update(f"prompt {keep:,}/{len(tokens):,} tok{restored}", force=True)
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
        rest = _evaluate(model, tokens, keep, lambda at: shown.update(
            f"prompt {at:,}/{len(tokens):,} tok{restored}"))  # fmt: skip
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
            shown.update(f"prompt {len(tokens):,} tok, {n_generated:,} generated")
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


def _evaluate(
    model: LoadedModel, tokens: list[int], start: int, evaluated: Callable[[int], None]
) -> int:
    """Evaluate the prompt's whole chunks from ``start`` on, all but the last, each with the
    threads its pool's idle cores allow; where llm.generate() takes over. ``evaluated`` is told
    the tokens done after each chunk."""
    chunk = prefix_cache.CHUNK
    end = max(start, aligned(len(tokens) - 1, chunk))
    for at in range(start, end, chunk):
        if CANCEL.is_set():  # between chunks: Ctrl-C need not wait for a long prompt
            raise GenerationCancelled("interrupted")
        _set_prompt_threads(model)
        model.llm.eval(tokens[at : at + chunk])
        evaluated(at + chunk)
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
