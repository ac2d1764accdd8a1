"""PNG charts of a comparison: per-task bars of each run, and cost against the metric.

matplotlib runs on its Agg backend, so charts are drawn without a display (servers, CI).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before pyplot: never try to open a window

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def plot_task_bars(
    means: Mapping[str, Mapping[str, float]],
    tasks: Sequence[str],
    metric: str,
    path: Path | str,
) -> None:
    """Grouped bars: one group per task (then Avg), one bar per run; values ×100."""
    labels = list(means)
    groups = [*tasks, "Avg"]
    width = 0.8 / max(1, len(labels))
    x = np.arange(len(groups))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(groups) * max(1, len(labels)) ** 0.5), 4.5))
    for i, label in enumerate(labels):
        values = [means[label][t] * 100 for t in tasks]
        values.append(sum(values) / len(values) if values else 0.0)
        ax.bar(x - 0.4 + width * (i + 0.5), values, width, label=label)
    ax.set_xticks(x, groups, rotation=30 if len(groups) > 4 else 0, ha="right")
    ax.set_ylabel(f"{metric} ×100")
    ax.set_title(f"{metric} per task")
    ax.legend(fontsize="small", loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=1)
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def plot_cost_vs_metric(
    points: Mapping[str, tuple[float, float]],
    xlabel: str,
    ylabel: str,
    path: Path | str,
) -> None:
    """A labelled scatter of (cost, metric) per run; the metric is shown ×100."""
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for label, (x, y) in points.items():
        ax.scatter([x], [y * 100])
        ax.annotate(
            label, (x, y * 100), fontsize="small", xytext=(4, 4), textcoords="offset points"
        )
    xs = [x for x, _ in points.values()]
    if xs and min(xs) > 0 and max(xs) / min(xs) > 100:
        ax.set_xscale("log")  # token counts of agents often span orders of magnitude
    elif xs and min(xs) >= 0 and max(xs) > 0:
        ax.set_xlim(left=0)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(f"{ylabel} ×100")
    ax.set_title(f"{ylabel} against cost")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
