"""Prompt-prefix reuse in the embedded provider (agents/llm/embedded/prefix_cache.py): only whole
chunks of prompt are ever restored, a restore gives bitwise the KV a fresh evaluation computes, and
a whole run with reuse on equals the run with it off, call for call."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from agents.commands.run import main as run_main
from agents.llm.embedded import pool as llm_pool
from agents.llm.embedded import prefix_cache
from agents.llm.embedded.generation import generate
from agents.llm.embedded.pool import PoolPlan, load_model, load_pool
from agents.llm.embedded.prefix_cache import PrefixStore, aligned, common_prefix, reusable

SMOL = "local/smollm2-135m"
QWEN = "local/qwen2.5-coder-0.5b"
FACTS = " ".join(f"Fact {i}: the patient reports symptom {i * 7 % 13}." for i in range(24))
PROMPTS = [
    f"<|im_start|>user\n{FACTS} Question {k}: {q}<|im_end|>\n<|im_start|>assistant\n"
    for k, q in enumerate(("What now?", "Which test first?", "Name a drug.", "Why?"))
]


# --- the store --------------------------------------------------------------------------------


def ids(*values: int) -> np.ndarray:
    return np.asarray(values, dtype=np.int32)


def test_only_whole_chunks_are_reused_and_one_token_is_left_to_evaluate():
    assert [aligned(n, 4) for n in (0, 3, 4, 7, 8, 9)] == [0, 0, 4, 4, 8, 8]
    assert reusable(7, 20, 4) == 4  # 7 shared positions: one whole chunk
    assert reusable(12, 12, 4) == 8  # the whole prompt shared: its last chunk is evaluated
    assert reusable(12, 13, 4) == 12
    for kept in range(0, 40):
        for length in range(1, 40):
            n = reusable(kept, length, 8)
            assert n % 8 == 0 and n <= kept and n < length


def test_the_longest_kept_prefix_is_found_and_extended_entries_are_dropped():
    store = PrefixStore(budget=1000, chunk=4)
    store.put(ids(1, 2, 3, 4), b"a" * 10)
    store.put(ids(1, 2, 3, 4, 5, 6, 7, 8), b"b" * 20)  # extends the first: it replaces it
    assert len(store) == 1 and store.nbytes == 20
    store.put(ids(1, 2, 3, 4), b"c" * 10)  # held whole already
    assert len(store) == 1
    store.put(ids(9, 9, 9, 9), b"d" * 10)
    n, entry = store.longest(ids(1, 2, 3, 4, 5, 6, 7, 0, 0))
    assert n == 4 and entry is not None and entry.state == b"b" * 20
    n, entry = store.longest(ids(1, 2, 3, 4, 5, 6, 7, 8, 0))
    assert n == 8 and entry.state == b"b" * 20
    assert store.longest(ids(5, 5, 5, 5, 5)) == (0, None)
    store.put(ids(1, 2, 3), b"e")  # not a whole number of chunks: never kept
    store.put(ids(), b"")
    assert len(store) == 2


def test_the_least_recently_used_prefix_goes_first_within_the_budget():
    store = PrefixStore(budget=30, chunk=2)
    store.put(ids(1, 1), b"x" * 10)
    store.put(ids(2, 2), b"x" * 10)
    store.put(ids(3, 3), b"x" * 10)
    store.longest(ids(1, 1, 0))  # used: now the most recent
    store.put(ids(4, 4), b"x" * 10)
    assert store.longest(ids(2, 2, 0)) == (0, None)  # evicted
    assert store.longest(ids(1, 1, 0))[0] == 2
    assert store.nbytes == 30 and store.stats.evicted == 1
    store.put(ids(5, 5), b"x" * 31)  # larger than the budget: not kept, nothing evicted
    assert len(store) == 3


def test_common_prefix_of_token_arrays():
    assert common_prefix(ids(1, 2, 3), ids(1, 2, 4)) == 2
    assert common_prefix(ids(1, 2), ids(1, 2, 4)) == 2
    assert common_prefix(ids(), ids(1)) == 0


# --- llama.cpp --------------------------------------------------------------------------------


def _last_logits(llm) -> np.ndarray:
    return np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(llm.n_vocab(),)).copy()


@pytest.mark.slow
def test_an_aligned_restore_gives_bitwise_the_logits_of_a_fresh_evaluation(monkeypatch):
    # Qwen2.5 (the main job's model) in the AVX2 build: an unaligned reuse evaluates a few
    # tokens as a batch of their own, with other kernels than the whole chunk a fresh
    # evaluation runs, and its floats differ (on SmolLM2 these happen to agree); so none is made
    monkeypatch.setattr(prefix_cache, "CHUNK", 16)
    loaded = load_model(QWEN)
    llm = loaded.llm
    base = "<|im_start|>user\n" + " ".join(
        f"fact {i}: the patient has symptom {i * 7 % 13}." for i in range(12)
    )
    first, second = (
        llm.tokenize(text.encode(), add_bos=True, special=True)
        for text in (base + " First?", base + " Second question here?")
    )
    shared = common_prefix(np.asarray(first), np.asarray(second))
    assert shared % 16  # the prompts share a prefix that ends inside a chunk
    llm.n_tokens = 0
    llm.eval(second)
    fresh = _last_logits(llm)
    after = {}
    for keep in (aligned(shared, 16), shared):
        llm.n_tokens = 0
        llm.eval(first)
        llm.n_tokens = keep  # what the KV cache keeps of the first prompt
        llm.eval(second[keep:])
        after[keep] = _last_logits(llm)
    assert np.array_equal(after[aligned(shared, 16)], fresh)  # bitwise
    assert np.abs(after[shared] - fresh).max() > 1e-3  # unaligned: other floats


@pytest.mark.slow
def test_a_restored_state_in_another_instance_gives_the_same_tokens_and_logprobs(monkeypatch):
    monkeypatch.setattr(prefix_cache, "CHUNK", 16)
    pool = load_pool(QWEN, plan=PoolPlan(2, 1, 1, "test"))
    a, b = pool.instances
    fresh = [generate(a, p, temperature=0.0, max_tokens=8, logprobs=3) for p in PROMPTS]
    starts: list[int] = []
    for loaded in (a, b):
        monkeypatch.setattr(loaded.llm, "eval", _recording(loaded.llm, starts))
    reused = []
    for i, prompt in enumerate(PROMPTS):
        loaded = (a, b)[i % 2]
        loaded.live = None  # so each call restores a state another call kept
        reused.append(generate(loaded, prompt, temperature=0.0, max_tokens=8, logprobs=3,
                               prefixes=pool.prefixes))  # fmt: skip
    assert [(g.text, g.logprobs) for g in reused] == [(g.text, g.logprobs) for g in fresh]
    assert pool.prefixes.stats.restores == len(PROMPTS) - 1
    assert all(start % 16 == 0 for start in starts) and max(starts) > 0


def _recording(llm, starts: list[int]):
    """llm.eval, noting where each prompt evaluation (more than one token) starts."""
    original = llm.eval

    def evaluate(tokens):
        if len(tokens) > 1:
            starts.append(llm.n_tokens)
        return original(tokens)

    return evaluate


# --- whole runs ---------------------------------------------------------------------------------


def _run(tmp_path, name: str, *flags: str) -> dict[str, list]:
    """A Search-o1 run on the embedded Qwen2.5 (SmolLM2 answers at once, without a search):
    query id -> every call's output and the ranking."""
    argv = ["--agent", "search-o1", "--model", QWEN, "--limit", "2", "--max-tokens", "48",
            "--concurrency", "2", "--cache", "off", "--runs-dir", str(tmp_path), "--run-name",
            name, "--quiet", *flags]  # fmt: skip
    assert run_main(argv) == 0
    outputs = {}
    for line in (tmp_path / name / "demo" / "queries.jsonl").read_text().splitlines():
        record = json.loads(line)
        steps = [s.get("output") for s in record["steps"] if "output" in s]
        outputs[record["query_id"]] = [steps, record["ranking"][:10]]
    return outputs


@pytest.mark.parametrize("instances", ["1", "2"])
@pytest.mark.slow
def test_a_search_o1_run_with_reuse_equals_the_run_without_call_for_call(tmp_path, instances):
    off = _run(tmp_path, "off", "--local-prefix-reuse", "off", "--local-instances", instances)
    plans = [p for key, p in llm_pool._pools.items() if key[0] == "qwen2.5-coder-0.5b"]
    for pool in plans:
        pool.prefixes = PrefixStore(pool.plan.prefix_bytes)  # nothing from earlier tests
    on = _run(tmp_path, "on", "--local-prefix-reuse", "on", "--local-instances", instances)
    assert on == off
    assert sum(len(steps) for steps, _ in on.values()) > len(on)  # several calls per query
    restored = sum(p.prefixes.stats.restored_tokens for p in plans)
    assert restored > 0  # the instructions, at least, were not evaluated again


@pytest.mark.slow
def test_the_setting_is_recorded_and_the_chunk_bound(tmp_path, capsys):
    argv = ["--agent", "hyde", "--model", SMOL, "--limit", "1", "--max-tokens", "8",
            "--local-prefix-reuse", "off", "--runs-dir", str(tmp_path), "--run-name", "r",
            "--quiet"]  # fmt: skip
    assert run_main(argv) == 0
    config = json.loads((tmp_path / "r" / "config.json").read_text())
    assert config["llm"]["local_prefix_reuse"] is False
    assert config["embedded"] == {SMOL: {"n_batch": prefix_cache.CHUNK}}
    # how fast, not what: resuming with reuse on is the same run
    assert run_main([*argv[:9], "on", *argv[10:]]) == 0
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        run_main([*argv[:9], "maybe", *argv[10:]])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert "--local-prefix-reuse: expected on or off, got 'maybe'" in err[-1]


@pytest.mark.slow
def test_a_response_computed_in_other_chunks_is_not_taken_from_the_cache(tmp_path, monkeypatch):
    def hyde(name: str) -> dict:
        argv = ["--agent", "hyde", "--model", SMOL, "--limit", "1", "--max-tokens", "8",
                "--cache-dir", str(tmp_path / "cache"), "--runs-dir", str(tmp_path / "runs"),
                "--run-name", name, "--quiet"]  # fmt: skip
        assert run_main(argv) == 0
        return json.loads((tmp_path / "runs" / name / "demo" / "metrics.json").read_text())

    assert hyde("a")["usage"]["cached_calls"] == 0
    assert hyde("b")["usage"]["cached_calls"] == 1
    monkeypatch.setattr(prefix_cache, "CHUNK", 64)
    assert hyde("c")["usage"]["cached_calls"] == 0


@pytest.mark.slow
def test_concurrent_calls_through_the_pool_keep_their_outputs(monkeypatch):
    pool = load_pool(SMOL, plan=PoolPlan(2, 1, 1, "test"))
    pool.prefixes = PrefixStore(64 << 20)
    alone = [generate(pool.instances[0], p, temperature=0.0, max_tokens=12).text for p in PROMPTS]

    def through(prompt: str) -> str:
        with pool.instance() as loaded:
            return generate(loaded, prompt, temperature=0.0, max_tokens=12,
                            prefixes=pool.prefixes).text  # fmt: skip

    with ThreadPoolExecutor(2) as workers:
        assert list(workers.map(through, PROMPTS * 3)) == alone * 3
    assert pool.prefixes.stats.restored_tokens > 0
