"""`as_llamaindex_retriever`: the pipeline's ranking as LlamaIndex nodes, and a query engine
over it on the demo task, with LlamaIndex's `MockLLM` and (slow) with the embedded model served
by llama.cpp's server."""

from __future__ import annotations

import asyncio
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.llms import MockLLM
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import MetadataMode, NodeWithScore, TextNode

from agents import from_settings
from agents.integrations import Pipeline, QueryFailed, as_llamaindex_retriever
from agents.integrations.llamaindex import llamaindex_retriever_class
from agents.llm import scripted
from eval.plumbing.extras import MissingExtra
from tests.helpers import serve_llama_cpp

REPO = Path(__file__).resolve().parents[3]
QUERY = "Why do fingertips wrinkle in water?"
PASSAGE = "Immersion wrinkling needs intact sympathetic nerves: vasoconstriction in the pulp."


@pytest.fixture(scope="module")
def bm25(tmp_path_factory) -> Pipeline:
    return Pipeline.retriever("bm25", cache_dir=str(tmp_path_factory.mktemp("cache")))


def expected(pipeline: Pipeline, query: str, k: int) -> list[tuple]:
    return [
        (doc_id, doc_id, pipeline.corpus[doc_id], score, score, rank)
        for rank, (doc_id, score) in enumerate(pipeline.search(query, k), 1)
    ]


def got(nodes: list[NodeWithScore]) -> list[tuple]:
    assert all(isinstance(n, NodeWithScore) and isinstance(n.node, TextNode) for n in nodes)
    return [
        (n.node.node_id, n.node.metadata["id"], n.node.text, n.score, n.node.metadata["score"],
         n.node.metadata["rank"])
        for n in nodes
    ]  # fmt: skip


def test_the_nodes_are_the_pipelines_ranking_awaited_or_not(bm25: Pipeline):
    retriever = as_llamaindex_retriever(bm25, k=5)
    nodes = retriever.retrieve(QUERY)
    assert got(nodes) == expected(bm25, QUERY, 5)
    assert got(asyncio.run(retriever.aretrieve(QUERY))) == got(nodes)
    assert nodes[0].node.node_id == "d261"  # the demo's wrinkling document, as bm25 ranks it
    assert {n.node.metadata["pipeline"] for n in nodes} == {bm25.name}
    # an LLM sees the id beside the text, not the ranking's figures
    shown = nodes[0].node.get_content(metadata_mode=MetadataMode.LLM)
    assert shown.startswith("id: d261\n") and "score" not in shown and "rank" not in shown


def test_k_is_capped_by_the_runs_depth_and_must_be_positive(tmp_path: Path):
    shallow = Pipeline.retriever("bm25", depth=4, cache_dir=str(tmp_path))
    assert len(as_llamaindex_retriever(shallow, k=10).retrieve(QUERY)) == 4
    with pytest.raises(ValueError, match="k: a positive number of documents, not 0"):
        as_llamaindex_retriever(shallow, k=0)


def test_a_query_engine_cites_our_ranking(bm25: Pipeline):
    engine = RetrieverQueryEngine.from_args(as_llamaindex_retriever(bm25, k=3), llm=MockLLM())
    response = engine.query(QUERY)
    top = bm25.search(QUERY, 3)
    assert [(n.node.node_id, n.score) for n in response.source_nodes] == top
    # MockLLM answers with its prompt: our passages, in our order, ids shown, figures not
    prompt = str(response)
    assert re.findall(r"^id: (d\d+)$", prompt, re.MULTILINE) == [d for d, _ in top]
    assert bm25.corpus[top[0][0]] in prompt and "score:" not in prompt
    awaited = asyncio.run(engine.aquery(QUERY))
    assert [(n.node.node_id, n.score) for n in awaited.source_nodes] == top


def passage(messages: list[dict], params: dict) -> str:
    return PASSAGE


def test_an_agent_pipelines_nodes_are_its_ranking(tmp_path: Path, bm25: Pipeline):
    provider = scripted.install(passage)
    config = from_settings({"agent": "hyde", "dataset": "demo", "model": "scripted/li",
                            "concurrency": 1, "cache_dir": str(tmp_path / "cache")})  # fmt: skip
    hyde = Pipeline.open(config)
    retriever = as_llamaindex_retriever(hyde, k=5)
    nodes = retriever.retrieve("asparagus urine smell")
    assert provider.calls == 1  # hyde wrote a passage, which was searched
    assert got(nodes) == expected(hyde, "asparagus urine smell", 5)
    assert got(asyncio.run(retriever.aretrieve("asparagus urine smell"))) == got(nodes)
    assert provider.calls == 1  # the same query again: the LLM cache answers
    assert nodes[0].node.node_id == bm25.search(PASSAGE, 1)[0][0]
    assert [n.node.node_id for n in nodes] != [d for d, _ in bm25.search("asparagus", 5)]

    scripted.install(lambda messages, params: ValueError("the model broke"), name="scripted")
    with pytest.raises(QueryFailed, match="the model broke"):
        retriever.retrieve("a question never asked before")


def test_without_the_extra_the_call_is_one_line(bm25: Pipeline, monkeypatch):
    llamaindex_retriever_class.cache_clear()  # the class built by earlier tests
    monkeypatch.setitem(sys.modules, "llama_index.core", None)  # as if not installed
    try:
        with pytest.raises(MissingExtra) as refused:
            as_llamaindex_retriever(bm25)
    finally:
        llamaindex_retriever_class.cache_clear()
    assert str(refused.value) == (
        "as_llamaindex_retriever needs llama_index, which is not installed: "
        "pip install 'r2med-agents[llamaindex]'"
    )


# --- a query engine with a real LLM ------------------------------------------------------------

MODEL = "qwen2.5-coder-0.5b"


@pytest.fixture
def server(tmp_path: Path, models_cache: Path) -> Iterator[str]:
    """The embedded model behind llama_cpp.server on a free loopback port, stopped after."""
    from agents.llm.embedded.weights import model_file

    yield from serve_llama_cpp(model_file(MODEL, models_cache), MODEL, tmp_path / "server.log",
                               "--n_ctx", "4096")  # fmt: skip


def served_llm(url: str) -> Any:
    """A LlamaIndex LLM over an OpenAI-compatible server: llama-index-core has none (its
    OpenAI-like LLM is a package of its own), so a `CustomLLM` of a few lines, on `openai`."""
    from llama_index.core.llms import CompletionResponse, CustomLLM, LLMMetadata
    from openai import OpenAI

    class Served(CustomLLM):
        url: str
        replies: list[str] = []

        @property
        def metadata(self) -> LLMMetadata:
            return LLMMetadata(model_name=MODEL, context_window=4096, num_output=128)

        def complete(self, prompt: str, formatted: bool = False, **kwargs: Any):
            client = OpenAI(base_url=self.url, api_key="none")
            reply = client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": prompt}], temperature=0,
                seed=0, max_tokens=128,
            )  # fmt: skip
            self.replies.append(reply.choices[0].message.content or "")
            return CompletionResponse(text=self.replies[-1])

        def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any):
            raise NotImplementedError("the query engine here does not stream")

    return Served(url=url)


@pytest.mark.slow
def test_a_query_engine_answers_from_our_ranking_with_the_embedded_model(server: str, bm25):
    llm = served_llm(server)
    engine = RetrieverQueryEngine.from_args(as_llamaindex_retriever(bm25, k=3), llm=llm)
    response = engine.query(QUERY)
    assert [(n.node.node_id, n.score) for n in response.source_nodes] == bm25.search(QUERY, 3)
    assert len(llm.replies) == 1 and str(response).strip() == llm.replies[0].strip() != ""
    again = engine.query(QUERY)  # temperature 0 and a fixed seed: the same answer
    assert str(again) == str(response)
