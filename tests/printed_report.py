"""The figures `python -m agents.run` prints, parsed strictly and checked against their source.

`parse_report` reads a run's stdout line by line, each line by its own regex (an unknown or
misformatted line fails); `check_report` checks each figure against what it reports: nDCG@10
against the task's metrics.json and against pytrec_eval on the saved run.trec, the BM25 figure
against a BM25 run's, the usage against the saved records, the leaderboard against metrics.json.
Used by tests/agents/commands/test_run_printout.py and tests/agents/commands/test_main_job.py.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytrec_eval

from eval import runs

TASK_LINE = re.compile(
    r"(?P<task>\S+): NDCG@10 = (?P<ndcg>[01]\.\d{5})"
    r"(?: \(BM25 without LLM: (?P<bm25>[01]\.\d{5})\))?"
    # a run that reproduces a published row: the row's figure with its source
    # (agents.execution.published_row)
    r"(?: \((?P<paper>[^():;]+): (?P<paper_figure>[01]\.\d{4,5})(?:; [^()]+)?\))?"
    r"(?:; LLM calls (?P<calls>\d+) \((?P<cached>\d+) cached\), "
    r"tokens (?P<prompt>\d+) in / (?P<completion>\d+) out)?"
)
AVERAGING = re.compile(
    r"  averaged over (?P<evaluated>\d+) of (?P<qrels>\d+) qrels queries "
    r"\(missing=zero: (?P<missing>\d+) missing scored 0\); "
    r"ties=trec \(trec_eval's, doc id descending\)"
)
TABLE_ROW = re.compile(r"\| (?P<cells>[^|]+(?: \| [^|]+)*) \|")
PERCENT = re.compile(r"\d{1,3}\.\d{2}")
# the published row's average over the run's R2MED tasks, with its source
# (agents.execution.published_row)
PAPER_AVERAGE = re.compile(
    r"(?P<source>[^()]+) \((?P<row>[^()]+)\): avg nDCG@10 (?P<avg>\d{1,3}\.\d{2}) over the "
    r"same tasks(?:; .+)?"
)
WALL = re.compile(r"wall time (?P<seconds>\d+\.\d) s; run folder: (?P<folder>.+)")


@dataclass
class TaskFigures:
    ndcg: str  # as printed: compared as text with metrics.json's value at 5 decimals
    bm25: str | None
    usage: tuple[int, int, int, int] | None  # calls, cached, prompt tokens, completion tokens
    evaluated: int
    qrels: int
    missing: int
    paper: str | None = None  # the published row beside the task: "<source>, <row>"
    paper_figure: str | None = None  # its figure, as printed


@dataclass
class Report:
    tasks: dict[str, TaskFigures]
    run_name: str  # the leaderboard row's name
    cells: dict[str, str]  # task -> its leaderboard cell
    average: str
    seconds: float
    folder: Path
    paper_average: str | None = None  # the published row's average line, as printed


def parse_report(stdout: str) -> Report:
    """The figures of a run's stdout; any line out of place or of another form fails."""
    lines = stdout.splitlines()
    tasks: dict[str, TaskFigures] = {}
    i = 0
    while i < len(lines) and (line := TASK_LINE.fullmatch(lines[i])):
        averaging = AVERAGING.fullmatch(lines[i + 1]) if i + 1 < len(lines) else None
        assert averaging, f"{lines[i]!r} is not followed by the averaging line: {lines[i + 1 :]}"
        assert line["task"] not in tasks, f"task {line['task']} printed twice"
        usage = None
        if line["calls"] is not None:
            usage = tuple(int(line[k]) for k in ("calls", "cached", "prompt", "completion"))
        tasks[line["task"]] = TaskFigures(
            line["ndcg"], line["bm25"], usage,  # type: ignore[arg-type]
            *(int(averaging[k]) for k in ("evaluated", "qrels", "missing")),
            paper=line["paper"], paper_figure=line["paper_figure"],
        )  # fmt: skip
        i += 2
    assert tasks, f"no task line in {stdout!r}"
    rest = lines[i:]
    paper_average = None
    if len(rest) == 6:  # the published row's average, between the leaderboard and the time
        paper_average = rest.pop(4)
        assert PAPER_AVERAGE.fullmatch(paper_average), paper_average
    assert len(rest) == 5, f"expected the leaderboard, a blank line and the wall time: {rest}"
    header, rule, row, blank, wall = rest
    head = TABLE_ROW.fullmatch(header)
    assert head, header
    columns = head["cells"].split(" | ")
    assert columns[0] == "NDCG@10" and columns[-1] == "Avg", header
    assert rule == "|" + "|".join(["---"] + ["---:"] * (len(columns) - 1)) + "|", rule
    body = TABLE_ROW.fullmatch(row)
    assert body, row
    cells = body["cells"].split(" | ")
    assert len(cells) == len(columns), row
    assert all(PERCENT.fullmatch(c) for c in cells[1:]), row
    assert set(columns[1:-1]) == set(tasks), (columns, list(tasks))
    assert blank == ""
    timing = WALL.fullmatch(wall)
    assert timing, wall
    return Report(
        tasks, cells[0], dict(zip(columns[1:-1], cells[1:-1], strict=True)), cells[-1],
        float(timing["seconds"]), Path(timing["folder"]), paper_average,
    )  # fmt: skip


def read_qrels(task_dir: Path, limit: int | None = None) -> dict[str, dict[str, int]]:
    """The qrels a run of the task's first ``limit`` queries is scored on, read here from the
    R2MED layout (query.jsonl's order is the task's)."""
    queries = [json.loads(x)["id"] for x in (task_dir / "query.jsonl").read_text().splitlines()]
    qrels: dict[str, dict[str, int]] = {}
    for line in (task_dir / "qrels.jsonl").read_text().splitlines():
        row = json.loads(line)
        qrels.setdefault(row["q_id"], {})[row["p_id"]] = max(0, int(row["score"]))
    return {q: qrels[q] for q in queries[:limit] if q in qrels}


def read_trec(path: Path) -> dict[str, dict[str, float]]:
    run: dict[str, dict[str, float]] = {}
    for line in path.read_text().splitlines():
        qid, _, doc, _, score, _ = line.split()
        run.setdefault(qid, {})[doc] = float(score)
    return run


def pytrec_ndcg10(run: dict[str, dict[str, float]], qrels: dict[str, dict[str, int]]) -> float:
    """nDCG@10 as ``--missing zero`` scores it: pytrec_eval's per query, the mean over every
    qrels query, one without a ranked document counting 0 (eval/evaluate.py)."""
    scores = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(
        {q: docs for q, docs in run.items() if q in qrels and docs}
    )
    return sum(scores[q]["ndcg_cut_10"] if q in scores else 0.0 for q in qrels) / len(qrels)


def usage_of(stage_dirs: list[Path]) -> tuple[int, int, int, int]:
    """Calls, cached calls, prompt and completion tokens summed over the records of every stage."""
    keys = ("calls", "cached_calls", "prompt_tokens", "completion_tokens")
    records = [r for d in stage_dirs for r in runs.StageFolder(d).records().values()]
    return tuple(sum(r["usage"][k] for r in records) for k in keys)  # type: ignore[return-value]


def check_report(
    report: Report,
    run_dir: Path,
    qrels: dict[str, dict[str, dict[str, int]]],
    stages: list[str],
    baseline: dict[str, str] | None,
    elapsed: float,
) -> None:
    """Every figure of ``report`` against its source; ``qrels`` per task folder, ``stages`` the
    rerank stage folders in order, ``baseline`` the BM25 figure per task (None for agent none)."""
    assert report.folder == run_dir
    assert report.run_name == run_dir.name
    # printed to 0.1 s (a warm BM25 run on five documents prints 0.0): rounded up by 0.05 at most
    assert 0 <= report.seconds <= elapsed + 0.05
    assert set(report.tasks) == set(qrels)
    values = []
    for task, figures in report.tasks.items():
        task_dir = run_dir / task
        summary = json.loads((task_dir / runs.TASK_METRICS_FILE).read_text())
        value = summary["metrics"]["NDCG@10"]
        values.append(value)
        assert figures.ndcg == f"{value:.5f}", (task, figures.ndcg, value)
        final_stage = runs.StageFolder(task_dir / stages[-1] if stages else task_dir)
        final = read_trec(final_stage.run_trec_path)
        direct = pytrec_ndcg10(final, qrels[task])
        assert abs(float(figures.ndcg) - direct) <= 5e-6, (task, figures.ndcg, direct)
        unranked = sum(1 for q in qrels[task] if not final.get(q))
        assert (figures.evaluated, figures.qrels, figures.missing) == (
            len(qrels[task]), len(qrels[task]), unranked
        ), task  # fmt: skip
        if baseline is None:
            assert figures.bm25 is None and "bm25_baseline" not in summary
        else:
            assert figures.bm25 == baseline[task], (task, figures.bm25, baseline[task])
            assert figures.bm25 == f"{summary['bm25_baseline']['NDCG@10']:.5f}"
        usage = usage_of([task_dir, *(task_dir / s for s in stages)])
        assert figures.usage == (usage if usage[0] else None), (task, figures.usage, usage)
        assert report.cells[task] == f"{value * 100:.2f}", (task, report.cells[task], value)
    assert report.average == f"{sum(values) / len(values) * 100:.2f}"
