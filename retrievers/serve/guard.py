"""What keeps one careless or hostile client from sinking the server for the others.

* `Guard`: a pure-ASGI layer in front of the app (the HTTP API's and MCP's alike). It checks
  the bearer token (constant time) of every request, a websocket's included, and counts the
  bytes of the request body as they arrive (Content-Length and chunked alike), answering 413
  the moment the limit is passed, and 408 when the body takes longer than the read timeout,
  without buffering the rest: the connection is closed after such an answer.
* `guarded_h11`: uvicorn's h11 protocol with a deadline for a request's head (a client that
  opens a connection, or sends half a header, and waits is cut off) and a cap on open
  connections (past it the connection idle longest is closed to make room; with none idle,
  the new one is refused with a 503).
* `bind`: the listening socket, bound before uvicorn starts, so a port in use is one line;
  `started_line`: the start line's address, saying whether the token is required.

Every refusal is ``{"error": "<one line>"}`` naming the flag that sets the limit.
"""

from __future__ import annotations

import asyncio
import errno
import hmac
import ipaddress
import json
import socket
import time
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

from retrievers.bearer_token import RULE, TokenError, fault
from retrievers.serve.limits import MAX_BODY_BYTES, READ_TIMEOUT_S, SERVE_TOKEN_VARIABLE

Scope = dict[str, Any]
Message = dict[str, Any]


def error_body(message: str) -> bytes:
    return json.dumps({"error": message}).encode()


@dataclass(frozen=True)
class GuardSettings:
    max_body_bytes: int = MAX_BODY_BYTES
    read_timeout: float = READ_TIMEOUT_S
    token: str | None = None  # None: no authentication
    token_env: str = SERVE_TOKEN_VARIABLE

    def __post_init__(self) -> None:
        # a token given in code follows the environment's rule: one no header can carry
        # would refuse every client
        problem = fault(self.token) if self.token is not None else None
        if problem is not None:
            raise TokenError(f"the server's token (${self.token_env}) {problem}: a bearer "
                             f"token is {RULE}")  # fmt: skip


class Guard:
    """Token check and body limits, before FastAPI reads a byte of the body."""

    def __init__(self, app: Any, settings: GuardSettings) -> None:
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        s = self.settings
        if scope["type"] == "websocket" and s.token is not None and not _authorized(scope, s.token):
            await send({"type": "websocket.close", "code": 1008})  # HTTP 403, before any accept
            return
        if scope["type"] != "http":  # lifespan, and a websocket with the token
            await self.app(scope, receive, send)
            return
        if s.token is not None and not _authorized(scope, s.token):
            await _refuse(
                send,
                401,
                f"missing or wrong bearer token (the server's is in "
                f"${s.token_env}; send 'Authorization: Bearer <token>')",
            )
            return
        length = _content_length(scope)
        if length is not None and length > s.max_body_bytes:
            await _refuse(send, 413, _too_large(length, s.max_body_bytes))
            return
        await _GuardedRequest(self.app, s, scope, receive, send).run()


class _GuardedRequest:
    """One request: its body counted and timed as it is read; after a refusal the app's own
    answer is dropped (the client has had one)."""

    def __init__(self, app: Any, s: GuardSettings, scope: Scope, receive: Any, send: Any):
        self.app, self.s, self.scope = app, s, scope
        self._receive, self._send = receive, send
        self.received = 0
        self.deadline = time.monotonic() + s.read_timeout
        self.refused = False
        self.started = False
        self.body_done = False

    async def run(self) -> None:
        await self.app(self.scope, self.receive, self.send)

    async def receive(self) -> Message:
        if self.refused:
            return {"type": "http.disconnect"}
        if self.body_done:  # the deadline is the body's; a long search is not timed out
            return await self._receive()
        try:
            left = max(self.deadline - time.monotonic(), 0.001)
            message = await asyncio.wait_for(self._receive(), left)
        except TimeoutError:
            return await self._refuse(408, f"the request body took over {self.s.read_timeout:g} "
                                           "s to arrive (--read-timeout)")  # fmt: skip
        if message["type"] == "http.request":
            self.body_done = not message.get("more_body", False)
            self.received += len(message.get("body", b""))
            if self.received > self.s.max_body_bytes:
                return await self._refuse(
                    413,
                    _too_large(
                        self.received, self.s.max_body_bytes, more=message.get("more_body", False)
                    ),
                )
        return message

    async def _refuse(self, status: int, message: str) -> Message:
        if not self.started:  # the app has not answered yet: this is the answer
            self.refused = True
            await _refuse(self._send, status, message)
        # the app sees a client gone, stops reading and its answer goes nowhere
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        if self.refused:
            return
        self.started = True
        await self._send(message)


def _too_large(size: int, limit: int, more: bool = False) -> str:
    size_text = f"over {limit:,}" if more else f"{size:,}"
    return f"request body of {size_text} bytes; the limit is {limit:,} (--max-body-bytes)"


async def _refuse(send: Any, status: int, message: str) -> None:
    """The one-line answer, with the connection closed after it: whatever the client has not
    sent yet is never read."""
    body = error_body(message)
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})  # fmt: skip
    await send({"type": "http.response.body", "body": body})


def _authorized(scope: Scope, token: str) -> bool:
    expected = b"bearer " + token.encode()
    for name, value in scope["headers"]:
        if name == b"authorization":
            # the scheme is case-insensitive (RFC 9110); the token is compared in constant time
            given = value[:7].lower() + value[7:]
            return hmac.compare_digest(given, expected)
    return False


def _content_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length" and value.isdigit():
            return int(value)
    return None


# --- connections ------------------------------------------------------------------------------


def guarded_h11(max_connections: int, header_timeout: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol with a deadline for each request's head and a connection cap."""

    class GuardedH11(H11Protocol):
        _head_timer: asyncio.TimerHandle | None = None
        _last_active: float = 0.0

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._last_active = time.monotonic()
            if len(self.connections) > max_connections and not self._evict_idle():
                self._refuse_connection()
                return
            self._arm_head_timer()

        def data_received(self, data: bytes) -> None:
            self._last_active = time.monotonic()
            had = self.cycle
            super().data_received(data)
            if self.cycle is not had:  # a whole head arrived: a request is running
                self._cancel_head_timer()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._last_active = time.monotonic()
            if not self.transport.is_closing():  # the next request's head gets its deadline
                self._arm_head_timer()

        def connection_lost(self, exc: Exception | None) -> None:
            self._cancel_head_timer()
            super().connection_lost(exc)

        def _busy(self) -> bool:
            return self.cycle is not None and not self.cycle.response_complete

        def _idle(self) -> bool:
            return not self._busy() and not self.transport.is_closing()

        def _evict_idle(self) -> bool:
            idle = [c for c in self.connections if c is not self and c._idle()]
            if not idle:
                return False
            min(idle, key=lambda c: c._last_active).transport.close()
            return True

        def _refuse_connection(self) -> None:
            body = error_body(f"{max_connections:,} connections are open, all busy; retry "
                              "shortly (--max-connections)")  # fmt: skip
            head = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
                    b"connection: close\r\ncontent-length: %d\r\n\r\n" % len(body))  # fmt: skip
            self.transport.write(head + body)
            self.transport.close()

        def _arm_head_timer(self) -> None:
            self._cancel_head_timer()
            self._head_timer = self.loop.call_later(header_timeout, self._head_timed_out)

        def _cancel_head_timer(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timed_out(self) -> None:
            if not self._busy() and not self.transport.is_closing():
                self.transport.close()  # no answer: the client never sent a request to answer

    return GuardedH11


# --- the socket and the address ---------------------------------------------------------------


def bind(host: str, port: int, backlog: int = 2048) -> socket.socket:
    """The listening socket; a port in use or an address not ours is one line (ValueError)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]  # fmt: skip
    except socket.gaierror as e:
        raise ValueError(f"--host {host}: not an address here ({e.strerror})") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
        sock.listen(backlog)
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise ValueError(f"port {port} on {host} is already in use; choose another "
                             "with --port (0: any free one)") from None  # fmt: skip
        raise ValueError(f"cannot listen on {host}:{port} ({e.strerror}); check --host "
                         "and --port") from None  # fmt: skip
    sock.setblocking(False)
    return sock


def started_line(address: str, token: str | None, token_env: str) -> str:
    """The start line's tail after the address: whether clients need the token (never it)."""
    if token is None:
        return address
    return f"{address} (every endpoint requires the bearer token in ${token_env})"


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name: it may resolve to anything
        return False
