"""What the importers share: a data file's opening lines, up to its rows, and a published
table's TSV read line by line, each line by the importer's own reader.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any


def dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def opening(table: Mapping[str, Any]) -> list[str]:
    """A data file's first lines, up to its rows: its source and its tasks."""
    return ["{", f'  "source": {dump(table["source"])},', f'  "tasks": {dump(table["tasks"])},',
            '  "rows": {']  # fmt: skip


def tsv_rows(
    path: Path,
    columns: Sequence[str],
    read_line: Callable[[list[str], str], tuple[str, dict[str, Any]]],
) -> dict[str, Any]:
    """A published table's rows from a TSV with ``columns``, each line read by ``read_line``;
    a bad header, an empty table or a row given twice refused in one line naming the line."""
    lines = path.read_text(encoding="utf-8").splitlines()
    header = lines[0].split("\t") if lines else []
    if [h.strip() for h in header] != list(columns):
        raise ValueError(
            f"{path.as_posix()}:1: header {header!r}: expected the columns "
            f"{', '.join(columns)} (tab-separated)"
        )
    rows: dict[str, Any] = {}
    first_line: dict[str, int] = {}
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        where = f"{path.as_posix()}:{number}"
        row, entry = read_line(line.split("\t"), where)
        if row in rows:
            raise ValueError(f"{where}: row {row} again (line {first_line[row]})")
        rows[row], first_line[row] = entry, number
    if not rows:
        raise ValueError(f"{path.as_posix()}: no rows below the header")
    return rows
