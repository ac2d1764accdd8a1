"""A pipeline as a LlamaIndex retriever (``[llamaindex]``; docs/integrations.md).

`as_llamaindex_retriever(pipeline, k)` is a ``llama_index.core.retrievers.BaseRetriever``: a
query gets the pipeline's final ranking (`Pipeline.search`, or `Pipeline.asearch` through
``aretrieve``) as ``NodeWithScore`` objects, best first: a ``TextNode`` whose ``id_`` is the doc
id and whose text is the corpus's, the ranking's score as the node's score, and the id, score
and rank (1 = best) in its metadata. Only the id is shown to an LLM (a query engine's prompt
cites it); the rest is kept out of the prompt and out of any embedding.

llama_index.core is imported when the adapter is first called, never when this module is;
without the extra that call is one line naming it.
"""

from __future__ import annotations

import functools
from typing import Any

from agents.execution.pipeline import Pipeline, check_k
from agents.integrations.documents import ranked
from eval.plumbing.extras import import_extra

FEATURE = "as_llamaindex_retriever"
HIDDEN_FROM_LLM = ["score", "rank", "task", "pipeline"]


def as_llamaindex_retriever(pipeline: Pipeline, k: int = 10) -> Any:
    """``pipeline`` as a LlamaIndex ``BaseRetriever`` returning its top ``k`` nodes."""
    check_k(k)
    return llamaindex_retriever_class()(pipeline, k)


@functools.cache
def llamaindex_retriever_class() -> type:
    """The ``BaseRetriever`` subclass over a `Pipeline` (``PipelineRetriever(pipeline, k)``),
    defined on first use: its base class is llama_index.core's."""
    import_extra("llama_index.core", "llamaindex", FEATURE)
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

    class PipelineRetriever(BaseRetriever):
        """A `Pipeline`'s final ranking as LlamaIndex nodes (agents.integrations)."""

        def __init__(self, pipeline: Pipeline, k: int = 10, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.pipeline = pipeline
            self.k = k

        def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
            return self._nodes(self.pipeline.search(query_bundle.query_str, self.k))

        async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
            return self._nodes(await self.pipeline.asearch(query_bundle.query_str, self.k))

        def _nodes(self, ranking: list[tuple[str, float]]) -> list[NodeWithScore]:
            return [
                NodeWithScore(
                    node=TextNode(
                        id_=doc_id,
                        text=text,
                        metadata=meta,
                        excluded_llm_metadata_keys=HIDDEN_FROM_LLM,
                        excluded_embed_metadata_keys=HIDDEN_FROM_LLM,
                    ),
                    score=meta["score"],
                )  # fmt: skip
                for doc_id, text, meta in ranked(self.pipeline, ranking)
            ]

    return PipelineRetriever
