"""The embedded models served to the agents through litellm, as the custom provider "local".

    register_local_provider()
    await litellm.acompletion(model="local/qwen2.5-coder-0.5b", messages=[...], stop=[...])

The job here is litellm's side of it: a request's parameters in, a ModelResponse out. The
models' files are found by `agents.llm.embedded.weights`, loaded into a pool of llama.cpp instances
by `agents.llm.embedded.pool` and run by `agents.llm.embedded.generation`. Prompts are rendered as
ChatML (`agents.llm.embedded.chatml`) and run as raw completions rather than through llama-cpp's
chat API, so that a trailing assistant message is continued in the same turn; a raw prompt
(``raw_prompt``, `LLM.complete`) is sent without a template.

Asked for `logprobs` (and `top_logprobs=k`), it returns each generated token's log-probability
and its k likeliest alternatives in `choices[0].logprobs`, as OpenAI's API does.

Given OpenAI-style ``tools`` (and ``tool`` messages), it renders them as Qwen2.5's template
does and parses ``<tool_call>`` blocks in the output into ``tool_calls``, as a vLLM server with
the ``hermes`` tool parser does (agents/llm/tool_text.py).

The response's `choices[0].provider_specific_fields["stop_reason"]` names the stop string that
ended the text (None at the model's end of turn or at max_tokens), as vLLM's `stop_reason` does;
finish_reason alone cannot tell a stop string from the end of the turn.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agents.llm import tool_text
from agents.llm.embedded.chatml import content_text, render_chatml
from agents.llm.embedded.generation import Generation, PromptTooLong, generate
from agents.llm.embedded.pool import SINGLE, LoadedModel, PoolPlan, load_pool
from agents.llm.embedded.prefix_cache import PrefixStore
from agents.llm.embedded.weights import LOCAL_MODELS, LocalModelError
from eval.plumbing.litellm_setup import litellm
from eval.plumbing.secrets.api_keys import EMBEDDED_PROVIDER

litellm_types = litellm.types.utils  # its response types, taken after the setup

PROVIDER = EMBEDDED_PROVIDER
DEFAULT_LOCAL_MODEL = f"{PROVIDER}/qwen2.5-coder-0.5b"


def _logprobs_asked(params: dict) -> int | None:
    """How many alternatives per token a request asks for: the chat form (``logprobs: true,
    top_logprobs: k``) or the completions form (``logprobs: k``); None when it asks none."""
    asked = params.get("logprobs")
    if asked is None or asked is False:
        return None
    if asked is True:
        return int(params.get("top_logprobs") or 0)
    return int(asked)


def choice_logprobs(scored: list | None) -> litellm_types.ChoiceLogprobs | None:
    """Per-token (token, logprob, [(alternative, logprob)]) as OpenAI's choice logprobs."""
    if scored is None:
        return None
    return litellm_types.ChoiceLogprobs(
        content=[
            litellm_types.ChatCompletionTokenLogprob(
                token=piece,
                logprob=logprob,
                bytes=list(piece.encode("utf-8")),
                top_logprobs=[
                    litellm_types.TopLogprob(token=t, logprob=lp, bytes=list(t.encode("utf-8")))
                    for t, lp in top
                ],
            )
            for piece, logprob, top in scored
        ]
    )


class LocalLLM(litellm.CustomLLM):
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
        self,
        model: str,
        messages: list,
        optional_params: dict,
        model_response: litellm_types.ModelResponse,
    ) -> litellm_types.ModelResponse:
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
            content_text(messages[0].get("content"))
            if params.get("raw_prompt")
            else render_chatml(messages, default_system)
        )
        extra = params.get("extra_body") or {}
        allowed = params.get("allowed_token_ids", extra.get("allowed_token_ids"))
        try:
            with pool.instance() as loaded:
                result = self._generate(loaded, prompt, params, stop, prefixes, allowed)
        except PromptTooLong as exc:
            raise litellm.ContextWindowExceededError(
                message=str(exc), model=name, llm_provider=PROVIDER
            ) from exc
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
        self, result: Generation, name: str, tools: Any, model_response: litellm_types.ModelResponse
    ) -> litellm_types.ModelResponse:
        text, calls = result.text, []
        if tools:
            text, calls = tool_text.parse_tool_calls(result.text, tool_text.tool_names(tools))
        message = litellm_types.Message(content=text, role="assistant")
        if calls:
            message = litellm_types.Message(
                content=text or None,
                role="assistant",
                tool_calls=[call.to_message() for call in calls],
            )
        model_response.choices = [
            litellm_types.Choices(
                finish_reason="tool_calls" if calls else result.finish_reason,
                index=0,
                message=message,
                provider_specific_fields={"stop_reason": result.stop_reason},
                logprobs=choice_logprobs(result.logprobs),
            )
        ]
        model_response.model = f"{PROVIDER}/{name}"
        model_response.created = int(time.time())
        model_response.usage = litellm_types.Usage(
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
    evaluating them again (the same outputs, agents.llm.embedded.prefix_cache), and
    `pool` is how many instances serve each model (`pool_plan`). A later call replaces the
    settings of an earlier one; models already loaded stay loaded.
    """
    handler = LocalLLM(cache_dir, n_ctx, seed, prefix_reuse, pool)
    others = [item for item in litellm.custom_provider_map if item.get("provider") != PROVIDER]
    litellm.custom_provider_map = [*others, {"provider": PROVIDER, "custom_handler": handler}]
