"""Published rows beside the runs (``--reference r2med:<row>``, ``--reference
r2med-leaderboard:<row>``, ``--reference reasonembed-table3:<row>``, `eval.references`).

A row's figure for the metric on each compared task R2MED reports, and each run's difference
from it, per task and on the mean over those same tasks (never over tasks one side lacks).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from eval.compare.model import CompareError, Published, RunData
from eval.datasets import r2med_task_name
from eval.references.conflicts import conflict_of
from eval.references.model import Reference, UnknownReference
from eval.references.reading import reference
from eval.references.text import paper_notes


def resolve_references(given: Sequence[str | Reference]) -> list[Reference]:
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


def published_row(
    ref: Reference, tasks: Sequence[str], means: Mapping[str, Mapping[str, float]], metric: str
) -> Published:
    """``ref`` beside the runs' ``means`` (label -> task -> mean) on the compared ``tasks``."""
    figures = {t: v for t in tasks if (v := ref.figure(t, metric)) is not None}
    differences: dict[str, dict[str, float]] = {}
    for label, by_task in means.items():
        diffs = {t: by_task[t] - v for t, v in figures.items()}
        if figures:
            run_avg = sum(by_task[t] for t in figures) / len(figures)
            diffs["Avg"] = run_avg - sum(figures.values()) / len(figures)
        differences[label] = diffs
    return Published(ref, figures, differences)


def published_notes(
    published: Sequence[Published], runs: Mapping[str, RunData], tasks: Sequence[str], metric: str
) -> list[str]:
    """What a reader must know before reading a difference from the paper."""
    notes = []
    foreign = [t for t in tasks if r2med_task_name(t) is None]
    conflicting = set()
    for p in published:
        ref = p.reference
        conflict = conflict_of(ref)
        if conflict is not None and conflict.row not in conflicting:  # shown, never resolved
            notes.append(f"{p.label}: CONFLICT: {conflict.text()}")
            conflicting.add(conflict.row)
        # a paper's row at odds with itself, or repeating R2MED's: shown as the paper has it
        notes += [f"{p.label}: {note}" for note in paper_notes(ref)]
        if foreign:
            notes.append(
                f"{p.label}: {', '.join(foreign)}: not R2MED's task(s), so no published figure "
                "and no difference there"
            )
        lacking = [t for t in tasks if r2med_task_name(t) and t not in p.figures]
        if lacking:
            notes.append(f"{p.label}: its source holds no {metric} for {', '.join(lacking)}")
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
