"""Every progress display of the project: the one bar factory and the live status of long steps.

`progress_bar` makes every bar (queries, BM25, corpus encoding, the dry run). In a Jupyter
kernel it is tqdm's notebook widget (`tqdm.notebook`, which needs ``ipywidgets``; without it
the plain form is used, quietly); elsewhere plain tqdm on stderr.

A long step inside a call (loading a model, evaluating a prompt, generating) says what it is
doing through `status`: a bar that hosts statuses (`live`) shows them as its postfix, one per
step in flight (``q01 prompt 1,536/2,048 tok | q02 120 generated``), redrawn at most every
`INTERVAL` seconds each. Where no bar hosts them (progress off, or no run around the call)
`status` does nothing, so it costs nothing. The host travels in a context variable, which
asyncio tasks and `asyncio.to_thread` copy: a step in a worker thread reports to the bar of
the query that started it. A step before any bar (checking a run, loading a dense model) is
a `transient` line, drawn only where it can be taken back (a terminal or a notebook), so a
refusal that ends the step is still the one line printed. Nothing here is written anywhere but
the display.
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

INTERVAL = 0.5  # seconds between two redraws of one status: no per-token printing


def in_kernel() -> bool:
    """Whether this process is a Jupyter (IPython) kernel: a kernel's shell is running, not
    merely IPython importable (a terminal IPython has a shell but no kernel)."""
    ipython = sys.modules.get("IPython")  # a kernel imported it long before any bar
    if ipython is None:
        return False
    try:
        shell = ipython.get_ipython()
    except Exception:  # a broken or partial IPython is no kernel
        return False
    return shell is not None and getattr(shell, "kernel", None) is not None


def interactive() -> bool:
    """Whether a transient line can be shown and taken back: a kernel's widget, or stderr on a
    terminal (a log or a captured stream keeps every line written to it)."""
    if in_kernel():
        return True
    stream = sys.stderr
    return stream is not None and hasattr(stream, "isatty") and stream.isatty()


@contextlib.contextmanager
def transient(text: str, shown: bool = True) -> Iterator[None]:
    """``text`` on a line of its own while the block runs, where it can be taken back after
    (`interactive`), so a refusal that ends the block is still the one line printed."""
    bar = progress_bar(desc=text, bar_format="{desc}", leave=False,
                       disable=not (shown and interactive()))  # fmt: skip
    try:
        yield
    finally:
        bar.close()


def _notebook_bar() -> Any:
    """tqdm's notebook class when its widgets can be drawn, else None."""
    try:
        import tqdm.notebook as notebook  # imports ipywidgets if it can
    except ImportError:
        return None
    # without ipywidgets tqdm leaves IProgress None, and its bars would raise at first draw
    return notebook.tqdm if getattr(notebook, "IProgress", None) is not None else None


def bar_class() -> Any:
    """The tqdm class bars are made with here: the notebook form in a kernel with ipywidgets,
    else plain tqdm."""
    if in_kernel():
        notebook = _notebook_bar()
        if notebook is not None:
            return notebook
    from tqdm import tqdm

    return tqdm


def progress_bar(iterable: Iterable[Any] | None = None, **options: Any) -> Any:
    """A tqdm bar (tqdm's own arguments), in the form this process shows: plain bars go to
    stderr; a notebook bar is a widget (its ``file`` is not used)."""
    cls = bar_class()
    from tqdm import tqdm

    if cls is tqdm:
        options.setdefault("file", sys.stderr)
    else:
        options.pop("file", None)
    return cls(iterable, **options)


class Board:
    """The statuses a bar shows as its postfix, one per step in flight, in starting order."""

    def __init__(self, bar: Any):
        self.bar = bar
        self.lines: dict[int, str] = {}
        self.lock = threading.Lock()

    def show(self, key: int, text: str | None) -> None:
        with self.lock:
            if text is None:
                self.lines.pop(key, None)
            else:
                self.lines[key] = text
            postfix = " | ".join(self.lines.values())
        # tqdm takes its own lock to draw; worker threads report here
        self.bar.set_postfix_str(postfix, refresh=True)


_HOST: contextvars.ContextVar[tuple[Board, str] | None] = contextvars.ContextVar(
    "progress_host", default=None
)
_keys = itertools.count()


@contextlib.contextmanager
def live(bar: Any, label: str = "") -> Iterator[None]:
    """Show the statuses of steps started in this context (tasks and threads it starts
    included) on ``bar``, each after ``label``; a disabled bar shows none."""
    if getattr(bar, "disable", False):
        yield
        return
    board = getattr(bar, "progress_board", None)
    if board is None:
        board = Board(bar)
        bar.progress_board = board
    token = _HOST.set((board, label))
    try:
        yield
    finally:
        _HOST.reset(token)


class Status:
    """One step's line on its host's board; `update` redraws at most every `INTERVAL`."""

    def __init__(self, board: Board | None, label: str):
        self.board = board
        self.label = label
        self.key = next(_keys)
        self.last = -INTERVAL  # the first update is drawn at once

    def update(self, text: str, force: bool = False) -> None:
        if self.board is None:
            return
        now = time.monotonic()
        if not force and now - self.last < INTERVAL:
            return
        self.last = now
        self.board.show(self.key, f"{self.label} {text}" if self.label else text)

    def close(self) -> None:
        if self.board is not None:
            self.board.show(self.key, None)
            self.board = None


@contextlib.contextmanager
def status(text: str | None = None) -> Iterator[Status]:
    """A step's status on the bar hosting this context (none: every update is a no-op);
    removed when the step ends. ``text`` is drawn at once."""
    host = _HOST.get()
    shown = Status(*host) if host is not None else Status(None, "")
    if text is not None:
        shown.update(text, force=True)
    try:
        yield shown
    finally:
        shown.close()


def hosted() -> bool:
    """Whether a bar shows this context's statuses (progress is on where it runs)."""
    return _HOST.get() is not None
