"""eval.runs (the run-folder layout, its readers and writers) and eval.usage; run names and
labels are agents.naming's (tests/test_naming.py)."""

from __future__ import annotations

import ast
import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from eval import runs
from eval.runs import (
    final_stage_dir,
    read_config,
    read_per_query,
    read_records,
    read_run_info,
    read_task_info,
    read_task_summary,
    record_line,
    stage_chain,
    stage_dir_name,
    task_dirs,
    write_config,
    write_per_query,
    write_run_summary,
    write_task_summary,
)
from eval.usage import Usage

ROOT = Path(__file__).resolve().parents[1]

# a config.json as an early version wrote it (flat): eval.runs reads any JSON object
FLAT = dict(
    agent="search-o1", dataset="demo", retriever="bm25", bm25_method="bm25q", k1=None, b=None,
    depth=100, missing="zero", limit=None, pad=False, ties="trec",
    model="local/qwen2.5-coder-0.5b", api_base=None, temperature=0.0, max_tokens=512,
    prompts={}, options={"final_ranking": "answer", "max_turns": 15},
)  # fmt: skip


# ---- config, summaries, task folders --------------------------------------------------------


def test_config_round_trips_and_a_damaged_one_is_named(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_config(tmp_path)
    write_config(tmp_path, FLAT)
    assert read_config(tmp_path) == FLAT
    config = tmp_path / "config.json"
    config.write_bytes(config.read_bytes()[:30])
    with pytest.raises(ValueError) as info:
        read_config(tmp_path)
    message = str(info.value)
    assert message == f"{config}: damaged, cannot be read (JSONDecodeError)"
    config.write_text("[1, 2]")
    with pytest.raises(ValueError, match="not a JSON object"):
        read_config(tmp_path)


def test_task_summary_is_none_when_absent_or_damaged(tmp_path, caplog):
    assert read_task_summary(tmp_path) is None
    write_task_summary(tmp_path, {"metrics": {"NDCG@10": 0.5}})
    assert read_task_summary(tmp_path) == {"metrics": {"NDCG@10": 0.5}}
    (tmp_path / "metrics.json").write_text('{"metrics": ')
    caplog.set_level(logging.WARNING)
    assert read_task_summary(tmp_path) is None
    assert "damaged" in caplog.text and str(tmp_path / "metrics.json") in caplog.text


def test_run_info_holds_the_label_and_is_none_when_absent_or_damaged(tmp_path, caplog):
    write_run_summary(tmp_path, {"a": {}})
    assert read_run_info(tmp_path) is None  # no label given: a folder as older versions wrote
    write_run_summary(tmp_path, {"a": {}}, label="none bm25q", llm_free=True)
    assert read_run_info(tmp_path) == {"label": "none bm25q", "llm_free": True}
    assert json.loads((tmp_path / "metrics.json").read_text()) == {"a": {}}  # tasks only
    (tmp_path / "run.json").write_text("{")
    caplog.set_level(logging.WARNING)
    assert read_run_info(tmp_path) is None
    assert f"{tmp_path / 'run.json'}: damaged" in caplog.text


def test_task_info_is_none_when_absent_and_refused_when_damaged(tmp_path):
    assert read_task_info(tmp_path) is None
    runs.write_task_info(tmp_path, {"task": "toy", "fingerprint": {"corpus": "x"}})
    assert read_task_info(tmp_path)["fingerprint"] == {"corpus": "x"}
    (tmp_path / "task.json").write_text("{")
    with pytest.raises(ValueError, match="task.json: damaged"):
        read_task_info(tmp_path)


def test_task_dirs_follow_the_run_summary_then_sort_the_rest(tmp_path):
    for name in ("b", "a", "c"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "queries.jsonl").write_text("")
    (tmp_path / "not-a-task").mkdir()
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "queries.jsonl").write_text("")
    assert [p.name for p in task_dirs(tmp_path)] == ["a", "b", "c"]
    write_run_summary(tmp_path, {"c": {}, "gone": {}, "a": {}})
    assert [p.name for p in task_dirs(tmp_path)] == ["c", "a", "b"]
    assert task_dirs(tmp_path / "missing") == []


def test_records_keep_the_last_of_each_query_and_skip_a_torn_line(tmp_path):
    path = tmp_path / "queries.jsonl"
    first = {"query_id": "q1", "error": "boom", "query": "é"}
    again = {"query_id": "q1", "error": None, "query": "é"}
    path.write_text(record_line(first) + record_line(again) + '{"query_id": "q2", "err')
    assert read_records(path) == {"q1": again}
    assert read_records(path, ("error",)) == {"q1": {"error": None}}
    assert "é" in record_line(first)  # kept readable, not escaped


def test_per_query_round_trips_and_a_bad_line_is_named(tmp_path):
    assert read_per_query(tmp_path) == {}
    rows = {"q1": {"NDCG@10": 0.25, "MRR": 1.0}, "q2": {"NDCG@10": 0.0, "MRR": 0.0}}
    write_per_query(tmp_path, rows)
    assert read_per_query(tmp_path) == rows
    first = (tmp_path / "per_query.jsonl").read_text().splitlines()[0]
    assert list(json.loads(first)) == ["query_id", "NDCG@10", "MRR"]
    with open(tmp_path / "per_query.jsonl", "a") as f:
        f.write('{"NDCG@10": 1}\n')
    with pytest.raises(ValueError, match=r"per_query.jsonl, line 3: not a per-query row"):
        read_per_query(tmp_path)


# ---- stages ---------------------------------------------------------------------------------


def test_the_final_stage_is_the_one_metrics_json_names(tmp_path):
    task = tmp_path / "toy"
    task.mkdir()
    assert final_stage_dir(task) == task  # nothing written yet: the agent's own folder
    first, second = stage_dir_name(1, "llm"), stage_dir_name(2, "cross encoder")
    assert (first, second) == ("rerank-1-llm", "rerank-2-cross_encoder")
    for name in (second, first, "rerank-x-bad", "other"):
        (task / name).mkdir()
    assert stage_chain(task) == [task, task / first, task / second]  # unfinished: all of them

    write_task_summary(task, {"metrics": {"NDCG@10": 0.1}})  # written before stages existed
    assert final_stage_dir(task) == task
    stages = {"agent": {"NDCG@10": 0.1}, first: {"NDCG@10": 0.3}}
    write_task_summary(task, {"metrics": {"NDCG@10": 0.3}, "stages": stages, "final_stage": first})
    assert stage_chain(task) == [task, task / first]
    write_task_summary(
        task, {"metrics": {"NDCG@10": 0.1}, "stages": stages, "final_stage": "agent"}
    )
    assert final_stage_dir(task) == task

    for bad in ("../../elsewhere", "other", 3):
        write_task_summary(task, {"metrics": {}, "final_stage": bad})
        with pytest.raises(ValueError, match="is not a stage folder"):
            final_stage_dir(task)
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


def test_run_folder_readers_load_nothing_heavy():
    code = (
        "import sys, eval.runs, eval.usage, eval.metrics, agents.trace\n"
        "heavy = ('numpy', 'pytrec_eval', 'litellm', 'langgraph', 'torch')\n"
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == "[]"
