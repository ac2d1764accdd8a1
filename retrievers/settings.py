"""The settings of each kind of retriever, and their vocabulary: `BM25Config`, `DenseConfig`,
`ApiEmbedConfig`, `FusionConfig`, the sections of `retrievers.config.RetrieverConfig`.

Defaults and checks live here and only here. Each dataclass checks its fields in
``__post_init__`` and raises ``ValueError`` naming the field (``dense.batch_size: must be a
positive integer, got 0``): each value against the field's annotation, then its rule
(`eval.plumbing.argtypes.check_fields`). A flag's text is read by the same rule (``"32"`` -> 32); a
value given from Python, a sweep file or ``config.json`` must be of the field's type.

Each field's ``metadata["help"]`` is one line for a CLI to show; a field that is a flag also
names it and says how the flag reads a value (`flag_metadata`; `retrievers.flags` builds the
flags from them, for ``agents.run`` and ``retrievers.serve`` alike).

This module is also where the settings' vocabulary lives (BM25 methods and their default
parameters, dtypes, devices, instruction sets, fusion methods, the default sizes): the
retriever modules import it from here, never from `retrievers.config` (which reads
`retrievers.kinds`, whose builders import those modules). It imports nothing heavier than
``eval.plumbing.argtypes`` and ``eval.plumbing.secrets.credentials``, so a CLI can list every
choice and default without loading numpy, scipy, torch or litellm.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, ClassVar

from eval.plumbing.argtypes import (
    boolean,
    check_fields,
    non_negative_float,
    non_negative_int,
    one_of,
    optional,
    positive_int,
    server_urls,
    unit_float,
)
from eval.plumbing.secrets.credentials import is_credential_name, mask_urls

# --- the vocabulary ---------------------------------------------------------------------------

BM25_DEFAULTS: dict[str, dict[str, float]] = {
    "bm25q": {"k1": 0.9, "b": 0.4},
    "lucene": {"k1": 0.9, "b": 0.4},
    "okapi": {"k1": 1.5, "b": 0.75, "epsilon": 0.25},
}
BM25_METHODS: tuple[str, ...] = tuple(BM25_DEFAULTS)

DEFAULT_DENSE_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
# bf16 by default: on the 2-core AMD EPYC dev box (avx512_bf16), with other jobs running,
# bench/embed_bench.py measured bf16 1.3x (2 torch threads) to 2.8x (1 thread) the docs/s of
# fp32 on 500 SciFact docs; doc embeddings agree to cosine >= 0.9999, top-10 lists overlap
# 99.1% over the 300 SciFact queries, and full-SciFact nDCG@10 is 0.6445 (bf16) vs 0.6451
# (fp32). CPUs without native bf16 may be slower in bf16: pass dtype="fp32" there.
DEFAULT_DTYPE = "bf16"
# auto: the dtype R2MED's code loads the family's weights in (retrievers/families.json), and
# DEFAULT_DTYPE for sentence-transformers families
DTYPES = ("auto", "fp32", "bf16", "fp16")
DENSE_BATCH_SIZE = 32
# "r2med": R2MED's instruction table (families.json); "none": no instruction text at all.
INSTRUCTION_SETS = ("r2med", "none")
DEVICE_FORMS = ("auto", "cpu", "cuda", "cuda:<N>", "mps")
_DEVICE = re.compile(r"auto|cpu|cuda(:[0-9]+)?|mps")

API_BATCH_SIZE = 64

FUSION_METHODS: dict[str, str] = {
    "rrf": "reciprocal-rank fusion, sum of 1 / (k + rank); ranks only",
    "combsum": "CombSUM: sum of min-max normalised scores",
    "combmnz": "CombMNZ: CombSUM times the number of lists holding the document",
    "diver-minmax": "DIVER's BM25 + dense merge: weighted min-max scores of two lists, top keep",
}
RRF_K = 60  # the paper's constant and ranx's default
# DIVER's merge (AQ-MedAI/Diver Retriever/merge_scores.py at 2ecd1fc): wgt_dense 0.5 (L10, L95;
# 0.7 for BRIGHT's coding and theorem tasks, L96-97), the merged list cut to its top 100 (L42)
DIVER_WEIGHT = 0.5
DIVER_KEEP = 100
# How deep each member list goes: a fusion of k-deep lists would miss documents that one
# member ranks just below k but another ranks high.
MIN_DEPTH = 100

# Where a server's token goes instead of a remote:<url> (a URL is written and names the run)
SERVE_TOKEN_VARIABLE = "R2MED_SERVE_TOKEN"
# The longest query text a retrieval server takes (--max-query-chars; its MCP tools too)
MAX_QUERY_CHARS = 50_000
# Set by the retriever itself, or by their own field.
_RESERVED_PARAMS = {
    "model": "set by the spec (api:<model>)",
    "input": "the texts, set by the retriever",
    "api_base": "use api.api_base",
    "base_url": "use api.api_base",
}


def is_device(device: object) -> bool:
    """Whether ``device`` is one of `DEVICE_FORMS` (``cuda:<N>`` with any N)."""
    return isinstance(device, str) and _DEVICE.fullmatch(device) is not None


# --- checks ------------------------------------------------------------------------------


def help_metadata(text: str) -> dict[str, str]:
    """A field's metadata when it is no flag: its one line of help."""
    return {"help": text}


def flag_metadata(key: str, text: str, **how: Any) -> dict[str, Any]:
    """A field's metadata when it is a flag too: ``--<key>`` (`retrievers.flags`), its help,
    and how the flag reads a value (`eval.plumbing.flags.Setting`'s type, choices, metavar, switch,
    many); a flag without a type is checked when the config is built."""
    return {"help": text, "flag": key, "flag_how": how}


def field_error(where: str, problem: str) -> ValueError:
    """The refusal of a setting: ``<where>: <problem>``."""
    return ValueError(f"{where}: {problem}")


def from_mapping(cls: type, data: object, where: str, **nested: Any) -> Any:
    """``cls(**data)``, with unknown keys refused and every message rooted at ``where``."""
    if not isinstance(data, Mapping):
        raise field_error(where, f"expected a table of settings, got {data!r}")
    known = [f.name for f in fields(cls)]
    unknown = sorted(str(k) for k in set(data) - set(known))
    if unknown:
        raise field_error(f"{where}.{unknown[0]}", f"unknown setting; known: {', '.join(known)}")
    try:
        return cls(**{**data, **nested})
    except ValueError as e:
        # The dataclass names fields from its own section ("dense.device"); a nested config
        # is known by its full path ("retriever.dense.device").
        message = str(e)
        section = f"{cls.SECTION}."
        if message.startswith(section) and where != cls.SECTION:
            message = f"{where}.{message.removeprefix(section)}"
        raise ValueError(message) from None


@dataclass(frozen=True)
class BM25Config:
    SECTION: ClassVar[str] = "bm25"

    method: str = field(
        default="bm25q",
        metadata=flag_metadata(
            "bm25_method",
            "BM25 variant; bm25q is R2MED's (gensim LuceneBM25Model on docs and query)",
            choices=BM25_METHODS,
        ),
    )
    k1: float | None = field(
        default=None,
        metadata=flag_metadata(
            "k1", "BM25 k1 >= 0 (default: the method's)", type=non_negative_float
        ),
    )
    b: float | None = field(
        default=None,
        metadata=flag_metadata("b", "BM25 b in [0, 1] (default: the method's)", type=unit_float),
    )

    def __post_init__(self) -> None:
        rules = {
            "method": one_of(BM25_METHODS),
            "k1": optional(non_negative_float),
            "b": optional(unit_float),
        }
        check_fields(self, self.SECTION, rules)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = SECTION) -> BM25Config:
        return from_mapping(cls, data, where)


def _device(value: object) -> str:
    if not is_device(value):
        raise ValueError(f"must be one of {', '.join(DEVICE_FORMS)}, got {value!r}")
    return value  # type: ignore[return-value]


def _family(value: object) -> str:
    from .families import AUTO, family_names  # reads families.json: no heavy import

    names = (AUTO, *family_names())
    if not isinstance(value, str) or value not in names:
        raise ValueError(f"must be one of {', '.join(names)}, got {value!r}")
    return value


@dataclass(frozen=True)
class DenseConfig:
    SECTION: ClassVar[str] = "dense"

    device: str = field(
        default="auto",
        metadata=flag_metadata(
            "device", "dense: auto (CUDA, else MPS, else CPU), cpu, cuda, cuda:N, mps"
        ),
    )
    dtype: str = field(
        default="auto",
        metadata=flag_metadata(
            "dtype", f"dense: weights dtype: {', '.join(DTYPES)} (auto: the family's)"
        ),
    )
    batch_size: int = field(
        default=DENSE_BATCH_SIZE,
        metadata=flag_metadata(
            "batch_size", "dense: texts per forward pass when encoding", type=positive_int
        ),
    )
    max_length: int | None = field(
        default=None,
        metadata=flag_metadata(
            "max_length",
            "dense: max tokens per text (default: the family's, else the model's own)",
            type=positive_int,
        ),
    )
    instructions: str = field(
        default="r2med",
        metadata=flag_metadata(
            "instructions",
            "dense: r2med (R2MED's query/doc instructions per model and task) or none",
        ),
    )
    family: str = field(
        default="auto",
        metadata=flag_metadata(
            "dense_family",
            "dense: the model's family (loading, pooling, length, instructions): auto (from its "
            "name, as R2MED names its retrievers) or one of retrievers/families.json",
        ),
    )
    trust_remote_code: bool = field(
        default=False,
        metadata=flag_metadata(
            "trust_remote_code",
            "dense: let models whose family runs their repository's own code load (NV-Embed, "
            "GritLM, ReasonIR, RaDeR, gte-Qwen2); off unless given",
            switch=True,
        ),
    )
    # None: the family's rule (families.json): R2MED's families drop the document (BEIR's exact
    # search), the ReasonEmbed authors' keep it. A config.json that recorded true or false
    # before there were rules still means what it said.
    ignore_identical_ids: bool | None = field(
        default=None,
        metadata=flag_metadata(
            "ignore_identical_ids",
            "dense/api: true never returns the document whose id is the query's, false keeps "
            "it (default: the family's rule: R2MED's drops it, ReasonEmbed's keeps it)",
            type=boolean,
            metavar="{true,false}",
        ),
    )
    # None: not given; a run decides it from its preset (agents.config.run_config.RunConfig: on
    # under --preset paper for a spec with a dense or api member) and records true or false
    r2med_rules: bool | None = field(
        default=None,
        metadata=flag_metadata(
            "r2med_rules",
            "dense/api: R2MED's rules where ours differ (an empty generated text averaged in, "
            "a failed text-embedding-3-large request cut shorter); on under --preset paper",
            type=boolean,
            metavar="{true,false}",
        ),
    )

    def __post_init__(self) -> None:
        rules = {
            "device": _device,
            "family": _family,
            "dtype": one_of(DTYPES),
            "batch_size": positive_int,
            "max_length": optional(positive_int),
            "instructions": one_of(INSTRUCTION_SETS),
            "ignore_identical_ids": optional(boolean),
            "r2med_rules": optional(boolean),
        }
        check_fields(self, self.SECTION, rules)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = SECTION) -> DenseConfig:
        return from_mapping(cls, data, where)


def _api_base(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or value != value.strip():
        raise ValueError(f"expected a URL, got {mask_urls(str(value))!r}")
    return server_urls(value)


def _params(value: object) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ValueError(f"expected a table of litellm embedding arguments, got {value!r}")
    for name in value:
        if not isinstance(name, str):
            raise ValueError(f"argument names must be strings, got {name!r}")
        if name in _RESERVED_PARAMS:
            raise ValueError(f"{name!r} cannot be set here: {_RESERVED_PARAMS[name]}")
    if secret := _credential_name(value):
        raise ValueError(
            f"{secret!r} looks like a credential; keys come from the environment, never "
            "from a config (it is written to config.json)"
        )
    try:
        # A copy through JSON: the config owns its params, and they survive config.json.
        return json.loads(json.dumps(dict(value), allow_nan=False))
    except (TypeError, ValueError) as e:
        raise ValueError(f"must be JSON-serialisable: {e}") from None


def _credential_name(value: object, path: str = "") -> str | None:
    """The first key, at any depth (e.g. ``extra_headers.Authorization``), naming a secret."""
    if not isinstance(value, Mapping):
        return None
    for name, inner in value.items():
        where = f"{path}{name}"
        if is_credential_name(str(name)):  # a config is written to disk (config.json)
            return where
        if found := _credential_name(inner, f"{where}."):
            return found
    return None


@dataclass(frozen=True)
class ApiEmbedConfig:
    SECTION: ClassVar[str] = "api"

    api_base: str | None = field(
        default=None,
        metadata=flag_metadata(
            "embed_api_base", "api: base URL of the embedding server (default: the provider's)"
        ),
    )
    batch_size: int = field(
        default=API_BATCH_SIZE,
        metadata=flag_metadata(
            "embed_batch_size", "api: texts per embedding request", type=positive_int
        ),
    )
    # hash=False: a dict cannot be hashed; equality still compares it.
    params: dict[str, Any] = field(
        default_factory=dict,
        hash=False,
        metadata=flag_metadata(
            "embed_option",
            "api: an extra litellm embedding argument, e.g. dimensions=256",
            many=True,
            metavar="KEY=VALUE",
        ),
    )

    def __post_init__(self) -> None:
        rules = {"api_base": _api_base, "batch_size": positive_int, "params": _params}
        check_fields(self, self.SECTION, rules)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = SECTION) -> ApiEmbedConfig:
        return from_mapping(cls, data, where)


@dataclass(frozen=True)
class FusionConfig:
    SECTION: ClassVar[str] = "fusion"

    method: str = field(
        default="rrf",
        metadata=flag_metadata(
            "fusion", f"how '+' retrievers' lists are fused: {', '.join(FUSION_METHODS)}"
        ),
    )
    k: int = field(
        default=RRF_K,
        metadata=flag_metadata(
            "fusion_k", "RRF's k in 1 / (k + rank); rrf only", type=non_negative_int
        ),
    )
    depth: int = field(
        default=MIN_DEPTH,
        metadata=flag_metadata(
            "fusion_depth", "documents taken from each member list", type=positive_int
        ),
    )
    weight: float = field(
        default=DIVER_WEIGHT,
        metadata=flag_metadata(
            "fusion_weight",
            "the second list's weight, the first's 1 - it (DIVER's dense weight, bm25+dense); "
            "diver-minmax only",
            type=unit_float,
        ),
    )
    keep: int = field(
        default=DIVER_KEEP,
        metadata=flag_metadata(
            "fusion_keep", "documents the merged list keeps; diver-minmax only", type=positive_int
        ),
    )

    def __post_init__(self) -> None:
        rules = {
            "method": one_of(FUSION_METHODS),
            "k": non_negative_int,
            "depth": positive_int,
            "weight": unit_float,
            "keep": positive_int,
        }
        check_fields(self, self.SECTION, rules)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = SECTION) -> FusionConfig:
        return from_mapping(cls, data, where)
