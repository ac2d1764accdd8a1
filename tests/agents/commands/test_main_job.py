"""The README's main command, as a user types it, in a fresh process (offline, embedded model).

The README's command uses the default model (qwen2.5-coder-0.5b); here the smaller embedded
model keeps the test fast. Everything else is the zero-argument default: the bundled demo,
BM25, search-o1's default limits. What it prints is parsed strictly and every figure checked
against its source (tests/printed_report.py): nDCG@10 against metrics.json and against
pytrec_eval on the saved run.trec, the BM25 figure against a BM25 run of the same queries, the
usage against the saved records, the leaderboard against metrics.json.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agents.commands.run import main
from tests.printed_report import check_report, parse_report, read_qrels

REPO = Path(__file__).resolve().parents[3]
DEMO = REPO / "eval" / "demo"
LIMIT = 3

pytestmark = pytest.mark.slow  # a whole run of the embedded model in a fresh process


def test_search_o1_runs_offline_on_the_demo_and_prints_ndcg(tmp_path: Path, capsys, models_cache):
    # a cache of its own, with the session's joined embedded models linked in, not joined again
    cache = models_cache
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "R2MED_AGENTS_CACHE": str(cache)}
    args = ["--agent", "search-o1", "--model", "local/smollm2-135m", "--limit", str(LIMIT)]
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "agents.run", *args, "--runs-dir", str(tmp_path / "runs")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    elapsed = time.perf_counter() - started
    assert done.returncode == 0, done.stderr[-2000:]
    assert "demo [search-o1]" in done.stderr  # progress per query
    (run_dir,) = (tmp_path / "runs").iterdir()
    assert (run_dir / "demo" / "queries.jsonl").read_text().count("\n") == LIMIT

    # the same queries by BM25 alone, in this process: the figure printed beside nDCG@10
    assert main([
        "--agent", "none", "--limit", str(LIMIT), "--runs-dir", str(tmp_path / "bm25"),
        "--cache-dir", str(cache), "--quiet",
    ]) == 0  # fmt: skip
    bm25 = parse_report(capsys.readouterr().out)

    report = parse_report(done.stdout)
    baseline = {"demo": bm25.tasks["demo"].ndcg}
    check_report(report, run_dir, {"demo": read_qrels(DEMO, LIMIT)}, [], baseline, elapsed)
    figures = report.tasks["demo"]
    assert figures.usage is not None and figures.usage[0] >= LIMIT  # a call per query at least
    assert figures.usage[1] == 0  # a cache of its own: nothing was answered before
