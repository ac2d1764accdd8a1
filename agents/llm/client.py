"""The one LLM client every agent uses: litellm behind a disk cache, retries and usage totals.

`LLM(model=...)` accepts any litellm model string ("openai/gpt-4o-mini", "ollama/llama3",
"hosted_vllm/..." with `api_base`) plus "local/<name>" for the in-process provider of
`agents.llm.embedded.provider`. API keys come from the environment as litellm expects
(OPENAI_API_KEY, ...); they are never part of a cache key, a cache value or a log line.
A server given by `api_base` may need no key at all (vLLM, llama.cpp): when the provider's key
variable is unset, a placeholder key is sent so that the OpenAI SDK does not refuse to call.

A missing or rejected key raises `LLMAuthError` at once, without retrying: every other call
would fail the same way, so callers stop the run instead of failing query after query. Every
attempt waits at most `timeout` seconds for the server's answer (no call waits forever); a call
whose every attempt timed out or found no server raises `LLMUnavailable`, which stops the run
the same way, naming the server. A 429's Retry-After is waited out before the next attempt.
A refused connection (or a host name that does not resolve) before this client's server has
ever answered is not retried: nothing listens there, so the first attempt raises
`LLMUnavailable` saying "no server answers at <url> (connection refused)" within a second. Once
the server has answered, a refused connection is a server restarting or dropped, and is retried
with the other transient errors (eval.plumbing.retry's policy, `retry_refused`).
A reply the client cannot use (no choices; an answer emptied by the length limit, which is
what vLLM's reasoning parser returns when thinking fills the budget) raises `LLMReplyError`:
that query fails with the reason and its fix, and nothing is cached for it.

Usage accounting: a cache hit reports the stored token counts (the work the answer stands
for) but cost 0.0 (no money was spent this time), `cached_calls=1` and the lookup time as
latency. Cost is None whenever litellm's cost map cannot price the model (local models,
self-hosted servers, unknown names), and a None makes every total it is added to None.

The key rules are `eval.plumbing.secrets.model_keys`'s, a response's decoding (and `Completion`) is
`agents.llm.responses`'s, and litellm's process-wide settings are `eval.plumbing.litellm_setup`'s.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiolimiter import AsyncLimiter
from tenacity import RetryCallState

from agents.llm.cache import CACHE_MODES, LLMCache, cache_key, open_cache
from agents.llm.embedded.names import is_local, local_name
from agents.llm.embedded.prefix_cache import evaluation_settings
from agents.llm.errors import LLMAuthError, LLMReplyError, LLMUnavailable
from agents.llm.responses import (
    Completion,
    check_reply,
    entry_from_response,
    from_entry,
    unreadable_reply,
)
from agents.llm.serving import (
    CHAT_CONTINUING,
    ChatTemplate,
    FreshPrompts,
    continues_turns,
    fresh_call,
    load_template,
    replicas,
    resolve_server,
    server_template,
)
from agents.llm.tool_text import parse_tool_calls, tool_names
from eval.plumbing.litellm_setup import litellm
from eval.plumbing.retry import (
    DEFAULT_TIMEOUT_S,
    LLM_BACKOFF,
    no_server_reason,
    retry_refused,
    retrying,
)
from eval.plumbing.retry import retry_after_seconds as retry_after_seconds  # the client's name too
from eval.plumbing.secrets.api_keys import is_custom_provider, missing_key_variables, provider_of
from eval.plumbing.secrets.model_keys import auth_error_message, is_auth_error
from eval.plumbing.secrets.redaction import NO_KEY_PLACEHOLDER, public_url
from eval.usage import Usage

log = logging.getLogger(__name__)

# Transient failures worth waiting out. Everything else (bad request, auth, not found,
# context window exceeded, ...) fails the same way on every attempt, so it propagates at once.
# litellm reports a refused connection as InternalServerError.
RETRYABLE_ERRORS: tuple[type[BaseException], ...] = (
    litellm.RateLimitError,
    litellm.Timeout,
    litellm.APIConnectionError,
    litellm.InternalServerError,
    litellm.ServiceUnavailableError,
    litellm.BadGatewayError,
)


LLAMACPP_NEUTRAL = {"top_k": 0, "min_p": 0.0, "repeat_penalty": 1.0}
OPEN_SAMPLING = ("top_k", "repetition_penalty")  # open-model servers' own sampling parameters

# The Router's name for the replicas of one model, and how long a failed replica rests.
ROUTED = "replicas"
ROUTER_COOLDOWN_S = 30.0

_sleep = asyncio.sleep  # tenacity's sleep between attempts (tests record it)

# litellm reports a refused connection as InternalServerError with one of these messages
_NO_SERVER = ("Connection error", "Cannot connect to host", "Connection refused")


@dataclass(repr=False)
class LLM:
    """An LLM client with a disk cache, retries and a running usage total.

    `max_retries` is the total number of attempts per call (tenacity's stop_after_attempt).
    `params` are default request parameters; per-call `**params` override them.
    """

    model: str
    api_base: str | None = None
    cache_dir: Path | None = None  # None = no cache
    cache_mode: str = "use"  # "use" | "refresh" (call again, overwrite) | "off"
    max_retries: int = 6
    params: dict = field(default_factory=dict)
    usage: Usage = field(default_factory=Usage)
    rate_limit: float | None = (
        None  # provider requests per second (retries included); None = no cap
    )
    server: str = "auto"  # what serves api_base: agents.llm.serving.SERVERS
    chat_template: str | None = None  # llamacpp: how prompts are rendered (serving.py)
    routing: str = "simple-shuffle"  # several api_base URLs: litellm Router's strategy
    timeout: float | None = DEFAULT_TIMEOUT_S  # seconds an attempt waits for the answer
    # a dry run's worst-case model (agents.llm.dry.DryModel): every call is answered and
    # counted there, and nothing is sent, cached or asked of a server
    dry: Any = field(default=None, compare=False)
    # local/ models: the llama.cpp instances that serve it (agents.llm.embedded.pool.PoolPlan; None:
    # one instance)
    local_pool: Any = field(default=None, compare=False)
    # local/ models: restore prompt prefixes already evaluated (agents.llm.embedded.prefix_cache)
    local_prefix_reuse: bool = field(default=True, compare=False)
    _cache: LLMCache | None = field(default=None, init=False, repr=False, compare=False)
    _template: ChatTemplate | None = field(default=None, init=False, repr=False, compare=False)
    _router: Any = field(default=None, init=False, repr=False, compare=False)
    _fresh: FreshPrompts = field(
        default_factory=FreshPrompts, init=False, repr=False, compare=False
    )
    _local_ready: bool = field(default=False, init=False, repr=False, compare=False)
    _limiter: AsyncLimiter | None = field(default=None, init=False, repr=False, compare=False)
    # a request of this client has been answered: a refused connection is then worth retrying
    _answered: bool = field(default=False, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.cache_mode not in CACHE_MODES:
            raise ValueError(f"cache_mode must be one of {CACHE_MODES}, got {self.cache_mode!r}")
        if self.cache_dir is not None:
            self.cache_dir = Path(self.cache_dir)
        # One limiter per client, and a run holds one client per model: a per-model cap.
        # Cache hits never reach it.
        self._limiter = AsyncLimiter(self.rate_limit, 1) if self.rate_limit else None
        self.server = resolve_server(self.server, self.model)
        if self.renders_prompts and self.chat_template:
            self._template = load_template(self.chat_template)

    @property
    def renders_prompts(self) -> bool:
        """Whether prompts are rendered here (``--server llamacpp``: its completions path)."""
        return self.server == "llamacpp" and not is_local(self.model)

    def prepare(self) -> None:
        """What must hold before the first call, checked now: a llama.cpp server without
        ``chat_template`` must report its own (ValueError, one line, otherwise)."""
        if self.renders_prompts and self._template is None:
            self._template = server_template(self.api_base)

    @property
    def continues_turns(self) -> bool:
        """Whether a trailing assistant message is continued in the same turn."""
        return continues_turns(self.server, self.model)

    async def chat(
        self,
        messages: list[dict],
        *,
        stop: list[str] | None = None,
        sample: int = 0,
        **params: Any,
    ) -> Completion:
        """One chat completion, from the cache when possible.

        If the last message is an assistant message it is a partial turn to be continued and
        is passed through unchanged: the local provider continues it, API providers do what
        they do with it. For chat-only APIs the agents put results in a user message instead.

        `sample` is a sample index that only distinguishes cache entries: draw n samples at
        temperature > 0 with sample=0..n-1; callers at temperature 0 pass 0.
        """
        return await self._complete(messages, None, stop, sample, params)

    async def complete(
        self, prompt: str, *, stop: list[str] | None = None, sample: int = 0, **params: Any
    ) -> Completion:
        """One completion of the raw text ``prompt``: no chat template, as vLLM's
        ``LLM.generate(prompts)`` runs a model (Rank1). Served models get it on the
        completions endpoint (``/v1/completions``); in-process providers (local/, scripted/)
        get it as the one message with ``raw_prompt`` set. Cached, retried and counted as
        `chat` is; a raw prompt never shares a cache entry with a chat of the same text."""
        messages = [{"role": "user", "content": prompt}]
        return await self._complete(messages, prompt, stop, sample, params)

    async def _complete(
        self,
        messages: list[dict],
        prompt: str | None,
        stop: list[str] | None,
        sample: int,
        params: dict[str, Any],
    ) -> Completion:
        request = {**self.params, **params}
        if prompt is not None:
            request["raw_prompt"] = True
        if self.dry is not None:
            return self._record(self.dry.complete(self.model, messages, request))
        continuing = prompt is None and bool(messages) and messages[-1].get("role") == "assistant"
        if prompt is None:  # a raw prompt is sent as it is: no template to check
            self.prepare()
        if continuing and self.server in CHAT_CONTINUING:
            # their chat endpoints continue the final message when asked to
            extra = {**request.get("extra_body", {}), "continue_final_message": True,
                     "add_generation_prompt": False}  # fmt: skip
            request["extra_body"] = extra
        if self._template is not None and prompt is None:
            # the prompt is rendered here: the template is part of what decides the answer
            request["chat_template_sha256"] = self._template.sha256
        if self.renders_prompts:
            # llama.cpp's samplers default to top_k 40, min_p 0.05 and (llama-cpp-python's
            # server) repeat_penalty 1.1; neutral values make temperature and top_p mean what
            # they mean in the OpenAI API, as the embedded provider does. Asked-for top_k and
            # repetition_penalty (agents.llm.sampling) go by llama.cpp's names.
            asked = {k: request.pop(k) for k in OPEN_SAMPLING if k in request}
            if "repetition_penalty" in asked:
                asked["repeat_penalty"] = asked.pop("repetition_penalty")
            request["extra_body"] = {**LLAMACPP_NEUTRAL, **asked, **request.get("extra_body", {})}
        elif self.server in CHAT_CONTINUING:
            # vLLM's and SGLang's own sampling parameters, outside the OpenAI schema
            asked = {k: request.pop(k) for k in OPEN_SAMPLING if k in request}
            if asked:
                request["extra_body"] = {**asked, **request.get("extra_body", {})}
        cache = self._open_cache()
        key = None
        if cache is not None:
            key = cache_key(
                model=self.model,
                api_base=self.api_base,
                messages=messages,
                stop=stop,
                params={**request, **evaluation_settings(self.model)},
                sample=sample,
            )
            if self.cache_mode == "use":
                start = time.perf_counter()
                entry = cache.get(key)
                if entry is not None:
                    return self._record(from_entry(entry, time.perf_counter() - start))

        if is_local(self.model) and not self._local_ready:
            # Imported here so that API-only setups never load the local model stack.
            from agents.llm.embedded.provider import register_local_provider

            pool = {} if self.local_pool is None else {"pool": self.local_pool}
            register_local_provider(self.cache_dir, prefix_reuse=self.local_prefix_reuse, **pool)
            self._local_ready = True

        start = time.perf_counter()
        response = await self._call_with_retries(messages, stop, request, prompt)
        latency = time.perf_counter() - start
        entry = entry_from_response(response, self.model)
        check_reply(entry, self.model, request)  # before caching: no unusable answer is kept
        if self._template is not None and prompt is None and request.get("tools"):
            # the completions endpoint returns text: read the calls from it, as local/ does
            entry["text"], calls = parse_tool_calls(entry["text"], tool_names(request["tools"]))
            entry["tool_calls"] = [dataclasses.asdict(call) for call in calls]
        if cache is not None and key is not None:  # key is set whenever cache is
            cache.set(key, entry)
        completion = from_entry(entry, latency, cached=False)
        return self._record(completion)

    def truncate_tokens(self, text: str, limit: int) -> tuple[str, str]:
        """``text`` cut to its first ``limit`` tokens, and how they were counted: the embedded
        model's own tokenizer (exact), else litellm's tokenizer for the model (its Hugging
        Face tokenizer where litellm knows one and it is cached, else tiktoken's cl100k_base:
        an approximation)."""
        if self.dry is not None:  # counts without joining a model file
            return self.dry.truncate(self.model, text, limit)
        if is_local(self.model):
            from agents.llm.embedded.pool import tokenizer

            tok = tokenizer(local_name(self.model), self.cache_dir)
            ids = tok.tokenize(text)
            how = f"{self.model}'s own tokenizer"
            return (text if len(ids) <= limit else tok.detokenize(ids[:limit])), how
        saved = litellm.disable_hf_tokenizer_download
        litellm.disable_hf_tokenizer_download = True  # no network for a count
        try:
            ids = litellm.encode(model=self.model, text=text)
            if len(ids) > limit:
                text = litellm.decode(model=self.model, tokens=ids[:limit])
        finally:
            litellm.disable_hf_tokenizer_download = saved
        return text, "litellm's tokenizer for the model (approximate unless it is the model's)"

    def __repr__(self) -> str:
        # A caller may pass api_key in params; a printed or logged client must not show it.
        params = {k: "***" if k == "api_key" else v for k, v in self.params.items()}
        return (
            f"LLM(model={self.model!r}, api_base={self.api_base!r}, cache_dir={self.cache_dir!r},"
            f" cache_mode={self.cache_mode!r}, max_retries={self.max_retries}, params={params!r})"
        )

    def close(self) -> None:
        """Close the cache's database connection (it reopens on the next call)."""
        if self._cache is not None:
            self._cache.close()
            self._cache = None

    @property
    def template(self) -> ChatTemplate | None:
        """The chat template prompts are rendered with here (``--server llamacpp``)."""
        return self._template

    def _open_cache(self) -> LLMCache | None:
        if self.cache_dir is None or self.cache_mode == "off":
            return None
        if self._cache is None:
            self._cache = open_cache(self.cache_dir / "llm")
        return self._cache

    def _record(self, completion: Completion) -> Completion:
        self.usage.add(completion.usage)
        return completion

    async def _call_with_retries(
        self, messages: list[dict], stop: list[str] | None, request: dict, prompt: str | None
    ) -> Any:
        retryable = retry_refused(RETRYABLE_ERRORS, lambda: self._answered)
        attempts = retrying(
            LLM_BACKOFF,
            self.max_retries,
            # a reply whose bytes cannot be read comes back the same: not retried
            lambda exc: unreadable_reply(exc) is None and retryable(exc),
            asynchronous=True,
            before_sleep=self._log_retry,
            sleep=lambda seconds: _sleep(seconds),
        )
        kwargs = dict(request)
        if not is_local(self.model):
            # Turns off the OpenAI SDK's own retries (2 by default): tenacity is the only retry
            # layer, so `self.max_retries` means what it says. Custom providers would receive
            # it among their generation params, and the local one has no SDK to configure.
            kwargs.setdefault("max_retries", 0)
        placeholder = bool(
            self.api_base and "api_key" not in kwargs and missing_key_variables(self.model)
        )
        if placeholder:
            kwargs["api_key"] = NO_KEY_PLACEHOLDER
        kwargs.pop("chat_template_sha256", None)
        if self.timeout is not None and not is_local(self.model):
            kwargs.setdefault("timeout", self.timeout)
        try:
            async for attempt in attempts:
                with attempt:
                    if self._limiter:
                        await self._limiter.acquire()
                    try:
                        response = await self._send(messages, stop, kwargs, prompt)
                        self._answered = True
                        return response
                    except Exception as exc:
                        if not is_auth_error(exc):
                            raise
                        # Not retryable, and without the provider's error chained: its text
                        # may quote the key, and a traceback is printed wherever stderr goes.
                        message = auth_error_message(self.model, exc, placeholder)
                        raise LLMAuthError(message) from None
        except Exception as exc:
            unreadable = unreadable_reply(exc)
            if unreadable is not None:  # that query's: the server is there, it sent bytes
                self._answered = True
                raise LLMReplyError(f"{self.model}: {unreadable}; it cannot be read") from None
            # an in-process provider (local/, scripted/) has no server: litellm reports its
            # failures as connection errors, which are that query's
            if not isinstance(exc, RETRYABLE_ERRORS) or not is_no_server(exc):
                raise
            if is_custom_provider(provider_of(self.model) or ""):
                raise
            raise LLMUnavailable(self._unavailable_message(exc)) from None
        raise AssertionError("unreachable: tenacity reraises the last error")

    def _unavailable_message(self, exc: BaseException) -> str:
        where = public_url(self.api_base) or f"{provider_of(self.model) or 'its provider'}'s API"
        tries = f"{max(1, self.max_retries)} attempts"
        refused = no_server_reason(exc)
        if refused and not self._answered:
            flag = "--api-base (or the stage's api_base=)" if self.api_base else "the model name"
            return f"{self.model}: no server answers at {where} ({refused}); start it or fix {flag}"
        if isinstance(exc, litellm.Timeout):
            why = f"no answer within {self.timeout:g} s in {tries}"
            hint = "is the server up and not overloaded? --timeout sets the wait"
        else:
            why = f"no server answered in {tries}"
            hint = "is the server up at that address?"
        return f"{self.model} at {where}: {why}; {hint}"

    async def _send(
        self, messages: list[dict], stop: list[str] | None, kwargs: dict, prompt: str | None
    ) -> Any:
        """One request: chat, or a completion of a raw or rendered prompt (llamacpp), to the
        one server or through the Router over the replicas."""
        urls = replicas(self.api_base)
        raw = kwargs.pop("raw_prompt", False)
        if raw and is_custom_provider(provider_of(self.model) or ""):
            # an in-process provider reads the one message as the prompt itself
            return await litellm.acompletion(
                model=self.model, api_base=self.api_base, messages=messages, stop=stop,
                raw_prompt=True, **kwargs,
            )  # fmt: skip
        if raw or self._template is not None:
            if kwargs.get("logprobs") is True:  # the completions API's form: how many
                kwargs = {**kwargs, "logprobs": max(1, int(kwargs.pop("top_logprobs", 0) or 0))}
                kwargs.pop("top_logprobs", None)
            tools = kwargs.pop("tools", None)
            kwargs.pop("tool_choice", None)
            text = prompt if raw and prompt is not None else self._template.render(messages, tools)
            call = dict(prompt=text, stop=stop, **kwargs)
            if self.server != "llamacpp":  # a raw prompt to vLLM, SGLang or an OpenAI-like API
                if len(urls) > 1:
                    return await self._replicas(urls).atext_completion(model=ROUTED, **call)
                return await litellm.atext_completion(
                    model=self.model, api_base=self.api_base, **call
                )
            if len(urls) > 1:
                return await self._replicas(urls).atext_completion(model=ROUTED, **fresh_call(call))

            def sender(c: dict) -> Any:
                return litellm.atext_completion(model=self.model, api_base=self.api_base, **c)

            # every prompt evaluated from its first token, as local/'s outputs are: the answer
            # cannot depend on what the server ran before (serving.FreshPrompts)
            return await self._fresh.send(urls[0], call, sender)
        call = dict(messages=messages, stop=stop, **kwargs)
        if len(urls) > 1:
            return await self._replicas(urls).acompletion(model=ROUTED, **call)
        return await litellm.acompletion(model=self.model, api_base=self.api_base, **call)

    def _replicas(self, urls: list[str]) -> Any:
        """litellm's Router over the replicas: a failed or unreachable one is cooled down at
        once and the request is sent to another."""
        if self._router is None:
            from litellm import Router

            deployments = [
                {"model_name": ROUTED, "litellm_params": {"model": self.model, "api_base": url}}
                for url in urls
            ]
            self._router = Router(
                model_list=deployments,
                routing_strategy=self.routing,
                num_retries=len(urls),  # enough to reach every replica once
                retry_after=0,
                allowed_fails=0,  # one failure cools a replica down ...
                cooldown_time=ROUTER_COOLDOWN_S,  # ... for this long
            )
        return self._router

    def _log_retry(self, state: RetryCallState) -> None:
        # Only the error's type: provider messages may echo parts of the request.
        exc = state.outcome.exception() if state.outcome else None
        wait = state.next_action.sleep if state.next_action else 0.0
        log.warning(
            "%s: %s on attempt %d/%d; retrying in %.1fs",
            self.model,
            type(exc).__name__,
            state.attempt_number,
            self.max_retries,
            wait,
        )


def is_no_server(exc: BaseException) -> bool:
    """A timeout, or no server at the address (however litellm reports a refused connection)."""
    if isinstance(exc, litellm.Timeout | litellm.APIConnectionError) or no_server_reason(exc):
        return True
    return isinstance(exc, litellm.InternalServerError) and any(m in str(exc) for m in _NO_SERVER)


async def close_clients() -> None:
    """Close the HTTP sessions litellm opened, so that a run ends without "Unclosed client
    session" warnings."""
    await litellm.close_litellm_async_clients()
