"""Every script under bench/ runs in its --smoke mode and still prints its ratio lines.

The benchmarks are run by hand, rarely; without this a changed API breaks them unnoticed (as
bm25_bench.py's call to the BM25 fingerprint once did). A new script is picked up by the glob
and must accept --smoke; give it an entry in EXPECTED to check its own summary lines.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = sorted((REPO / "bench").glob("*.py"))
NUM = r"\d+(?:\.\d+)?"
RATIOS = rf"build +{NUM}x +scoring +{NUM}x +peak memory +{NUM}x"

# Lines each script's summary must contain (regexes, multiline). bm25s and rank_bm25 are
# dependencies (rank_bm25 of the package, bm25s of its test extra), so their rows must run;
# bm25s's numba backend needs numba, which neither installs, so that row may be skipped.
EXPECTED: dict[str, list[str]] = {
    "agent_bench.py": [
        rf"^  median: loop {NUM} ms/query = retrieval {NUM} \+ overhead {NUM} ms/query",
        rf"^  litellm\.acompletion -> provider directly +{NUM} ms/query \([+-]{NUM}\)",
        rf"^  2 +\d+ +{NUM} +{NUM} +{NUM} +{NUM} +{NUM}",  # scaling row at concurrency 2
        r"^  rerun \(fresh run folder, same cache\): 0 provider calls \(asserted\)",
        rf"^  ratio cached rerun / none: {NUM} \(loop\)",
    ],
    "bm25_bench.py": [
        rf"^  ours bm25q vs bm25s numpy +{RATIOS}",
        rf"^  ours lucene vs rank_bm25 +{RATIOS}",
        rf"^(  ours bm25q vs bm25s numba +{RATIOS}|skipped bm25s numba: numba not installed)",
        rf"^  >= 100x faster than rank_bm25: {NUM}x",
    ],
    "local_bench.py": [
        r"^smollm2-135m: 1 vs \d+ instances \(",
        rf"^  generation-heavy .*: 1 instance {NUM} s, \d+ instances {NUM} s: {NUM}x; outputs "
        r"identical \(asserted\)$",
        rf"^  prompt-heavy .*: {NUM}x; outputs identical \(asserted\)$",
        rf"^  lone call through the pool: prompt {NUM} tok/s \(one instance alone: {NUM}\)$",
        rf"^  chunk 16: prompt {NUM} tok/s one call alone on one instance, {NUM} tok/s 4 calls ",
        rf"^  main job, chunk 16, \d+ instance\(s\): reuse off {NUM} s, on {NUM} s: {NUM}x; "
        r"outputs identical \(asserted\)",
        rf"^  prompt tokens, chunk 16: sent [\d,]+, evaluated [\d,]+ \(\d+% restored\); floor "
        rf"{NUM} s .*: reuse on is {NUM}x the floor$",
    ],
    "llama_kernels.py": [
        r"^llama\.cpp build: .*AVX2.*; smollm2-135m, 2 prompts, 8 tokens$",
        r"^  threads: same outputs on 2 of 2 prompts$",  # the thread count changes nothing
    ],
    "startup_bench.py": [
        rf"^  reference: a process importing litellm \+ langgraph +{NUM} s",
        rf"^  agents\.run --help +{NUM} s +{NUM}x faster",
        rf"^  agents\.run --agent none \(demo, new run folder\) +{NUM} s +{NUM}x faster",
        rf"^  agents\.run --agent none \(demo, resumed\) +{NUM} s +{NUM}x faster",
        rf"^  agents\.trace \(a query of that run\) +{NUM} s +{NUM}x faster",
    ],
    "rerank_cost_bench.py": [
        r"^  first stage: bm25 \(agent none\) +0\.0 +0 +0 +0$",
        r"^  first stage: hyde +1\.0 +[\d,]+ +[\d,]+ +[\d,]+$",
        r"^  llm-pointwise depth 20 +20\.0 +[\d,]+ +[\d,]+",  # one call per passage
        r"^  llm-listwise depth 20 +1\.0 +[\d,]+ +[\d,]+",  # one window of 20
        rf"^  ratio insertrank depth 20 / hyde prompt tokens: {NUM}",
        # ReasonRank: one window of 20 whose call is sent its 3,172-token budget
        r"^  reasonrank depth 20 +1\.0 +[\d,]+ +[\d,]+ +3,172$",
        r"^  reasonrank depth 20 \(window 20, step 10\): 1 window per query \(asserted\)$",
        # Rank1: a call per passage of 8,192 tokens; each forced reply adds a 1-token call
        r"^  rank1 depth 20 +20\.0 +[\d,]+ +[\d,]+ +163,840$",
        r"^  rank1 depth 20, forced +40\.0 +[\d,]+ +[\d,]+ +163,860  > context$",
        r"^  rank1 depth 20: 20 judgements and 20 calls per query; 0 of all 40 replies forced "
        r"\(asserted\)$",
        r"^  rank1 depth 20, forced: 20 judgements and 40 calls per query; 40 of all 40 replies "
        r"forced \(asserted\)$",
        rf"^  ratio rank1 depth 20, forced / hyde prompt tokens: {NUM}$",
        # GroupRank: 2 passes of 2 groups of 10, each call sent its 8,000 tokens
        r"^  grouprank depth 20 +4\.0 +[\d,]+ +[\d,]+ +32,000$",
        r"^  grouprank depth 20 \(groups of 10 every 10, 2 passes\): 4 calls per query "
        r"\(asserted\)$",
    ],
    # report.html timings need Debian's chromium; without it only the build rows are printed
    "report_bench.py": [
        rf"^  small \(1 x \d+ x 2\) +[\d,]+ +{NUM}(?: +(?:{NUM}|-)){{4}}$",
        rf"^  large \(\d+ x \d+ x \d+\) +[\d,]+ +{NUM}(?: +(?:{NUM}|-)){{4}}$",
        rf"^  ratio large / small: bytes {NUM}x, build {NUM}x$",
        rf"^(  ratio large / small: ready {NUM}x, open trajectory {NUM}x|"
        r"skipped browser timings: .+)$",
    ],
    "embed_bench.py": [
        rf"^fp32: {NUM} docs/s",
        rf"^bf16/fp32 speed ratio: {NUM}",
        rf"^top-10 overlap over 4 queries: mean {NUM}, min {NUM}; same top-1 {NUM}",
    ],
    "cluster_bench.py": [
        r"^  cores: (node 1 on core \d+, node 2 on core \d+, .+|not pinned .+)$",
        rf"^  Ray start-up \(two nodes\): {NUM} s$",
        rf"^  sweep local: {NUM} s$",
        rf"^  sweep cluster: {NUM} s$",
        r"^  rankings: every run.trec the same, local and on the cluster \(asserted\)$",
        rf"^  sweep ratio local / cluster: {NUM}x$",
        rf"^  encode local: {NUM} s \(300 docs\)$",
        rf"^  encode cluster: {NUM} s \(300 docs\)$",
        r"^  corpus matrix: the same bytes, local and on the cluster \(asserted\)$",
        rf"^  encode ratio local / cluster: {NUM}x$",
    ],
    "reasoning_embed_bench.py": [
        rf"^  ratio ours / FlagEmbedding: {NUM}x tokens/s$",
        r"^  vectors: max abs difference \S+ \(the same encoder, to float tolerance\)$",
        r"^corpus demo: 342 documents, [\d,]+ tokens after the 512-token cut",
    ],
    # served rankings equal to in-process ones and the faults are asserted in the script
    "serve_bench.py": [
        rf"^  bm25 /search 4 clients: {NUM} q/s, p50 {NUM} ms, p99 {NUM} ms, {NUM}x in-process$",
        rf"^  dense /search 4 clients: {NUM} q/s, p50 {NUM} ms, p99 {NUM} ms, {NUM}x in-process$",
        rf"^  dense batching gain at 4 clients: {NUM}x \(max-batch 64 vs 1\)$",
        r"^  dense --max-batch 64 vs in-process: same top 10 for \d+ of \d+ searches",
        r"^  fault garbage JSON: refused, .+$",
        r"^  fault query of [\d,]+ characters: refused, .*--max-query-chars",
        r"^  faults: \d+ searches of 4 other clients during them, all identical to in-process",
        rf"^  hostile none: normal client p50 {NUM} ms, p99 {NUM} ms",
        rf"^  hostile huge chunked body .*: normal client p50 {NUM} ms, p99 {NUM} ms .*"
        r"\(--max-body-bytes\)$",
        rf"^  hostile [\d,]+ idle and half-open connections: normal client p50 {NUM} ms, p99 "
        rf"{NUM} ms .*: (\d+) of \1 closed by the server$",
        rf"^  hostile 1,000 queries x k 1,000: normal client p50 {NUM} ms, .*\(--max-hits\)$",
        r"^  SIGTERM: every server exited 0 \(bm25, dense, dense-1\)",
    ],
}
# the cluster's script starts Ray and cold workers on top of two sweeps and two encodes
TIMEOUTS = {"cluster_bench.py": 600}
GENERIC = rf"{NUM}x\b|ratio[^\n]*: {NUM}"  # for a script without an entry above


def test_expected_names_only_existing_scripts():
    assert set(EXPECTED) <= {p.name for p in SCRIPTS}


@pytest.mark.slow
@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_bench_smoke(script: Path, tmp_path: Path):
    env = {
        **os.environ,
        "R2MED_AGENTS_CACHE": str(tmp_path / "cache"),
        "TMPDIR": str(tmp_path),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    # A timeout, so a bench that hangs (a child process that died unseen) fails instead.
    proc = subprocess.run(
        [sys.executable, str(script), "--smoke"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUTS.get(script.name, 180),
    )
    out = proc.stdout
    assert proc.returncode == 0, f"{script.name} --smoke exited {proc.returncode}:\n{proc.stderr}"
    assert "smoke run:" in out
    for pattern in EXPECTED.get(script.name, [GENERIC]):
        assert re.search(pattern, out, re.MULTILINE), f"no line matching {pattern!r} in:\n{out}"
    if script.name == "bm25_bench.py":
        assert "skipped bm25s numpy" not in out and "skipped rank_bm25" not in out
