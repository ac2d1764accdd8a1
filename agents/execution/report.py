"""What a run prints: each task's line as it finishes (`report`, `task_printer`) and the run's
table (`print_summary`), each beside R2MED's published figure when the run reproduces a
published row (`agents.execution.published_row`); and one part of a command (a sweep's cell)
refused in one line (`refused`) with the agent layer's own refusal, `LLMRunError`: a fault
every other query would meet too, so the run stops, its finished queries kept.

Nothing heavy is imported here, so that a command's ``--help`` stays instant.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from agents.execution.published_row import average_note, figure_note, paper_reference
from agents.llm.errors import LLMRunError
from eval.plumbing import cli
from eval.runs import AGENT_STAGE

if TYPE_CHECKING:
    from agents.config.run_config import RunConfig
    from agents.execution.whole_run import RunResult, TaskResult
    from eval.references.model import Reference

REFUSALS: tuple[type[Exception], ...] = (LLMRunError,)


def refused(body: Callable[[], int], *, prefix: str = "") -> int:
    """One part of a command (a sweep's cell): its refusal is one line starting with
    ``prefix`` and exit status 2, and the command goes on; a Ctrl-C stops the command."""
    return cli.refused(body, refusals=REFUSALS, prefix=prefix)


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
