"""Charts of a comparison: per-task bars of each run, and cost against the metric.

Each chart is built once as a matplotlib Figure (`task_bars_figure`, `cost_figure`) and then
saved as PNG (`save_png`) and/or SVG text for the HTML report (`svg_text`), so the two never
drift apart. Figures are made without pyplot, each on its own Agg canvas: no display is
needed and no global figure list keeps them alive.

Legibility rules, because the first versions were hard to read:

* per-task bars: the y-axis is fitted to the values (differences of a few points are what
  runs differ by; bars from 0 hide them) and says where it starts when that is not 0; the
  reference run (the no-LLM baseline) is hatched, and a dashed line at its value crosses each
  task's group so every other bar reads against it.
* cost scatter: labels are wrapped, placed by adjustText away from each other and from the
  points, and kept inside the axes, whose margins leave them room.

matplotlib is heavy: `eval.compare.output` and `eval.compare.html` import this module only
when they draw, so reading and comparing runs never loads it.
"""

from __future__ import annotations

import io
import math
import re
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib
import numpy as np
from adjustText import adjust_text
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from eval.compare.model import Comparison, reference_run

REFERENCE_HATCH = "///"
LABEL_WIDTH = 26  # characters per line of a scatter label; run labels can be long
# An axis starting this close to 0 (as a fraction of the top value) starts at 0 instead:
# a cut that small hides nothing and would only make readers check the axis.
ZERO_SNAP = 0.25


def _figure(size: tuple[float, float]) -> Figure:
    fig = Figure(figsize=size)
    FigureCanvasAgg(fig)  # attaches itself: draw() and text measurement need a renderer
    return fig


def value_range(values: Sequence[float]) -> tuple[float, float]:
    """The y-range (×100 values) that shows ``values`` with room above and below them."""
    if not values:
        return 0.0, 1.0
    lo, hi = min(values), max(values)
    pad = max(0.2 * (hi - lo), 1.0)  # at least one point of room: flat data still shows bars
    bottom = lo - pad
    bottom = 0.0 if bottom <= ZERO_SNAP * hi else float(math.floor(bottom))
    return bottom, hi + pad


def task_bars_figure(
    means: Mapping[str, Mapping[str, float]],
    tasks: Sequence[str],
    metric: str,
    reference: str | None = None,
) -> Figure:
    """Grouped bars: one group per task (then Avg), one bar per run, values ×100.

    ``reference`` (a key of ``means``) is drawn hatched, with a dashed line at its value
    across each group.
    """
    labels = list(means)
    groups = [*tasks, "Avg"]
    width = 0.8 / max(1, len(labels))
    x = np.arange(len(groups))
    values = {}
    for label in labels:
        row = [means[label][t] * 100 for t in tasks]
        row.append(sum(row) / len(row) if row else 0.0)
        values[label] = row
    bottom, top = value_range([v for row in values.values() for v in row])

    fig_width = min(16.0, max(6.5, 0.3 * len(groups) * len(labels) + 2.5))
    fig = _figure((fig_width, 4.8))
    ax = fig.add_subplot()
    for i, label in enumerate(labels):
        is_reference = label == reference
        # Bars start at the axis bottom, not 0: a bar clipped by the axis would look the same,
        # but its patch would then claim a height nobody sees.
        heights = [max(v - bottom, 0.0) for v in values[label]]
        ax.bar(
            x - 0.4 + width * (i + 0.5),
            heights,
            width,
            bottom=bottom,
            label=f"{label} (no-LLM baseline)" if is_reference else label,
            hatch=REFERENCE_HATCH if is_reference else None,
            edgecolor="black" if is_reference else "none",
            linewidth=0.8 if is_reference else 0,
        )
    if reference in values:
        ax.hlines(
            values[reference], x - 0.45, x + 0.45, colors="black", linestyles="dashed", linewidth=1
        )
    ax.set_ylim(bottom, top)
    ax.set_xticks(x, groups, rotation=30 if len(groups) > 4 else 0, ha="right")
    ylabel = f"{metric} ×100"
    if bottom > 0:
        ylabel += f" (axis from {bottom:g}, not 0)"
    ax.set_ylabel(ylabel)
    ax.set_title(f"{metric} per task")
    ax.grid(axis="y", alpha=0.3)
    ax.set_axisbelow(True)
    fig.tight_layout()
    # The legend goes under the (rotated) task names, wherever they end.
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    names_bottom = min(t.get_window_extent(renderer).y0 for t in ax.get_xticklabels())
    below = ax.transAxes.inverted().transform((0, names_bottom))[1] - 0.04
    columns = max(1, min(len(labels), int(fig_width // 5)))  # long run labels: few per row
    ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, below), ncol=columns)
    return fig


def cost_figure(
    points: Mapping[str, tuple[float, float]],
    xlabel: str,
    ylabel: str,
    reference: str | None = None,
) -> Figure:
    """A labelled scatter of (cost, metric) per run; the metric is shown ×100.

    ``reference`` is drawn as a hollow black marker. Labels are placed by adjustText inside
    the axes and clear of each other; `label_boxes_overlap` checks the result.
    """
    fig = _figure((7.5, 5.2))
    ax = fig.add_subplot()
    xs = [x for x, _ in points.values()]
    ys = [y * 100 for _, y in points.values()]
    log_x = bool(xs) and min(xs) > 0 and max(xs) / min(xs) > 100
    for i, (label, (x, y)) in enumerate(points.items()):
        color = f"C{i}"  # the run's colour in the bar chart too
        if label == reference:
            style = {"s": 70, "facecolors": "none", "edgecolors": color, "linewidths": 2}
        else:
            style = {"s": 36, "color": color}
        ax.scatter([x], [y * 100], zorder=3, **style)
    if log_x:
        ax.set_xscale("log")  # token counts of agents often span orders of magnitude
    _fit_limits(ax, xs, ys, log_x)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(f"{ylabel} ×100")
    ax.set_title(f"{ylabel} against cost")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    texts = [
        ax.text(x, y * 100, _wrap(label), fontsize="small", ha="center", va="center")
        for label, (x, y) in points.items()
    ]
    if texts:
        fig.canvas.draw()  # adjustText measures the texts with the figure's renderer
        adjust_text(
            texts,
            x=xs,
            y=ys,
            ax=ax,
            ensure_inside_axes=True,
            expand=(1.15, 1.4),
            force_text=(0.3, 0.6),
            arrowprops={"arrowstyle": "-", "color": "gray", "lw": 0.5},
        )
    return fig


def _fit_limits(ax, xs: Sequence[float], ys: Sequence[float], log_x: bool) -> None:
    """Axis limits with wide margins: the labels need room around the points, inside."""
    if not xs:
        return
    lo, hi = min(ys), max(ys)
    span = max(hi - lo, 2.0)
    # A metric ×100 lies in [0, 100] and a cost is never negative: margins past those bounds
    # stay small so that the axes do not show impossible values.
    bottom = lo - 0.6 * span if lo - 0.6 * span >= 0 else min(lo, 0.0) - 0.08 * span
    top = hi + 0.6 * span if hi + 0.6 * span <= 100 else max(hi, 100.0) + 0.08 * span
    ax.set_ylim(bottom, top)
    if log_x:
        ax.set_xlim(min(xs) / 3, max(xs) * 3)
        return
    x_lo, x_hi = min(xs), max(xs)
    x_span = (x_hi - x_lo) or (abs(x_hi) or 1.0)
    left = x_lo - 0.45 * x_span
    if left < 0 <= x_lo:
        left = -0.12 * x_span
    ax.set_xlim(left, x_hi + 0.45 * x_span)


def _wrap(label: str) -> str:
    return "\n".join(textwrap.wrap(label, LABEL_WIDTH, break_on_hyphens=False)) or label


def label_boxes(fig: Figure) -> list:
    """The display-space boxes of the scatter's labels (texts placed in the axes by data)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ax = fig.axes[0]
    return [t.get_window_extent(renderer) for t in ax.texts]


def label_boxes_overlap(fig: Figure) -> bool:
    """Whether any two labels of a `cost_figure` overlap (used by the tests)."""
    boxes = label_boxes(fig)
    return any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1 :])


def save_png(fig: Figure, path: Path | str) -> None:
    fig.savefig(path, dpi=120, bbox_inches="tight")


def svg_text(fig: Figure, prefix: str) -> str:
    """The figure as an ``<svg>`` element to inline in HTML: no XML prolog or metadata, and
    every id prefixed with ``prefix`` so that two charts on one page never share an id
    (matplotlib names glyphs and clip paths alike in every file)."""
    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": prefix, "svg.fonttype": "path"}):
        fig.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    svg = buffer.getvalue()
    svg = svg[svg.index("<svg") :]
    svg = re.sub(r"<metadata>.*?</metadata>\s*", "", svg, flags=re.S)
    ids = set(re.findall(r'\bid="([^"]+)"', svg))
    svg = re.sub(r'\bid="([^"]+)"', lambda m: f'id="{prefix}-{m.group(1)}"', svg)
    svg = re.sub(
        r"#([^\s\"')]+)",
        lambda m: f"#{prefix}-{m.group(1)}" if m.group(1) in ids else m.group(0),
        svg,
    )
    return svg


# ---- a comparison's charts ----------------------------------------------------------------


def cost_points(c: Comparison) -> tuple[dict[str, tuple[float, float]], str]:
    """(label: (cost, Avg)) and the x-axis name: USD when every run was priced, else tokens."""
    if all(k.cost_known and k.calls for k in c.costs.values()):
        return {k: (c.costs[k].cost, c.avg(k)) for k in c.labels}, "estimated cost (USD)"
    return (
        {k: (float(c.costs[k].tokens), c.avg(k)) for k in c.labels},
        "LLM tokens (in + out)",
    )


def comparison_figures(c: Comparison) -> dict[str, Figure]:
    """The charts of ``c``: "tasks" (per-task bars) and "cost" (the scatter), the no-LLM
    baseline (`reference_run`) marked in both."""
    reference = reference_run(c)
    points, xlabel = cost_points(c)
    return {
        "tasks": task_bars_figure(c.means, c.tasks, c.metric, reference),
        "cost": cost_figure(points, xlabel, f"Avg {c.metric}", reference),
    }
