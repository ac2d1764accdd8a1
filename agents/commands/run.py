"""Run an agent over one or more tasks and score it: `python -m agents.run --agent hyde ...`.

A thin command line over `agents.execution.whole_run.run_dataset`: the flags are
`agents.config.settings.SETTINGS`, they build a `RunConfig`, the pipeline runs it, and
`agents.execution.report` prints what came out. A run folder (`--runs-dir`/`--run-name`) is
bound to its configuration; re-running the same command resumes it. See
agents/execution/whole_run.py for what the folder holds.
"""

from __future__ import annotations

import argparse

from agents.commands import cli
from agents.commands.cli import command, setup_logging
from agents.config.registry import AGENTS, STAGES
from agents.config.run_config import DEFAULT_MODEL
from agents.config.settings import add_arguments, from_settings, settings_from_args
from agents.execution.report import paper_for, print_summary, task_printer
from eval.datasets import R2MED_TASKS
from retrievers.cluster.connect import add_ray_flag
from retrievers.kinds import RETRIEVERS  # not .search: --help loads no index code


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
    add_ray_flag(p, "answer the queries and encode a dense corpus (the run folder stays here)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    setup_logging()
    return command(lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    config = from_settings(settings_from_args(args))
    if args.dry_run:  # writes nothing: no run folder, no cache entry
        from eval.plumbing.progress import transient

        # the LLM stack takes seconds to import: said at once, and taken back
        with transient("dry run: loading the LLM stack ...", not args.quiet):
            from agents.execution.dry_run import estimate, format_estimate

        print(format_estimate(estimate(config, progress=not args.quiet)), flush=True)
        return 0
    # after parsing: --help loads no retriever or LLM stack
    from agents.execution.whole_run import run_dataset

    paper = paper_for(config)
    result = run_dataset(
        config,
        overwrite=args.overwrite,
        progress=not args.quiet,
        on_task=task_printer(paper),
        ray=args.ray,
    )
    return print_summary(result, paper)


if __name__ == "__main__":
    cli.exit_with(main())
