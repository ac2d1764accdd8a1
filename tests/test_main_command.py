"""The README's main command, as a user types it, in a fresh process (offline, embedded model).

The README's command uses the default model (qwen2.5-coder-0.5b); here the smaller embedded
model keeps the test fast. Everything else is the zero-argument default: the bundled demo,
BM25, search-o1's default limits.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_search_o1_runs_offline_on_the_demo_and_prints_ndcg(tmp_path: Path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "R2MED_AGENTS_CACHE": str(tmp_path / "cache")}
    args = ["--agent", "search-o1", "--model", "local/smollm2-135m", "--limit", "3"]
    done = subprocess.run(
        [sys.executable, "-m", "agents.run", *args, "--runs-dir", str(tmp_path / "runs")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert "demo: NDCG@10 = " in out and "(BM25 without LLM: " in out
    assert "LLM calls " in out and "tokens " in out and "wall time " in out
    assert "run folder: " in out
    assert "demo [search-o1]" in done.stderr  # progress per query
    run_dir = next((tmp_path / "runs").iterdir())
    assert (run_dir / "demo" / "queries.jsonl").read_text().count("\n") == 3
