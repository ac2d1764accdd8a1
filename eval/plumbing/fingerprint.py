"""One fingerprint for a corpus, so every on-disk index is keyed the same way."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any


def corpus_fingerprint(
    doc_ids: Sequence[str], texts: Sequence[str], header: Mapping[str, Any] | None = None
) -> str:
    """sha256 over `header` (what else the index depends on) and the ids and texts in order."""
    h = hashlib.sha256()
    if header is not None:
        h.update(json.dumps(header, sort_keys=True).encode())
    for doc_id, text in zip(doc_ids, texts, strict=True):
        id_bytes, text_bytes = doc_id.encode(), text.encode()
        # Length prefixes keep ("ab", "c") and ("a", "bc") from hashing alike.
        h.update(f"{len(id_bytes)}:{len(text_bytes)}:".encode())
        h.update(id_bytes)
        h.update(text_bytes)
    return h.hexdigest()
