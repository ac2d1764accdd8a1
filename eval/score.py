"""Score TREC run files made by any tool against a task's qrels.

    python -m eval.score --qrels qrels.jsonl run_a.trec run_b.trec [--missing zero|present]
        [--metrics NDCG@10,Recall@100,MRR] [--ties trec|ascending]

The qrels may be TREC (``qid 0 docid grade``, no header), R2MED's ``qrels.jsonl``
(``{"q_id", "p_id", "score"}``), BEIR's ``qrels/test.tsv`` (``query-id corpus-id score``,
BEIR's header line optional), or a dataset folder (R2MED or BEIR layout): its qrels as
``agents.run`` scores them, i.e. without the judgements of queries the query file lacks.
Prints one row per run file with the chosen metrics, then how each run's means were taken
(which queries were missing, how ties were ordered). A query is present when the file ranks
a document for it (``eval.evaluate``), so a run folder's ``run.trec`` scores what its
metrics.json says under the same ``--missing`` and ``--ties``. Unreadable, malformed or
empty input (a run file without a ranked document, qrels without a judgement) ends with one
line ``error: ...`` naming the file, and exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from eval.datasets import (
    R2MED_TASKS,
    DataError,
    default_cache_dir,
    load_folder,
    load_task,
    r2med_task_name,
    read_qrels,
)
from eval.evaluate import MISSING_POLICIES, TIE_ORDERS, evaluate_run
from eval.metrics import HEADLINE, k_values_of, parse_metrics
from eval.plumbing.cli import command
from eval.trec import read_run

DEFAULT_METRICS = (HEADLINE, "MAP@10", "Recall@10", "Recall@100", "P@10", "MRR")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m eval.score", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--qrels",
        required=True,
        help="TREC qrels, R2MED .jsonl, BEIR .tsv, a dataset folder (its qrels as agents.run "
        "scores them), or a task name as --dataset takes it (demo, an R2MED task)",
    )
    parser.add_argument("runs", nargs="+", help="TREC run files")
    parser.add_argument(
        "--missing",
        choices=MISSING_POLICIES,
        default="zero",
        help="score unanswered qrels queries 0 (default) or skip them as "
        "pytrec_eval/R2MED do ('present')",
    )
    parser.add_argument(
        "--metrics",
        default=",".join(DEFAULT_METRICS),
        help=f"comma-separated (default {','.join(DEFAULT_METRICS)})",
    )
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="an R2MED task's files (as agents.run's)",
    )
    parser.add_argument(
        "--ties",
        choices=TIE_ORDERS,
        default="trec",
        help="order of tied scores: trec_eval's, doc id descending (default), or doc id ascending",
    )
    args = parser.parse_args(argv)
    return command(lambda: _score(args))


def _score(args: argparse.Namespace) -> int:
    try:
        metrics = parse_metrics(args.metrics)
    except ValueError as e:
        raise ValueError(f"--metrics: {e}") from None
    k_values = k_values_of(metrics)
    qrels, notes = _qrels(args.qrels, args.cache_dir)  # all read before anything is printed
    runs = {path: _run(path) for path in args.runs}
    rows = []
    for path, run in runs.items():
        result = evaluate_run(qrels, run, k_values=k_values, missing=args.missing, ties=args.ties)
        rows.append([path, *(f"{result.mean[m]:.5f}" for m in metrics)])
        notes.append(f"{path}: {result.describe()}")
    print(_table(["run", *metrics], rows))
    print()
    print("\n".join(notes))
    return 0


def _qrels(spec: str, cache_dir: Path | None) -> tuple[dict[str, dict[str, int]], list[str]]:
    """A qrels file, or a dataset folder's or a task's qrels as the loader leaves them for a
    run (a task name as `eval.datasets.load_task` resolves it: demo, an R2MED task)."""
    path = Path(spec).expanduser()
    if path.is_dir():
        task = load_folder(path)
        return task.qrels, [f"{spec}: {note}" for note in task.notes]
    if path.is_file():
        return read_qrels(path)
    if spec.strip().lower() == "r2med" or "," in spec:
        raise DataError(f"--qrels {spec}: one task's qrels at a time (a file, folder or task)")
    if path.exists():  # not a file or folder (a device, a socket): the reader says why
        return read_qrels(path)
    if spec.strip().lower() != "demo" and r2med_task_name(spec) is None:
        raise DataError(
            f"--qrels {spec}: no such file or folder, and not a task name (demo or an R2MED "
            f"task: {', '.join(R2MED_TASKS)})"
        )
    task = load_task(spec, cache_dir if cache_dir is not None else default_cache_dir())
    return task.qrels, [f"{task.name}: {note}" for note in task.notes]


def _run(path: str) -> dict[str, dict[str, float]]:
    try:
        run = read_run(path)
    except OSError as e:
        # An OSError's own text may not say which file it is about.
        raise DataError(f"{path}: cannot read ({e.strerror or e})") from None
    if not run:  # scored, it would be a silent 0 for every query
        raise DataError(f"{path}: no ranked document (an empty run file)")
    return run


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    fmt = [f"{{:<{widths[0]}}}"] + [f"{{:>{w}}}" for w in widths[1:]]
    return "\n".join(
        "  ".join(f.format(cell) for f, cell in zip(fmt, row, strict=True))
        for row in [header, *rows]
    )


if __name__ == "__main__":
    sys.exit(main())
