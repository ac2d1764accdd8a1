"""The one retry policy for every call over a network, with all its constants: a model API
(agents.llm.client), an embedding API (retrievers.api_embed) and a retrieval server
(retrievers.remote), on the ground floor so that every layer shares it.

A call is tried at most ``attempts`` times; what is worth another attempt is the caller's to
say (its transport's transient errors), everything else propagates at once, and the last error
is reraised. Between attempts the wait grows exponentially (`Backoff`; with full jitter for the
LLM calls, which many workers make at once), and is longer when a server's Retry-After header
asks for longer, up to `RETRY_AFTER_MAX_S`. tenacity is imported when a policy is first built,
so reading a constant here costs nothing.

No server at the address (`no_server_reason`: the connection was refused, or the host name
does not resolve) is not waited out while that server has never answered: nothing listens
there, and another attempt a few seconds later finds the same, so the caller says so at once
(`retry_refused(answered=False)`). A server that has answered before and then refuses is
restarting or dropped: that is retried like any transient failure.
"""

from __future__ import annotations

import email.utils
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# seconds an LLM or embedding call waits for its answer, per attempt (a run's --timeout): long
# enough for a reasoning answer, not a hung server
DEFAULT_TIMEOUT_S = 600.0
RETRY_AFTER_MAX_S = 600.0  # a server's Retry-After is honoured up to this long
BACKOFF = True  # tests set False: retries keep their count and order, but never back off


@dataclass(frozen=True)
class Backoff:
    """The wait after attempt n: ``multiplier * 2**(n-1)`` seconds within [min_s, max_s]; with
    ``jitter``, a uniform draw between min_s and that (tenacity's full jitter)."""

    min_s: float
    max_s: float
    multiplier: float = 1.0
    jitter: bool = False


LLM_BACKOFF = Backoff(min_s=0.0, max_s=60.0, jitter=True)  # attempts: the LLM's max_retries
EMBED_BACKOFF = Backoff(min_s=1.0, max_s=60.0)
EMBED_ATTEMPTS = 6
REMOTE_BACKOFF = Backoff(min_s=0.5, max_s=8.0)
REMOTE_ATTEMPTS = 4

Retryable = tuple[type[BaseException], ...] | Callable[[BaseException], bool]


def no_server_reason(exc: BaseException | None) -> str | None:
    """Why nothing answered, when no server is at the address: "connection refused" or
    "cannot resolve <host>", read from the error's chain (litellm and the SDKs wrap httpx's
    ConnectError, which wraps the socket's error); None for any other failure."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, ConnectionRefusedError):
            return "connection refused"
        if isinstance(exc, socket.gaierror):
            return "cannot resolve the host name"
        exc = exc.__cause__ or exc.__context__
    return None


def retry_refused(retryable: Retryable, answered: Callable[[], bool]) -> Retryable:
    """``retryable`` except for no server at the address (`no_server_reason`) while
    ``answered()`` is false: a server that never answered is not waited for."""

    def retry(exc: BaseException) -> bool:
        if isinstance(retryable, tuple):
            worth = isinstance(exc, retryable)
        else:
            worth = retryable(exc)
        return worth and (answered() or no_server_reason(exc) is None)

    return retry


def retry_after_seconds(exc: BaseException | None) -> float | None:
    """The seconds a server's Retry-After header asks for (a number or an HTTP date), if any:
    from litellm's response headers, else from the error's HTTP response (httpx, the SDKs)."""
    headers = getattr(exc, "litellm_response_headers", None)
    response = getattr(exc, "response", None)
    if not headers and response is not None:
        headers = getattr(response, "headers", None)
    value = headers.get("retry-after") if headers else None
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(str(value))
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def wait_seconds(backoff: Backoff, state: Any) -> float:
    """The wait before the next attempt (``state``: tenacity's RetryCallState): the backoff,
    or the server's Retry-After when it asks for longer."""
    from tenacity import wait_exponential, wait_random_exponential

    seconds = 0.0
    if BACKOFF:
        kind = wait_random_exponential if backoff.jitter else wait_exponential
        seconds = kind(multiplier=backoff.multiplier, min=backoff.min_s, max=backoff.max_s)(state)
    after = retry_after_seconds(state.outcome.exception() if state.outcome else None)
    return seconds if after is None else max(seconds, min(after, RETRY_AFTER_MAX_S))


def retrying(
    backoff: Backoff, attempts: int, retryable: Retryable, *, asynchronous: bool = False, **options
) -> Any:
    """tenacity's Retrying (AsyncRetrying when ``asynchronous``) for this policy: at most
    ``attempts`` tries (at least one); ``retryable``, exception types or a predicate on the
    error, says which errors are tried again; the last error is reraised. ``options``
    (before_sleep, sleep) go to tenacity."""
    from tenacity import (
        AsyncRetrying,
        Retrying,
        retry_if_exception,
        retry_if_exception_type,
        stop_after_attempt,
    )

    if isinstance(retryable, tuple):
        retry = retry_if_exception_type(retryable)
    else:
        retry = retry_if_exception(retryable)
    return (AsyncRetrying if asynchronous else Retrying)(
        stop=stop_after_attempt(max(1, attempts)),
        wait=lambda state: wait_seconds(backoff, state),
        retry=retry,
        reraise=True,
        **options,
    )
