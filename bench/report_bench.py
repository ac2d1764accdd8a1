"""Whether a large comparison's report.html stays usable: its size, how long `eval.compare`
takes to build it and how fast headless Chromium renders it and opens a trajectory.

    python bench/report_bench.py [--tasks 8] [--queries 876] [--runs 5] [--docs 2000]
                                 [--repeats 3] [--tmp-dir DIR] [--smoke]

Run folders are synthesized in the layout `agents.run` writes, through the same writers
(`eval.runs`, `eval.trec.write_run`, `eval.evaluate` for per_query.jsonl and metrics.json), over
a synthesized dataset in R2MED's layout (its task names; ``--queries`` split evenly over
``--tasks``; 3 judged documents per query; ``--docs`` documents of 100 words per task, which
`eval.compare` reads for the qrels). The first run is BM25-shaped (`--agent none`: one
retrieval of 100), every other one tool-search-shaped, as that agent records a trajectory:
6 LLM steps of 300 words of output, each with the conversation so far as its messages (as
`agents.graphs.context.llm_call` records them), 5 searches of 10 documents with their
snippets, a submission and a final top-100. Rankings hold the judged documents at random
depths, so scores differ by run and query.

Each report is built once, by the real ``python -m eval.compare RUN... --out OUT`` in a new
process (build s is that process's wall time). With Debian's chromium and chromedriver (see
tests/browser.py; nothing is installed here) the page is then loaded ``--repeats`` times:
ready s is the wall time from navigation to ``body[data-ready="1"]``; open ms is, in the page,
from a click on a query row in the middle of the table to the frame after its trajectories
are shown, script ms the part spent in the click's own script (the rest is style, layout and
paint); JS heap is Chrome's ``performance.memory.usedJSHeapSize`` once ready. Medians are
printed. A small comparison (1 task, 15 queries, 2 runs: the demo's size) is measured the
same way as the baseline of the ratios. The targets are this script's idea of usable.

``--smoke`` runs every step at tiny sizes in a few seconds, so the test suite keeps the script
working; its figures measure nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from eval.datasets import R2MED_TASKS, load_folder, task_fingerprint  # noqa: E402
from eval.evaluate import evaluate_run  # noqa: E402
from eval.metrics import HEADLINE  # noqa: E402
from eval.records import record_line  # noqa: E402
from eval.report import leaderboard_markdown  # noqa: E402
from eval.runs import RunFolder  # noqa: E402
from eval.task_summary import TaskSummary  # noqa: E402
from eval.trec import write_run  # noqa: E402
from tests.browser import find_chromium, start_chromium  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SMALL = {"tasks": 1, "queries": 15, "runs": 2}
SMOKE = {"tasks": 2, "queries": 8, "runs": 3, "docs": 60, "repeats": 1}
SMOKE_SMALL = {"tasks": 1, "queries": 3, "runs": 2}
DEPTH = 100
LLM_STEPS = 6  # 5 that search, 1 that submits
SEARCHES = 5
SEARCH_K = 10
OUTPUT_WORDS = 300
QUERY_WORDS = 120
DOC_WORDS = 100
SNIPPET_WORDS = 40
READY_TARGET_S = 5.0
OPEN_TARGET_MS = 200.0


def load() -> str:
    return "load avg " + " ".join(f"{x:.2f}" for x in os.getloadavg())


class Words:
    """Pseudo-words from a fixed vocabulary (seeded): fast, deterministic text of any length."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        syllables = ["ka", "lo", "mi", "ne", "ru", "sa", "to", "vi", "en", "ar", "ol", "is"]
        self.vocab = sorted(
            {"".join(self.rng.choices(syllables, k=self.rng.randint(2, 4))) for _ in range(4000)}
        )

    def __call__(self, n: int) -> str:
        return " ".join(self.rng.choices(self.vocab, k=n))


@dataclass(frozen=True)
class Size:
    tasks: int
    queries: int  # in all tasks
    runs: int

    def __str__(self) -> str:
        return f"{self.tasks} x {self.queries} x {self.runs}"

    def per_task(self) -> list[int]:
        base, extra = divmod(self.queries, self.tasks)
        return [base + (i < extra) for i in range(self.tasks)]

    def task_names(self) -> list[str]:
        if self.tasks <= len(R2MED_TASKS):
            return list(R2MED_TASKS[: self.tasks])
        return [f"task-{i + 1}" for i in range(self.tasks)]


def make_dataset(folder: Path, size: Size, docs: int, words: Words) -> list[Path]:
    """One R2MED-layout folder per task: corpus, queries, 3 judged docs per query."""
    paths = []
    for name, n_queries in zip(size.task_names(), size.per_task(), strict=True):
        task = folder / name
        task.mkdir(parents=True)
        with open(task / "corpus.jsonl", "w", encoding="utf-8") as f:
            for i in range(docs):
                f.write(json.dumps({"id": f"d{i:05d}", "text": words(DOC_WORDS)}) + "\n")
        with open(task / "query.jsonl", "w", encoding="utf-8") as f:
            for i in range(n_queries):
                f.write(json.dumps({"id": f"q{i:04d}", "text": words(QUERY_WORDS)}) + "\n")
        with open(task / "qrels.jsonl", "w", encoding="utf-8") as f:
            for i in range(n_queries):
                for doc, grade in zip(words.rng.sample(range(docs), 3), (2, 2, 1), strict=True):
                    row = {"q_id": f"q{i:04d}", "p_id": f"d{doc:05d}", "score": grade}
                    f.write(json.dumps(row) + "\n")
        paths.append(task)
    return paths


def ranked(rng: random.Random, judged: list[str], docs: int, n: int, hit: float) -> list[str]:
    """n doc ids: each judged one with probability ``hit`` at a random depth, the rest random."""
    picked = [d for d in judged if rng.random() < hit]
    others = [f"d{i:05d}" for i in rng.sample(range(docs), min(docs, n + len(judged)))]
    out = [d for d in others if d not in judged][: n - len(picked)]
    for d in picked:
        out.insert(rng.randint(0, len(out)), d)
    return out[:n]


def scores(n: int, top: float, rng: random.Random) -> list[float]:
    return [round(top - i * top / (n + 1) - rng.random() * 1e-3, 6) for i in range(n)]


def usage(calls: int, prompt: int, completion: int, rng: random.Random) -> dict[str, Any]:
    cost = round(prompt * 1.5e-7 + completion * 6e-7, 8) if calls else 0.0
    return {"calls": calls, "cached_calls": 0, "prompt_tokens": prompt,
            "completion_tokens": completion, "cost": cost,
            "latency_s": round(calls * rng.uniform(0.5, 2.0), 4)}  # fmt: skip


def bm25_record(qid: str, text: str, ranking: list[str], rng: random.Random) -> dict:
    values = scores(len(ranking), 30.0, rng)
    return {
        "query_id": qid, "query": text,
        "ranking": [list(p) for p in zip(ranking, values, strict=True)],
        "generated": {}, "searches": 0, "usage": usage(0, 0, 0, rng), "seconds": 0.001,
        "error": None,
        "steps": [{"node": "retrieve", "retriever": "bm25",
                   "request": {"query": text, "expansion": "", "sparse_text": None},
                   "doc_ids": ranking, "scores": values, "seconds": 0.001}],
    }  # fmt: skip


def tool_record(
    qid: str, text: str, final: list[str], hits: list[list[str]], words: Words, prompt: str
) -> dict:
    """A tool-search trajectory: (reason, search) x 5, reason, submit, final."""
    rng = words.rng
    messages: list[dict[str, Any]] = [{"role": "user", "content": f"{prompt}\n\nQuery: {text}"}]
    steps: list[dict[str, Any]] = []
    total = {"prompt": 0, "completion": 0}
    for turn in range(LLM_STEPS):
        output = words(OUTPUT_WORDS)
        if turn < SEARCHES:
            name, arguments = "search", {"query": words(12), "k": SEARCH_K}
        else:
            name, arguments = "submit", {"doc_ids": final[:5]}
        call = {"id": f"call_{turn}_0", "name": name, "arguments": json.dumps(arguments)}
        prompt_tokens = sum(len(str(m.get("content") or "").split()) for m in messages)
        total["prompt"] += prompt_tokens
        total["completion"] += OUTPUT_WORDS
        steps.append({
            "node": "reason", "messages": list(messages), "output": output,
            "finish_reason": "tool_calls", "cached": False,
            "usage": usage(1, prompt_tokens, OUTPUT_WORDS, rng), "tool_calls": [call],
            "prompt": {"name": "tool-search/default", "sha256": "0" * 64},
        })  # fmt: skip
        if name == "search":
            doc_ids = hits[turn]
            values = scores(len(doc_ids), 25.0, rng)
            result = json.dumps([
                {"id": d, "score": round(s, 1), "snippet": words(SNIPPET_WORDS)}
                for d, s in zip(doc_ids, values, strict=True)
            ])  # fmt: skip
            steps.append({
                "node": "tool", "tool": "search", "call_id": call["id"],
                "arguments": call["arguments"], "retriever": "bm25",
                "request": {"query": arguments["query"], "expansion": "", "sparse_text": None},
                "doc_ids": doc_ids, "scores": values, "error": False, "result": result,
            })  # fmt: skip
        else:
            result = f"Received a ranking of {len(arguments['doc_ids'])} documents."
            steps.append({"node": "tool", "tool": "submit", "call_id": call["id"],
                          "arguments": call["arguments"], "error": False,
                          "result": result})  # fmt: skip
        messages += [
            {"role": "assistant", "content": output,
             "tool_calls": [{"id": call["id"], "type": "function",
                             "function": {"name": name, "arguments": call["arguments"]}}]},
            {"role": "tool", "tool_call_id": call["id"], "content": result},
        ]  # fmt: skip
    values = [float(DEPTH - i) for i in range(len(final))]
    steps.append({
        "node": "final", "retriever": "bm25",
        "request": {"query": text, "expansion": "", "sparse_text": None},
        "doc_ids": final, "scores": values, "seconds": 0.002, "final_ranking": "submit",
        "submitted": 5, "fused_lists": SEARCHES + 1,
    })  # fmt: skip
    return {
        "query_id": qid, "query": text,
        "ranking": [list(p) for p in zip(final, values, strict=True)],
        "generated": {"submitted": " ".join(final[:5])}, "searches": SEARCHES,
        "usage": usage(LLM_STEPS, total["prompt"], total["completion"], rng),
        "seconds": round(rng.uniform(5, 30), 3), "error": None, "steps": steps,
    }  # fmt: skip


def config(index: int, dataset: str, runs_dir: Path) -> dict[str, Any]:
    """A config.json as agents.run writes it; run 0 is BM25 alone, the rest tool-search."""
    llm = index > 0
    return {
        "agent": "tool-search" if llm else "none",
        "dataset": dataset,
        "options": {"final_ranking": "submit", "max_turns": 8, "max_searches": SEARCHES,
                    "top_k": SEARCH_K} if llm else {},
        "retriever": {"spec": "bm25", "bm25": {"method": "bm25q", "k1": None, "b": None}},
        "rerank": [],
        "llm": {"model": f"scripted/bench-{index}", "temperature": 0.0, "max_tokens": 512,
                "cache": "use", "concurrency": 4} if llm else None,
        "eval": {"depth": DEPTH, "missing": "zero", "ties": "trec", "pad": False},
        "limit": None,
        "prompt_files": {},
        "prompts": {"tool-search/default": f"{index:064d}"} if llm else {},
        "runs_dir": str(runs_dir), "run_name": f"run-{index}", "cache_dir": None,
        "source_run": None,
    }  # fmt: skip


def make_runs(root: Path, size: Size, docs: int, seed: int = 0) -> tuple[list[Path], int]:
    """The dataset and ``size.runs`` run folders under ``root``; (folders, queries.jsonl bytes)."""
    words = Words(seed)
    task_paths = make_dataset(root / "data", size, docs, words)
    dataset = ",".join(str(p) for p in task_paths)
    tasks = [load_folder(p) for p in task_paths]
    prompt = words(150)
    folders, record_bytes = [], 0
    for index in range(size.runs):
        run_dir = root / "runs" / f"run-{index}"
        run = RunFolder(run_dir)
        run.write_config(config(index, dataset, root / "runs"))
        hit = 0.35 + 0.1 * index  # later runs find more
        summaries, means = {}, {}
        for task in tasks:
            folder = run.task(task.name)
            folder.write_info({"task": task.name, "path": str(task.path),
                               "fingerprint": task_fingerprint(task)})  # fmt: skip
            rankings: dict[str, dict[str, float]] = {}
            calls = prompt_tokens = completion_tokens = 0
            with open(folder.records_path, "w", encoding="utf-8") as f:
                for qid, text in task.queries.items():
                    judged = list(task.qrels[qid])
                    final = ranked(words.rng, judged, docs, DEPTH, hit)
                    if index == 0:
                        record = bm25_record(qid, text, final, words.rng)
                    else:
                        hits = [ranked(words.rng, judged, docs, SEARCH_K, hit / 2)
                                for _ in range(SEARCHES)]  # fmt: skip
                        record = tool_record(qid, text, final, hits, words, prompt)
                    line = record_line(record)
                    record_bytes += len(line.encode())
                    f.write(line)
                    rankings[qid] = dict(record["ranking"])
                    calls += record["usage"]["calls"]
                    prompt_tokens += record["usage"]["prompt_tokens"]
                    completion_tokens += record["usage"]["completion_tokens"]
            write_run(rankings, folder.run_trec_path, depth=DEPTH)
            evaluation = evaluate_run(task.qrels, rankings)
            folder.write_per_query(evaluation.per_query)
            summary = TaskSummary(
                task=task.name, notes=[], metrics=evaluation.mean,
                averaging=evaluation.describe(), queries=len(rankings), failed=0,
                failures={},
                usage=usage(calls, prompt_tokens, completion_tokens, words.rng),
                searches_per_query=float(SEARCHES if index else 0),
                seconds=round(len(rankings) * (12.0 if index else 0.002), 3),
                data=task_fingerprint(task), stages={"agent": evaluation.mean},
                final_stage="agent",
            )  # fmt: skip
            folder.write_summary(summary)
            summaries[task.name] = summary
            means[task.name] = evaluation.mean[HEADLINE]
        run.write_summary(summaries)
        names = [t.name for t in tasks]
        run.write_leaderboard(leaderboard_markdown({f"run-{index}": means}, names))
        folders.append(run_dir)
    return folders, record_bytes


def build(folders: list[Path], out: Path) -> float:
    """Wall seconds of ``python -m eval.compare FOLDERS --out OUT`` in a new process."""
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    argv = [sys.executable, "-m", "eval.compare", *map(str, folders), "--out", str(out)]
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"eval.compare exited {done.returncode}:\n{done.stderr[-3000:]}")
    if not (out / "report.html").is_file():
        raise SystemExit(f"eval.compare wrote no report.html in {out}")
    return seconds


OPEN_ONE = """
const [index, runs, done] = arguments;
const row = document.querySelectorAll('#query-table tr.query')[index];
row.scrollIntoView({block: 'center'});
const started = performance.now();
row.click();
const handled = performance.now() - started;
const selector = `tr.detail[data-task="${row.dataset.task}"][data-query="${row.dataset.query}"]`;
const detail = document.querySelector(selector);
const shown = detail && !detail.hidden && detail.offsetHeight > 0
    && detail.querySelectorAll('div.trajectory').length === runs;
requestAnimationFrame(() => setTimeout(() => done([performance.now() - started, handled, shown])));
"""


def browse(driver: Any, html: Path, runs: int, repeats: int) -> dict[str, float]:
    """Medians over ``repeats`` loads of the page: ready s, open ms (of which the click's
    script ms) and JS heap MB."""
    from selenium.webdriver.support.ui import WebDriverWait

    ready, opened, script, heap = [], [], [], []
    for _ in range(repeats):
        driver.get("about:blank")
        started = time.perf_counter()
        driver.get(html.resolve().as_uri())
        WebDriverWait(driver, 600, poll_frequency=0.01).until(
            lambda d: d.execute_script("return document.body && document.body.dataset.ready") == "1"
        )
        ready.append(time.perf_counter() - started)
        heap.append(driver.execute_script("return performance.memory.usedJSHeapSize") / 2**20)
        count = driver.execute_script("return document.querySelectorAll('tr.query').length")
        ms, handled, shown = driver.execute_async_script(OPEN_ONE, count // 2, runs)
        if not shown:
            raise SystemExit(f"{html}: a click on query row {count // 2} showed no trajectories")
        opened.append(ms)
        script.append(handled)
    return {
        "ready": statistics.median(ready),
        "open": statistics.median(opened),
        "script": statistics.median(script),
        "heap": statistics.median(heap),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", type=int, default=8)
    p.add_argument("--queries", type=int, default=876, help="in all tasks (R2MED's 876)")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--docs", type=int, default=2000, help="corpus documents per task")
    p.add_argument("--repeats", type=int, default=3, help="page loads per report (median)")
    p.add_argument("--tmp-dir", type=Path, default=None, help="where run folders go")
    p.add_argument("--smoke", action="store_true", help="tiny sizes, a few seconds")
    args = p.parse_args(argv)
    small = SMALL
    if args.smoke:
        for key, value in SMOKE.items():
            setattr(args, key, value)
        small = SMOKE_SMALL
        print("smoke run: tiny sizes, every step, figures meaningless")
    sizes = {"small": Size(**small), "large": Size(args.tasks, args.queries, args.runs)}
    print(
        f"report.html of {sizes['large']} (tasks x queries x runs) against {sizes['small']}; "
        f"trajectories like tool-search's: {LLM_STEPS} LLM steps of {OUTPUT_WORDS} words, "
        f"{SEARCHES} searches of {SEARCH_K} docs, a final top-{DEPTH}; {args.docs} docs per "
        f"task; python {sys.version.split()[0]}; {load()}"
    )

    chromium = find_chromium(install=False)
    # a `kill` still runs the clean-up below: the browser and driver exit, the folders go
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="report-bench-", dir=args.tmp_dir) as tmp:
        driver = start_chromium(chromium) if chromium.ok else None
        try:
            for name, size in sizes.items():
                root = Path(tmp) / name
                started = time.perf_counter()
                docs = args.docs if name == "large" else min(args.docs, 342)  # the demo's
                folders, record_bytes = make_runs(root, size, docs)
                made = time.perf_counter() - started
                print(
                    f"  {name}: run folders synthesized in {made:.1f} s, queries.jsonl "
                    f"{record_bytes / 2**20:.1f} MB in all; {load()}"
                )
                out = root / "comparison"
                r: dict[str, Any] = {"build": build(folders, out)}
                r["bytes"] = (out / "report.html").stat().st_size
                if driver is not None:
                    r.update(browse(driver, out / "report.html", size.runs, args.repeats))
                results[name] = r
        finally:
            if driver is not None:
                driver.quit()

    print(f"\n  {'':<24}{'report bytes':>14}{'build s':>10}{'ready s':>10}{'open ms':>10}"
          f"{'script ms':>11}{'JS heap MB':>12}")  # fmt: skip
    for name, r in results.items():
        browser = (
            f"{r['ready']:>10.2f}{r['open']:>10.1f}{r['script']:>11.1f}{r['heap']:>12.1f}"
            if "ready" in r
            else f"{'-':>10}{'-':>10}{'-':>11}{'-':>12}"
        )
        label = f"{name} ({sizes[name]})"
        print(f"  {label:<24}{r['bytes']:>14,}{r['build']:>10.2f}{browser}")
    large, base = results["large"], results["small"]
    print(
        f"  ratio large / small: bytes {large['bytes'] / base['bytes']:.1f}x, "
        f"build {large['build'] / base['build']:.1f}x"
    )
    if "ready" not in large:
        print(f"skipped browser timings: {chromium.reason}")
        return 0
    print(
        f"  ratio large / small: ready {large['ready'] / base['ready']:.1f}x, "
        f"open trajectory {large['open'] / base['open']:.1f}x"
    )
    ok = {True: "OK", False: "MISSED"}
    print(
        f"targets (this script's idea of usable, large report):\n"
        f"  ready <= {READY_TARGET_S:.0f} s: {large['ready']:.2f} s -> "
        f"{ok[large['ready'] <= READY_TARGET_S]}\n"
        f"  open a trajectory <= {OPEN_TARGET_MS:.0f} ms: {large['open']:.1f} ms -> "
        f"{ok[large['open'] <= OPEN_TARGET_MS]}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
