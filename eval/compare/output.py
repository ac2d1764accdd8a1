"""A comparison's files: report.md, leaderboard.md/.csv, deltas.csv, published.csv,
comparison.json, the charts (tasks.png, cost.png) and report.html."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict
from pathlib import Path

from eval.compare.markdown import comparison_markdown
from eval.compare.model import Comparison, Published, leaderboard_rows
from eval.plumbing.files import write_text
from eval.references.model import Reference
from eval.report import leaderboard_markdown


def write_comparison(
    c: Comparison, out: Path | str, plots: bool = True, html: bool = True
) -> list[Path]:
    """Write report.md, leaderboard.md/.csv, deltas.csv, comparison.json, the plots
    (tasks.png, cost.png) and report.html (`eval.compare.html`); the paths written."""
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
             f"{d.delta:.5f}", d.wins, d.ties, d.losses, d.p_text(".4g"), c.test]
            for label, by_task in c.deltas.items()
            for task, d in by_task.items()
        ],
    )  # fmt: skip
    put("comparison.json", json.dumps(_summary(c), indent=2) + "\n")
    if not (plots or html):
        return written
    # Imported here: matplotlib and jinja2 are heavy, and --no-plots --no-html needs neither.
    from eval.compare.plots import comparison_figures, save_png

    # One set of figures for both outputs: the PNGs and the page's SVGs are the same charts.
    figures = comparison_figures(c)
    if plots:
        for name, figure in figures.items():
            save_png(figure, out / f"{name}.png")
            written.append(out / f"{name}.png")
    if html:
        from eval.compare.html import write_report

        written.append(write_report(c, out / "report.html", figures))
    return written


def _summary(c: Comparison) -> dict:
    """comparison.json: the numbers of every table, unrounded."""
    return {
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
                "source": p.reference.source,
                "figures": p.figures,
                "avg": p.avg,
                "differences": p.differences,
            }
            for p in c.published
        ],
        "notes": c.notes,
    }


def _published_location(ref: Reference) -> str:
    """Where the row's figures are, as a browsable address: its folder in R2MED's repository
    at its commit, or the leaderboard's page."""
    return ref.location


def _published_cells(c: Comparison, p: Published, label: str) -> list[tuple[str, float, float]]:
    """(task or "Avg", the run's mean, the paper's) for every task the paper reports."""
    cells = [(t, c.means[label][t], v) for t, v in p.figures.items()]
    if p.avg is not None:
        run_avg = sum(c.means[label][t] for t in p.figures) / len(p.figures)
        cells.append(("Avg", run_avg, p.avg))
    return cells
