"""The one error ladder (eval.plumbing.cli, agents.commands.cli), tested once for every command
line.

Each kind of refusal ends a command with exactly one line on stderr and its exit status: a
ValueError subclass (every config, data and flag error is one) and an OSError naming its file
(a read-only or full disk) exit 2, an LLM the run cannot go on with (LLMRunError, the agents'
commands only) exits 2, Ctrl-C exits 130; anything else is a bug and keeps its traceback. The
refusals are raised where each command's body starts (the table below), so no model is
called; a real bad input of each command goes through ``python -m`` as a user would type it.
"""

from __future__ import annotations

import errno
import json
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

import agents.commands.rerank
import agents.commands.run
import agents.commands.sweep
import agents.commands.trace
import eval.references.__main__
import eval.score
from agents.llm.errors import LLMUnavailable
from agents.shared.interrupt import MESSAGE as RESUMABLE
from eval.plumbing.cli import INTERRUPTED

REPO = Path(__file__).resolve().parents[3]


def touched(path: Path) -> Path:
    """``path``, an empty file: a command that checks its files exist reaches its reader."""
    path.touch()
    return path


@dataclass(frozen=True)
class Entry:
    main: Callable[[list[str]], int]
    argv: Callable[[Path], list[str]]  # arguments the parser takes, given a scratch folder
    first: str  # what the body calls first: the refusals are raised there
    interrupted: str  # the line Ctrl-C ends with
    agents: bool  # an agents command: LLMRunError is its refusal too


ENTRIES = {
    "agents.run": Entry(
        agents.commands.run.main,
        lambda d: ["--dataset", str(d / "data"), "--runs-dir", str(d / "runs")],
        "agents.commands.run.from_settings", RESUMABLE, True,
    ),
    "agents.rerank": Entry(
        agents.commands.rerank.main, lambda d: [str(d / "run"), "--rerank", "llm-listwise"],
        "agents.commands.rerank.rerank_config", RESUMABLE, True,
    ),
    "agents.sweep": Entry(
        agents.commands.sweep.main, lambda d: [str(d / "sweep.toml")],
        "agents.commands.sweep.load_sweep", RESUMABLE, True,
    ),
    "agents.trace": Entry(
        agents.commands.trace.main, lambda d: [str(d / "run"), "q1"],
        "agents.commands.trace.find_record", INTERRUPTED, True,
    ),
    "eval.score": Entry(
        eval.score.main, lambda d: ["--qrels", str(touched(d / "qrels.txt")), str(d / "run.trec")],
        "eval.score.read_qrels", INTERRUPTED, False,
    ),
    "eval.references": Entry(
        eval.references.__main__.main, lambda d: ["list"],
        "eval.references.__main__.load_references", INTERRUPTED, False,
    ),
}  # fmt: skip


class Malformed(ValueError):
    """A refusal of the kind every layer raises: a ValueError subclass."""


REFUSALS = {  # what is raised -> (exit status, the one stderr line)
    "ValueError subclass": (
        Malformed("corpus.jsonl: line 6: malformed JSON"),
        2, "error: corpus.jsonl: line 6: malformed JSON",
    ),
    "read-only disk": (
        OSError(errno.EROFS, "Read-only file system", "/runs/r/toy/metrics.json"),
        2, "error: cannot write /runs/r/toy/metrics.json: read-only file system",
    ),
    "full disk": (
        OSError(errno.ENOSPC, "No space left on device", "/runs/r/toy/queries.jsonl"),
        2, "error: cannot write /runs/r/toy/queries.jsonl: no space left on the device",
    ),
    "LLMRunError": (
        LLMUnavailable("http://127.0.0.1:9/v1 did not answer in 30 s"),
        2, "error: http://127.0.0.1:9/v1 did not answer in 30 s",
    ),
    "Ctrl-C": (KeyboardInterrupt(), 130, None),
}  # fmt: skip


@pytest.fixture(autouse=True)
def keep_sigint():
    """The agents' commands install their Ctrl-C handler; the test process gets its own back."""
    saved = signal.getsignal(signal.SIGINT)
    yield
    signal.signal(signal.SIGINT, saved)


def raising(exc: BaseException) -> Callable[..., None]:
    def body(*args, **kwargs):
        raise exc

    return body


# eval's commands call no LLM: an LLMRunError is no refusal of theirs
CASES = [(n, k) for n in ENTRIES for k in REFUSALS if ENTRIES[n].agents or k != "LLMRunError"]


@pytest.mark.parametrize("name, kind", CASES)
def test_each_refusal_is_one_line_and_its_exit_status(name, kind, tmp_path, monkeypatch, capsys):
    entry = ENTRIES[name]
    exc, status, line = REFUSALS[kind]
    monkeypatch.setattr(entry.first, raising(exc))
    assert entry.main(entry.argv(tmp_path)) == status
    out, err = capsys.readouterr()
    assert err.splitlines() == [line if line is not None else entry.interrupted]
    assert out == ""


@pytest.mark.parametrize("name", list(ENTRIES))
def test_a_bug_is_no_refusal_and_keeps_its_traceback(name, tmp_path, monkeypatch):
    entry = ENTRIES[name]
    monkeypatch.setattr(entry.first, raising(RuntimeError("a bug")))
    with pytest.raises(RuntimeError, match="a bug"):
        entry.main(entry.argv(tmp_path))


def test_an_os_error_names_the_file_and_says_write_only_for_a_write(capsys):
    from eval.plumbing.cli import command

    def fail(exc: OSError) -> str:
        assert command(raising(exc)) == 2
        return capsys.readouterr().err

    assert fail(OSError(errno.ENOENT, "No such file or directory", "q.txt")) == (
        "error: q.txt: No such file or directory\n"
    )
    assert fail(OSError(errno.EACCES, "Permission denied", "q.txt")) == (
        "error: q.txt: permission denied\n"
    )
    # a rename names the file it was making, not its temporary source
    rename = OSError(errno.EROFS, "Read-only file system", "r/.tmp-x", None, "r/metrics.json")
    assert fail(rename) == "error: cannot write r/metrics.json: read-only file system\n"
    assert fail(OSError(errno.EIO, "Input/output error")) == "error: Input/output error\n"


# --- the same, as a user types it -------------------------------------------------------------

BAD_INPUTS = {  # a real refusal of each command: no model is called
    "agents.run": (["--agent", "hyde", "--dataset", "{d}/nowhere"],
                   "'{d}/nowhere' is neither a folder nor an R2MED task"),
    "agents.rerank": (["{d}/nowhere", "--rerank", "llm-listwise"],
                      "{d}/nowhere: not a run folder (no config.json)"),
    "agents.sweep": (["{d}/nowhere.toml"], "{d}/nowhere.toml: cannot read"),
    "agents.trace": (["{d}/nowhere", "q1"], "{d}/nowhere: no <task>/queries.jsonl here"),
    "eval.score": (["--qrels", "{d}/nowhere.txt", "{d}/run.trec"],
                   "--qrels {d}/nowhere.txt: no such file or folder, and not a task name"),
    "eval.references": (["show", "hyde/qwen-7b/bm2"], "close matches: hyde/qwen-7b/bm25"),
}  # fmt: skip
BAD_FLAGS = {  # a bad flag value, refused by the parser before the body runs
    "agents.run": ["--limit", "0"],
    "agents.rerank": ["{d}", "--rerank", "llm-listwise", "--rerank-depth", "0"],
    "agents.sweep": [],  # its one argument missing
    "agents.trace": ["{d}", "q1", "--chars", "0"],
    "eval.score": ["--qrels", "{d}/q.txt", "{d}/r.trec", "--missing", "none"],
    "eval.references": ["lst"],
}


def python_m(module: str, argv: list[str], folder: Path) -> subprocess.CompletedProcess:
    args = [a.replace("{d}", str(folder)) for a in argv]
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=REPO, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip


# these import the whole stack in their fresh process (seconds each): slow
HEAVY_ENTRIES = ("agents.run", "agents.rerank", "agents.sweep")


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) if n in HEAVY_ENTRIES else n for n in ENTRIES]
)
def test_a_bad_input_is_one_line_and_exit_2_from_the_shell(name, tmp_path):
    argv, expected = BAD_INPUTS[name]
    done = python_m(name, argv, tmp_path)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("error: ") and expected.replace("{d}", str(tmp_path)) in line
    assert done.stdout == ""


@pytest.mark.parametrize("name", list(ENTRIES))
def test_a_bad_flag_is_the_parser_s_one_error_line_and_exit_2(name, tmp_path):
    done = python_m(name, BAD_FLAGS[name], tmp_path)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    errors = [x for x in done.stderr.splitlines() if "error:" in x]
    assert len(errors) == 1 and errors[0].startswith(f"python -m {name}: error: ")


# --- --help is instant: nothing heavy is imported before the arguments are parsed ---------------

HEAVY = ("litellm", "langgraph", "llama_cpp", "torch", "sentence_transformers", "transformers")
# a run's machinery: the command's body imports it, once the arguments are known good
AFTER_PARSING = ("agents.execution.whole_run", "agents.estimate", "retrievers.search")

HELP = """
import contextlib, io, json, runpy, sys
sys.argv = [sys.argv[1], "--help"]
with contextlib.redirect_stdout(io.StringIO()) as out:
    try:
        runpy.run_module(sys.argv[0], run_name="__main__")
    except SystemExit as e:
        code = e.code
print(json.dumps({"code": code, "usage": out.getvalue().startswith("usage:"),
                  "modules": sorted(sys.modules)}))
"""


@pytest.mark.parametrize("name", list(ENTRIES))
def test_help_imports_no_llm_or_graph_library(name):
    done = subprocess.run(
        [sys.executable, "-c", HELP, name], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout.splitlines()[-1])
    assert shown["code"] == 0 and shown["usage"]
    loaded = {m.split(".")[0] for m in shown["modules"]}
    assert [m for m in HEAVY if m in loaded] == []
    assert [m for m in AFTER_PARSING if m in shown["modules"]] == []
