"""`as_langchain_retriever`: LangChain's own standard retriever tests, then ours.

LangChain's (`langchain_tests`) check the interface: a ``k`` in the constructor and in the
call, ``invoke`` and ``ainvoke`` returning ``Document`` lists. Ours check that what comes back
is the pipeline's ranking, exactly, over a retriever spec and over an agent pipeline (hyde, on
the scripted model), awaited or not; and that without the extra the call is one line.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from langchain_core.documents import Document
from langchain_tests.integration_tests import RetrieversIntegrationTests

from agents import from_settings
from agents.integrations import Pipeline, QueryFailed, as_langchain_retriever
from agents.integrations.langchain import langchain_retriever_class
from agents.llm import scripted
from eval.plumbing.extras import MissingExtra

REPO = Path(__file__).resolve().parents[3]
QUERY = "Why do fingertips wrinkle in water?"
PASSAGE = "Immersion wrinkling needs intact sympathetic nerves: vasoconstriction in the pulp."


@pytest.fixture(scope="module")
def bm25(tmp_path_factory) -> Pipeline:
    return Pipeline.retriever("bm25", cache_dir=str(tmp_path_factory.mktemp("cache")))


# anyio's marker runs the standard async test on asyncio and leaves the sync ones alone (the
# project sets no asyncio_mode, and a standard test may not be overridden to mark it)
@pytest.mark.anyio
class TestLangChainStandard(RetrieversIntegrationTests):
    @pytest.fixture(autouse=True)
    def on_bm25(self, bm25: Pipeline) -> None:
        self.pipeline = bm25

    @pytest.fixture
    def anyio_backend(self) -> str:
        return "asyncio"

    @property
    def retriever_constructor(self) -> type:
        return langchain_retriever_class()

    @property
    def retriever_constructor_params(self) -> dict:
        return {"pipeline": self.pipeline}

    @property
    def retriever_query_example(self) -> str:
        return QUERY


def expected(pipeline: Pipeline, query: str, k: int) -> list[tuple]:
    return [
        (doc_id, doc_id, pipeline.corpus[doc_id], score, rank)
        for rank, (doc_id, score) in enumerate(pipeline.search(query, k), 1)
    ]


def got(docs: list[Document]) -> list[tuple]:
    assert all(isinstance(d, Document) for d in docs)
    return [
        (d.id, d.metadata["id"], d.page_content, d.metadata["score"], d.metadata["rank"])
        for d in docs
    ]


def test_the_documents_are_the_pipelines_ranking_awaited_or_not(bm25: Pipeline):
    retriever = as_langchain_retriever(bm25, k=5)
    docs = retriever.invoke(QUERY)
    assert got(docs) == expected(bm25, QUERY, 5)
    assert got(asyncio.run(retriever.ainvoke(QUERY))) == got(docs)
    assert docs[0].id == "d261"  # the demo's wrinkling document, as bm25 ranks it
    assert {d.metadata["task"] for d in docs} == {"demo"}
    assert {d.metadata["pipeline"] for d in docs} == {bm25.name}
    # the call's k, over the constructor's
    assert got(retriever.invoke(QUERY, k=2)) == expected(bm25, QUERY, 2)
    assert got(retriever.batch([QUERY, "asparagus urine smell"])[1]) == expected(
        bm25, "asparagus urine smell", 5
    )


def test_k_is_capped_by_the_runs_depth_and_must_be_positive(tmp_path: Path):
    shallow = Pipeline.retriever("bm25", depth=4, cache_dir=str(tmp_path))
    retriever = as_langchain_retriever(shallow, k=10)
    assert len(retriever.invoke(QUERY)) == 4
    with pytest.raises(ValueError, match="k: a positive number of documents, not 0"):
        retriever.invoke(QUERY, k=0)
    with pytest.raises(ValueError):  # pydantic's refusal, at construction
        as_langchain_retriever(shallow, k=0)


def passage(messages: list[dict], params: dict) -> str:
    return PASSAGE


@pytest.fixture
def provider() -> scripted.ScriptedProvider:
    return scripted.install(passage)


@pytest.fixture
def hyde(provider: scripted.ScriptedProvider, tmp_path: Path) -> Pipeline:
    config = from_settings({"agent": "hyde", "dataset": "demo", "model": "scripted/lc",
                            "concurrency": 1, "cache_dir": str(tmp_path / "cache")})  # fmt: skip
    return Pipeline.open(config)


def test_an_agent_pipelines_documents_are_its_ranking(hyde: Pipeline, provider, bm25: Pipeline):
    retriever = as_langchain_retriever(hyde, k=5)
    docs = retriever.invoke("asparagus urine smell")
    assert provider.calls == 1  # hyde wrote a passage, which was searched
    assert got(docs) == expected(hyde, "asparagus urine smell", 5)
    assert got(asyncio.run(retriever.ainvoke("asparagus urine smell"))) == got(docs)
    assert provider.calls == 1  # the same query again: the LLM cache answers
    # hyde searched its passage, not the query: bm25 on the query ranks otherwise
    assert [d.id for d in docs] != [d for d, _ in bm25.search("asparagus urine smell", 5)]
    assert docs[0].id == bm25.search(PASSAGE, 1)[0][0]
    assert {d.metadata["pipeline"] for d in docs} == {hyde.name} and "hyde" in hyde.name


def test_a_failed_query_raises_the_pipelines_error(tmp_path: Path):
    scripted.install(lambda messages, params: ValueError("the model broke"))
    config = from_settings({"agent": "hyde", "dataset": "demo", "model": "scripted/broken",
                            "concurrency": 1, "cache_dir": str(tmp_path / "cache")})  # fmt: skip
    retriever = as_langchain_retriever(Pipeline.open(config))
    with pytest.raises(QueryFailed, match="the model broke"):
        retriever.invoke(QUERY)
    with pytest.raises(QueryFailed, match="the model broke"):
        asyncio.run(retriever.ainvoke(QUERY))


def test_without_the_extra_the_call_is_one_line(bm25: Pipeline, monkeypatch):
    langchain_retriever_class.cache_clear()  # the class built by earlier tests
    monkeypatch.setitem(sys.modules, "langchain_core", None)  # as if not installed
    try:
        with pytest.raises(MissingExtra) as refused:
            as_langchain_retriever(bm25)
    finally:
        langchain_retriever_class.cache_clear()
    assert str(refused.value) == (
        "as_langchain_retriever needs langchain_core, which is not installed: "
        "pip install 'r2med-agents[langchain]'"
    )
