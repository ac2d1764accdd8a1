"""Every endpoint of the retrieval server behind its bearer token, MCP's included.

The routes are read from the apps themselves (`retrievers.serve.app.make_app` and the MCP app
`retrievers.serve.mcp.http_app`), so a route added later is checked too: each method of each
route is refused (401, one line) without a token and with a wrong one, and answered (not 401)
with the right one. `/health` is not open: it names the indexes a server holds. Then real
server processes on 127.0.0.1: MCP over HTTP refuses the SDK's own client without the token and
serves it with the token, and both start lines say that the token is required (never it)."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import httpx2
import pytest
from fastapi.testclient import TestClient
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from starlette.routing import Route
from starlette.websockets import WebSocketDisconnect

from eval.datasets import load_tasks
from retrievers.config import RetrieverConfig
from retrievers.serve import mcp as served
from retrievers.serve.app import make_app
from retrievers.serve.guard import GuardSettings
from retrievers.serve.index import build_indexes
from tests.helpers import stop_process

REPO = Path(__file__).resolve().parents[3]
TOKEN = "route-test-token-0123456789abcdef"
WRONG = "route-test-token-0123456789abcdeX"
HOST = "127.0.0.1"
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {},
               "clientInfo": {"name": "route-test", "version": "0"}},
}  # fmt: skip
MCP_ACCEPT = {"Accept": "application/json, text/event-stream"}


@pytest.fixture(scope="module")
def indexes(tmp_path_factory):
    cache = tmp_path_factory.mktemp("token-cache")
    return build_indexes(RetrieverConfig(spec="bm25"), load_tasks("demo", cache), cache,
                         progress=False)  # fmt: skip


def routes(app) -> list[tuple[str, str]]:
    """(method, path) of every HTTP route of ``app``, a path parameter filled with a real id."""
    found = []
    for route in app.routes:
        assert isinstance(route, Route), route  # a mount or websocket route would need its case
        path = re.sub(r"\{[^}]+\}", "d001", route.path)
        for method in sorted(route.methods or {"GET", "POST", "DELETE"}):
            found.append((method, path))
    return found


def assert_refused(response: httpx.Response, variable: str = "$R2MED_SERVE_TOKEN") -> None:
    assert response.status_code == 401, (response.request.url, response.text)
    if response.request.method == "HEAD":  # no body to a HEAD
        return
    error = response.json()["error"]
    assert variable in error and "\n" not in error and TOKEN not in error


def body_for(path: str) -> dict:
    return {"/search": {"k": 3, "requests": [{"query": "insulin"}]},
            "/retrieve": {"queries": ["insulin"], "topk": 2},
            "/documents": {"id": "d001"}, "/mcp": INITIALIZE}.get(path, {})  # fmt: skip


def test_every_route_of_the_http_api_wants_the_token(indexes):
    app = make_app(indexes, token=TOKEN)
    listed = routes(app)
    # the app's own routes, the docs pages FastAPI adds among them: none may be open
    for want in [
        ("GET", "/health"),
        ("POST", "/search"),
        ("POST", "/retrieve"),
        ("GET", "/documents/d001"),
        ("GET", "/openapi.json"),
        ("GET", "/docs"),
    ]:
        assert want in listed
    with TestClient(app) as c:
        for method, path in listed:
            kwargs = {"json": body_for(path)} if method in ("POST", "PUT", "PATCH") else {}
            kwargs["params"] = {"id": "d001"} if path == "/documents" else {}
            assert_refused(c.request(method, path, **kwargs))
            assert_refused(c.request(method, path, headers={"Authorization": f"Bearer {WRONG}"},
                                     **kwargs))  # fmt: skip
            assert_refused(c.request(method, path, headers={"Authorization": TOKEN}, **kwargs))
            good = c.request(method, path, headers={"Authorization": f"Bearer {TOKEN}"}, **kwargs)
            assert good.status_code == 200, (method, path, good.text)
        # a path no route has: refused before the 404, so nothing about the app is told
        assert_refused(c.get("/nowhere"))
        with pytest.raises(WebSocketDisconnect):
            with c.websocket_connect("/health"):
                pass


def test_every_route_of_mcp_over_http_wants_the_token(indexes):
    (index,) = indexes.values()
    settings = GuardSettings(token=TOKEN, token_env="MY_TOKEN")
    app = served.http_app(served.make_server(index), HOST, settings)
    listed = routes(app.app)
    # the one path the docs name: no SSE endpoint, nothing else mounted
    assert listed == [(m, served.HTTP_PATH) for m in ("DELETE", "GET", "POST")]
    with TestClient(app, base_url=f"http://{HOST}:8001") as c:
        for method, path in listed:
            kwargs = {"json": INITIALIZE} if method == "POST" else {}
            assert_refused(c.request(method, path, headers=MCP_ACCEPT, **kwargs), "$MY_TOKEN")
            wrong = {**MCP_ACCEPT, "Authorization": f"Bearer {WRONG}"}
            assert_refused(c.request(method, path, headers=wrong, **kwargs), "$MY_TOKEN")
            good = {**MCP_ACCEPT, "Authorization": f"Bearer {TOKEN}"}
            answer = c.request(method, path, headers=good, **kwargs)
            assert answer.status_code != 401, (method, path, answer.text)
            if method == "POST":  # initialize: the session starts
                assert answer.status_code == 200, answer.text
                assert "serverInfo" in answer.text


# --- real processes ----------------------------------------------------------------------------


def start(tmp_path: Path, *args: str, token: str = TOKEN) -> tuple[subprocess.Popen, str, str]:
    """A server on 127.0.0.1 (port 0); its URL and start line once it listens."""
    cmd = [sys.executable, "-m", "retrievers.serve", "--dataset", "demo", "--retriever", "bm25",
           "--port", "0", "--cache-dir", str(tmp_path), "--quiet", *args]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "R2MED_SERVE_TOKEN": token}
    proc = subprocess.Popen(cmd, cwd=REPO, stderr=subprocess.PIPE, text=True, env=env)
    assert proc.stderr is not None
    deadline = time.monotonic() + 120
    for line in proc.stderr:
        found = re.search(r"serving .* at (http://127\.0\.0\.1:\d+(/mcp)?)", line)
        if found:
            threading.Thread(target=proc.stderr.read, daemon=True).start()
            return proc, found.group(1), line.strip()
        assert time.monotonic() < deadline, line
    raise AssertionError(f"the server exited {proc.wait()} before serving")


async def mcp_search(url: str, token: str | None) -> str:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            result = await client.call_tool("search", {"query": "insulin", "k": 2})
            return result.content[0].text


@pytest.mark.slow
def test_mcp_over_http_refuses_a_client_without_the_token_and_serves_one_with_it(tmp_path):
    proc, url, line = start(tmp_path, "--mcp", "--transport", "http")
    try:
        assert line.endswith(f"at {url} (every endpoint requires the bearer token in "
                             "$R2MED_SERVE_TOKEN)")  # fmt: skip
        assert TOKEN not in line
        with httpx.Client(timeout=10, trust_env=False) as c:
            assert_refused(c.post(url, json=INITIALIZE, headers=MCP_ACCEPT))
            bad = {**MCP_ACCEPT, "Authorization": f"Bearer {WRONG}"}
            assert_refused(c.post(url, json=INITIALIZE, headers=bad))
        for token in (None, WRONG):
            with pytest.raises(Exception):  # noqa: B017 (the SDK wraps the 401 its own way)
                asyncio.run(mcp_search(url, token))
        assert '"id": "d' in asyncio.run(mcp_search(url, TOKEN))
    finally:
        stop_process(proc)


@pytest.mark.slow
def test_the_http_start_line_says_the_token_is_required(tmp_path):
    proc, url, line = start(tmp_path)
    try:
        assert line.endswith(f"at {url} (every endpoint requires the bearer token in "
                             "$R2MED_SERVE_TOKEN)")  # fmt: skip
        assert TOKEN not in line
    finally:
        stop_process(proc)
