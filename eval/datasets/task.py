"""`Task`, one loaded benchmark task (corpus, queries, qrels, notes), and its fingerprint."""

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eval.plumbing.fingerprint import corpus_fingerprint


@dataclass
class Task:
    name: str
    corpus: dict[str, str]  # doc id -> retrieval text
    queries: dict[str, str]  # query id -> text
    qrels: dict[str, dict[str, int]]  # query id -> doc id -> relevance grade
    path: Path
    notes: list[str] = field(default_factory=list)


def task_fingerprint(task: Task) -> dict[str, str]:
    """sha256 hex digests of the task's corpus, queries and qrels, to bind results to data.

    The corpus digest is ``retrievers.fingerprint.corpus_fingerprint`` of its ids and texts in
    corpus order, the key the dense index cache uses: corpus order is part of the data, since
    it decides which tied documents make a top-k cut and which zero-score documents pad a
    ranking (``eval.evaluate.pad_run``). Query order decides nothing, so queries and qrels
    are hashed as canonical JSON with sorted keys (the same function, header only).
    """
    return {
        "corpus": corpus_fingerprint(list(task.corpus), list(task.corpus.values())),
        "queries": _canonical_digest(task.queries),
        "qrels": _canonical_digest(task.qrels),
    }


def _canonical_digest(data: Mapping[str, Any]) -> str:
    return corpus_fingerprint((), (), header=data)
