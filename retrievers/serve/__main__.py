"""`python -m retrievers.serve`: serve a task's retriever over HTTP, or as MCP tools over stdio.

    python -m retrievers.serve --dataset Biology --retriever bm25 --port 8000
    python -m retrievers.serve --dataset demo --retriever dense --mcp

The dataset and retriever flags are `agents.run`'s own (same names, same checks, same
defaults: `retrievers.flags` gives both their settings), and the index is built and cached as
a run builds it, in the same cache: a server started where runs ran loads their index from
disk. It prints one line once it answers, and
stops cleanly on SIGTERM or Ctrl-C.

Every limit a client could push past is a flag with a default (docs/serving.md, "Limits and
refusals"); a bearer token, when $R2MED_SERVE_TOKEN (or the variable --token-env names) is set,
is required on every endpoint, MCP over HTTP's included; an address other than loopback is
refused without one unless --allow-unauthenticated, and with one shorter than 16 characters
(`retrievers.bearer_token`: the rule the server and `remote:` share).
"""

from __future__ import annotations

import argparse
import logging
import signal
import socket
import sys
from typing import Any

from retrievers.cluster.connect import add_ray_flag
from retrievers.serve.limits import (
    HEADER_TIMEOUT_S,
    KEEP_ALIVE_S,
    MAX_BATCH,
    MAX_BODY_BYTES,
    MAX_CONNECTIONS,
    MAX_HITS,
    MAX_K,
    MAX_QUERY_CHARS,
    MAX_QUEUE,
    MAX_RESPONSE_BYTES,
    READ_TIMEOUT_S,
    SEARCH_R1_TOPK,
    SERVE_TOKEN_VARIABLE,
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from retrievers.flags import add_retriever_arguments

    p = argparse.ArgumentParser(
        prog="python -m retrievers.serve",
        description="Serve a task's retriever: Search-R1's POST /retrieve, GET /health and the "
        "native POST /search (HTTP), or MCP tools search and read (--mcp).",
    )
    add_retriever_arguments(p)  # agents.run's own: the same names, checks and defaults
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback)")
    p.add_argument("--port", type=_port, default=8000, help="port (0: any free one)")
    p.add_argument(
        "--topk",
        type=_positive,
        default=SEARCH_R1_TOPK,
        help=f"/retrieve's depth when a request gives none (Search-R1's default: {SEARCH_R1_TOPK})",
    )
    p.add_argument(
        "--max-batch",
        type=_positive,
        default=MAX_BATCH,
        help="queries searched together at most (1: no batching)",
    )
    p.add_argument(
        "--max-queue",
        type=_positive,
        default=MAX_QUEUE,
        help="queries waiting at most; past it requests get 503",
    )
    p.add_argument("--max-k", type=_positive, default=MAX_K, help="the deepest search allowed")
    p.add_argument(
        "--max-query-chars",
        type=_positive,
        default=MAX_QUERY_CHARS,
        help="the longest query text allowed",
    )
    p.add_argument(
        "--max-body-bytes",
        type=_positive,
        default=MAX_BODY_BYTES,
        help="the largest request body allowed, counted as it arrives",
    )
    p.add_argument(
        "--max-hits",
        type=_positive,
        default=MAX_HITS,
        help=f"queries x k in one request at most (default: {MAX_HITS:,})",
    )
    p.add_argument(
        "--max-response-bytes",
        type=_positive,
        default=MAX_RESPONSE_BYTES,
        help="the largest answer (estimated before it is written)",
    )
    p.add_argument(
        "--max-connections",
        type=_positive,
        default=MAX_CONNECTIONS,
        help="open connections at most; past it the one idle longest is closed",
    )
    p.add_argument(
        "--header-timeout",
        type=_seconds,
        default=HEADER_TIMEOUT_S,
        help="seconds a connection may take to send a request's head",
    )
    p.add_argument(
        "--read-timeout",
        type=_seconds,
        default=READ_TIMEOUT_S,
        help="seconds a request's body may take to arrive",
    )
    p.add_argument(
        "--keep-alive",
        type=_seconds,
        default=KEEP_ALIVE_S,
        help="seconds an idle keep-alive connection is kept open",
    )
    p.add_argument(
        "--token-env",
        default=SERVE_TOKEN_VARIABLE,
        metavar="NAME",
        help=f"the environment variable holding the bearer token clients must send "
        f"(default: {SERVE_TOKEN_VARIABLE}; unset or empty: no token; printable ASCII with no "
        "space or line end, and 16 characters or more off loopback)",
    )
    p.add_argument(
        "--allow-unauthenticated",
        action="store_true",
        help="listen on an address other than loopback without a token",
    )
    p.add_argument("--mcp", action="store_true", help="serve MCP tools instead of HTTP")
    p.add_argument(
        "--transport",
        choices=("stdio", "http"),
        default="stdio",
        help="--mcp: over stdio (default) or streamable HTTP at --host/--port",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    add_ray_flag(p, "encode a dense retriever's corpora")
    return p.parse_args(argv)


def _seconds(text: str) -> float:
    from eval.plumbing.argtypes import CheckError

    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise CheckError(f"must be a number of seconds above 0, got {text!r}")
    return value


def _positive(text: str) -> int:
    from eval.plumbing.argtypes import positive_int

    return positive_int(text)


def _port(text: str) -> int:
    from eval.plumbing.argtypes import CheckError, non_negative_int

    port = non_negative_int(text)
    if port > 65535:
        raise CheckError(f"must be a port number 0..65535, got {text!r}")
    return port


def build(args: argparse.Namespace) -> dict[str, Any]:
    """The indexes the flags describe, built (or read from the cache) as agents.run does."""
    from eval.datasets import default_cache_dir, load_tasks
    from eval.plumbing.files import writable_folder
    from retrievers.api_embed import embedding_transport
    from retrievers.flags import TASK_DEFAULTS, retriever_from_settings, retriever_settings
    from retrievers.kinds import RETRIEVER_KINDS
    from retrievers.search import check_models
    from retrievers.serve.index import build_indexes

    keys = retriever_settings()
    given = {k: v for k, v in vars(args).items() if k in keys and v is not None}
    retriever = retriever_from_settings(given)
    if any(part.kind == "remote" for part in retriever.parts):
        raise ValueError(f"--retriever {retriever.spec}: a server serves a local index")
    if args.ray is not None and not any(
        RETRIEVER_KINDS[part.kind].encodes_on_cluster for part in retriever.parts
    ):
        raise ValueError(
            f"--ray: a cluster encodes a dense retriever's corpus; --retriever {retriever.spec} "
            "has none"
        )
    check_models(retriever)  # a model not there or not whole: one line, at once
    cache_dir = writable_folder(args.cache_dir or default_cache_dir(), "--cache-dir")
    tasks = load_tasks(args.dataset or TASK_DEFAULTS["dataset"], cache_dir)
    timeout = args.timeout or TASK_DEFAULTS["timeout"]
    return build_indexes(retriever, tasks, cache_dir, not args.quiet,
                         embedding_transport(retriever, timeout), ray=args.ray)  # fmt: skip


def token_of(args: argparse.Namespace) -> str | None:
    """The bearer token from the environment (`retrievers.bearer_token`'s rule); an address off
    loopback needs a strong one, or --allow-unauthenticated and none. The token is never a
    flag: a flag shows in `ps`."""
    from retrievers.bearer_token import check_strong, read_token
    from retrievers.serve.guard import is_loopback

    token = read_token(args.token_env)
    if is_loopback(args.host):
        return token
    if token is not None:
        check_strong(token, args.token_env, args.host)
    elif not args.allow_unauthenticated:
        raise ValueError(f"--host {args.host} is reachable from other machines and "
                         f"${args.token_env} is not set: set a token there, or pass "
                         "--allow-unauthenticated on a network you trust")  # fmt: skip
    return token


def serve_http(
    args: argparse.Namespace, indexes: dict[str, Any], sock: socket.socket, token: str | None
) -> int:
    import asyncio

    import uvicorn

    from retrievers.serve.app import make_app
    from retrievers.serve.guard import guarded_h11, started_line

    app = make_app(
        indexes, topk=args.topk, max_batch=args.max_batch, max_queue=args.max_queue,
        max_k=args.max_k, max_query_chars=args.max_query_chars,
        max_body_bytes=args.max_body_bytes, max_hits=args.max_hits,
        max_response_bytes=args.max_response_bytes, read_timeout=args.read_timeout,
        token=token, token_env=args.token_env,
    )  # fmt: skip
    _raise_fd_limit(args.max_connections)
    # a client holding half a request open must not keep a SIGTERM'ed server up forever
    config = uvicorn.Config(
        app, log_level="warning", lifespan="on", timeout_graceful_shutdown=5,
        http=guarded_h11(args.max_connections, args.header_timeout),
        timeout_keep_alive=args.keep_alive,  # type: ignore[arg-type]  (a float works)
    )  # fmt: skip
    server = uvicorn.Server(config)

    async def announce() -> None:  # once it listens: the port a --port 0 server got
        while not server.started:
            await asyncio.sleep(0.05)
        port = sock.getsockname()[1]
        names = ", ".join(f"{n} ({len(i.corpus):,} documents)" for n, i in indexes.items())
        spec = next(iter(indexes.values())).fingerprint["retriever"]
        # scripts wait for "serving ... at URL": what follows the URL is for the reader
        address = started_line(f"http://{args.host}:{port}", token, args.token_env)
        print(f"serving {names} with {spec} at {address}", file=sys.stderr, flush=True)

    async def main() -> None:
        await asyncio.gather(server.serve(sockets=[sock]), announce())

    # past the graceful-shutdown limit uvicorn cancels what is left and logs each with its
    # traceback; that is the limit working, not an error
    logging.getLogger("uvicorn.error").addFilter(_not_a_graceful_timeout)
    # uvicorn shuts down gracefully on SIGTERM, then raises the signal again for the handler
    # it found: this one, so that a clean stop exits 0 rather than by the signal
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    asyncio.run(main())
    return 0


def _raise_fd_limit(max_connections: int) -> None:
    """Room for --max-connections sockets and the files the process holds besides: the soft
    limit raised toward the hard one (so the cap, not the kernel, refuses a flood)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = max_connections + 256
    if soft != resource.RLIM_INFINITY and soft < want:
        new = want if hard == resource.RLIM_INFINITY else min(want, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
        if new < want:
            raise ValueError(f"--max-connections {max_connections}: the open-file limit is "
                             f"{hard}; lower it below {hard - 256}")  # fmt: skip


def _not_a_graceful_timeout(record: logging.LogRecord) -> bool:
    exc = record.exc_info[1] if record.exc_info else None
    return not (exc is not None and "graceful shutdown" in str(exc))


def main(argv: list[str] | None = None) -> int:
    from eval.plumbing.cli import command

    args = parse_args(argv)

    def body() -> int:
        if args.mcp:
            from retrievers.serve.mcp import serve_mcp

            # MCP over HTTP is behind the same token as the HTTP API; stdio is a local pipe
            token = token_of(args) if args.transport == "http" else None
            return serve_mcp(args, build(args), token)
        from retrievers.serve.guard import bind

        # the token and the port are checked before the index is built: a refusal is at once
        token = token_of(args)
        sock = bind(args.host, args.port)
        try:
            return serve_http(args, build(args), sock, token)
        finally:
            sock.close()

    return command(body)


if __name__ == "__main__":
    sys.exit(main())
