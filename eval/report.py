"""Tables and files for results: R2MED-style leaderboards, results JSON, per-query metrics."""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Mapping, Sequence

from eval.evaluate import Evaluation
from eval.metrics import HEADLINE, parse_metric
from eval.plumbing.files import write_json, write_text
from eval.runs import per_query_text

PathLike = str | os.PathLike[str]

# R2MED's table order. Each task is known by its paper name and by the folder name its
# code uses (src/eval_bench.py in github.com/R2MED/R2MED), so either spelling sorts right.
_R2MED_ORDER: tuple[tuple[str, ...], ...] = (
    ("Biology", "Stack-Biology"),
    ("Bioinformatics", "Stack-Bioinformatics"),
    ("Medical-Sciences", "Stack-Medical"),
    ("MedXpertQA-Exam",),
    ("MedQA-Diag",),
    ("PMC-Treatment", "PMC-Treat"),
    ("PMC-Clinical", "PMCPatients"),
    ("IIYi-Clinical", "IIYiPatients-EN"),
)
_R2MED_RANK = {name.lower(): i for i, names in enumerate(_R2MED_ORDER) for name in names}


def order_tasks(tasks: Sequence[str]) -> list[str]:
    """R2MED tasks first in the paper's order, then any other task in the order given."""
    known = sorted(
        (t for t in tasks if t.lower() in _R2MED_RANK), key=lambda t: _R2MED_RANK[t.lower()]
    )
    return known + [t for t in tasks if t.lower() not in _R2MED_RANK]


def leaderboard_markdown(
    rows: Mapping[str, Mapping[str, float]],
    tasks: Sequence[str],
    metric: str = HEADLINE,
) -> str:
    """A markdown table: one row per run, one column per task, then Avg; values ×100.

    ``rows`` maps a run name to ``{task: value}`` for ``metric`` (values in [0, 1]). Values
    print ×100 with 2 decimals as in R2MED's tables; a task a run lacks prints "-". Avg is the
    mean of the unrounded values over the tasks that row has, marked "*" when some are
    missing, so a partial row never passes for a full one.
    """
    columns = order_tasks(list(dict.fromkeys(tasks)))
    header = [metric, *columns, "Avg"]
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|",
    ]
    partial = False
    for name, values in rows.items():
        present = [values[t] for t in columns if t in values]
        cells = [_pct(values[t]) if t in values else "-" for t in columns]
        if present:
            avg = _pct(sum(present) / len(present))
            if len(present) < len(columns):
                avg += "*"
                partial = True
        else:
            avg = "-"
        lines.append("| " + " | ".join([name, *cells, avg]) + " |")
    if partial:
        lines.append("")
        lines.append("\\* Avg over the tasks that run has, not all of them.")
    return "\n".join(lines) + "\n"


_R2MED_FAMILY = {"NDCG": "ndcg", "MAP": "map", "Recall": "recall", "P": "precision", "MRR": "mrr"}


def r2med_metric_key(metric: str) -> str:
    """Our metric name as R2MED's results JSON spells it: "NDCG@10" -> "ndcg_at_10"."""
    family, k = parse_metric(metric)
    name = _R2MED_FAMILY[family]
    return name if k is None else f"{name}_at_{k}"


def results_json(
    evaluation: Evaluation | Mapping[str, float],
    dataset_name: str,
    model_name: str,
    evaluation_time: str | None = None,
) -> dict:
    """One task's results in the layout R2MED's scripts write (results/<model>/<task>.json).

    That is ``{"dataset_name", "model_name", "evaluation_time": "<x> minutes",
    "test": {"ndcg_at_10": ..., "map_at_10": ..., "recall_at_10": ...,
    "precision_at_10": ..., "mrr": ...}}`` (src/eval_bench_BM25.py). Our MRR@k, which R2MED
    does not report, goes in as "mrr_at_k". Dump it with ``write_results_json``.
    """
    mean = evaluation.mean if isinstance(evaluation, Evaluation) else evaluation
    out: dict = {
        "dataset_name": dataset_name,
        "model_name": model_name,
        "test": {r2med_metric_key(m): v for m, v in mean.items()},
    }
    if evaluation_time is not None:
        out["evaluation_time"] = evaluation_time
    return out


def write_results_json(results: Mapping, path: PathLike) -> None:
    """Write a ``results_json`` dict as R2MED does: indent 2, keys sorted."""
    write_json(path, results, indent=2, sort_keys=True)


def write_per_query(evaluation: Evaluation, path: PathLike) -> None:
    """Per-query metrics, one query per line: JSONL if ``path`` ends in .jsonl, else TSV.

    JSONL lines are ``{"query_id": ..., "NDCG@10": ..., ...}``; the TSV has a header row.
    Values are unrounded so they can be re-averaged or used for significance tests.
    """
    metrics = evaluation.metrics or sorted({m for v in evaluation.per_query.values() for m in v})
    out = io.StringIO()
    if str(path).endswith(".jsonl"):
        rows = {q: {m: values[m] for m in metrics} for q, values in evaluation.per_query.items()}
        out.write(per_query_text(rows))
    else:
        writer = csv.writer(out, delimiter="\t", lineterminator="\n")
        writer.writerow(["query_id", *metrics])
        for qid, values in evaluation.per_query.items():
            writer.writerow([qid, *(repr(values[m]) for m in metrics)])
    write_text(path, out.getvalue())


def _pct(value: float) -> str:
    return f"{value * 100:.2f}"
