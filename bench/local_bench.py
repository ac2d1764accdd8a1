"""The embedded model at 1 vs N llama.cpp instances: tokens per second, outputs, the main job.

    python bench/local_bench.py              # qwen2.5-coder-0.5b; instances: auto (the pool's)
    python bench/local_bench.py --main-job   # also the demo main job at 1 and N instances
    python bench/local_bench.py --smoke      # smollm2-135m, tiny sizes (the test suite's)

Generation-heavy calls (a short prompt, ``--gen-tokens`` greedy tokens) and prompt-heavy ones
(~``--prompt-words`` words, a few tokens) run ``--calls`` at a time, through one instance and
through the pool, and every output is checked to be the same. Prompt and generated tokens per
second are the totals over the wall time. The floor of a run is its tokens divided by those
speeds; ``--main-job`` runs ``python -m agents.run --agent search-o1`` (the README's main job)
with ``--local-instances 1`` and N in fresh folders and caches and prints its wall time beside
its floor.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from agents.llm.local import SINGLE, generate, load_pool, pool_plan  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TOPICS = ("insulin", "statins", "aspirin", "sepsis", "anemia", "asthma", "warfarin", "gout")


def chat(text: str) -> str:
    return f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"


def timed(pool, prompts: list[str], tokens: int, calls: int) -> tuple[float, list, int, int]:
    """Wall seconds for every prompt through ``pool``, ``calls`` at a time; the outputs."""

    def one(prompt: str):
        with pool.instance() as loaded:
            return generate(loaded, prompt, temperature=0.0, max_tokens=tokens)

    started = time.perf_counter()
    with ThreadPoolExecutor(calls) as workers:
        outs = list(workers.map(one, prompts))
    seconds = time.perf_counter() - started
    texts = [(o.text, o.completion_tokens) for o in outs]
    prompt_tokens = sum(o.prompt_tokens for o in outs)
    return seconds, texts, prompt_tokens, sum(o.completion_tokens for o in outs)


def main_job(instances: int, model: str, extra: list[str]) -> tuple[float, int, int, float]:
    """Wall seconds, prompt and completion tokens, nDCG@10 of the main job (fresh cache)."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "agents.run", "--agent", "search-o1", "--model", model,
               "--local-instances", str(instances), "--runs-dir", f"{tmp}/runs",
               "--cache-dir", f"{tmp}/cache", "--run-name", "r", "--quiet", *extra]  # fmt: skip
        env = {**os.environ, "R2MED_AGENTS_CACHE": f"{tmp}/cache"}
        started = time.perf_counter()
        subprocess.run(cmd, cwd=REPO, env=env, check=True, capture_output=True)
        seconds = time.perf_counter() - started
        summary = json.loads(Path(f"{tmp}/runs/r/demo/metrics.json").read_text())
    usage = summary["usage"]
    ndcg = summary["metrics"]["NDCG@10"]
    return seconds, usage["prompt_tokens"], usage["completion_tokens"], ndcg


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--instances", type=int, default=None, help="N (default: the pool's auto)")
    p.add_argument("--calls", type=int, default=4)
    p.add_argument("--gen-tokens", type=int, default=96)
    p.add_argument("--prompt-words", type=int, default=1100)
    p.add_argument("--main-job", action="store_true")
    args = p.parse_args()
    model = "local/smollm2-135m" if args.smoke else "local/qwen2.5-coder-0.5b"
    if args.smoke:
        print("smoke run: tiny sizes, every line, figures meaningless")
        args.gen_tokens, args.prompt_words = 8, 120
    plan = pool_plan(model, requested=args.instances, concurrency=args.calls)
    if plan.instances < 2:  # a 1-core or small machine: still compare against two
        plan = pool_plan(model, requested=2, concurrency=args.calls)
    one, many = load_pool(model, plan=SINGLE), load_pool(model, plan=plan)
    n = plan.instances
    print(f"{model.removeprefix('local/')}: 1 vs {n} instances ({plan.reason}; "
          f"{plan.n_threads} generation, {plan.n_threads_batch} prompt thread(s) each)")
    gen_prompts = [chat(f"Explain {t} in two paragraphs.") for t in TOPICS[: args.calls]]
    filler = " ".join(f"{t} is a topic in medicine." for t in TOPICS) + " "
    words = (filler * (args.prompt_words // len(filler.split()) + 1)).split()[: args.prompt_words]
    prompt_prompts = [chat(f"{t}: " + " ".join(words) + " Summarise.") for t in
                      TOPICS[: args.calls]]  # fmt: skip
    for pool in (one, many):  # loaded and warm before anything is timed
        timed(pool, [chat("Hi.")] * len(pool.instances), 2, len(pool.instances))
    speeds = {}
    for label, prompts, tokens in (("generation-heavy", gen_prompts, args.gen_tokens),
                                   ("prompt-heavy", prompt_prompts, 4)):  # fmt: skip
        s1, out1, ptok, gtok = timed(one, prompts, tokens, args.calls)
        sn, outn, _, _ = timed(many, prompts, tokens, args.calls)
        assert outn == out1, f"{label}: outputs differ between 1 and {n} instances"
        speeds[label] = (ptok / s1, gtok / s1, ptok / sn, gtok / sn)
        print(f"  {label} ({args.calls} calls, {ptok // args.calls} prompt + "
              f"{gtok // args.calls} generated tokens each): 1 instance {s1:.2f} s, {n} "
              f"instances {sn:.2f} s: {s1 / sn:.2f}x; outputs identical (asserted)")
    gen1, genn = speeds["generation-heavy"][1], speeds["generation-heavy"][3]
    pr1, prn = speeds["prompt-heavy"][0], speeds["prompt-heavy"][2]
    print(f"  speeds: prompt {pr1:.0f} -> {prn:.0f} tok/s, generation {gen1:.1f} -> "
          f"{genn:.1f} tok/s (1 -> {n} instances)")
    if not (args.main_job or args.smoke):
        return
    extra = ["--limit", "1", "--max-tokens", "16"] if args.smoke else []
    jobs = ((1, (pr1, gen1)), (n, (prn, genn)))
    for instances, (prompt_speed, gen_speed) in jobs[1:] if args.smoke else jobs:
        seconds, ptoks, ctoks, ndcg = main_job(instances, model, extra)
        floor = ptoks / prompt_speed + ctoks / gen_speed
        print(f"  main job, {instances} instance(s): {seconds:.1f} s; floor {floor:.1f} s "
              f"({ptoks:,} prompt / {prompt_speed:.0f} + {ctoks:,} generated / "
              f"{gen_speed:.1f} tok/s); nDCG@10 {ndcg:.5f}")


if __name__ == "__main__":
    main()
