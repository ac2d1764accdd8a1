"""Compare run folders: `python -m eval.compare runs/a runs/b ... [--baseline runs/a]`.

For the chosen metric (nDCG@10 by default) it prints and writes a leaderboard (one row per
run, R2MED's task order, then Avg), per-query deltas against a baseline run (wins / ties /
losses, paired p-values, the queries that moved most, with their text) and a cost table, draws
per-task bars and a cost-vs-metric scatter, and writes report.html, a page that holds all of
it plus every query's score and trajectory (`eval.html_report`). See docs/experiments.md.

Decisions worth knowing:

* Scores come from each task's ``per_query.jsonl``; only a metric it lacks is recomputed
  from ``run.trec`` and the qrels (``eval.evaluate`` under the run's own ``missing`` and
  ``ties``). So a run's scores are the ones its own ``metrics.json`` averaged: every run's
  mean is checked against it, and a disagreement, or a reason the check cannot be made
  (damaged or absent metrics.json, a metric it lacks), is a note, never silence.
* Runs are compared on the tasks they all have and, per task, on the queries they all
  answered; whatever is dropped is listed in the notes. A query a run failed or ranked
  nothing for counts as its metrics.json counted it: 0 under ``missing=zero``, left out
  under ``missing=present`` (``eval.evaluate``'s one definition of a present query).
* Overall significance pools the per-query scores of every task (task-prefixed query ids),
  so a task with many queries weighs more there than in Avg, which is a mean of task means.
* A task whose ranking went through rerank stages is scored on its final stage (see
  ``eval.runs``); its usage is the sum over every stage up to that one.
* Usage is summed from the per-query records by ``Usage.add``, the runner's own rule, so a
  run's cost is unknown as soon as one call was unpriced; the priced part is then shown as a
  lower bound (see ``Cost``).
* ``--reference r2med:<row>`` sets a published row (`eval.references`) beside the runs: its
  figure for the metric on each compared task R2MED reports, and each run's difference from
  it, per task and on the mean over those same tasks (never over tasks one side lacks). The
  paper's figures are over every query of a task, so a run with ``--limit`` is noted.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from eval.argtypes import non_negative_int
from eval.datasets import r2med_task_name
from eval.evaluate import MISSING_POLICIES, TIE_ORDERS, evaluate, task_mean
from eval.files import FolderError, writable_folder, write_text
from eval.metrics import parse_metric
from eval.references import Reference, UnknownReference, reference
from eval.report import leaderboard_markdown, order_tasks
from eval.runs import (
    TASK_METRICS_FILE,
    QrelsError,
    RunQrels,
    read_config,
    read_per_query,
    read_records,
    read_task_summary,
    records_path,
    run_label,
    run_trec_path,
    stage_chain,
    task_dirs,
)
from eval.significance import TESTS, Test, paired_p_value
from eval.trec import read_run
from eval.usage import Usage

DEFAULT_METRIC = "NDCG@10"
TOP_MOVERS = 5
_RECORD_FIELDS = ("query", "usage", "error")


class CompareError(ValueError):
    """Runs that cannot be compared; the message says which run and why."""


@dataclass(frozen=True)
class TaskFiles:
    """What one task folder of a run holds, read once; scores are its final stage's."""

    per_query: dict[str, dict[str, float]]  # per_query.jsonl ({} if absent)
    summary: dict[str, Any]  # the task's metrics.json ({} if absent or damaged)
    # queries.jsonl without steps: per query, the record of the latest stage that has one
    records: dict[str, dict[str, Any]]
    usage: dict[str, Usage]  # per query, summed over every stage up to the final one
    run_trec: Path
    summary_damaged: bool = False


@dataclass(frozen=True)
class RunData:
    path: Path
    label: str
    config: dict[str, Any]
    tasks: dict[str, TaskFiles]


@dataclass(frozen=True)
class Delta:
    """A run against the baseline on one task (or "Overall"), over the shared queries."""

    n: int
    wins: int
    ties: int
    losses: int
    baseline: float  # mean of the baseline's scores
    value: float  # mean of this run's scores
    p_value: float

    @property
    def delta(self) -> float:
        return self.value - self.baseline


@dataclass(frozen=True)
class Mover:
    task: str
    query_id: str
    baseline: float
    value: float
    text: str

    @property
    def delta(self) -> float:
        return self.value - self.baseline


@dataclass(frozen=True)
class Cost:
    """LLM usage of a run over the compared tasks, summed from its per-query records.

    ``total_cost`` is the run's cost by ``Usage.add``: None (unknown) as soon as one call
    could not be priced. ``cost`` sums the queries that could be, ``priced`` of them: equal
    to ``total_cost`` when every query was, else a lower bound. Cached calls cost 0 (nothing
    was paid this time) but keep their tokens. ``wall_s`` is the time of each task's last
    (resumed) execution, from metrics.json.
    """

    queries: int
    calls: int
    cached_calls: int
    prompt_tokens: int
    completion_tokens: int
    cost: float
    priced: int
    llm_s: float
    wall_s: float
    failed: int
    total_cost: float | None = 0.0

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def cost_known(self) -> bool:
        return self.total_cost is not None

    def cost_text(self) -> str:
        if self.calls == 0 or (self.cost_known and self.cost == 0):
            return "$0"
        if self.cost_known:
            return f"${self.cost:.4f}"
        if self.priced == 0:
            return "n/a"
        return f">= ${self.cost:.4f} ({self.priced}/{self.queries} queries priced)"


@dataclass(frozen=True)
class Published:
    """A published row beside the runs: its figure for the metric on each compared task it
    reports, and each run's difference from it (run − paper) per task and on "Avg", the mean
    over those same tasks on both sides."""

    reference: Reference
    figures: dict[str, float]  # compared task -> the paper's value
    differences: dict[str, dict[str, float]]  # run label -> task or "Avg" -> run − paper

    @property
    def label(self) -> str:
        return self.reference.label

    @property
    def avg(self) -> float | None:
        """The paper's mean over the compared tasks it reports (None when it reports none)."""
        return sum(self.figures.values()) / len(self.figures) if self.figures else None


@dataclass
class Comparison:
    metric: str
    test: str
    labels: list[str]  # in the order given; the baseline is labels[baseline_index]
    baseline: str
    tasks: list[str]  # compared tasks, R2MED order first
    runs: dict[str, RunData]
    scores: dict[str, dict[str, dict[str, float]]]  # label -> task -> query -> value
    means: dict[str, dict[str, float]]  # label -> task -> mean, rounded as metrics.json
    deltas: dict[str, dict[str, Delta]]  # label -> task or "Overall" -> Delta
    movers: dict[str, tuple[list[Mover], list[Mover]]]  # label -> (most up, most down)
    costs: dict[str, Cost]
    notes: list[str] = field(default_factory=list)
    # the qrels the comparison used (and loaded), for the HTML report's relevance marks
    qrels: RunQrels = field(default_factory=RunQrels, repr=False, compare=False)
    published: list[Published] = field(default_factory=list)  # --reference rows, in order

    def avg(self, label: str) -> float:
        values = [self.means[label][t] for t in self.tasks]
        return sum(values) / len(values) if values else 0.0


def load_run(path: Path | str) -> RunData:
    """Read a run folder written by ``agents.run``: its config and every scored task."""
    path = Path(path)
    try:
        config = read_config(path)
    except FileNotFoundError:
        raise CompareError(f"{path}: not a run folder (no config.json)") from None
    except ValueError as e:
        raise CompareError(str(e)) from None
    tasks = {}
    try:
        for folder in task_dirs(path):
            chain = stage_chain(folder)
            final = chain[-1]
            per_query = read_per_query(final)
            run_trec = run_trec_path(final)
            if not per_query and not run_trec.is_file():
                continue  # a task that never finished a pass
            summary = read_task_summary(folder)
            records, usage = _stage_records(chain)
            tasks[folder.name] = TaskFiles(
                per_query=per_query,
                summary=summary or {},
                records=records,
                usage=usage,
                run_trec=run_trec,
                summary_damaged=summary is None and (folder / TASK_METRICS_FILE).exists(),
            )
    except ValueError as e:
        raise CompareError(str(e)) from None
    return RunData(path=path, label=run_label(config), config=config, tasks=tasks)


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
        parse_metric(metric)
    except ValueError as e:
        raise CompareError(str(e)) from None
    if test not in TESTS:
        raise CompareError(f"unknown test {test!r}; use one of {', '.join(TESTS)}")
    refs = _references(references)
    paths = [Path(p) for p in paths]
    if baseline is not None and Path(baseline).resolve() not in [p.resolve() for p in paths]:
        paths.insert(0, Path(baseline))
    if not paths:
        raise CompareError("no run folders given")
    runs = _labelled([load_run(p) for p in paths])
    labels = list(runs)
    base_label = labels[0]
    if baseline is not None:
        base_label = next(
            k for k, r in runs.items() if r.path.resolve() == Path(baseline).resolve()
        )
    notes: list[str] = []

    empty = [r.path for r in runs.values() if not r.tasks]
    if empty:
        raise CompareError(f"no scored task in {', '.join(map(str, empty))}")
    task_sets = {k: set(r.tasks) for k, r in runs.items()}
    tasks = order_tasks(sorted(set.intersection(*task_sets.values())))
    if not tasks:
        listing = "; ".join(f"{k}: {', '.join(sorted(s))}" for k, s in task_sets.items())
        raise CompareError(f"the runs share no task ({listing})")
    for label, have in task_sets.items():
        if extra := sorted(have - set(tasks)):
            notes.append(f"{label}: task(s) {', '.join(extra)} left out (not in every run)")

    qrels = RunQrels(qrels_from, cache_dir)
    raw = {k: {t: _task_scores(r, t, metric, qrels) for t in tasks} for k, r in runs.items()}

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
                _check_against_summary(label, task, runs[label], metric, raw[label][task], qrels)
            )

    deltas: dict[str, dict[str, Delta]] = {}
    movers: dict[str, tuple[list[Mover], list[Mover]]] = {}
    for label in labels:
        if label == base_label:
            continue
        deltas[label] = {t: _delta(scores[base_label][t], scores[label][t], test) for t in tasks}
        pooled = {
            (t, q): v for t in tasks for q, v in scores[label][t].items()
        }  # the union of every task's queries
        pooled_base = {(t, q): v for t in tasks for q, v in scores[base_label][t].items()}
        deltas[label]["Overall"] = (
            _delta(pooled_base, pooled, test) if len(tasks) > 1 else deltas[label][tasks[0]]
        )
        movers[label] = _movers(runs[label], runs[base_label], pooled_base, pooled, top)

    costs = {k: _cost(runs[k], tasks) for k in labels}
    if clash := [r.label for r in refs if r.label in runs]:
        raise CompareError(f"--reference {clash[0]!r}: a run has that label already")
    published = [_published(r, tasks, means, metric) for r in refs]
    notes.extend(_published_notes(published, runs, tasks, metric))
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
        movers=movers,
        costs=costs,
        notes=notes,
        qrels=qrels,
        published=published,
    )


# ---- reading ------------------------------------------------------------------------------


def _stage_records(chain: Sequence[Path]) -> tuple[dict[str, dict], dict[str, Usage]]:
    """Per query: the record of the latest stage holding one, and usage summed over all."""
    records: dict[str, dict[str, Any]] = {}
    usage: dict[str, Usage] = {}
    for stage in chain:
        for qid, record in read_records(records_path(stage), _RECORD_FIELDS).items():
            text = record.get("query") or records.get(qid, {}).get("query")
            records[qid] = {**record, "query": text}  # a later stage may not repeat the text
            usage.setdefault(qid, Usage()).add(Usage.from_dict(record.get("usage")))
    return records, usage


def _labelled(runs: list[RunData]) -> dict[str, RunData]:
    """Runs by label; a label two runs share gets the folder name added."""
    counts: dict[str, int] = {}
    for r in runs:
        counts[r.label] = counts.get(r.label, 0) + 1
    out: dict[str, RunData] = {}
    for r in runs:
        label = r.label if counts[r.label] == 1 else f"{r.label} ({r.path.name})"
        if label in out:
            raise CompareError(f"run folder {r.path} is given twice")
        out[label] = RunData(r.path, label, r.config, r.tasks)
    return out


def _qrels(qrels: RunQrels, run: RunData, task: str) -> dict[str, dict[str, int]]:
    try:
        return qrels.get(run.path, task, run.config)
    except QrelsError as e:
        raise CompareError(f"{e}; pass --qrels-from") from None


def _task_scores(run: RunData, task: str, metric: str, qrels: RunQrels) -> dict[str, float]:
    """Per-query ``metric`` of one run on one task, over the queries its own means are over:
    its per_query.jsonl as written (a failed or empty query is there as 0 under
    missing=zero and absent under present), else its run.trec scored as the run scored it."""
    files = run.tasks[task]
    if files.per_query and all(metric in v for v in files.per_query.values()):
        values = {q: float(v[metric]) for q, v in files.per_query.items()}
        if qrels.spec is not None:  # the user named the qrels: score only queries they hold
            known = _qrels(qrels, run, task)
            values = {q: v for q, v in values.items() if q in known}
        return values
    if not files.run_trec.is_file():
        raise CompareError(f"{run.path / task}: no per_query.jsonl with {metric} and no run.trec")
    all_qrels = _qrels(qrels, run, task)
    asked = set(files.per_query) | set(files.records)
    task_qrels = {q: d for q, d in all_qrels.items() if q in asked}
    _, k = parse_metric(metric)
    ranked = read_run(files.run_trec)
    missing, ties = _eval_settings(run)
    evaluation = evaluate(task_qrels, ranked, k_values=[k or 10], missing=missing, ties=ties)
    return {q: v[metric] for q, v in evaluation.per_query.items()}


def _eval_settings(run: RunData) -> tuple[str, str]:
    """The run's ``missing`` and ``ties`` (config.json's ``eval``), which its scores follow."""
    settings = run.config.get("eval") or {}
    missing = settings.get("missing", "zero")
    ties = settings.get("ties", "trec")
    if missing not in MISSING_POLICIES or ties not in TIE_ORDERS:
        raise CompareError(
            f"{run.path / 'config.json'}: field 'eval': unknown missing {missing!r} or ties "
            f"{ties!r}; expected one of {MISSING_POLICIES} and {TIE_ORDERS}"
        )
    return missing, ties


def _check_against_summary(
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
    if not summary:
        return [f"{where}: no metrics.json (the task never finished); the table is not checked"]
    notes = []
    if summary.get("failed"):
        missing, _ = _eval_settings(run)
        worth = "scored 0" if missing == "zero" else "left out, as missing=present leaves them"
        notes.append(f"{where}: {summary['failed']} queries failed ({worth})")
    expected = (summary.get("metrics") or {}).get(metric)  # the final stage's
    if expected is None:
        notes.append(f"{where}: its metrics.json holds no {metric}; the table is not checked")
        return notes
    mean = task_mean(list(values.values()))
    if abs(mean - expected) > 1e-9:
        why = f" ({summary['averaging']})" if summary.get("averaging") else ""
        if qrels.spec is not None:
            why += f"; the table keeps only the queries --qrels-from {qrels.spec} judges"
        notes.append(
            f"{where}: MISMATCH: {metric} from its {len(values)} per-query scores is "
            f"{mean:.5f} but metrics.json says {expected:.5f}{why}"
        )
    return notes


# ---- published figures ---------------------------------------------------------------------


def _references(given: Sequence[str | Reference]) -> list[Reference]:
    """The rows ``--reference`` names, each once, in the order given."""
    out: dict[str, Reference] = {}
    for item in given:
        if isinstance(item, Reference):
            ref = item
        else:
            try:
                ref = reference(item)
            except UnknownReference as e:
                raise CompareError(f"--reference: {e}") from None
        out.setdefault(ref.spec, ref)
    return list(out.values())


def _published(
    ref: Reference, tasks: Sequence[str], means: Mapping[str, Mapping[str, float]], metric: str
) -> Published:
    figures = {t: v for t in tasks if (v := ref.figure(t, metric)) is not None}
    differences: dict[str, dict[str, float]] = {}
    for label, by_task in means.items():
        diffs = {t: by_task[t] - v for t, v in figures.items()}
        if figures:
            run_avg = sum(by_task[t] for t in figures) / len(figures)
            diffs["Avg"] = run_avg - sum(figures.values()) / len(figures)
        differences[label] = diffs
    return Published(ref, figures, differences)


def _published_notes(
    published: Sequence[Published], runs: Mapping[str, RunData], tasks: Sequence[str], metric: str
) -> list[str]:
    """What a reader must know before reading a difference from the paper."""
    notes = []
    foreign = [t for t in tasks if r2med_task_name(t) is None]
    for p in published:
        ref = p.reference
        if foreign:
            notes.append(
                f"{p.label}: {', '.join(foreign)}: not R2MED's task(s), so no published figure "
                "and no difference there"
            )
        lacking = [t for t in tasks if r2med_task_name(t) and t not in p.figures]
        if lacking:
            notes.append(f"{p.label}: R2MED's files hold no {metric} for {', '.join(lacking)}")
        if not p.figures:
            notes.append(f"{p.label}: no published {metric} for any compared task")
            continue
        covered = {r2med_task_name(t) for t in p.figures}
        if missing := [t for t in ref.tasks if t not in covered]:
            try:
                average = ref.average(metric) * 100
                own = f"; the paper's own Avg over its {len(ref.tasks)} tasks is {average:.2f}"
            except ValueError:
                own = ""
            notes.append(
                f"{p.label}: the runs lack {len(missing)} of its {len(ref.tasks)} tasks "
                f"({', '.join(missing)}): its Avg and the differences on Avg are over the "
                f"{len(p.figures)} compared{own}"
            )
    if published:
        for label, run in runs.items():
            if limit := run.config.get("limit"):
                notes.append(
                    f"{label}: run on the first {limit} queries of each task; the published "
                    "figures are over all of them"
                )
    return notes


# ---- deltas, movers, cost ------------------------------------------------------------------


def _delta(base: Mapping[Any, float], other: Mapping[Any, float], test: Test) -> Delta:
    keys = list(base)
    a = [base[k] for k in keys]
    b = [other[k] for k in keys]
    n = len(keys)
    return Delta(
        n=n,
        wins=sum(y > x for x, y in zip(a, b, strict=True)),
        ties=sum(y == x for x, y in zip(a, b, strict=True)),
        losses=sum(y < x for x, y in zip(a, b, strict=True)),
        baseline=sum(a) / n if n else 0.0,
        value=sum(b) / n if n else 0.0,
        p_value=paired_p_value(a, b, test=test),
    )


def _movers(
    run: RunData,
    base: RunData,
    pooled_base: Mapping[tuple[str, str], float],
    pooled: Mapping[tuple[str, str], float],
    top: int,
) -> tuple[list[Mover], list[Mover]]:
    def text(task: str, qid: str) -> str:
        for r in (run, base):
            record = r.tasks[task].records.get(qid)
            if record and record.get("query"):
                return " ".join(str(record["query"]).split())
        return ""

    moved = [
        Mover(t, q, pooled_base[(t, q)], pooled[(t, q)], text(t, q))
        for (t, q) in pooled
        if pooled[(t, q)] != pooled_base[(t, q)]
    ]
    up = sorted((m for m in moved if m.delta > 0), key=lambda m: -m.delta)[:top]
    down = sorted((m for m in moved if m.delta < 0), key=lambda m: m.delta)[:top]
    return up, down


def _cost(run: RunData, tasks: Sequence[str]) -> Cost:
    total = Usage()
    priced = Usage()  # the queries whose every call was priced
    queries = n_priced = failed = 0
    wall_s = 0.0
    for task in tasks:
        files = run.tasks[task]
        for usage in files.usage.values():
            queries += 1
            total.add(usage)
            if usage.cost is not None:
                n_priced += 1
                priced.add(usage)
        wall_s += float(files.summary.get("seconds") or 0.0)
        failed += int(files.summary.get("failed") or 0)
    return Cost(
        queries=queries,
        calls=total.calls,
        cached_calls=total.cached_calls,
        prompt_tokens=total.prompt_tokens,
        completion_tokens=total.completion_tokens,
        cost=priced.cost or 0.0,  # never None: only priced queries were added
        priced=n_priced,
        llm_s=total.latency_s,
        wall_s=wall_s,
        failed=failed,
        total_cost=total.cost,
    )


# ---- output --------------------------------------------------------------------------------


def leaderboard_rows(c: Comparison) -> dict[str, dict[str, float]]:
    """The runs' means by task, then each published row's figures (the tasks it reports)."""
    rows = {label: dict(c.means[label]) for label in c.labels}
    return rows | {p.label: dict(p.figures) for p in c.published}


def published_markdown(c: Comparison) -> str:
    """Each run's difference from each published row, ×100, with where the figures are from."""
    out = [
        "## Against the published figures\n",
        f"Each run's {c.metric} minus the paper's, ×100, on every compared task the paper "
        "reports; Avg is the mean over those tasks on both sides (the notes say which are "
        "missing). The figures are R2MED's own files:\n",
    ]
    out += [f"- {p.label}: {p.reference.source}" for p in c.published]
    out.append("")
    columns = [*c.tasks, "Avg"]
    out.append("| run | paper row | " + " | ".join(columns) + " |")
    out.append("|---|---|" + "|".join(["---:"] * len(columns)) + "|")
    for p in c.published:
        for label in c.labels:
            diffs = p.differences[label]
            cells = [f"{diffs[t] * 100:+.2f}" if t in diffs else "-" for t in columns]
            out.append(f"| {label} | {p.reference.row} | " + " | ".join(cells) + " |")
    out.append("")
    return "\n".join(out)


def comparison_markdown(c: Comparison) -> str:
    """The whole comparison as markdown: leaderboard, runs, deltas, movers, cost, notes."""
    test_name = {"fisher": "Fisher's randomization test", "student": "paired t-test"}[c.test]
    out = [
        f"## Leaderboard ({c.metric} ×100)\n",
        leaderboard_markdown(leaderboard_rows(c), c.tasks, c.metric),
    ]
    if c.published:
        out.append(published_markdown(c))
    out.append("## Runs\n")
    out.append("| run | folder | dataset | limit | prompts |")
    out.append("|---|---|---|---:|---|")
    for label in c.labels:
        r = c.runs[label]
        prompts = ", ".join(
            f"{k}={v[:7]}" for k, v in sorted((r.config.get("prompts") or {}).items())
        )
        base = " (baseline)" if label == c.baseline else ""
        out.append(
            f"| {label}{base} | {r.path} | {r.config.get('dataset')} | "
            f"{r.config.get('limit') or '-'} | {prompts or '-'} |"
        )
    out.append("")
    if c.deltas:
        out.append(f"## Against the baseline: {c.baseline}\n")
        out.append(
            f"Δ is the change in {c.metric} ×100; W/T/L count queries that went up, stayed, went "
            f"down; p is {test_name} (two-sided, paired per query"
            + (", seeded, 10,000 resamples" if c.test == "fisher" else "")
            + "). Overall pools the queries of all tasks (larger tasks weigh more than in Avg).\n"
        )
        columns = [*c.tasks, "Overall"]
        out.append("| run | " + " | ".join(columns) + " |")
        out.append("|---|" + "|".join(["---:"] * len(columns)) + "|")
        for label, by_task in c.deltas.items():
            cells = [_delta_cell(by_task[t]) for t in columns]
            out.append(f"| {label} | " + " | ".join(cells) + " |")
        out.append("")
        for label, (up, down) in c.movers.items():
            out.append(f"### Queries that moved most: {label}\n")
            if not up and not down:
                out.append("No query changed.\n")
                continue
            out.append(f"| | task | query | {c.metric} base → run | text |")
            out.append("|---|---|---|---|---|")
            for sign, movers in (("▲", up), ("▼", down)):
                for m in movers:
                    out.append(
                        f"| {sign} {m.delta * 100:+.1f} | {m.task} | {m.query_id} | "
                        f"{m.baseline:.3f} → {m.value:.3f} | {_short(m.text)} |"
                    )
            out.append("")
    out.append("## Cost\n")
    out.append(
        "| run | queries | LLM calls | cached | tokens in | tokens out | est. cost | "
        "LLM time (s) | wall time (s) | failed |"
    )
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label in c.labels:
        k = c.costs[label]
        out.append(
            f"| {label} | {k.queries} | {k.calls} | {k.cached_calls} | {k.prompt_tokens} | "
            f"{k.completion_tokens} | {k.cost_text()} | {k.llm_s:.1f} | {k.wall_s:.1f} | "
            f"{k.failed} |"
        )
    out.append(
        "\nCost is litellm's estimate, summed over queries; n/a when no query could be priced "
        "(local models), a lower bound (>=) when only some could. Cached calls cost $0.\n"
    )
    if c.notes:
        out.append("## Notes\n")
        out.extend(f"- {n}" for n in c.notes)
        out.append("")
    return "\n".join(out)


def reference_run(c: Comparison) -> str:
    """The run the charts mark as the no-LLM baseline: the baseline when it calls no LLM,
    else the first run that calls none (agent "none" and no LLM configured, ones without
    rerank stages first), else the baseline."""

    def calls_no_llm(label: str) -> bool:
        config = c.runs[label].config
        return config.get("agent") == "none" and not (config.get("llm") or config.get("model"))

    if calls_no_llm(c.baseline):
        return c.baseline
    candidates = [k for k in c.labels if calls_no_llm(k)]
    candidates.sort(key=lambda k: bool(c.runs[k].config.get("rerank")))  # stable: keeps order
    return candidates[0] if candidates else c.baseline


def cost_points(c: Comparison) -> tuple[dict[str, tuple[float, float]], str]:
    """(label: (cost, Avg)) and the x-axis name: USD when every run was priced, else tokens."""
    if all(k.cost_known and k.calls for k in c.costs.values()):
        return {k: (c.costs[k].cost, c.avg(k)) for k in c.labels}, "estimated cost (USD)"
    return (
        {k: (float(c.costs[k].tokens), c.avg(k)) for k in c.labels},
        "LLM tokens (in + out)",
    )


def comparison_figures(c: Comparison) -> dict[str, Any]:
    """The charts as matplotlib Figures: "tasks" (per-task bars) and "cost" (the scatter)."""
    from eval.plots import cost_figure, task_bars_figure

    reference = reference_run(c)
    points, xlabel = cost_points(c)
    return {
        "tasks": task_bars_figure(c.means, c.tasks, c.metric, reference),
        "cost": cost_figure(points, xlabel, f"Avg {c.metric}", reference),
    }


def write_comparison(
    c: Comparison, out: Path | str, plots: bool = True, html: bool = True
) -> list[Path]:
    """Write report.md, leaderboard.md/.csv, deltas.csv, comparison.json, the plots
    (tasks.png, cost.png) and report.html (`eval.html_report`)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = []

    def put(name: str, text: str) -> None:
        write_text(out / name, text)
        written.append(out / name)

    def put_csv(name: str, header: list[str], rows: list[list]) -> None:
        buffer = io.StringIO()
        w = csv.writer(buffer, lineterminator="\n")
        w.writerow(header)
        w.writerows(rows)
        put(name, buffer.getvalue())

    put("report.md", comparison_markdown(c))
    put("leaderboard.md", leaderboard_markdown(leaderboard_rows(c), c.tasks, c.metric))
    put_csv(
        "leaderboard.csv",
        ["run", "folder", *c.tasks, "Avg"],
        [
            [label, str(c.runs[label].path), *(f"{c.means[label][t]:.5f}" for t in c.tasks),
             f"{c.avg(label):.5f}"]
            for label in c.labels
        ]
        + [
            [p.label, _published_location(p.reference),
             *(f"{p.figures[t]:.5f}" if t in p.figures else "" for t in c.tasks),
             f"{p.avg:.5f}" if p.avg is not None else ""]
            for p in c.published
        ],
    )  # fmt: skip
    if c.published:
        put_csv(
            "published.csv",
            ["run", "reference", "task", "run_mean", "paper", "difference"],
            [
                [label, p.reference.spec, task, f"{run_mean:.5f}", f"{paper:.5f}",
                 f"{p.differences[label][task]:.5f}"]
                for p in c.published
                for label in c.labels
                for task, run_mean, paper in _published_cells(c, p, label)
            ],
        )  # fmt: skip
    put_csv(
        "deltas.csv",
        ["run", "baseline", "task", "n", "baseline_mean", "run_mean", "delta",
         "wins", "ties", "losses", "p_value", "test"],
        [
            [label, c.baseline, task, d.n, f"{d.baseline:.5f}", f"{d.value:.5f}",
             f"{d.delta:.5f}", d.wins, d.ties, d.losses, f"{d.p_value:.4g}", c.test]
            for label, by_task in c.deltas.items()
            for task, d in by_task.items()
        ],
    )  # fmt: skip
    summary = {
        "metric": c.metric,
        "test": c.test,
        "baseline": c.baseline,
        "tasks": c.tasks,
        "runs": {k: str(c.runs[k].path) for k in c.labels},
        "means": c.means,
        "avg": {k: c.avg(k) for k in c.labels},
        "deltas": {k: {t: asdict(d) for t, d in v.items()} for k, v in c.deltas.items()},
        "cost": {k: asdict(v) for k, v in c.costs.items()},
        "published": [
            {
                "row": p.reference.row,
                "label": p.label,
                "repository": p.reference.repository,
                "commit": p.reference.commit,
                "path": p.reference.path,
                "figures": p.figures,
                "avg": p.avg,
                "differences": p.differences,
            }
            for p in c.published
        ],
        "notes": c.notes,
    }
    put("comparison.json", json.dumps(summary, indent=2) + "\n")
    if not (plots or html):
        return written
    # One set of figures for both outputs: the PNGs and the page's SVGs are the same charts.
    figures = comparison_figures(c)
    if plots:
        from eval.plots import save_png

        for name, figure in figures.items():
            save_png(figure, out / f"{name}.png")
            written.append(out / f"{name}.png")
    if html:
        from eval.html_report import write_report

        written.append(write_report(c, out / "report.html", figures))
    return written


def _published_location(ref: Reference) -> str:
    """The row's folder in R2MED's repository at its commit, as a browsable address."""
    from urllib.parse import quote

    return f"{ref.repository}/tree/{ref.commit}/{quote(ref.path)}"  # "base retriever": %20


def _published_cells(c: Comparison, p: Published, label: str) -> list[tuple[str, float, float]]:
    """(task or "Avg", the run's mean, the paper's) for every task the paper reports."""
    cells = [(t, c.means[label][t], v) for t, v in p.figures.items()]
    if p.avg is not None:
        run_avg = sum(c.means[label][t] for t in p.figures) / len(p.figures)
        cells.append(("Avg", run_avg, p.avg))
    return cells


def _delta_cell(d: Delta) -> str:
    return f"{d.delta * 100:+.2f} (p={d.p_value:.3g}; {d.wins}/{d.ties}/{d.losses})"


def _short(text: str, limit: int = 160) -> str:
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    return text.replace("|", "\\|")


# ---- command line --------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m eval.compare",
        description="Compare run folders of agents.run: leaderboard, per-query deltas with "
        "paired significance, cost, plots.",
    )
    p.add_argument("runs", nargs="+", type=Path, help="run folders (agents.run --runs-dir/...)")
    p.add_argument("--baseline", type=Path, default=None, help="default: the first run")
    p.add_argument("--metric", default=DEFAULT_METRIC, help="default: %(default)s")
    p.add_argument("--test", default="fisher", choices=TESTS, help="default: %(default)s")
    p.add_argument(
        "--top", type=non_negative_int, default=TOP_MOVERS, help="movers listed each way"
    )
    p.add_argument("--out", type=Path, default=None, help="default: comparisons/<timestamp>")
    p.add_argument(
        "--qrels-from",
        default=None,
        metavar="DATASET",
        help="dataset whose qrels to use (default: each run's own, loaded only if needed)",
    )
    p.add_argument("--cache-dir", type=Path, default=None, help="as agents.run's")
    p.add_argument(
        "--reference",
        action="append",
        default=[],
        metavar="r2med:ROW",
        help="a published row to set beside the runs (repeatable; python -m eval.references "
        "list shows them), e.g. r2med:hyde/qwen-7b/bm25",
    )
    p.add_argument("--no-plots", action="store_true", help="no tasks.png and cost.png")
    p.add_argument(
        "--html",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="write report.html: tables, charts, every query's trajectory (default: on)",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = args.out or Path("comparisons") / datetime.now().strftime("%Y%m%d-%H%M%S")
    try:
        references = _references(args.reference)  # refused before --out is made
        writable_folder(out, "--out")
        comparison = compare_runs(
            args.runs,
            baseline=args.baseline,
            metric=args.metric,
            qrels_from=args.qrels_from,
            cache_dir=args.cache_dir,
            test=args.test,
            top=args.top,
            references=references,
        )
    except (CompareError, FolderError, OSError, json.JSONDecodeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    write_comparison(comparison, out, plots=not args.no_plots, html=args.html)
    print(comparison_markdown(comparison))
    print(f"written to {out}")
    if args.html:
        print(f"HTML report (opens offline in a browser): {out / 'report.html'}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # every file it writes is written whole or not at all
        print("interrupted: nothing was written half", file=sys.stderr)
        sys.exit(130)
