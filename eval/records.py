"""A query's record, one line of a ``queries.jsonl``: its typed form and how lines are
written and read back.

The runner appends one line per answered query (`record_line`); readers stream them
(`iter_records`) or keep the last of each query (`read_records`). A record's long texts are
stored once (`pack_record`), since a trajectory repeats its prompt turn by turn. Where the
files are is `eval.runs`'s business; this module knows only the lines.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eval.json_lines import decoded, raw_lines
from eval.plumbing.quoting import quoted


@dataclass(frozen=True)
class QueryRecord:
    """What a stage keeps of one query (`agents.execution.task_queries.run_one` makes it): the final
    ranking as [doc id, score] pairs, the texts it generated, its usage and every step."""

    query_id: str
    query: str
    ranking: list[list[Any]] = field(default_factory=list)  # [[doc id, score], ...], best first
    generated: dict[str, Any] = field(default_factory=dict)  # e.g. {"passage": ...}
    searches: int = 0  # searches the agent chose to make
    usage: dict[str, Any] = field(default_factory=dict)  # `eval.usage.Usage.to_dict`
    seconds: float = 0.0
    error: str | None = None  # the query's own failure; it then has no ranking to score
    steps: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The record as its line holds it (before `pack_record`), keys in this order."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> QueryRecord:
        """A record as read (`read_records`); keys it does not know are left out."""
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known})


# Each text of a record is stored once. A string of at least SHARED_MIN characters that an
# earlier one of the same record equals is written {"$dup": i}, one that extends an earlier one
# (a trajectory growing turn by turn) {"$ext": i, "add": rest}, where i counts the record's
# long strings in the order json.dumps writes them; readers get the texts back.
SHARED_MIN = 200


def pack_record(record: Mapping[str, Any]) -> Any:
    """``record`` with its repeated long texts replaced by references (see `SHARED_MIN`)."""
    seen: list[str] = []
    index: dict[str, int] = {}

    def pack(value: Any) -> Any:
        if isinstance(value, str) and len(value) >= SHARED_MIN:
            if value in index:
                return {"$dup": index[value]}
            base = max(
                (i for i, s in enumerate(seen) if value.startswith(s)),
                key=lambda i: len(seen[i]),
                default=None,
            )
            index[value] = len(seen)
            seen.append(value)
            if base is not None:
                return {"$ext": base, "add": value[len(seen[base]) :]}
            return value
        if isinstance(value, Mapping):
            return {k: pack(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [pack(v) for v in value]
        return value

    return pack(record)


def unpack_record(record: Any) -> Any:
    """The record `pack_record` packed, its texts whole again."""
    seen: list[str] = []

    def unpack(value: Any) -> Any:
        if isinstance(value, str):
            if len(value) >= SHARED_MIN:
                seen.append(value)
            return value
        if isinstance(value, dict):
            if value.keys() == {"$dup"}:
                return seen[value["$dup"]]
            if value.keys() == {"$ext", "add"}:
                text = seen[value["$ext"]] + value["add"]
                seen.append(text)
                return text
            return {k: unpack(v) for k, v in value.items()}
        if isinstance(value, list):
            return [unpack(v) for v in value]
        return value

    return unpack(record)


def iter_records(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """(query id, record) of each line of a ``queries.jsonl``, in file order, streamed (traces
    can be large); a torn line is skipped. A later line of the same query replaces an earlier.

    A torn line (a crash cut it short; the runner ends it before appending) is not JSON, or
    ends inside a character: that query simply runs again. Any other line that is not a
    record is refused in one line naming the file, the line and the field (`record_problem`):
    a bad byte inside a line, or a line of JSON that is no record of a query.
    """
    if not path.exists():
        return
    for number, raw in raw_lines(path):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            if e.end == len(raw) and e.reason == "unexpected end of data":
                continue  # torn inside a character
            decoded(path, number, raw)  # raises, naming the line and the byte
            raise
        try:
            value = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            continue  # torn
        try:
            record = unpack_record(value)
        except (IndexError, KeyError, TypeError):
            raise ValueError(
                f"{path} line {number}: a repeated text refers to no text before it"
            ) from None
        if problem := record_problem(record):
            raise ValueError(f"{path} line {number}: {problem}")
        yield record["query_id"], record


def record_problem(record: Any) -> str | None:
    """What makes ``record`` (a line's value) no query record: ``field 'x': what``; None if
    it is one. Only the fields readers use are checked; a key this version does not know is
    left alone."""
    if not isinstance(record, dict):
        return f"not a query record (a JSON object), got {quoted(record)}"
    query_id = record.get("query_id")
    if not isinstance(query_id, str) or not query_id:
        return f"field 'query_id': expected a query id, got {quoted(query_id)}"
    for name, kinds in _FIELD_TYPES.items():
        if name in record and not isinstance(record[name], kinds):
            return f"field {name!r}: expected {_NOUNS[name]}, got {quoted(record[name])}"
    for key, value in (record.get("usage") or {}).items():
        if key in _USAGE_NUMBERS and value is not None and not _finite(value):
            return f"field 'usage.{key}': expected a number, got {quoted(value)}"
    for i, pair in enumerate(record.get("ranking") or []):
        ok = isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str)
        if not (ok and _finite(pair[1])):
            return (
                f"field 'ranking': entry {i + 1}: expected [doc id, finite score], got "
                f"{quoted(pair)}"
            )
    return None


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


# what eval.usage.Usage.from_dict reads as numbers
_USAGE_NUMBERS = (
    "calls",
    "cached_calls",
    "prompt_tokens",
    "completion_tokens",
    "cost",
    "latency_s",
)
_FIELD_TYPES: dict[str, type | tuple[type, ...]] = {
    "query": str,
    "ranking": list,
    "generated": dict,
    "usage": (dict, type(None)),
    "error": (str, type(None)),
    "steps": list,
}
_NOUNS = {
    "query": "the query's text",
    "ranking": "a list of [doc id, score]",
    "generated": "an object",
    "usage": "an object or null",
    "error": "text or null",
    "steps": "a list",
}


def read_records(path: Path, fields: tuple[str, ...] | None = None) -> dict[str, dict[str, Any]]:
    """The last record of each query in a ``queries.jsonl``; a torn last line is ignored.

    ``fields`` keeps only those keys of each record (traces can be large).
    """
    records: dict[str, dict[str, Any]] = {}
    for record_id, record in iter_records(path):
        if fields is not None:
            record = {k: record.get(k) for k in fields}
        records[record_id] = record
    return records


def record_line(record: Mapping[str, Any]) -> str:
    """One record as the line appended to ``queries.jsonl`` (the caller flushes and fsyncs),
    each of its texts stored once."""
    return json.dumps(pack_record(record), ensure_ascii=False) + "\n"
