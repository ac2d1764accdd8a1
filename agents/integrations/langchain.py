"""A pipeline as a LangChain retriever (``[langchain]``; docs/integrations.md).

`as_langchain_retriever(pipeline, k)` is a ``langchain_core.retrievers.BaseRetriever``: a query
gets the pipeline's final ranking (`Pipeline.search`, or `Pipeline.asearch` when awaited) as
LangChain ``Document`` objects, best first, each the document's corpus text with its doc id as
``Document.id`` and ``metadata["id"]``, and the ranking's ``score`` and ``rank`` (1 = best)
beside it. ``k`` is the constructor's, or the call's (``retriever.invoke(query, k=3)``).

langchain_core is imported when the adapter is first called, never when this module is: its
class is built then (`langchain_retriever_class`), and without the extra that call is one line
naming it.
"""

from __future__ import annotations

import functools
from typing import Any

from agents.execution.pipeline import Pipeline, Ranking, check_k
from agents.integrations.documents import ranked
from eval.plumbing.extras import import_extra

FEATURE = "as_langchain_retriever"


def as_langchain_retriever(pipeline: Pipeline, k: int = 10) -> Any:
    """``pipeline`` as a LangChain ``BaseRetriever`` returning its top ``k`` as ``Document``s."""
    return langchain_retriever_class()(pipeline=pipeline, k=k)


@functools.cache
def langchain_retriever_class() -> type:
    """The ``BaseRetriever`` subclass over a `Pipeline` (``PipelineRetriever(pipeline=, k=)``),
    defined on first use: its base class is langchain_core's."""
    import_extra("langchain_core", "langchain", FEATURE)
    from langchain_core.callbacks import (
        AsyncCallbackManagerForRetrieverRun,
        CallbackManagerForRetrieverRun,
    )
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever
    from pydantic import Field, InstanceOf

    class PipelineRetriever(BaseRetriever):
        """A `Pipeline`'s final ranking as LangChain documents (agents.integrations)."""

        # InstanceOf: pydantic would otherwise rebuild the Pipeline dataclass field by field
        pipeline: InstanceOf[Pipeline]
        k: int = Field(default=10, ge=1)

        def _get_relevant_documents(
            self,
            query: str,
            *,
            run_manager: CallbackManagerForRetrieverRun,
            k: int | None = None,
        ) -> list[Document]:
            return self._documents(self.pipeline.search(query, self._k(k)))

        async def _aget_relevant_documents(
            self,
            query: str,
            *,
            run_manager: AsyncCallbackManagerForRetrieverRun,
            k: int | None = None,
        ) -> list[Document]:
            return self._documents(await self.pipeline.asearch(query, self._k(k)))

        def _k(self, k: int | None) -> int:
            check_k(k)
            return self.k if k is None else k

        def _documents(self, ranking: Ranking) -> list[Document]:
            return [
                Document(id=doc_id, page_content=text, metadata=meta)
                for doc_id, text, meta in ranked(self.pipeline, ranking)
            ]

    return PipelineRetriever
