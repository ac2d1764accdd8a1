"""What a run survives: crashes, flaky and broken providers, shared or damaged caches, secrets.

The scripted LLM answers every query with a passage derived from the query's number, so any
two runs that answer the same queries must rank and score identically. Subprocess tests run
`DRIVER` (written to tmp_path): it installs the scripted provider inside the child process,
logs each provider call's query number to a file, then calls `agents.commands.run.main`.
See docs/reliability.md for the list of guarantees these tests stand behind.
"""

from __future__ import annotations

import gc
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import litellm
import pytest

import eval.plumbing.retry
from agents.commands.run import main
from agents.execution.task_queries import read_records
from agents.llm import scripted
from agents.shared.interrupt import MESSAGE
from eval.plumbing.cli import INTERRUPTED

N_QUERIES = 30
TASK = "gen"  # the generated task's folder name, hence its name in run folders

DRIVER = '''
"""Run agents.commands.run.main with a scripted LLM: python driver.py SPEC.json RUN-ARGS..."""
import json, os, re, sys

import litellm

import eval.plumbing.retry
from agents.llm import scripted
from agents.commands.run import main


def reply(i):
    # Each query's passage names its own topic and another's, so rankings are not trivial.
    return f"A passage on term{i} in organ{i * 3 % 7}, unlike term{(i + 5) % 30}."


def make_respond(spec):
    def respond(messages, params):
        text = " ".join(str(m.get("content")) for m in messages)
        i = int(re.search(r"qtok(\\d+)", text).group(1))
        with open(spec["log"], "a") as f:
            f.write(f"{i}\\n")
        failure = spec.get("fail", {}).get(str(i))
        if failure:  # a provider error quoting the environment back, e.g. the API key
            kind, message = failure
            error = getattr(litellm, kind)
            return error(message=message.format(**os.environ), llm_provider="scripted",
                         model="scripted/x")
        return reply(i)
    return respond


if __name__ == "__main__":
    spec = json.loads(open(sys.argv[1]).read())
    eval.plumbing.retry.BACKOFF = False
    scripted.install(make_respond(spec), spec.get("latency", 0.0))
    sys.exit(main(sys.argv[2:]))
'''


# --- helpers -----------------------------------------------------------------------------------


def make_task(folder: Path, n: int = N_QUERIES) -> Path:
    """An R2MED-layout task: query i ("qtok<i>") is about term<i>, judged relevant to doc i."""
    folder.mkdir(parents=True)
    docs = [f"term{i} acts in organ{i % 7} through pathway{i % 4}." for i in range(n)]
    docs += [f"A review of organ{i % 7} and pathway{i % 4}." for i in range(n)]
    rows = [{"id": f"d{i}", "text": t} for i, t in enumerate(docs)]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    queries = [{"id": f"q{i}", "text": f"qtok{i}: what does term{i} do?"} for i in range(n)]
    (folder / "query.jsonl").write_text("".join(json.dumps(r) + "\n" for r in queries))
    qrels = [{"q_id": f"q{i}", "p_id": f"d{i}", "score": 1} for i in range(n)]
    (folder / "qrels.jsonl").write_text("".join(json.dumps(r) + "\n" for r in qrels))
    return folder


@pytest.fixture
def task(tmp_path: Path) -> Path:
    return make_task(tmp_path / TASK)


@pytest.fixture
def driver(tmp_path: Path):
    """The driver script on disk, imported here too so in-process runs answer identically."""
    path = tmp_path / "driver.py"
    path.write_text(DRIVER)
    spec = importlib.util.spec_from_file_location("reliability_driver", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_args(data: Path, runs: Path, cache: Path, *extra: str) -> list[str]:
    return [
        "--agent", "hyde", "--dataset", str(data), "--model", "scripted/x",
        "--runs-dir", str(runs), "--cache-dir", str(cache), "--run-name", "r", "--quiet",
        *extra,
    ]  # fmt: skip


def spawn(
    driver, tmp_path: Path, name: str, spec: dict, args: list[str], **env
) -> subprocess.Popen:
    """Start the driver in a child process; its stdout and stderr go to logs/<name>.*"""
    spec_file = tmp_path / f"{name}.spec.json"
    spec_file.write_text(json.dumps(spec))
    logs = tmp_path / "logs"
    logs.mkdir(exist_ok=True)
    return subprocess.Popen(
        [sys.executable, driver.__file__, str(spec_file), *args],
        stdout=open(logs / f"{name}.out", "w"),
        stderr=open(logs / f"{name}.err", "w"),
        env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", **env},
    )


def finish(proc: subprocess.Popen, timeout: float = 300) -> int:
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise


def calls_per_query(log: Path) -> Counter:
    return Counter(int(line) for line in log.read_text().split()) if log.exists() else Counter()


def metrics(run_dir: Path) -> dict:
    return json.loads((run_dir / TASK / "metrics.json").read_text())


def rankings(run_dir: Path) -> dict:
    return {q: r["ranking"] for q, r in read_records(run_dir / TASK / "queries.jsonl").items()}


def reference_run(driver, task: Path, tmp_path: Path) -> Path:
    """An uninterrupted, fault-free run in-process, with its own run folder and cache."""
    scripted.install(driver.make_respond({"log": str(tmp_path / "ref.log")}))
    assert main(run_args(task, tmp_path / "ref-runs", tmp_path / "ref-cache")) == 0
    return tmp_path / "ref-runs" / "r"


# --- 1. crash and resume -----------------------------------------------------------------------


@pytest.mark.slow
def test_sigkilled_run_resumes_without_repeating_answered_queries(driver, task, tmp_path):
    log = tmp_path / "calls.log"
    # --cache off: only the runner's own bookkeeping can spare the answered queries a new call
    args = run_args(task, tmp_path / "runs", tmp_path / "cache", "--cache", "off")
    args += ["--concurrency", "1"]
    spec = {"log": str(log), "latency": 0.15}
    answers = tmp_path / "runs" / "r" / TASK / "queries.jsonl"

    proc = spawn(driver, tmp_path, "first", spec, args)
    deadline = time.monotonic() + 300  # the child may start slowly on a busy machine
    while not (answers.exists() and len(answers.read_text().splitlines()) >= 4):
        assert proc.poll() is None, "the run ended before it could be killed"
        assert time.monotonic() < deadline, "no answers appeared"
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    answered = {q for q, r in read_records(answers).items() if not r["error"]}
    assert 4 <= len(answered) < N_QUERIES  # killed mid-way

    assert finish(spawn(driver, tmp_path, "second", spec, args)) == 0
    calls = calls_per_query(log)
    assert {i: calls[i] for i in range(N_QUERIES) if f"q{i}" in answered} == {
        int(q[1:]): 1 for q in answered
    }
    # the query in flight at the kill may have been asked twice; no other one
    assert set(calls) == set(range(N_QUERIES)) and sum(calls.values()) <= N_QUERIES + 1

    ref = reference_run(driver, task, tmp_path)
    resumed = tmp_path / "runs" / "r"
    assert metrics(resumed)["metrics"] == metrics(ref)["metrics"]
    assert metrics(resumed)["failed"] == 0
    assert rankings(resumed) == rankings(ref)
    assert (resumed / TASK / "run.trec").read_text() == (ref / TASK / "run.trec").read_text()


def test_a_torn_last_line_costs_only_that_query(driver, task, tmp_path):
    """A crash mid-write leaves half a record; the resumed run's first record must not be
    glued onto it (it would be unreadable and its query answered again on every run)."""
    log = tmp_path / "calls.log"
    scripted.install(driver.make_respond({"log": str(log)}))
    args = run_args(task, tmp_path / "runs", tmp_path / "cache", "--cache", "off", "--limit", "6")
    assert main(args) == 0
    answers = tmp_path / "runs" / "r" / TASK / "queries.jsonl"
    lines = answers.read_text().splitlines(keepends=True)
    torn = json.loads(lines[-1])["query_id"]
    answers.write_text("".join(lines[:-1]) + lines[-1][:40])  # no newline: cut mid-record
    (answers.parent / "metrics.json").unlink()  # as if the crash came before the task ended

    assert main(args) == 0
    assert main(args) == 0  # a third run must find every record readable
    calls = calls_per_query(log)
    assert calls[int(torn[1:])] == 2 and sum(calls.values()) == 7
    assert set(read_records(answers)) == {f"q{i}" for i in range(6)}


# --- 2. transient faults -----------------------------------------------------------------------


def flaky(respond, faults: Counter):
    """`respond`, but ~30% of calls fail with a retryable error, deterministically (seeded by
    the prompt and the attempt, so concurrency cannot change which calls fail). A prompt fails
    at most 3 times in a row, well within the client's 6 attempts."""
    import random

    attempts: Counter = Counter()
    kinds = [
        lambda: litellm.RateLimitError(message="429", llm_provider="scripted", model="x"),
        lambda: litellm.Timeout(message="timed out", model="x", llm_provider="scripted"),
        lambda: litellm.InternalServerError(message="502", llm_provider="scripted", model="x"),
    ]

    def wrapped(messages, params):
        prompt = json.dumps(messages)
        attempts[prompt] += 1
        rng = random.Random(f"{prompt}:{attempts[prompt]}")
        if attempts[prompt] <= 3 and rng.random() < 0.3:
            error = rng.choice(kinds)()
            faults[type(error).__name__] += 1
            return error
        return respond(messages, params)

    return wrapped


def test_transient_faults_change_nothing(driver, task, tmp_path, monkeypatch):
    monkeypatch.setattr(eval.plumbing.retry, "BACKOFF", False)
    ref = reference_run(driver, task, tmp_path)
    faults: Counter = Counter()
    scripted.install(flaky(driver.make_respond({"log": str(tmp_path / "calls.log")}), faults))
    args = run_args(task, tmp_path / "runs", tmp_path / "cache", "--concurrency", "4")
    assert main(args) == 0
    # the fault injection really happened, of every kind
    assert set(faults) == {"RateLimitError", "Timeout", "InternalServerError"}
    assert sum(faults.values()) >= 5
    flaky_run = tmp_path / "runs" / "r"
    assert rankings(flaky_run) == rankings(ref)
    assert metrics(flaky_run)["metrics"] == metrics(ref)["metrics"]
    assert metrics(flaky_run)["usage"]["calls"] == N_QUERIES  # retries are not extra answers


# --- 3. permanent faults -----------------------------------------------------------------------


def test_permanent_faults_fail_their_queries_only_and_are_retried_alone(
    driver, task, tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(eval.plumbing.retry, "BACKOFF", False)
    log = tmp_path / "calls.log"
    broken = {
        "fail": {
            "3": ["RateLimitError", "quota exhausted"],  # retryable: fails after every attempt
            "7": ["BadRequestError", "context window exceeded"],  # fails at once
        }
    }
    scripted.install(driver.make_respond({"log": str(log), **broken}))
    # --cache off: the call count, not the cache, shows which queries are run again
    args = run_args(task, tmp_path / "runs", tmp_path / "cache", "--cache", "off", "--limit", "10")
    assert main(args) == 1
    out = capsys.readouterr()
    assert "2 queries failed; re-run the same command" in out.err
    assert "2 queries FAILED" in out.out
    summary = metrics(tmp_path / "runs" / "r")
    assert summary["failed"] == 2
    assert "RateLimitError" in summary["failures"]["q3"] and "quota" in summary["failures"]["q3"]
    assert "BadRequestError" in summary["failures"]["q7"]
    calls = calls_per_query(log)
    assert calls[3] == 6 and calls[7] == 1  # every attempt for the transient kind, one otherwise
    assert all(calls[i] == 1 for i in range(10) if i not in (3, 7))  # the others finished

    log.unlink()
    scripted.install(driver.make_respond({"log": str(log)}))  # the provider recovered
    assert main(args) == 0
    assert calls_per_query(log) == Counter({3: 1, 7: 1})
    summary = metrics(tmp_path / "runs" / "r")
    assert summary["failed"] == 0 and summary["queries"] == 10


# --- 5. cache safety ---------------------------------------------------------------------------


@pytest.mark.slow
def test_two_processes_sharing_one_cache_agree(driver, task, tmp_path):
    log = tmp_path / "calls.log"
    spec = {"log": str(log), "latency": 0.05}
    cache = tmp_path / "shared-cache"
    procs = [
        spawn(driver, tmp_path, name, spec, run_args(task, tmp_path / name, cache))
        for name in ("a", "b")
    ]
    assert [finish(p) for p in procs] == [0, 0]
    ref = reference_run(driver, task, tmp_path)
    for name in ("a", "b"):
        assert rankings(tmp_path / name / "r") == rankings(ref)
        assert metrics(tmp_path / name / "r")["metrics"] == metrics(ref)["metrics"]
    assert N_QUERIES <= sum(calls_per_query(log).values()) <= 2 * N_QUERIES
    # the shared cache holds every answer, readable: a third run asks the provider nothing
    provider = scripted.install(driver.make_respond({"log": str(tmp_path / "third.log")}))
    assert main(run_args(task, tmp_path / "third", cache)) == 0
    assert provider.calls == 0
    assert rankings(tmp_path / "third" / "r") == rankings(ref)


def truncate(path: Path, fraction: float) -> None:
    with open(path, "r+b") as f:
        f.truncate(int(path.stat().st_size * fraction))


@pytest.mark.slow
def test_truncated_cache_files_are_rebuilt(driver, task, tmp_path, caplog):
    cache = tmp_path / "cache"
    scripted.install(driver.make_respond({"log": str(tmp_path / "calls.log")}))
    assert main(run_args(task, tmp_path / "runs", cache)) == 0
    first = rankings(tmp_path / "runs" / "r")
    gc.collect()  # drop the finished run's cache connection before damaging its files
    truncate(cache / "llm" / "cache.db", 0.1)
    [npz] = cache.glob("bm25-*/index.npz")
    truncate(npz, 0.5)

    provider = scripted.install(driver.make_respond({"log": str(tmp_path / "calls.log")}))
    assert main(run_args(task, tmp_path / "again", cache)) == 0
    assert provider.calls == N_QUERIES  # every answer recomputed, none read from the wreck
    assert rankings(tmp_path / "again" / "r") == first
    assert "LLM cache" in caplog.text and "rebuilding BM25 index" in caplog.text
    # and both caches were written anew
    provider = scripted.install(driver.make_respond({"log": str(tmp_path / "calls.log")}))
    caplog.clear()
    assert main(run_args(task, tmp_path / "third", cache)) == 0
    assert provider.calls == 0 and "rebuilding" not in caplog.text


# --- 6. secrets --------------------------------------------------------------------------------

OPENAI_KEY = "sk-proj-FAKEopenaiKEY-0123456789abcdef"
ANTHROPIC_KEY = "sk-ant-api03-FAKEanthropicKEY-0123456789"


@pytest.mark.slow
def test_api_keys_reach_no_file_the_run_writes(driver, task, tmp_path):
    quoting = "Incorrect API key provided: {OPENAI_API_KEY} (anthropic: {ANTHROPIC_API_KEY})"
    spec = {
        "log": str(tmp_path / "calls.log"),
        "fail": {
            "2": ["BadRequestError", quoting],  # fails at once, quoting both keys
            "4": ["RateLimitError", quoting],  # retried first: the retry warnings are logged
        },
    }
    args = run_args(task, tmp_path / "runs", tmp_path / "cache", "--limit", "6")
    env = {"OPENAI_API_KEY": OPENAI_KEY, "ANTHROPIC_API_KEY": ANTHROPIC_KEY}
    assert finish(spawn(driver, tmp_path, "secret", spec, args, **env)) == 1
    errors = metrics(tmp_path / "runs" / "r")["failures"]
    # the provider's message did reach the record, with the keys masked
    assert "<OPENAI_API_KEY>" in errors["q2"] and "<ANTHROPIC_API_KEY>" in errors["q4"]
    assert "RateLimitError" in (tmp_path / "logs" / "secret.err").read_text()
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.suffix == ".db" for p in written) and any(p.name == "config.json" for p in written)
    leaks = [
        p for p in written for key in (OPENAI_KEY, ANTHROPIC_KEY) if key.encode() in p.read_bytes()
    ]
    assert leaks == []


@pytest.mark.slow
def test_a_rejected_key_stops_the_run_in_one_line(driver, task, tmp_path):
    quoting = "Incorrect API key provided: {OPENAI_API_KEY}"
    spec = {"log": str(tmp_path / "calls.log"), "fail": {"2": ["AuthenticationError", quoting]}}
    args = run_args(task, tmp_path / "runs", tmp_path / "cache", "--concurrency", "1")
    proc = spawn(driver, tmp_path, "auth", spec, args, OPENAI_API_KEY=OPENAI_KEY)
    assert finish(proc) == 2
    err = (tmp_path / "logs" / "auth.err").read_text()
    assert err.strip() == (
        "error: scripted/x: authentication failed (401: the API key was rejected); "
        "check the provider's credentials"
    )
    assert calls_per_query(tmp_path / "calls.log") == Counter({0: 1, 1: 1, 2: 1})  # no retry
    assert sorted(rankings(tmp_path / "runs" / "r")) == ["q0", "q1"]  # finished ones are kept
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert [p for p in written if OPENAI_KEY.encode() in p.read_bytes()] == []


# --- 7. SIGTERM ----------------------------------------------------------------------------------

# `python -m agents.run` itself (its __main__ and exit path), the model scripted, slow enough
# to be stopped mid-run
AS_MODULE = """
import json, runpy, sys

from agents.llm import scripted

spec = json.loads(sys.argv[1])
scripted.install(lambda messages, params: "A passage on organ1 and pathway2.", spec["latency"])
sys.argv = ["agents.run", *sys.argv[2:]]
runpy.run_module("agents.run", run_name="__main__", alter_sys=True)
"""


@pytest.mark.slow
def test_sigterm_ends_a_run_like_ctrl_c_with_exit_143(driver, task, tmp_path):
    """A SIGTERM (kill, a scheduler, a container stop) once ended a run with no line at all."""
    script = tmp_path / "as_module.py"
    script.write_text(AS_MODULE)
    args = run_args(task, tmp_path / "runs", tmp_path / "cache", "--concurrency", "1")
    answers = tmp_path / "runs" / "r" / TASK / "queries.jsonl"
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}  # as spawn's: no fetch
    proc = subprocess.Popen([sys.executable, str(script), json.dumps({"latency": 0.2}), *args],
                            stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip
    deadline = time.monotonic() + 300  # the child may start slowly on a busy machine
    while not (answers.exists() and len(answers.read_text().splitlines()) >= 2):
        assert proc.poll() is None, "the run ended before it could be stopped"
        assert time.monotonic() < deadline, "no answers appeared"
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)  # bounded: no stuck thread keeps it alive
    assert proc.returncode == 143, err[-2000:]
    assert err.strip() == MESSAGE, err[-3000:]  # one line (--quiet: nothing else is printed)
    kept = answers.read_text().splitlines()
    assert 2 <= len(kept) < N_QUERIES and all(json.loads(r)["error"] is None for r in kept)
    # the same command resumes: what was kept stays as it was
    scripted.install(lambda messages, params: "A passage on organ1 and pathway2.")
    assert main(args) == 0
    after = answers.read_text().splitlines()
    assert after[: len(kept)] == kept and len(after) == N_QUERIES


def _terminate_self() -> int:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)  # the handler raises before this ends
    raise AssertionError("SIGTERM was not handled")


@pytest.mark.parametrize(
    "module, argv, body",
    [
        ("agents.commands.run", [], "_run"),
        ("agents.commands.rerank", ["some-run", "--rerank", "llm-listwise"], "_rerank"),
        ("agents.commands.sweep", ["sweep.toml"], "load_sweep"),
        ("eval.score", ["--qrels", "qrels.tsv", "run.trec"], "_score"),
        ("eval.export", ["some-run", "--out", "exported"], "_export"),
    ],
)
def test_every_entry_point_takes_sigterm_as_ctrl_c(module, argv, body, monkeypatch, capsys):
    entry = importlib.import_module(module)
    monkeypatch.setattr(entry, body, lambda *args: _terminate_self())
    before = signal.getsignal(signal.SIGTERM)
    assert entry.main(argv) == 143
    line = MESSAGE if module.startswith("agents") else INTERRUPTED
    assert capsys.readouterr().err == line + "\n"
    assert signal.getsignal(signal.SIGTERM) is before  # put back once the command is done


def test_sigterm_inside_asyncio_run_is_still_143(capsys):
    """asyncio's runner, Ctrl-C's handler in a command with none of its own (the MCP server),
    cancels the main task and raises a plain KeyboardInterrupt: still 143, the same line."""
    import asyncio

    from eval.plumbing.cli import command

    async def body() -> int:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.sleep(30)
        except KeyboardInterrupt:
            pass  # swallowed, as uvicorn's shutdown does: the runner's cancellation ends it
        await asyncio.sleep(30)
        raise AssertionError("SIGTERM was not handled")

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # asyncio's to replace
    try:
        assert command(lambda: asyncio.run(body())) == 143
    finally:
        signal.signal(signal.SIGINT, previous)
    assert capsys.readouterr().err == INTERRUPTED + "\n"


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # ctypes' report
def test_a_ctrl_c_that_native_code_swallows_still_stops_the_run():
    """llama.cpp calls back into Python while a model loads (its log callback); a Ctrl-C
    handled there raises inside a ctypes callback, which swallows it (a CI run once finished
    with exit 0 after a Ctrl-C at start-up). The handler's flag raises it after the load."""
    import ctypes

    from agents.llm.embedded import pool
    from agents.shared import interrupt

    def callback() -> None:  # what llama_cpp's log callback is to the interpreter
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)  # the handler runs here, and its KeyboardInterrupt stops here

    native = ctypes.CFUNCTYPE(None)(callback)
    previous = signal.getsignal(signal.SIGINT)
    interrupt.install()
    try:
        native()  # ctypes' own behaviour, which the load has to work around
        assert pool.CANCEL.is_set()
        interrupt.install()  # a new run clears it
        with pytest.raises(KeyboardInterrupt), pool._native_load():
            native()
        interrupt.install()
        with pool._native_load():  # no Ctrl-C: nothing raised
            pass
    finally:
        signal.signal(signal.SIGINT, previous)
        pool.CANCEL.clear()
