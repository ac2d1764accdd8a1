"""Every figure `python -m agents.run` prints, parsed strictly and checked against its source.

A run ends by printing, per task, ``<task>: NDCG@10 = X (BM25 without LLM: Y); LLM calls N (C
cached), tokens P in / Q out`` and the line saying what X averages over, then the leaderboard
(×100, 2 decimals) and ``wall time ...; run folder: ...``. Each line is read by its own regex
(an unknown or misformatted line fails), and each figure is checked against what it reports:
X against the task's metrics.json and against pytrec_eval run here on the saved run.trec and
the qrels, Y against a BM25 run (``--agent none``) of the same task, N/C/P/Q against the sum
of the saved records' usage, the leaderboard's cells against metrics.json. So a figure printed
in another's place, or from the wrong field, fails.

The parsing and checking are tests/printed_report.py's, shared with
tests/agents/commands/test_main_job.py.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

import pytest

from agents.commands.run import main
from agents.llm import scripted
from eval import runs
from tests.printed_report import check_report, parse_report, read_qrels

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
