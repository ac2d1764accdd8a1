"""A run's numbers belong to its data and its folder: no stale metrics, no data loss.

Each case here was a way to get a wrong score or lose results on an earlier main: datasets
sharing a task folder, finished tasks trusted after their data changed, run names that
escape the runs dir, two processes on one folder, damaged result files, unusable folders,
numeric settings that silently run something else.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from filelock import FileLock

from agents.commands.run import main
from agents.execution.task_queries import read_records
from agents.llm import scripted
from tests.helpers import REPO

PASSAGE = "Statins inhibit HMG-CoA reductase."


@pytest.fixture
def env(tmp_path: Path, toy_dir: Path) -> dict:
    provider = scripted.install(lambda m, p: PASSAGE)
    return {
        "data": toy_dir,
        "runs": tmp_path / "runs",
        "cache": tmp_path / "cache",
        "provider": provider,
    }


def run(env: dict, *extra: str, agent: str = "none", name: str | None = "r") -> int:
    argv = [
        "--agent", agent, "--dataset", str(env["data"]), "--model", "scripted/x",
        "--runs-dir", str(env["runs"]), "--cache-dir", str(env["cache"]), "--quiet", *extra,
    ]  # fmt: skip
    if name is not None:
        argv += ["--run-name", name]
    return main(argv)


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.strip().splitlines() if not line.startswith("usage:")]
    # argparse prints its usage block first; what counts is the one error line
    lines = [line for line in lines if "error:" in line]
    assert len(lines) == 1, err
    return lines[0]


def metrics(env: dict, task: str = "toy", name: str = "r") -> dict:
    return json.loads((env["runs"] / name / task / "metrics.json").read_text())["metrics"]


def copy_task(src: Path, dst: Path) -> Path:
    dst.mkdir(parents=True)
    for name in ("corpus.jsonl", "query.jsonl", "qrels.jsonl"):
        shutil.copy(src / name, dst / name)
    return dst


def write_qrels(folder: Path, pairs: list[tuple[str, str, int]]) -> None:
    (folder / "qrels.jsonl").write_text(
        "".join(json.dumps({"q_id": q, "p_id": d, "score": s}) + "\n" for q, d, s in pairs)
    )


# --- stale or shared metrics -----------------------------------------------------------------


def test_datasets_with_the_same_folder_name_get_their_own_task_folders(env, tmp_path, capsys):
    a = copy_task(env["data"], tmp_path / "a" / "toy")
    b = copy_task(env["data"], tmp_path / "b" / "toy")
    write_qrels(b, [("q1", "d1", 1), ("q2", "d1", 1), ("q3", "d1", 1)])  # d1: never first
    env["data"] = f"{a},{b}"
    assert run(env) == 0
    out = capsys.readouterr().out
    assert metrics(env, "a-toy")["NDCG@10"] == pytest.approx(1.0)
    assert metrics(env, "b-toy")["NDCG@10"] < 0.7  # its own qrels, not the first task's
    assert "already finished" not in out
    assert "a-toy: NDCG@10 = 1.00000" in out


def test_the_same_dataset_twice_is_refused(env, capsys):
    env["data"] = f"{env['data']},{env['data']}"
    assert run(env) == 2
    assert "twice" in one_line_error(capsys)
    assert not env["runs"].exists()


def test_changed_qrels_recompute_the_metrics_without_answering_again(env):
    assert run(env, agent="hyde") == 0
    calls = env["provider"].calls
    assert metrics(env)["NDCG@10"] < 0.6  # the statins passage finds d4 for every query
    write_qrels(env["data"], [("q1", "d4", 1), ("q2", "d4", 1), ("q3", "d4", 1)])
    assert run(env, agent="hyde") == 0
    assert env["provider"].calls == calls  # the saved records were scored again, for free
    assert metrics(env)["NDCG@10"] == pytest.approx(1.0)


@pytest.mark.parametrize("part", ["corpus.jsonl", "query.jsonl"])
def test_a_changed_corpus_or_query_file_is_refused_on_resume(env, capsys, part):
    assert run(env) == 0
    before = (env["runs"] / "r" / "toy" / "queries.jsonl").read_bytes()
    path = env["data"] / part
    path.write_text(path.read_text().replace("Statins", "Fibrates").replace("cholesterol", "LDL"))
    capsys.readouterr()
    assert run(env) == 2
    message = one_line_error(capsys)
    what = "corpus" if part == "corpus.jsonl" else "queries"
    assert f"the {what} of task toy changed" in message and "--overwrite" in message
    assert (env["runs"] / "r" / "toy" / "queries.jsonl").read_bytes() == before
    assert run(env, "--overwrite") == 0  # and the way out it names works


def test_a_truncated_metrics_file_is_recomputed(env, caplog):
    assert run(env) == 0
    summary = env["runs"] / "r" / "toy" / "metrics.json"
    good = json.loads(summary.read_text())["metrics"]
    summary.write_bytes(summary.read_bytes()[:40])
    assert run(env) == 0
    assert "damaged" in caplog.text
    assert metrics(env) == good


def test_a_damaged_config_is_named(env, capsys):
    assert run(env) == 0
    config = env["runs"] / "r" / "config.json"
    config.write_bytes(config.read_bytes()[:30])
    capsys.readouterr()
    assert run(env) == 2
    message = one_line_error(capsys)
    assert str(config) in message and "damaged" in message
    assert run(env, "--overwrite") == 0


# --- run names and folders ---------------------------------------------------------------------


@pytest.mark.parametrize("name", [".", "..", "a/b", "/tmp/elsewhere", "", " r", "a\\b", "r\n"])
def test_a_run_name_must_be_one_folder_name(env, capsys, name):
    with pytest.raises(SystemExit) as info:
        run(env, name=name)
    assert info.value.code == 2
    assert "--run-name" in one_line_error(capsys)
    assert not env["runs"].exists()


def test_overwrite_deletes_only_the_runs_own_folder(env):
    assert run(env, name="keep") == 0
    assert run(env, name="r") == 0
    assert run(env, "--depth", "50", "--overwrite", name="r") == 0
    assert (env["runs"] / "keep" / "toy" / "metrics.json").is_file()
    assert json.loads((env["runs"] / "r" / "config.json").read_text())["eval"]["depth"] == 50


def test_a_second_process_on_the_same_run_folder_is_refused(env, capsys):
    folder = env["runs"] / "r"
    folder.mkdir(parents=True)
    with FileLock(folder / ".lock", timeout=0):  # what a running agents.run holds
        assert run(env) == 2
        assert "in use by another agents.run process" in one_line_error(capsys)
    assert not (folder / "toy").exists()
    assert run(env) == 0  # free again once the other one has finished


HELD_DRIVER = """
import asyncio, os, sys
from agents.llm import scripted
from agents.commands.run import main

class Held(scripted.ScriptedProvider):
    # answers only once the test has tried the second process
    async def acompletion(self, *args, **kwargs):
        while not os.path.exists(sys.argv[1]):
            await asyncio.sleep(0.05)
        return await super().acompletion(*args, **kwargs)

import litellm
provider = Held(lambda m, p: "Statins inhibit HMG-CoA reductase.")
litellm.custom_provider_map = [{"provider": "scripted", "custom_handler": provider}]
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.slow
def test_two_processes_at_once_pay_once(env, tmp_path):
    driver, go = tmp_path / "driver.py", tmp_path / "go"
    driver.write_text(HELD_DRIVER)
    argv = [
        sys.executable, str(driver), str(go), "--agent", "hyde", "--dataset", str(env["data"]),
        "--model", "scripted/x", "--runs-dir", str(env["runs"]), "--cache-dir",
        str(env["cache"]), "--run-name", "r", "--quiet",
    ]  # fmt: skip
    first = subprocess.Popen(argv, cwd=REPO, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not (env["runs"] / "r" / "toy" / "task.json").exists():  # first one is working
            assert first.poll() is None and time.monotonic() < deadline, "first run never began"
            time.sleep(0.05)
        second = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120)
    finally:
        go.touch()
    first_err = first.communicate(timeout=120)[1]
    assert first.returncode == 0, first_err
    assert second.returncode == 2, second.stderr
    assert "in use by another agents.run process" in second.stderr
    lines = (env["runs"] / "r" / "toy" / "queries.jsonl").read_text().splitlines()
    assert len(lines) == 3  # one record per query, not two


@pytest.mark.parametrize("flag", ["--runs-dir", "--cache-dir"])
def test_a_file_where_a_folder_should_be_is_one_line(env, capsys, tmp_path, flag):
    blocker = tmp_path / "blocker"
    blocker.write_text("not a folder")
    env["runs" if flag == "--runs-dir" else "cache"] = blocker / "sub"
    assert run(env) == 2
    message = one_line_error(capsys)
    assert flag in message and "is a file, not a folder" in message


def test_a_disk_that_fills_up_mid_run_keeps_the_records(env, capsys, monkeypatch):
    import errno

    import eval.runs

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", "metrics.json")

    real = eval.runs.TaskFolder.write_summary
    monkeypatch.setattr(eval.runs.TaskFolder, "write_summary", full)
    assert run(env, agent="hyde") == 2
    message = one_line_error(capsys)
    assert "no space left on the device" in message and "metrics.json" in message
    assert len(read_records(env["runs"] / "r" / "toy" / "queries.jsonl")) == 3
    monkeypatch.setattr(eval.runs.TaskFolder, "write_summary", real)
    calls = env["provider"].calls
    assert run(env, agent="hyde") == 0
    assert env["provider"].calls == calls  # nothing paid for was lost


def _can_mount() -> str | None:
    if shutil.which("unshare") is None:
        return "unshare not installed"
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"],
        capture_output=True,
        text=True,
    )
    return None if probe.returncode == 0 else f"cannot mount a tmpfs here: {probe.stderr.strip()}"


@pytest.mark.parametrize("how", ["ro", "size=8k"])
def test_a_read_only_or_full_file_system_is_one_line(env, tmp_path, how):
    """Real file systems (a read-only and an 8 kB tmpfs, in a private mount namespace)."""
    reason = _can_mount()
    if reason:
        pytest.skip(reason)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    argv = [
        sys.executable, "-m", "agents.run", "--agent", "none", "--dataset", str(env["data"]),
        "--runs-dir", str(mnt / "runs"), "--cache-dir", str(env["cache"]), "--quiet",
    ]  # fmt: skip
    script = f"mount -t tmpfs -o {how} tmpfs {mnt} && exec {' '.join(argv)}"
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", script], cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    [line] = [x for x in done.stderr.splitlines() if x.startswith("error:")]
    expected = "read-only file system" if how == "ro" else "no space left on the device"
    assert expected in line and str(mnt) in line


# --- numeric settings --------------------------------------------------------------------------

BAD_NUMBERS = [
    ("--limit", "0"), ("--limit", "-1"), ("--depth", "0"), ("--depth", "-5"),
    ("--k1", "-0.1"), ("--k1", "nan"), ("--b", "1.5"), ("--b", "-0.1"), ("--b", "inf"),
    ("--rate-limit", "0"), ("--rate-limit", "-2"), ("--max-tokens", "0"),
    ("--temperature", "-0.5"), ("--temperature", "nan"), ("--concurrency", "0"),
    ("--top-k", "0"), ("--max-turns", "0"), ("--max-searches", "-1"), ("--limit", "2.5"),
]  # fmt: skip


@pytest.mark.parametrize("flag, value", BAD_NUMBERS)
def test_a_numeric_setting_out_of_range_is_refused_up_front(env, capsys, flag, value):
    with pytest.raises(SystemExit) as info:
        run(env, flag, value, agent="search-o1")
    assert info.value.code == 2
    line = one_line_error(capsys)
    assert f"argument {flag}:" in line and repr(value) in line
    assert env["provider"].calls == 0 and not env["runs"].exists()


@pytest.mark.parametrize(
    "pair, expected",
    [
        ("max_turns=0", "max_turns must be at least 1"),
        ("max_refusals=-1", "max_refusals must be at least 0"),
        ("doc_chars=many", "expected an integer"),
        ("max_searches=-3", "max_searches must be at least 0"),
    ],
)
def test_a_bad_agent_option_is_refused_up_front(env, capsys, pair, expected):
    assert run(env, "--option", pair, agent="search-o1") == 2
    assert expected in one_line_error(capsys)
    assert env["provider"].calls == 0 and not env["runs"].exists()
