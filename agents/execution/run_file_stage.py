"""A TREC run file as a run's first stage: `python -m agents.rerank RUN.txt --task TASK`.

Published first-stage runs (ReasonRank's ``runs/r2med_<Task>/e5-mistral-7b-instruct_top100.txt``,
any tool's ``qid Q0 docid rank score tag`` file) are reranked as a finished run folder's lists
are: the file's lists become the records of the run's first stage (``<task>/queries.jsonl``,
one per query, no agent called, no retriever built), so everything that reads run folders
(metrics.json, eval.compare, agents.trace) reads them as an agent's.

Reading is `eval.trec.read_task_run`: six columns, a finite float32 score, each (qid, docid)
once, and only ids the task has; the first bad line is refused, naming file, line and field,
before any model is called. A pair listed twice is refused as trec_eval refuses it, unless the
run says ``duplicates max``: each pair then keeps its highest score, and one warning counts
the lines folded (4 of ReasonRank's 8 R2MED e5 files repeat pairs). A query's documents are
then ordered as trec_eval orders them: score descending, ties by doc id descending
(usnistgov/trec_eval form_res_rels.c, ``comp_sim_docno``; the rank column's value is ignored,
as trec_eval ignores it), or doc id ascending with ``--ties ascending``, and the first
``--depth`` are kept (`eval.evaluate.top_k`). ``--order file`` keeps them as the file lists
them instead, as ReasonRank's loader does (``run_rank_llm.py`` L213-232): where scores tie,
which passages share a window follows the file's lines, and the first stage is scored in that
same order: where a score is not below the one listed before it (in float32, trec_eval's
precision), it is set to the next float32 below that one (`as_listed`), so every evaluator,
trec_eval's tie rule included, ranks the documents as the rerank read them.

A query the run answers but the file has no line for is missing from the first stage, as it is
to trec_eval and to ``eval.score`` on the same file: it gets no record, no stage reranks it, and
the evaluator scores it by ``--missing`` (0 by default; left out with ``present``). One warning
line names such queries before the run starts; a file that ranks none of them is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from eval.datasets import DataError, Task
from eval.evaluate import TieOrder, strictly_decreasing, top_k
from eval.records import QueryRecord
from eval.trec import RepeatedPairError, read_task_run
from eval.usage import Usage

NODE = "run-file"  # the one step of a first-stage record read from a file
EXAMPLES = 5  # missing query ids a warning quotes


@dataclass(frozen=True)
class RunFileLists:
    """What a run file gives one task: its ranked lists, cut and ordered, and what it lacks."""

    path: Path
    sha256: str  # of the bytes read: binds the run folder
    lists: dict[str, dict[str, float]]  # query id -> its top depth, in rank order
    lengths: dict[str, int]  # query id -> documents the file ranks for it (before the cut)
    missing: list[str]  # queries the run answers that the file ranks nothing for
    repeated: list[int]  # lines that repeated a (qid, docid) pair (duplicates "max")
    depth: int | None
    ties: TieOrder
    order: str = "score"  # "file": as the file lists them (`as_listed`)
    adjusted: int = 0  # scores set just below the one before them to keep the file's order


def read_run_file(
    path: Path | str,
    task: Task,
    queries: Mapping[str, str],
    depth: int | None,
    ties: TieOrder = "trec",
    duplicates: str = "refuse",
    order: str = "score",
) -> RunFileLists:
    """The lists the TREC run file at ``path`` gives ``queries`` of ``task``; DataError (one
    line naming the file, and the line and field where one is at fault) otherwise."""
    path = Path(path)
    try:
        read = read_task_run(path, task.queries, task.corpus, task.name, duplicates)
    except RepeatedPairError as e:  # what the run may say instead
        raise DataError(f"{e}; duplicates max keeps each pair's highest score") from None
    except IsADirectoryError:
        raise DataError(f"{path}: a folder, not a TREC run file") from None
    except OSError as e:  # its own text may not say which file it is about
        raise DataError(f"{path}: cannot read ({e.strerror or e})") from None
    answered = {q: read.run[q] for q in queries if q in read.run}
    if not answered:
        raise DataError(
            f"{path}: ranks none of the {len(queries)} queries of task {task.name} this run "
            "answers" + ("" if read.run else " (an empty run file)")
        )
    adjusted = 0
    if order == "file":  # the first `depth` as listed (a pair listed twice: its first place)
        ordered = {}
        for q, docs in answered.items():
            ordered[q], moved = as_listed(dict(list(docs.items())[:depth]))
            adjusted += moved
    elif depth is None:
        ordered = strictly_decreasing(answered, ties)
    else:
        ordered = top_k(answered, depth, ties)
    return RunFileLists(
        path=path,
        sha256=read.sha256,
        lists=ordered,
        lengths={q: len(docs) for q, docs in answered.items()},
        missing=[q for q in queries if q not in read.run],
        repeated=read.repeated,
        depth=depth,
        ties=ties,
        order=order,
        adjusted=adjusted,
    )


def as_listed(docs: Mapping[str, float]) -> tuple[dict[str, float], int]:
    """``docs`` in their order with scores strictly decreasing in float32 (what trec_eval
    compares), and how many were changed: a score not below the one before it becomes the
    next float32 below that one, the smallest change that keeps the listed order under any
    tie rule. A list already strictly decreasing keeps every score."""
    out: dict[str, float] = {}
    previous: np.float32 | None = None
    moved = 0
    for doc_id, score in docs.items():
        seen = np.float32(score)
        if previous is not None and seen >= previous:
            seen = np.nextafter(previous, np.float32(-np.inf))
            score = float(seen)
            moved += 1
        out[doc_id] = score
        previous = seen
    return out, moved


def missing_line(lists: RunFileLists, task: str, queries: int, missing: str) -> str | None:
    """One line on the queries the file lacks and what they count for, or None."""
    if not lists.missing:
        return None
    shown = ", ".join(lists.missing[:EXAMPLES]) + (", ..." if len(lists.missing) > EXAMPLES else "")
    worth = "score 0" if missing == "zero" else "are left out of the means"
    return (
        f"{lists.path}: no line for {len(lists.missing)} of the {queries} queries of task "
        f"{task} ({shown}); as in trec_eval they are missing from the run, and with "
        f"--missing {missing} they {worth}"
    )


def repeated_line(lists: RunFileLists) -> str | None:
    """One line on the lines that repeated a pair and were folded into it, or None."""
    if not lists.repeated:
        return None
    n = len(lists.repeated)
    lines = f"{n} lines repeat" if n > 1 else "1 line repeats"
    return (
        f"{lists.path}: {lines} a (qid, docid) pair listed before (the first: line "
        f"{lists.repeated[0]}); each pair keeps its highest score (duplicates max)"
    )


def first_stage_records(lists: RunFileLists, queries: Mapping[str, str]) -> list[dict[str, Any]]:
    """One record per query the file ranks, shaped as `agents.execution.task_queries` writes an
    agent's, in the order of ``queries``; its one step says where the list came from."""
    kept = "all kept" if lists.depth is None else f"the first {lists.depth} kept"
    order = "trec_eval's order" if lists.ties == "trec" else "ties by doc id ascending"
    how = f"by score ({order})"
    if lists.order == "file":
        how = "as the file lists them"
        if lists.adjusted:
            how += (
                f" ({lists.adjusted} scores of the task set just below the one before them, so "
                "that they are scored in that order)"
            )
    return [
        QueryRecord(
            query_id=q,
            query=queries[q],
            ranking=[[d, s] for d, s in lists.lists[q].items()],
            usage=Usage().to_dict(),
            steps=[
                {
                    "node": NODE,
                    "note": f"{lists.lengths[q]} documents read from {lists.path} (sha256 "
                    f"{lists.sha256[:12]}), {how}, {kept}",
                }
            ],
        ).to_dict()
        for q in queries
        if q in lists.lists
    ]
