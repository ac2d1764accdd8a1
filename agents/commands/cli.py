"""The agents' command-line layer: one error ladder, one logging setup.

Every command of agents (run, rerank, sweep, trace) runs its body through `command`: the
ladder of eval.plumbing.cli with the agent layer's own refusals (agents.execution.report's
`REFUSALS`) and Ctrl-C (or SIGTERM, exit status 143) as `agents.shared.interrupt` stops a run.
What a run prints is agents.execution.report.

Nothing heavy is imported here, so that ``--help`` stays instant: a run's results come from
agents.execution.whole_run, which the commands import after parsing.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable

from agents.execution.report import REFUSALS
from agents.shared import interrupt
from eval.plumbing import cli


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


def setup_logging() -> None:
    """The pipeline's notes (a task resumed, a query skipped) as plain lines on stderr."""
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
