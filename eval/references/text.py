"""The rows as text: ``list``'s table of every row's averages with its notes, ``show``'s
per-task figures of one row in each source, and the conflicts, inconsistencies and repeats
spelt out beside them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from eval.datasets import R2MED_TASKS
from eval.references.conflicts import (
    Conflict,
    Repeat,
    conflict_of,
    inconsistencies,
    repeat_pct,
    repeats_of,
    task_pct,
)
from eval.references.model import (
    AUTHORS_KIND,
    BASE_PREFIX,
    DEFAULT_TABLE,
    GAR_METHODS,
    KIND_OF_TABLE,
    LEADERBOARD_KIND,
    LEADERBOARD_METRIC,
    LEADERBOARD_PAGE,
    PAPER_KIND,
    REPOSITORY_KIND,
    RERANKER_PREFIX,
    SOURCE_NAMES,
    TABLES,
    Reference,
    metric_order,
    pct,
)
from eval.references.reading import reference, references_of
from eval.references.reasonembed import BASELINE_GROUPS, OWN_MODEL, PAPER_GROUPS, PAPER_MARKS

NOT_PUBLISHED = "not published"  # a task's cell of an average-only row
AVERAGE_ONLY_MARK = "(avg only)"


def printed_text(ref: Reference) -> str:
    """A paper's row's cells as printed, with what its section and mark mean there."""
    cells = ref.printed
    group, mark = cells["Group"], cells["Mark"]
    meaning = PAPER_MARKS[mark] if group in BASELINE_GROUPS or mark else OWN_MODEL
    return (f"Model {cells['Model']}, Group {group} (\"{PAPER_GROUPS.get(group, group)}\"), "
            f"Size {cells['Size']}, Mark {mark or 'none'} ({meaning})")  # fmt: skip


def _average_cell(ref: Reference | None, metric: str) -> str:
    """The row's average ×100 over all its tasks; "-" when a task lacks the metric (or there
    is no row), a "*" with the count when the row has fewer than R2MED's 8 tasks, and
    "(avg only)" when its source published the average alone."""
    if ref is None:
        return "-"
    try:
        text = pct(ref.average(metric))
    except ValueError:
        return "-"
    if ref.average_only:
        return f"{text} {AVERAGE_ONLY_MARK}"
    return text if len(ref.tasks) == len(R2MED_TASKS) else f"{text}* ({len(ref.tasks)} tasks)"


def _row_order(row: str) -> tuple[int, list[str]]:
    """Base rows, the methods in R2MED's order, then the rerankers; by name within each."""
    method, *rest = row.split("/")
    order = [BASE_PREFIX, *GAR_METHODS, RERANKER_PREFIX]
    return (order.index(method) if method in order else len(order)), [method, *rest]


def merged_rows(tables: Mapping[str, Mapping[str, Reference]]) -> dict[str, dict[str, Reference]]:
    """Row id -> table -> its row, over ``tables`` (name -> rows), in `_row_order`."""
    merged: dict[str, dict[str, Reference]] = {}
    for name, rows in tables.items():
        for row, ref in rows.items():
            merged.setdefault(row, {})[name] = ref
    return {row: merged[row] for row in sorted(merged, key=_row_order)}


def _source_line(name: str, rows: Mapping[str, Reference]) -> str:
    first = next(iter(rows.values()), None)
    if first is None:
        return f"{name}: no rows"
    if first.kind == AUTHORS_KIND:
        sources = ", ".join(sorted({ref.source_name for ref in rows.values()}))
        return (f"{len(rows)} row(s) its methods' authors published ({sources}; specs "
                f"{name}:<row>; show <row> quotes the line)")  # fmt: skip
    if first.kind == PAPER_KIND:
        return (f"{len(rows)} rows of {first.citation} (read from {first.location}; specs "
                f"{name}:<row>; show <row> gives each as printed)")  # fmt: skip
    where = LEADERBOARD_PAGE if first.kind == LEADERBOARD_KIND else (
        f"{first.repository} at {first.commit}, results/")  # fmt: skip
    return f"{len(rows)} rows from the {first.source_name} ({where}; specs {name}:<row>)"


def list_text(
    tables: Mapping[str, Mapping[str, Reference]],
    method: str | None,
    metric: str,
    found: Mapping[str, Conflict],
) -> str:
    """Every row of ``tables`` (name -> rows), one line each, with each source's Avg side by
    side; the ``found`` conflicts among them marked and spelt out below. R2MED's own two
    sources always have a column; the authors' table only where it holds a shown row."""
    merged = {r: by for r, by in merged_rows(tables).items()
              if method is None or r.split("/", 1)[0] == method}  # fmt: skip
    names = [n for n in tables if n in TABLES or any(n in by for by in merged.values())]
    heads = [_column(n, tables[n]) for n in names]
    lines = [f"| row | {' | '.join(heads)} | note |", "|---|" + "---:|" * len(names) + "---|"]
    shown, spelt = [], []
    for row, by in merged.items():
        cells = [_average_cell(by.get(n), metric) for n in names]
        notes = []
        if (c := found.get(row)) is not None:
            notes.append(f"CONFLICT: {len(c.tasks)} of {len(c.leaderboard.tasks)} tasks differ")
            shown.append(c)
        for name in names:
            if (ref := by.get(name)) is not None:
                brief, lines_of = _paper_notes(ref)
                notes += brief
                spelt += lines_of
        lines.append(f"| {row} | {' | '.join(cells)} | {'; '.join(notes)} |")
    lines.append("")
    lines += [_source_line(n, tables[n]) + "." for n in names]
    lines.append(f"{len(merged)} rows shown, Avg {metric} ×100.")
    if any(ref.average_only for by in merged.values() for ref in by.values()):
        lines.append(
            f"{AVERAGE_ONLY_MARK}: its source published the 8-task {LEADERBOARD_METRIC} "
            "average alone, no per-task figure."
        )
    if set(TABLES) <= set(names):
        lines.append(
            "A leaderboard Avg is the page's own, averaged before rounding: it may be 0.01 "
            "from the repository's where every task agrees."
        )
    lines += [f"CONFLICT: {c.text()}" for c in shown]
    lines += spelt
    return "\n".join(lines) + "\n"


def _column(name: str, rows: Mapping[str, Reference]) -> str:
    """A source's column head: its kind's name, or a paper's table's own ("ReasonEmbed
    Table 3"), since each paper is a source of its own."""
    kind = KIND_OF_TABLE.get(name, REPOSITORY_KIND)
    first = next(iter(rows.values()), None)
    return first.source_name if kind == PAPER_KIND and first is not None else SOURCE_NAMES[kind]


def paper_notes(ref: Reference) -> list[str]:
    """What a row's own printed cells and the R2MED rows it repeats say of it, a line each
    (CONFLICT, NOTE or REPEAT first): [] for a row of R2MED's own sources."""
    return _paper_notes(ref)[1]


def _paper_notes(ref: Reference) -> tuple[list[str], list[str]]:
    """A row's notes from its own printed cells and the R2MED rows it repeats: (the words of
    ``list``'s note column, the lines that spell them out below the table)."""
    found = inconsistencies(ref)
    brief = [i.brief() for i in found]
    spelt = [f"{i.label}: {i.text()}" for i in found]
    repeats = repeats_of(ref)
    if repeats:
        differ = [r.original.source_name for r in repeats if r.differ]
        brief.append(
            f"{ref.source_name} repeats R2MED's: "
            + (f"CONFLICT with the {' and the '.join(differ)}" if differ else "same")
        )
        spelt += [f"REPEAT: {r.text()}" for r in repeats]  # fmt: skip
    return brief, spelt


def show_text(ref: Reference, metrics: Sequence[str]) -> str:
    """One source's row: per task, the asked metrics it publishes, and their Avg ×100."""
    if ref.average_only:
        return _average_only_text(ref, metrics)
    held = [m for m in metrics if any(m in values for values in ref.tasks.values())]
    lines = [f"{ref.label}", *_source_lines(ref)]
    if not held:
        published = sorted({m for v in ref.tasks.values() for m in v}, key=metric_order)
        return "\n".join([*lines, f"it publishes none of {', '.join(metrics)}, only "
                          f"{', '.join(published)}"]) + "\n"  # fmt: skip
    lines += [
        "| task | " + " | ".join(held) + " |",
        "|---|" + "|".join(["---:"] * len(held)) + "|",
    ]
    for task, values in ref.tasks.items():
        cells = ["-" if values.get(m) is None else ref.format(values[m]) for m in held]
        lines.append(f"| {task} | " + " | ".join(cells) + " |")
    lines.append("| Avg ×100 | " + " | ".join(_average_cell(ref, m) for m in held) + " |")
    return "\n".join(lines) + "\n"


def _source_lines(ref: Reference) -> list[str]:
    """Where a row's figures come from; an authors' row adds the line quoted, the setup the
    figure is of and what its source leaves unsaid. The last line ends a paragraph."""
    lines = [f"from {ref.source}"]
    if ref.printed:
        lines.append(f"as printed: {printed_text(ref)}")
    if ref.quote:
        lines.append(f"which reads: {ref.quote}")
    lines += [f"{label}: {text}" for label, text in (("setup", ref.setup), ("note", ref.note))
              if text]  # fmt: skip
    lines[-1] += "\n"
    return lines


def _average_only_text(ref: Reference, metrics: Sequence[str]) -> str:
    """An average-only row: every R2MED task's cell says it is not published, and only the
    8-task nDCG@10 average is given; never a figure the source did not print."""
    lines = [ref.label, *_source_lines(ref)]
    if LEADERBOARD_METRIC not in metrics:
        return "\n".join([*lines, f"it publishes none of {', '.join(metrics)}, only its "
                          f"{LEADERBOARD_METRIC} average over R2MED's 8 tasks"]) + "\n"  # fmt: skip
    lines += [f"| task | {LEADERBOARD_METRIC} |", "|---|---:|"]
    lines += [f"| {task} | {NOT_PUBLISHED} |" for task in R2MED_TASKS]
    lines.append(f"| Avg ×100 | {_average_cell(ref, LEADERBOARD_METRIC)} |")
    return "\n".join(lines) + "\n"


def conflict_text(c: Conflict) -> str:
    """A conflict as a table: both sources' nDCG@10 ×100 on every task, the differing marked."""
    repo, board = c.repository, c.leaderboard
    lines = [
        f"CONFLICT: R2MED's two sources differ on {c.row}: nDCG@10 ×100 beyond rounding on "
        f"{len(c.tasks)} of {len(board.tasks)} tasks ({repo.spec} vs {board.spec})\n",
        f"| task | {repo.source_name} | {board.source_name} | |",
        "|---|---:|---:|---|",
    ]
    for task in R2MED_TASKS:
        mark = "differs" if task in c.tasks else ""
        lines.append(f"| {task} | {task_pct(repo, task)} | {task_pct(board, task)} | {mark} |")
    avgs = [_average_cell(r, LEADERBOARD_METRIC) for r in (repo, board)]
    lines.append(f"| Avg | {avgs[0]} | {avgs[1]} | |")
    return "\n".join(lines) + "\n"


def show_rows(spec: str, metrics: Sequence[str]) -> str:
    """``show``: a spec's one source, or a bare row id's every source, and its conflict."""
    if ":" in spec:
        refs = [reference(spec)]
    else:
        refs = references_of(spec)
        if not refs:
            reference(f"{DEFAULT_TABLE}:{spec}")  # refused, with the close matches
    blocks = [show_text(ref, metrics) for ref in refs]
    conflict = conflict_of(refs[0])
    if conflict is not None:
        blocks.append(conflict_text(conflict))
    for ref in refs:  # a paper's row: where it disagrees with itself, and what it repeats
        found = inconsistencies(ref)
        if found:
            blocks.append("".join(f"{i.label}: {i.text()}\n" for i in found))
        if repeats := repeats_of(ref):
            blocks.append(repeat_text(ref, repeats))
    return "\n".join(blocks)


def repeat_text(ref: Reference, repeats: Sequence[Repeat]) -> str:
    """A paper's row that repeats R2MED's, beside R2MED's row in each source that holds it:
    nDCG@10 ×100 figure by figure, each "same" or naming the sources it differs from."""
    originals = [r.original for r in repeats]
    lines = [
        f"REPEAT: {ref.source_name} prints {ref.row} as R2MED's own figures; figure by figure "
        "against R2MED's row (same: equal to the rounding of the coarser)\n",
        "| figure | " + " | ".join(o.source_name for o in originals)
        + f" | {ref.source_name} | |",
        "|---|" + "---:|" * (len(originals) + 1) + "---|",
    ]  # fmt: skip
    for figure in (*R2MED_TASKS, "Avg"):
        differ = [r.original.source_name for r in repeats if figure in r.differ]
        verdict = f"differs from the {' and the '.join(differ)}" if differ else "same"
        cells = [repeat_pct(o, figure) for o in (*originals, ref)]
        lines.append(f"| {figure} | {' | '.join(cells)} | {verdict} |")
    return "\n".join(lines) + "\n"
