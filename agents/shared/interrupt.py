"""Ctrl-C at any point: one line, exit status 130, nothing lost.

Every finished query is already on disk (appended and fsynced as it finishes), so an interrupt
only has to stop promptly and quietly: `install` makes SIGINT stop an embedded model's
generation at its next token (agents.llm.embedded.pool.CANCEL) before raising KeyboardInterrupt, and
the command lines catch that and print `MESSAGE`.
"""

from __future__ import annotations

import signal
import sys
from types import FrameType

EXIT_STATUS = 128 + signal.SIGINT  # 130, what a shell reports for a Ctrl-C'ed program
MESSAGE = "interrupted: every finished query is kept; run the same command again to resume"


def _handler(signum: int, frame: FrameType | None) -> None:
    pool = sys.modules.get("agents.llm.embedded.pool")  # only a run that loaded it has any
    if pool is not None:
        pool.CANCEL.set()
    raise KeyboardInterrupt


def install() -> None:
    """Handle SIGINT as described above (from the main thread, as signals require)."""
    pool = sys.modules.get("agents.llm.embedded.pool")
    if pool is not None:  # a new run in a process that was interrupted before (a test's)
        pool.CANCEL.clear()
    signal.signal(signal.SIGINT, _handler)


def interrupted() -> int:
    """Say so in one line; the exit status to return."""
    print(MESSAGE, file=sys.stderr, flush=True)
    return EXIT_STATUS
