"""The retriever as MCP tools (retrievers/serve/mcp.py), driven by the SDK's own client.

One server process per transport, module-scoped: ``python -m retrievers.serve --dataset demo
--retriever bm25 --mcp`` over stdio, and over streamable HTTP at ``--port 0`` (the port it
reports on stderr, so there is no race for a free port and nothing to retry). Each runs one
client session that records what it saw; the tests read that record. Answers are held to an
in-process BM25 search of the same demo task formatted by tool-search's own functions, so the
MCP tools answer exactly as tool-search's tools do. The edges (k clamped, bad queries, the
one-task rule) are checked on an in-process server (``mcp.Client(server)``, no subprocess).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp_types import CallToolResult, Tool

from agents.graphs import tool_search
from eval.datasets import load_task
from prompts import PromptBook
from retrievers.base import SearchRequest
from retrievers.config import RetrieverConfig
from retrievers.search import build_retriever
from retrievers.serve import mcp as served
from retrievers.serve.index import ServedIndex, fingerprint
from tests.helpers import stop_process

REPO = Path(__file__).resolve().parents[3]
SESSION_S = 120.0  # a whole client session, server start included (a bound, not a measure)
STARTUP_S = 60.0
UNKNOWN = "no-such-doc"
QUERIES = 2  # demo queries asked: each with the default k and with k=3


@dataclass
class Local:
    """The demo task and an in-process BM25 over it, built as the server builds its own."""

    task: Any
    retriever: Any
    cache_dir: Path
    index: ServedIndex = field(init=False)

    def __post_init__(self) -> None:
        config = RetrieverConfig(spec="bm25")
        self.index = ServedIndex(self.task, self.retriever, fingerprint(self.task, config))

    def queries(self) -> list[str]:
        return list(self.task.queries.values())[:QUERIES]

    def ranking(self, query: str, k: int) -> dict[str, float]:
        return self.retriever.search(SearchRequest(query=query), k)


@dataclass
class Seen:
    """What one client session saw: the tools, every call's result, stray stdout."""

    tools: dict[str, Tool]
    searches: dict[tuple[str, int | None], CallToolResult]
    reads: dict[str, CallToolResult]
    stray: list[Exception]


@pytest.fixture(scope="module")
def local(tmp_path_factory) -> Local:
    cache_dir = tmp_path_factory.mktemp("mcp-cache")
    task = load_task("demo", cache_dir)
    retriever = build_retriever(RetrieverConfig(spec="bm25"), task, cache_dir, progress=False)
    return Local(task, retriever, cache_dir)


def server_args(local: Local, *extra: str) -> list[str]:
    return ["-m", "retrievers.serve", "--dataset", "demo", "--retriever", "bm25", "--mcp",
            "--cache-dir", str(local.cache_dir), "--quiet", *extra]  # fmt: skip


async def session(target: Any, queries: list[str]) -> Seen:
    """List the tools, search each query (default k, then k=3), read each top hit and an
    unknown id; a non-protocol line on the server's stdout reaches the handler as an error."""
    stray: list[Exception] = []

    async def handler(message: Any) -> None:
        if isinstance(message, Exception):
            stray.append(message)

    with anyio.fail_after(SESSION_S):
        async with Client(target, message_handler=handler) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            searches: dict[tuple[str, int | None], CallToolResult] = {}
            for query in queries:
                searches[query, None] = await client.call_tool("search", {"query": query})
                searches[query, 3] = await client.call_tool("search", {"query": query, "k": 3})
            reads: dict[str, CallToolResult] = {}
            for result in list(searches.values()):
                top = json.loads(text(result))[0]["id"]
                reads[top] = await client.call_tool("read", {"doc_id": top})
            reads[UNKNOWN] = await client.call_tool("read", {"doc_id": UNKNOWN})
    return Seen(tools, searches, reads, stray)


def text(result: CallToolResult) -> str:
    (block,) = result.content
    assert block.type == "text"
    return block.text


@pytest.fixture(scope="module")
def over_stdio(local: Local) -> Seen:
    params = StdioServerParameters(command=sys.executable, args=server_args(local),
                                   cwd=str(REPO), env=dict(os.environ))  # fmt: skip
    return asyncio.run(session(params, local.queries()))


@pytest.fixture(scope="module")
def over_http(local: Local, tmp_path_factory) -> Seen:
    log = tmp_path_factory.mktemp("mcp-http") / "stderr.txt"
    cmd = [sys.executable, *server_args(local, "--transport", "http", "--port", "0")]
    with open(log, "w") as err:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=err,
                                env={**os.environ, "R2MED_SERVE_TOKEN": ""})  # fmt: skip
    try:
        url = _announced_url(proc, log)
        yield asyncio.run(session(url, local.queries()))
    finally:
        stop_process(proc)


def _announced_url(proc: subprocess.Popen, log: Path) -> str:
    """The URL the server prints once it listens (it chose the port itself)."""
    deadline = time.monotonic() + STARTUP_S
    while True:
        found = re.search(r"at (http://127\.0\.0\.1:\d+/mcp)", log.read_text())
        if found:
            return found.group(1)
        if proc.poll() is not None:
            pytest.fail(f"the MCP server exited {proc.returncode}:\n{log.read_text()[-2000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"the MCP server did not listen within {STARTUP_S:.0f} s:\n"
                        f"{log.read_text()[-2000:]}")  # fmt: skip
        time.sleep(0.1)


@pytest.fixture(scope="module", params=["stdio", "http"])
def seen(request) -> Seen:
    return request.getfixturevalue(f"over_{request.param}")


# --- over a real transport ---------------------------------------------------------------------


@pytest.mark.slow
def test_the_tools_are_tool_searchs_with_its_prompt_files_as_descriptions(seen, local):
    assert list(seen.tools) == ["search", "read"]
    book = PromptBook({}, local.task.name)
    for name, tool in seen.tools.items():
        assert tool.description == book.get("tool-search", name).render()
        assert tool.annotations is not None and tool.annotations.read_only_hint is True
    # the arguments tool-search offers its model, with the server's bound on k
    options = {"top_k": served.TOP_K, "max_k": served.MAX_K}
    offered = {s["function"]["name"]: s["function"]["parameters"]
               for s in tool_search.tool_schemas(book, options)}  # fmt: skip
    for name, tool in seen.tools.items():
        schema = tool.input_schema
        assert schema["type"] == "object"
        assert schema["required"] == offered[name]["required"]
        shown = {p: {key: v[key] for key in ("type", "description")}
                 for p, v in schema["properties"].items()}  # fmt: skip
        assert shown == offered[name]["properties"]
    assert seen.tools["search"].input_schema["properties"]["k"]["default"] == served.TOP_K


@pytest.mark.slow
def test_search_answers_as_an_in_process_bm25_and_tool_search_format_it(seen, local):
    for (query, k), result in seen.searches.items():
        assert result.is_error is False
        ranking = local.ranking(query, k or served.TOP_K)
        hits = json.loads(text(result))
        assert [h["id"] for h in hits] == list(ranking)
        assert [h["score"] for h in hits] == [round(s, 3) for s in ranking.values()]
        expected = tool_search.search_result(ranking, local.task.corpus, served.SNIPPET_WORDS)
        assert text(result) == expected
    assert {len(json.loads(text(r))) for (_, k), r in seen.searches.items()} == {3, served.TOP_K}


@pytest.mark.slow
def test_read_gives_the_cut_document_and_an_unknown_id_is_a_tool_error(seen, local):
    known = {doc: r for doc, r in seen.reads.items() if doc != UNKNOWN}
    assert known
    for doc, result in known.items():
        assert result.is_error is False
        assert text(result) == tool_search.read_result(doc, local.task.corpus, served.DOC_WORDS)
    missing = seen.reads[UNKNOWN]
    assert missing.is_error is True
    assert repr(UNKNOWN) in text(missing) and "read ids from your search results" in text(missing)


@pytest.mark.slow
def test_stdout_carries_nothing_but_the_protocol(over_stdio):
    assert over_stdio.stray == []


# --- in process: the edges ---------------------------------------------------------------------


def call(server, name: str, arguments: dict[str, Any]) -> CallToolResult:
    async def go() -> CallToolResult:
        async with Client(server) as client:
            return await client.call_tool(name, arguments)

    return asyncio.run(go())


def test_k_is_clamped_to_one_through_max_k_as_tool_search_clamps_it(local):
    server = served.make_server(local.index, top_k=2, max_k=5)
    query = local.queries()[0]
    for k, n in ((0, 1), (-4, 1), (4, 4), (99, 5)):
        hits = json.loads(text(call(server, "search", {"query": query, "k": k})))
        assert [h["id"] for h in hits] == list(local.ranking(query, n))
    assert len(json.loads(text(call(server, "search", {"query": query})))) == 2


def test_an_empty_or_overlong_query_is_a_tool_error(local):
    server = served.make_server(local.index, max_query_chars=20)
    empty = call(server, "search", {"query": "   "})
    assert empty.is_error and "query must be a non-empty string" in text(empty)
    long = call(server, "search", {"query": "x" * 21})
    assert long.is_error and "the limit is 20" in text(long)
    wrong = call(server, "search", {"query": "fever", "k": "many"})
    assert wrong.is_error  # the SDK checks the schema: the model may correct it


def test_a_read_id_is_stripped_as_tool_search_strips_it(local):
    doc = next(iter(local.task.corpus))
    result = call(served.make_server(local.index), "read", {"doc_id": f"  {doc}\n"})
    assert text(result) == tool_search.read_result(doc, local.task.corpus, served.DOC_WORDS)


def test_one_task_per_server(local):
    args = SimpleNamespace(transport="stdio", max_k=10, max_query_chars=100)
    with pytest.raises(ValueError, match="^--mcp serves one task; start one server per task$"):
        served.serve_mcp(args, {"a": local.index, "b": local.index})
    with pytest.raises(ValueError, match="top_k"):
        served.make_server(local.index, top_k=30, max_k=20)


# --- the text helpers, against tool-search's -------------------------------------------------


def test_the_defaults_are_tool_searchs():
    defaults = tool_search.DEFAULTS
    assert (served.TOP_K, served.SNIPPET_WORDS, served.DOC_WORDS) == (
        defaults["top_k"], defaults["snippet_words"], defaults["doc_words"])  # fmt: skip


@pytest.mark.parametrize("words", [1, 3, 40, 300])
def test_snippets_and_cuts_are_tool_searchs_to_the_byte(words):
    corpus = {
        "a": "  Myocardial\tinfarction:\n\nST elevation  in II, III, aVF.  ",
        "b": 'Ünïcode — «quotes» and "escapes" \\ stay as tool-search writes them',
        "c": "",
        "d": " ".join(f"w{i}" for i in range(500)),
        "e": "one",
    }
    ranking = {"d": 12.34567, "a": 3.0, "b": 0.0004, "c": -1.2, "e": 1e-9}
    assert served.search_result(ranking, corpus, words) == tool_search.search_result(
        ranking, corpus, words
    )
    assert served.search_result({}, corpus, words) == tool_search.search_result({}, corpus, words)
    for doc in corpus:
        assert served.read_result(doc, corpus, words) == tool_search.read_result(doc, corpus, words)
