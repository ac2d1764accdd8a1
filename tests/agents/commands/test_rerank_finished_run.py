"""`python -m agents.rerank RUN_FOLDER`: reranking a finished run reuses its saved lists."""

from __future__ import annotations

import json
import math

import pytest

import agents.execution.whole_run
from agents.commands.rerank import main as rerank_main
from agents.commands.run import main as run_main
from agents.commands.trace import main as trace_main
from agents.llm import scripted
from eval.records import read_records

PASSAGE = "Metformin lowers hepatic glucose production in type 2 diabetes."


def respond(messages, params):
    content = messages[-1]["content"]
    if "Passage: " in content and params.get("logprobs"):  # llm-pointwise
        p = 0.9 if "Insulin" in content else 0.3  # d1, below the agent's top (d2)
        return scripted.Reply("yes", [("yes", math.log(p), [("yes", math.log(p)),
                                                            ("no", math.log(1 - p))])])  # fmt: skip
    if "Rank the" in content:  # llm-listwise: the window upside down
        k = sum(1 for m in messages if m["role"] == "user" and m["content"][:1] == "[")
        return " > ".join(f"[{i}]" for i in range(k, 0, -1))
    return PASSAGE  # the hyde agent


@pytest.fixture
def source(tmp_path, toy_dir):
    """A finished hyde run that ends in llm-pointwise."""
    provider = scripted.install(respond)
    assert run_main([
        "--agent", "hyde", "--dataset", str(toy_dir), "--model", "scripted/x",
        "--rerank", "llm-pointwise,depth=5",
        "--runs-dir", str(tmp_path / "runs"), "--cache-dir", str(tmp_path / "cache"),
        "--run-name", "src", "--quiet",
    ]) == 0  # fmt: skip
    assert provider.calls > 0
    return tmp_path / "runs" / "src"


@pytest.fixture
def no_first_stage(monkeypatch):
    """Any retriever build is a failure: a rerank of a finished run must need none."""

    def refuse(*args, **kwargs):
        raise AssertionError("a retriever was built")

    monkeypatch.setattr(agents.execution.whole_run, "build_retriever", refuse)


def cli(source, *flags):
    return rerank_main([str(source), *flags, "--cache-dir", str(source.parent.parent / "cache"),
                        "--quiet"])  # fmt: skip


def test_a_rerank_reuses_the_first_stage_and_the_shared_stage_and_pays_only_for_the_new(
    source, no_first_stage, capsys
):
    provider = scripted.install(respond)  # counts from zero
    args = ("--rerank", "llm-pointwise,depth=5", "--rerank", "llm-listwise",
            "--rerank-window", "2", "--rerank-step", "1")  # fmt: skip
    assert cli(source, *args) == 0
    out = source.parent / "src-reranked-llm-pointwise,depth=5-llm-listwise,window=2,step=1"
    assert out.is_dir()
    config = json.loads((out / "config.json").read_text())
    assert config["source_run"] == str(source.resolve())
    assert config["agent"] == "hyde" and config["llm"]["model"] == "scripted/x"
    assert [s["kind"] for s in config["rerank"]] == ["llm-pointwise", "llm-listwise"]
    assert any(n.startswith("hyde/") for n in config["prompts"])  # the agent's, as recorded
    # the agent's records and the shared pointwise stage are the source's, byte for byte
    for part in ("queries.jsonl", "rerank-1-llm-pointwise/queries.jsonl"):
        assert (out / "toy" / part).read_bytes() == (source / "toy" / part).read_bytes()
    listwise = read_records(out / "toy" / "rerank-2-llm-listwise" / "queries.jsonl")
    windows = sum(len(r["steps"]) for r in listwise.values())
    assert windows > 0
    assert provider.calls == windows  # no agent call, no pointwise judgement: only windows
    pointwise = read_records(out / "toy" / "rerank-1-llm-pointwise" / "queries.jsonl")
    for q, record in listwise.items():
        # the cascade in order: listwise starts from pointwise's order, not the agent's;
        # replaying its window reversals on that order gives its saved ranking
        order = [d for d, _ in pointwise[q]["ranking"]]
        for step in record["steps"]:
            lo, hi = step["window"]
            assert step["doc_ids"] == order[lo:hi]
            order[lo:hi] = order[lo:hi][::-1]
        assert [d for d, _ in record["ranking"]] == order
    agent = read_records(out / "toy" / "queries.jsonl")
    moved = [q for q in agent if pointwise[q]["ranking"][0][0] != agent[q]["ranking"][0][0]]
    assert moved and all(pointwise[q]["ranking"][0][0] == "d1" for q in moved)
    summary = json.loads((out / "toy" / "metrics.json").read_text())
    assert summary["final_stage"] == "rerank-2-llm-listwise"
    assert set(summary["stages"]) == {"agent", "rerank-1-llm-pointwise", "rerank-2-llm-listwise"}
    source_summary = json.loads((source / "toy" / "metrics.json").read_text())
    assert summary["stages"]["agent"] == source_summary["stages"]["agent"]
    assert summary["bm25_baseline"] == source_summary["bm25_baseline"]
    # the usage is what the lists cost, the source's share included
    assert summary["usage"]["calls"] == source_summary["usage"]["calls"] + windows

    capsys.readouterr()
    assert trace_main([str(out), "q1"]) == 0
    shown = capsys.readouterr().out
    assert "stage rerank-1-llm-pointwise" in shown and "stage rerank-2-llm-listwise" in shown
    assert "window positions" in shown and "from logprobs" in shown

    assert cli(source, *args) == 0  # again: the folder is finished
    assert provider.calls == windows


def test_a_rerank_of_an_unfinished_or_foreign_folder_is_refused_in_one_line(
    source, tmp_path, capsys
):
    assert cli(tmp_path / "nowhere", "--rerank", "llm-listwise") == 2
    assert "not a run folder" in capsys.readouterr().err
    (source / "toy" / "metrics.json").unlink()
    assert cli(source, "--rerank", "llm-listwise") == 2
    err = capsys.readouterr().err
    assert "not finished; resume that run first" in err and len(err.strip().splitlines()) == 1
    assert cli(source, "--rerank", "llm-listwise", "--temperature", "0.7") == 2
    assert "the source run's agent used 0.0" in capsys.readouterr().err


def test_a_rerank_of_a_run_without_an_llm_uses_the_rerank_model(tmp_path, toy_dir):
    provider = scripted.install(respond)
    assert run_main([
        "--agent", "none", "--dataset", str(toy_dir),
        "--runs-dir", str(tmp_path / "runs"), "--cache-dir", str(tmp_path / "cache"),
        "--run-name", "bm25", "--quiet",
    ]) == 0  # fmt: skip
    assert cli(tmp_path / "runs" / "bm25", "--rerank", "llm-pointwise",
               "--rerank-model", "scripted/y", "--run-name", "pw") == 0  # fmt: skip
    config = json.loads((tmp_path / "runs" / "pw" / "config.json").read_text())
    assert config["llm"]["model"] == "scripted/y"
    assert config["rerank"][0]["options"]["model"] == "scripted/y"
    assert provider.calls > 0
