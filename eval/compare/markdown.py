"""A comparison as markdown (report.md, and what ``python -m eval.compare`` prints)."""

from __future__ import annotations

from eval.compare.model import Comparison, Delta, leaderboard_rows
from eval.report import leaderboard_markdown

TEST_NAMES = {"fisher": "Fisher's randomization test", "student": "paired t-test"}


def published_markdown(c: Comparison) -> str:
    """Each run's difference from each published row, ×100, with where the figures are from."""
    out = [
        "## Against the published figures\n",
        f"Each run's {c.metric} minus the paper's, ×100, on every compared task the paper "
        "reports; Avg is the mean over those tasks on both sides (the notes say which are "
        "missing). Where the figures come from:\n",
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
            f"down; p is {TEST_NAMES[c.test]} (two-sided, paired per query"
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
        "\nCost is litellm's estimate, summed over queries; n/a when the model is not priced "
        "(a local, self-hosted or unknown model), a lower bound (>=) when only some queries "
        "could be. Cached calls cost $0.\n"
    )
    if c.notes:
        out.append("## Notes\n")
        out.extend(f"- {n}" for n in c.notes)
        out.append("")
    return "\n".join(out)


def _delta_cell(d: Delta) -> str:
    return f"{d.delta * 100:+.2f} (p={d.p_text()}; {d.wins}/{d.ties}/{d.losses})"


def _short(text: str, limit: int = 160) -> str:
    text = text if len(text) <= limit else text[: limit - 1] + "…"
    return text.replace("|", "\\|")
