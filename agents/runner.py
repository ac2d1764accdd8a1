"""Run an agent graph over a task's queries: concurrently, appending one record per query.

Each finished query is appended to ``queries.jsonl`` and flushed to disk at once, so a crash
loses nothing already answered. Re-running skips queries that have a record without an error;
failed ones are tried again (their new record is appended and the last record of a query wins
when reading).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tqdm import tqdm

from agents.context import steps_usage
from agents.records import read_records

# Values of environment variables named like secrets are scrubbed from anything we write
# (error messages can quote a key back).
_SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD)", re.IGNORECASE)


def redact(text: str) -> str:
    for name, value in os.environ.items():
        if _SECRET_NAME.search(name) and len(value) >= 8 and value in text:
            text = text.replace(value, f"<{name}>")
    return text


def ranking_of(record: Mapping[str, Any]) -> dict[str, float]:
    return {doc_id: score for doc_id, score in record["ranking"]}


async def _run_one(graph: Any, query_id: str, query: str) -> dict:
    started = time.perf_counter()
    state: dict[str, Any] = {}
    error = None
    try:
        state = await graph.ainvoke(
            {"query_id": query_id, "query": query, "steps": [], "generated": {}}
        )
    except Exception as e:  # one query's failure must not end the run; it is recorded
        error = redact(f"{type(e).__name__}: {e}")
    steps = state.get("steps", [])
    return {
        "query_id": query_id,
        "query": query,
        "ranking": [[d, s] for d, s in state.get("ranking", {}).items()],
        "generated": state.get("generated", {}),
        "usage": steps_usage(steps).to_dict(),
        "seconds": round(time.perf_counter() - started, 4),
        "error": error,
        "steps": steps,
    }


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
    bar = tqdm(
        total=len(queries),
        initial=len(queries) - len(todo),
        desc=label,
        disable=not progress,
        file=sys.stderr,
        unit="q",
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    _end_torn_line(out)
    with open(out, "a", encoding="utf-8") as f:

        async def one(query_id: str) -> None:
            async with sem:
                record = await _run_one(graph, query_id, queries[query_id])
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
            f.flush()
            # the next query may start while the disk syncs; the record is durable before it counts
            await asyncio.to_thread(os.fsync, f.fileno())
            done[query_id] = record
            bar.update(1)

        try:
            await asyncio.gather(*(one(q) for q in todo))
        finally:
            bar.close()
    return {q: done[q] for q in queries if q in done}
