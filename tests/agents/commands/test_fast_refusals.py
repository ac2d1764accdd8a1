"""A refusal decided from flags, files and the environment comes at once, before any heavy import.

Each command runs in a fresh process as a user types it (`python -m ...`, through runpy), with
no API key in the environment and the hub either in offline mode or at an address that refuses
connections. The refusal must be its one ``error:`` line, exit 2, within a generous bound, and
none of torch, transformers, litellm, ... may have been imported by then. Also checked: the
providers whose missing key is found without litellm (eval.plumbing.secrets.provider_keys) name the
variables litellm itself names.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from eval.plumbing.secrets.provider_keys import KEY_VARIABLES, known_missing_keys

HEAVY = ("torch", "transformers", "sentence_transformers", "litellm", "langgraph", "llama_cpp")
BOUND_S = 5.0  # measured here: 1-2 s each on 2 shared cores

WRAPPER = """
import contextlib, io, json, runpy, sys, time
start = time.monotonic()
sys.argv = [sys.argv[1], *sys.argv[2:]]
err = io.StringIO()
code = None
with contextlib.redirect_stderr(err):
    try:
        runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
    except SystemExit as e:
        code = e.code
print(json.dumps({"code": code, "seconds": time.monotonic() - start, "stderr": err.getvalue(),
                  "modules": sorted(sys.modules)}))
"""


def refuse(module: str, argv: list[str], folder: Path, **env: str) -> dict:
    environ = {
        k: v
        for k, v in os.environ.items()
        if not k.endswith("_API_KEY") and k not in ("HF_HUB_OFFLINE", "HF_ENDPOINT")
    }
    environ.update(R2MED_AGENTS_CACHE=str(folder / "cache"), **env)
    args = [a.replace("{d}", str(folder)) for a in argv]
    done = subprocess.run(
        [sys.executable, "-c", WRAPPER, module, *args], cwd=folder, env=environ,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


OFFLINE = {"HF_HUB_OFFLINE": "1"}
# not offline mode: the hub is at an address nothing listens on, as a machine without network
UNREACHABLE = {"HF_ENDPOINT": "http://127.0.0.1:9"}
KEY_LINE = "{model} needs an API key: set {var} (or give --api-base for a server that needs none)"

CASES = {
    "run, a missing key": (
        "agents.run", ["--agent", "hyde", "--model", "openai/gpt-4o-mini"], {},
        KEY_LINE.format(model="openai/gpt-4o-mini", var="OPENAI_API_KEY"),
    ),
    "dry run, a missing key": (
        "agents.run", ["--agent", "hyde", "--model", "openai/gpt-4o-mini", "--dry-run"], {},
        KEY_LINE.format(model="openai/gpt-4o-mini", var="OPENAI_API_KEY"),
    ),
    "run, a stage's missing key": (
        "agents.run", ["--agent", "none", "--rerank", "llm-listwise:anthropic/claude-x"], {},
        KEY_LINE.format(model="anthropic/claude-x", var="ANTHROPIC_API_KEY"),
    ),
    "run, a hub task offline": (
        "agents.run", ["--agent", "none", "--dataset", "Biology"], OFFLINE,
        "cannot download R2MED/Biology (not in the hub cache {d}/cache/hf; HF_HUB_OFFLINE is set",
    ),
    "run, r2med offline": (
        "agents.run", ["--dataset", "r2med"], OFFLINE, "cannot download R2MED/Biology",
    ),
    "run, a hub task, the hub unreachable": (
        "agents.run", ["--agent", "none", "--dataset", "medqa-diag"], UNREACHABLE,
        "cannot download R2MED/MedQA-Diag (not in the hub cache {d}/cache/hf; 127.0.0.1 cannot "
        "be reached: Connection refused; offline?)",
    ),
    "run, an unknown dataset": (
        "agents.run", ["--agent", "hyde", "--dataset", "{d}/nowhere"], {},
        "'{d}/nowhere' is neither a folder nor an R2MED task",
    ),
    "rerank, a hub task offline": (
        "agents.rerank", ["{d}/run.trec", "--task", "Biology", "--rerank", "llm-listwise"],
        OFFLINE, "cannot download R2MED/Biology",
    ),
    "rerank, a missing key": (
        "agents.rerank",
        ["{d}/run.trec", "--task", "demo", "--rerank", "llm-listwise:openai/gpt-4o-mini"], {},
        KEY_LINE.format(model="openai/gpt-4o-mini", var="OPENAI_API_KEY"),
    ),
    "rerank, no run folder": (
        "agents.rerank", ["{d}/nowhere", "--rerank", "llm-listwise"], {},
        "{d}/nowhere: not a run folder (no config.json)",
    ),
    "sweep, no file": ("agents.sweep", ["{d}/nowhere.toml"], {}, "{d}/nowhere.toml: cannot read"),
    "sweep, a bad key beside an API model": (
        "agents.sweep", ["{d}/bad.toml"], {}, "{d}/bad.toml: key 'options.limt': unknown option",
    ),
    "score, a hub task offline": (
        "eval.score", ["--qrels", "Biology", "{d}/run.trec"], OFFLINE,
        "cannot download R2MED/Biology",
    ),
    "compare, no run folder": (
        "eval.compare", ["{d}/nowhere", "{d}/nowhere2"], {}, "{d}/nowhere: not a run folder",
    ),
    "trace, no run folder": (
        "agents.trace", ["{d}/nowhere", "q1"], {}, "{d}/nowhere: no <task>/queries.jsonl here",
    ),
    # --port 0: the refusal under test, whatever else holds the default port (a model server,
    # a parallel test run)
    "serve, a hub task offline": (
        "retrievers.serve", ["--dataset", "Biology", "--port", "0"], OFFLINE,
        "cannot download R2MED/Biology",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_a_refusal_is_one_line_at_once_before_any_heavy_import(case, tmp_path):
    module, argv, env, expected = CASES[case]
    (tmp_path / "run.trec").write_text("q01 Q0 d001 1 1.0 x\n")
    (tmp_path / "bad.toml").write_text('agents = ["hyde"]\nmodels = ["openai/gpt-4o-mini"]\n'
                                       "[options]\nlimt = 3\n")  # fmt: skip
    shown = refuse(module, argv, tmp_path, **env)
    assert shown["code"] == 2, shown["stderr"]
    [line] = shown["stderr"].splitlines()
    assert line.startswith("error: ") and expected.replace("{d}", str(tmp_path)) in line, line
    loaded = {m.split(".")[0] for m in shown["modules"]}
    assert [m for m in HEAVY if m in loaded] == []
    assert shown["seconds"] < BOUND_S, f"{case}: {shown['seconds']:.1f} s"
    assert not (tmp_path / "runs").exists()  # no run folder was started


def test_a_cached_hub_task_loads_offline_without_the_network(tmp_path, monkeypatch):
    """The hub cache is read first: a task cached at its pinned revision needs no network,
    offline mode or not (the endpoint here refuses every connection)."""
    from eval.datasets import check_tasks, load_task
    from tests.eval.test_datasets import seed_hub_cache

    monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", "http://127.0.0.1:9")
    seed_hub_cache(tmp_path, "Biology")
    check_tasks("biology", tmp_path)
    assert load_task("Biology", tmp_path).corpus == {"d1": "aspirin and bleeding", "d2": "statins"}
    with pytest.raises(ValueError, match="R2MED/Bioinformatics .*127.0.0.1 cannot be reached"):
        check_tasks("Biology,Bioinformatics", tmp_path)


@pytest.mark.parametrize("provider", list(KEY_VARIABLES))
def test_the_keys_known_without_litellm_are_litellm_s(provider, monkeypatch):
    from eval.plumbing.secrets.api_keys import missing_key_variables

    names = KEY_VARIABLES[provider]
    for name in {n for n in os.environ if n.endswith("_API_KEY")} | set(names):
        monkeypatch.delenv(name, raising=False)
    model = f"{provider}/some-model"
    assert known_missing_keys(model, None) == missing_key_variables(model) == list(names)
    assert known_missing_keys(model, "http://127.0.0.1:8000/v1") == []
    for name in names:  # any one of them is the key, for litellm as here
        monkeypatch.setenv(name, "")
        assert known_missing_keys(model, None) == missing_key_variables(model) == []
        monkeypatch.delenv(name)
