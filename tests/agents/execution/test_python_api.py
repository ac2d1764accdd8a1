"""The library face: `agents.run_query` on one query, and the packages' exports.

`run_query`'s promise is the run's code path without the run folder: on a query of a task it
gives the ranking (every stage's) and the figures that query gets in a run of the same config.
The unit tests check that with the scripted model; docs/python.md runs with the embedded model
as a notebook (tests/project/test_python_notebook.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from agents import QueryResult, RunConfig, arun_query, from_settings, run_dataset, run_query
from agents.execution.plan import RunError
from agents.llm import scripted
from eval.runs import StageFolder, TaskFolder

REPO = Path(__file__).resolve().parents[3]
DOC = REPO / "docs" / "python.md"
PASSAGE = "Fingertip wrinkling is controlled by the sympathetic nerves."


def reply(messages: list[dict], params: dict) -> str:
    """A passage for the agent, a grade for llm-pointwise; both fixed by the prompt's text,
    so a query's replies are the same whichever call asks."""
    text = messages[-1]["content"]
    if "passage to help answer" in text:
        return PASSAGE
    return str(int(hashlib.sha256(text.encode()).hexdigest(), 16) % 4)


def config(tmp_path: Path, **settings) -> RunConfig:
    return from_settings({
        "agent": "hyde", "dataset": "demo", "model": "scripted/api", "concurrency": 1,
        "runs_dir": str(tmp_path / "runs"), "cache_dir": str(tmp_path / "cache"), **settings,
    })  # fmt: skip


@pytest.fixture
def provider():
    return scripted.install(reply)


def test_a_query_gets_what_a_run_records_for_it(provider, tmp_path: Path):
    cfg = config(tmp_path, rerank=["llm-pointwise,depth=5"])
    result = run_query(cfg, "q02")
    assert isinstance(result, QueryResult) and not (tmp_path / "runs").exists()
    assert (result.query_id, result.task) == ("q02", "demo") and result.error is None
    assert [s.name for s in result.stages] == ["agent", "rerank-1-llm-pointwise"]
    # the passage, then a grade per reranked passage
    assert [(c["stage"], c["node"]) for c in result.calls] == [("agent", "generate")] + [
        ("rerank-1-llm-pointwise", "judge")
    ] * 5
    # every call is counted: the scripted provider answers the first judgement's logprobs call
    # without logprobs, so that judgement also asks for a grade (one step, two calls)
    assert result.usage.calls == 7 and result.usage.cached_calls == 0
    assert list(result.generated.values()) == [PASSAGE]

    run = run_dataset(dataclasses.replace(cfg, limit=2), progress=False)
    task_dir = run.run_dir / "demo"
    final = run.tasks["demo"].records["q02"]
    assert result.ranking == [(d, s) for d, s in final["ranking"]]
    agent = read_records_of(task_dir)["q02"]
    assert result.stages[0].ranking == [(d, s) for d, s in agent["ranking"]]
    assert [s["node"] for s in result.stages[0].steps] == [s["node"] for s in agent["steps"]]
    # the figures are the run's, per stage
    assert result.stages[0].metrics == StageFolder(task_dir).per_query()["q02"]
    assert result.metrics == StageFolder(task_dir / "rerank-1-llm-pointwise").per_query()["q02"]
    # the run's q02 came from the cache run_query filled: the same replies, so the same lists
    assert all(s["cached"] for s in [*agent["steps"], *final["steps"]] if "usage" in s)


def read_records_of(task_dir: Path) -> dict:
    return TaskFolder(task_dir).records()


def test_a_query_text_of_ones_own(provider, tmp_path: Path):
    result = run_query(config(tmp_path), text="Why do fingers wrinkle in water?")
    assert (result.query_id, result.query, result.metrics) == (
        "text",
        "Why do fingers wrinkle in water?",
        None,
    )
    assert "Why do fingers wrinkle in water?" in result.calls[0]["messages"][-1]["content"]
    assert result.ranking and [s.name for s in result.stages] == ["agent"]
    # with a query id too, that query's qrels score the new wording
    worded = run_query(config(tmp_path), "q01", text="Why do fingers wrinkle in water?")
    assert worded.query_id == "q01" and worded.metrics is not None
    assert worded.ranking == result.ranking  # the same text, the same ranking
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("args", "kwargs", "says"),
    [
        (
            ("q99",),
            {},
            "query 'q99': not a query of task demo (15 queries: q01, q02, q03, ... q15)",
        ),
        ((), {}, "run_query: give a query id of the task, or text=, a query of your own"),
        (("q01",), {"task": "Biology"}, "task 'Biology': not one of the run's tasks (demo)"),
        ((), {"text": "  "}, "text: an empty query"),
    ],
)
def test_what_is_refused_is_said_in_one_line(provider, tmp_path: Path, args, kwargs, says):
    with pytest.raises(RunError) as caught:
        run_query(config(tmp_path), *args, **kwargs)
    assert str(caught.value) == says
    assert provider.calls == 0 and not (tmp_path / "runs").exists()


def test_a_bad_prompt_override_is_refused_as_a_run_refuses_it(provider, tmp_path: Path):
    bad = tmp_path / "bad.txt"
    bad.write_text("no placeholder here")
    with pytest.raises(ValueError, match=r"^[^\n]*$"):
        run_query(config(tmp_path, prompt=[f"hyde={bad}"]), "q01")
    assert provider.calls == 0


def test_inside_a_running_loop_and_awaited(provider, tmp_path: Path):
    cfg = config(tmp_path)

    async def notebook_cell() -> tuple[QueryResult, QueryResult]:
        threaded = run_query(cfg, "q03")  # a loop runs here: a worker thread answers
        awaited = await arun_query(cfg, "q03")
        return threaded, awaited

    threaded, awaited = asyncio.run(notebook_cell())
    assert threaded.ranking == awaited.ranking
    assert (threaded.usage.cached_calls, awaited.usage.cached_calls) == (0, 1)


def test_importing_the_packages_loads_nothing_else():
    code = (
        "import sys, agents, eval, retrievers\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('agents', 'eval', 'retrievers', 'numpy', 'litellm', 'prompts')))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    # eval.plumbing.lazy (the packages' one __getattr__) and nothing else
    assert done.stdout.split() == [
        "['agents',",
        "'eval',",
        "'eval.plumbing',",
        "'eval.plumbing.lazy',",
        "'retrievers']",
    ], done.stderr


def test_every_exported_name_resolves_and_none_is_shadowed_by_a_module():
    import agents

    # the command line's module: the package's run_dataset is still a call
    import agents.commands.run
    import agents.integrations
    import agents.llm
    import eval
    import eval.compare
    import eval.evaluate  # noqa: F401
    import retrievers
    from agents.execution.whole_run import run_dataset

    for package in (agents, eval, retrievers, agents.llm, eval.compare, agents.integrations):
        for name in package.__all__:
            assert getattr(package, name) is not None, f"{package.__name__}.{name}"
            assert name in dir(package)
    assert agents.run_dataset is run_dataset and callable(eval.evaluate_run)
    with pytest.raises(AttributeError):
        agents.no_such_name  # noqa: B018


def test_a_face_name_is_the_name_where_it_is_defined():
    """No name changes at a face: a class or function is exported under its own name."""
    import agents
    import agents.integrations
    import agents.llm
    import eval
    import eval.compare
    import retrievers

    for package in (agents, eval, retrievers, agents.llm, eval.compare, agents.integrations):
        for name in package.__all__:
            value = getattr(package, name)
            if callable(value) and hasattr(value, "__name__"):
                assert value.__name__ == name, f"{package.__name__}.{name} is {value.__name__}"
    assert {"StageConfig"} <= set(agents.__all__)
    assert {"Retriever", "RetrieverConfig", "SearchRequest"} <= set(retrievers.__all__)


def test_docs_python_md_lists_each_face_as_it_is():
    """docs/python.md's table of public names is each package's ``__all__``, in order."""
    import agents
    import agents.integrations
    import eval
    import retrievers

    text = (REPO / "docs" / "python.md").read_text()
    for package in (agents, retrievers, eval, agents.integrations):
        [row] = [line for line in text.splitlines() if line.startswith(f"| `{package.__name__}` |")]
        assert re.findall(r"`(\w+)`", row.split("|")[2]) == package.__all__, package.__name__
