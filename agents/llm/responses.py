"""What an LLM answered, decoded: a litellm response (chat or text completion) into the
cacheable entry the client stores (`entry_from_response`), and an entry, stored or fresh, into
the `Completion` callers get (`from_entry`).

An answer the client cannot use is refused here (`LLMReplyError`): a reply with no choices,
or one emptied by the length limit (`check_reply`), or one whose bytes cannot be read as sent
(`unreadable_reply`: not UTF-8, not JSON; the SDK fails decoding it, and another attempt would
get the same bytes, so it is not retried). Cost is None whenever litellm's cost map cannot price
the model (local models, self-hosted servers, unknown names); a cache hit spent no money, so its
cost is 0.0.

Token log-probabilities are read strictly (`logprob_value`): a null, non-numeric, NaN, +inf or
positive value is missing (None), never read as 0.0 (probability 1); -inf is probability 0.

litellm moves a reply's leading ``<think>...</think>`` into ``reasoning_content`` (as servers
with a reasoning parser send it); it is kept as the completion's ``reasoning``, and
`agents.llm.text.whole_reply` gives the reply as the model wrote it, the thinking first.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from agents.llm.embedded.names import is_local
from agents.llm.errors import LLMReplyError
from agents.llm.tool_text import ToolCall
from eval.plumbing.litellm_setup import litellm
from eval.usage import Usage


@dataclass
class Completion:
    text: str
    finish_reason: str | None
    usage: Usage  # this call alone: calls=1, cached_calls=1 if it came from the cache
    cached: bool
    model: str  # the model the provider reports, else the requested model string
    # asked for with logprobs=True (top_logprobs=k): per generated token, (token, logprob,
    # [(alternative, logprob), ...]); None when the provider returned none
    # (a value None where the provider sent none or an impossible one: `logprob_value`)
    logprobs: list[tuple[str, float | None, list[tuple[str, float | None]]]] | None = None
    # the stop string that ended the text, where the backend says (local/ models, vLLM,
    # SGLang); None at the end of the turn, at max_tokens, or when the backend does not say
    stop_reason: str | None = None
    # the functions the model called, when it was offered tools (OpenAI's form, or parsed
    # from the text where the prompt is rendered here: agents/llm/tool_text.py)
    tool_calls: list[ToolCall] = field(default_factory=list)
    # the thinking the provider (or litellm) split off the text: ``reasoning_content``
    reasoning: str | None = None

    def message(self) -> dict[str, Any]:
        """The assistant message this completion adds to a conversation."""
        if not self.tool_calls:
            return {"role": "assistant", "content": self.text}
        return {
            "role": "assistant",
            "content": self.text or None,
            "tool_calls": [call.to_message() for call in self.tool_calls],
        }


def unreadable_reply(exc: BaseException | None) -> str | None:
    """Why the server's reply could not be read as it was sent (its bytes are not UTF-8, not
    JSON, or not of the OpenAI schema, such as a null logprob), from the error's chain; None
    for any other failure."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, UnicodeDecodeError):
            byte = exc.object[exc.start]
            return f"the server's reply is not UTF-8 (byte {byte:#04x} at {exc.start})"
        if isinstance(exc, json.JSONDecodeError):
            return f"the server's reply is not JSON ({exc.msg} at {exc.pos})"
        if type(exc).__name__ == "ValidationError" and hasattr(exc, "errors"):
            # pydantic's, raised by litellm reading the reply into its response types
            first = exc.errors()[0] if exc.errors() else {}
            where = ".".join(str(part) for part in first.get("loc", ()))
            return (
                f"the server's reply does not fit the OpenAI schema ({getattr(exc, 'title', '')}"
                f" {where}: {first.get('msg', 'invalid')})"
            )
        exc = exc.__cause__ or exc.__context__
    return None


def logprob_value(value: Any) -> float | None:
    """A token's log-probability as sent, or None when it is not one: missing (null), not a
    number, NaN, +inf or above 0 (a probability over 1). -inf is probability 0."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    value = float(value)
    if math.isnan(value) or value > 0.0:
        return None
    return value


def check_reply(entry: dict, model: str, request: dict) -> None:
    """Refuse an answer emptied by the length limit: searching nothing (or the raw query) in
    its place would score a run that never had an answer."""
    if entry["text"] or entry.get("tool_calls") or entry["finish_reason"] != "length":
        return
    budget = request.get("max_tokens") or request.get("max_completion_tokens")
    cut = f"at its {budget}-token budget" if budget else "at its length limit"
    raise LLMReplyError(
        f"{model}: the reply was cut {cut} before any answer (a reasoning model's thinking "
        "can fill it); raise --max-tokens"
    )


def entry_from_response(response: Any, requested_model: str) -> dict:
    """The cacheable fields of a litellm ModelResponse (chat) or TextCompletionResponse."""
    if not getattr(response, "choices", None):
        raise LLMReplyError(
            f"{requested_model}: the server's reply holds no choices (an empty 'choices' list)"
        )
    choice = response.choices[0]
    usage = getattr(response, "usage", None)
    message = getattr(choice, "message", None)
    text = message.content if message is not None else getattr(choice, "text", "")
    return {
        "text": text or "",
        "finish_reason": choice.finish_reason,
        "prompt_tokens": int(getattr(usage, "prompt_tokens", 0) or 0),
        "completion_tokens": int(getattr(usage, "completion_tokens", 0) or 0),
        "cost": _cost(response, requested_model),
        "model": getattr(response, "model", None) or requested_model,
        "logprobs": _logprobs_entry(getattr(choice, "logprobs", None)),
        "stop_reason": _stop_reason(choice),
        "tool_calls": _tool_calls_entry(getattr(message, "tool_calls", None)),
        "reasoning": _reasoning(message),
    }


def _reasoning(message: Any) -> str | None:
    reasoning = getattr(message, "reasoning_content", None) if message is not None else None
    return reasoning if isinstance(reasoning, str) and reasoning else None


def _tool_calls_entry(calls: Any) -> list[dict[str, str]] | None:
    """A message's tool calls as JSON data (None when it made none)."""
    if not calls:
        return None
    out = []
    for i, call in enumerate(calls):
        function = _field(call, "function")
        arguments = _field(function, "arguments")
        out.append({
            "id": str(_field(call, "id") or f"call_{i}"),
            "name": str(_field(function, "name") or ""),
            "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
        })  # fmt: skip
    return out


def _stop_reason(choice: Any) -> str | None:
    """vLLM's ``stop_reason`` (litellm keeps it among the provider's fields): a stop string,
    or a token id when a stop token ended the text, which is not a stop string."""
    fields = getattr(choice, "provider_specific_fields", None) or {}
    reason = fields.get("stop_reason") if isinstance(fields, dict) else None
    return reason if isinstance(reason, str) else None


def _field(item: Any, name: str) -> Any:
    return item.get(name) if isinstance(item, dict) else getattr(item, name, None)


def _logprobs_entry(logprobs: Any) -> list | None:
    """A choice's token logprobs as JSON data: OpenAI's chat form (``content``), as an object
    or a dict, or the completions form (``tokens``, ``token_logprobs``, ``top_logprobs``)."""
    if logprobs is None:
        return None
    tokens = _field(logprobs, "tokens")
    if tokens:
        values = _field(logprobs, "token_logprobs") or []
        tops = _field(logprobs, "top_logprobs") or [None] * len(tokens)
        return [
            [str(t), logprob_value(lp),
             [[str(a), logprob_value(p)] for a, p in _pairs(top)]]
            for t, lp, top in zip(tokens, values, tops, strict=False)
        ]  # fmt: skip
    content = _field(logprobs, "content")
    if not content:
        return None
    out = []
    for item in content:
        top = [
            [str(_field(t, "token")), logprob_value(_field(t, "logprob"))]
            for t in _field(item, "top_logprobs") or ()
        ]
        out.append([str(_field(item, "token")), logprob_value(_field(item, "logprob")), top])
    return out


def _pairs(top: Any) -> list[tuple[Any, Any]]:
    """A completions-form position's alternatives ({token: logprob}; anything else: none)."""
    return list(top.items()) if isinstance(top, dict) else []


def _as_logprobs(entry: list | None) -> list[tuple[str, float, list[tuple[str, float]]]] | None:
    if entry is None:
        return None
    return [(token, lp, [(t, p) for t, p in top]) for token, lp, top in entry]


def _cost(response: Any, requested_model: str) -> float | None:
    """USD for this response from litellm's cost map, or None if it cannot be priced."""
    if is_local(requested_model):
        # Local compute has no price in the map, and a local model's name could collide with
        # a priced API model's.
        return None
    try:
        return float(litellm.completion_cost(completion_response=response))
    except Exception:  # unmapped models raise assorted errors; a missing price is not fatal
        return None


def from_entry(entry: dict, latency: float, cached: bool = True) -> Completion:
    """The Completion a stored or fresh entry stands for; a cache hit spent no money."""
    usage = Usage(
        calls=1,
        cached_calls=int(cached),
        prompt_tokens=entry["prompt_tokens"],
        completion_tokens=entry["completion_tokens"],
        cost=0.0 if cached else entry["cost"],
        latency_s=latency,
    )
    return Completion(
        text=entry["text"],
        finish_reason=entry["finish_reason"],
        usage=usage,
        cached=cached,
        model=entry["model"],
        logprobs=_as_logprobs(entry.get("logprobs")),
        stop_reason=entry.get("stop_reason"),
        tool_calls=[
            ToolCall(c["id"], c["name"], c["arguments"]) for c in entry.get("tool_calls") or ()
        ],
        reasoning=entry.get("reasoning"),
    )
