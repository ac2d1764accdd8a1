"""Run an agent graph over a task's queries: concurrently, appending one record per query.

Each finished query is appended to ``queries.jsonl`` and flushed to disk at once, so a crash
loses nothing already answered. Re-running skips queries that have a record without an error;
failed ones are tried again (their new record is appended and the last record of a query wins
when reading).

An `LLMRunError` (a missing or rejected key, a server that stopped answering) is not a query's
failure but the run's: no further query starts, the queries in flight end (they meet the same
fault at their next uncached call), their records are kept, and the error is raised to the
caller. The queries it stopped get no record, so a re-run answers them. A query's own failure is
recorded with its reason, and each distinct reason is said once on the console as it happens.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agents.graphs.context import steps_usage
from agents.llm.errors import LLMRunError
from eval.plumbing.progress import live, progress_bar
from eval.plumbing.secrets import redaction as secrets
from eval.plumbing.secrets.redaction import NO_KEY_PLACEHOLDER
from eval.records import QueryRecord, read_records, record_line
from retrievers.cluster.connect import ClusterError
from retrievers.remote import RemoteRunError

# faults of the run, not of one query (a rejected key, a retrieval server that now holds
# another index, a cluster whose workers are gone): the run stops and the query that met one
# gets no record, so a rerun asks again
RUN_ERRORS = (LLMRunError, RemoteRunError, ClusterError)


def redact(text: str) -> str:
    # the placeholder is no secret, but a server could quote it back, and it is promised to
    # reach no file
    return secrets.redact(text).replace(NO_KEY_PLACEHOLDER, "<no key>")


def ranking_of(record: Mapping[str, Any]) -> dict[str, float]:
    return {doc_id: score for doc_id, score in record["ranking"]}


async def run_one(graph: Any, query_id: str, query: str) -> dict:
    """One query through ``graph``: its record, as the run saves it (a query's own failure
    is recorded in it; a fault of the run is raised)."""
    started = time.perf_counter()
    state: dict[str, Any] = {}
    error = None
    try:
        state = await graph.ainvoke(
            {"query_id": query_id, "query": query, "steps": [], "generated": {}}
        )
    except RUN_ERRORS:
        raise
    except Exception as e:  # one query's failure must not end the run; it is recorded
        error = redact(f"{type(e).__name__}: {e}")
    steps = state.get("steps", [])
    return QueryRecord(
        query_id=query_id,
        query=query,
        ranking=[[d, s] for d, s in state.get("ranking", {}).items()],
        generated=state.get("generated", {}),
        searches=state.get("searches", 0),
        usage=steps_usage(steps).to_dict(),
        seconds=round(time.perf_counter() - started, 4),
        error=error,
        steps=steps,
    ).to_dict()


def _end_torn_line(path: Path) -> None:
    """Terminate a last line cut short by a crash, so the next record starts a line of its own.

    Otherwise the first record appended on resume would be glued to the torn line, unreadable,
    and that query answered again on every later run.
    """
    if not path.exists() or path.stat().st_size == 0:
        return
    with open(path, "rb+") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) != b"\n":
            f.write(b"\n")


async def run_queries(
    graph: Any,
    queries: Mapping[str, str],
    out: Path,
    concurrency: int = 1,
    progress: bool = True,
    label: str = "queries",
) -> dict[str, dict[str, Any]]:
    """Answer every query not yet answered in ``out``; returns all records for ``queries``."""
    done = read_records(out)
    todo = [q for q in queries if q not in done or done[q].get("error")]
    sem = asyncio.Semaphore(max(1, concurrency))
    bar = progress_bar(
        total=len(queries),
        initial=len(queries) - len(todo),
        desc=label,
        disable=not progress,
        file=sys.stderr,
        unit="q",
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    _end_torn_line(out)
    auth_errors: list[Exception] = []
    reasons: set[str] = set()
    with open(out, "a", encoding="utf-8") as f:

        async def one(query_id: str) -> None:
            async with sem:
                if auth_errors:
                    return
                try:
                    # the query's long steps (model loading, prompt, tokens generated) as the
                    # bar's postfix, one per query in flight
                    with live(bar, query_id):
                        record = await run_one(graph, query_id, queries[query_id])
                except RUN_ERRORS as e:
                    auth_errors.append(e)
                    return
            if record["error"] and record["error"] not in reasons:
                reasons.add(record["error"])  # once per reason, not once per query
                bar.write(f"{label}: query {query_id} failed: {record['error']}", file=sys.stderr)
            f.write(record_line(record))
            f.flush()
            # the next query may start while the disk syncs; the record is durable before it counts
            await asyncio.to_thread(os.fsync, f.fileno())
            done[query_id] = record
            bar.update(1)

        try:
            await asyncio.gather(*(one(q) for q in todo))
        finally:
            bar.close()
    if auth_errors:
        raise auth_errors[0]
    return {q: done[q] for q in queries if q in done}
