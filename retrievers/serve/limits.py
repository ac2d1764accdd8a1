"""The retrieval server's limits and their defaults, one definition each: the command line's
flags (retrievers.serve.__main__), the app (retrievers.serve.app), its batcher and guard, and
the MCP tools (retrievers.serve.mcp) all start from these."""

from __future__ import annotations

from retrievers.settings import MAX_QUERY_CHARS, SERVE_TOKEN_VARIABLE

__all__ = ["MAX_QUERY_CHARS", "SERVE_TOKEN_VARIABLE"]  # re-exported: limits the server applies

SEARCH_R1_TOPK = 3  # Search-R1's retrieval_server.py --topk default: /retrieve's depth
MAX_BATCH = 64  # queries searched together
MAX_QUEUE = 1024  # queries waiting; past it requests get 503
MAX_K = 1000  # the deepest search
MAX_BODY_BYTES = 4_000_000  # a request body, counted as it arrives
MAX_HITS = 100_000  # queries x k in one request: 100 queries at depth 1,000
MAX_RESPONSE_BYTES = 32_000_000  # an answer, estimated before it is written
MAX_CONNECTIONS = 512  # open connections; past it the one idle longest is closed
HEADER_TIMEOUT_S = 10.0  # a request's head
READ_TIMEOUT_S = 30.0  # a request's body
KEEP_ALIVE_S = 5.0  # an idle keep-alive connection
