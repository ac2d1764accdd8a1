"""The retrieval server's HTTP API (FastAPI), one process serving every task it was given.

``POST /retrieve``: Search-R1's own API, exactly as its ``search_r1/search/retrieval_server.py``
answers and its ``llm_agent/generation.py`` reads it: ``{"queries": [...], "topk": k,
"return_scores": bool}`` in; ``{"result": [[{"document": {"id", "contents"}, "score": s},
...], ...]}`` out with scores, ``{"result": [[{"id", "contents"}, ...], ...]}`` without; ``topk``
missing or 0 falls back to the server's ``--topk`` (theirs: 3). A server of several tasks takes
``?task=NAME``.

``POST /search``: the native endpoint ``--retriever remote:`` calls: ``{"task": name (optional
with one task), "k": depth, "requests": [{"query", "expansion", "sparse_text", "dense_text",
"query_id"}]}``
(every field of a `retrievers.base.SearchRequest`: what a HyDE passage, a query2doc text or a
BM25-only text adds per request) in; ``{"results": [{"ids": [...], "scores": [...]}, ...],
"fingerprint": {...}}`` out, ranked as the retriever ranks in-process: exactly for BM25, and
for dense retrievers exactly with ``--max-batch 1``; a batch pads its queries to the longest,
which moves the last bits of an embedding (more in bf16), so near-ties may swap. An empty
``queries`` or ``requests`` list is answered with an empty result, as Search-R1's server does.

``GET /documents/{doc_id}?task=NAME``: one document's text; an id of any form (a DOI's
slash, spaces, ``?``, ``#``, ``..``) is also read with ``GET /documents?id=ID&task=NAME`` or
``POST /documents`` ``{"id": ID, "task": NAME}``. ``GET /health``: status, the fingerprint of
each task's index, the queue and what was served.

A bad request is a 4xx whose body is ``{"error": "<one line>"}``: a body that is not UTF-8,
not JSON, nested too deep, or a field of the wrong type or out of range (422); unknown task,
document or path (404); a body over ``max_body_bytes``, a query over ``max_query_chars``, more
than ``max_hits`` hits asked for (queries x k) or an answer over ``max_response_bytes`` (413);
a missing or wrong token (401, `guard`); a full queue is 503 (retry).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Mapping
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field, ValidationError
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from retrievers.base import SearchRequest
from retrievers.serve.batch import Batcher, Busy
from retrievers.serve.guard import Guard, GuardSettings
from retrievers.serve.index import ServedIndex, package_version
from retrievers.serve.limits import (
    MAX_BATCH,
    MAX_BODY_BYTES,
    MAX_HITS,
    MAX_K,
    MAX_QUERY_CHARS,
    MAX_QUEUE,
    MAX_RESPONSE_BYTES,
    READ_TIMEOUT_S,
    SEARCH_R1_TOPK,
    SERVE_TOKEN_VARIABLE,
)

HIT_OVERHEAD = 48  # JSON bytes around each hit's id and text ({"document": ..., "score": ...})
Body = TypeVar("Body", bound=BaseModel)


class RefusedRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class RetrieveBody(BaseModel):
    queries: list[str]
    topk: int | None = Field(default=None, ge=0)
    return_scores: bool = False


class SearchItem(BaseModel):
    query: str
    expansion: str = ""
    sparse_text: str | None = None
    dense_text: str | None = None
    query_id: str | None = None  # a dense index never returns this document (BEIR's rule)


class SearchBody(BaseModel):
    task: str | None = None
    k: int = Field(default=100, ge=1)
    requests: list[SearchItem]


class DocumentBody(BaseModel):
    id: str
    task: str | None = None


def make_app(
    indexes: Mapping[str, ServedIndex],
    *,
    topk: int = SEARCH_R1_TOPK,
    max_batch: int = MAX_BATCH,
    max_queue: int = MAX_QUEUE,
    max_k: int = MAX_K,
    max_query_chars: int = MAX_QUERY_CHARS,
    max_body_bytes: int = MAX_BODY_BYTES,
    max_hits: int = MAX_HITS,
    max_response_bytes: int = MAX_RESPONSE_BYTES,
    read_timeout: float = READ_TIMEOUT_S,
    token: str | None = None,
    token_env: str = SERVE_TOKEN_VARIABLE,
) -> FastAPI:
    batcher = Batcher(max_batch=max_batch, max_queue=max_queue)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        worker = asyncio.create_task(batcher.run())
        await asyncio.sleep(0)  # the worker's queue exists before the first request
        try:
            yield
        finally:
            worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await worker

    app = FastAPI(title="r2med-agents retrieval server", version=package_version(),
                  lifespan=lifespan)  # fmt: skip
    app.state.batcher = batcher

    def refuse(status: int, message: str) -> JSONResponse:
        return JSONResponse({"error": message}, status_code=status)

    @app.exception_handler(RefusedRequest)
    async def refused(request: Request, exc: RefusedRequest) -> JSONResponse:
        return refuse(exc.status, str(exc))

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return refuse(422, _first_error(exc.errors()))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        # an unknown path or method: the same one-line form as every other refusal
        path = repr(request.url.path)[1:-1]  # a "%0A" in it must not break the line
        return refuse(exc.status_code, f"{request.method} {path}: {exc.detail}")

    # outermost: the token and the body's size and pace, before any of it is read
    app.add_middleware(Guard, settings=GuardSettings(max_body_bytes, read_timeout, token,
                                                     token_env))  # fmt: skip

    async def parse(request: Request, model: type[Body]) -> Body:
        """The body, as the server's own one-line refusals say what is wrong with it."""
        try:
            raw = await request.body()
        except ClientDisconnect:  # gone, or refused by the guard: this answer goes nowhere
            raise RefusedRequest(400, "the client went away") from None
        return _validated(raw, model)

    def index_of(task: str | None) -> ServedIndex:
        if task is None:
            if len(indexes) == 1:
                return next(iter(indexes.values()))
            raise RefusedRequest(422, f"task: this server holds {len(indexes)} tasks "
                                      f"({', '.join(indexes)}); name one")  # fmt: skip
        if task not in indexes:
            raise RefusedRequest(404, f"task: no task {task!r} here (it serves: "
                                      f"{', '.join(indexes)})")  # fmt: skip
        return indexes[task]

    def check(n: int, texts: list[str], k: int) -> None:
        """Before any search: what the request may ask for."""
        if n > max_queue:  # could never be queued whole: not worth a retry
            raise RefusedRequest(413, f"{n:,} queries in one request; at most {max_queue:,} "
                                      "(--max-queue)")  # fmt: skip
        if k > max_k:
            raise RefusedRequest(422, f"k {k} is over the server's limit of {max_k} (--max-k)")
        if n * k > max_hits:  # the answer's size, and the search's work, grow with it
            raise RefusedRequest(413, f"{n:,} queries x k {k:,} = {n * k:,} hits in one "
                                      f"request; at most {max_hits:,} (--max-hits)")  # fmt: skip
        for i, text in enumerate(texts):
            if len(text) > max_query_chars:
                limit = f"the limit is {max_query_chars:,} (--max-query-chars)"
                raise RefusedRequest(413, f"query {i} is {len(text):,} characters; {limit}")

    async def search(index: ServedIndex, requests: list[SearchRequest], k: int) -> list[dict]:
        if not requests:  # Search-R1's rollout asks with none in a turn where nobody searched
            return []
        try:
            return await batcher.search(index, requests, k)
        except Busy as e:
            raise RefusedRequest(503, str(e)) from None

    def answer(content: dict[str, Any], size: int) -> JSONResponse:
        """``content`` as JSON unless its estimated ``size`` is over the limit: the refusal
        comes before the answer is serialized (serialising it is what takes the memory)."""
        if size > max_response_bytes:
            raise RefusedRequest(413, f"the answer would be about {size:,} bytes; the limit is "
                                      f"{max_response_bytes:,} (--max-response-bytes); ask "
                                      "for fewer queries or a smaller k")  # fmt: skip
        return JSONResponse(content)  # no jsonable_encoder walk: it is JSON already

    @app.get("/health")
    async def health() -> dict[str, Any]:
        stats = batcher.stats
        return {
            "status": "ok",
            "version": package_version(),
            "tasks": {name: index.fingerprint for name, index in indexes.items()},
            "documents": {name: len(index.corpus) for name, index in indexes.items()},
            "queue": {"max_batch": batcher.max_batch, "max_queue": batcher.max_queue},
            "served": {"queries": stats.queries, "batches": stats.batches,
                       "largest_batch": stats.largest},
        }  # fmt: skip

    @app.post("/retrieve")
    async def retrieve(request: Request, task: str | None = None) -> JSONResponse:
        body = await parse(request, RetrieveBody)
        index = index_of(task)
        k = body.topk or topk
        check(len(body.queries), body.queries, k)
        rankings = await search(index, [SearchRequest(query=q) for q in body.queries], k)
        size = sum(len(d) + len(index.corpus[d]) + HIT_OVERHEAD for r in rankings for d in r)
        result = []
        for ranking in rankings:
            docs = [{"id": d, "contents": index.corpus[d]} for d in ranking]
            if body.return_scores:
                result.append(
                    [
                        {"document": doc, "score": s}
                        for doc, s in zip(docs, ranking.values(), strict=True)
                    ]
                )
            else:
                result.append(docs)
        return answer({"result": result}, size)

    @app.post("/search")
    async def native(request: Request) -> JSONResponse:
        body = await parse(request, SearchBody)
        index = index_of(body.task)
        check(len(body.requests), [t for r in body.requests for t in _texts(r)], body.k)
        requests = [SearchRequest(r.query, r.expansion, r.sparse_text, r.dense_text, r.query_id)
                    for r in body.requests]  # fmt: skip
        rankings = await search(index, requests, body.k)
        size = sum(len(d) + 32 for r in rankings for d in r)  # an id, quoted, and a score
        return answer({
            "results": [{"ids": list(r), "scores": list(r.values())} for r in rankings],
            "fingerprint": index.fingerprint,
        }, size)  # fmt: skip

    def document(doc_id: str, task: str | None) -> dict[str, str]:
        index = index_of(task)
        if doc_id not in index.corpus:
            raise RefusedRequest(404, f"doc_id: no document {doc_id!r} in task "
                                      f"{index.task.name}")  # fmt: skip
        return {"id": doc_id, "contents": index.corpus[doc_id]}

    # An id may hold anything: a DOI's "/", spaces, "?", "#", "..". The path form takes any
    # id whose percent-encoding survives the client's URL handling; the query and POST forms
    # take every id (a client normalises "/../" out of a path, never out of a query or body).
    @app.get("/documents")
    async def document_by_query(id: str, task: str | None = None) -> dict[str, str]:
        return document(id, task)

    @app.post("/documents")
    async def document_by_body(request: Request) -> dict[str, str]:
        body = await parse(request, DocumentBody)
        return document(body.id, body.task)

    @app.get("/documents/{doc_id:path}")
    async def document_by_path(doc_id: str, task: str | None = None) -> dict[str, str]:
        return document(doc_id, task)

    return app


def _validated(raw: bytes, model: type[Body]) -> Body:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        where = f"byte {e.start} is {raw[e.start]:#04x}"
        raise RefusedRequest(422, f"body: not UTF-8 ({where})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        at = len(text[: e.pos].encode())  # json counts characters; a client counts bytes
        raise RefusedRequest(422, f"body: invalid JSON at byte {at}") from None
    except RecursionError:
        raise RefusedRequest(422, "body: JSON nested too deeply") from None
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise RefusedRequest(422, _first_error(e.errors())) from None
    except RecursionError:  # nesting where a flat value belongs
        raise RefusedRequest(422, "body: JSON nested too deeply") from None


def _first_error(errors: Any) -> str:
    first = errors[0] if errors else {}
    loc = first.get("loc", ())
    where = ".".join(str(p) for p in loc if p != "body") or "body"
    msg = " ".join(str(first.get("msg", "invalid request")).split())  # one line
    return f"{where}: {msg}"


def _texts(item: SearchItem) -> list[str]:
    return [t for t in (item.query, item.expansion, item.sparse_text, item.dense_text) if t]
