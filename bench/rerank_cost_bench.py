"""What each LLM rerank stage costs per query, beside the first stage: calls and tokens.

    python bench/rerank_cost_bench.py [--dataset demo] [--queries 15] [--smoke]

Every row is a real run of the pipeline (BM25 first stage, then the stage, or the HyDE agent
for comparison) with the LLM cache off and a scripted model that answers at once, so the
calls are exactly those the stage makes; each prompt is rendered with the embedded model's
chat template (a raw prompt, Rank1's, as it is) and counted with its tokenizer (Qwen2.5's,
the embedded default), so the tokens are what the model would read. The completion budget is
the ``max_tokens`` each call is sent, summed: what a model may generate, not what the scripted
one did. Depths 20 and 100 at the stages' defaults (window 20, step 10: RankGPT's and
ReasonRank's 9 windows at depth 100, asserted when every list is 100 long; passages cut to 300
words, ReasonRank's to 512 tokens). The largest prompt is printed against the model's context,
which is where a listwise window stops fitting.

Rank1 is run twice: every reply ends in its ``</think> true`` / ``false`` judgement (one call
a passage), and every reply runs out of its 8,192 tokens without one (the worst case: each
passage then costs a second, forced call whose prompt holds the whole reply, one token long).
GroupRank scores groups of 10 every 10 in 2 passes (asserted: 4 calls a query at depth 20, 20
at 100), each call sent its 8,000 tokens.

``--smoke`` runs 2 demo queries at depth 20 with SmolLM2's tokenizer, in a few seconds, so
the test suite keeps the script working; its figures measure nothing.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import tempfile
from collections import Counter as Tally
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agents.config.settings import from_settings  # noqa: E402
from agents.execution.whole_run import run_dataset  # noqa: E402
from agents.llm import scripted  # noqa: E402
from agents.llm.dry import FILLER_WORD  # noqa: E402
from agents.llm.embedded.chatml import render_chatml  # noqa: E402
from agents.llm.embedded.weights import LOCAL_MODELS, model_file  # noqa: E402
from eval.runs import TaskFolder  # noqa: E402

KINDS = ("llm-pointwise", "llm-listwise", "insertrank", "reasonrank", "rank1", "grouprank")
FORCED = "forced"  # the rank1 row whose replies all need the forced call
HALF = math.log(0.5)
JUDGEMENT = [(" true", HALF, [(" true", HALF), (" false", HALF)])]  # rank1's last token
_REASONRANK_PASSAGE = re.compile(r"^\[\d+\] ", re.MULTILINE)
_GROUPRANK_DOCUMENT = re.compile(r"^\[\d+\]\. ", re.MULTILINE)


class Counter:
    """The scripted model: answers each kind of prompt at once and counts its tokens."""

    def __init__(self, model: str) -> None:
        from llama_cpp import Llama

        self.name = model
        self.tokenizer = Llama(model_path=str(model_file(model)), vocab_only=True, verbose=False)
        self.n_ctx = LOCAL_MODELS[model].n_ctx
        self.default_system = LOCAL_MODELS[model].default_system
        self.rank1 = "closed"  # or FORCED: how rank1's replies end
        self.tokens: list[int] = []
        self.budget: list[int] = []  # max_tokens of each call

    def __call__(self, messages: list[dict], params: dict):
        raw = bool(params.get("raw_prompt"))  # LLM.complete: the text goes as it is
        prompt = messages[0]["content"] if raw else render_chatml(messages, self.default_system)
        self.tokens.append(len(self.tokenizer.tokenize(prompt.encode(), special=True)))
        self.budget.append(int(params.get("max_tokens") or 0))
        if raw:
            return self.rank1_reply(params)
        if params.get("logprobs"):  # llm-pointwise
            return scripted.Reply("yes", [("yes", HALF, [("yes", HALF), ("no", HALF)])])
        if "<reason>" in messages[-1]["content"]:  # GroupRank's user prompt
            return grouprank_reply(messages[-1]["content"])
        if "<answer>" in messages[0]["content"]:  # ReasonRank's system prompt
            return reasonrank_reply(messages[-1]["content"])
        passages = [m for m in messages if m["role"] == "user" and m["content"][:1] == "["]
        if passages and "rank" in messages[-1]["content"].lower():  # a window: keep its order
            return " > ".join(f"[{i}]" for i in range(1, len(passages) + 1))
        return "Metformin lowers hepatic glucose production."  # the HyDE agent's passage

    def rank1_reply(self, params: dict) -> scripted.Reply:
        """A judgement read at the last token, or (FORCED) a reply that fills its budget
        with no judgement, so the stage sends it back for the one forced token."""
        budget = int(params.get("max_tokens") or 0)
        if budget == 1:  # the forced token
            return scripted.Reply(" true", JUDGEMENT)
        if self.rank1 == FORCED:
            return scripted.Reply(" ".join([FILLER_WORD] * budget))
        return scripted.Reply("The passage answers the query.", JUDGEMENT)


def reasonrank_reply(user: str) -> str:
    """ReasonRank's answer keeping the window's order."""
    n = len(_REASONRANK_PASSAGE.findall(user))
    order = " > ".join(f"[{i}]" for i in range(1, n + 1))
    return f"<think>kept as it came</think> <answer>{order}</answer>"


def grouprank_reply(user: str) -> str:
    """GroupRank's answer: every document of the group scored 5."""
    n = len(_GROUPRANK_DOCUMENT.findall(user))
    scores = ", ".join(f'"[{i}]": 5' for i in range(1, n + 1))
    return f"<reason>all alike</reason>\n<answer>\n```json\n{{{scores}}}\n```\n</answer>"


def measure(counter: Counter, settings: dict, workdir: Path, name: str) -> dict:
    counter.tokens, counter.budget = [], []
    result = run_dataset(
        from_settings({**settings, "run_name": name, "runs_dir": str(workdir / "runs")}),
        progress=False,
    )
    (task,) = result.tasks.values()
    folder = TaskFolder(result.run_dir / task.folder)
    records = folder.final_stage().records()
    first = folder.records()
    n = len(records)
    steps = [step for r in records.values() for step in r["steps"]]
    return {
        "calls": len(counter.tokens) / n,
        "tokens": sum(counter.tokens) / n,
        "budget": sum(counter.budget) / n,
        "max": max(counter.tokens, default=0),
        "list": min(len(r["ranking"]) for r in first.values()),
        "per_query": [len(r["steps"]) for r in records.values()],  # windows or judgements
        "outcomes": Tally(step.get("outcome") for step in steps),
        "total_calls": len(counter.tokens),
        "cut_by": {step.get("passages_cut_by", "") for step in steps} - {""},
    }


def stage_runs(depths: tuple[int, ...]) -> list[tuple[str, str, int, str]]:
    """(row label, stage kind, depth, how rank1's replies end) for every stage row."""
    rows = [(f"{kind} depth {depth}", kind, depth, "closed") for kind in KINDS for depth in depths]
    rows += [(f"rank1 depth {depth}, {FORCED}", "rank1", depth, FORCED) for depth in depths]
    return rows


def check_calls(stages: dict[str, dict], specs: list, list_len: int) -> list[str]:
    """Assert the calls the reasoning stages make per query; the lines saying what was checked.

    ReasonRank: one window at depth 20, nine (80-100 down to 0-20) at 100. Rank1: one judgement
    a passage, and a forced call for each reply without a judgement. GroupRank: 2 passes of
    groups of 10 every 10, every reply read."""
    lines = []
    for label, kind, depth, ending in specs:
        row = stages[label]
        if list_len < depth or kind not in ("reasonrank", "rank1", "grouprank"):
            continue
        if kind == "grouprank":
            expected = 2 * depth // 10
            assert row["calls"] == expected, row["calls"]
            assert row["outcomes"]["read"] == row["total_calls"], row["outcomes"]
            lines.append(f"  {label} (groups of 10 every 10, 2 passes): {expected} calls per "
                         "query (asserted)")  # fmt: skip
            continue
        if kind == "reasonrank":
            expected = {20: 1, 100: 9}.get(depth)
            if expected is None:
                continue
            assert set(row["per_query"]) == {expected}, row["per_query"]
            assert row["calls"] == expected, row["calls"]
            windows = "1 window" if expected == 1 else f"{expected} windows"
            lines.append(f"  {label} (window 20, step 10): {windows} per query (asserted)")
            continue
        assert set(row["per_query"]) == {depth}, row["per_query"]
        judged = sum(row["per_query"])
        forced = row["outcomes"].get("forced", 0)
        assert row["outcomes"] == Tally({"closed": judged} if ending == "closed" else
                                        {"forced": judged}), row["outcomes"]  # fmt: skip
        assert row["total_calls"] == judged + forced, (row["total_calls"], judged, forced)
        lines.append(f"  {label}: {depth} judgements and {row['calls']:.0f} calls per query; "
                     f"{forced} of all {judged} replies forced (asserted)")  # fmt: skip
    return lines


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
    specs = stage_runs(depths)

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        first = {
            "bm25 (agent none)": measure(counter, {**base, "agent": "none"}, work, "none"),
            "hyde": measure(counter, {**base, "agent": "hyde"}, work, "hyde"),
        }
        stages = {}
        for label, kind, depth, ending in specs:
            counter.rank1 = ending
            settings = {**base, "agent": "none", "rerank": [f"{kind},depth={depth}"]}
            stages[label] = measure(counter, settings, work, f"{kind}-{depth}-{ending}")

    if args.smoke:
        print("smoke run: figures measure nothing")
    print(
        f"LLM rerank cost per query on {args.dataset} ({queries} queries, BM25 lists of "
        f"{first['bm25 (agent none)']['list']}+ docs); prompt tokens by {counter.name}'s "
        f"tokenizer, its context {counter.n_ctx}; completion budget: max_tokens sent, summed"
    )
    print(f"  {'':<34}{'calls/query':>12}{'prompt tokens/query':>21}{'largest prompt':>16}"
          f"{'completion budget/query':>25}")  # fmt: skip
    rows = {f"first stage: {name}": row for name, row in first.items()} | stages
    for label, row in rows.items():
        over = "  > context" if row["max"] >= counter.n_ctx else ""
        print(f"  {label:<34}{row['calls']:>12.1f}{row['tokens']:>21,.0f}{row['max']:>16,}"
              f"{row['budget']:>25,.0f}{over}")  # fmt: skip
    hyde = first["hyde"]["tokens"]
    for label, row in stages.items():
        print(f"  ratio {label} / hyde prompt tokens: {row['tokens'] / hyde:.1f}")
    counter.tokenizer.close()  # before interpreter exit, when llama_cpp's globals are gone
    list_len = first["bm25 (agent none)"]["list"]
    listwise = stages.get("llm-listwise depth 100")
    if listwise and list_len >= 100:
        assert set(listwise["per_query"]) == {9}, listwise["per_query"]
        print("  llm-listwise depth 100 (window 20, step 10): 9 windows per query (asserted)")
    for line in check_calls(stages, specs, list_len):
        print(line)
    cut_by = set().union(*(row["cut_by"] for row in stages.values()))
    if cut_by:  # the scripted model has no tokenizer of its own: say which one cut them
        print(f"  reasonrank passages cut to 512 tokens by {'; '.join(sorted(cut_by))}")


if __name__ == "__main__":
    main()
