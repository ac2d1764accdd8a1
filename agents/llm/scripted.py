"""A scripted LLM provider for tests and benchmarks (models `scripted/...` once installed).

A reply is text, or a `Reply` with token log-probabilities, native tool calls (OpenAI's
``tool_calls``, as API models return them) or thinking split off the text
(``reasoning_content``, as litellm and vLLM's reasoning parsers return it). It answers
through litellm like any provider, so the whole stack (cache, retries, usage, graphs) runs for
real around it; only the model is replaced by a Python function of the messages. An optional
latency makes it stand in for a remote API in scaling benchmarks.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agents.llm.embedded.provider import choice_logprobs
from eval.plumbing.litellm_setup import litellm

litellm_types = litellm.types.utils  # its response types, taken after the setup


@dataclass
class Reply:
    """A reply with token log-probabilities (per token, (token, logprob, [(alt, logprob)])),
    native tool calls ((name, arguments), arguments a mapping or raw JSON text) and/or the
    thinking a provider split off the text."""

    text: str = ""
    logprobs: list[tuple[str, float, list[tuple[str, float]]]] | None = None
    tool_calls: list[tuple[str, Any]] = field(default_factory=list)
    reasoning: str | None = None  # the message's reasoning_content
    stop_reason: str | None = None  # the stop string that ended it, as vLLM names it


Respond = Callable[[list[dict], dict[str, Any]], "str | Reply | Exception"]


class ScriptedProvider(litellm.CustomLLM):
    def __init__(self, respond: Respond, latency_s: float = 0.0) -> None:
        super().__init__()
        self.respond = respond
        self.latency_s = latency_s
        self.calls = 0

    async def acompletion(self, model: str, messages: list[dict], *args: Any, **kwargs: Any):
        self.calls += 1
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        outcome = self.respond(messages, kwargs.get("optional_params") or {})
        if isinstance(outcome, Exception):
            raise outcome
        logprobs, stopped_by = None, None
        if not isinstance(outcome, Reply):
            message = litellm_types.Message(role="assistant", content=outcome)
        else:
            logprobs, stopped_by = choice_logprobs(outcome.logprobs), outcome.stop_reason
            message = litellm_types.Message(
                role="assistant", content=outcome.text, reasoning_content=outcome.reasoning
            )
            if outcome.tool_calls:
                message = litellm_types.Message(
                    role="assistant",
                    content=outcome.text or None,
                    tool_calls=[
                        {
                            "id": f"call_{self.calls}_{i}",
                            "type": "function",
                            "function": {
                                "name": name,
                                "arguments": args if isinstance(args, str) else json.dumps(args),
                            },
                        }
                        for i, (name, args) in enumerate(outcome.tool_calls)
                    ],
                )
            outcome = outcome.text
        prompt_tokens = sum(len(str(m.get("content") or "").split()) for m in messages)
        return litellm_types.ModelResponse(
            model=model,
            choices=[
                litellm_types.Choices(
                    index=0,
                    finish_reason="tool_calls" if message.tool_calls else "stop",
                    message=message,
                    logprobs=logprobs,
                    provider_specific_fields={"stop_reason": stopped_by} if stopped_by else None,
                )
            ],
            usage=litellm_types.Usage(
                prompt_tokens=prompt_tokens,
                completion_tokens=len(outcome.split()),
                total_tokens=prompt_tokens + len(outcome.split()),
            ),
        )


def install(respond: Respond, latency_s: float = 0.0, name: str = "scripted") -> ScriptedProvider:
    """Register a scripted provider under `name`, replacing any earlier one of that name."""
    provider = ScriptedProvider(respond, latency_s)
    others = [e for e in litellm.custom_provider_map if e["provider"] != name]
    litellm.custom_provider_map = [*others, {"provider": name, "custom_handler": provider}]
    return provider
