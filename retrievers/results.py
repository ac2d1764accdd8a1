"""Search hits and documents as a tool hands them to a model: one text each, the same for the
tool-search agent's tools and the retrieval server's MCP tools."""

from __future__ import annotations

import json
from collections.abc import Mapping


def words(text: str, n: int) -> str:
    """The text's first ``n`` words, whitespace collapsed to single spaces."""
    return " ".join(text.split()[:n])


def search_result(ranking: Mapping[str, float], corpus: Mapping[str, str], n: int) -> str:
    """What a search sends back: its hits as JSON (id, score, the text's first ``n`` words)."""
    hits = [
        {"id": doc, "score": round(score, 3), "snippet": words(corpus[doc], n)}
        for doc, score in ranking.items()
    ]
    return json.dumps(hits, ensure_ascii=False)


def read_result(doc: str, corpus: Mapping[str, str], n: int) -> str:
    """What a read sends back: the document's first ``n`` words as JSON."""
    return json.dumps({"id": doc, "text": words(corpus[doc], n)}, ensure_ascii=False)
