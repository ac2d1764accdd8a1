"""The embedded model: 1 vs N llama.cpp instances, prompt chunk sizes, prefix reuse on the
main job.

    python bench/local_bench.py              # qwen2.5-coder-0.5b; instances: auto (the pool's)
    python bench/local_bench.py --chunks 16,32,64,128,256,512   # prompt speed per chunk size
    python bench/local_bench.py --main-job   # the demo main job, prefix reuse off vs on
    python bench/local_bench.py --smoke      # smollm2-135m, tiny sizes (the test suite's)

Generation-heavy calls (a short prompt, ``--gen-tokens`` greedy tokens) and prompt-heavy ones
(~``--prompt-words`` words, a few tokens) run ``--calls`` at a time, through one instance and
through the pool, and every output is checked to be the same. Prompt and generated tokens per
second are the totals over the wall time.

``--chunks`` measures prompt evaluation at each chunk size (llama.cpp's n_batch = n_ubatch,
agents.llm.embedded.prefix_cache.CHUNK): one call alone on one instance, and ``--calls`` at a time
through the pool.

``--main-job`` runs ``python -m agents.run --agent search-o1`` (the README's main job) in this
process at each of ``--main-chunks``, with ``--local-prefix-reuse off`` and then ``on`` (LLM
cache off, the model loaded before the clock starts), asserts that every generated text and
every figure is the same, and prints the wall times, their ratio, the prompt tokens sent and
evaluated, and the floor: evaluated prompt tokens and generated tokens at the speeds measured
here in the same run.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents.llm.embedded import prefix_cache  # noqa: E402
from agents.llm.embedded.generation import generate  # noqa: E402
from agents.llm.embedded.names import local_name  # noqa: E402
from agents.llm.embedded.pool import SINGLE, load_pool, pool_plan  # noqa: E402
from agents.llm.embedded.prefix_cache import PrefixStore  # noqa: E402
from agents.llm.embedded.weights import model_file  # noqa: E402
from eval.metrics import HEADLINE  # noqa: E402
from eval.runs import TaskFolder  # noqa: E402

CONCURRENCY = 4  # the main job's default --concurrency
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


def prompt_heavy(words: int, calls: int) -> list[str]:
    filler = " ".join(f"{t} is a topic in medicine." for t in TOPICS) + " "
    text = (filler * (words // len(filler.split()) + 1)).split()[:words]
    return [chat(f"{t}: " + " ".join(text) + " Summarise.") for t in TOPICS[:calls]]


def speeds(model: str, plan, args) -> dict[str, float]:
    """Prompt and generation tokens/s through one instance and through the pool; outputs
    asserted identical."""
    one, many = load_pool(model, plan=SINGLE), load_pool(model, plan=plan)
    n = plan.instances
    for pool in (one, many):  # loaded and warm before anything is timed
        timed(pool, [chat("Hi.")] * len(pool.instances), 2, len(pool.instances))
    gen_prompts = [chat(f"Explain {t} in two paragraphs.") for t in TOPICS[: args.calls]]
    out = {}
    for label, prompts, tokens in (("generation-heavy", gen_prompts, args.gen_tokens),
                                   ("prompt-heavy", prompt_heavy(args.prompt_words, args.calls),
                                    4)):  # fmt: skip
        s1, out1, ptok, gtok = timed(one, prompts, tokens, args.calls)
        sn, outn, _, _ = timed(many, prompts, tokens, args.calls)
        assert outn == out1, f"{label}: outputs differ between 1 and {n} instances"
        out[label] = (ptok / s1, gtok / s1, ptok / sn, gtok / sn)
        print(f"  {label} ({args.calls} calls, {ptok // args.calls} prompt + "
              f"{gtok // args.calls} generated tokens each): 1 instance {s1:.2f} s, {n} "
              f"instances {sn:.2f} s: {s1 / sn:.2f}x; outputs identical (asserted)")  # fmt: skip
    prompt = prompt_heavy(args.prompt_words, 1)
    alone, _, tokens, _ = timed(many, prompt, 1, 1)
    print(f"  lone call through the pool: prompt {tokens / alone:.0f} tok/s (one instance alone: "
          f"{out['prompt-heavy'][0]:.0f})")  # fmt: skip
    gen1, genn = out["generation-heavy"][1], out["generation-heavy"][3]
    pr1, prn = out["prompt-heavy"][0], out["prompt-heavy"][2]
    print(f"  speeds: prompt {pr1:.0f} -> {prn:.0f} tok/s, generation {gen1:.1f} -> "
          f"{genn:.1f} tok/s (1 -> {n} instances)")  # fmt: skip
    return {"prompt": prn, "generation": genn}


def chunk_speeds(model: str, plan, chunk: int, args) -> tuple[float, float]:
    """Prompt tokens/s at ``chunk``: one call alone on one instance, and ``--calls`` at a time
    through the pool."""
    prefix_cache.CHUNK = chunk
    one, many = load_pool(model, plan=SINGLE), load_pool(model, plan=plan)
    prompts = prompt_heavy(args.prompt_words, args.calls)
    timed(one, prompts[:1], 1, 1)  # warm
    s1, _, p1, _ = timed(one, prompts[:1], 1, 1)
    sn, _, pn, _ = timed(many, prompts, 1, args.calls)
    return p1 / s1, pn / sn


def main_job(model: str, plan, chunk: int, reuse: bool, folder: Path, extra: list[str]) -> dict:
    """The main job in this process at ``chunk``, prefix reuse on or off: its wall seconds,
    usage, figures, generated texts and what the prefix store restored."""
    from agents.commands.run import main as run_main

    prefix_cache.CHUNK = chunk
    # the pool the run will ask for (agents.execution.plan.local_pools), loaded before the clock
    # starts
    plan = pool_plan(model, folder / "cache", plan.instances, CONCURRENCY)
    pool = load_pool(model, folder / "cache", plan=plan)
    pool.prefixes = PrefixStore(plan.prefix_bytes)
    for loaded in pool.instances:
        loaded.live = None
    name = f"c{chunk}-{'on' if reuse else 'off'}"
    argv = ["--agent", "search-o1", "--model", model, "--cache", "off",
            "--local-prefix-reuse", "on" if reuse else "off", "--local-instances",
            str(plan.instances), "--concurrency", str(CONCURRENCY), "--runs-dir",
            str(folder / "runs"), "--cache-dir", str(folder / "cache"), "--run-name", name,
            "--quiet", *extra]  # fmt: skip
    started = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        code = run_main(argv)
    seconds = time.perf_counter() - started
    assert code == 0, f"the main job exited {code}"
    task = TaskFolder(folder / "runs" / name / "demo")
    summary = task.summary()
    assert summary is not None, f"{task.summary_path}: not written"
    texts = {q: r.get("generated") for q, r in task.iter_records()}  # written as queries end
    stats = pool.prefixes.stats
    return {"seconds": seconds, "usage": summary.usage, "metrics": summary.metrics,
            "texts": texts, "restored": stats.restored_tokens}  # fmt: skip


def print_main_jobs(model: str, plan, chunk: int, rate: dict[str, float], extra: list[str]):
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        model_file(local_name(model), folder / "cache")  # joined before timing
        off = main_job(model, plan, chunk, False, folder, extra)
        on = main_job(model, plan, chunk, True, folder, extra)
    assert on["texts"].keys() == off["texts"].keys()
    for query_id, text in off["texts"].items():
        assert on["texts"][query_id] == text, f"chunk {chunk}: reuse changed {query_id}'s texts"
    assert on["metrics"] == off["metrics"], f"chunk {chunk}: {off['metrics']} {on['metrics']}"
    sent, generated = on["usage"]["prompt_tokens"], on["usage"]["completion_tokens"]
    evaluated = sent - on["restored"]
    floor = evaluated / rate["prompt"] + generated / rate["generation"]
    ratio = off["seconds"] / on["seconds"]
    print(f"  main job, chunk {chunk}, {plan.instances} instance(s): reuse off "
          f"{off['seconds']:.1f} s, on {on['seconds']:.1f} s: {ratio:.2f}x; outputs identical "
          f"(asserted); nDCG@10 {on['metrics'][HEADLINE]:.5f}, "
          f"{on['usage']['calls']} calls")  # fmt: skip
    print(f"  prompt tokens, chunk {chunk}: sent {sent:,}, evaluated {evaluated:,} "
          f"({on['restored'] / max(1, sent):.0%} restored); floor {floor:.1f} s ({evaluated:,} / "
          f"{rate['prompt']:.0f} + {generated:,} / {rate['generation']:.1f} tok/s): reuse on is "
          f"{on['seconds'] / floor:.2f}x the floor")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--instances", type=int, default=None, help="N (default: the pool's auto)")
    p.add_argument("--calls", type=int, default=4)
    p.add_argument("--gen-tokens", type=int, default=96)
    p.add_argument("--prompt-words", type=int, default=1100)
    p.add_argument("--chunks", default="", help="chunk sizes to measure prompt speed at")
    p.add_argument("--main-job", action="store_true")
    p.add_argument("--main-chunks", default=str(prefix_cache.CHUNK), help="for --main-job")
    args = p.parse_args()
    model = "local/smollm2-135m" if args.smoke else "local/qwen2.5-coder-0.5b"
    extra: list[str] = []
    if args.smoke:
        print("smoke run: tiny sizes, every line, figures meaningless")
        args.gen_tokens, args.prompt_words = 8, 120
        args.chunks, args.main_job, args.main_chunks = "16,32", True, "16"
        extra = ["--limit", "2", "--max-tokens", "16"]
    plan = pool_plan(model, requested=args.instances, concurrency=args.calls)
    if plan.instances < 2:  # a 1-core or small machine: still compare against two
        plan = pool_plan(model, requested=2, concurrency=args.calls)
    n = plan.instances
    print(f"{local_name(model)}: 1 vs {n} instances ({plan.reason}; "
          f"{plan.n_threads} generation, {plan.n_threads_batch} prompt thread(s) each; "
          f"chunk {prefix_cache.CHUNK})")  # fmt: skip
    rate = speeds(model, plan, args)
    default_chunk = prefix_cache.CHUNK
    for chunk in [int(c) for c in args.chunks.split(",") if c]:
        alone, pooled = chunk_speeds(model, plan, chunk, args)
        print(
            f"  chunk {chunk}: prompt {alone:.0f} tok/s one call alone on one instance, "
            f"{pooled:.0f} tok/s {args.calls} calls through {n} instances"
        )
    if not args.main_job:
        return
    for chunk in [int(c) for c in args.main_chunks.split(",") if c]:
        if chunk != default_chunk:
            rate = {"prompt": chunk_speeds(model, plan, chunk, args)[1],
                    "generation": rate["generation"]}  # fmt: skip
        print_main_jobs(model, plan, chunk, rate, extra)


if __name__ == "__main__":
    main()
