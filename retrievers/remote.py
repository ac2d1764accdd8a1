"""``remote:http://HOST:PORT``: search a retrieval server (`python -m retrievers.serve`) instead
of a local index, so that many agent workers share one index.

Each search is one POST to the server's native ``/search`` endpoint: the request's fields in,
document ids and scores out as the server's retriever ranked them (JSON carries every float
exactly), so a run's rankings equal the local retriever's for the same spec: exactly for BM25,
and for dense with a server started with ``--max-batch 1`` (a batched encode may swap
near-ties, see retrievers/serve/app.py). The server's
``/health`` names, per task, the fingerprint of the index it holds (corpus, retriever settings,
version): `check_index` refuses a server holding another corpus for the task in one line, and
the run folder binds to that fingerprint. A server that stops answering is retried, then the
search fails with `RetrieverUnavailable` naming it: that query fails, the run goes on, and a
rerun retries it (nothing finished is lost).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .base import SearchRequest

ATTEMPTS = 4
RETRY_MIN_WAIT_S = 0.5
RETRY_MAX_WAIT_S = 8.0
DEFAULT_TIMEOUT_S = 60.0


class RetrieverUnavailable(RuntimeError):
    """The retrieval server did not answer (every attempt); the message names it."""


class RemoteRefusal(ValueError):
    """The server refused the request (4xx): its one-line reason."""


def _url(base: str) -> str:
    base = base.strip().rstrip("/")
    if not base.startswith(("http://", "https://")):
        raise ValueError(f"remote:{base}: expected remote:http://HOST:PORT")
    return base


def _client(timeout: float | None) -> Any:
    import logging

    import httpx

    # httpx logs every request at INFO: one line per search on a run's stderr
    logging.getLogger("httpx").setLevel(logging.WARNING)
    return httpx.Client(timeout=timeout, trust_env=False)


def _retrying(what: str, url: str, call: Any) -> Any:
    """``call()`` retried on connection errors, timeouts and 5xx/503 answers."""
    import httpx
    from tenacity import (
        Retrying,
        retry_if_exception,
        stop_after_attempt,
        wait_exponential,
    )

    def transient(e: BaseException) -> bool:
        if isinstance(e, httpx.HTTPStatusError):
            return e.response.status_code >= 500
        return isinstance(e, httpx.TransportError)

    try:
        for attempt in Retrying(
            stop=stop_after_attempt(ATTEMPTS),
            wait=wait_exponential(min=RETRY_MIN_WAIT_S, max=RETRY_MAX_WAIT_S),
            retry=retry_if_exception(transient),
            reraise=True,
        ):
            with attempt:
                return call()
    except httpx.HTTPStatusError as e:
        if e.response.status_code < 500:
            raise RemoteRefusal(f"{url}: {what} refused: {_reason(e.response)}") from None
        raise RetrieverUnavailable(
            f"{url}: {what} failed {ATTEMPTS} times: {_reason(e.response)}"
        ) from None
    except httpx.TransportError as e:
        raise RetrieverUnavailable(
            f"{url}: no answer to {what} after {ATTEMPTS} attempts ({type(e).__name__}); is "
            "`python -m retrievers.serve` running there?"
        ) from None


def _reason(response: Any) -> str:
    try:
        return str(response.json().get("error") or response.text)[:300]
    except ValueError:
        return f"HTTP {response.status_code}: {response.text[:200]}"


def health(base: str, timeout: float | None = DEFAULT_TIMEOUT_S) -> dict[str, Any]:
    """The server's ``/health``: its tasks' index fingerprints, retriever and version."""
    url = _url(base)
    with _client(timeout) as client:

        def get() -> dict[str, Any]:
            response = client.get(f"{url}/health")
            response.raise_for_status()
            return response.json()

        return _retrying("/health", url, get)


def check_index(base: str, task: str, corpus: str, timeout: float | None = None) -> dict:
    """The fingerprint of the index the server holds for ``task``, checked to be over the
    same corpus (``corpus``: the task's corpus fingerprint); ValueError in one line if not."""
    info = health(base, timeout or DEFAULT_TIMEOUT_S)
    tasks = info.get("tasks") or {}
    if task not in tasks:
        raise ValueError(
            f"remote:{base} serves no task {task!r} (it serves: {', '.join(tasks) or 'none'})"
        )
    served = tasks[task]
    if served.get("corpus") != corpus:
        raise ValueError(
            f"remote:{base} holds another corpus for task {task} (its fingerprint "
            f"{str(served.get('corpus'))[:12]}, this task's {corpus[:12]}): serve this task's "
            "folder, or point --retriever at the server that does"
        )
    return dict(served)


@dataclass
class RemoteRetriever:
    """A task's index on a retrieval server, searched one request at a time."""

    base: str
    task: str
    timeout: float | None = DEFAULT_TIMEOUT_S
    name: str = "remote"
    _http: Any = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.base = _url(self.base)

    def search(self, request: SearchRequest, k: int = 100) -> dict[str, float]:
        return self.search_many({"q": request}, k)["q"]

    def search_many(
        self, requests: Mapping[str, SearchRequest], k: int = 100
    ) -> dict[str, dict[str, float]]:
        if self._http is None:
            self._http = _client(self.timeout)
        body = {
            "task": self.task,
            "k": k,
            "requests": [
                {"query": r.query, "expansion": r.expansion, "sparse_text": r.sparse_text,
                 "dense_text": r.dense_text, "query_id": r.query_id}
                for r in requests.values()
            ],
        }  # fmt: skip

        def post() -> list[dict[str, Any]]:
            response = self._http.post(f"{self.base}/search", json=body)
            response.raise_for_status()
            return response.json()["results"]

        results = _retrying("/search", self.base, post)
        return {
            qid: dict(zip(r["ids"], r["scores"], strict=True))
            for qid, r in zip(requests, results, strict=True)
        }

    def close(self) -> None:
        if self._http is not None:
            self._http.close()
            self._http = None
