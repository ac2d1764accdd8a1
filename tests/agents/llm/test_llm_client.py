"""The LLM client: cache keys and modes, retries, usage and secrets, all without a network.

A scripted litellm CustomLLM (provider "scripted") plays the provider: each call pops the
next outcome, text or exception, and the test counts calls. litellm's `mock_response` covers
a priced OpenAI model.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import types
from pathlib import Path

import diskcache
import litellm
import pytest
from litellm import CustomLLM
from litellm.types.utils import Choices, Message, ModelResponse
from litellm.types.utils import Usage as LiteUsage

import agents.llm.client as llm_module
import eval.plumbing.retry
from agents.execution.task_queries import run_queries
from agents.llm.cache import LLMCache, cache_key
from agents.llm.client import LLM, NO_KEY_PLACEHOLDER, LLMAuthError, Usage
from agents.llm.model_checks import check_credentials
from eval.plumbing.secrets.model_keys import auth_error_message

REPO = Path(__file__).resolve().parents[3]
SECRET = "sk-test-SECRET-123"
USER = [{"role": "user", "content": "Which gene causes cystic fibrosis?"}]


class ScriptedLLM(CustomLLM):
    """Returns or raises the scripted outcomes in order; repeats the last one when done."""

    def __init__(self) -> None:
        super().__init__()
        self.script: list[str | Exception] = []
        self.calls: list[dict] = []

    async def acompletion(self, model, messages, *args, **kwargs):
        self.calls.append({"model": model, "messages": messages, **kwargs})
        outcome = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        if isinstance(outcome, Exception):
            raise outcome
        return ModelResponse(
            model="scripted-model",
            choices=[
                Choices(
                    index=0,
                    finish_reason="stop",
                    message=Message(role="assistant", content=outcome),
                )
            ],
            usage=LiteUsage(prompt_tokens=7, completion_tokens=3, total_tokens=10),
        )


@pytest.fixture
def provider(monkeypatch):
    handler = ScriptedLLM()
    handler.script = ["answer"]
    entries = [e for e in litellm.custom_provider_map if e["provider"] != "scripted"]
    monkeypatch.setattr(
        litellm,
        "custom_provider_map",
        [*entries, {"provider": "scripted", "custom_handler": handler}],
    )
    monkeypatch.setattr(eval.plumbing.retry, "BACKOFF", False)
    return handler


def run(coro):
    return asyncio.run(coro)


def rate_limit() -> Exception:
    return litellm.RateLimitError(message="slow down", llm_provider="scripted", model="m")


def test_hit_on_identical_call_with_params_in_another_order(provider, tmp_path):
    llm = LLM("scripted/m", cache_dir=tmp_path)
    first = run(llm.chat(USER, temperature=0, max_tokens=16, top_p=1))
    second = run(llm.chat(USER, top_p=1, max_tokens=16, temperature=0))
    assert len(provider.calls) == 1
    assert (first.cached, second.cached) == (False, True)
    assert second.text == first.text == "answer"
    assert second.finish_reason == "stop" and second.model == "scripted-model"


def test_default_params_and_call_params_share_entries(provider, tmp_path):
    run(LLM("scripted/m", cache_dir=tmp_path, params={"temperature": 0}).chat(USER))
    again = run(LLM("scripted/m", cache_dir=tmp_path).chat(USER, temperature=0))
    assert again.cached and len(provider.calls) == 1


def test_request_is_passed_through(provider, tmp_path):
    partial = [*USER, {"role": "assistant", "content": "The gene is"}]
    run(LLM("scripted/m", params={"max_tokens": 5}).chat(partial, stop=["\n"], temperature=0))
    call = provider.calls[0]
    assert call["messages"] == partial  # a partial assistant turn goes through unchanged
    sent = {k: v for k, v in call["optional_params"].items() if k != "max_retries"}
    assert sent == {"max_tokens": 5, "stop": ["\n"], "temperature": 0}
    assert call["optional_params"]["max_retries"] == 0  # tenacity is the only retry layer


def test_samples_are_distinct_entries(provider, tmp_path):
    provider.script = ["one", "two", "three"]
    llm = LLM("scripted/m", cache_dir=tmp_path, params={"temperature": 0.7})
    a = run(llm.chat(USER, sample=0))
    b = run(llm.chat(USER, sample=1))
    again = run(llm.chat(USER, sample=0))
    assert (a.text, b.text) == ("one", "two")
    assert again.cached and again.text == "one"
    assert len(provider.calls) == 2


def test_refresh_calls_again_and_overwrites(provider, tmp_path):
    provider.script = ["old", "new"]
    run(LLM("scripted/m", cache_dir=tmp_path).chat(USER))
    fresh = run(LLM("scripted/m", cache_dir=tmp_path, cache_mode="refresh").chat(USER))
    assert not fresh.cached and fresh.text == "new"
    reused = run(LLM("scripted/m", cache_dir=tmp_path).chat(USER))
    assert reused.cached and reused.text == "new"
    assert len(provider.calls) == 2


def test_off_never_reads_or_writes(provider, tmp_path):
    llm = LLM("scripted/m", cache_dir=tmp_path, cache_mode="off")
    run(llm.chat(USER))
    run(llm.chat(USER))
    assert len(provider.calls) == 2
    assert not (tmp_path / "llm").exists()


def test_no_cache_dir_means_no_cache(provider):
    llm = LLM("scripted/m")
    run(llm.chat(USER))
    run(llm.chat(USER))
    assert len(provider.calls) == 2


def test_bad_cache_mode_is_refused():
    with pytest.raises(ValueError, match="cache_mode"):
        LLM("scripted/m", cache_mode="sometimes")


def test_retries_transient_errors_then_succeeds(provider, caplog):
    provider.script = [
        rate_limit(),
        litellm.InternalServerError(message="502 upstream", llm_provider="scripted", model="m"),
        litellm.Timeout(message="timed out", model="m", llm_provider="scripted"),
        litellm.ServiceUnavailableError(message="503", llm_provider="scripted", model="m"),
        "finally",
    ]
    llm = LLM("scripted/m", max_retries=6)
    with caplog.at_level(logging.WARNING, logger="agents.llm"):
        completion = run(llm.chat(USER))
    assert completion.text == "finally"
    assert len(provider.calls) == 5
    assert llm.usage.calls == 1  # one logical call, however many attempts it took
    assert "RateLimitError on attempt 1/6" in caplog.text


def test_gives_up_after_max_retries_attempts(provider):
    provider.script = [rate_limit()]
    with pytest.raises(litellm.RateLimitError):
        run(LLM("scripted/m", max_retries=3).chat(USER))
    assert len(provider.calls) == 3


@pytest.mark.parametrize(
    "error",
    [
        litellm.BadRequestError(message="bad", model="m", llm_provider="scripted"),
        litellm.NotFoundError(message="no such model", model="m", llm_provider="scripted"),
        litellm.ContextWindowExceededError(message="too long", model="m", llm_provider="scripted"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_permanent_errors_are_not_retried(provider, tmp_path, error):
    provider.script = [error]
    with pytest.raises(type(error)):
        run(LLM("scripted/m", cache_dir=tmp_path).chat(USER))
    assert len(provider.calls) == 1


def test_usage_is_summed_and_unknown_cost_is_none(provider, tmp_path):
    llm = LLM("scripted/m", cache_dir=tmp_path)
    first = run(llm.chat(USER))
    run(llm.chat(USER))
    run(llm.chat([{"role": "user", "content": "another question"}]))
    assert first.usage.calls == 1 and first.usage.cached_calls == 0
    assert first.usage.cost is None  # "scripted/m" is in no cost map
    assert llm.usage.calls == 3 and llm.usage.cached_calls == 1
    assert (llm.usage.prompt_tokens, llm.usage.completion_tokens) == (21, 9)
    assert llm.usage.cost is None
    assert set(llm.usage.to_dict()) == {
        "calls",
        "cached_calls",
        "prompt_tokens",
        "completion_tokens",
        "cost",
        "latency_s",
    }


def test_known_model_is_priced_and_a_hit_costs_nothing(tmp_path):
    llm = LLM("openai/gpt-4o-mini", cache_dir=tmp_path, params={"mock_response": "mocked"})
    paid = run(llm.chat(USER))
    free = run(llm.chat(USER))
    assert paid.text == "mocked" and paid.usage.cost is not None and paid.usage.cost > 0
    assert free.cached and free.usage.cost == 0.0
    assert free.usage.prompt_tokens == paid.usage.prompt_tokens
    assert llm.usage.cost == pytest.approx(paid.usage.cost)


def test_usage_add_propagates_unknown_cost():
    total = Usage()
    total.add(Usage(calls=1, cost=0.5, latency_s=1.0))
    assert total.cost == 0.5
    total.add(Usage(calls=1, cost=None))
    total.add(Usage(calls=1, cost=0.25))
    assert total.calls == 3 and total.cost is None and total.latency_s == 1.0


def test_api_key_never_reaches_cache_or_logs(provider, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="LiteLLM")  # even litellm's own debug lines
    provider.script = [rate_limit(), "answer"]
    scripted = LLM("scripted/m", cache_dir=tmp_path, params={"api_key": SECRET})
    run(scripted.chat(USER))
    assert provider.calls[-1]["api_key"] == SECRET  # the key is used, just never stored
    priced = LLM("openai/gpt-4o-mini", cache_dir=tmp_path, params={"mock_response": "ok"})
    run(priced.chat(USER, api_key=SECRET))
    again = run(priced.chat(USER))  # same entry: the key is not part of it
    assert again.cached
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert files
    for path in files:
        assert SECRET.encode() not in path.read_bytes(), path
    assert caplog.records  # something was logged, and none of it is the key
    assert SECRET not in caplog.text
    assert SECRET not in repr(scripted)


def test_api_key_is_not_part_of_the_key():
    base = dict(model="m", api_base=None, messages=USER, stop=None, sample=0)
    assert cache_key(**base, params={"temperature": 0, "api_key": SECRET}) == cache_key(
        **base, params={"temperature": 0}
    )
    assert cache_key(**base, params={"temperature": 0}) != cache_key(
        **base, params={"temperature": 1}
    )


def _entry_key(tmp_path: Path) -> tuple[diskcache.Cache, str]:
    key = cache_key(
        model="scripted/m", api_base=None, messages=USER, stop=None, params={}, sample=0
    )
    return diskcache.Cache(str(tmp_path / "llm")), key


@pytest.mark.parametrize(
    "garbage",
    ["not json {", '{"text": 3}', "[1, 2]", b"\x00\x01binary", 42],
    ids=["bad-json", "wrong-field-type", "not-an-object", "bytes", "int"],
)
def test_corrupted_entry_is_recomputed_and_overwritten(provider, tmp_path, caplog, garbage):
    store, key = _entry_key(tmp_path)
    store.set(key, garbage)
    with caplog.at_level(logging.WARNING, logger="agents.llm.cache"):
        completion = run(LLM("scripted/m", cache_dir=tmp_path).chat(USER))
    assert not completion.cached and completion.text == "answer"
    assert "corrupted" in caplog.text
    assert json.loads(store.get(key))["text"] == "answer"
    assert run(LLM("scripted/m", cache_dir=tmp_path).chat(USER)).cached


def test_values_are_stored_as_json(provider, tmp_path):
    run(LLM("scripted/m", cache_dir=tmp_path).chat(USER))
    store, key = _entry_key(tmp_path)
    raw = store.get(key)
    assert isinstance(raw, str)
    assert json.loads(raw) == {
        "text": "answer",
        "finish_reason": "stop",
        "prompt_tokens": 7,
        "completion_tokens": 3,
        "cost": None,
        "model": "scripted-model",
    }


def test_another_process_sees_the_same_cache(provider, tmp_path):
    # The writer imports only agents.llm.cache (no litellm), which keeps it quick.
    key = cache_key(
        model="scripted/m", api_base=None, messages=USER, stop=None, params={}, sample=0
    )
    entry = {
        "text": "from the other process",
        "finish_reason": "stop",
        "prompt_tokens": 1,
        "completion_tokens": 2,
        "cost": None,
        "model": "scripted-model",
    }
    script = (
        "import json, sys; from agents.llm.cache import LLMCache; "
        "LLMCache(sys.argv[1]).set(sys.argv[2], json.loads(sys.argv[3]))"
    )
    llm = LLM("scripted/m", cache_dir=tmp_path)
    run(llm.chat([{"role": "user", "content": "open the cache first"}]))
    subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "llm"), key, json.dumps(entry)],
        check=True,
        cwd=REPO,
    )
    completion = run(llm.chat(USER))
    assert completion.cached and completion.text == "from the other process"
    assert LLMCache(tmp_path / "llm").get(key) == {
        **entry,
        "logprobs": None,
        "stop_reason": None,
        "tool_calls": None,
        "reasoning": None,
    }


def test_local_models_register_their_provider_once(provider, tmp_path, monkeypatch):
    registered: list[Path | None] = []

    def register_local_provider(cache_dir: Path | None, prefix_reuse: bool = True) -> None:
        registered.append(cache_dir)
        others = [e for e in litellm.custom_provider_map if e["provider"] != "local"]
        litellm.custom_provider_map = [*others, {"provider": "local", "custom_handler": provider}]

    fake = types.ModuleType("agents.llm.embedded.provider")
    fake.register_local_provider = register_local_provider
    monkeypatch.setitem(sys.modules, "agents.llm.embedded.provider", fake)
    llm = LLM("local/tiny", cache_dir=tmp_path)
    first = run(llm.chat(USER))
    run(llm.chat([{"role": "user", "content": "second"}]))
    assert registered == [tmp_path]
    assert first.text == "answer" and first.usage.cost is None
    assert "max_retries" not in provider.calls[0]["optional_params"]


class GateLimiter:
    """Stands in for the LLM's AsyncLimiter: lets ``capacity`` acquisitions through, then holds
    every later one until ``opened`` is set. Counts acquisitions; no clock involved."""

    def __init__(self, capacity: int) -> None:
        self.capacity, self.acquired = capacity, 0
        self.opened = asyncio.Event()

    async def acquire(self, amount: float = 1) -> None:
        self.acquired += 1
        if self.acquired > self.capacity:
            await self.opened.wait()


def test_rate_limit_caps_provider_requests_but_not_cache_hits(provider, tmp_path):
    """Every provider request waits for the limiter first; a cache hit never asks it. (How
    fast aiolimiter refills is aiolimiter's; bench/ measures the timing.)"""
    llm = LLM(model="scripted/m", cache_dir=tmp_path, rate_limit=5)
    assert (llm._limiter.max_rate, llm._limiter.time_period) == (5, 1)  # 5 a second
    assert LLM(model="scripted/m", cache_dir=tmp_path)._limiter is None  # no limit by default
    gate = llm._limiter = GateLimiter(capacity=5)
    messages = [[{"role": "user", "content": f"q{i}"}] for i in range(10)]

    async def until(condition) -> None:
        while not condition():
            await asyncio.sleep(0.001)

    async def burst() -> None:
        tasks = [asyncio.ensure_future(llm.chat(m)) for m in messages]
        # every call asked the limiter, and the five it let through finished (the wait_for
        # only keeps a broken limiter from hanging the suite)
        await asyncio.wait_for(
            until(lambda: gate.acquired == 10 and sum(t.done() for t in tasks) == 5), 60
        )
        assert len(provider.calls) == 5  # the five held never reached the provider
        gate.opened.set()
        await asyncio.gather(*tasks)

    async def hits() -> list:
        return await asyncio.gather(*(llm.chat(m) for m in messages))

    run(burst())
    assert len(provider.calls) == 10
    again = run(hits())
    assert all(c.cached for c in again)  # the same 10 again are cache hits ...
    assert gate.acquired == 10 and len(provider.calls) == 10  # ... that never asked the limiter


# --- missing and rejected keys ------------------------------------------------------------------

# What litellm 1.110 raises when the OpenAI SDK finds no key (seen against a keyless server).
MISSING_CREDENTIALS = (
    "litellm.InternalServerError: InternalServerError: OpenAIException - Missing credentials. "
    "Please pass an `api_key`, `workload_identity`, `admin_api_key`, or set the "
    "`OPENAI_API_KEY` or `OPENAI_ADMIN_KEY` environment variable."
)


def test_rejected_key_is_one_attempt_and_an_auth_error(provider, tmp_path):
    provider.script = [
        litellm.AuthenticationError(message=f"bad key {SECRET}", llm_provider="scripted", model="m")
    ]
    with pytest.raises(LLMAuthError) as caught:
        run(LLM("scripted/m", cache_dir=tmp_path, max_retries=6).chat(USER))
    assert len(provider.calls) == 1
    message = str(caught.value)
    assert message.startswith("scripted/m: authentication failed (401")
    assert "\n" not in message and SECRET not in message  # the provider's text is left out
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_missing_credentials_is_an_auth_error_not_a_5xx(provider, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    error = litellm.InternalServerError(
        message=MISSING_CREDENTIALS, llm_provider="openai", model="openai/m"
    )
    assert isinstance(error, llm_module.RETRYABLE_ERRORS)  # why it used to be retried
    provider.script = [error]
    with pytest.raises(LLMAuthError, match=r"^scripted/m: authentication failed \(no API key\)"):
        run(LLM("scripted/m", max_retries=6).chat(USER))
    assert len(provider.calls) == 1


def test_auth_error_names_the_providers_variable(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    error = litellm.AuthenticationError(message="401", llm_provider="openai", model="gpt-4o-mini")
    line = auth_error_message("openai/gpt-4o-mini", error, sent_placeholder=False)
    assert line == (
        "openai/gpt-4o-mini: authentication failed (401: the API key was rejected); "
        "set OPENAI_API_KEY"
    )
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)  # set but rejected: still the one to fix
    line = auth_error_message("openai/gpt-4o-mini", error, sent_placeholder=False)
    assert line.endswith("set OPENAI_API_KEY") and SECRET not in line
    line = auth_error_message("hosted_vllm/q", error, sent_placeholder=True)
    assert line.endswith("(401: the server wants an API key); set HOSTED_VLLM_API_KEY")


class _Capture:
    """Stands in for litellm.acompletion and keeps the keyword arguments of each call."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    async def __call__(self, **kwargs):
        self.calls.append(kwargs)
        return litellm.completion(model="gpt-4o-mini", messages=USER, mock_response="ok")


@pytest.fixture
def capture(monkeypatch):
    fake = _Capture()
    monkeypatch.setattr(litellm, "acompletion", fake)
    return fake


def test_placeholder_key_only_for_an_api_base_without_the_variable(capture, monkeypatch, tmp_path):
    base = "http://127.0.0.1:9/v1"
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    llm = LLM("openai/served", api_base=base, cache_dir=tmp_path)
    run(llm.chat(USER))
    assert capture.calls[-1]["api_key"] == NO_KEY_PLACEHOLDER
    assert NO_KEY_PLACEHOLDER not in repr(llm) and "api_key" not in llm.params
    assert run(llm.chat(USER)).cached  # the same entry as a call that had no key at all
    for path in (p for p in tmp_path.rglob("*") if p.is_file()):
        assert NO_KEY_PLACEHOLDER.encode() not in path.read_bytes(), path

    run(LLM("openai/served", api_base=base).chat(USER, api_key=SECRET))
    assert capture.calls[-1]["api_key"] == SECRET  # a caller's key is never replaced
    run(LLM("openai/gpt-4o-mini").chat(USER))
    assert "api_key" not in capture.calls[-1]  # the provider's own endpoint: no placeholder
    run(LLM("hosted_vllm/served", api_base=base).chat(USER))
    assert "api_key" not in capture.calls[-1]  # litellm needs no key for it
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    run(LLM("openai/served", api_base=base).chat(USER))
    assert "api_key" not in capture.calls[-1]  # litellm reads the variable itself


@pytest.mark.parametrize(
    ("model", "api_base"),
    [
        ("openai/served", "http://127.0.0.1:8000/v1"),
        ("local/smollm2-135m", None),
        ("scripted/m", None),
        ("hosted_vllm/served", None),
        ("ollama/llama3", None),  # litellm lists OLLAMA_API_BASE as missing: not a key
        ("bedrock/anthropic.claude-3", None),  # AWS finds credentials beyond the environment
    ],
)
def test_check_credentials_accepts(provider, monkeypatch, model, api_base):
    for name in ("OPENAI_API_KEY", "OLLAMA_API_BASE", "AWS_ACCESS_KEY_ID"):
        monkeypatch.delenv(name, raising=False)
    check_credentials(model, api_base)


def test_check_credentials_names_the_missing_variable(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    needs = "^openai/gpt-4o-mini needs an API key: set OPENAI_API_KEY "
    with pytest.raises(ValueError, match=needs):
        check_credentials("openai/gpt-4o-mini", None)
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    with pytest.raises(ValueError, match="set GOOGLE_API_KEY or GEMINI_API_KEY"):
        check_credentials("gemini/gemini-2.0-flash", None)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    check_credentials("openai/gpt-4o-mini", None)


class _Graph:
    """A graph whose queries answer, fail, or hit an auth error, by query id."""

    def __init__(self, auth_from: int) -> None:
        self.auth_from = auth_from
        self.started: list[str] = []

    async def ainvoke(self, state: dict) -> dict:
        self.started.append(state["query_id"])
        number = int(state["query_id"][1:])
        if number == 1:
            raise RuntimeError("this query's own failure")
        if number >= self.auth_from:
            raise LLMAuthError("scripted/m: authentication failed (401); set SCRIPTED_KEY")
        return {**state, "ranking": {"d1": 1.0}}


def test_auth_error_stops_the_run_and_keeps_finished_records(tmp_path):
    queries = {f"q{i}": f"question {i}" for i in range(6)}
    out = tmp_path / "queries.jsonl"
    graph = _Graph(auth_from=3)
    with pytest.raises(LLMAuthError, match="set SCRIPTED_KEY"):
        run(run_queries(graph, queries, out, concurrency=1, progress=False))
    assert graph.started == ["q0", "q1", "q2", "q3"]  # nothing starts after the auth error
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["query_id"], r["error"]) for r in lines] == [
        ("q0", None),
        ("q1", "RuntimeError: this query's own failure"),
        ("q2", None),
    ]
    # with a key, the re-run answers the rest (q1 is retried as any failed query is)
    graph = _Graph(auth_from=99)
    records = run(run_queries(graph, queries, out, concurrency=4, progress=False))
    assert graph.started == ["q1", "q3", "q4", "q5"] and len(records) == 6


def test_litellm_is_imported_in_one_place_that_keeps_it_offline():
    """Every module takes litellm from eval.plumbing.litellm_setup, which sets the local cost map
    first: a module imported alone (the scripted provider, in a notebook) never fetches it
    online."""
    import ast

    repo = Path(__file__).resolve().parents[3]
    found = []
    for package in ("agents", "eval", "retrievers", "prompts", "bench"):
        for path in sorted((repo / package).rglob("*.py")):
            if path.name == "litellm_setup.py":
                continue
            for node in ast.parse(path.read_text()).body:  # module level: runs on import
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
                if isinstance(node, ast.ImportFrom):
                    names = [node.module or ""]
                if any(n == "litellm" or n.startswith("litellm.") for n in names):
                    found.append(str(path.relative_to(repo)))
    assert found == []
    env = {k: v for k, v in os.environ.items() if k != "LITELLM_LOCAL_MODEL_COST_MAP"}
    code = "import os, agents.llm.scripted; print(os.environ['LITELLM_LOCAL_MODEL_COST_MAP'])"
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=repo, capture_output=True,
                         text=True, check=True, timeout=120)  # fmt: skip
    assert out.stdout.strip() == "True"
