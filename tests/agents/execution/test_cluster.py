"""Sweeps on a Ray cluster: two nodes on loopback, started and stopped here.

Ray turns 127.0.0.1 into the machine's routable address; the cluster runs on 127.0.0.2, which
it keeps when every node and the driver name it (retrievers.cluster.connect), so no test traffic
leaves the loopback.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from retrievers.cluster.connect import ClusterError, connect, resolve_address

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "bench"))
from cluster_bench import HOST, start_cluster, stop_cluster  # noqa: E402  (the bench's clusters)

# the ray command beside this Python (the venv's), else on PATH
RAY = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray") or "ray"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _started(root: Path, nodes: int = 2) -> Iterator[tuple[str, str]]:
    """HOST:PORT of a cluster of ``nodes`` one-CPU nodes, and its session folder; its workers'
    caches in a folder of their own (a worker shares no disk with the driver but by accident
    of this machine)."""
    # Ray's session files: a short folder, for its sockets' paths must fit a Unix socket
    # address (107 bytes), which a pytest folder may not leave room for
    temp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    # the workers import this checkout's code, as the driver does (cwd)
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": path,
           "R2MED_AGENTS_CACHE": str(root / "worker-cache"), "HF_HUB_OFFLINE": "1"}  # fmt: skip
    try:
        yield start_cluster(str(RAY), Path(temp), env, nodes), temp
    finally:
        stop_cluster(temp)
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster_root(tmp_path_factory) -> Path:
    """The folder of the module's cluster: its workers' cache folder is below it."""
    return tmp_path_factory.mktemp("ray")


@pytest.fixture(scope="module")
def cluster(cluster_root):
    """HOST:PORT of a two-node cluster, for the module."""
    pytest.importorskip("ray", reason="ray: pip install -e '.[ray]' (the test extra has it)")
    with _started(cluster_root) as (address, _):
        yield address


# --- refused in one line, before any work ----------------------------------------------------


def test_auto_without_ray_address_is_refused(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    with pytest.raises(ClusterError, match=r"^--ray auto: RAY_ADDRESS is not set"):
        resolve_address("auto")
    monkeypatch.setenv("RAY_ADDRESS", f"{HOST}:6379")
    assert resolve_address("auto") == f"{HOST}:6379"
    with pytest.raises(ClusterError, match="expected HOST:PORT"):
        resolve_address("nowhere")


def test_a_missing_ray_is_one_line_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # what an install without the extra has
    with pytest.raises(ClusterError) as refused:
        connect(f"{HOST}:{_free_port()}")
    assert str(refused.value).startswith(f"--ray {HOST}:") and "pip install -e '.[ray]'" in str(
        refused.value
    )


def test_an_address_where_no_cluster_answers_is_one_line_in_seconds(tmp_path):
    pytest.importorskip("ray", reason="ray: pip install -e '.[ray]' (the test extra has it)")
    address = f"{HOST}:{_free_port()}"
    sweep = _sweep_file(tmp_path, f"[ray]\naddress = '{address}'\n")
    proc = _sweep(sweep, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"error: --ray {address}: no Ray cluster answers there (Connection refused); start one "
        "with `ray start --head` or give its address"
    ]
    runs = tmp_path / "out" / "runs"
    assert not runs.exists() or not any(runs.iterdir())


# --- a sweep on the cluster ------------------------------------------------------------------


SWEEP = """\
output = "{output}"
cache_dir = "cache"
agents = ["hyde", "query2doc", "lamer", "none"]
retrievers = ["bm25"]
models = ["local/smollm2-135m"]
datasets = ["demo"]

[options]
limit = 3
max_tokens = 24
quiet = true
"""


def _sweep_file(folder: Path, extra: str = "", output: str = "out") -> Path:
    path = folder / f"{output}.toml"
    path.write_text(SWEEP.format(output=output) + extra)
    return path


def _sweep(path: Path, *flags: str, timeout: float = 900) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0"}
    return subprocess.run(
        [sys.executable, "-m", "agents.sweep", str(path), *flags],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def _usage(run_folder: Path) -> tuple[int, int]:
    usage = json.loads((run_folder / "demo" / "metrics.json").read_text())["usage"]
    return usage.get("calls", 0), usage.get("cached_calls", 0)


@pytest.mark.slow
def test_a_sweep_on_the_cluster_equals_the_local_sweep_and_shares_one_cache(cluster, tmp_path):
    on_cluster = _sweep_file(tmp_path, textwrap.dedent("""
        [ray]
        resources = {num_cpus = 1}
    """), output="cluster")  # fmt: skip
    proc = _sweep(on_cluster, "--ray", cluster)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = sorted((tmp_path / "cluster" / "runs").iterdir())
    assert len(runs) == 4
    nodes = {line.rsplit("node ", 1)[1] for line in proc.stdout.splitlines() if "] " in line
             and "node " in line}  # fmt: skip
    assert len(nodes) == 2, proc.stdout  # both nodes ran cells
    # the local sweep on the same cache: every LLM answer is the cluster's (no call spent) and
    # every ranking the same, byte for byte
    local = _sweep(_sweep_file(tmp_path, output="local"))
    assert local.returncode == 0, local.stderr[-3000:]
    for run in runs:
        twin = tmp_path / "local" / "runs" / run.name
        for name in ("run.trec", "per_query.jsonl", "metrics.json"):
            if name == "metrics.json":
                continue  # its usage says where the answers came from
            assert (twin / "demo" / name).read_bytes() == (run / "demo" / name).read_bytes()
        calls, cached = _usage(twin)
        assert calls == cached, (run.name, calls, cached)
        config = json.loads((run / "config.json").read_text())
        assert config["runs_dir"] == str(tmp_path / "cluster" / "runs")  # the driver's paths
    # a rerun on the cluster resumes: nothing answered again, nothing changed
    before = {p: p.read_bytes() for p in (tmp_path / "cluster" / "runs").rglob("run.trec")}
    again = _sweep(on_cluster, "--ray", cluster)
    assert again.returncode == 0, again.stderr[-3000:]
    assert {p: p.read_bytes() for p in before} == before


def _cell_workers() -> list[int]:
    """Pids of the Ray workers running a cell now (Ray titles them ray::run_on_worker)."""
    out = subprocess.run(["ps", "-eo", "pid=,args="], capture_output=True, text=True).stdout
    return [int(line.split()[0]) for line in out.splitlines() if "ray::run_on_worker" in line]


def _sweep_running(tmp_path: Path, cluster: str, output: str) -> tuple[subprocess.Popen, Path]:
    """A cluster sweep started in the background, once a cell runs on a worker."""
    import time

    path = _sweep_file(tmp_path, "[ray]\nresources = {num_cpus = 1}\n", output=output)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "agents.sweep", str(path), "--ray", cluster],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 300
    while not _cell_workers():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    return proc, path


@pytest.mark.slow
def test_a_killed_worker_fails_its_cell_alone_and_the_rerun_finishes_it(cluster, tmp_path):
    proc, path = _sweep_running(tmp_path, cluster, "killed")
    os.kill(_cell_workers()[0], signal.SIGKILL)
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 1, err[-3000:]
    failed = [line for line in err.splitlines() if "failed on the cluster" in line]
    assert len(failed) == 1, err[-3000:]
    assert failed[0].count("\n") == 0 and out.count("] ") == 4  # every cell reported
    assert "not finished:" in err
    finished = {p.parent.parent.name for p in (tmp_path / "killed" / "runs").rglob("run.trec")}
    assert len(finished) == 3
    again = _sweep(path, "--ray", cluster)
    assert again.returncode == 0, again.stderr[-3000:]
    assert len(list((tmp_path / "killed" / "runs").rglob("run.trec"))) == 4


# --- one run's queries on the cluster --------------------------------------------------------


def _run(tmp_path: Path, name: str, cache: str, *flags: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0"}
    cmd = [sys.executable, "-m", "agents.run", "--agent", "hyde", "--model",
           "local/smollm2-135m", "--limit", "4", "--max-tokens", "24", "--quiet", "--runs-dir",
           str(tmp_path / "runs"), "--run-name", name, "--cache-dir", str(tmp_path / cache),
           *flags]  # fmt: skip
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)


def _summary(run: Path) -> dict:
    """metrics.json but for what differs between any two runs: wall time, and whether the
    answers came from the cache."""
    data = json.loads((run / "demo" / "metrics.json").read_text())
    data.pop("seconds")
    kept = ("calls", "prompt_tokens", "completion_tokens")
    data["usage"] = {k: v for k, v in data["usage"].items() if k in kept}
    return data


@pytest.mark.slow
def test_a_runs_queries_on_the_cluster_give_the_local_run_byte_for_byte(cluster, tmp_path):
    local = _run(tmp_path, "local", "cache-local")
    assert local.returncode == 0, local.stderr[-3000:]
    remote = _run(tmp_path, "cluster", "cache-cluster", "--ray", cluster)
    assert remote.returncode == 0, remote.stderr[-3000:]
    here, there = tmp_path / "runs" / "local", tmp_path / "runs" / "cluster"
    for name in ("run.trec", "per_query.jsonl"):
        assert (here / "demo" / name).read_bytes() == (there / "demo" / name).read_bytes()
    assert _summary(here) == _summary(there)
    calls = json.loads((there / "demo" / "metrics.json").read_text())["usage"]["calls"]
    assert calls > 0
    # a new run on the cluster with the cluster run's cache: every answer from the driver's
    again = _run(tmp_path, "again", "cache-cluster", "--ray", cluster)
    assert again.returncode == 0, again.stderr[-3000:]
    rerun = tmp_path / "runs" / "again"
    usage = json.loads((rerun / "demo" / "metrics.json").read_text())["usage"]
    assert usage["calls"] == usage["cached_calls"] == calls
    assert (here / "demo" / "run.trec").read_bytes() == (rerun / "demo" / "run.trec").read_bytes()


@pytest.mark.slow
def test_ctrl_c_on_the_driver_cancels_the_clusters_tasks(cluster, tmp_path):
    import time

    proc, _ = _sweep_running(tmp_path, cluster, "stopped")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err
    deadline = time.monotonic() + 60
    while _cell_workers():  # cancelled on the cluster too, not left to finish
        assert time.monotonic() < deadline, "cells still running after Ctrl-C"
        time.sleep(0.5)


# --- a corpus encoded on the cluster ---------------------------------------------------------

ENCODE = """
import hashlib, json, sys
from pathlib import Path

import numpy as np

from eval.datasets import load_folder
from retrievers.cluster.connect import connect
from retrievers.cluster.encode import _start, cluster_chunks
from retrievers.dense import EncoderSettings, build_index, load_encoder, resolve_instructions

address, out = sys.argv[1], Path(sys.argv[2])
corpus = load_folder("eval/demo").corpus
settings = EncoderSettings(dtype="fp32")
loaded = load_encoder(settings, progress=False)
instructions = resolve_instructions(loaded.model_id, "demo", "r2med")

def index(cache, chunks):
    return build_index(corpus, loaded.encoder_id, loaded.encode, instructions, out / cache,
                       progress=False, chunk_size=64, chunks=chunks)

ray = connect(address)
workers = _start(ray, settings, 6)
node = lambda self: __import__("ray").get_runtime_context().get_node_id()
nodes = ray.get([w.__ray_call__.remote(node) for w in workers])
for w in workers:
    ray.kill(w)
there = index("cluster", cluster_chunks(address, settings, loaded))
here = index("local", None)
# an encode interrupted after its second chunk: the chunk saved then is kept, not encoded again
key_path = there.cache_path.relative_to(out / "cluster")
saved = out / "resumed" / key_path / "chunks" / "64-000001.npy"
saved.parent.mkdir(parents=True)
np.save(saved, np.full((64, here.doc_embeddings.shape[1]), 7.0, dtype=np.float32))
resumed = index("resumed", cluster_chunks(address, settings, loaded))
print(json.dumps({
    "nodes": len(set(nodes)),
    "same": (there.cache_path / "embeddings.npy").read_bytes()
            == (here.cache_path / "embeddings.npy").read_bytes(),
    "same_key": there.cache_path.name == here.cache_path.name,
    "chunks_left": (there.cache_path / "chunks").exists(),
    "resumed_rows": int(np.isclose(resumed.doc_embeddings,
                                   resumed.doc_embeddings[:, :1]).all(1).sum()),
    "other_rows_same": int((resumed.doc_embeddings == here.doc_embeddings).all(1).sum()),
    "docs": len(corpus),
}))
"""


@pytest.mark.slow
def test_an_encode_on_the_cluster_equals_the_local_one_and_resumes(cluster, tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0"}
    proc = subprocess.run(
        [sys.executable, "-c", ENCODE, cluster, str(tmp_path)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["nodes"] == 2  # a worker on each node
    # the cluster's matrix is the one-process matrix, byte for byte, under the same cache key,
    # and its chunks are gone once the matrix is written
    assert seen["same"] and seen["same_key"] and not seen["chunks_left"]
    # the saved chunk's 64 rows are the ones read back (a constant row, normalised); every
    # other row is the cluster's encode, equal to the local one
    assert seen["resumed_rows"] == 64
    assert seen["other_rows_same"] == seen["docs"] - 64


@pytest.mark.slow
def test_a_dense_run_on_the_cluster_encodes_once_and_equals_the_local_run(
    cluster, cluster_root, tmp_path
):
    dense = ("--agent", "none", "--retriever", "dense", "--dtype", "fp32")
    local = _run(tmp_path, "local", "cache-local", *dense)
    assert local.returncode == 0, local.stderr[-3000:]
    remote = _run(tmp_path, "cluster", "cache-cluster", *dense, "--ray", cluster)
    assert remote.returncode == 0, remote.stderr[-3000:]
    here, there = tmp_path / "runs" / "local", tmp_path / "runs" / "cluster"
    for name in ("run.trec", "per_query.jsonl"):
        assert (here / "demo" / name).read_bytes() == (there / "demo" / name).read_bytes()
    [driver] = (tmp_path / "cache-cluster" / "dense").iterdir()
    [own] = (tmp_path / "cache-local" / "dense").iterdir()
    assert (driver / "embeddings.npy").read_bytes() == (own / "embeddings.npy").read_bytes()
    # the query workers were sent the driver's vectors, in their own cache folder
    placed = cluster_root / "worker-cache" / "dense" / driver.name
    assert (placed / "embeddings.npy").read_bytes() == (driver / "embeddings.npy").read_bytes()


def test_a_server_with_ray_and_no_dense_retriever_is_refused_in_one_line():
    proc = subprocess.run(
        [sys.executable, "-m", "retrievers.serve", "--retriever", "bm25", "--ray", "h:1"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: --ray: a cluster encodes a dense retriever's corpus; --retriever bm25 has none"
    ]


# --- what cannot be used, and what goes away --------------------------------------------------


def test_secrets_in_an_address_are_masked_in_every_line(monkeypatch):
    for given, shown in [
        ("ray://user:s3cret@127.0.0.2:1", "ray://user:***@127.0.0.2:1"),
        ("tok3n@127.0.0.2:1", "***@127.0.0.2:1"),
        ("ray://user:s3cret@nowhere", "ray://user:***@nowhere"),
    ]:
        with pytest.raises(ClusterError) as refused:
            connect(given)
        assert str(refused.value).startswith(f"--ray {shown}: ")
        assert "s3cret" not in str(refused.value) and "tok3n" not in str(refused.value)


@pytest.mark.slow
def test_a_driver_of_another_ray_version_is_one_line(cluster):
    script = (
        "import ray; ray.__version__ = '2.0.0'\n"  # what a driver of another Ray reports
        "from retrievers.cluster.connect import connect\n"
        f"connect({cluster!r})\n"
    )
    # through the commands' own error ladder (eval.plumbing.cli.command)
    proc = subprocess.run(
        [sys.executable, "-c", "import sys; from eval.plumbing.cli import command\n"
         f"def body():\n    exec({script!r}, {{}})\n    return 0\nsys.exit(command(body))"],
        cwd=REPO, env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}, capture_output=True,
        text=True, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr[-3000:]
    assert lines[0].startswith(f"error: --ray {cluster}: Version mismatch: The cluster was started")
    assert "Ray: 2.60.0" in lines[0] and "Ray: 2.0.0" in lines[0]


@pytest.mark.slow
def test_a_cluster_that_goes_away_stops_the_run_in_one_line_and_loses_nothing(tmp_path):
    import time

    pytest.importorskip("ray", reason="ray: pip install -e '.[ray]' (the test extra has it)")
    with _started(tmp_path, nodes=1) as (address, temp):
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "RAY_USAGE_STATS_ENABLED": "0"}
        cmd = [sys.executable, "-m", "agents.run", "--agent", "hyde", "--model",
               "local/smollm2-135m", "--max-tokens", "160", "--quiet", "--runs-dir",
               str(tmp_path / "runs"), "--run-name", "gone", "--cache-dir",
               str(tmp_path / "cache")]  # fmt: skip
        proc = subprocess.Popen(
            [*cmd, "--ray", address], cwd=REPO, env=env, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        records = tmp_path / "runs" / "gone" / "demo" / "queries.jsonl"
        deadline = time.monotonic() + 600
        while not (records.is_file() and records.read_text().count("\n") >= 2):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.2)
        stop_cluster(temp)  # the whole cluster, mid-run
        out, err = proc.communicate(timeout=300)
    assert proc.returncode == 2, err[-3000:]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err[-3000:]
    assert lines[0].startswith(f"error: --ray {address}: a query worker is gone (")
    assert lines[0].endswith("every finished query is kept: run the same command again to resume")
    kept = [json.loads(line) for line in records.read_text().splitlines()]
    assert len(kept) >= 2 and not any(r["error"] for r in kept)
    # the same run, here: it resumes from the kept queries and finishes
    local = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert local.returncode == 0, local.stderr[-3000:]
    again = [json.loads(line) for line in records.read_text().splitlines()]
    assert again[: len(kept)] == kept and len(again) == 15
