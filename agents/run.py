"""Run an agent over one or more tasks and score it: `python -m agents.run --agent hyde ...`.

A thin command line over `agents.pipeline.run`: the flags are `agents.config.SETTINGS`, they
build a `RunConfig`, the pipeline runs it, and this module prints what came out. A run folder
(`--runs-dir`/`--run-name`) is bound to its configuration; re-running the same command
resumes it. See agents/pipeline.py for what the folder holds.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import TYPE_CHECKING

from agents import interrupt
from agents.config import (
    DEFAULT_MODEL,
    ConfigError,
    add_arguments,
    from_settings,
    settings_from_args,
    to_dict,
)
from agents.llm.errors import LLMRunError
from agents.paper import paper_reference
from agents.pipeline import HEADLINE, RunResult, TaskResult, run
from agents.registry import AGENTS, STAGES
from eval.datasets import R2MED_TASKS, DataError, r2med_task_name
from eval.files import describe_os_error
from eval.report import leaderboard_markdown
from retrievers.search import RETRIEVERS

if TYPE_CHECKING:
    from eval.references import Reference


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
        + "rerank stages (--rerank KIND[:model][,key=value...], in order):\n"
        + rows({n: s.description for n, s in STAGES.items()})
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
    add_arguments(p)
    p.add_argument(
        "--overwrite", action="store_true", help="replace a run folder holding another config"
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument(
        "--dry-run", action="store_true", help="estimate LLM calls, tokens and cost; call no model"
    )
    return p.parse_args(argv)


def report(result: TaskResult, paper: Reference | None = None) -> str:
    """One task's line: the headline metric beside the no-LLM baseline and, for a run that
    reproduces a published row (`agents.paper`), the paper's figure; usage, failures."""
    summary = result.summary
    line = f"{result.folder}: {HEADLINE} = {summary['metrics'][HEADLINE]:.5f}"
    if "bm25_baseline" in summary:
        line += f" (BM25 without LLM: {summary['bm25_baseline'][HEADLINE]:.5f})"
    figure = paper.figure(result.name, HEADLINE) if paper is not None else None
    if figure is not None:
        line += f" (R2MED paper, {paper.row}: {figure:.5f})"
    u = summary["usage"]
    if u["calls"]:
        line += (
            f"; LLM calls {u['calls']} ({u['cached_calls']} cached), "
            f"tokens {u['prompt_tokens']} in / {u['completion_tokens']} out"
        )
    if summary["failed"]:
        line += f"; {summary['failed']} queries FAILED (see metrics.json)"
    return line + f"\n  {summary['averaging']}"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    interrupt.install()
    try:
        config = from_settings(settings_from_args(args))
        if args.dry_run:  # writes nothing: no run folder, no cache entry
            from agents.estimate import estimate, format_estimate

            print(format_estimate(estimate(config)), flush=True)
            return 0
        paper = paper_reference(to_dict(config))
        result = run(
            config,
            overwrite=args.overwrite,
            progress=not args.quiet,
            on_task=lambda task: print(report(task, paper), flush=True),
        )
    except (ConfigError, DataError, ValueError) as e:  # every refusal is a one-line ValueError
        print(f"error: {e}", file=sys.stderr)
        return 2
    except LLMRunError as e:  # every other query would fail alike; finished ones are kept
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return interrupt.interrupted()
    except OSError as e:  # a disk that fills up or turns read-only mid-run
        print(f"error: cannot write {e.filename}: {describe_os_error(e)}", file=sys.stderr)
        return 2
    return print_summary(result, paper)


def print_summary(result: RunResult, paper: Reference | None = None) -> int:
    """The run's leaderboard, the paper's average over the same tasks when the run
    reproduces a published row, and where it is; the exit status (1 when queries failed)."""
    table = leaderboard_markdown(
        {result.run_dir.name: {f: t.metrics[HEADLINE] for f, t in result.tasks.items()}},
        tasks=list(result.tasks),
    )
    print(table)
    if paper is not None:
        # by R2MED's name: a task run twice counts once, as in the paper
        figures = {r2med_task_name(t.name): paper.figure(t.name) for t in result.tasks.values()}
        values = [v for v in figures.values() if v is not None]
        if values:
            average = sum(values) / len(values) * 100
            print(f"R2MED paper ({paper.row}): avg nDCG@10 {average:.2f} over the same tasks")
    print(f"wall time {result.seconds:.1f} s; run folder: {result.run_dir}")
    if result.failed:
        print(
            f"{result.failed} queries failed; re-run the same command to retry them",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
