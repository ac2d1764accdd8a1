"""Run an agent over one or more tasks and score it: `python -m agents.run --agent hyde ...`.

A run folder is bound to one configuration (`config.json`). Per task it holds
`queries.jsonl` (one record per answered query: ranking, generated texts, trace, usage, error),
then `run.trec`, `per_query.jsonl`, R2MED-style `results.json` and `metrics.json`;
`leaderboard.md` and `metrics.json` at the top compare the tasks. Re-running the same command
resumes: answered queries and finished tasks are not redone, failed queries are retried. A
folder written by another configuration is refused unless `--overwrite` is given.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agents.context import AgentContext
from agents.llm import LLM, Usage, check_model
from agents.registry import AGENTS, AgentSpec
from agents.runner import ranking_of, run_queries
from eval.datasets import R2MED_TASKS, DataError, Task, default_cache_dir, load_tasks
from eval.evaluate import evaluate
from eval.report import leaderboard_markdown, results_json, write_per_query, write_results_json
from eval.trec import write_run
from prompts import load_prompt, parse_prompt_overrides
from retrievers.bm25 import BM25_METHODS
from retrievers.search import RETRIEVERS, Retriever, SearchRequest, build_retriever, check_spec

log = logging.getLogger("agents.run")

HEADLINE = "NDCG@10"
DEFAULT_MODEL = "local/qwen2.5-coder-0.5b"


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
    model: str | None = None
    api_base: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    prompts: dict[str, str] = field(default_factory=dict)  # prompt name -> sha256 of its text
    options: dict[str, Any] = field(default_factory=dict)  # the agent's own settings


def _epilog() -> str:
    def rows(pairs: dict[str, str]) -> str:
        return "".join(f"  {name:<25} {doc}\n" for name, doc in pairs.items())

    datasets = {
        "demo": "bundled: 15 queries in R2MED's styles, 342 passages (the default)",
        "<folder>": "a folder in R2MED or BEIR layout",
        "<R2MED task>": ", ".join(R2MED_TASKS[:4]) + ",",
        "": ", ".join(R2MED_TASKS[4:]) + " (from the hub)",
        "r2med": "all 8 R2MED tasks",
    }
    models = {
        DEFAULT_MODEL: "embedded, offline (the default)",
        "local/smollm2-135m": "embedded, offline, faster and weaker",
        "<provider>/<model>": "any litellm model: openai/gpt-4o-mini (OPENAI_API_KEY), ollama/...,",
        " ": "anthropic/...; openai/<name> with --api-base for vLLM or any",
        "  ": "OpenAI-compatible server",
    }
    return (
        "agents:\n"
        + rows({n: s.description for n, s in AGENTS.items()})
        + "retrievers (join with '+' for reciprocal-rank fusion):\n"
        + rows(RETRIEVERS)
        + "datasets:\n"
        + rows(datasets)
        + "models:\n"
        + rows(models)
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m agents.run",
        description="Run a retrieval agent over benchmark tasks and score it with nDCG@10.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_epilog(),
    )
    p.add_argument("--agent", default="none", choices=list(AGENTS), help="default: %(default)s")
    p.add_argument(
        "--dataset",
        default="demo",
        help="'demo' (bundled, the default), a folder, an R2MED task name, or 'r2med'",
    )
    p.add_argument("--retriever", default="bm25", help="default: %(default)s")
    p.add_argument(
        "--bm25-method",
        default="bm25q",
        choices=list(BM25_METHODS),
        help="bm25q is R2MED's (gensim LuceneBM25Model on docs and query); default: %(default)s",
    )
    p.add_argument("--k1", type=float, default=None, help="BM25 k1 (default: the method's)")
    p.add_argument("--b", type=float, default=None, help="BM25 b (default: the method's)")
    p.add_argument("--model", default=DEFAULT_MODEL, help="LLM (default: %(default)s)")
    p.add_argument("--api-base", default=None, help="base URL of an OpenAI-compatible server")
    p.add_argument("--temperature", type=float, default=0.0, help="default: %(default)s")
    p.add_argument("--max-tokens", type=int, default=512, help="per LLM call; default: %(default)s")
    p.add_argument(
        "--prompt",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="use PATH for prompt NAME (e.g. hyde/exam=my.txt, or hyde=my.txt for every kind)",
    )
    p.add_argument(
        "--final-ranking",
        choices=["answer", "fuse", "trace"],
        default=None,
        help="iterative agents: rank with the final answer (as HyDE), fuse every list "
        "retrieved on the way, or the whole trace (default: the agent's)",
    )
    p.add_argument("--max-searches", type=int, default=None, help="iterative agents")
    p.add_argument("--max-turns", type=int, default=None, help="iterative agents")
    p.add_argument("--top-k", type=int, default=None, help="docs per search (iterative agents)")
    p.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an agent setting, e.g. max_turns=8 (see each agent's defaults in the README)",
    )
    p.add_argument("--concurrency", type=int, default=4, help="queries in flight; default: 4")
    p.add_argument(
        "--rate-limit",
        type=float,
        default=None,
        metavar="PER_SECOND",
        help="cap on LLM requests per second to the provider (cache hits are free)",
    )
    p.add_argument(
        "--cache",
        default="use",
        choices=["use", "refresh", "off"],
        help="LLM response cache: use it, refresh it (call again), or off; default: use",
    )
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
    p.add_argument("--cache-dir", type=Path, default=None, help="indexes, LLM cache, downloads")
    p.add_argument(
        "--overwrite", action="store_true", help="replace a run folder holding another config"
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    return p.parse_args(argv)


def run_name(cfg: RunConfig) -> str:
    dataset = Path(cfg.dataset).name or cfg.dataset
    retriever = cfg.bm25_method if cfg.retriever == "bm25" else cfg.retriever.replace("/", "_")
    parts = [cfg.agent, retriever]
    if cfg.model:
        parts.append(cfg.model.split("/")[-1])
    parts.append(dataset)
    if cfg.limit:
        parts.append(f"limit{cfg.limit}")
    # settings that change the output get a folder of their own, so that e.g. the three
    # --final-ranking modes of one agent sit side by side instead of refusing each other
    defaults = AGENTS[cfg.agent].defaults
    parts += [f"{k}={v}" for k, v in cfg.options.items() if v != defaults.get(k)]
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
            raise ValueError(
                f"{path} holds a run with another configuration (differs in: "
                f"{', '.join(diff)}); pass --overwrite to replace it or --run-name for a new one"
            )
        shutil.rmtree(path)
    path.mkdir(parents=True, exist_ok=True)
    _write_json(config_file, asdict(cfg))


def _write_json(path: Path, value: object) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(value, indent=2) + "\n")
    tmp.replace(path)


def prompt_hashes(spec: AgentSpec, tasks: list[Task], overrides: dict[str, Path]) -> dict:
    """The exact prompt texts a run will use, by name and hash, so runs are comparable."""
    hashes = {}
    for name in spec.prompts:
        family, _, variant = name.partition("/")
        if variant:  # one fixed file, replaced only by its own override
            own = {k: v for k, v in overrides.items() if k == name}
            prompts = [load_prompt(family, variant, own)]
        else:
            prompts = [load_prompt(family, overrides=overrides, task=t.name) for t in tasks]
        hashes.update({p.name: p.sha256 for p in prompts})
    return hashes


def agent_options(spec: AgentSpec, pairs: list[str]) -> dict[str, Any]:
    """The agent's defaults with `--option KEY=VALUE` overrides, typed like the defaults."""
    options = dict(spec.defaults)
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or key not in options:
            known = ", ".join(options) or "none"
            raise ValueError(f"--option {pair!r}: agent {spec.name!r} has options: {known}")
        default = options[key]
        try:
            options[key] = (
                type(default)(value)
                if not isinstance(default, bool)
                else (value.lower() in {"1", "true", "yes"})
            )
        except ValueError:
            raise ValueError(f"--option {pair!r}: expected a {type(default).__name__}") from None
    if spec.check_options:
        spec.check_options(options)
    return options


def _limited(task: Task, limit: int | None) -> dict[str, str]:
    return dict(list(task.queries.items())[:limit]) if limit else dict(task.queries)


def baseline_run(bm25: Retriever, queries: dict[str, str], depth: int) -> dict:
    return {q: bm25.search(SearchRequest(query=text), depth) for q, text in queries.items()}


async def run_task(
    task: Task,
    cfg: RunConfig,
    spec: AgentSpec,
    llm: LLM | None,
    args: argparse.Namespace,
    out: Path,
    cache_dir: Path,
    overrides: dict[str, Path],
) -> dict:
    """Answer, rank and score one task into `out`; a finished task is read back, not redone."""
    summary_file = out / "metrics.json"
    if summary_file.exists():
        summary = json.loads(summary_file.read_text())
        if not summary["failed"]:
            log.info("%s: already finished, reading %s", task.name, summary_file)
            return summary
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    progress = not args.quiet
    bm25_options = {"bm25_method": cfg.bm25_method, "k1": cfg.k1, "b": cfg.b}
    bm25 = build_retriever("bm25", task, cache_dir, progress, **bm25_options)
    retriever = (
        bm25
        if cfg.retriever == "bm25"
        else build_retriever(cfg.retriever, task, cache_dir, progress, **bm25_options)
    )
    ctx = AgentContext(
        retriever=retriever,
        first_stage=bm25,
        corpus=task.corpus,
        task=task.name,
        llm=llm,
        depth=cfg.depth,
        prompt_overrides=overrides,
        options=cfg.options,
    )
    queries = _limited(task, cfg.limit)
    records = await run_queries(
        spec.build_graph(ctx),
        queries,
        out / "queries.jsonl",
        concurrency=args.concurrency,
        progress=progress,
        label=f"{task.name} [{cfg.agent}]",
    )
    failed = {q: r["error"] for q, r in records.items() if r["error"]}
    run = {q: ranking_of(r) for q, r in records.items() if not r["error"]}
    qrels = {q: task.qrels[q] for q in queries if q in task.qrels}
    evaluation = evaluate(qrels, run, missing=cfg.missing)
    usage = Usage()
    for record in records.values():
        usage.add(Usage(**record["usage"]))

    write_run(run, out / "run.trec", tag=f"r2med-agents-{cfg.agent}", depth=cfg.depth)
    write_per_query(evaluation, out / "per_query.jsonl")
    seconds = time.perf_counter() - started
    write_results_json(
        results_json(evaluation, task.name, run_name(cfg), f"{seconds / 60:.2f} minutes"),
        out / "results.json",
    )
    summary = {
        "task": task.name,
        "notes": task.notes,
        "metrics": evaluation.mean,
        "averaging": evaluation.describe(),
        "queries": len(queries),
        "failed": len(failed),
        "failures": failed,
        "usage": usage.to_dict(),
        "searches_per_query": _searches_per_query(records),
        "seconds": round(seconds, 3),
    }
    if spec.name != "none":
        base = evaluate(qrels, baseline_run(bm25, queries, cfg.depth), missing=cfg.missing)
        summary["bm25_baseline"] = {HEADLINE: base.mean[HEADLINE]}
    _write_json(summary_file, summary)  # written last; with failed == 0 it marks the task done
    return summary


def _searches_per_query(records: dict) -> float:
    """Searches the agent chose to make (iterative agents' "search" steps), per query."""
    searches = sum(1 for r in records.values() for s in r["steps"] if s.get("node") == "search")
    return round(searches / max(1, len(records)), 3)


def _report(summary: dict) -> str:
    line = f"{summary['task']}: {HEADLINE} = {summary['metrics'][HEADLINE]:.5f}"
    if "bm25_baseline" in summary:
        line += f" (BM25 without LLM: {summary['bm25_baseline'][HEADLINE]:.5f})"
    u = summary["usage"]
    if u["calls"]:
        line += (
            f"; LLM calls {u['calls']} ({u['cached_calls']} cached), "
            f"tokens {u['prompt_tokens']} in / {u['completion_tokens']} out"
        )
    if summary["failed"]:
        line += f"; {summary['failed']} queries FAILED (see metrics.json)"
    return line + f"\n  {summary['averaging']}"


async def amain(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    spec = AGENTS[args.agent]
    cache_dir = args.cache_dir or default_cache_dir()
    try:
        check_spec(args.retriever)
        if spec.uses_llm:
            check_model(args.model)
        tasks = load_tasks(args.dataset, cache_dir)
        overrides = parse_prompt_overrides(args.prompt)
        prompts = prompt_hashes(spec, tasks, overrides)
        flags = {
            "final_ranking": args.final_ranking,
            "max_searches": args.max_searches,
            "max_turns": args.max_turns,
            "top_k": args.top_k,
        }
        pairs = [f"{k}={v}" for k, v in flags.items() if v is not None] + args.option
        options = agent_options(spec, pairs)
    except (DataError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
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
        model=args.model if spec.uses_llm else None,
        api_base=args.api_base if spec.uses_llm else None,
        temperature=args.temperature if spec.uses_llm else None,
        max_tokens=args.max_tokens if spec.uses_llm else None,
        prompts=prompts,
        options=options,
    )
    llm = None
    if spec.uses_llm:
        llm = LLM(
            model=args.model,
            api_base=args.api_base,
            cache_dir=cache_dir,
            cache_mode=args.cache,
            rate_limit=args.rate_limit,
            params={"temperature": args.temperature, "max_tokens": args.max_tokens},
        )
    run_dir = args.runs_dir / (args.run_name or run_name(cfg))
    try:
        open_run_dir(run_dir, cfg, args.overwrite)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    by_task = {}
    for task in tasks:
        summary = await run_task(
            task, cfg, spec, llm, args, run_dir / task.name, cache_dir, overrides
        )
        by_task[task.name] = summary
        print(_report(summary))

    name = run_dir.name
    table = leaderboard_markdown(
        {name: {t: s["metrics"][HEADLINE] for t, s in by_task.items()}}, tasks=list(by_task)
    )
    (run_dir / "leaderboard.md").write_text(table + "\n")
    _write_json(run_dir / "metrics.json", by_task)
    print(table)
    failed = sum(s["failed"] for s in by_task.values())
    print(f"wall time {time.perf_counter() - started:.1f} s; run folder: {run_dir}")
    if failed:
        print(f"{failed} queries failed; re-run the same command to retry them", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    return asyncio.run(amain(args))


if __name__ == "__main__":
    sys.exit(main())
