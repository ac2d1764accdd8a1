"""Running the library's coroutines from synchronous code, wherever that code runs.

A Jupyter kernel runs an event loop in its main thread, where ``asyncio.run`` cannot be
called; a script or a command line runs none; a script's worker threads run none each.
`run_sync` runs a coroutine to its end in every case:

* in the main thread with no loop running (the command lines, a plain script): with
  ``asyncio.run``, so Ctrl-C and SIGTERM reach the run as the command lines expect;
* anywhere else (a notebook cell, a worker thread), and everywhere once that has happened: on
  the library's one background loop, the caller waiting. Calls from several threads at once
  share that loop.

litellm binds its HTTP clients and its logging worker to the loop they started on, and hands a
closed client out again on the same loop ("the client has been closed"). So a process uses one
loop at a time, and clients are closed where their loop ends: after ``asyncio.run``'s
coroutine, and the background loop's at the process's exit.

An exception raised in the waiting caller (a kernel's interrupt, KeyboardInterrupt) cancels the
coroutine, waits for it to unwind (every finished query is on disk by then), and is raised.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import sys
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

# How long an interrupted coroutine gets to unwind before the interrupt is raised anyway.
UNWIND_S = 30.0
CLOSE_AT_EXIT_S = 5.0
WAIT_SLICE_S = 0.2

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """``coro``'s result, whether or not an event loop runs in this thread."""
    # decided outside any `except` block: one active there would become the __context__ of
    # every exception the run raises, and hide their causes (an unreadable reply's)
    main = threading.current_thread() is threading.main_thread()
    if main and _loop is None and not _loop_running():
        return asyncio.run(_then_close_clients(coro))
    started, finished = threading.Event(), threading.Event()

    async def tracked() -> T:
        started.set()
        try:
            return await coro
        finally:
            finished.set()

    future = asyncio.run_coroutine_threadsafe(tracked(), background_loop())
    try:
        while True:  # in slices: a signal's handler (Ctrl-C, a kernel's interrupt) runs between
            try:
                return future.result(WAIT_SLICE_S)
            except concurrent.futures.TimeoutError:
                continue
    except BaseException:
        if not future.done():  # interrupted while waiting: stop the coroutine, let it unwind
            future.cancel()
            if started.is_set():
                finished.wait(UNWIND_S)
        raise


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


async def _then_close_clients(coro: Coroutine[Any, Any, T]) -> T:
    try:
        return await coro
    finally:
        if _loop is None:  # litellm's clients are this loop's alone, and it ends here
            await close_llm_clients()


async def close_llm_clients() -> None:
    """Close the HTTP clients litellm opened, if a call loaded it: a process then ends
    without "Unclosed client session" warnings."""
    if "litellm" in sys.modules:
        from agents.llm.client import close_clients

        await close_clients()


def background_loop() -> asyncio.AbstractEventLoop:
    """The library's event loop, running in a daemon thread from its first use on."""
    global _loop
    with _lock:
        if _loop is None:
            _loop = asyncio.new_event_loop()
            threading.Thread(target=_serve, args=(_loop,), name="agents-loop", daemon=True).start()
            atexit.register(_close_at_exit, _loop)
        return _loop


def _serve(loop: asyncio.AbstractEventLoop) -> None:
    while True:
        try:
            loop.run_forever()
            return  # stopped at exit
        except BaseException:  # noqa: S112  KeyboardInterrupt/SystemExit out of a task: the
            continue  # task's caller has it (run_sync raises it); the loop serves on


def _close_at_exit(loop: asyncio.AbstractEventLoop) -> None:
    """Close the background loop's clients, end its tasks (litellm's logging worker among
    them) and stop it, so that the process exits without warnings about either."""
    if loop.is_running():
        future = asyncio.run_coroutine_threadsafe(_wind_down(), loop)
        with contextlib.suppress(Exception):
            future.result(CLOSE_AT_EXIT_S)
        loop.call_soon_threadsafe(loop.stop)


async def _wind_down() -> None:
    await close_llm_clients()
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)
