"""eval.runs (the run-folder layout: RunFolder, TaskFolder, StageFolder), eval.records (a
query's record and its lines), eval.task_summary (a task's metrics.json) and eval.usage; run
names and labels are agents.config.naming's (tests/agents/config/test_naming.py)."""

from __future__ import annotations

import ast
import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from eval.records import QueryRecord, read_records, record_line
from eval.runs import NotARunFolder, RunFolder, StageFolder, TaskFolder, stage_dir_name
from eval.task_summary import TaskSummary
from eval.usage import Usage

ROOT = Path(__file__).resolve().parents[2]

# a config.json as an early version wrote it (flat): eval.runs reads any JSON object
FLAT = dict(
    agent="search-o1", dataset="demo", retriever="bm25", bm25_method="bm25q", k1=None, b=None,
    depth=100, missing="zero", limit=None, pad=False, ties="trec",
    model="local/qwen2.5-coder-0.5b", api_base=None, temperature=0.0, max_tokens=512,
    prompts={}, options={"final_ranking": "answer", "max_turns": 15},
)  # fmt: skip

# a task's metrics.json as agents.execution.whole_run writes it, keys in its order (a rerank of a
# run file)
SUMMARY = {
    "task": "toy", "notes": ["a note"], "metrics": {"NDCG@10": 0.3, "MRR": 0.5},
    "averaging": "over 2 queries", "queries": 2, "failed": 1, "failures": {"q2": "boom"},
    "usage": Usage(calls=3, prompt_tokens=9).to_dict(), "searches_per_query": 1.5,
    "seconds": 0.25, "data": {"corpus": "c", "queries": "q"},
    "stages": {"agent": {"NDCG@10": 0.1}, "rerank-1-llm": {"NDCG@10": 0.3}},
    "final_stage": "rerank-1-llm", "outcomes": {"rerank-1-llm": {"matched": 4}},
    "run_file": {"path": "e5.trec", "sha256": "ab", "missing": [], "repeated_lines": 0},
    "bm25_baseline": {"NDCG@10": 0.2},
}  # fmt: skip


def written(value: object) -> str:
    """A JSON file as eval.plumbing.files.write_json writes it."""
    return json.dumps(value, indent=2) + "\n"


# ---- config, summaries, task folders --------------------------------------------------------


def test_config_round_trips_and_a_damaged_one_is_named(tmp_path):
    run = RunFolder(tmp_path)
    with pytest.raises(FileNotFoundError):
        run.config()
    run.write_config(FLAT)
    assert run.config() == FLAT
    config = tmp_path / "config.json"
    assert run.config_path == config and config.read_text() == written(FLAT)
    config.write_bytes(config.read_bytes()[:30])
    with pytest.raises(ValueError) as info:
        run.config()
    message = str(info.value)
    assert message == (
        f"{config} line 3: damaged, not valid JSON (Unterminated string starting at, column 3)"
    )
    config.write_text("[1, 2]")
    with pytest.raises(ValueError, match="not a JSON object"):
        run.config()


def test_a_folder_without_config_is_not_a_run_folder(tmp_path):
    with pytest.raises(NotARunFolder) as info:
        RunFolder(tmp_path / "nowhere").config()
    assert str(info.value) == f"{tmp_path / 'nowhere'}: not a run folder (no config.json)"
    assert isinstance(info.value, FileNotFoundError)  # callers that catch that still do


def test_task_summary_is_none_when_absent_or_damaged(tmp_path, caplog):
    task = TaskFolder(tmp_path)
    assert task.summary() is None
    task.write_summary(TaskSummary.from_dict({"metrics": {"NDCG@10": 0.5}}))
    assert task.summary().metrics == {"NDCG@10": 0.5}
    (tmp_path / "metrics.json").write_text('{"metrics": ')
    caplog.set_level(logging.WARNING)
    assert task.summary() is None
    assert "damaged" in caplog.text and str(tmp_path / "metrics.json") in caplog.text


def test_a_task_summary_reads_back_as_written_byte_for_byte(tmp_path):
    task = TaskFolder(tmp_path)
    summary = TaskSummary.from_dict(SUMMARY)
    assert (summary.failed, summary.final_stage, summary.run_file["path"]) == (
        1,
        "rerank-1-llm",
        "e5.trec",
    )
    assert (summary.generations, summary.source_run, summary.extra) == (None, None, {})
    task.write_summary(summary)
    assert task.summary_path.read_text() == written(SUMMARY)  # the pipeline's bytes and order
    assert task.summary() == summary
    # a file written by the current code reads the same, and is written back unchanged
    (tmp_path / "metrics.json").write_text(written(SUMMARY))
    assert task.summary().to_dict() == SUMMARY
    assert list(task.summary().to_dict()) == list(SUMMARY)


def test_a_task_summary_keeps_keys_it_does_not_know_and_defaults_missing_ones():
    values = {**SUMMARY, "from_the_future": [1]}
    assert TaskSummary.from_dict(values).to_dict() == values
    older = TaskSummary.from_dict({"metrics": {"NDCG@10": 0.1}, "failed": None})
    assert (older.final_stage, older.failed, older.bm25_baseline, older.stages) == (
        "agent",
        0,
        None,
        {},
    )
    assert "bm25_baseline" not in older.to_dict()  # an optional key is written only when set


def test_run_summary_round_trips_in_run_order(tmp_path):
    run = RunFolder(tmp_path)
    assert run.summary() is None
    by_task = {"b": TaskSummary.from_dict(SUMMARY), "a": TaskSummary(task="a")}
    run.write_summary(by_task)
    assert run.summary() == by_task and list(run.summary()) == ["b", "a"]
    text = (tmp_path / "metrics.json").read_text()
    assert text == written({k: s.to_dict() for k, s in by_task.items()})


def test_run_info_holds_the_label_and_is_none_when_absent_or_damaged(tmp_path, caplog):
    run = RunFolder(tmp_path)
    run.write_summary({"a": TaskSummary()})
    assert run.info() is None  # no label given: a folder as older versions wrote
    run.write_summary({"a": TaskSummary()}, label="none bm25q", llm_free=True)
    assert run.info() == {"label": "none bm25q", "llm_free": True}
    assert list(json.loads((tmp_path / "metrics.json").read_text())) == ["a"]  # tasks only
    (tmp_path / "run.json").write_text("{")
    caplog.set_level(logging.WARNING)
    assert run.info() is None
    assert f"{tmp_path / 'run.json'} line 1: damaged" in caplog.text


def test_leaderboard_is_written_as_given(tmp_path):
    RunFolder(tmp_path).write_leaderboard("| a |\n")
    assert (tmp_path / "leaderboard.md").read_text() == "| a |\n"


def test_task_info_is_none_when_absent_and_refused_when_damaged(tmp_path):
    task = TaskFolder(tmp_path)
    assert task.info() is None
    task.write_info({"task": "toy", "fingerprint": {"corpus": "x"}})
    assert task.info()["fingerprint"] == {"corpus": "x"}
    assert task.info_path.read_text() == written({"task": "toy", "fingerprint": {"corpus": "x"}})
    (tmp_path / "task.json").write_text("{")
    with pytest.raises(ValueError, match="task.json line 1: damaged"):
        task.info()


def test_task_folders_follow_the_run_summary_then_sort_the_rest(tmp_path):
    for name in ("b", "a", "c"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "queries.jsonl").write_text("")
    (tmp_path / "not-a-task").mkdir()
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "queries.jsonl").write_text("")
    run = RunFolder(tmp_path)
    assert [p.name for p in run.tasks()] == ["a", "b", "c"]
    assert run.tasks()[0] == run.task("a") == TaskFolder(tmp_path / "a")
    run.write_summary({"c": TaskSummary(), "gone": TaskSummary(), "a": TaskSummary()})
    assert [p.name for p in run.tasks()] == ["c", "a", "b"]
    assert RunFolder(tmp_path / "missing").tasks() == []


def test_records_keep_the_last_of_each_query_and_skip_a_torn_line(tmp_path):
    path = tmp_path / "queries.jsonl"
    first = {"query_id": "q1", "error": "boom", "query": "é"}
    again = {"query_id": "q1", "error": None, "query": "é"}
    path.write_text(record_line(first) + record_line(again) + '{"query_id": "q2", "err')
    assert read_records(path) == {"q1": again}
    assert read_records(path, ("error",)) == {"q1": {"error": None}}
    assert "é" in record_line(first)  # kept readable, not escaped
    stage = StageFolder(tmp_path)
    assert stage.records_path == path and stage.records() == read_records(path)
    assert list(stage.iter_records()) == [("q1", first), ("q1", again)]


def test_a_query_record_is_the_runner_s_dict():
    record = QueryRecord(query_id="q1", query="why?", ranking=[["d1", 2.0]], error=None)
    values = record.to_dict()
    assert list(values) == [
        "query_id", "query", "ranking", "generated", "searches", "usage", "seconds", "error",
        "steps",
    ]  # fmt: skip
    assert QueryRecord.from_dict({**values, "later": 1}) == record
    assert json.loads(record_line(values)) == values


def test_per_query_round_trips_and_a_bad_line_is_named(tmp_path):
    stage = StageFolder(tmp_path)
    assert stage.per_query() == {}
    rows = {"q1": {"NDCG@10": 0.25, "MRR": 1.0}, "q2": {"NDCG@10": 0.0, "MRR": 0.0}}
    stage.write_per_query(rows)
    assert stage.per_query() == rows
    first = (tmp_path / "per_query.jsonl").read_text().splitlines()[0]
    assert list(json.loads(first)) == ["query_id", "NDCG@10", "MRR"]
    with open(tmp_path / "per_query.jsonl", "a") as f:
        f.write('{"NDCG@10": 1}\n')
    expected = r"per_query.jsonl line 3: field 'query_id': expected a query id, got None"
    with pytest.raises(ValueError, match=expected):
        stage.per_query()


# ---- stages ---------------------------------------------------------------------------------


def test_the_final_stage_is_the_one_metrics_json_names(tmp_path):
    task = TaskFolder(tmp_path / "toy")
    task.path.mkdir()
    assert task.final_stage() == task  # nothing written yet: the agent's own folder
    first, second = stage_dir_name(1, "llm"), stage_dir_name(2, "cross encoder")
    assert (first, second) == ("rerank-1-llm", "rerank-2-cross_encoder")
    assert task.stage(2, "cross encoder") == StageFolder(task.path / second)
    for name in (second, first, "rerank-x-bad", "other"):
        (task.path / name).mkdir()
    assert [s.name for s in task.stages()] == [first, second]  # by index, not by name
    chain = [s.path for s in task.stage_chain()]
    assert chain == [task.path, task.path / first, task.path / second]  # unfinished: all

    def summarise(**values):
        task.write_summary(TaskSummary.from_dict(values))

    summarise(metrics={"NDCG@10": 0.1})  # written before stages existed
    assert task.final_stage() == task
    stages = {"agent": {"NDCG@10": 0.1}, first: {"NDCG@10": 0.3}}
    summarise(metrics={"NDCG@10": 0.3}, stages=stages, final_stage=first)
    assert [s.path for s in task.stage_chain()] == [task.path, task.path / first]
    summarise(metrics={"NDCG@10": 0.1}, stages=stages, final_stage="agent")
    assert task.final_stage() == task

    for bad in ("../../elsewhere", "other"):
        summarise(metrics={}, final_stage=bad)
        with pytest.raises(ValueError, match="is not a stage folder"):
            task.final_stage()
    # not text at all: the summary is of the wrong shape, ignored (it is derived) and named
    task.summary_path.write_text(json.dumps({"metrics": {}, "final_stage": 3}))
    with pytest.raises(ValueError, match="field 'final_stage': expected text, got 3"):
        TaskSummary.from_dict({"final_stage": 3})
    assert task.summary() is None and task.final_stage().path == task.path / second
    with pytest.raises(ValueError):
        stage_dir_name(0, "llm")


# ---- usage ----------------------------------------------------------------------------------


def test_usage_round_trips_and_unknown_cost_stays_unknown():
    call = Usage(calls=1, cached_calls=0, prompt_tokens=7, completion_tokens=3, cost=0.5)
    assert Usage.from_dict(call.to_dict()) == call
    unpriced = Usage.from_dict({"calls": 1, "prompt_tokens": 2, "cost": None})
    assert unpriced.cost is None and unpriced.completion_tokens == 0
    assert Usage.from_dict({"calls": 1}).cost is None  # a record that does not say: unknown
    assert Usage.from_dict(None) == Usage(cost=None)
    total = Usage.total([call, call])
    assert (total.calls, total.cost) == (2, 1.0) and call.calls == 1
    assert Usage.total([call, unpriced, call]).cost is None
    assert Usage.total([]).cost == 0.0


def test_the_llm_client_uses_the_same_usage():
    from agents.llm import Usage as from_package
    from agents.llm.client import Usage as from_client

    assert from_package is from_client is Usage


# ---- the ground floor -----------------------------------------------------------------------


def test_nothing_in_eval_imports_agents():
    offenders = []
    for path in sorted((ROOT / "eval").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] == "agents"]
    assert offenders == []


def test_only_eval_runs_joins_a_run_folder_s_file_names_onto_a_path():
    """Every other module asks a RunFolder, TaskFolder or StageFolder where a file is."""
    from eval import runs

    constants = {name for name in vars(runs) if name.endswith("_FILE")}
    names = {getattr(runs, name) for name in constants} - {"queries.jsonl"}  # also a dataset's
    offenders = []
    for folder in ("agents", "eval", "bench"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path == ROOT / "eval" / "runs.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)):
                    continue
                right = node.right
                named = getattr(right, "attr", getattr(right, "id", None))
                spelled = right.value if isinstance(right, ast.Constant) else None
                if named in constants or spelled in names:
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert offenders == []


def test_run_folder_readers_load_nothing_heavy():
    code = (
        "import sys, eval.runs, eval.records, eval.task_summary, eval.usage, eval.metrics\n"
        "import agents.commands.trace\n"
        "heavy = ('numpy', 'pytrec_eval', 'litellm', 'langgraph', 'torch')\n"
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == "[]"
