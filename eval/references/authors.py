"""R2MED figures methods' own authors published (``eval/references/r2med-authors.json``,
written by hand), its rows read and checked.

Each row names its repository, commit, file, line and the line's words; it is labelled by that
source ("ReasonRank repository"). Such a source may give the 8-task average alone: the row then
holds no per-task figure (`Reference.average_only`): ``show`` says "not published" where a
task's figure would be, no output prints one, and only the 8-task nDCG@10 average is read from
it. ReasonRank-32B's 42.85 is one (its README, line 30 at 06721fd).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from eval.datasets import R2MED_TASKS
from eval.references.model import (
    AUTHORS_KIND,
    AVERAGE_TOLERANCE,
    Reference,
    fraction,
    published_figure,
)

_AUTHORS_FIELDS = ("name", "repository", "commit", "path", "line", "quote", "avg", "tasks")


def authors_references(data: Mapping[str, Any], table: str) -> dict[str, Reference]:
    """The rows of a table of authors' figures, each checked: its source pinned to a commit
    and a line whose words hold the average, figures ×100 to 2 decimals, R2MED's tasks only,
    and all 8 tasks' mean agreeing with the average when every task is given."""
    metric = data["source"]["metric"]
    rows = {}
    for row, entry in data["rows"].items():
        where = f"{table}: {row}"
        if missing := [k for k in _AUTHORS_FIELDS if k not in entry]:
            raise ValueError(f"{where}: no {', '.join(missing)}")
        if not re.fullmatch(r"[0-9a-f]{40}", entry["commit"]):
            raise ValueError(f"{where}: commit {entry['commit']!r}: expected 40 hex digits")
        avg = published_figure(repr(entry["avg"]), where, "avg")
        if str(avg) not in entry["quote"]:  # the line quoted must be the figure's source
            raise ValueError(f"{where}: avg {avg} is not in its quoted line")
        figures = {t: published_figure(repr(v), where, t) for t, v in entry["tasks"].items()}
        if stray := [t for t in figures if t not in R2MED_TASKS]:
            raise ValueError(f"{where}: not R2MED's task(s): {', '.join(stray)}")
        if len(figures) == len(R2MED_TASKS):
            mean = sum(figures.values()) / len(figures)
            if abs(mean - avg) > AVERAGE_TOLERANCE:
                raise ValueError(f"{where}: avg {avg}: the 8 tasks' mean is {mean:.3f}")
        rows[row] = Reference(
            row=row,
            tasks={t: {metric: fraction(float(v))} for t, v in figures.items()},
            repository=entry["repository"],
            commit=entry["commit"],
            path=entry["path"],
            table=table,
            kind=AUTHORS_KIND,
            published_average=fraction(float(avg)),
            name=entry["name"],
            line=int(entry["line"]),
            quote=entry["quote"],
            setup=entry.get("setup", ""),
            note=entry.get("note", ""),
        )
    return rows
