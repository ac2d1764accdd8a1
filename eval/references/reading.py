"""The shipped tables (the JSON files beside this module) loaded, and a row found in them by
its id or its spec.

**Row ids and specs.** A row id is the same in every source: ``base/<retriever>``,
``<method>/<llm>/<retriever>`` (hyde, query2doc, lamer, search-o1, search-r1) and
``reranker/<reranker>/<retriever>/top_<k>``, in R2MED's short names (its folder names:
``nv``, ``bm25``, ``openai`` for text-embedding-3-large, ``gpt4``, ``qwq-32b``, ...). A spec
is ``<table>:<row id>`` and names one source, never a fallback to the other:

* ``r2med:<row>``: the repository's row (R2MED's path is accepted too:
  ``r2med:results/gar/hyde/qwen-7b/bm25``); every spec that worked before still does.
* ``r2med-leaderboard:<row>``: the leaderboard's row, e.g. ``r2med-leaderboard:hyde/o3-mini/nv``.
* ``r2med-authors:<row>``: a method's authors' row, e.g.
  ``r2med-authors:reranker/reasonrank-32b/e5/top_100``.
* ``reasonembed-table3:<row>``: ReasonEmbed's Table 3, e.g.
  ``reasonembed-table3:base/reason-embed-qwen3-8b``.

A spec naming a row its source lacks is refused in one line that names the other source's
spec when that one has the row.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from eval.references.authors import authors_references
from eval.references.leaderboard import leaderboard_references
from eval.references.model import (
    AUTHORS_KIND,
    AUTHORS_TABLE,
    BASE_FOLDER,
    BASE_PREFIX,
    DEFAULT_TABLE,
    GAR_FOLDER,
    LEADERBOARD_KIND,
    LEADERBOARD_TABLE,
    PAPER_KIND,
    REASONEMBED_TABLE,
    SHOWN_TABLES,
    Reference,
    UnknownReference,
)
from eval.references.reasonembed import paper_references
from eval.references.repository import repository_references

DATA_DIR = Path(__file__).resolve().parent  # the package's folder: the shipped JSON files
_TABLE_NAME = re.compile(r"[a-z0-9][a-z0-9_-]*")


def table_names() -> list[str]:
    return sorted(p.stem for p in DATA_DIR.glob("*.json"))


@lru_cache(maxsize=8)
def _read_table(name: str) -> dict[str, Reference]:
    path = DATA_DIR / f"{name}.json"
    if not _TABLE_NAME.fullmatch(name) or not path.is_file():
        known = ", ".join(table_names()) or "none"
        raise UnknownReference(f"unknown reference table {name!r}; known: {known}")
    data = json.loads(path.read_text(encoding="utf-8"))
    return references_from(data, name)


def references_from(data: Mapping[str, Any], table: str | None = None) -> dict[str, Reference]:
    """The rows of a table as `build_table` or `build_leaderboard` returns it (and the data
    file holds); ``table`` names it in the rows' specs (default: the shipped name of its kind)."""
    source = data["source"]
    if source.get("kind") == LEADERBOARD_KIND:
        return leaderboard_references(data, table or LEADERBOARD_TABLE)
    if source.get("kind") == AUTHORS_KIND:
        return authors_references(data, table or AUTHORS_TABLE)
    if source.get("kind") == PAPER_KIND:
        return paper_references(data, table or REASONEMBED_TABLE)
    return repository_references(data, table or DEFAULT_TABLE)


def load_references(name: str = DEFAULT_TABLE) -> dict[str, Reference]:
    """Every row of a shipped table (``eval/references/<name>.json``) by row id."""
    return dict(_read_table(name))


def references_of(row: str) -> list[Reference]:
    """The row ``row`` (an id or R2MED's path) in every shipped source that holds it,
    R2MED's repository first, its methods' authors last."""
    row = normalise_row(row)
    return [refs[row] for refs in (load_references(t) for t in SHOWN_TABLES) if row in refs]


def normalise_row(text: str) -> str:
    """A row id from its id or its R2MED path: "results/gar/hyde/qwen-7b/bm25" and
    "gar/hyde/qwen-7b/bm25" -> "hyde/qwen-7b/bm25", "base retriever/bm25" -> "base/bm25"."""
    row = text.strip().strip("/").removeprefix("results/")
    if row.startswith(f"{BASE_FOLDER}/"):
        return f"{BASE_PREFIX}/{row[len(BASE_FOLDER) + 1 :]}"
    return row.removeprefix(f"{GAR_FOLDER}/")


def reference(spec: str) -> Reference:
    """The row ``<table>:<row id>`` names, e.g. ``r2med:hyde/qwen-7b/bm25`` (R2MED's path of
    the row is accepted too) or ``r2med-leaderboard:hyde/o3-mini/nv``; `UnknownReference`
    naming the other source's spec, when it has the row, and close matches otherwise."""
    name, colon, row = spec.partition(":")
    if not colon or not row.strip():
        raise UnknownReference(
            f"reference {spec!r}: expected <table>:<row>, e.g. r2med:hyde/qwen-7b/bm25 or "
            f"{LEADERBOARD_TABLE}:hyde/o3-mini/nv"
        )
    name = name.strip().lower()
    rows = _read_table(name)
    row = normalise_row(row)
    if row in rows:
        return rows[row]
    other = next((t for t in SHOWN_TABLES if t != name and row in load_references(t)), None)
    if other is not None:  # the row is in another shipped source
        hint = f"the {load_references(other)[row].source_name} has it: {other}:{row}"
    else:
        close = difflib.get_close_matches(row, list(rows), n=5, cutoff=0.6)
        hint = f"close matches: {', '.join(close)}" if close else "no close match"
    raise UnknownReference(
        f"reference {spec!r}: no such row in {name}; {hint} "
        f"(python -m eval.references list shows them all)"
    )
