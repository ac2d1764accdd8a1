"""A pool of embedded-model instances: as many as the cores, the concurrency and the memory
allow, each call on whichever is free, every output the one a single instance gives."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from agents.commands.run import main as run_main
from agents.llm.embedded import pool as llm_pool
from agents.llm.embedded.generation import generate
from agents.llm.embedded.pool import SINGLE, PoolPlan, load_pool, pool_plan
from agents.llm.embedded.weights import LOCAL_MODELS, model_file

MODEL = "local/smollm2-135m"  # shipped whole: nothing to join
BIG = 64 << 30


@pytest.fixture
def machine(monkeypatch):
    def set_machine(cores: int, available: int | None) -> None:
        monkeypatch.setattr(llm_pool, "cpu_count", lambda: cores)
        monkeypatch.setattr(llm_pool, "memory_available", lambda: available)

    return set_machine


def test_auto_takes_the_cores_the_concurrency_allows(machine):
    machine(2, BIG)
    assert pool_plan(MODEL, concurrency=4) == PoolPlan(2, 1, 1, "auto: 2 cores, concurrency 4")
    machine(8, BIG)
    assert pool_plan(MODEL, concurrency=4) == PoolPlan(4, 1, 2, "auto: 8 cores, concurrency 4")
    assert pool_plan(MODEL, concurrency=1).instances == 1  # one query at a time: one instance
    assert pool_plan(MODEL, requested=3, concurrency=4) == PoolPlan(3, 1, 2, "--local-instances 3")


def test_one_core_or_little_memory_gets_one_instance_and_says_why(machine):
    machine(1, BIG)
    plan = pool_plan(MODEL, concurrency=4)
    assert (plan.instances, plan.n_threads_batch) == (1, SINGLE.n_threads_batch)
    assert plan.reason == "auto: 1 cores, concurrency 4 (1 core)"
    each = llm_pool.instance_bytes(model_file(MODEL), LOCAL_MODELS["smollm2-135m"].n_ctx)
    assert model_file(MODEL).stat().st_size < each  # weights, KV cache, buffers
    machine(4, llm_pool.HEADROOM_BYTES + 2 * each + 1)  # room for two
    plan = pool_plan(MODEL, concurrency=4)
    assert plan.instances == 2 and "GiB available holds 2" in plan.reason
    machine(4, llm_pool.HEADROOM_BYTES + each // 2)  # room for none but the first
    plan = pool_plan(MODEL, requested=4, concurrency=4)
    assert plan.instances == 1 and plan.reason.endswith("GiB available holds 1")


def test_a_requested_count_beyond_the_cores_or_the_calls_is_lowered_and_said(machine, capsys):
    machine(2, BIG)  # memory for far more: only the cores hold it back
    plan = pool_plan(MODEL, requested=64, concurrency=4)
    why = "--local-instances 64 lowered to 2: no more than the cores (2)"
    assert plan == PoolPlan(2, 1, 1, why)
    assert capsys.readouterr().err == f"note: {why}\n"  # one line, naming the flag and cap
    machine(8, BIG)
    plan = pool_plan(MODEL, requested=64, concurrency=4, queries=2)
    assert plan.instances == 2 and plan.reason.endswith("no more than the queries (2)")
    plan = pool_plan(MODEL, requested=8, concurrency=1)
    assert plan.instances == 1 and plan.reason.endswith("no more than the --concurrency (1)")
    assert len(capsys.readouterr().err.splitlines()) == 2
    assert pool_plan(MODEL, requested=2, concurrency=2).reason == "--local-instances 2"
    assert pool_plan(MODEL, concurrency=64).instances == 8  # auto: the cores, said nowhere
    assert capsys.readouterr().err == ""


@pytest.mark.slow
def test_a_lowered_count_is_recorded_in_the_run_config(machine, tmp_path, capsys):
    machine(2, BIG)  # as on the 2-core machine where 64 were once started for 2 queries
    argv = ["--agent", "hyde", "--model", MODEL, "--limit", "2", "--max-tokens", "8",
            "--cache", "off", "--local-instances", "64", "--runs-dir", str(tmp_path),
            "--run-name", "r", "--quiet"]  # fmt: skip
    assert run_main(argv) == 0
    why = "--local-instances 64 lowered to 2: no more than the cores (2)"
    assert f"note: {why}\n" in capsys.readouterr().err
    config = json.loads((tmp_path / "r" / "config.json").read_text())
    assert config["machine"]["local_pool"][MODEL] == {
        "instances": 2, "n_threads": 1, "n_threads_batch": 1, "reason": why,
        "prefix_bytes": llm_pool.PREFIX_MAX_BYTES,
    }  # fmt: skip


def test_kept_prefixes_take_a_share_of_the_memory_the_instances_leave(machine):
    each = llm_pool.instance_bytes(model_file(MODEL), LOCAL_MODELS["smollm2-135m"].n_ctx)
    machine(2, llm_pool.HEADROOM_BYTES + 2 * each + (400 << 20))
    plan = pool_plan(MODEL, concurrency=4)
    assert plan.instances == 2 and plan.prefix_bytes == 100 << 20
    machine(2, BIG)
    assert pool_plan(MODEL, concurrency=4).prefix_bytes == llm_pool.PREFIX_MAX_BYTES
    machine(2, llm_pool.HEADROOM_BYTES // 2)  # nothing left: no prefix is kept, one instance
    assert pool_plan(MODEL, concurrency=4).prefix_bytes == 0
    machine(2, None)  # memory unknown: the default budget
    assert pool_plan(MODEL, concurrency=4).prefix_bytes == SINGLE.prefix_bytes


PROMPTS = [
    f"<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n"
    for q in ("What is insulin?", "Name a statin.", "What does aspirin block?",
              "Define sepsis.", "What is a beta blocker?", "What causes anemia?")
]  # fmt: skip


@pytest.mark.slow
def test_every_output_is_the_one_a_single_instance_gives():
    one = load_pool(MODEL, plan=SINGLE)
    two = load_pool(MODEL, plan=PoolPlan(2, 1, 1, "test"))
    assert len(two.instances) == 2 and two.instances[0] is not two.instances[1]

    def through(pool, prompt):
        with pool.instance() as loaded:
            out = generate(loaded, prompt, temperature=0.0, max_tokens=24)
        return out.text, out.completion_tokens, out.finish_reason

    alone = [through(one, p) for p in PROMPTS]
    with ThreadPoolExecutor(2) as workers:  # both instances busy at once, in any order
        pooled = list(workers.map(lambda p: through(two, p), PROMPTS * 2))
    assert pooled == alone * 2
    assert len({text for text, _, _ in alone}) > 1  # the prompts do give different answers


@pytest.mark.slow
def test_a_run_with_two_instances_equals_one_with_one(tmp_path):
    def run(n: int) -> tuple[dict, dict, dict]:
        name = f"n{n}"
        argv = ["--agent", "hyde", "--model", MODEL, "--limit", "3", "--concurrency", "2",
                "--max-tokens", "16", "--cache", "off", "--local-instances", str(n),
                "--runs-dir", str(tmp_path / "runs"), "--run-name", name, "--quiet"]  # fmt: skip
        assert run_main(argv) == 0
        folder = tmp_path / "runs" / name
        records = [json.loads(x) for x in (folder / "demo" / "queries.jsonl").read_text()
                   .splitlines()]  # fmt: skip
        generated = {r["query_id"]: r["generated"] for r in records}
        metrics = json.loads((folder / "demo" / "metrics.json").read_text())["metrics"]
        config = json.loads((folder / "config.json").read_text())
        return generated, metrics, config

    gen1, metrics1, config1 = run(1)
    gen2, metrics2, config2 = run(2)
    assert gen2 == gen1 and metrics2 == metrics1
    assert config1["machine"]["local_pool"][MODEL]["instances"] == 1
    recorded = dict(config2["machine"]["local_pool"][MODEL])
    assert recorded.pop("prefix_bytes") >= 0  # follows this machine's free memory
    assert recorded == {
        "instances": 2, "n_threads": 1, "n_threads_batch": max(1, llm_pool.cpu_count() // 2),
        "reason": "--local-instances 2",
    }  # fmt: skip
