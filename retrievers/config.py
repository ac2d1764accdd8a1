"""Every retriever setting in one typed, validated object: `RetrieverConfig`.

A spec (``bm25``, ``dense:<model>``, ``bm25+dense``, ...; `retrievers.kinds.RETRIEVERS`) and a
section of settings per kind that has them (`retrievers.settings`: ``bm25``, ``dense``, ``api``)
and for fusion. Each part checks its fields in ``__post_init__`` and raises ``ValueError``
naming the field (``retriever.dense.batch_size: must be a positive integer, got 0``).
`RetrieverConfig.to_dict` gives plain JSON data and `RetrieverConfig.from_dict` takes it
back, refusing unknown keys by name, so a configuration written to ``config.json`` loads as
the same object.

The kinds, their spec forms and their sections are `retrievers.kinds.RETRIEVER_KINDS`' rows;
the sections' defaults, checks and vocabulary are in `retrievers.settings`. Like them, this
module imports nothing heavier than ``eval.plumbing.argtypes`` and
``eval.plumbing.secrets.credentials``, so a CLI can list every choice and default without
loading numpy, scipy, torch or litellm.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from eval.plumbing.argtypes import check_fields
from eval.plumbing.secrets.credentials import mask_urls

from .kinds import RETRIEVER_KINDS, SPEC_HELP, SpecPart, parse_spec
from .settings import (
    ApiEmbedConfig,
    BM25Config,
    DenseConfig,
    FusionConfig,
    field_error,
    flag_metadata,
    from_mapping,
    help_metadata,
)

# RetrieverConfig's sections, field -> class: each kind's settings, then fusion's
_SUBCONFIGS: dict[str, type] = {
    **{k.field: k.settings for k in RETRIEVER_KINDS.values() if k.field and k.settings},
    FusionConfig.SECTION: FusionConfig,
}


@dataclass(frozen=True)
class RetrieverConfig:
    """A retriever spec and the settings of each kind; a sub-config applies to every member
    of its kind (both dense models of ``dense:a+dense:b`` share ``dense``). Its sections are
    exactly its kinds' (`retrievers.kinds.RetrieverKind.field`, in the rows' order) and
    ``fusion``: a kind with settings has its field here."""

    SECTION: ClassVar[str] = "retriever"

    spec: str = field(
        default="bm25",
        metadata=flag_metadata("retriever", SPEC_HELP),
    )
    bm25: BM25Config = field(default_factory=BM25Config, metadata=help_metadata("BM25 settings"))
    dense: DenseConfig = field(
        default_factory=DenseConfig, metadata=help_metadata("sentence-transformers settings")
    )
    api: ApiEmbedConfig = field(
        default_factory=ApiEmbedConfig, metadata=help_metadata("API embedder settings")
    )
    fusion: FusionConfig = field(
        default_factory=FusionConfig, metadata=help_metadata("fusion settings for a+b specs")
    )

    def __post_init__(self) -> None:
        check_fields(self, self.SECTION, {})
        try:
            parts = parse_spec(self.spec)
        except ValueError as e:
            raise field_error(f"{self.SECTION}.spec", str(e)) from None
        for name, cls in _SUBCONFIGS.items():
            value = getattr(self, name)
            if not isinstance(value, cls):
                raise field_error(
                    f"{self.SECTION}.{name}",
                    f"expected a {cls.__name__}, got {type(value).__name__} {value!r}",
                )
        if len(parts) > 2 and self.fusion.method == "diver-minmax":
            raise field_error(
                f"{self.SECTION}.fusion.method",
                f"diver-minmax merges two lists (DIVER's BM25 and dense), not {len(parts)} "
                f"({mask_urls(self.spec)})",
            )
        for part in parts:
            check = RETRIEVER_KINDS[part.kind].check_config
            if check is not None:
                check(part, self)

    @property
    def parts(self) -> tuple[SpecPart, ...]:
        return parse_spec(self.spec)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data; `from_dict` gives an equal config back."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = SECTION) -> RetrieverConfig:
        """The config ``data`` describes; missing keys take their defaults.

        ``where`` roots the error messages, e.g. ``"first_stage.retriever"`` when this config
        is nested in a larger one.
        """
        if not isinstance(data, Mapping):
            raise field_error(where, f"expected a table of settings, got {data!r}")
        nested = {
            name: sub.from_dict(data[name], f"{where}.{name}")
            for name, sub in _SUBCONFIGS.items()
            if name in data
        }
        return from_mapping(cls, data, where, **nested)
