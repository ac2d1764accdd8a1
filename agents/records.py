"""Reading a task's ``queries.jsonl`` (one JSON record per answered query).

Kept free of heavy imports: the runner, `agents.trace` and `eval.compare` all read it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_records(path: Path, fields: tuple[str, ...] | None = None) -> dict[str, dict[str, Any]]:
    """The last record of each query in a ``queries.jsonl``; a torn last line is ignored.

    ``fields`` keeps only those keys of each record (traces can be large).
    """
    records: dict[str, dict[str, Any]] = {}
    if not path.exists():
        return records
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short by a crash: that query simply runs again
            if isinstance(record, dict) and isinstance(record.get("query_id"), str):
                record_id = record["query_id"]
                if fields is not None:
                    record = {k: record.get(k) for k in fields}
                records[record_id] = record
    return records
