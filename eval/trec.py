"""TREC run and qrels files.

A run file has six whitespace-separated columns, ``qid Q0 docid rank score tag``; a qrels
file has four, ``qid 0 docid grade``. Runs are written with strictly decreasing scores
(see ``eval.evaluate.strictly_decreasing``) so that any trec_eval-compatible tool ranks
them exactly as we do, whatever its tie-breaking rule.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path

from eval.evaluate import Run, strictly_decreasing

PathLike = str | os.PathLike[str]


class TrecFormatError(ValueError):
    """A malformed line in a run or qrels file; the message names file, line and field."""

    def __init__(self, path: PathLike, line_no: int, field: str, problem: str) -> None:
        super().__init__(f"{os.fspath(path)} line {line_no}: field {field!r}: {problem}")
        self.path = os.fspath(path)
        self.line_no = line_no
        self.field = field


_RUN_FIELDS = ("qid", "Q0", "docid", "rank", "score", "tag")
_QRELS_FIELDS = ("qid", "iteration", "docid", "grade")


def write_run(
    run: Mapping[str, Mapping[str, float]],
    path: PathLike,
    tag: str = "r2med-agents",
    depth: int | None = 100,
) -> None:
    """Write the top ``depth`` documents of every query (all if ``None``) as a TREC run.

    Queries are written in sorted id order. Scores use ``repr`` so they read back as the
    same floats and stay strictly decreasing.
    """
    if not tag or any(c.isspace() for c in tag):
        raise ValueError(f"tag must be a non-empty word without whitespace, got {tag!r}")
    ranked = strictly_decreasing(run)
    lines = []
    for qid in sorted(ranked):
        _check_id("query id", qid)
        docs = list(ranked[qid].items())
        for rank, (doc_id, score) in enumerate(docs[:depth], start=1):
            _check_id("doc id", doc_id)
            lines.append(f"{qid} Q0 {doc_id} {rank} {score!r} {tag}\n")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(lines)


def read_run(path: PathLike) -> Run:
    """Read a TREC run file into ``{qid: {docid: score}}``; blank lines are skipped.

    Raises ``TrecFormatError`` on the first bad line: wrong number of columns, a rank that
    is not an integer, a score that is not a finite number, or a doc listed twice.
    """
    run: Run = {}
    for line_no, fields in _lines(path, _RUN_FIELDS):
        qid, _, doc_id, rank, score_text, _ = fields
        try:
            int(rank)
        except ValueError:
            raise TrecFormatError(path, line_no, "rank", f"not an integer: {rank!r}") from None
        score = _float(path, line_no, "score", score_text)
        docs = run.setdefault(qid, {})
        if doc_id in docs:
            raise TrecFormatError(
                path, line_no, "docid", f"{doc_id!r} listed twice for query {qid!r}"
            )
        docs[doc_id] = score
    return run


def _lines(path: PathLike, names: tuple[str, ...]):
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, start=1):
            fields = line.split()
            if not fields:
                continue
            if len(fields) != len(names):
                # Name the first absent (or the first surplus) column.
                field = names[len(fields)] if len(fields) < len(names) else names[-1]
                raise TrecFormatError(
                    path,
                    line_no,
                    field,
                    f"expected {len(names)} columns ({' '.join(names)}), got {len(fields)}",
                )
            yield line_no, fields


def _float(path: PathLike, line_no: int, field: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise TrecFormatError(path, line_no, field, f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise TrecFormatError(path, line_no, field, f"not a finite number: {text!r}")
    return value


def _check_id(what: str, value: str) -> None:
    if not value or any(c.isspace() for c in value):
        raise ValueError(f"{what} {value!r} cannot be written to a TREC file (empty or spaces)")
