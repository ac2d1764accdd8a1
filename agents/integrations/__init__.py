"""Our retrievers and agents inside the tools the field already uses (docs/integrations.md).

* MTEB (``[mteb]``): `mteb_encoder` makes a dense family an MTEB encoder, with R2MED's
  instructions on R2MED's tasks; `MTEBSearch` puts any pipeline (agent, retriever, rerank
  stages) behind MTEB's search protocol; `local_retrieval_task` makes a local folder an MTEB
  retrieval task (no hub).
* LangChain (``[langchain]``): `as_langchain_retriever`.
* LlamaIndex (``[llamaindex]``): `as_llamaindex_retriever`.

Every adapter takes a `Pipeline` (`agents.execution.pipeline`): ``Pipeline.retriever("bm25")``
for a retriever spec alone, ``Pipeline.open(run_config)`` for an agent and its stages.
The names load on first use, and each tool's library only when its adapter is called: without
its extra, that call is one line naming the extra to install.
"""

from __future__ import annotations

from eval.plumbing.lazy import lazy_face

# module -> the public names defined there, each under its own name
__all__, __getattr__, __dir__ = lazy_face(
    globals(),
    {
        "agents.execution.pipeline": ("Pipeline", "QueryFailed"),
        "agents.integrations.mteb_encoder": ("mteb_encoder", "MTEBEncoder"),
        "agents.integrations.mteb_search": ("MTEBSearch",),
        "agents.integrations.mteb_tasks": ("local_retrieval_task", "r2med_task_of"),
        "agents.integrations.langchain": ("as_langchain_retriever",),
        "agents.integrations.llamaindex": ("as_llamaindex_retriever",),
    },
)
