"""Dense retriever families: which encoder a model name gets, and with which instructions.

R2MED runs each of its retrievers with its own loading, pooling, length, dtype and
instruction rule (src/eval_retrieval.py ``init_model``, src/utils.py's encoder classes,
src/instrcution.py). ``families.json`` holds those rules as data, one family a row with the
source lines it follows; this module reads it. A model name picks the first family one of
whose patterns it contains (case-insensitively), or the family ``dense.family`` names; a
name that matches none is ``plain`` (sentence-transformers' own loading, no instruction).

The reasoning embedders that lead R2MED (ReasonEmbed, Qwen3-Embedding, DIVER, RaDeR,
gte-Qwen2, ReasonIR) are not R2MED's retrievers: their families (setup ``reasonembed``)
follow the ReasonEmbed authors' R2MED evaluation instead, with its instructions, its fp16 and
its rule of keeping a document whose id is the query's.

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
LOADERS += ("flag-decoder", "reasonir")  # the ReasonEmbed authors' setup (families.json)
API_LOADERS = ("openai", "voyage")
# loaders that encode with the class the model's repository ships (config.json's auto_map):
# a folder without it would load as a plain model and be encoded wrongly
OWN_CODE_LOADERS = ("nv", "reasonir")
POOLINGS = ("cls", "mean", "last", "last-bmr")
# how an LLM expansion is encoded: bare, behind the query instruction, or as a document is
EXPANSIONS = ("none", "query", "doc")
SETUPS = ("r2med", "reasonembed")
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
class ModelWeights:
    """One hub model of a family: its published size and the GPU memory its weights take."""

    model: str
    params_b: float  # billions of parameters, as the model's published name gives them
    gpu_gb: float  # computed: params_b x bytes per parameter in the authors' dtype (10^9 bytes)


@dataclass(frozen=True)
class AuthorsRun:
    """How the authors of the evaluation a family follows ran its models."""

    dtype: str  # fp16 / bf16 / fp32, or auto (the checkpoint's own)
    batch_size: int
    bytes_per_param: int
    weights: tuple[ModelWeights, ...]


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
    # API families: the shorter cuts a failed request is sent again with, under R2MED's rules
    # (dense.r2med_rules); empty: a failed request fails
    retry_cuts: tuple[int, ...] = ()
    cut_tokens: int | None = None  # API families: each text cut to this many tokens
    tokenizer: str | None = None  # API families: what counts those tokens
    setup: str | None = None  # whose evaluation the family follows (SETUPS), None: neither
    cpu_dtype: str | None = None  # the dtype the authors' code falls to on the CPU
    # a document whose id is the query's: never returned (True) or kept (False)
    ignore_identical_ids: bool = True
    authors_run: AuthorsRun | None = None

    @property
    def is_api(self) -> bool:
        return self.loader in API_LOADERS

    def dtype_on(self, device: str) -> str | None:
        """The dtype the family's code loads weights in on ``device`` (resolved, never auto)."""
        return self.cpu_dtype if device == "cpu" and self.cpu_dtype else self.dtype

    def drops_identical_ids(self, explicit: bool | None = None) -> bool:
        """Whether a document whose id is the query's is left out: ``explicit`` when given
        (dense.ignore_identical_ids), else the family's rule."""
        return self.ignore_identical_ids if explicit is None else explicit

    def length_for(self, role: str) -> int | None:
        """Tokens per text for ``role`` ("query" or "doc")."""
        return self.doc_max_length if role == "doc" and self.doc_max_length else self.max_length

    @property
    def ties(self) -> str:
        """How a search cuts and orders equal cosines: ``beir`` for the families R2MED runs
        (its dense rows come from BEIR 2.0.0's exact search: the corpus longest first, torch's
        top-k of k + 1, then a heap of (score, doc id) that keeps the larger id), ``corpus``
        (corpus order) for every other family, which has no reference run to match."""
        return "beir" if self.r2med else "corpus"

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


def _authors_run(entry: dict[str, Any] | None) -> AuthorsRun | None:
    if not entry:
        return None
    weights = tuple(
        ModelWeights(model, float(w["params_b"]), float(w["gpu_gb"]))
        for model, w in entry.get("weights", {}).items()
    )
    return AuthorsRun(entry["dtype"], entry["batch_size"], entry["bytes_per_param"], weights)


def _checked(family: Family) -> Family:
    """A row of families.json that names only what the code knows: a typo there would
    otherwise surface as a KeyError on the first encode."""
    problems = {
        "loader": family.loader in (*LOADERS, *API_LOADERS),
        "pooling": family.pooling is None or family.pooling in POOLINGS,
        "expansion": family.expansion in EXPANSIONS,
        "setup": family.setup is None or family.setup in SETUPS,
        "instructions": family.instructions in _table()["instruction_sets"],
    }
    for field, ok in problems.items():
        if not ok:
            raise ValueError(
                f"{TABLE.name}: family {family.name!r}: unknown {field} {getattr(family, field)!r}"
            )
    return family


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
        retry_cuts=tuple(entry.get("retry_cuts") or ()),
        cut_tokens=entry.get("cut_tokens"),
        tokenizer=entry.get("tokenizer"),
        setup=entry.get("setup") or ("r2med" if entry.get("r2med") else None),
        cpu_dtype=entry.get("cpu_dtype"),
        ignore_identical_ids=bool(entry.get("ignore_identical_ids", True)),
        authors_run=_authors_run(entry.get("authors_run")),
    )


@cache
def families() -> tuple[Family, ...]:
    """Every family, in matching order."""
    return tuple(_checked(_family(e)) for e in _table()["families"])


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
    doc = _for_task(texts["doc"], task)
    expansion = {"query": query, "doc": doc}.get(family.expansion, "")
    return Instructions(family.name, query, doc, expansion)


def instructions_for(model: str, task_name: str | None = None, family: str = AUTO) -> Instructions:
    """The query/document instructions R2MED uses for ``model`` on ``task_name``."""
    return family_instructions(family_for(model, family), task_name)
