"""`python -m retrievers.serve`: serve a task's retriever over HTTP, or as MCP tools over stdio.

    python -m retrievers.serve --dataset Biology --retriever bm25 --port 8000
    python -m retrievers.serve --dataset demo --retriever dense --mcp

The dataset and retriever flags are `agents.run`'s own (same names, same checks, same
defaults), and the index is built and cached as a run builds it, in the same cache: a server
started where runs ran loads their index from disk. It prints one line once it answers, and
stops cleanly on SIGTERM or Ctrl-C.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from typing import Any

RETRIEVER_FLAGS = (
    "dataset", "retriever", "bm25_method", "k1", "b", "device", "dtype", "batch_size",
    "max_length", "instructions", "dense_family", "trust_remote_code", "ignore_identical_ids",
    "embed_api_base", "embed_batch_size", "embed_option", "fusion", "fusion_k", "timeout",
    "cache_dir",
)  # fmt: skip


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from agents.config import add_arguments

    p = argparse.ArgumentParser(
        prog="python -m retrievers.serve",
        description="Serve a task's retriever: Search-R1's POST /retrieve, GET /health and the "
        "native POST /search (HTTP), or MCP tools search and read (--mcp).",
    )
    add_arguments(p, only=RETRIEVER_FLAGS)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback)")
    p.add_argument("--port", type=_port, default=8000, help="port (0: any free one)")
    p.add_argument("--topk", type=_positive, default=3,
                   help="/retrieve's depth when a request gives none (Search-R1's default: 3)")
    p.add_argument("--max-batch", type=_positive, default=64,
                   help="queries searched together at most (1: no batching)")
    p.add_argument("--max-queue", type=_positive, default=1024,
                   help="queries waiting at most; past it requests get 503")
    p.add_argument("--max-k", type=_positive, default=1000, help="the deepest search allowed")
    p.add_argument("--max-query-chars", type=_positive, default=50_000,
                   help="the longest query text allowed")
    p.add_argument("--max-body-bytes", type=_positive, default=4_000_000,
                   help="the largest request body allowed")
    p.add_argument("--mcp", action="store_true", help="serve MCP tools instead of HTTP")
    p.add_argument("--transport", choices=("stdio", "http"), default="stdio",
                   help="--mcp: over stdio (default) or streamable HTTP at --host/--port")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    return p.parse_args(argv)


def _positive(text: str) -> int:
    from eval.argtypes import positive_int

    return positive_int(text)


def _port(text: str) -> int:
    from eval.argtypes import CheckError, non_negative_int

    port = non_negative_int(text)
    if port > 65535:
        raise CheckError(f"must be a port number 0..65535, got {text!r}")
    return port


def build(args: argparse.Namespace) -> dict[str, Any]:
    """The indexes the flags describe, built (or read from the cache) as agents.run does."""
    from agents.config import from_settings, settings_from_args
    from agents.pipeline import embedding_transport
    from eval.datasets import default_cache_dir, load_tasks
    from eval.files import writable_folder
    from retrievers.serve.index import build_indexes

    config = from_settings(settings_from_args(args))
    if any(part.kind == "remote" for part in config.retriever.parts):
        raise ValueError(f"--retriever {config.retriever.spec}: a server serves a local index")
    cache_dir = writable_folder(config.cache_dir or default_cache_dir(), "--cache-dir")
    tasks = load_tasks(config.dataset, cache_dir)
    return build_indexes(config.retriever, tasks, cache_dir, not args.quiet,
                         embedding_transport(config))  # fmt: skip


def serve_http(args: argparse.Namespace, indexes: dict[str, Any]) -> int:
    import uvicorn

    from retrievers.serve.app import make_app

    app = make_app(
        indexes, topk=args.topk, max_batch=args.max_batch, max_queue=args.max_queue,
        max_k=args.max_k, max_query_chars=args.max_query_chars,
        max_body_bytes=args.max_body_bytes,
    )  # fmt: skip
    # a client holding half a request open must not keep a SIGTERM'ed server up forever
    server = uvicorn.Server(uvicorn.Config(app, host=args.host, port=args.port,
                                           log_level="warning", lifespan="on",
                                           timeout_graceful_shutdown=5))  # fmt: skip

    async def announce() -> None:  # once it listens: the port a --port 0 server got
        while not server.started:
            await asyncio.sleep(0.05)
        port = server.servers[0].sockets[0].getsockname()[1]
        names = ", ".join(f"{n} ({len(i.corpus):,} documents)" for n, i in indexes.items())
        spec = next(iter(indexes.values())).fingerprint["retriever"]
        print(f"serving {names} with {spec} at http://{args.host}:{port}", file=sys.stderr,
              flush=True)  # fmt: skip

    import asyncio

    async def main() -> None:
        await asyncio.gather(server.serve(), announce())

    # past the graceful-shutdown limit uvicorn cancels what is left and logs each with its
    # traceback; that is the limit working, not an error
    logging.getLogger("uvicorn.error").addFilter(_not_a_graceful_timeout)
    # uvicorn shuts down gracefully on SIGTERM, then raises the signal again for the handler
    # it found: this one, so that a clean stop exits 0 rather than by the signal
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    asyncio.run(main())
    return 0


def _not_a_graceful_timeout(record: logging.LogRecord) -> bool:
    exc = record.exc_info[1] if record.exc_info else None
    return not (exc is not None and "graceful shutdown" in str(exc))


def main(argv: list[str] | None = None) -> int:
    from eval.cli import command

    args = parse_args(argv)

    def body() -> int:
        indexes = build(args)
        if args.mcp:
            from retrievers.serve.mcp import serve_mcp

            return serve_mcp(args, indexes)
        return serve_http(args, indexes)

    return command(body)


if __name__ == "__main__":
    sys.exit(main())
