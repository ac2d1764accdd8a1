"""A sweep's and a corpus encode's wall times: one node's CPU against a two-node Ray cluster.

    python bench/cluster_bench.py [--limit 5] [--max-tokens 64] [--model local/...]
                                  [--agents A,B,...] [--docs 2048] [--smoke]

Starts a Ray cluster of two one-CPU nodes on 127.0.0.2 (`ray start`, as
tests/agents/execution/test_cluster.py does; its start-up time printed apart), then
1. runs the same sweep of 4 LLM-bound cells (hyde, query2doc, lamer, search-r1 over BM25 on
   the bundled demo, the embedded model; ``--agents`` for others) twice, each on a fresh LLM
   cache: in one process (`agents.sweep`, cells one after another) and on the cluster
   (`agents.sweep --ray`, cells as Ray tasks). Every run.trec of the two must be the same,
   byte for byte (asserted);
2. encodes a corpus of ``--docs`` documents (the demo's texts, numbered apart) with the
   default embedder in fp32 twice, each into a fresh cache: in one process
   (`retrievers.dense`) and on the cluster (``encode_on``: one worker per node; its workers'
   start and model load included). The two matrices must be the same, byte for byte
   (asserted). fp32, not the default bf16: a CPU without native bf16 (no avx512_bf16) runs
   bf16 several times slower, which would measure the CPU, not the cluster.
Both wall times and their ratio are printed for each. Only this cluster's processes are
stopped at the end.

One node's CPU against two nodes': where the machine has two cores or more and `taskset`,
each node is pinned to a core of its own and the local process to the first node's core, as
a cluster of two one-CPU machines would run (the embedded model's pool sizes itself by the
cores it may use). Unpinned, both would share this machine's cores and the ratio would
measure Ray's overhead only.

``--smoke`` runs every step with 2 cells, 1 query per cell, 4 generated tokens, the smallest
model and 300 documents (two chunks), in about three minutes; its figures measure nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HOST = "127.0.0.2"  # Ray keeps a loopback address other than 127.0.0.1 (docs/cluster.md)
# LLM-bound cells, of unequal lengths as a real grid's are (lamer ~3x query2doc here);
# --agents hyde,query2doc,lamer,reason,search-o1,search-r1,tool-search runs every LLM agent
AGENTS = ["hyde", "query2doc", "lamer", "search-r1"]

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
    parser.add_argument("--docs", type=int, default=2048, help="documents encoded (default 2048)")
    parser.add_argument(
        "--agents", default=",".join(AGENTS), help=f"the cells' agents (default {','.join(AGENTS)})"
    )
    parser.add_argument(
        "--smoke", action="store_true", help="tiny sizes, about a minute: checks the script runs"
    )
    args = parser.parse_args(argv)
    agents = args.agents.split(",")[:2] if args.smoke else args.agents.split(",")
    if args.smoke:
        args.limit, args.max_tokens, args.model, args.docs = 1, 4, "local/smollm2-135m", 300
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
        try:
            cores = pinned_cores()
            address = start_cluster(ray, temp, env, cores=cores)
            pin = ["taskset", "-c", str(cores[0])] if cores else []
            print(
                f"  cores: node 1 on core {cores[0]}, node 2 on core {cores[1]}, the local "
                f"process on core {cores[0]}"
                if cores
                else "  cores: not pinned (shared by both nodes and the local process)"
            )
            print(f"  Ray start-up (two nodes): {time.perf_counter() - started:.1f} s")
            times = {}
            for where, flags in (("local", []), ("cluster", ["--ray", address])):
                first = pin if where == "local" else []
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
                    [*first, sys.executable, "-m", "agents.sweep", str(sweep), *flags],
                    cwd=REPO, env=env, capture_output=True, text=True,
                )  # fmt: skip
                times[where] = time.perf_counter() - started
                if proc.returncode != 0:
                    sys.exit(f"{where} sweep exited {proc.returncode}:\n{proc.stderr[-3000:]}")
                print(f"  sweep {where}: {times[where]:.1f} s")
            local = sorted((root / "local" / "runs").rglob("run.trec"))
            cluster = [root / "cluster" / p.relative_to(root / "local") for p in local]
            assert len(local) == len(agents) and all(
                a.read_bytes() == b.read_bytes() for a, b in zip(local, cluster, strict=True)
            ), "the cluster's rankings differ from the local sweep's"
            print("  rankings: every run.trec the same, local and on the cluster (asserted)")
            print(f"  sweep ratio local / cluster: {times['local'] / times['cluster']:.2f}x")
            encoded = {}
            for where, on in (("local", None), ("cluster", address)):
                first = pin if where == "local" else []
                out = subprocess.run(
                    [*first, sys.executable, "-c", ENCODE, str(args.docs),
                     str(root / f"dense-{where}"), json.dumps(on)],
                    cwd=REPO, env=env, capture_output=True, text=True,
                )  # fmt: skip
                if out.returncode != 0:
                    sys.exit(f"{where} encode exited {out.returncode}:\n{out.stderr[-3000:]}")
                encoded[where] = json.loads(out.stdout.strip().splitlines()[-1])
                print(f"  encode {where}: {encoded[where]['seconds']:.1f} s ({args.docs} docs)")
            assert encoded["local"]["sha256"] == encoded["cluster"]["sha256"], (
                "the cluster's corpus matrix differs from the local one"
            )
            print("  corpus matrix: the same bytes, local and on the cluster (asserted)")
            ratio = encoded["local"]["seconds"] / encoded["cluster"]["seconds"]
            print(f"  encode ratio local / cluster: {ratio:.2f}x")
        finally:
            stop_cluster(temp)
            shutil.rmtree(temp, ignore_errors=True)


# one process: the corpus encoded by retrievers.dense, locally or with ray=ADDRESS; the model's
# load is outside the time, the cluster's workers' start and load inside it
ENCODE = """
import hashlib, json, sys, time
from pathlib import Path
from eval.datasets import load_folder
from retrievers.dense import build_dense

docs, cache, ray = int(sys.argv[1]), Path(sys.argv[2]), json.loads(sys.argv[3])
if ray is not None:
    from retrievers.cluster.encode import on_cluster
texts = list(load_folder("eval/demo").corpus.values())
corpus = {f"d{i}": f"{texts[i % len(texts)]} ({i})" for i in range(docs)}
build_dense({"warm": "up"}, dtype="fp32", progress=False)  # the model's load, untimed
started = time.perf_counter()
on = on_cluster(ray) if ray is not None else None
index = build_dense(corpus, dtype="fp32", cache_dir=cache, progress=False, encode_on=on)
seconds = time.perf_counter() - started
digest = hashlib.sha256(index.doc_embeddings.tobytes()).hexdigest()
print(json.dumps({"seconds": seconds, "sha256": digest}))
"""


def pinned_cores() -> list[int] | None:
    """Two cores of this process's, one per node, or None where there are fewer or no taskset."""
    cores = sorted(os.sched_getaffinity(0))
    return cores[:2] if len(cores) >= 2 and shutil.which("taskset") else None


def start_cluster(
    ray: str, temp: Path, env: dict[str, str], nodes: int = 2, cores: list[int] | None = None
) -> str:
    """HOST:PORT of a cluster of ``nodes`` one-CPU nodes on HOST, node i pinned to
    ``cores[i]`` when given; Ray's session files in ``temp``, which must be short: its sockets'
    paths must fit a Unix socket address (107 bytes). tests/agents/execution/test_cluster.py
    starts its clusters with this too."""

    def on(node: int) -> list[str]:
        return ["taskset", "-c", str(cores[node])] if cores else []

    with socket.socket() as s:
        s.bind((HOST, 0))
        port = s.getsockname()[1]
    common = ["--node-ip-address", HOST, "--num-cpus", "1", "--disable-usage-stats"]
    subprocess.run(
        [*on(0), ray, "start", "--head", "--port", str(port), "--include-dashboard=false",
         "--temp-dir", str(temp), *common],
        env=env, check=True, capture_output=True, timeout=180,
    )  # fmt: skip
    for node in range(1, nodes):
        subprocess.run(
            [*on(node), ray, "start", "--address", f"{HOST}:{port}", *common],
            env=env, check=True, capture_output=True, timeout=180,
        )  # fmt: skip
    return f"{HOST}:{port}"


def stop_cluster(temp: Path | str) -> None:
    """Kill every process of the cluster whose session folder is ``temp``, and their children
    (its workers, whose titles Ray rewrites). ``ray stop`` would stop every cluster here."""
    out = subprocess.run(["ps", "-ww", "-eo", "pid=,ppid=,args="], capture_output=True, text=True)
    rows = [line.split(None, 2) + [""] for line in out.stdout.splitlines()]
    doomed = {int(r[0]) for r in rows if str(temp) in r[2]} - {os.getpid()}
    while grown := {int(r[0]) for r in rows if int(r[1]) in doomed} - doomed - {os.getpid()}:
        doomed |= grown
    for pid in doomed:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


if __name__ == "__main__":
    main()
