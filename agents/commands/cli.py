"""The agents' command-line layer: one error ladder, one logging setup, one report printer.

Every command of agents (run, rerank, sweep, trace) runs its body through `command`: the
ladder of eval.plumbing.cli with the agent layer's own refusal (`LLMRunError`: a fault every other
query would meet too, so the run stops, its finished queries kept) and Ctrl-C (or SIGTERM,
exit status 143) as `agents.shared.interrupt` stops a run. What a run prints is `report` (one
task's line, as it finishes) and `print_summary` (the run's table), each beside R2MED's
published figure when the run reproduces a published row (`agents.execution.published_row`).

Nothing heavy is imported here, so that ``--help`` stays instant: a run's results come from
agents.execution.whole_run, which the commands import after parsing.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from agents.execution.published_row import average_note, figure_note, paper_reference
from agents.llm.errors import LLMRunError
from agents.shared import interrupt
from eval.plumbing import cli
from eval.runs import AGENT_STAGE

if TYPE_CHECKING:
    from agents.config.run_config import RunConfig
    from agents.execution.whole_run import RunResult, TaskResult
    from eval.references import Reference

REFUSALS: tuple[type[Exception], ...] = (LLMRunError,)


def command(body: Callable[[], int], *, resumable: bool = True) -> int:
    """Run a command's ``body`` on the ladder: a refusal is one ``error:`` line and exit
    status 2, Ctrl-C one line and 130, SIGTERM the same line and 143. A ``resumable``
    command's line says the same command resumes (a run); another's (a reader) says what it
    wrote is whole."""
    interrupt.install()
    stop = interrupt.interrupted if resumable else None
    return cli.command(body, refusals=REFUSALS, interrupted=stop)


def exit_with(status: int) -> None:
    """End the process with ``status``. After a Ctrl-C a worker thread may still be inside
    llama.cpp (loading a model, say), which interpreter shutdown would wait on and whose
    native code then meets a half-torn-down process: the output is flushed and the process
    ends at once; every finished record is already on disk (fsynced as it finished). A
    SIGTERM's status ends it the same way."""
    if status in (interrupt.EXIT_STATUS, cli.EXIT_TERMINATED):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    sys.exit(status)


def refused(body: Callable[[], int], *, prefix: str = "") -> int:
    """One part of a command (a sweep's cell): its refusal is one line starting with
    ``prefix`` and exit status 2, and the command goes on; a Ctrl-C stops the command."""
    return cli.refused(body, refusals=REFUSALS, prefix=prefix)


def setup_logging() -> None:
    """The pipeline's notes (a task resumed, a query skipped) as plain lines on stderr."""
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)


def paper_for(config: RunConfig) -> Reference | None:
    """R2MED's published row that ``config`` reproduces, or None."""
    from agents.config.serialise import to_dict  # the commands have it loaded already

    return paper_reference(to_dict(config))


def report(result: TaskResult, paper: Reference | None = None) -> str:
    """One task's line: the headline metric beside the no-LLM baseline and, for a run that
    reproduces a published row, the paper's figure; usage, failures; then the averaging."""
    from eval.metrics import HEADLINE

    summary = result.summary
    line = f"{result.folder}: {HEADLINE} = {summary.metrics[HEADLINE]:.5f}"
    if summary.bm25_baseline is not None:
        line += f" (BM25 without LLM: {summary.bm25_baseline[HEADLINE]:.5f})"
    if summary.run_file is not None and summary.final_stage != AGENT_STAGE:
        # the file's own lists, scored as they were read: what the stages were given
        name = os.path.basename(summary.run_file["path"])
        line += f" (first stage, {name}: {summary.stages[AGENT_STAGE][HEADLINE]:.5f})"
    note = figure_note(paper, result.name, HEADLINE) if paper is not None else None
    if note is not None:  # the figure with its source (and the other's, where they conflict)
        line += f" ({note})"
    line += _usage(summary.usage)
    if summary.failed:
        line += f"; {summary.failed} queries FAILED (see metrics.json)"
    return line + f"\n  {summary.averaging}"


def _usage(u: Mapping[str, int]) -> str:
    if not u["calls"]:
        return ""
    return (
        f"; LLM calls {u['calls']} ({u['cached_calls']} cached), "
        f"tokens {u['prompt_tokens']} in / {u['completion_tokens']} out"
    )


def task_printer(paper: Reference | None) -> Callable[[TaskResult], None]:
    """The pipeline's ``on_task``: each task's `report` as it finishes."""
    return lambda task: print(report(task, paper), flush=True)


def paper_average(result: RunResult, paper: Reference | None) -> str | None:
    """The published average over the run's R2MED tasks, as a line naming its source (both
    sources where they conflict); None without any."""
    if paper is None:
        return None
    # by R2MED's name: a task run twice counts once, as in the paper
    return average_note(paper, [t.name for t in result.tasks.values()])


def print_summary(result: RunResult, paper: Reference | None = None) -> int:
    """The run's leaderboard, the paper's average over the same tasks when the run
    reproduces a published row, and where it is; the exit status (1 when queries failed)."""
    print(result.leaderboard())
    if (average := paper_average(result, paper)) is not None:
        print(average)
    print(f"wall time {result.seconds:.1f} s; run folder: {result.run_dir}")
    if result.failed:
        print(
            f"{result.failed} queries failed; re-run the same command to retry them",
            file=sys.stderr,
        )
        return 1
    return 0
