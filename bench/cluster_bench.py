"""A sweep's wall time on one process against a two-node Ray cluster on loopback.

    python bench/cluster_bench.py [--limit 5] [--max-tokens 64] [--model local/...] [--smoke]

Starts a Ray cluster of two one-CPU nodes on 127.0.0.2 (`ray start`, as tests/test_cluster.py
does; its start-up time printed apart), then runs the same sweep of 4 LLM-bound cells
(hyde, query2doc, lamer, search-r1 over BM25 on the bundled demo, the embedded model) twice,
each on a fresh LLM cache: in one process (`agents.sweep`, cells one after another) and on the
cluster (`agents.sweep --ray`, cells as Ray tasks), and prints both wall times and their
ratio. Every run.trec of the two must be the same, byte for byte (asserted). The cluster is
stopped at the end. Corpus encoding on the cluster is not measured: it does not exist yet.

``--smoke`` runs every step with 2 cells, 1 query per cell and 4 generated tokens, the smallest
model, in about two minutes; its figures measure nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HOST = "127.0.0.2"  # Ray keeps a loopback address other than 127.0.0.1 (docs/cluster.md)
AGENTS = ["hyde", "query2doc", "lamer", "search-r1"]  # LLM-bound cells

SWEEP = """\
output = "{output}"
cache_dir = "{cache}"
agents = {agents}
retrievers = ["bm25"]
models = ["{model}"]
datasets = ["demo"]

[options]
limit = {limit}
max_tokens = {max_tokens}
quiet = true

[ray]
resources = {{num_cpus = 1}}
"""


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=5, help="queries per cell (default 5)")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--model", default="local/qwen2.5-coder-0.5b")
    parser.add_argument(
        "--smoke", action="store_true", help="tiny sizes, about a minute: checks the script runs"
    )
    args = parser.parse_args(argv)
    agents = AGENTS[:2] if args.smoke else AGENTS
    if args.smoke:
        args.limit, args.max_tokens, args.model = 1, 4, "local/smollm2-135m"
        print("smoke run: tiny sizes, every step, figures meaningless")
    ray = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
    if ray is None:
        sys.exit("ray is needed: pip install -e '.[ray]'")
    with tempfile.TemporaryDirectory(prefix="cluster-bench-") as tmp:
        root = Path(tmp)
        env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "HF_HUB_OFFLINE": "1",
               "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO),
                                                           os.environ.get("PYTHONPATH")])),
               "R2MED_AGENTS_CACHE": str(root / "worker-cache")}  # fmt: skip
        print(
            f"{len(agents)} cells x {args.limit} demo queries, {args.model}, "
            f"{args.max_tokens} tokens; load average at start {os.getloadavg()[0]:.2f} (other "
            "processes skew the times)"
        )
        started = time.perf_counter()
        temp = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))
        address = start_cluster(ray, temp, env)
        print(f"  Ray start-up (two nodes): {time.perf_counter() - started:.1f} s")
        try:
            times = {}
            for where, flags in (("local", []), ("cluster", ["--ray", address])):
                sweep = root / f"{where}.toml"
                sweep.write_text(
                    SWEEP.format(
                        output=root / where,
                        cache=root / f"cache-{where}",
                        model=args.model,
                        limit=args.limit,
                        agents=json.dumps(agents),
                        max_tokens=args.max_tokens,
                    )  # fmt: skip
                )
                started = time.perf_counter()
                proc = subprocess.run(
                    [sys.executable, "-m", "agents.sweep", str(sweep), *flags],
                    cwd=REPO, env=env, capture_output=True, text=True,
                )  # fmt: skip
                times[where] = time.perf_counter() - started
                if proc.returncode != 0:
                    sys.exit(f"{where} sweep exited {proc.returncode}:\n{proc.stderr[-3000:]}")
                print(f"  sweep {where}: {times[where]:.1f} s")
        finally:
            subprocess.run([ray, "stop", "--force"], env=env, capture_output=True)
            shutil.rmtree(temp, ignore_errors=True)
        local = sorted((root / "local" / "runs").rglob("run.trec"))
        cluster = [root / "cluster" / p.relative_to(root / "local") for p in local]
        assert len(local) == len(agents) and all(
            a.read_bytes() == b.read_bytes() for a, b in zip(local, cluster, strict=True)
        ), "the cluster's rankings differ from the local sweep's"
        print("  rankings: every run.trec the same, local and on the cluster (asserted)")
        print(f"  ratio local / cluster: {times['local'] / times['cluster']:.2f}x")


def start_cluster(ray: str, temp: Path, env: dict[str, str]) -> str:
    """A two-node cluster on HOST; Ray's session files in ``temp``, which must be short: its
    sockets' paths must fit a Unix socket address (107 bytes)."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        port = s.getsockname()[1]
    common = ["--node-ip-address", HOST, "--num-cpus", "1", "--disable-usage-stats"]
    subprocess.run(
        [ray, "start", "--head", "--port", str(port), "--include-dashboard=false",
         "--temp-dir", str(temp), *common],
        env=env, check=True, capture_output=True,
    )  # fmt: skip
    subprocess.run(
        [ray, "start", "--address", f"{HOST}:{port}", *common],
        env=env, check=True, capture_output=True,
    )  # fmt: skip
    return f"{HOST}:{port}"


if __name__ == "__main__":
    main()
