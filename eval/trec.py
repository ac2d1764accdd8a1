"""TREC run and qrels files.

A run file has six whitespace-separated columns, ``qid Q0 docid rank score tag``; a qrels
file has four, ``qid 0 docid grade``. Runs are written in the rank order the evaluator used
(``eval.evaluate.strictly_decreasing``): with ``ties="trec"`` the raw scores in trec_eval's
order, which trec_eval reads back into the same ranking; with ``ties="ascending"`` scores
nudged strictly decreasing, so that any trec_eval-compatible tool ranks them as we do,
whatever its tie-breaking rule. Ids follow ``eval.datasets.id_problem``: no whitespace, no
non-printable characters.

Reading keeps what trec_eval reads: the qid, docid and score columns. trec_eval ignores the
Q0 and rank columns ("The other fields are ignored", its description of a results file) and
orders a query's documents itself, by score descending, ties by docid descending
(usnistgov/trec_eval form_res_rels.c: ``qsort`` with ``comp_sim_docno``, which ends in
``strcmp(p2->docno, p1->docno)``): a reader that needs a ranking orders the scores it reads
with ``eval.evaluate.strictly_decreasing`` or ``top_k``, which implement that rule.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Container, Iterator, Mapping
from dataclasses import dataclass, field

import numpy as np

from eval.datasets import id_problem
from eval.evaluate import Run, TieOrder, strictly_decreasing
from eval.plumbing.decimal_text import parse_float, parse_int
from eval.plumbing.files import write_text
from eval.plumbing.quoting import quoted

PathLike = str | os.PathLike[str]


class TrecFormatError(ValueError):
    """A malformed line in a run or qrels file; the message names file, line and field."""

    def __init__(self, path: PathLike, line_no: int, field: str, problem: str) -> None:
        super().__init__(f"{os.fspath(path)} line {line_no}: field {field!r}: {problem}")
        self.path = os.fspath(path)
        self.line_no = line_no
        self.field = field


class RepeatedPairError(TrecFormatError):
    """A run file lists one (qid, docid) pair twice (trec_eval refuses it: "duplicate docs")."""


_RUN_FIELDS = ("qid", "Q0", "docid", "rank", "score", "tag")
_QRELS_FIELDS = ("qid", "iteration", "docid", "grade")


def write_run(
    run: Mapping[str, Mapping[str, float]],
    path: PathLike,
    tag: str = "r2med-agents",
    depth: int | None = 100,
    ties: TieOrder = "trec",
) -> None:
    """Write the top ``depth`` documents of every query (all if ``None``) as a TREC run.

    Queries are written in sorted id order, documents in ``strictly_decreasing(run, ties)``
    order. Scores use ``repr`` so they read back as the same floats.
    """
    if not tag or id_problem(tag):
        raise ValueError(f"tag must be a non-empty word without whitespace, got {tag!r}")
    ranked = strictly_decreasing(run, ties)
    lines = []
    for qid in sorted(ranked):
        _check_id("query id", qid)
        docs = list(ranked[qid].items())
        for rank, (doc_id, score) in enumerate(docs[:depth], start=1):
            _check_id("doc id", doc_id)
            lines.append(f"{qid} Q0 {doc_id} {rank} {score!r} {tag}\n")
    write_text(path, "".join(lines))


def read_run(path: PathLike) -> Run:
    """Read a TREC run file into ``{qid: {docid: score}}``; blank lines are skipped.

    A UTF-8 byte-order mark is skipped. Raises ``TrecFormatError`` on the first bad line: not
    UTF-8, wrong number of columns, an id ``eval.datasets.id_problem`` rejects, a rank that
    is not an integer, a score that is not a finite float32 (trec_eval's precision), or a doc
    listed twice. A file that cannot be opened raises OSError.
    """
    with open(path, "rb") as f:
        return _parse_run(path, f.read())


DUPLICATE_RULES: tuple[str, ...] = ("refuse", "max")
# how a run file's documents are ordered for a rerank: by score as trec_eval orders them, or as
# the file lists them (ReasonRank's loader, run_rank_llm.py L213-232, keeps the line order,
# which decides which passages share a window where scores tie)
RUN_FILE_ORDERS: tuple[str, ...] = ("score", "file")


@dataclass(frozen=True)
class TaskRun:
    """A run file read for one task: its lists, the sha256 of its bytes, and the lines that
    repeated a (qid, docid) pair (kept at the pair's highest score, ``duplicates="max"``)."""

    run: Run
    sha256: str
    repeated: list[int] = field(default_factory=list)


def read_task_run(
    path: PathLike,
    queries: Container[str],
    docs: Container[str],
    task: str,
    duplicates: str = "refuse",
) -> TaskRun:
    """`read_run` for a run meant for one task, with the sha256 of the file's bytes as read.

    Besides `read_run`'s refusals, the first line naming a query id that is not in
    ``queries`` (field ``qid``) or a doc id that is not in ``docs`` (field ``docid``) raises
    ``TrecFormatError``: such a line ranks something the task cannot score or show. A pair
    listed twice is refused too, as trec_eval refuses it ("duplicate docs",
    form_res_rels.c), unless ``duplicates="max"``: then each pair keeps its highest score,
    its first place in rank order (a task holds one text per doc id, so one place per id).
    The digest is of the very bytes parsed, so it names the lists returned even if the file
    is rewritten meanwhile.
    """
    if duplicates not in DUPLICATE_RULES:
        raise ValueError(f"duplicates must be one of {DUPLICATE_RULES}, got {duplicates!r}")
    with open(path, "rb") as f:
        data = f.read()
    repeated: list[int] | None = [] if duplicates == "max" else None
    run = _parse_run(path, data, queries, docs, task, repeated)
    return TaskRun(run, hashlib.sha256(data).hexdigest(), repeated or [])


def _parse_run(
    path: PathLike,
    data: bytes,
    queries: Container[str] | None = None,
    docs: Container[str] | None = None,
    task: str = "",
    repeated: list[int] | None = None,
) -> Run:
    """The run in ``data``; a repeated pair is refused, or, given a ``repeated`` list, kept
    at its highest score and its line number appended there."""
    if data.startswith(b"\xef\xbb\xbf"):
        # Without this the first qid would carry a '\ufeff' and silently match no qrels.
        data = data[3:]
    run: Run = {}
    for line_no, fields in _lines(path, _RUN_FIELDS, data):
        qid, _, doc_id, rank, score_text, _ = fields
        _id(path, line_no, "qid", qid)
        _id(path, line_no, "docid", doc_id)
        if queries is not None and qid not in queries:
            raise TrecFormatError(
                path, line_no, "qid", f"{quoted(qid)} is not a query of task {task}"
            )
        if docs is not None and doc_id not in docs:
            raise TrecFormatError(
                path, line_no, "docid", f"{quoted(doc_id)} is not in the corpus of task {task}"
            )
        try:
            parse_int(rank)
        except ValueError:
            raise TrecFormatError(
                path, line_no, "rank", f"not an integer: {quoted(rank)}"
            ) from None
        score = _float(path, line_no, "score", score_text)
        docs_of_query = run.setdefault(qid, {})
        if doc_id in docs_of_query:
            if repeated is None:
                raise RepeatedPairError(
                    path, line_no, "docid", f"{quoted(doc_id)} listed twice for query {quoted(qid)}"
                )
            repeated.append(line_no)
            score = max(score, docs_of_query[doc_id])
        docs_of_query[doc_id] = score
    return run


def _lines(path: PathLike, names: tuple[str, ...], data: bytes) -> Iterator[tuple[int, list[str]]]:
    for line_no, raw in enumerate(data.splitlines(), start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            # The column holding the bad byte: count the columns up to and including it.
            field = names[min(len(raw[: err.start + 1].split()), len(names)) - 1]
            raise TrecFormatError(
                path, line_no, field, f"not valid UTF-8 (bad byte at column {err.start + 1})"
            ) from None
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
    """A score as trec_eval's C reads it (`eval.plumbing.decimal_text`: ASCII decimals only), finite
    in float32, trec_eval's score type."""
    try:
        value = parse_float(text)
    except ValueError as e:
        raise TrecFormatError(path, line_no, field, f"{e}, got {quoted(text)}") from None
    with np.errstate(over="ignore"):
        if not np.isfinite(np.float32(value)):
            raise TrecFormatError(
                path, line_no, field, f"{quoted(text)} overflows float32, trec_eval's score type"
            )
    return value


def _id(path: PathLike, line_no: int, field: str, value: str) -> None:
    problem = id_problem(value)
    if problem:
        raise TrecFormatError(path, line_no, field, problem)


def _check_id(what: str, value: str) -> None:
    problem = id_problem(value)
    if problem:
        raise ValueError(f"{what} cannot be written to a TREC file: {problem}")
