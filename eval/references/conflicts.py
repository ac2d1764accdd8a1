"""Where published figures disagree: R2MED's two sources with each other (`Conflict`), a
paper's row with itself (`Inconsistency`), and a paper's repeat of R2MED's figures with R2MED's
rows (`Repeat`). Each is shown, never resolved.

**Conflicts are shown, never resolved.** Where both of R2MED's sources hold a row, its nDCG@10 is
compared task by task on the leaderboard's scale: the repository's 5-decimal fraction ×100
against the page's 2-decimal figure. They agree when the one rounds to the other, i.e. they
are at most 0.005 apart; at an exact half either rounding is accepted, because the page
rounds halves both ways (52.815 as 52.81, 41.215 as 41.22). A row with any task beyond that
is a `Conflict` (``base/medcpt``: 7.87 in the repository, 9.02 on the leaderboard, 7 of 8
tasks differ), found by `find_conflicts` from the data, and ``list``, ``show``,
``eval.compare --reference`` and a run's printed paper figure show both figures with their
sources. The Avg is not compared: the page averages unrounded figures, so a row whose every
task agrees may still print an Avg 0.01 apart (hyde/huatuo-o1-70b/bm25: 33.42 and 33.43).

**A table at odds with itself is shown as printed.** A paper's row whose printed Avg is more
than rounding allows (0.01) from the mean of its 8 printed task figures, or whose printed Size
is not the size its model's name states, is an `Inconsistency`, found from the row by
`inconsistencies`: RaDeR-gte-Qwen2-7B prints Avg 35.19 where its tasks' mean is 35.215 (a
CONFLICT), Qwen3-4B-ms is printed with Size 8B (a NOTE). Both figures stay as printed (the
average beside a run is the printed one) and ``list``, ``show``, ``eval.compare --reference``
and a run's printed average give both.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal

from eval.datasets import R2MED_TASKS
from eval.references.model import (
    AVERAGE_TOLERANCE,
    DEFAULT_TABLE,
    LEADERBOARD_KIND,
    LEADERBOARD_METRIC,
    LEADERBOARD_TABLE,
    PAPER_KIND,
    REPOSITORY_KIND,
    SOURCE_NAMES,
    TABLES,
    Reference,
    pct,
)
from eval.references.reading import load_references
from eval.references.reasonembed import repeats_r2med

_SIZE_IN_NAME = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?B)\b")


HALF_UNIT = Decimal("0.005")  # half of the page's last decimal, on its ×100 scale


def agrees(repository_value: float, leaderboard_value: float) -> bool:
    """Whether the page's figure is the repository's rounded to the page's 2 decimals ×100:
    at most half a unit apart, at an exact half either way (the page rounds halves both
    ways). Compared as the decimals they were written with, not as binary floats."""
    apart = abs(Decimal(repr(repository_value)) - Decimal(repr(leaderboard_value))) * 100
    return apart <= HALF_UNIT


@dataclass(frozen=True)
class Conflict:
    """A row both sources hold whose nDCG@10 differs beyond rounding on some task."""

    repository: Reference
    leaderboard: Reference
    tasks: tuple[str, ...]  # the tasks that differ, in R2MED's order

    @property
    def row(self) -> str:
        return self.repository.row

    def other(self, ref: Reference) -> Reference:
        """The source that is not ``ref``'s."""
        return self.leaderboard if ref.kind == REPOSITORY_KIND else self.repository

    def text(self) -> str:
        """Both sources' figures, one line: what every output says of a conflict."""
        pairs = ", ".join(f"{t} {task_pct(self.repository, t)} vs "
                          f"{task_pct(self.leaderboard, t)}" for t in self.tasks)  # fmt: skip
        repo_avg = self.repository.average(LEADERBOARD_METRIC) * 100
        board_avg = self.leaderboard.average(LEADERBOARD_METRIC) * 100
        return (
            f"{self.row}: R2MED's two sources conflict: nDCG@10 ×100 differs beyond rounding "
            f"on {len(self.tasks)} of {len(self.leaderboard.tasks)} tasks ({pairs}); Avg "
            f"{repo_avg:.2f} in the {SOURCE_NAMES[REPOSITORY_KIND]} ({self.repository.spec}) "
            f"vs {board_avg:.2f} on the {SOURCE_NAMES[LEADERBOARD_KIND]} "
            f"({self.leaderboard.spec})"
        )


def task_pct(ref: Reference, task: str) -> str:
    """The row's nDCG@10 ×100 on ``task`` with every decimal its source wrote (18.376, 17.57)."""
    value = ref.figure(task, LEADERBOARD_METRIC)
    return "-" if value is None else f"{value * 100:.{ref.decimals - 2}f}"


def find_conflicts(
    repository: Mapping[str, Reference], leaderboard: Mapping[str, Reference]
) -> dict[str, Conflict]:
    """Every row both tables hold whose nDCG@10 disagrees (`agrees`) on a task both report."""
    found = {}
    for row, board in leaderboard.items():
        repo = repository.get(row)
        if repo is not None and (differ := differing(repo, board)):
            found[row] = Conflict(repo, board, differ)
    return found


def conflicts() -> dict[str, Conflict]:
    """The conflicts between the shipped repository and leaderboard tables, by row id."""
    return find_conflicts(load_references(DEFAULT_TABLE), load_references(LEADERBOARD_TABLE))


def conflict_of(ref: Reference) -> Conflict | None:
    """The conflict a shipped row is part of, or None (a row of another table: None)."""
    if ref.table not in TABLES:
        return None
    return conflicts().get(ref.row)


# ---- a paper's table at odds with itself, and the rows it repeats from R2MED ---------------


@dataclass(frozen=True)
class Inconsistency:
    """A row whose printed cells disagree with each other: shown, never resolved."""

    ref: Reference
    cell: str  # the cell at odds: "Avg" or "Size"
    printed: str  # as printed: "35.19", "8B"
    other: str  # what the row's other cells say: "35.215" (its tasks' mean), "4B" (its name)

    @property
    def label(self) -> str:
        """A figure at odds with the row's own figures is a conflict; a size, a note."""
        return "CONFLICT" if self.cell == "Avg" else "NOTE"

    def brief(self) -> str:
        """The note column's words: "CONFLICT: Avg 35.19 printed, its tasks' mean 35.215"."""
        said = "its tasks' mean" if self.cell == "Avg" else "its name says"
        return f"{self.label}: {self.cell} {self.printed} printed, {said} {self.other}"

    def text(self) -> str:
        """Both figures and where each comes from, one line."""
        if self.cell == "Avg":
            apart = Decimal(self.other) - Decimal(self.printed)
            return (
                f"{self.ref.row}: {self.ref.source_name} prints Avg {self.printed}, the mean "
                f"of its {len(self.ref.tasks)} printed task figures is {self.other} "
                f"({abs(apart)} apart; rounding allows {AVERAGE_TOLERANCE})"
            )
        return (f"{self.ref.row}: {self.ref.source_name} prints Size {self.printed} for "
                f"{self.ref.printed['Model']}, whose name says {self.other}")  # fmt: skip


def _pct_text(fraction: float) -> str:
    """A fraction as the figure ×100 it was read from, every decimal kept (35.215)."""
    return format((Decimal(repr(fraction)) * 100).normalize(), "f")


def inconsistencies(ref: Reference) -> list[Inconsistency]:
    """Where a row's printed cells disagree, found from the row: a printed Avg more than
    rounding allows (AVERAGE_TOLERANCE) from the mean of its 8 printed task figures, and a
    printed Size other than the one the model's name states."""
    found = []
    figures = [ref.figure(t, LEADERBOARD_METRIC) for t in R2MED_TASKS]
    if ref.published_average is not None and None not in figures:
        mean = sum(Decimal(repr(v)) for v in figures) / len(figures)  # type: ignore[arg-type]
        printed = Decimal(repr(ref.published_average))
        if abs(mean - printed) * 100 > AVERAGE_TOLERANCE:
            found.append(Inconsistency(ref, "Avg", _pct_text(ref.published_average),
                                       format((mean * 100).normalize(), "f")))  # fmt: skip
    size, model = ref.printed.get("Size"), ref.printed.get("Model", "")
    named = _SIZE_IN_NAME.search(model)
    if size and named and named.group(1) != size:
        found.append(Inconsistency(ref, "Size", size, named.group(1)))
    return found


@dataclass(frozen=True)
class Repeat:
    """A row a paper prints as R2MED's own figures, beside R2MED's row in one of its sources,
    compared figure by figure (the Avg too) by `agrees`: to the rounding of the coarser."""

    ref: Reference  # the paper's row
    original: Reference  # R2MED's row of the same id
    differ: tuple[str, ...]  # the tasks (and "Avg", last) whose figures differ

    def text(self) -> str:
        """Same, or each differing figure of both, in one line."""
        head = (f"{self.ref.row}: {self.ref.source_name} repeats R2MED's figures; against the "
                f"{self.original.source_name} ({self.original.spec})")  # fmt: skip
        if not self.differ:
            return f"{head}: same on all {len(R2MED_TASKS)} tasks and the Avg, to 2 decimals"
        pairs = ", ".join(f"{t} {repeat_pct(self.ref, t)} vs {repeat_pct(self.original, t)}"
                          for t in self.differ)  # fmt: skip
        return f"{head}: CONFLICT: differs on {len(self.differ)} figure(s) ({pairs})"


def repeat_pct(ref: Reference, task: str) -> str:
    """A figure of a repeat's comparison ×100: a task's with its source's decimals, or the Avg."""
    return pct(ref.average(LEADERBOARD_METRIC)) if task == "Avg" else task_pct(ref, task)


def differing(a: Reference, b: Reference, with_average: bool = False) -> tuple[str, ...]:
    """The R2MED tasks (and "Avg", last, when ``with_average``) whose nDCG@10 both rows
    report and which disagree beyond rounding (`agrees`)."""
    differ = []
    for task in R2MED_TASKS:
        x, y = a.figure(task, LEADERBOARD_METRIC), b.figure(task, LEADERBOARD_METRIC)
        if x is not None and y is not None and not agrees(x, y):
            differ.append(task)
    if with_average and not agrees(a.average(LEADERBOARD_METRIC), b.average(LEADERBOARD_METRIC)):
        differ.append("Avg")
    return tuple(differ)


def repeats_of(ref: Reference) -> list[Repeat]:
    """A paper's row the paper marks as R2MED's own figures, compared with R2MED's row of the
    same id in each of R2MED's sources that holds it ([] for any other row)."""
    cells = ref.printed
    if ref.kind != PAPER_KIND or not repeats_r2med(cells["Group"], cells["Mark"]):
        return []
    originals = [rows[ref.row] for rows in map(load_references, TABLES) if ref.row in rows]
    return [Repeat(ref, o, differing(ref, o, with_average=True)) for o in originals]
