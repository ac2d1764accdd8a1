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

Nothing a server answers is trusted: every ``/search`` answer is checked field by field
(`rankings`), and an answer that does not hold one well-formed ranking per request, over
documents of the task's corpus, fails its query with `RemoteAnswerError` (one line naming the
server and the field): the query is recorded as failed, never as answered, so a rerun asks
again. Every answer also carries the fingerprint of the index that ranked it; one that differs
from the fingerprint the run is bound to (a server restarted over another corpus or with other
settings on the same URL) is `RemoteIndexChanged`, which stops the run: its rankings would mix
two indexes. With ``R2MED_SERVE_TOKEN`` set, every request carries ``Authorization: Bearer
<token>``, checked first by the server's own rule (`retrievers.bearer_token`: a value that is
not printable ASCII without spaces, a line end included, stops the run in one line before any
request); the token is written nowhere.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from eval.plumbing.retry import REMOTE_ATTEMPTS as ATTEMPTS
from eval.plumbing.retry import REMOTE_BACKOFF, retrying
from retrievers.bearer_token import TokenError, read_token
from retrievers.settings import SERVE_TOKEN_VARIABLE

from .base import SearchRequest

# per attempt of /health and /search when the run gives none (not the run's --timeout)
REMOTE_TIMEOUT_S = 60.0
TOKEN_VARIABLE = SERVE_TOKEN_VARIABLE  # the server's bearer token, sent when set
# what an index fingerprint is compared on, in /health and in every /search answer
FINGERPRINT_KEYS = ("corpus", "retriever", "settings", "version")


class RetrieverUnavailable(RuntimeError):
    """The retrieval server did not answer (every attempt); the message names it."""


class RemoteRefusal(ValueError):
    """The server refused the request (4xx): its one-line reason."""


class RemoteAnswerError(RuntimeError):
    """An answer the client cannot use (not JSON, a missing or malformed field, a document the
    corpus lacks): that query fails with this one line and a rerun asks again."""


class RemoteRunError(ValueError):
    """A fault of the run, not of one query: every other search would meet it too, so the run
    stops with this one line, keeping every finished query (agents/execution/task_queries.py)."""


class RemoteIndexChanged(RemoteRunError):
    """A /search answer ranked by another index than the one the run is bound to."""


class RemoteAuthError(RemoteRunError):
    """The server wants a token (401/403): the line names the variable to set."""


def _url(base: str) -> str:
    base = base.strip().rstrip("/")
    if not base.startswith(("http://", "https://")):
        raise ValueError(f"remote:{masked(base)}: expected remote:http://HOST:PORT")
    return base


def masked(url: str) -> str:
    """``url`` as messages name it: no user or password, no query string or fragment."""
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return "<an unreadable URL>"
    host = parts.netloc.rpartition("@")[2]
    return f"{parts.scheme}://{host}{parts.path}" if parts.scheme else host + parts.path


def _endpoint(base: str, path: str) -> str:
    """``base`` with ``path`` appended to its path: a query string it holds stays last."""
    parts = urlsplit(base)
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + path))


def _token() -> str | None:
    """The token to send (`retrievers.bearer_token`'s rule, the server's own); a value that
    cannot be one stops the run in one line naming the variable, before any request."""
    try:
        return read_token(TOKEN_VARIABLE)
    except TokenError as e:
        raise RemoteAuthError(str(e)) from None


def _client(timeout: float | None) -> Any:
    import logging

    import httpx

    # httpx logs every request at INFO: one line per search on a run's stderr
    logging.getLogger("httpx").setLevel(logging.WARNING)
    token = _token()
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(timeout=timeout, trust_env=False, headers=headers)


def _retrying(what: str, url: str, call: Any) -> Any:
    """``call()`` retried on connection errors, timeouts and 5xx/503 answers."""
    import httpx

    def transient(e: BaseException) -> bool:
        if isinstance(e, httpx.HTTPStatusError):
            return e.response.status_code >= 500
        return isinstance(e, httpx.TransportError)

    shown = masked(url)
    try:
        return retrying(REMOTE_BACKOFF, ATTEMPTS, transient)(call)
    except httpx.HTTPStatusError as e:
        status = e.response.status_code
        if status in (401, 403):
            raise RemoteAuthError(_auth_line(shown, what, status)) from None
        if status < 500:
            raise RemoteRefusal(f"{shown}: {what} refused: {_reason(e.response)}") from None
        raise RetrieverUnavailable(
            f"{shown}: {what} failed {ATTEMPTS} times: {_reason(e.response)}"
        ) from None
    except httpx.TransportError as e:
        raise RetrieverUnavailable(
            f"{shown}: no answer to {what} after {ATTEMPTS} attempts ({type(e).__name__}); is "
            "`python -m retrievers.serve` running there?"
        ) from None


def _auth_line(shown: str, what: str, status: int) -> str:
    if _token() is None:
        return (
            f"{shown}: {what} wants a token (HTTP {status}): set {TOKEN_VARIABLE} to the "
            "server's token"
        )
    return (
        f"{shown}: {what} refused the token in {TOKEN_VARIABLE} (HTTP {status}): set it to the "
        "server's token"
    )


def _reason(response: Any) -> str:
    try:
        payload = response.json()
        text = payload.get("error") if isinstance(payload, dict) else None
        text = str(text or response.text)[:300]
    except ValueError:
        text = f"HTTP {response.status_code}: {response.text[:200]}"
    token = os.environ.get(TOKEN_VARIABLE)  # a server quoting the request must not print it
    text = text.replace(token, f"<{TOKEN_VARIABLE}>") if token else text
    return " ".join(text.split())  # one line


def _json(response: Any, shown: str, what: str) -> Any:
    """The answer's JSON, or `RemoteAnswerError` saying what came instead (an HTML page...)."""
    try:
        return response.json()
    except ValueError:
        kind = response.headers.get("content-type", "no content type").split(";")[0]
        start = " ".join(response.text[:80].split())
        raise RemoteAnswerError(
            f"{shown}: {what} answered HTTP {response.status_code} with {kind}, not JSON "
            f"({start!r})"
        ) from None


def health(base: str, timeout: float | None = REMOTE_TIMEOUT_S) -> dict[str, Any]:
    """The server's ``/health``: its tasks' index fingerprints, retriever and version."""
    url = _url(base)
    with _client(timeout) as client:

        def get() -> dict[str, Any]:
            response = client.get(_endpoint(url, "/health"))
            response.raise_for_status()
            return _json(response, masked(url), "/health")

        return _retrying("/health", url, get)


def check_index(base: str, task: str, corpus: str, timeout: float | None = None) -> dict:
    """The fingerprint of the index the server holds for ``task``, checked to be over the
    same corpus (``corpus``: the task's corpus fingerprint); ValueError in one line if not.
    It runs before the run starts, so a server that is not there is one line too."""
    shown = f"remote:{masked(base)}"
    try:
        info = health(base, timeout or REMOTE_TIMEOUT_S)
    except (RetrieverUnavailable, RemoteAnswerError) as e:
        raise RemoteRunError(str(e)) from None
    tasks = info.get("tasks") if isinstance(info, dict) else None
    if not isinstance(tasks, dict):
        raise RemoteRunError(f"{shown}: /health holds no 'tasks' object; is it a retrieval server?")
    if task not in tasks:
        raise ValueError(
            f"{shown} serves no task {task!r} (it serves: {', '.join(tasks) or 'none'})"
        )
    served = tasks[task]
    if not isinstance(served, dict):
        raise RemoteRunError(f"{shown}: /health tasks.{task}: expected an object")
    if served.get("corpus") != corpus:
        raise ValueError(
            f"{shown} holds another corpus for task {task} (its fingerprint "
            f"{str(served.get('corpus'))[:12]}, this task's {corpus[:12]}): serve this task's "
            "folder, or point --retriever at the server that does"
        )
    return dict(served)


# --- checking an answer ----------------------------------------------------------------------


def _fingerprint(value: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value.get(key) for key in FINGERPRINT_KEYS}


def describe_fingerprint(value: Mapping[str, Any]) -> str:
    """A fingerprint in one short token: corpus (12 hex) / retriever / settings / version."""
    corpus = str(value.get("corpus"))[:12]
    return f"{corpus}/{value.get('retriever')}/{value.get('settings')}/{value.get('version')}"


def _bad(shown: str, where: str, problem: str) -> RemoteAnswerError:
    return RemoteAnswerError(f"{shown}: /search answer: {where}: {problem}")


def _type(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _ranking(
    result: Any, where: str, k: int, documents: frozenset[str] | None, shown: str
) -> dict[str, float]:
    """One request's ``{"ids", "scores"}`` as a ranking, every field checked."""
    if not isinstance(result, dict):
        raise _bad(shown, where, f"expected an object, got {_type(result)}")
    ids, scores = result.get("ids"), result.get("scores")
    for name, value in (("ids", ids), ("scores", scores)):
        if not isinstance(value, list):
            raise _bad(shown, f"{where}.{name}", f"expected a list, got {_type(value)}")
    if len(ids) != len(scores):
        raise _bad(shown, where, f"{len(ids)} ids but {len(scores)} scores")
    if len(ids) > k:
        raise _bad(shown, f"{where}.ids", f"{len(ids)} documents, more than the {k} asked for")
    ranking: dict[str, float] = {}
    for i, (doc_id, score) in enumerate(zip(ids, scores, strict=True)):
        if not isinstance(doc_id, str) or not doc_id:
            raise _bad(shown, f"{where}.ids[{i}]", f"expected a document id, got {doc_id!r}")
        if documents is not None and doc_id not in documents:
            raise _bad(shown, f"{where}.ids[{i}]", f"{doc_id!r} is no document of the corpus")
        if doc_id in ranking:
            raise _bad(shown, f"{where}.ids[{i}]", f"{doc_id!r} is ranked twice")
        if isinstance(score, bool) or not isinstance(score, int | float):
            raise _bad(shown, f"{where}.scores[{i}]", f"expected a number, got {_type(score)}")
        if not math.isfinite(score):
            raise _bad(shown, f"{where}.scores[{i}]", f"{score} is not a finite number")
        if ranking and score > scores[i - 1]:
            raise _bad(shown, f"{where}.scores[{i}]", "scores are not in decreasing order")
        ranking[doc_id] = float(score)
    return ranking


def rankings(
    payload: Any, count: int, k: int, documents: frozenset[str] | None, shown: str
) -> tuple[dict[str, Any], list[dict[str, float]]]:
    """A /search answer's fingerprint and its ``count`` rankings, every field checked;
    `RemoteAnswerError` naming the first field that is wrong."""
    if not isinstance(payload, dict):
        raise _bad(shown, "the answer", f"expected a JSON object, got {_type(payload)}")
    fingerprint = payload.get("fingerprint")
    if not isinstance(fingerprint, dict):
        raise _bad(shown, "fingerprint", f"expected an object, got {_type(fingerprint)}")
    results = payload.get("results")
    if not isinstance(results, list):
        raise _bad(shown, "results", f"expected a list, got {_type(results)}")
    if len(results) != count:
        raise _bad(shown, "results", f"{len(results)} rankings for {count} requests")
    checked = [_ranking(r, f"results[{i}]", k, documents, shown) for i, r in enumerate(results)]
    return _fingerprint(fingerprint), checked


@dataclass
class RemoteRetriever:
    """A task's index on a retrieval server, searched one request at a time.

    ``expected`` is the fingerprint the run is bound to (its /health entry for the task, as
    ``config.json`` records it under ``retriever_index``); without one the first answer's is
    taken, so one retriever never mixes two indexes. ``documents``, when given, are the task's
    corpus ids: an answer naming another document is refused."""

    base: str
    task: str
    timeout: float | None = REMOTE_TIMEOUT_S
    name: str = "remote"
    expected: dict[str, Any] | None = None
    documents: frozenset[str] | None = None
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
        shown = masked(self.base)
        body = {
            "task": self.task,
            "k": k,
            "requests": [
                {"query": r.query, "expansion": r.expansion, "sparse_text": r.sparse_text,
                 "dense_text": r.dense_text, "query_id": r.query_id}
                for r in requests.values()
            ],
        }  # fmt: skip

        def post() -> Any:
            response = self._http.post(_endpoint(self.base, "/search"), json=body)
            response.raise_for_status()
            return _json(response, shown, "/search")

        payload = _retrying("/search", self.base, post)
        fingerprint, ranked = rankings(payload, len(requests), k, self.documents, shown)
        self._check_fingerprint(fingerprint, shown)
        return dict(zip(requests, ranked, strict=True))

    def _check_fingerprint(self, fingerprint: dict[str, Any], shown: str) -> None:
        if self.expected is None:
            self.expected = fingerprint
            return
        if _fingerprint(self.expected) != fingerprint:
            raise RemoteIndexChanged(
                f"{shown}: the server now holds another index for task {self.task} (its answer's "
                f"fingerprint {describe_fingerprint(fingerprint)}, the run's "
                f"{describe_fingerprint(self.expected)}): restart it as the run began, or start "
                "a new run (--run-name)"
            )

    def close(self) -> None:
        if self._http is not None:
            self._http.close()
            self._http = None


def bind(retriever: Any, indexes: Mapping[str, Mapping[str, Any]], documents: Any) -> None:
    """Give every remote member of ``retriever`` (itself, or a hybrid's members) the
    fingerprint the run is bound to (``indexes``: member name -> its /health entry, a run's
    ``retriever_index`` for the task) and the task's corpus ids, so that every answer is
    checked against them."""
    for member in [retriever, *getattr(retriever, "members", [])]:
        if isinstance(member, RemoteRetriever):
            bound = indexes.get(member.name)
            member.expected = dict(bound) if bound is not None else member.expected
            member.documents = frozenset(documents)
