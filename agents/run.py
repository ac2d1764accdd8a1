"""Run an agent over one or more tasks and score it: `python -m agents.run --agent none ...`.

A run folder holds `config.json` and, per task, the TREC run file, per-query metrics and
R2MED-style results; `leaderboard.md` and `results.json` at the top compare the tasks.
Re-running the same command skips tasks that are already finished; a folder written by a
different configuration is refused unless `--overwrite` is given.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from eval.datasets import R2MED_TASKS, DataError, Task, load_tasks
from eval.evaluate import evaluate
from eval.report import leaderboard_markdown, results_json, write_per_query, write_results_json
from eval.trec import write_run
from retrievers.bm25 import BM25_METHODS, build_bm25

log = logging.getLogger("agents.run")

AGENTS = {"none": "retrieve with the raw query text (the no-LLM baseline)"}
RETRIEVERS = {"bm25": "sparse BM25 over the task corpus (see --bm25-method)"}
HEADLINE = "NDCG@10"


def default_cache_dir() -> Path:
    return Path(os.environ.get("R2MED_AGENTS_CACHE", Path.home() / ".cache" / "r2med-agents"))


@dataclass(frozen=True)
class RunConfig:
    """Everything that decides a run's output; a run folder is bound to one of these."""

    agent: str
    dataset: str
    retriever: str
    bm25_method: str
    k1: float | None
    b: float | None
    depth: int
    missing: str
    limit: int | None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m agents.run",
        description="Run a retrieval agent over a benchmark task and score it with nDCG@10.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="agents:\n"
        + "".join(f"  {name:<10} {doc}\n" for name, doc in AGENTS.items())
        + "datasets:\n  a folder in R2MED or BEIR layout, an R2MED task name ("
        + ", ".join(R2MED_TASKS)
        + "), or 'r2med' for all 8\n",
    )
    p.add_argument("--agent", default="none", choices=sorted(AGENTS), help="default: %(default)s")
    p.add_argument("--dataset", required=True, help="folder, R2MED task name, or 'r2med'")
    p.add_argument("--retriever", default="bm25", choices=sorted(RETRIEVERS))
    p.add_argument(
        "--bm25-method",
        default="bm25q",
        choices=list(BM25_METHODS),
        help="bm25q is R2MED's (gensim LuceneBM25Model on docs and query); default: %(default)s",
    )
    p.add_argument("--k1", type=float, default=None, help="BM25 k1 (default: the method's)")
    p.add_argument("--b", type=float, default=None, help="BM25 b (default: the method's)")
    p.add_argument("--depth", type=int, default=100, help="documents kept per query (default 100)")
    p.add_argument(
        "--missing",
        default="zero",
        choices=["zero", "present"],
        help="queries without results count 0 (zero) or are left out as R2MED's code does "
        "(present); default: %(default)s",
    )
    p.add_argument("--limit", type=int, default=None, help="only the first N queries per task")
    p.add_argument("--runs-dir", type=Path, default=Path("runs"), help="default: %(default)s")
    p.add_argument("--run-name", default=None, help="run folder name (default: from the config)")
    p.add_argument("--cache-dir", type=Path, default=None, help="indexes and downloads")
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace a run folder holding another config",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    return p.parse_args(argv)


def run_name(cfg: RunConfig) -> str:
    dataset = Path(cfg.dataset).name or cfg.dataset
    parts = [cfg.agent, cfg.retriever if cfg.retriever != "bm25" else cfg.bm25_method, dataset]
    if cfg.limit:
        parts.append(f"limit{cfg.limit}")
    return "-".join(parts)


def open_run_dir(path: Path, cfg: RunConfig, overwrite: bool) -> None:
    """Bind `path` to `cfg`: create it, accept it if it holds the same config, refuse otherwise."""
    config_file = path / "config.json"
    if config_file.exists():
        old = json.loads(config_file.read_text())
        if old == asdict(cfg):
            return
        if not overwrite:
            diff = sorted(k for k in asdict(cfg) if old.get(k) != asdict(cfg)[k])
            raise SystemExit(
                f"error: {path} holds a run with another configuration (differs in: "
                f"{', '.join(diff)}); pass --overwrite to replace it or --run-name for a new one"
            )
        shutil.rmtree(path)
    path.mkdir(parents=True, exist_ok=True)
    tmp = config_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(cfg), indent=2) + "\n")
    tmp.replace(config_file)


def retrieve_task(task: Task, cfg: RunConfig, cache_dir: Path, progress: bool) -> dict:
    """The `none` agent: the raw query text goes straight to the retriever."""
    index = build_bm25(
        task.corpus,
        cfg.bm25_method,
        k1=cfg.k1,
        b=cfg.b,
        cache_dir=cache_dir / "bm25",
        progress=progress,
    )
    queries = dict(list(task.queries.items())[: cfg.limit] if cfg.limit else task.queries)
    return index.search_many(queries, k=cfg.depth, progress=progress)


def run_task(task: Task, cfg: RunConfig, out: Path, cache_dir: Path, progress: bool) -> dict:
    """Retrieve and score one task into `out`; a finished task is read back, not redone."""
    summary_file = out / "metrics.json"
    if summary_file.exists():
        log.info("%s: already finished, reading %s", task.name, summary_file)
        return json.loads(summary_file.read_text())
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    run = retrieve_task(task, cfg, cache_dir, progress)
    qrels = {q: task.qrels[q] for q in run if q in task.qrels} if cfg.limit else task.qrels
    evaluation = evaluate(qrels, run, missing=cfg.missing)
    seconds = time.perf_counter() - started
    write_run(run, out / "run.trec", tag=f"{cfg.agent}-{cfg.bm25_method}", depth=cfg.depth)
    write_per_query(evaluation, out / "per_query.jsonl")
    write_results_json(
        results_json(evaluation, task.name, run_name(cfg), f"{seconds / 60:.2f} minutes"),
        out / "results.json",
    )
    summary = {
        "task": task.name,
        "metrics": evaluation.mean,
        "averaging": evaluation.describe(),
        "queries": len(run),
        "seconds": round(seconds, 3),
    }
    tmp = summary_file.with_suffix(".tmp")
    tmp.write_text(json.dumps(summary, indent=2) + "\n")
    tmp.replace(summary_file)  # written last: its presence marks the task finished
    return summary


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    cfg = RunConfig(
        agent=args.agent,
        dataset=args.dataset,
        retriever=args.retriever,
        bm25_method=args.bm25_method,
        k1=args.k1,
        b=args.b,
        depth=args.depth,
        missing=args.missing,
        limit=args.limit,
    )
    cache_dir = args.cache_dir or default_cache_dir()
    try:
        tasks = load_tasks(args.dataset, cache_dir)
    except DataError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    run_dir = args.runs_dir / (args.run_name or run_name(cfg))
    open_run_dir(run_dir, cfg, args.overwrite)

    by_task = {}
    for task in tasks:
        results = run_task(task, cfg, run_dir / task.name, cache_dir, not args.quiet)
        by_task[task.name] = results
        score = results["metrics"][HEADLINE]
        print(f"{task.name}: {HEADLINE} = {score:.5f} ({results['averaging']})")

    name = run_dir.name
    table = leaderboard_markdown(
        {name: {t: r["metrics"][HEADLINE] for t, r in by_task.items()}}, tasks=list(by_task)
    )
    (run_dir / "leaderboard.md").write_text(table + "\n")
    (run_dir / "metrics.json").write_text(json.dumps(by_task, indent=2) + "\n")
    print(table)
    print(f"run folder: {run_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
