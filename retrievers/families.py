"""Dense retriever families: which encoder a model name gets, and with which instructions.

R2MED runs each of its retrievers with its own loading, pooling, length, dtype and
instruction rule (src/eval_retrieval.py ``init_model``, src/utils.py's encoder classes,
src/instrcution.py). ``families.json`` holds those rules as data, one family a row with the
source lines it follows; this module reads it. A model name picks the first family one of
whose patterns it contains (case-insensitively), or the family ``dense.family`` names; a
name that matches none is ``plain`` (sentence-transformers' own loading, no instruction).

This module imports nothing heavy: a CLI can list the families without torch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from eval.datasets import r2med_task_name

TABLE = Path(__file__).with_name("families.json")
LOADERS = ("sentence-transformers", "hf", "bmr", "medcpt", "instructor", "grit", "nv")
API_LOADERS = ("openai", "voyage")
POOLINGS = ("cls", "mean", "last", "last-bmr")
# "auto": the family the model's name points to
AUTO = "auto"
# how a user allows a family whose models run their repository's own code
REMOTE_CODE_OPTION = "--trust-remote-code (retriever.dense.trust_remote_code = true)"


@dataclass(frozen=True)
class Instructions:
    family: str
    query: str
    doc: str
    expansion: str  # prefix for LLM expansions before they are averaged with the query


NO_INSTRUCTIONS = Instructions("none", "", "", "")


@dataclass(frozen=True)
class Family:
    """How one family's models are loaded and encoded (see families.json's ``_about``)."""

    name: str
    r2med: tuple[str, ...]  # R2MED's short names of the retrievers this family runs
    patterns: tuple[str, ...]
    loader: str
    pooling: str | None
    max_length: int | None
    doc_max_length: int | None
    normalize: bool
    dtype: str | None
    remote_code: bool
    instructions: str
    expansion: str
    source: str
    cut_tokens: int | None = None  # API families: each text cut to this many tokens
    tokenizer: str | None = None  # API families: what counts those tokens

    @property
    def is_api(self) -> bool:
        return self.loader in API_LOADERS

    def length_for(self, role: str) -> int | None:
        """Tokens per text for ``role`` ("query" or "doc")."""
        return self.doc_max_length if role == "doc" and self.doc_max_length else self.max_length

    def recipe(self) -> str:
        """What in this family changes vectors, for cache keys and config.json."""
        parts = [f"family={self.name}", f"loader={self.loader}"]
        if self.pooling:
            parts.append(f"pooling={self.pooling}")
        parts.append(f"normalize={int(self.normalize)}")
        if self.cut_tokens:
            parts.append(f"cut={self.cut_tokens}")
        return ",".join(parts)


@cache
def _table() -> dict[str, Any]:
    return json.loads(TABLE.read_text(encoding="utf-8"))


def _family(entry: dict[str, Any]) -> Family:
    return Family(
        name=entry["name"],
        r2med=tuple(entry.get("r2med") or ()),
        patterns=tuple(entry["patterns"]),
        loader=entry["loader"],
        pooling=entry.get("pooling"),
        max_length=entry.get("max_length"),
        doc_max_length=entry.get("doc_max_length"),
        normalize=bool(entry.get("normalize", True)),
        dtype=entry.get("dtype"),
        remote_code=bool(entry.get("remote_code", False)),
        instructions=entry["instructions"],
        expansion=entry.get("expansion", "none"),
        source=entry.get("source", ""),
        cut_tokens=entry.get("cut_tokens"),
        tokenizer=entry.get("tokenizer"),
    )


@cache
def families() -> tuple[Family, ...]:
    """Every family, in matching order."""
    return tuple(_family(e) for e in _table()["families"])


def family_names() -> tuple[str, ...]:
    return tuple(f.name for f in families())


def family_for(model: str, name: str = AUTO) -> Family:
    """The family ``name`` names, or (``auto``) the one ``model``'s name points to."""
    by_name = {f.name: f for f in families()}
    if name != AUTO:
        if name not in by_name:
            raise ValueError(
                f"dense.family: must be {AUTO} or one of {', '.join(by_name)}, got {name!r}"
            )
        return by_name[name]
    lowered = model.lower()
    for family in families():
        if any(p in lowered for p in family.patterns):
            return family
    return by_name[_table()["default_family"]]


def _for_task(entry: str | dict[str, str], task: str | None) -> str:
    if isinstance(entry, str):
        return entry
    return entry.get(task or "", entry["default"])


def family_instructions(family: Family, task_name: str | None = None) -> Instructions:
    """``family``'s query/document instructions on ``task_name`` (R2MED's where it has one)."""
    texts = _table()["instruction_sets"][family.instructions]
    task = r2med_task_name(task_name or "")
    query = _for_task(texts["query"], task)
    expansion = query if family.expansion == "query" else ""
    return Instructions(family.name, query, _for_task(texts["doc"], task), expansion)


def instructions_for(model: str, task_name: str | None = None, family: str = AUTO) -> Instructions:
    """The query/document instructions R2MED uses for ``model`` on ``task_name``."""
    return family_instructions(family_for(model, family), task_name)
