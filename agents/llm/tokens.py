"""Counting a chat request's tokens for one model without calling it (the dry run's counter).

``local/`` models are counted with their own tokenizer on the ChatML prompt the embedded
provider sends (exact); other models with litellm's ``token_counter`` and its bundled tiktoken
encoding (exact for OpenAI's older models, an approximation for others). Tools and tool turns
are counted as `agents.llm.tool_text.text_messages` writes them: exactly what a ``local/``
model (or ``--server llamacpp``) is sent; for an API model, which gets them as JSON, an
approximation. Each message (or ChatML turn) is counted once, so a query's growing prompts cost
only what differs between them. Nothing here opens the network or writes a file: a split
``local/`` model that no run has joined yet is counted by litellm's tokenizer instead.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from agents.llm.embedded.names import is_local, local_name

Messages = list[dict[str, Any]]


class Counter:
    """Tokens of a chat request for one model."""

    local = False  # the embedded provider, which cuts max_tokens to what the context leaves
    context: int | None = None  # the model's input limit, where known
    described = ""
    default_system: str | None = None  # what a local/ model gets when no system prompt is sent

    def __init__(self) -> None:
        self._memo: dict[str, int] = {}

    def count(self, messages: Messages, tools: list[dict[str, Any]] | None = None) -> int:
        from agents.llm.tool_text import text_messages, uses_tools

        if uses_tools(messages, tools):
            messages = text_messages(messages, tools, self.default_system)
        return self._count(messages)

    def truncate(self, text: str, limit: int) -> tuple[str, str]:
        """``text`` cut to its first ``limit`` tokens, and how they were counted."""
        raise NotImplementedError

    def text_tokens(self, text: str) -> int:
        """The tokens of ``text`` alone (no chat template around it)."""
        return len(self._encode(text))

    def keep_last(self, text: str, limit: int) -> str:
        """``text`` cut to its last ``limit`` tokens (a left truncation)."""
        ids = self._encode(text)
        return text if len(ids) <= limit else self._decode(ids[len(ids) - limit :])

    def _encode(self, text: str) -> list[int]:
        raise NotImplementedError

    def _decode(self, ids: list[int]) -> str:
        raise NotImplementedError

    def _count(self, messages: Messages) -> int:
        raise NotImplementedError

    def close(self) -> None:
        pass


class LiteLLMCounter(Counter):
    """litellm's token_counter, which adds a fixed overhead per message and per request; the
    sum of the messages counted one by one is checked against a whole request once."""

    def __init__(self, model: str) -> None:
        super().__init__()
        from eval.plumbing.litellm_setup import litellm

        self.model = model
        self._litellm = litellm
        self._additive: bool | None = None
        self.context = api_context(model)
        self.described = (
            "litellm's token_counter (its bundled tiktoken cl100k_base; approximate for models "
            "that tokenize otherwise)"
        )

    def _offline(self, call: Any, **kwargs: Any) -> Any:
        litellm = self._litellm
        saved = litellm.disable_hf_tokenizer_download, litellm.disable_token_counter
        # never download a Hugging Face tokenizer: counting opens no network
        litellm.disable_hf_tokenizer_download, litellm.disable_token_counter = True, False
        try:
            return call(model=self.model, **kwargs)
        finally:
            litellm.disable_hf_tokenizer_download, litellm.disable_token_counter = saved

    def _counted(self, messages: Messages) -> int:
        return int(self._offline(self._litellm.token_counter, messages=messages))

    def _count(self, messages: Messages) -> int:
        if self._additive is None:
            self._additive = self._by_message(messages) == self._counted(messages)
        return self._by_message(messages) if self._additive else self._counted(messages)

    def _by_message(self, messages: Messages) -> int:
        if "" not in self._memo:
            self._memo[""] = self._counted([])
        empty = self._memo[""]
        total = empty
        for message in messages:
            key = f"{message['role']}\0{message['content']}"
            if key not in self._memo:
                self._memo[key] = self._counted([message]) - empty
            total += self._memo[key]
        return total

    def truncate(self, text: str, limit: int) -> tuple[str, str]:
        ids = self._encode(text)
        if len(ids) > limit:
            text = self._decode(ids[:limit])
        return text, "litellm's tokenizer for the model (approximate unless it is the model's)"

    def _encode(self, text: str) -> list[int]:
        return list(self._offline(self._litellm.encode, text=text))

    def _decode(self, ids: list[int]) -> str:
        return str(self._offline(self._litellm.decode, tokens=ids))


class LocalCounter(Counter):
    """An embedded model's own tokenizer on the ChatML prompt its provider renders (exact)."""

    local = True

    def __init__(self, model: str, path: Path) -> None:
        super().__init__()
        from agents.llm.embedded.pool import vocabulary
        from agents.llm.embedded.weights import LOCAL_MODELS

        self.short = local_name(model)
        self.default_system = LOCAL_MODELS[self.short].default_system
        self.context = LOCAL_MODELS[self.short].n_ctx
        self._tok = dataclasses.replace(vocabulary(path), name=self.short)
        self._bos = len(self._tok.tokenize("x", add_bos=True)) - len(self._tok.tokenize("x"))
        self.described = f"{self.short}'s own tokenizer on the ChatML prompt (exact)"

    def _count(self, messages: Messages) -> int:
        from agents.llm.embedded.chatml import render_chatml

        # every turn starts with the special token <|im_start|>, where tokenization restarts:
        # the turns can be counted apart (and each only once across queries)
        marker = "<|im_start|>"
        head, *turns = render_chatml(messages, self.default_system).split(marker)
        total = self._bos + (len(self._tok.tokenize(head)) if head else 0)
        for turn in turns:
            piece = marker + turn
            if piece not in self._memo:
                self._memo[piece] = len(self._tok.tokenize(piece))
            total += self._memo[piece]
        return total

    def close(self) -> None:
        self._tok.llm.close()

    def truncate(self, text: str, limit: int) -> tuple[str, str]:
        ids = self._tok.tokenize(text)
        how = f"local/{self.short}'s own tokenizer"
        return (text if len(ids) <= limit else self._tok.detokenize(ids[:limit])), how

    def _encode(self, text: str) -> list[int]:
        return list(self._tok.tokenize(text))

    def _decode(self, ids: list[int]) -> str:
        return self._tok.detokenize(ids)


def counter(model: str, cache_dir: Path) -> Counter:
    """The most exact counter available for ``model`` without writing a file."""
    if not is_local(model):
        return LiteLLMCounter(model)
    from agents.llm.embedded.weights import LOCAL_MODELS, readable_model_file

    info = LOCAL_MODELS.get(local_name(model))
    why = "its file is not joined yet (the first run joins it)"
    path = readable_model_file(model, cache_dir)
    if path is not None:
        try:
            return LocalCounter(model, path)
        except Exception as e:  # a damaged file: the run will say so
            why = f"its tokenizer did not load ({type(e).__name__})"
    fallback = LiteLLMCounter(model)
    fallback.local = True
    fallback.context = info.n_ctx if info else None
    fallback.default_system = info.default_system if info else None
    fallback.described += f"; not the model's own: {why}"
    return fallback


def model_counter(llm: Any) -> Counter:
    """The counter of the model an `agents.llm.LLM` client calls, for fitting a prompt to a
    token budget: a dry run's own, else `counter`'s (one per model and cache folder)."""
    if llm.dry is not None:
        return llm.dry.counter(llm.model)
    key = (llm.model, str(llm.cache_dir))
    if key not in _COUNTERS:
        _COUNTERS[key] = counter(llm.model, llm.cache_dir or _default_cache())
    return _COUNTERS[key]


_COUNTERS: dict[tuple[str, str], Counter] = {}


def _default_cache() -> Path:
    from eval.datasets import default_cache_dir

    return default_cache_dir()


def api_context(model: str) -> int | None:
    """The model's input limit in litellm's local map, when it has one."""
    from eval.plumbing.litellm_setup import litellm

    try:
        limit = litellm.get_model_info(model).get("max_input_tokens")
    except Exception:  # an unmapped model: no limit known
        return None
    return int(limit) if limit else None


def price(model: str, prompt_tokens: int, completion_tokens: int) -> float | None:
    """USD for these tokens from litellm's local price map; None for local or unknown models
    (the client's rule: a local model's name could match a priced one)."""
    if is_local(model):
        return None
    from eval.plumbing.litellm_setup import litellm

    try:
        prompt_cost, completion_cost = litellm.cost_per_token(
            model=model, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
        )
    except Exception:  # unmapped models raise assorted errors
        return None
    return float(prompt_cost) + float(completion_cost)
