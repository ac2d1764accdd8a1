"""`Pipeline`: a run's agent and stages prepared once, ranking queries of any text as the run
ranks its own (agents/execution/pipeline.py), the integrations' one entry."""

from __future__ import annotations

import asyncio
import dataclasses
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from agents import LLMConfig, RunConfig, run_dataset, run_query
from agents.config.stages import parse_stage
from agents.execution.pipeline import Pipeline, QueryFailed
from agents.llm import scripted
from eval import default_cache_dir, load_task
from eval.datasets import Task


def hyde_with_a_rerank(tmp_path: Path, dataset: str) -> RunConfig:
    scripted.install(lambda messages, params: (
        "[2] > [1] > [3]" if "rank" in messages[-1]["content"].lower()
        else "Statins and the heart; mitochondria make ATP."))  # fmt: skip
    return RunConfig(agent="hyde", dataset=dataset, llm=LLMConfig(model="scripted/x"),
                     rerank=(parse_stage("llm-listwise,depth=5,window=3,step=2"),),
                     runs_dir=str(tmp_path / "runs"),
                     cache_dir=str(tmp_path / "cache"))  # fmt: skip


def test_a_pipeline_ranks_a_tasks_queries_as_its_run_and_run_query(tmp_path, toy_dir):
    config = hyde_with_a_rerank(tmp_path, str(toy_dir))
    [task] = run_dataset(config, progress=False).tasks.values()
    pipeline = Pipeline.open(config)
    queries = load_task(str(toy_dir), default_cache_dir()).queries
    ranked = pipeline.search_many(queries, progress=False)
    assert ranked == {q: [(d, s) for d, s in r["ranking"]] for q, r in task.records.items()}
    assert task.summary.final_stage.startswith("rerank-1-")  # the stage ran, and counted
    first = next(iter(queries))
    assert pipeline.search(queries[first], k=2) == run_query(config, first).ranking[:2]


def test_a_task_held_in_memory_is_searched_under_its_name(tmp_path):
    corpus = {"a": "mitochondria make atp", "b": "the heart pumps blood", "c": "kidneys filter"}
    task = Task(name="Biology", corpus=corpus, queries={}, qrels={}, path=tmp_path / "mem")
    pipeline = Pipeline.retriever("bm25", task=task, cache_dir=str(tmp_path / "cache"))
    assert pipeline.task_plan.task.name == "Biology" and pipeline.corpus == corpus
    assert [d for d, _ in pipeline.search("how does the heart pump blood")] == ["b"]
    assert pipeline.search_many({"q": "zzz qqq"}, progress=False) == {"q": []}


def test_a_failed_query_raises_alone_and_is_an_empty_ranking_among_many(tmp_path, toy_dir):
    def fail(messages, params):
        raise RuntimeError("the model is down")

    scripted.install(fail)
    config = RunConfig(agent="hyde", dataset=str(toy_dir), llm=LLMConfig(model="scripted/x"),
                       cache_dir=str(tmp_path / "cache"))  # fmt: skip
    pipeline = Pipeline.open(config)
    with pytest.raises(QueryFailed, match="the model is down"):
        pipeline.search("statins")
    assert pipeline.search_many({"q1": "statins", "q2": "atp"}, progress=False) == {
        "q1": [], "q2": []}  # fmt: skip


def test_a_search_gives_the_same_in_a_script_a_running_loop_and_threads(tmp_path, toy_dir):
    bm25 = Pipeline.retriever("bm25", dataset=str(toy_dir), cache_dir=str(tmp_path / "cache"))
    alone = bm25.search("statins cholesterol")

    async def notebook_cell():  # an event loop already runs, as in a Jupyter kernel
        return bm25.search("statins cholesterol"), await bm25.asearch("statins cholesterol")

    assert asyncio.run(notebook_cell()) == (alone, alone)
    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(bm25.search, ["statins cholesterol"] * 4)) == [alone] * 4


def test_what_a_pipeline_refuses_is_one_line(tmp_path, toy_dir):
    bm25 = Pipeline.retriever("bm25", dataset=str(toy_dir), cache_dir=str(tmp_path / "cache"))
    with pytest.raises(ValueError, match="an empty query"):
        bm25.search("  ")
    for k in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match=f"k: a positive number of documents, not {k!r}"):
            bm25.search("statins", k=k)
        with pytest.raises(ValueError, match="k: a positive number of documents"):
            bm25.search_many({"q": "statins"}, k=k, progress=False)
    with pytest.raises(ValueError, match="depth"):
        Pipeline.retriever("bm25", dataset=str(toy_dir), depth=0)
    two = dataclasses.replace(bm25.config, dataset=f"{toy_dir},demo")
    with pytest.raises(ValueError, match="names 2 tasks") as e:
        Pipeline.open(two)
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match="ranks new queries"):
        Pipeline.open(dataclasses.replace(bm25.config, source_run=str(tmp_path)))
