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

``GET /documents/{doc_id}?task=NAME``: one document's text. ``GET /health``: status, the
fingerprint of each task's index, the queue and what was served.

A bad request is a 4xx whose body is ``{"error": "<one line>"}``: unknown task or document (404),
a body over ``max_body_bytes`` or a query over ``max_query_chars`` (413), a field of the wrong
type or out of range (422); a full queue is 503 (retry).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from retrievers.base import SearchRequest
from retrievers.serve.batch import Batcher, Busy
from retrievers.serve.index import ServedIndex, package_version

SEARCH_R1_TOPK = 3  # retrieval_server.py's --topk default


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


def make_app(
    indexes: Mapping[str, ServedIndex],
    *,
    topk: int = SEARCH_R1_TOPK,
    max_batch: int = 64,
    max_queue: int = 1024,
    max_k: int = 1000,
    max_query_chars: int = 50_000,
    max_body_bytes: int = 4_000_000,
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
        first = exc.errors()[0] if exc.errors() else {}
        loc = first.get("loc", ())
        if first.get("type") == "json_invalid":  # its loc ends in the byte offset
            return refuse(422, f"body: invalid JSON at byte {loc[-1] if loc else 0}")
        where = ".".join(str(p) for p in loc if p != "body") or "body"
        return refuse(422, f"{where}: {first.get('msg', 'invalid request')}")

    @app.middleware("http")
    async def limit_body(request: Request, call_next: Any) -> Any:
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > max_body_bytes:
            return refuse(413, f"request body of {int(length):,} bytes; the limit is "
                               f"{max_body_bytes:,} (--max-body-bytes)")  # fmt: skip
        return await call_next(request)

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
        if n > max_queue:  # could never be queued whole: not worth a retry
            raise RefusedRequest(413, f"{n:,} queries in one request; at most {max_queue:,} "
                                      "(--max-queue)")  # fmt: skip
        if k > max_k:
            raise RefusedRequest(422, f"k {k} is over the server's limit of {max_k} (--max-k)")
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
    async def retrieve(body: RetrieveBody, task: str | None = None) -> dict[str, Any]:
        index = index_of(task)
        k = body.topk or topk
        check(len(body.queries), body.queries, k)
        rankings = await search(index, [SearchRequest(query=q) for q in body.queries], k)
        result = []
        for ranking in rankings:
            docs = [{"id": d, "contents": index.corpus[d]} for d in ranking]
            if body.return_scores:
                result.append([{"document": doc, "score": s}
                               for doc, s in zip(docs, ranking.values(), strict=True)])
            else:
                result.append(docs)
        return {"result": result}

    @app.post("/search")
    async def native(body: SearchBody) -> dict[str, Any]:
        index = index_of(body.task)
        check(len(body.requests), [t for r in body.requests for t in _texts(r)], body.k)
        requests = [SearchRequest(r.query, r.expansion, r.sparse_text, r.dense_text, r.query_id)
                    for r in body.requests]  # fmt: skip
        rankings = await search(index, requests, body.k)
        return {
            "results": [{"ids": list(r), "scores": list(r.values())} for r in rankings],
            "fingerprint": index.fingerprint,
        }

    @app.get("/documents/{doc_id}")
    async def document(doc_id: str, task: str | None = None) -> dict[str, str]:
        index = index_of(task)
        if doc_id not in index.corpus:
            raise RefusedRequest(404, f"doc_id: no document {doc_id!r} in task "
                                      f"{index.task.name}")  # fmt: skip
        return {"id": doc_id, "contents": index.corpus[doc_id]}

    return app


def _texts(item: SearchItem) -> list[str]:
    return [t for t in (item.query, item.expansion, item.sparse_text, item.dense_text) if t]
