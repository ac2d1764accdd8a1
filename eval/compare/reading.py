"""Reading run folders for a comparison: each task's files, and its scores on a metric.

A run's scores are the ones its own ``metrics.json`` averaged: its ``per_query.jsonl`` as
written, and only for a metric it lacks its ``run.trec`` scored under the run's own
``missing`` and ``ties`` (`task_scores`); `check_against_summary` says whether they agree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from eval.compare.model import CompareError, RunData, TaskFiles
from eval.evaluate import MISSING_POLICIES, TIE_ORDERS, evaluate_run, task_mean
from eval.metrics import parse_metric
from eval.runs import NotARunFolder, QrelsError, RunFolder, RunQrels, StageFolder
from eval.trec import read_run
from eval.usage import Usage

RECORD_FIELDS = ("query", "usage", "error")


def load_run(path: Path | str) -> RunData:
    """Read a run folder written by ``agents.run``: its config, its stored label and every
    scored task. A folder that stored no label (written before labels were stored, or a run
    that has not ended) is labelled by its name."""
    path = Path(path)
    folder = RunFolder(path)
    try:
        config = folder.config()
    except NotARunFolder as e:
        raise CompareError(str(e)) from None
    except ValueError as e:
        raise CompareError(str(e)) from None
    tasks = {}
    unscored = []
    try:
        for task in folder.tasks():
            if problem := task.binding_problem(config, folder.config_path):
                raise CompareError(problem)
            chain = task.stage_chain()
            final = chain[-1]
            per_query = final.per_query()
            run_trec = final.run_trec_path
            if not per_query and not run_trec.is_file():
                unscored.append(final.path.relative_to(path).as_posix())
                continue  # a task that never finished a pass
            summary = task.summary()
            records, usage = stage_records(chain)
            tasks[task.name] = TaskFiles(
                per_query=per_query,
                summary=summary,
                records=records,
                usage=usage,
                run_trec=run_trec,
                summary_damaged=summary is None and task.summary_path.exists(),
                stages=len(chain) - 1,
            )
    except ValueError as e:
        raise CompareError(str(e)) from None
    info = folder.info() or {}
    label = info.get("label")
    if not isinstance(label, str) or not label.strip():
        label = path.resolve().name or str(path)
    llm_free = info.get("llm_free")
    return RunData(
        path=path,
        label=label,
        config=config,
        tasks=tasks,
        llm_free=llm_free if isinstance(llm_free, bool) else None,
        unscored=tuple(unscored),
    )


def stage_records(chain: Sequence[StageFolder]) -> tuple[dict[str, dict], dict[str, Usage]]:
    """Per query: the record of the latest stage holding one, and usage summed over all."""
    records: dict[str, dict[str, Any]] = {}
    usage: dict[str, Usage] = {}
    for stage in chain:
        for qid, record in stage.records(RECORD_FIELDS).items():
            text = record.get("query") or records.get(qid, {}).get("query")
            records[qid] = {**record, "query": text}  # a later stage may not repeat the text
            usage.setdefault(qid, Usage()).add(Usage.from_dict(record.get("usage")))
    return records, usage


def task_qrels(qrels: RunQrels, run: RunData, task: str) -> dict[str, dict[str, int]]:
    try:
        return qrels.get(run.path, task, run.config)
    except QrelsError as e:
        raise CompareError(f"{e}; pass --qrels-from") from None


def task_scores(run: RunData, task: str, metric: str, qrels: RunQrels) -> dict[str, float]:
    """Per-query ``metric`` of one run on one task, over the queries its own means are over:
    its per_query.jsonl as written (a failed or empty query is there as 0 under
    missing=zero and absent under present), else its run.trec scored as the run scored it."""
    files = run.tasks[task]
    if files.per_query and all(metric in v for v in files.per_query.values()):
        values = {q: float(v[metric]) for q, v in files.per_query.items()}
        if qrels.spec is not None:  # the user named the qrels: score only queries they hold
            known = task_qrels(qrels, run, task)
            values = {q: v for q, v in values.items() if q in known}
        return values
    if not files.run_trec.is_file():
        raise CompareError(f"{run.path / task}: no per_query.jsonl with {metric} and no run.trec")
    all_qrels = task_qrels(qrels, run, task)
    asked = set(files.per_query) | set(files.records)
    judged = {q: d for q, d in all_qrels.items() if q in asked}
    _, k = parse_metric(metric)
    ranked = read_run(files.run_trec)
    missing, ties = eval_settings(run)
    evaluation = evaluate_run(judged, ranked, k_values=[k or 10], missing=missing, ties=ties)
    return {q: v[metric] for q, v in evaluation.per_query.items()}


def eval_settings(run: RunData) -> tuple[str, str]:
    """The run's ``missing`` and ``ties`` (config.json's ``eval``), which its scores follow."""
    settings = run.config.get("eval") or {}
    missing = settings.get("missing", "zero")
    ties = settings.get("ties", "trec")
    if missing not in MISSING_POLICIES or ties not in TIE_ORDERS:
        raise CompareError(
            f"{RunFolder(run.path).config_path}: field 'eval': unknown missing {missing!r} or ties "
            f"{ties!r}; expected one of {MISSING_POLICIES} and {TIE_ORDERS}"
        )
    return missing, ties


def check_against_summary(
    label: str,
    task: str,
    run: RunData,
    metric: str,
    values: Mapping[str, float],
    qrels: RunQrels,
) -> list[str]:
    """Say whether the run's own per-query ``values`` average to its metrics.json mean, and
    why not when they do not, or why it cannot be checked; never nothing on a skipped check."""
    files = run.tasks[task]
    summary = files.summary
    where = f"{label}: {task}"
    if files.summary_damaged:
        return [f"{where}: its metrics.json is damaged; the table is not checked"]
    if summary is None:
        return [f"{where}: no metrics.json (the task never finished); the table is not checked"]
    notes = []
    if summary.failed:
        missing, _ = eval_settings(run)
        worth = "scored 0" if missing == "zero" else "left out, as missing=present leaves them"
        notes.append(f"{where}: {summary.failed} queries failed ({worth})")
    expected = summary.metrics.get(metric)  # the final stage's
    if expected is None:
        notes.append(f"{where}: its metrics.json holds no {metric}; the table is not checked")
        return notes
    mean = task_mean(list(values.values()))
    if abs(mean - expected) > 1e-9:
        why = f" ({summary.averaging})" if summary.averaging else ""
        if qrels.spec is not None:
            why += f"; the table keeps only the queries --qrels-from {qrels.spec} judges"
        notes.append(
            f"{where}: MISMATCH: {metric} from its {len(values)} per-query scores is "
            f"{mean:.5f} but metrics.json says {expected:.5f}{why}"
        )
    return notes
