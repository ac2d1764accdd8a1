"""`compare_runs`: run folders in, a `Comparison` out (see `eval.compare` for its rules)."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from eval.compare.measures import cost, delta, movers
from eval.compare.model import CompareError, Comparison, Delta, Mover, RunData
from eval.compare.published import published_notes, published_row, resolve_references
from eval.compare.reading import check_against_summary, load_run, task_scores
from eval.evaluate import task_mean
from eval.metrics import HEADLINE, metric_name
from eval.references.model import Reference
from eval.report import order_tasks
from eval.runs import RunQrels
from eval.significance import TESTS, Test

DEFAULT_METRIC = HEADLINE
TOP_MOVERS = 5


def compare_runs(
    paths: Sequence[Path | str],
    baseline: Path | str | None = None,
    metric: str = DEFAULT_METRIC,
    qrels_from: str | None = None,
    cache_dir: Path | None = None,
    test: Test = "fisher",
    top: int = TOP_MOVERS,
    references: Sequence[str | Reference] = (),
) -> Comparison:
    """Compare run folders on ``metric`` against ``baseline`` (default: the first of ``paths``).

    Qrels are loaded (from ``qrels_from``, else each run's configured dataset) only when a
    task's ``per_query.jsonl`` lacks ``metric`` or ``qrels_from`` is given. ``references``
    (``r2med:<row>`` specs or `Reference` rows) are set beside the runs (`Published`).
    """
    try:
        metric = metric_name(metric)
    except ValueError as e:
        raise CompareError(str(e)) from None
    if test not in TESTS:
        raise CompareError(f"unknown test {test!r}; use one of {', '.join(TESTS)}")
    refs = resolve_references(references)
    paths = [Path(p) for p in paths]
    if baseline is not None and Path(baseline).resolve() not in [p.resolve() for p in paths]:
        paths.insert(0, Path(baseline))
    if not paths:
        raise CompareError("no run folders given")
    runs = labelled([load_run(p) for p in paths])
    labels = list(runs)
    base_label = labels[0]
    if baseline is not None:
        base_label = next(
            k for k, r in runs.items() if r.path.resolve() == Path(baseline).resolve()
        )
    notes: list[str] = []

    for run in runs.values():
        if not run.tasks:
            why = (
                f"{', '.join(f'{t}/' for t in run.unscored)} holds neither per_query.jsonl nor "
                "run.trec (a run that has not finished a pass? rerun its command to resume it)"
                if run.unscored
                else "it holds no task folder"
            )
            raise CompareError(f"no scored task in {run.path}: {why}")
    task_sets = {k: set(r.tasks) for k, r in runs.items()}
    tasks = order_tasks(sorted(set.intersection(*task_sets.values())))
    if not tasks:
        listing = "; ".join(f"{k}: {', '.join(sorted(s))}" for k, s in task_sets.items())
        raise CompareError(f"the runs share no task ({listing})")
    for label, have in task_sets.items():
        if extra := sorted(have - set(tasks)):
            notes.append(f"{label}: task(s) {', '.join(extra)} left out (not in every run)")

    qrels = RunQrels(qrels_from, cache_dir)
    raw = {k: {t: task_scores(r, t, metric, qrels) for t in tasks} for k, r in runs.items()}

    scores: dict[str, dict[str, dict[str, float]]] = {k: {} for k in labels}
    means: dict[str, dict[str, float]] = {k: {} for k in labels}
    for task in tasks:
        shared = set.intersection(*(set(raw[k][task]) for k in labels))
        # The baseline's query order (the task's own) keeps movers and CSVs stable.
        order = [q for q in raw[base_label][task] if q in shared]
        for label in labels:
            if dropped := len(raw[label][task]) - len(shared):
                notes.append(
                    f"{label}: {task}: {dropped} of its {len(raw[label][task])} queries "
                    "left out (not answered by every run)"
                )
            values = {q: raw[label][task][q] for q in order}
            scores[label][task] = values
            means[label][task] = task_mean(list(values.values()))
            # the run's own scores, before the shared-query cut: what its metrics.json averaged
            notes.extend(
                check_against_summary(label, task, runs[label], metric, raw[label][task], qrels)
            )

    deltas: dict[str, dict[str, Delta]] = {}
    moved: dict[str, tuple[list[Mover], list[Mover]]] = {}
    for label in labels:
        if label == base_label:
            continue
        deltas[label] = {t: delta(scores[base_label][t], scores[label][t], test) for t in tasks}
        pooled = {
            (t, q): v for t in tasks for q, v in scores[label][t].items()
        }  # the union of every task's queries
        pooled_base = {(t, q): v for t in tasks for q, v in scores[base_label][t].items()}
        deltas[label]["Overall"] = (
            delta(pooled_base, pooled, test) if len(tasks) > 1 else deltas[label][tasks[0]]
        )
        moved[label] = movers(runs[label], runs[base_label], pooled_base, pooled, top)

    costs = {k: cost(runs[k], tasks) for k in labels}
    if clash := [r.label for r in refs if r.label in runs]:
        raise CompareError(f"--reference {clash[0]!r}: a run has that label already")
    published = [published_row(r, tasks, means, metric) for r in refs]
    notes.extend(published_notes(published, runs, tasks, metric))
    return Comparison(
        metric=metric,
        test=test,
        labels=labels,
        baseline=base_label,
        tasks=tasks,
        runs=runs,
        scores=scores,
        means=means,
        deltas=deltas,
        movers=moved,
        costs=costs,
        notes=notes,
        qrels=qrels,
        published=published,
    )


def labelled(runs: list[RunData]) -> dict[str, RunData]:
    """Runs by label; a label two runs share gets the folder name added, or the folder's
    path when that is shared too (folders of one name in two places)."""
    counts = Counter(r.label for r in runs)
    names = Counter((r.label, r.path.name) for r in runs)
    out: dict[str, RunData] = {}
    for r in runs:
        label = r.label
        if counts[label] > 1:
            label += f" ({r.path.name})" if names[r.label, r.path.name] == 1 else f" ({r.path})"
        if label in out:
            raise CompareError(f"run folder {r.path} is given twice")
        out[label] = dataclasses.replace(r, label=label)
    return out
