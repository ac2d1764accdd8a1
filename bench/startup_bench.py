"""Start-up time of the command-line tools, whole process, median of several runs.

    python bench/startup_bench.py [--runs 5] [--smoke]

Each row is a fresh interpreter running one command to its end. Heavy libraries (litellm,
LangGraph, torch, scipy.stats, matplotlib) are imported where they are first needed, so
`--help`, `agents.trace`, `eval.compare --help` and a run without an LLM do not pay for them.
The reference row is what every command paid before that change: a process that only
imports litellm and LangGraph (`python -c "import litellm, langgraph.graph"`), measured in
the same run; the target is under 1 s for each command row.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from itertools import count
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def timed(argv: list[str] | Callable[[], list[str]], env: dict[str, str]) -> float:
    argv = argv() if callable(argv) else argv
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr[-2000:]}")
    return seconds


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=5, help="runs per command (median reported)")
    p.add_argument("--smoke", action="store_true", help="one run each, for the test suite")
    args = p.parse_args()
    runs = 1 if args.smoke else args.runs
    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "R2MED_AGENTS_CACHE": str(Path(tmp) / "cache"),
               "LITELLM_LOCAL_MODEL_COST_MAP": "True"}  # fmt: skip
        runs_dir = Path(tmp) / "runs"
        none_run = [py, "-m", "agents.run", "--agent", "none", "--runs-dir", str(runs_dir),
                    "--run-name", "startup", "--quiet"]  # fmt: skip
        timed(none_run, env)  # builds the demo's BM25 index once; the rows below reuse it
        fresh = count()

        def fresh_run() -> list[str]:  # a new run folder each time: the whole run, not a resume
            return [*none_run[:-3], "--run-name", f"fresh-{next(fresh)}", "--quiet"]

        commands = {
            "agents.run --help": [py, "-m", "agents.run", "--help"],
            "agents.run --agent none (demo, new run folder)": fresh_run,
            "agents.run --agent none (demo, resumed)": none_run,
            "agents.trace (a query of that run)": [
                py,
                "-m",
                "agents.trace",
                str(runs_dir / "startup"),
                "q01",
            ],  # fmt: skip
            "eval.compare --help": [py, "-m", "eval.compare", "--help"],
            "eval.score --help": [py, "-m", "eval.score", "--help"],
        }
        reference = [py, "-c", "import litellm, langgraph.graph"]
        medians = {}
        for label, argv in {**commands, "reference: import litellm, langgraph": reference}.items():
            medians[label] = statistics.median(timed(argv, env) for _ in range(runs))
    ref = medians.pop("reference: import litellm, langgraph")
    print(f"start-up, whole process, median of {runs} run(s); python {sys.version.split()[0]}")
    if args.smoke:
        print("smoke run: 1 run per command; the figures are not a measurement")
    print(f"  {'reference: a process importing litellm + langgraph':<48} {ref:6.2f} s")
    for label, seconds in medians.items():
        verdict = "ok" if seconds < 1.0 else "OVER the 1 s target"
        print(f"  {label:<48} {seconds:6.2f} s  {ref / seconds:5.1f}x faster  {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
