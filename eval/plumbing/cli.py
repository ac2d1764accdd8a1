"""The one error ladder every command line climbs: a refusal is one line and exit status 2.

Every refusal in this project is a `ValueError` whose message is one line naming the file,
line and field, or the flag and value (config, data, prompt and folder errors are all
subclasses); a command adds the errors of its own layer (an LLM that cannot be reached) as
``refusals``. An OSError names the file and the reason (a full or read-only disk). Ctrl-C
is one line and exit status 130: every file written so far is written whole. SIGTERM (what
`kill`, a job scheduler or a container stop sends) takes Ctrl-C's path, with exit status 143.
Anything else is a bug and goes up with its traceback.

    def main(argv=None) -> int:
        args = parse_args(argv)  # argparse's own errors exit 2 before the ladder
        return command(lambda: _main(args))
"""

from __future__ import annotations

import errno
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType

from eval.plumbing.files import describe_os_error
from eval.plumbing.quoting import clipped

EXIT_REFUSED = 2
MAX_LINE = 500  # characters of an error line, after "error: "
EXIT_INTERRUPTED = 128 + signal.SIGINT  # 130, what a shell reports for a Ctrl-C'ed program
EXIT_TERMINATED = 128 + signal.SIGTERM  # 143, what a shell reports for a SIGTERM'ed program
INTERRUPTED = "interrupted: every file written so far is kept whole"
# errors only a write meets; any other (a missing file, no permission) may be a read's too
WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.EFBIG})


def error(message: str) -> int:
    """Print one ``error:`` line on stderr; the refusal's exit status. The line is one line
    and at most `MAX_LINE` characters whatever it quotes (a megabyte id from a file): its
    start, which names the file, line and field, is always kept."""
    line = " ".join(str(message).splitlines()) or "(no message)"
    print(f"error: {clipped(line, MAX_LINE)}", file=sys.stderr, flush=True)
    return EXIT_REFUSED


def os_error_line(e: OSError) -> str:
    """An OSError as one line: the file first, then why (disk full, read-only, ...)."""
    # a rename's or link's second file is the one it was making
    path = e.filename2 if e.filename2 is not None else e.filename
    if path is None:
        return describe_os_error(e)
    if e.errno in WRITE_ERRNOS:
        return f"cannot write {path}: {describe_os_error(e)}"
    return f"{path}: {describe_os_error(e)}"


def refused(
    body: Callable[[], int],
    *,
    refusals: tuple[type[BaseException], ...] = (),
    prefix: str = "",
) -> int:
    """Run ``body``; a refusal it raises is one line and exit status 2. A Ctrl-C goes up: this
    is the ladder without its last rung, for one part of a command (a sweep's cell)."""
    try:
        return body()
    except (ValueError, *refusals) as e:
        return error(f"{prefix}{e}")
    except OSError as e:
        return error(f"{prefix}{os_error_line(e)}")


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C raises KeyboardInterrupt: everything that lets a Ctrl-C
    through (asyncio, a sweep's cells) lets it through too."""


_sigterm = threading.Event()  # set by a SIGTERM, which some code (asyncio's runner) re-raises
# as a plain KeyboardInterrupt


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    # Ctrl-C's own handler first (a run's stops an embedded model's generation), then the
    # same exception with the signal's name on it
    _sigterm.set()
    on_sigint = signal.getsignal(signal.SIGINT)
    try:
        if callable(on_sigint):
            on_sigint(signal.SIGINT, frame)
    except KeyboardInterrupt:
        pass
    raise Terminated


def _catch_sigterm() -> Callable[[], None]:
    """Handle SIGTERM as Ctrl-C while a command runs; what puts the previous handler back.
    Signals are the main thread's: elsewhere (a command called from a worker) nothing
    changes."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    _sigterm.clear()
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    return lambda: signal.signal(signal.SIGTERM, previous)


def command(
    body: Callable[[], int],
    *,
    refusals: tuple[type[BaseException], ...] = (),
    interrupted: Callable[[], int] | None = None,
    prefix: str = "",
) -> int:
    """Run ``body`` and turn what it raises into one line and an exit status.

    ``refusals`` are refused like ValueErrors; ``interrupted`` says what a Ctrl-C keeps (its
    return value is the exit status); ``prefix`` starts every error line. A SIGTERM is a
    Ctrl-C whose exit status is 143.
    """
    restore = _catch_sigterm()
    try:
        return refused(body, refusals=refusals, prefix=prefix)
    except KeyboardInterrupt as stop:
        if interrupted is not None:
            status = interrupted()
        else:
            print(INTERRUPTED, file=sys.stderr, flush=True)
            status = EXIT_INTERRUPTED
        return EXIT_TERMINATED if isinstance(stop, Terminated) or _sigterm.is_set() else status
    finally:
        restore()
