"""What each LLM rerank stage costs per query, beside the first stage: calls and prompt tokens.

    python bench/rerank_cost_bench.py [--dataset demo] [--queries 15] [--smoke]

Every row is a real run of the pipeline (BM25 first stage, then the stage, or the HyDE agent
for comparison) with the LLM cache off and a scripted model that answers at once, so the
calls are exactly those the stage makes; each prompt is rendered with the embedded model's
chat template and counted with its tokenizer (Qwen2.5's, the embedded default), so the
tokens are what the model would read. Depths 20 and 100 at the stages' defaults (window 20,
step 10: RankGPT's 9 windows at depth 100, asserted when every list is 100 long; passages
cut to 300 words). The largest prompt is printed against the model's context, which is where
a listwise window stops fitting.

``--smoke`` runs 2 demo queries at depth 20 with SmolLM2's tokenizer, in a few seconds, so
the test suite keeps the script working; its figures measure nothing.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents.config import from_settings  # noqa: E402
from agents.llm import scripted  # noqa: E402
from agents.llm.local import LOCAL_MODELS, model_file, render_chatml  # noqa: E402
from agents.pipeline import run  # noqa: E402
from eval.runs import read_records, records_path, stage_chain  # noqa: E402

KINDS = ("llm-pointwise", "llm-listwise", "insertrank")


class Counter:
    """The scripted model: answers each kind of prompt at once and counts its tokens."""

    def __init__(self, model: str) -> None:
        from llama_cpp import Llama

        self.name = model
        self.tokenizer = Llama(model_path=str(model_file(model)), vocab_only=True, verbose=False)
        self.n_ctx = LOCAL_MODELS[model].n_ctx
        self.default_system = LOCAL_MODELS[model].default_system
        self.tokens: list[int] = []

    def __call__(self, messages: list[dict], params: dict):
        prompt = render_chatml(messages, self.default_system)
        self.tokens.append(len(self.tokenizer.tokenize(prompt.encode(), special=True)))
        content = messages[-1]["content"]
        if params.get("logprobs"):  # llm-pointwise
            lp = math.log(0.5)
            return scripted.Reply("yes", [("yes", lp, [("yes", lp), ("no", lp)])])
        passages = [m for m in messages if m["role"] == "user" and m["content"][:1] == "["]
        if passages and "rank" in content.lower():  # a listwise window: keep its order
            return " > ".join(f"[{i}]" for i in range(1, len(passages) + 1))
        return "Metformin lowers hepatic glucose production."  # the HyDE agent's passage


def measure(counter: Counter, settings: dict, workdir: Path, name: str) -> dict:
    counter.tokens = []
    result = run(
        from_settings({**settings, "run_name": name, "runs_dir": str(workdir / "runs")}),
        progress=False,
    )
    (task,) = result.tasks.values()
    task_dir = result.run_dir / task.folder
    records = read_records(records_path(stage_chain(task_dir)[-1]))
    first = read_records(records_path(task_dir))
    n = len(records)
    return {
        "calls": len(counter.tokens) / n,
        "tokens": sum(counter.tokens) / n,
        "max": max(counter.tokens, default=0),
        "list": min(len(r["ranking"]) for r in first.values()),
        "windows": [len(r["steps"]) for r in records.values()],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="demo")
    parser.add_argument("--queries", type=int, default=15)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args(argv)
    depths = (20,) if args.smoke else (20, 100)
    queries = 2 if args.smoke else args.queries
    counter = Counter("smollm2-135m" if args.smoke else "qwen2.5-coder-0.5b")
    scripted.install(counter)
    base = {"dataset": args.dataset, "limit": queries, "model": "scripted/x", "cache": "off"}

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        first = {
            "bm25 (agent none)": measure(counter, {**base, "agent": "none"}, work, "none"),
            "hyde": measure(counter, {**base, "agent": "hyde"}, work, "hyde"),
        }
        stages = {
            (kind, depth): measure(
                counter,
                {**base, "agent": "none", "rerank": [f"{kind},depth={depth}"]},
                work,
                f"{kind}-{depth}",
            )  # fmt: skip
            for kind in KINDS
            for depth in depths
        }

    if args.smoke:
        print("smoke run: figures measure nothing")
    print(
        f"LLM rerank cost per query on {args.dataset} ({queries} queries, BM25 lists of "
        f"{first['bm25 (agent none)']['list']}+ docs); prompt tokens by {counter.name}'s "
        f"tokenizer, its context {counter.n_ctx}"
    )
    print(f"  {'':<34}{'calls/query':>12}{'prompt tokens/query':>21}{'largest prompt':>16}")
    for name, row in first.items():
        print(f"  {'first stage: ' + name:<34}{row['calls']:>12.1f}{row['tokens']:>21,.0f}"
              f"{row['max']:>16,}")  # fmt: skip
    hyde = first["hyde"]["tokens"]
    for (kind, depth), row in stages.items():
        over = "  > context" if row["max"] >= counter.n_ctx else ""
        print(f"  {f'{kind} depth {depth}':<34}{row['calls']:>12.1f}{row['tokens']:>21,.0f}"
              f"{row['max']:>16,}{over}")  # fmt: skip
    for (kind, depth), row in stages.items():
        print(f"  ratio {kind} depth {depth} / hyde prompt tokens: {row['tokens'] / hyde:.1f}")
    counter.tokenizer.close()  # before interpreter exit, when llama_cpp's globals are gone
    listwise = stages.get(("llm-listwise", 100))
    if listwise and first["bm25 (agent none)"]["list"] >= 100:
        assert set(listwise["windows"]) == {9}, listwise["windows"]
        print("  llm-listwise depth 100 (window 20, step 10): 9 windows per query (asserted)")


if __name__ == "__main__":
    main()
