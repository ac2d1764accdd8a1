"""The retriever as MCP tools ``search`` and ``read``, served with the official SDK (``mcp``).

    python -m retrievers.serve --dataset demo --retriever bm25 --mcp             # stdio
    python -m retrievers.serve --dataset demo --retriever bm25 --mcp --transport http --port 8001

Any MCP client (an editor, a desktop assistant, another agent framework) gets the two tools the
tool-search agent's model is offered (agents/graphs/tool_search.py), answering as they answer
there, so an agent driven from outside sees what tool-search's model sees:

* ``search(query, k=10)``: the top k (clamped to 1..``max_k``) as JSON, each hit its id, its
  score (3 decimals) and a snippet of the text's first ``snippet_words`` words;
* ``read(doc_id)``: ``{"id", "text"}``, the text cut to ``doc_words`` words; an unknown id is a
  tool error naming it (the call fails, the session goes on).

Their descriptions are tool-search's prompt files (prompts/tool-search/search.txt, read.txt),
read through `prompts.PromptBook`: a prompt experiment changes both alike. The snippet and cut
are written again here because retrievers/ sits below agents/ (tests/project/test_layering.py);
tests/retrievers/serve/test_server_mcp.py holds them identical to tool-search's.

Searches run through the very retriever the HTTP API serves (`retrievers.base.search_all`),
one at a time in a worker thread, so the event loop keeps answering (a hybrid's fusion runs on
numba, which must not be entered from several threads at once). One task per server: an MCP
client adds one server per corpus, and the tools need no task argument.

Transports (the SDK's own): stdio, where stdout carries nothing but the protocol (the SDK
diverts stray writes to stderr while it serves; the start line and logs go to stderr), and
streamable HTTP at ``http://HOST:PORT/mcp`` (``--transport http``; with the SDK's DNS-rebinding
protection on a loopback host), behind the HTTP API's bearer token (``$R2MED_SERVE_TOKEN``)
and limits. There is no SSE transport.
"""

# No `from __future__ import annotations` here: the SDK reads the tools' signatures with
# inspect.signature(eval_str=True), which cannot see make_server's locals (the k bound in the
# schema), so the annotations must be objects, built when the tools are defined.

import argparse
import sys
from collections.abc import Mapping
from typing import Annotated, Any

import anyio
import anyio.to_thread
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import Field

from prompts import PromptBook
from retrievers.base import SearchRequest, search_all
from retrievers.results import read_result, search_result
from retrievers.serve.index import ServedIndex, package_version
from retrievers.serve.limits import (
    HEADER_TIMEOUT_S,
    KEEP_ALIVE_S,
    MAX_BODY_BYTES,
    MAX_CONNECTIONS,
    MAX_K,
    MAX_QUERY_CHARS,
    READ_TIMEOUT_S,
    SERVE_TOKEN_VARIABLE,
)

# tool-search's own defaults (agents.graphs.tool_search.DEFAULTS; the test holds them equal)
TOP_K = 10
SNIPPET_WORDS = 40
DOC_WORDS = 300
HTTP_PATH = "/mcp"
READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True,
                            open_world_hint=False)  # fmt: skip


def make_server(
    index: ServedIndex,
    *,
    top_k: int = TOP_K,
    max_k: int = MAX_K,
    snippet_words: int = SNIPPET_WORDS,
    doc_words: int = DOC_WORDS,
    max_query_chars: int = MAX_QUERY_CHARS,
    log_level: str = "WARNING",
) -> MCPServer:
    """An MCP server of one task's index: tools ``search`` and ``read`` (see the module doc)."""
    limits = {"top_k": top_k, "max_k": max_k, "snippet_words": snippet_words,
              "doc_words": doc_words, "max_query_chars": max_query_chars}  # fmt: skip
    for name, value in limits.items():
        if value < 1:
            raise ValueError(f"{name} must be at least 1, got {value}")
    if top_k > max_k:
        raise ValueError(f"top_k ({top_k}) must not exceed max_k ({max_k})")
    task, corpus, retriever = index.task.name, index.corpus, index.retriever
    book = PromptBook({}, task)
    spec = index.fingerprint.get("retriever", retriever.name)
    server: MCPServer = MCPServer(
        name="r2med-agents",
        title=f"r2med-agents retrieval: {task}",
        version=package_version(),
        instructions=f"Search and read the {len(corpus):,} documents of task {task} "
        f"(retriever {spec}).",
        log_level=log_level,  # type: ignore[arg-type]
    )
    one_at_a_time = anyio.CapacityLimiter(1)
    k_description = f"how many documents (1-{max_k}, default {top_k})"  # tool-search's words

    async def search(
        query: Annotated[str, Field(description="the search query")],
        k: Annotated[int, Field(description=k_description)] = top_k,
    ) -> str:
        text = query.strip()
        if not text:
            raise ToolError("query must be a non-empty string")
        if len(text) > max_query_chars:
            raise ToolError(f"the query is {len(text):,} characters; the limit is "
                            f"{max_query_chars:,}")  # fmt: skip
        depth = min(max(k, 1), max_k)  # as tool-search clamps it
        found = await anyio.to_thread.run_sync(
            search_all, retriever, {"q": SearchRequest(query=text)}, depth,
            limiter=one_at_a_time,
        )  # fmt: skip
        return search_result(found["q"], corpus, snippet_words)

    async def read(doc_id: Annotated[str, Field(description="a document id")]) -> str:
        doc = doc_id.strip()
        if doc not in corpus:
            raise ToolError(f"no document has id {doc!r}; read ids from your search results")
        return read_result(doc, corpus, doc_words)

    for fn in (search, read):
        server.add_tool(fn, description=book.get("tool-search", fn.__name__).render(),
                        annotations=READ_ONLY, structured_output=False)  # fmt: skip
    return server


def serve_mcp(
    args: argparse.Namespace, indexes: Mapping[str, ServedIndex], token: str | None = None
) -> int:
    """Serve the one task of ``indexes`` over ``args.transport`` until the client goes away
    (stdio) or the process is stopped (HTTP; every request must then carry ``token`` as its
    bearer token when one is given)."""
    if len(indexes) != 1:
        raise ValueError("--mcp serves one task; start one server per task")
    (index,) = indexes.values()
    server = make_server(
        index,
        max_k=getattr(args, "max_k", MAX_K),
        max_query_chars=getattr(args, "max_query_chars", MAX_QUERY_CHARS),
        snippet_words=getattr(args, "snippet_words", SNIPPET_WORDS),
        doc_words=getattr(args, "doc_words", DOC_WORDS),
    )
    what = (f"{index.task.name} ({len(index.corpus):,} documents) with "
            f"{index.fingerprint.get('retriever', index.retriever.name)}")  # fmt: skip
    if getattr(args, "transport", "stdio") == "http":
        return _serve_http(server, args, what, token)
    _announce(f"serving {what} as MCP tools search, read over stdio")
    server.run("stdio")
    return 0


def http_app(server: MCPServer, host: str, settings: Any) -> Any:
    """The ASGI app MCP over HTTP serves: the SDK's streamable-HTTP app at `HTTP_PATH`, behind
    `guard.Guard` with ``settings`` (a `guard.GuardSettings`: the token and the body limits)."""
    from retrievers.serve.guard import Guard

    return Guard(server.streamable_http_app(streamable_http_path=HTTP_PATH, host=host), settings)


def _serve_http(server: MCPServer, args: argparse.Namespace, what: str, token: str | None) -> int:
    """Streamable HTTP, on uvicorn as the HTTP API runs (so that --port 0 can be reported),
    behind the same token, body, head and connection limits as the HTTP API (`guard`)."""
    import uvicorn

    from retrievers.serve.guard import GuardSettings, bind, guarded_h11, started_line

    host = args.host
    token_env = getattr(args, "token_env", SERVE_TOKEN_VARIABLE)
    limits = GuardSettings(max_body_bytes=getattr(args, "max_body_bytes", MAX_BODY_BYTES),
                           read_timeout=getattr(args, "read_timeout", READ_TIMEOUT_S),
                           token=token, token_env=token_env)  # fmt: skip
    app = http_app(server, host, limits)
    sock = bind(host, args.port)  # a port in use: one line
    http = guarded_h11(getattr(args, "max_connections", MAX_CONNECTIONS),
                       getattr(args, "header_timeout", HEADER_TIMEOUT_S))  # fmt: skip
    keep_alive = getattr(args, "keep_alive", KEEP_ALIVE_S)
    web = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", http=http,
                                        timeout_keep_alive=keep_alive))  # fmt: skip

    async def announce() -> None:  # once it listens: the port a --port 0 server got
        while not web.started:
            if web.should_exit:
                return
            await anyio.sleep(0.05)
        bound = sock.getsockname()[1]
        address = started_line(f"http://{host}:{bound}{HTTP_PATH}", token, token_env)
        _announce(f"serving {what} as MCP tools search, read at {address}")

    async def main() -> None:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(announce)
            await web.serve(sockets=[sock])
            tasks.cancel_scope.cancel()

    anyio.run(main)
    return 0


def _announce(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
