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
import hashlib
import json
import logging
import math
import shutil
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from agents.context import AgentContext
from agents.llm import LLM, LLMAuthError, Usage, check_credentials, check_model
from agents.registry import AGENTS, AgentSpec
from agents.runner import ranking_of, run_queries
from agents.secrets import public_url
from eval.argtypes import (
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
    unit_float,
)
from eval.datasets import (
    R2MED_TASKS,
    DataError,
    Task,
    default_cache_dir,
    load_tasks,
    task_fingerprint,
)
from eval.evaluate import TIE_ORDERS, evaluate, pad_run
from eval.files import (
    check_component,
    describe_os_error,
    safe_name,
    writable_folder,
    write_json,
    write_text,
)
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
    pad: bool = False
    ties: str = "trec"
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
    p.add_argument(
        "--k1", type=non_negative_float, default=None, help="BM25 k1 (default: the method's)"
    )
    p.add_argument("--b", type=unit_float, default=None, help="BM25 b (default: the method's)")
    p.add_argument("--model", default=DEFAULT_MODEL, help="LLM (default: %(default)s)")
    p.add_argument("--api-base", default=None, help="base URL of an OpenAI-compatible server")
    p.add_argument(
        "--temperature", type=non_negative_float, default=0.0, help="default: %(default)s"
    )
    p.add_argument(
        "--max-tokens", type=positive_int, default=512, help="per LLM call; default: %(default)s"
    )
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
    p.add_argument("--max-searches", type=non_negative_int, default=None, help="iterative agents")
    p.add_argument("--max-turns", type=positive_int, default=None, help="iterative agents")
    p.add_argument(
        "--top-k", type=positive_int, default=None, help="docs per search (iterative agents)"
    )
    p.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an agent setting, e.g. max_turns=8 (see each agent's defaults in the README)",
    )
    p.add_argument(
        "--concurrency", type=positive_int, default=4, help="queries in flight; default: 4"
    )
    p.add_argument(
        "--rate-limit",
        type=positive_float,
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
    p.add_argument(
        "--depth", type=positive_int, default=100, help="documents kept per query (default 100)"
    )
    p.add_argument(
        "--pad",
        action="store_true",
        help="fill rankings shorter than --depth with zero-score documents in corpus order, "
        "as R2MED's BM25 script does (reproduces its BM25 row exactly)",
    )
    p.add_argument(
        "--ties",
        default="trec",
        choices=TIE_ORDERS,
        help="order of tied scores: trec (doc id descending, what trec_eval and R2MED's "
        "numbers use) or ascending; default: %(default)s",
    )
    p.add_argument(
        "--missing",
        default="zero",
        choices=["zero", "present"],
        help="queries without results count 0 (zero) or are left out as R2MED's code does "
        "(present); default: %(default)s",
    )
    p.add_argument(
        "--limit", type=positive_int, default=None, help="only the first N queries per task"
    )
    p.add_argument("--runs-dir", type=Path, default=Path("runs"), help="default: %(default)s")
    p.add_argument(
        "--run-name",
        type=_run_name_arg,
        default=None,
        help="run folder name inside --runs-dir (default: from the config)",
    )
    p.add_argument("--cache-dir", type=Path, default=None, help="indexes, LLM cache, downloads")
    p.add_argument(
        "--overwrite", action="store_true", help="replace a run folder holding another config"
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    return p.parse_args(argv)


def _run_name_arg(text: str) -> str:
    try:
        return check_component(text, "--run-name")
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("--run-name ")) from None


def run_name(cfg: RunConfig) -> str:
    """The default run folder name: the settings that tell runs apart, as one safe name."""
    dataset = Path(cfg.dataset).name or cfg.dataset
    retriever = cfg.bm25_method if cfg.retriever == "bm25" else cfg.retriever
    parts = [cfg.agent, retriever]
    if cfg.model:
        parts.append(cfg.model.split("/")[-1])
    parts.append(dataset)
    if cfg.limit:
        parts.append(f"limit{cfg.limit}")
    if cfg.pad:
        parts.append("pad")
    if cfg.ties != "trec":
        parts.append(f"ties={cfg.ties}")
    # settings that change the output get a folder of their own, so that e.g. the three
    # --final-ranking modes of one agent sit side by side instead of refusing each other
    defaults = AGENTS[cfg.agent].defaults
    parts += [f"{k}={v}" for k, v in cfg.options.items() if v != defaults.get(k)]
    return safe_name("-".join(parts))


LOCK_FILE = ".lock"


def lock_run_dir(path: Path) -> FileLock:
    """Hold the run folder for this process; a second process on it is refused at once.

    Two processes on one folder would both pay for every query and interleave their records.
    The lock is the kernel's (flock), so a crashed holder never leaves it stuck.
    """
    path.mkdir(parents=True, exist_ok=True)
    lock = FileLock(path / LOCK_FILE, timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise ValueError(
            f"{path} is in use by another agents.run process; wait for it to finish or "
            "pass another --run-name"
        ) from None
    return lock


def open_run_dir(path: Path, cfg: RunConfig, overwrite: bool) -> None:
    """Bind `path` to `cfg`: accept it if it holds the same config, refuse otherwise.

    With `overwrite` only this run's own folder is emptied (it is one path component inside
    the runs dir, see `check_component`), never its parent.
    """
    config_file = path / "config.json"
    if config_file.exists():
        try:
            old = json.loads(config_file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            if not overwrite:
                raise ValueError(
                    f"{config_file}: damaged, cannot be read ({type(e).__name__}); pass "
                    "--overwrite to replace this run or --run-name for a new one"
                ) from None
            old = None
        if old == asdict(cfg):
            return
        if not overwrite:
            ours = asdict(cfg)
            diff = sorted(k for k in ours if not isinstance(old, dict) or old.get(k) != ours[k])
            raise ValueError(
                f"{path} holds a run with another configuration (differs in: "
                f"{', '.join(diff)}); pass --overwrite to replace it or --run-name for a new one"
            )
        _empty_run_dir(path)
    write_json(config_file, asdict(cfg))


def _empty_run_dir(path: Path) -> None:
    for child in path.iterdir():
        if child.name == LOCK_FILE:
            continue  # held by this process
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


def task_folders(tasks: list[Task]) -> list[str]:
    """One folder name per task; tasks of the same name (``a/toy,b/toy``) never share one.

    A task given twice is refused: it would be run and counted twice.
    """
    seen: dict[Path, str] = {}
    for task in tasks:
        where = task.path.resolve()
        if where in seen:
            raise ValueError(f"--dataset names {task.name} ({task.path}) twice")
        seen[where] = task.name
    names = [t.name for t in tasks]
    folders = []
    for task in tasks:
        if names.count(task.name) == 1:
            folders.append(safe_name(task.name))
            continue
        # readable where the parent folders differ, a hash of the path where they do not
        parent = task.path.resolve().parent.name
        label = f"{parent}-{task.name}"
        if sum(f"{t.path.resolve().parent.name}-{t.name}" == label for t in tasks) > 1:
            label += "-" + hashlib.sha256(str(task.path.resolve()).encode()).hexdigest()[:8]
        folders.append(safe_name(label))
    return folders


def check_task_data(out: Path, task: Task, fingerprint: dict[str, str]) -> None:
    """Refuse a task folder whose records were made from another corpus or query set.

    A changed qrels file only needs the (free) metrics recomputed, which `run_task` does;
    records ranked over another corpus or answering other query texts cannot be reused.
    """
    bound = out / "task.json"
    if not bound.exists():
        return
    try:
        old = json.loads(bound.read_text(encoding="utf-8"))["fingerprint"]
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError):
        raise ValueError(
            f"{bound}: damaged, cannot tell which data this run used; pass --overwrite to "
            "redo the run"
        ) from None
    changed = [part for part in ("corpus", "queries") if old.get(part) != fingerprint[part]]
    if changed:
        raise ValueError(
            f"{out}: the {' and '.join(changed)} of task {task.name} changed since this run "
            f"was made ({task.path}); pass --overwrite to redo it or --run-name for a new run"
        )


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
        options[key] = _typed_like(options[key], value, pair)
    if spec.check_options:
        spec.check_options(options)
    return options


_BOOLS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}


def _typed_like(default: Any, value: str, pair: str) -> Any:
    """`value` parsed as the type of the option's default; anything else is refused."""
    if isinstance(default, bool):
        if value.strip().lower() not in _BOOLS:
            raise ValueError(f"--option {pair!r}: expected true or false")
        return _BOOLS[value.strip().lower()]
    try:
        typed = type(default)(value)
    except ValueError:
        noun = {int: "an integer", float: "a number"}.get(type(default), type(default).__name__)
        raise ValueError(f"--option {pair!r}: expected {noun}") from None
    if isinstance(typed, float) and not math.isfinite(typed):
        raise ValueError(f"--option {pair!r}: expected a finite number")
    return typed


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
    fingerprint: dict[str, str],
) -> dict:
    """Answer, rank and score one task into `out`; a finished task is read back, not redone.

    A finished task counts only for the data it was scored on: when the qrels changed, or
    its metrics.json is damaged, the metrics are computed again from the saved records (no
    query is answered twice).
    """
    summary_file = out / "metrics.json"
    summary = _read_summary(summary_file)
    if summary is not None and not summary.get("failed") and summary.get("data") == fingerprint:
        log.info("%s: already finished, reading %s", task.name, summary_file)
        return summary
    out.mkdir(parents=True, exist_ok=True)
    write_json(
        out / "task.json", {"task": task.name, "path": str(task.path), "fingerprint": fingerprint}
    )
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
    run = _final_run({q: ranking_of(r) for q, r in records.items() if not r["error"]}, task, cfg)
    qrels = {q: task.qrels[q] for q in queries if q in task.qrels}
    evaluation = evaluate(qrels, run, missing=cfg.missing, ties=cfg.ties)
    usage = Usage()
    for record in records.values():
        usage.add(Usage(**record["usage"]))

    write_run(
        run, out / "run.trec", tag=f"r2med-agents-{cfg.agent}", depth=cfg.depth, ties=cfg.ties
    )
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
        "data": fingerprint,
    }
    if spec.name != "none":
        base_run = _final_run(baseline_run(bm25, queries, cfg.depth), task, cfg)
        base = evaluate(qrels, base_run, missing=cfg.missing, ties=cfg.ties)
        summary["bm25_baseline"] = {HEADLINE: base.mean[HEADLINE]}
    write_json(summary_file, summary)  # written last; with failed == 0 it marks the task done
    return summary


def _final_run(run: dict, task: Task, cfg: RunConfig) -> dict:
    return pad_run(run, list(task.corpus), cfg.depth) if cfg.pad else run


def _read_summary(path: Path) -> dict | None:
    """A task's metrics.json, or None when absent or damaged (it is derived: recomputed)."""
    try:
        summary = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        log.warning("%s is damaged; recomputing it from the saved records", path)
        return None
    return summary if isinstance(summary, dict) else None


def _searches_per_query(records: dict) -> float:
    """Searches the agent chose to make (iterative agents' "search" steps), per query."""
    searches = sum(1 for r in records.values() for s in r["steps"] if s.get("node") == "search")
    return round(searches / max(1, len(records)), 3)


def _report(summary: dict, label: str) -> str:
    line = f"{label}: {HEADLINE} = {summary['metrics'][HEADLINE]:.5f}"
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
    try:
        cache_dir = writable_folder(args.cache_dir or default_cache_dir(), "--cache-dir")
        check_spec(args.retriever)
        if spec.uses_llm:
            check_model(args.model)
            check_credentials(args.model, args.api_base)
        overrides = parse_prompt_overrides(args.prompt)
        tasks = load_tasks(args.dataset, cache_dir)
        folders = task_folders(tasks)
        prompts = prompt_hashes(spec, tasks, overrides)
        flags = {
            "final_ranking": args.final_ranking,
            "max_searches": args.max_searches,
            "max_turns": args.max_turns,
            "top_k": args.top_k,
        }
        pairs = [f"{k}={v}" for k, v in flags.items() if v is not None] + args.option
        options = agent_options(spec, pairs)
        # last, so that a refused input leaves no runs folder behind
        runs_dir = writable_folder(args.runs_dir, "--runs-dir")
    except (DataError, ValueError) as e:  # FolderError and PromptError are ValueErrors
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
        pad=args.pad,
        ties=args.ties,
        model=args.model if spec.uses_llm else None,
        api_base=public_url(args.api_base) if spec.uses_llm else None,  # no password
        temperature=args.temperature if spec.uses_llm else None,
        max_tokens=args.max_tokens if spec.uses_llm else None,
        prompts=prompts,
        options=options,
    )
    run_dir = runs_dir / (args.run_name or run_name(cfg))
    try:
        lock = lock_run_dir(run_dir)
    except (ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        return await _run_locked(
            args, spec, cfg, tasks, folders, overrides, run_dir, cache_dir, started
        )
    except LLMAuthError as e:  # every other query would fail alike; finished ones are kept
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a disk that fills up or turns read-only mid-run
        where = e.filename or run_dir
        print(f"error: cannot write {where}: {describe_os_error(e)}", file=sys.stderr)
        return 2
    finally:
        lock.release()


async def _run_locked(
    args: argparse.Namespace,
    spec: AgentSpec,
    cfg: RunConfig,
    tasks: list[Task],
    folders: list[str],
    overrides: dict[str, Path],
    run_dir: Path,
    cache_dir: Path,
    started: float,
) -> int:
    fingerprints = [task_fingerprint(t) for t in tasks]
    try:
        open_run_dir(run_dir, cfg, args.overwrite)
        for task, folder, fingerprint in zip(tasks, folders, fingerprints, strict=True):
            try:
                check_task_data(run_dir / folder, task, fingerprint)
            except ValueError:
                if not args.overwrite:
                    raise
                shutil.rmtree(run_dir / folder)  # its records answer other data
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
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

    by_task = {}
    for task, folder, fingerprint in zip(tasks, folders, fingerprints, strict=True):
        summary = await run_task(
            task, cfg, spec, llm, args, run_dir / folder, cache_dir, overrides, fingerprint
        )
        by_task[folder] = summary
        print(_report(summary, folder))

    name = run_dir.name
    table = leaderboard_markdown(
        {name: {t: s["metrics"][HEADLINE] for t, s in by_task.items()}}, tasks=list(by_task)
    )
    write_text(run_dir / "leaderboard.md", table + "\n")
    write_json(run_dir / "metrics.json", by_task)
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
