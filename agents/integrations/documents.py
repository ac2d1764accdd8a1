"""What each ranked document carries into another tool's document type: its id, its text in
the task's corpus, and the ranking's score and rank beside the task and pipeline names."""

from __future__ import annotations

from typing import Any

from agents.execution.pipeline import Pipeline, Ranking


def ranked(pipeline: Pipeline, ranking: Ranking) -> list[tuple[str, str, dict[str, Any]]]:
    """(doc id, corpus text, metadata) for each ranked document, best first: what LangChain's
    documents and LlamaIndex's nodes carry."""
    corpus = pipeline.corpus
    task = pipeline.task_plan.task.name
    return [
        (doc_id, corpus[doc_id],
         {"id": doc_id, "score": score, "rank": rank, "task": task, "pipeline": pipeline.name})
        for rank, (doc_id, score) in enumerate(ranking, 1)
    ]  # fmt: skip
