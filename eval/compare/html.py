"""report.html: one self-contained page of a comparison, written by `eval.compare`.

The page holds the leaderboard (Δ and p-values against the baseline), the per-task and cost
charts (inline SVG, the same figures as the PNGs), every compared query's score in each run,
and each run's trajectory of each query: reasoning, searches with their documents marked by
the qrels, rerank windows and judgements, tool calls, the final top 10.

It opens from disk with no network: CSS, JavaScript (`report_assets/`) and data are inline.
The data goes in once, as JSON in ``<script id="report-data" type="application/json">``; the
script builds the query table from it and a trajectory only when its row is opened, so a
comparison of thousands of queries loads in seconds. To keep that JSON small, a trajectory
is slimmed as it is read (`slim_step`): an LLM step keeps its output and tool calls, not its
``messages`` (which repeat the whole conversation at every turn), a search its top 10, and
long texts are cut with a visible marker.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from eval.compare.markdown import TEST_NAMES
from eval.compare.model import Comparison, RunData, reference_run
from eval.plumbing.files import write_text
from eval.runs import QrelsError, TaskFolder

log = logging.getLogger(__name__)

ASSETS = Path(__file__).resolve().parents[1] / "report_assets"  # eval/report_assets
TEMPLATE = "report.html.j2"
TEXT_CHARS = 4000  # reasoning, queries: what a reader wants whole, cut past this
SHORT_CHARS = 1000  # tool arguments and results, replies, notes
HITS_CHARS = 300  # a search tool's result text: its hits are kept as documents already
TOP = 10  # documents kept per search and of the final ranking
# Step fields that are either shown through the fields slimmed from them or too large to keep.
_DROPPED = {
    "messages", "output", "tool_calls", "usage", "prompt", "request", "doc_ids", "scores",
    "order", "window", "permutation", "call_id", "seconds", "cached", "finish_reason",
}  # fmt: skip


def cut(text: Any, limit: int = TEXT_CHARS) -> str:
    """``text`` as a string, cut after ``limit`` characters with a marker saying how much went."""
    text = text if isinstance(text, str) else json.dumps(text, ensure_ascii=False)
    if len(text) <= limit:
        return text
    return text[:limit] + f" … [cut: {len(text) - limit} more characters]"


def _docs(ids: Sequence[Any], scores: Sequence[Any] | None) -> list[list[Any]]:
    """The top documents as [id, score] pairs (score None when the step has none)."""
    scores = list(scores or [])
    return [
        [str(d), _score(scores[i] if i < len(scores) else None)] for i, d in enumerate(ids[:TOP])
    ]


def _score(value: Any) -> float | None:
    """A score for the page: rounded, and None unless a finite number (JSON has no NaN, and
    a cross-encoder in half precision can produce one)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return round(float(value), 4)


def slim_step(step: Mapping[str, Any], query: str = "") -> dict[str, Any]:
    """One trace step as the page shows it (see the module docstring for what is dropped).

    A search for ``query`` itself (the query's text, which the page already holds) says so
    with ``"query_is_text": true`` instead of repeating it.
    """
    out: dict[str, Any] = {"node": str(step.get("node", "?"))}
    if "messages" in step or "output" in step:  # an LLM call
        out["output"] = cut(step.get("output") or "")
        usage = step.get("usage") or {}
        out["tokens"] = [usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)]
        if step.get("cached"):
            out["cached"] = True
        if step.get("finish_reason") not in (None, "stop", "tool_calls"):
            out["finish"] = str(step["finish_reason"])  # "length" and the like are news
        calls = step.get("tool_calls") or []
        if calls:
            out["calls"] = [
                {"name": str(c.get("name")), "arguments": cut(c.get("arguments", ""), SHORT_CHARS)}
                for c in calls
                if isinstance(c, Mapping)
            ]
    request = step.get("request")
    if isinstance(request, Mapping):
        searched = request.get("sparse_text") or request.get("query") or ""
        if query and searched == query:
            out["query_is_text"] = True
        else:
            out["query"] = cut(searched)
        expansion = request.get("expansion")
        if expansion and expansion != searched:
            out["expansion"] = cut(expansion)
    ids = step.get("doc_ids")
    if isinstance(step.get("window"), Sequence):  # a listwise window: ids in, order out
        out["window"] = list(step["window"])
        out["in"] = [str(d) for d in ids or []]
        out["out"] = [str(d) for d in step.get("order") or []]
    elif isinstance(ids, Sequence) and not isinstance(ids, str):
        out["docs"] = _docs(ids, step.get("scores"))
        out["found"] = len(ids)
        if isinstance(step.get("result"), str) and not step.get("error"):
            out["result"] = cut(step["result"], HITS_CHARS)
    for key, value in step.items():
        if key in _DROPPED or key in out or key == "doc_ids":
            continue
        if value is None or isinstance(value, bool | int):
            out[key] = value
        elif isinstance(value, float):
            out[key] = value if math.isfinite(value) else None
        elif isinstance(value, str) and value != step.get("output"):  # a reply is the output
            out[key] = cut(value, SHORT_CHARS)
        # other lists and objects are internals (e.g. a step's prompt hash): not shown
    return out


def slim_record(stage: str, record: Mapping[str, Any], query: str = "") -> dict[str, Any]:
    """One stage's record of a query (whose text is ``query``): its steps slimmed; the
    ranking is left to `trajectories`."""
    usage = record.get("usage") or {}
    return {
        "stage": stage,
        "error": cut(record["error"], SHORT_CHARS) if record.get("error") else None,
        "seconds": record.get("seconds"),
        "calls": usage.get("calls", 0),
        "tokens": [usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)],
        "steps": [slim_step(s, query) for s in record.get("steps") or [] if isinstance(s, Mapping)],
    }


def trajectories(run: RunData, task: str, texts: Mapping[str, str]) -> dict[str, dict]:
    """The trajectory in ``run`` of each query of ``texts`` (id: text): every stage's slimmed
    record, then the final top 10 (the last stage's ranking, as the task was scored)."""
    query_ids = list(texts)
    wanted = set(query_ids)
    stages: dict[str, list[dict[str, Any]]] = {q: [] for q in query_ids}
    ranking: dict[str, tuple[list[Any], int]] = {}
    for i, folder in enumerate(TaskFolder(run.path / task).stage_chain()):
        name = "agent" if i == 0 else folder.name
        found: dict[str, dict[str, Any]] = {}
        for qid, record in folder.iter_records():
            if qid not in wanted:
                continue
            found[qid] = slim_record(name, record, texts[qid])
            if record.get("ranking"):  # a failed stage may have none: show the one before
                ranking[qid] = record["ranking"][:TOP], len(record["ranking"])
        for qid, slim in found.items():
            stages[qid].append(slim)
    out = {}
    for qid in query_ids:
        top, ranked = ranking.get(qid, ([], 0))
        out[qid] = {
            "stages": stages[qid],
            "top": [[str(d), _score(s)] for d, s in top],
            "ranked": ranked,
        }
    return out


def _task_qrels(c: Comparison, task: str) -> tuple[dict[str, dict[str, int]], str | None]:
    """The task's qrels, from the first run (baseline first) whose dataset can be loaded."""
    order = [c.baseline, *(k for k in c.labels if k != c.baseline)]
    error = None
    for label in order:
        run = c.runs[label]
        try:
            return c.qrels.get(run.path, task, run.config), None
        except QrelsError as e:
            error = str(e)
    return {}, error


def report_data(c: Comparison) -> dict[str, Any]:
    """Everything the page's script renders: query rows, scores, qrels, trajectories."""
    notes = list(c.notes)
    rows = []
    qrels: dict[str, dict[str, dict[str, int]]] = {}
    traj: dict[str, dict[str, dict]] = {k: {} for k in c.labels}
    for task in c.tasks:
        query_ids = list(c.scores[c.baseline][task])
        task_qrels, error = _task_qrels(c, task)
        if error:
            log.warning("report.html: no relevance marks for %s: %s", task, error)
            notes.append(f"{task}: no relevance marks ({error})")
        # only what is shown: grades above 0, of the compared queries
        qrels[task] = {
            q: {d: g for d, g in task_qrels.get(q, {}).items() if g > 0} for q in query_ids
        }
        texts = {q: _query_text(c, task, q) for q in query_ids}
        for label in c.labels:
            traj[label][task] = trajectories(c.runs[label], task, texts)
        for qid in query_ids:
            scores = [round(c.scores[k][task][qid], 5) for k in c.labels]
            rows.append([task, qid, cut(texts[qid]), scores])
    return {
        "metric": c.metric,
        "labels": c.labels,
        "baseline": c.labels.index(c.baseline),
        "tasks": c.tasks,
        "rows": rows,
        "qrels": qrels,
        "traj": traj,
        "notes": notes,
    }


def _query_text(c: Comparison, task: str, qid: str) -> str:
    for label in [c.baseline, *c.labels]:
        record = c.runs[label].tasks[task].records.get(qid)
        if record and record.get("query"):
            return str(record["query"])
    return ""


def embed_json(data: Any) -> str:
    """JSON safe inside a ``<script>`` element: every ``<`` escaped, so no text in it (a
    query reading ``</script>``, an HTML comment opener) can end or confuse the element."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c")


def _leaderboard(c: Comparison) -> list[dict[str, Any]]:
    """The leaderboard's rows as the template shows them (means and Δ ×100)."""
    rows = []
    base_avg = c.avg(c.baseline)
    for label in c.labels:
        deltas = c.deltas.get(label, {})
        cells = []
        for task in c.tasks:
            d = deltas.get(task)
            cells.append(
                {
                    "mean": f"{c.means[label][task] * 100:.2f}",
                    "delta": f"{d.delta * 100:+.2f}" if d else "",
                    "p": d.p_text() if d else "",
                    "significant": bool(d and d.significant),
                }
            )
        overall = deltas.get("Overall")
        rows.append(
            {
                "label": label,
                "baseline": label == c.baseline,
                "cells": cells,
                "avg": f"{c.avg(label) * 100:.2f}",
                "delta": f"{(c.avg(label) - base_avg) * 100:+.2f}" if overall else "",
                "p": overall.p_text() if overall else "",
                "significant": bool(overall and overall.significant),
                "wtl": f"{overall.wins}/{overall.ties}/{overall.losses}" if overall else "",
            }
        )
    return rows


def _published(c: Comparison) -> list[dict[str, Any]]:
    """The published rows (``--reference``) as the leaderboard shows them, ×100, and each
    run's difference from each of them."""
    rows = []
    for p in c.published:
        avg = "" if p.avg is None else f"{p.avg * 100:.2f}"
        if avg and len(p.figures) < len(c.tasks):
            avg += "*"  # over fewer tasks than the runs' Avg, as in report.md
        differences = []
        for label in c.labels:
            diffs = p.differences[label]
            differences.append(
                {
                    "label": label,
                    "cells": [_difference(diffs.get(t)) for t in [*c.tasks, "Avg"]],
                }
            )
        rows.append(
            {
                "row": p.reference.row,
                "label": p.label,
                "source": p.reference.source,
                "cells": [f"{p.figures[t] * 100:.2f}" if t in p.figures else "-" for t in c.tasks],
                "avg": avg or "-",
                "differences": differences,
            }
        )
    return rows


def _difference(value: float | None) -> dict[str, str]:
    if value is None:
        return {"text": "-", "class": ""}
    text = f"{value * 100:+.2f}"
    direction = "up" if float(text) > 0 else "down" if float(text) < 0 else ""
    return {"text": text, "class": direction}


def render_report(c: Comparison, svgs: Mapping[str, str]) -> str:
    """The page's HTML for comparison ``c`` with the charts' inline SVGs by name."""
    from jinja2 import Environment, FileSystemLoader, StrictUndefined

    env = Environment(
        loader=FileSystemLoader(ASSETS),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    script = (ASSETS / "report.js").read_text(encoding="utf-8")
    if "</script" in script.lower():  # it would end the inline element early
        raise ValueError(f"{ASSETS / 'report.js'} must not contain '</script'")
    data = report_data(c)
    return env.get_template(TEMPLATE).render(
        c=c,
        test_name=TEST_NAMES[c.test],
        leaderboard=_leaderboard(c),
        published=_published(c),
        reference=reference_run(c),
        others=[k for k in c.labels if k != c.baseline],
        svgs=svgs,
        css=(ASSETS / "report.css").read_text(encoding="utf-8"),
        script=script,
        notes=data["notes"],
        data=embed_json(data),
    )


def write_report(c: Comparison, path: Path | str, figures: Mapping[str, Any]) -> Path:
    """Write report.html for ``c`` at ``path``; ``figures`` are its charts
    (`eval.compare.plots.comparison_figures`: "tasks", "cost"), inlined as SVG."""
    from eval.compare.plots import svg_text  # matplotlib: heavy, only when writing

    path = Path(path)
    svgs = {name: svg_text(figure, f"{name}-chart") for name, figure in figures.items()}
    write_text(path, render_report(c, svgs))
    return path
