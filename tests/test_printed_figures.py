"""Every figure `python -m agents.run` prints, parsed strictly and checked against its source.

A run ends by printing, per task, ``<task>: NDCG@10 = X (BM25 without LLM: Y); LLM calls N (C
cached), tokens P in / Q out`` and the line saying what X averages over, then the leaderboard
(×100, 2 decimals) and ``wall time ...; run folder: ...``. Each line is read by its own regex
(an unknown or misformatted line fails), and each figure is checked against what it reports:
X against the task's metrics.json and against pytrec_eval run here on the saved run.trec and
the qrels, Y against a BM25 run (``--agent none``) of the same task, N/C/P/Q against the sum
of the saved records' usage, the leaderboard's cells against metrics.json. So a figure printed
in another's place, or from the wrong field, fails.

`parse_report` and `check_report` serve tests/test_main_command.py too.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytrec_eval

from agents.llm import scripted
from agents.run import main
from eval import runs

TASK_LINE = re.compile(
    r"(?P<task>\S+): NDCG@10 = (?P<ndcg>[01]\.\d{5})"
    r"(?: \(BM25 without LLM: (?P<bm25>[01]\.\d{5})\))?"
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
WALL = re.compile(r"wall time (?P<seconds>\d+\.\d) s; run folder: (?P<folder>.+)")


@dataclass
class TaskFigures:
    ndcg: str  # as printed: compared as text with metrics.json's value at 5 decimals
    bm25: str | None
    usage: tuple[int, int, int, int] | None  # calls, cached, prompt tokens, completion tokens
    evaluated: int
    qrels: int
    missing: int


@dataclass
class Report:
    tasks: dict[str, TaskFigures]
    run_name: str  # the leaderboard row's name
    cells: dict[str, str]  # task -> its leaderboard cell
    average: str
    seconds: float
    folder: Path


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
        )  # fmt: skip
        i += 2
    assert tasks, f"no task line in {stdout!r}"
    rest = lines[i:]
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
        float(timing["seconds"]), Path(timing["folder"]),
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
    records = [r for d in stage_dirs for r in runs.read_records(runs.records_path(d)).values()]
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
        final = read_trec(runs.run_trec_path(task_dir / stages[-1] if stages else task_dir))
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


# --- the runs -----------------------------------------------------------------------------------

# a hypothetical passage per query: q1's about the wrong drug (nDCG 0), q2's right (1), q3's
# matching no document at all (an empty ranking, which counts 0 as a missing query)
PASSAGES = {
    "glucose": "Aspirin irreversibly inhibits platelet cyclooxygenase.",
    "platelets": "Aspirin acts on platelets by inhibiting cyclooxygenase.",
    "cholesterol": "Nothing here.",
}


def respond(messages: list[dict], params: dict) -> str:
    text = "\n".join(str(m.get("content") or "") for m in messages)
    if found := re.search(r"provide you with (\d+) passages", text):
        return " > ".join(f"[{i}]" for i in range(int(found[1]), 0, -1))  # reversed: worse
    return next(passage for word, passage in PASSAGES.items() if word in text)


@pytest.fixture
def tasks(toy_dir: Path) -> dict[str, Path]:
    """Two tasks whose BM25 figures differ: the toy, and a copy whose q1 and q3 are judged by
    other documents (so a column or the average taken from the other task fails)."""
    other = toy_dir.parent / "toy2"
    shutil.copytree(toy_dir, other)
    rows = [("q1", "d2", 1), ("q1", "d1", 2), ("q2", "d3", 2), ("q3", "d1", 1)]
    (other / "qrels.jsonl").write_text(
        "".join(json.dumps({"q_id": q, "p_id": d, "score": s}) + "\n" for q, d, s in rows)
    )
    return {"toy": toy_dir, "toy2": other}


def run_and_parse(tasks: dict[str, Path], tmp_path: Path, capsys, name: str, *extra: str):
    capsys.readouterr()
    started = time.perf_counter()
    code = main([
        "--dataset", ",".join(str(p) for p in tasks.values()), "--runs-dir", str(tmp_path / "runs"),
        "--cache-dir", str(tmp_path / "cache"), "--run-name", name, "--quiet", *extra,
    ])  # fmt: skip
    elapsed = time.perf_counter() - started
    out = capsys.readouterr()
    assert code == 0, out.err
    return parse_report(out.out), elapsed


def test_figures_of_bm25_of_an_llm_agent_and_of_a_rerank_stage(tasks, tmp_path, capsys):
    provider = scripted.install(respond)
    qrels = {name: read_qrels(path) for name, path in tasks.items()}
    runs_dir = tmp_path / "runs"

    bm25, elapsed = run_and_parse(tasks, tmp_path, capsys, "bm25", "--agent", "none")
    check_report(bm25, runs_dir / "bm25", qrels, [], None, elapsed)
    assert all(f.usage is None for f in bm25.tasks.values())  # no LLM: no usage printed
    baseline = {task: f.ndcg for task, f in bm25.tasks.items()}
    assert len(set(baseline.values())) == 2  # the two tasks tell their columns apart

    llm = ["--agent", "hyde", "--model", "scripted/test"]
    hyde, elapsed = run_and_parse(tasks, tmp_path, capsys, "hyde", *llm)
    check_report(hyde, runs_dir / "hyde", qrels, [], baseline, elapsed)
    for figures in hyde.tasks.values():
        # the figures a swap would confuse differ here, so a swap cannot pass
        assert figures.ndcg != figures.bm25
        assert figures.usage is not None and figures.usage[2] != figures.usage[3]
        assert figures.missing == 1  # q3's passage matches nothing
    # toy2 asks the same queries: its prompts are toy's, answered from the LLM cache
    assert [hyde.tasks[t].usage[:2] for t in tasks] == [(3, 0), (3, 3)]  # type: ignore[index]
    assert provider.calls == 3

    # all from the cache now: every call counted, and counted as cached
    again, elapsed = run_and_parse(tasks, tmp_path, capsys, "hyde-again", *llm)
    check_report(again, runs_dir / "hyde-again", qrels, [], baseline, elapsed)
    assert [again.tasks[t].usage for t in tasks] == [(3, 3, *hyde.tasks["toy"].usage[2:])] * 2
    assert provider.calls == 3

    # a rerank stage: X is the final stage's, the usage the agent's and the stage's
    stage = "llm-listwise"
    reranked, elapsed = run_and_parse(tasks, tmp_path, capsys, "reranked", *llm, "--rerank", stage)
    check_report(reranked, runs_dir / "reranked", qrels, [runs.stage_dir_name(1, stage)],
                 baseline, elapsed)  # fmt: skip
    windows = provider.calls - 3  # toy's windows; the agent's answers came from the cache
    assert windows > 0
    assert reranked.tasks["toy"].usage[:2] == (3 + windows, 3)  # type: ignore[index]
    assert reranked.tasks["toy"].ndcg != hyde.tasks["toy"].ndcg  # reversed windows: worse
