"""Sweeps on a Ray cluster: two nodes on loopback, started and stopped here.

Ray turns 127.0.0.1 into the machine's routable address; the cluster runs on 127.0.0.2, which
it keeps when every node and the driver name it (retrievers.cluster.connect), so no test traffic
leaves the loopback.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from retrievers.cluster.connect import ClusterError, connect, resolve_address

REPO = Path(__file__).resolve().parents[1]
HOST = "127.0.0.2"
# the ray command beside this Python (the venv's), else on PATH
RAY = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray") or "ray"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """HOST:PORT of a two-node cluster, one CPU a node, its workers' caches in a folder of
    their own (a worker shares no disk with the driver but by accident of this machine)."""
    pytest.importorskip("ray", reason="ray: pip install -e '.[ray]' (the test extra has it)")
    root = tmp_path_factory.mktemp("ray")
    # Ray's session files: a short folder, for its sockets' paths must fit a Unix socket
    # address (107 bytes), which a pytest folder may not leave room for
    temp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    port = _free_port()
    # the workers import this checkout's code, as the driver does (cwd)
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": path,
           "R2MED_AGENTS_CACHE": str(root / "worker-cache"), "HF_HUB_OFFLINE": "1"}  # fmt: skip
    common = ["--node-ip-address", HOST, "--num-cpus", "1", "--disable-usage-stats"]
    head = [str(RAY), "start", "--head", "--port", str(port), "--include-dashboard=false",
            "--temp-dir", temp, *common]  # fmt: skip
    subprocess.run(head, env=env, check=True, capture_output=True, timeout=180)
    try:
        worker = [str(RAY), "start", "--address", f"{HOST}:{port}", *common]
        subprocess.run(worker, env=env, check=True, capture_output=True, timeout=180)
        yield f"{HOST}:{port}"
    finally:
        subprocess.run([str(RAY), "stop", "--force"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(temp, ignore_errors=True)


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
    import signal

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
    import signal
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
