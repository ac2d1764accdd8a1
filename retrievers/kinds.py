"""Every kind of retriever a spec can name, one row each: `RETRIEVER_KINDS`.

A row (`RetrieverKind`) is all the package knows of its kind: the rule for its spec argument,
its help lines, its settings (a section of `retrievers.config.RetrieverConfig`), what its
builder takes besides the member, the config and the task, its checks, and its builder.
Everything else reads the rows: `parse_spec` (the spec's grammar, `SpecPart`), `RETRIEVERS` and
`SPEC_HELP` (the help), `RetrieverConfig`'s sections, and `retrievers.search` (building, and
checking the models before any work). Adding a kind is the recipe in the package's doc
(``retrievers/__init__.py``).

Cheap to import, as `retrievers.config` must be: each builder and check imports its index
modules (numpy, scipy, torch, litellm, ...) in its body, when a run builds or checks its kind.
This module never imports `retrievers.config`, which reads these rows: a builder's ``config`` is
a `RetrieverConfig`, typed `Any` here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eval.plumbing.secrets.credentials import mask_urls, url_secret

from .settings import (
    DEFAULT_DENSE_MODEL,
    SERVE_TOKEN_VARIABLE,
    ApiEmbedConfig,
    BM25Config,
    DenseConfig,
    field_error,
)

if TYPE_CHECKING:
    from eval.datasets import Task

    from .base import Retriever

ARG_RULES = ("none", "optional", "required")


@dataclass(frozen=True)
class SpecPart:
    """One member of a spec: ``kind`` (a key of `RETRIEVER_KINDS`), its argument and its text."""

    kind: str
    arg: str
    text: str


@dataclass(frozen=True)
class RetrieverKind:
    """One kind of retriever a spec can name: its row of `RETRIEVER_KINDS`.

    * ``arg``: its spec argument, one of `ARG_RULES`: ``"none"`` (``bm25``), ``"optional"``
      (``dense[:model]``) or ``"required"`` (``api:<model>``); ``arg_name`` names it in the
      help (``model``, ``url``).
    * ``help``: one line per spec form it has (`forms`: ``dense`` and ``dense:<model>``), in
      `RETRIEVERS` and the ``--retriever`` help.
    * ``build``: a function ``build(part, config, task, cache_dir, progress, **extras)``
      returning a `retrievers.base.Retriever`; it imports its modules in its body. The extras
      are what the row says it takes: ``device=`` (``uses_device``: the device ``dense.device``
      names, resolved once for every member), ``transport=`` (``calls_server``: what every call
      to a server gets, e.g. the run's timeout), ``ray=`` (``encodes_on_cluster``: a Ray
      cluster's address whose workers encode the corpus).
    * ``settings``: its sub-config class, or None; `RetrieverConfig`'s field of that name
      (``settings.SECTION``, the row's `field`) holds it.
    * ``check_arg(arg, shown)``: refuses a spec argument (ValueError) when the spec is read;
      ``check_config(part, config)`` a member the config's settings forbid, when the config is
      built; ``check_models(part, config, flag)`` a model not there or not whole, before any work.

    Adding a kind of retriever: the recipe in ``retrievers/__init__.py``.
    """

    name: str
    arg: str
    help: tuple[str, ...]
    build: Callable[..., Retriever]
    arg_name: str = ""
    settings: type | None = None
    uses_device: bool = False
    calls_server: bool = False
    encodes_on_cluster: bool = False
    check_arg: Callable[[str, str], None] | None = None
    check_config: Callable[[SpecPart, Any], None] | None = None
    check_models: Callable[[SpecPart, Any, str], None] | None = None

    def __post_init__(self) -> None:
        if self.arg not in ARG_RULES:
            raise ValueError(f"{self.name}: arg must be one of {', '.join(ARG_RULES)}")
        if bool(self.arg_name) == (self.arg == "none"):
            raise ValueError(f"{self.name}: arg_name names an argument, and only one")
        if len(self.help) != len(self.forms):
            raise ValueError(f"{self.name}: one help line per form ({', '.join(self.forms)})")

    @property
    def forms(self) -> tuple[str, ...]:
        """The spec forms it takes, as the help shows them: ``dense``, ``dense:<model>``."""
        given = f"{self.name}:<{self.arg_name}>"
        return {"none": (self.name,), "optional": (self.name, given), "required": (given,)}[
            self.arg
        ]

    @property
    def short(self) -> str:
        """Its forms in one: ``bm25``, ``dense[:model]``, ``api:<model>``."""
        if self.arg == "optional":
            return f"{self.name}[:{self.arg_name}]"
        return self.forms[0]

    @property
    def field(self) -> str | None:
        """`RetrieverConfig`'s field holding its settings, or None."""
        return None if self.settings is None else self.settings.SECTION  # type: ignore[attr-defined]

    def build_member(
        self,
        part: SpecPart,
        config: Any,
        task: Task,
        cache_dir: Path | None,
        progress: bool,
        device: str | None = None,
        transport: Mapping[str, Any] | None = None,
        ray: str | None = None,
    ) -> Retriever:
        """``build`` given what it takes of ``device``, ``transport`` and ``ray``."""
        extras: dict[str, Any] = {}
        if self.uses_device:
            extras["device"] = device
        if self.calls_server:
            extras["transport"] = transport
        if self.encodes_on_cluster:
            extras["ray"] = ray
        return self.build(part, config, task, cache_dir, progress, **extras)


# --- the builders ------------------------------------------------------------------------------


def build_bm25_member(
    part: SpecPart, config: Any, task: Task, cache_dir: Path | None, progress: bool
) -> Retriever:
    from .base import BM25Retriever
    from .bm25 import build_bm25

    bm25 = config.bm25
    index = build_bm25(
        task.corpus, method=bm25.method, k1=bm25.k1, b=bm25.b, cache_dir=cache_dir,
        progress=progress,
    )  # fmt: skip
    return BM25Retriever(index, name=part.text)


def build_dense_member(
    part: SpecPart,
    config: Any,
    task: Task,
    cache_dir: Path | None,
    progress: bool,
    device: str | None = None,
    ray: str | None = None,
) -> Retriever:
    from .base import DenseRetriever
    from .dense import build_dense

    dense = config.dense
    encode_on = None
    if ray is not None:
        from .cluster.encode import on_cluster

        encode_on = on_cluster(ray)
    index = build_dense(
        task.corpus,
        model=part.arg or DEFAULT_DENSE_MODEL,
        task_name=task.name,
        cache_dir=cache_dir,
        progress=progress,
        dtype=dense.dtype,
        batch_size=dense.batch_size,
        max_length=dense.max_length,
        device=device or dense.device,
        instructions=dense.instructions,
        family=dense.family,
        trust_remote_code=dense.trust_remote_code,
        ignore_identical_ids=dense.ignore_identical_ids,
        encode_on=encode_on,
    )
    return DenseRetriever(index, name=part.text, r2med_rules=dense.r2med_rules is True)


def build_api_member(
    part: SpecPart,
    config: Any,
    task: Task,
    cache_dir: Path | None,
    progress: bool,
    transport: Mapping[str, Any] | None = None,
) -> Retriever:
    from .api_embed import build_api_dense
    from .base import DenseRetriever
    from .families import family_for

    api = config.api
    index = build_api_dense(
        task.corpus,
        model=part.arg,
        task_name=task.name,
        cache_dir=cache_dir,
        progress=progress,
        batch_size=api.batch_size,
        api_base=api.api_base,
        params=api.params,
        transport=transport,
        # the API family's rule unless dense.ignore_identical_ids says otherwise
        ignore_identical_ids=family_for(part.arg).drops_identical_ids(
            config.dense.ignore_identical_ids
        ),
        r2med_rules=config.dense.r2med_rules is True,
    )
    return DenseRetriever(index, name=part.text, r2med_rules=config.dense.r2med_rules is True)


def build_remote_member(
    part: SpecPart,
    config: Any,
    task: Task,
    cache_dir: Path | None,
    progress: bool,
    transport: Mapping[str, Any] | None = None,
) -> Retriever:
    from .remote import REMOTE_TIMEOUT_S, RemoteRetriever

    timeout = (transport or {}).get("timeout", REMOTE_TIMEOUT_S)
    return RemoteRetriever(part.arg, task.name, timeout=timeout, name=part.text)


# --- the checks --------------------------------------------------------------------------------


def _check_remote_url(url: str, shown: str) -> None:
    """Refuse a remote:<url> that is no http(s) URL or holds a credential: the spec is written
    to config.json and cells.json and names the run's folder, so a token in it would be on
    disk and in every printed path; the server's token is read from the environment instead."""
    if not url.strip().startswith(("http://", "https://")):
        raise ValueError(f"{shown!r}: expected remote:http://HOST:PORT")
    if where := url_secret(url):
        raise ValueError(
            f"{shown!r}: the URL holds a credential ({where}), which would be written to "
            f"config.json and the run's name; set {SERVE_TOKEN_VARIABLE} instead"
        )


def _check_remote_code(part: SpecPart, config: Any) -> None:
    """Refuse, when the config is read, a model whose family runs its repository's own code
    (trusting that code is the user's decision: --trust-remote-code)."""
    if not part.arg or config.dense.trust_remote_code:
        return
    from .families import REMOTE_CODE_OPTION, family_for

    chosen = family_for(part.arg, config.dense.family)
    if chosen.remote_code:
        raise field_error(
            "retriever.spec",
            f"{part.text}: {chosen.name} models run code from their own repository; allow it "
            f"with {REMOTE_CODE_OPTION}",
        )


def _check_dense_model(part: SpecPart, config: Any, flag: str) -> None:
    """Its weights and tokenizer (and NV-Embed's own code, and ReasonIR's)."""
    from .dense import resolve_model
    from .families import OWN_CODE_LOADERS, family_for
    from .model_source import Needs, check_model_source

    model_id, load_path = resolve_model(part.arg or DEFAULT_DENSE_MODEL)
    family = family_for(model_id, config.dense.family)
    needs = Needs(own_code=family.loader in OWN_CODE_LOADERS)
    check_model_source(load_path, f"{flag} {part.text}", needs)


def _check_api_tokenizer(part: SpecPart, config: Any, flag: str) -> None:
    """The hub tokenizer its family cuts texts with (voyage's)."""
    from .families import family_for
    from .model_source import TOKENIZER, check_model_source

    kind, _, name = (family_for(part.arg).tokenizer or "").partition(":")
    if kind == "hub":
        tokenizer = name.format(model=part.arg.split("/")[-1])
        check_model_source(tokenizer, f"{flag} {part.text} (its tokenizer)", TOKENIZER)


# --- the rows ----------------------------------------------------------------------------------

RETRIEVER_KINDS: dict[str, RetrieverKind] = {
    kind.name: kind
    for kind in (
        RetrieverKind(
            "bm25",
            "none",
            ("BM25 over the corpus (bm25q by default, as R2MED scores it)",),
            build_bm25_member,
            settings=BM25Config,
        ),
        RetrieverKind(
            "dense",
            "optional",
            (
                f"sentence-transformers embedder, default {DEFAULT_DENSE_MODEL} (offline)",
                "sentence-transformers embedder by hub name or local path",
            ),
            build_dense_member,
            arg_name="model",
            settings=DenseConfig,
            uses_device=True,
            encodes_on_cluster=True,
            check_config=_check_remote_code,
            check_models=_check_dense_model,
        ),
        RetrieverKind(
            "api",
            "required",
            ("litellm embedding model, e.g. api:text-embedding-3-large",),
            build_api_member,
            arg_name="model",
            settings=ApiEmbedConfig,
            calls_server=True,
            check_models=_check_api_tokenizer,
        ),
        RetrieverKind(
            "remote",
            "required",
            ("a retrieval server (python -m retrievers.serve), e.g. remote:http://h:8000",),
            build_remote_member,
            arg_name="url",
            calls_server=True,
            check_arg=_check_remote_url,
        ),
    )
}

FUSION_FORM = "<a>+<b>[+...]"
# every spec form and its help line: each kind's, then fusion's
RETRIEVERS: dict[str, str] = {
    **{
        form: line
        for kind in RETRIEVER_KINDS.values()
        for form, line in zip(kind.forms, kind.help, strict=True)
    },
    FUSION_FORM: "fusion of the listed retrievers (fusion.method), e.g. bm25+dense",
}
# the --retriever help: "bm25, dense[:model], api:<model>, remote:<url>, or a+b fusion"
SPEC_HELP = f"{', '.join(k.short for k in RETRIEVER_KINDS.values())}, or a+b fusion"


def parse_spec(spec: object) -> tuple[SpecPart, ...]:
    """The members of a retriever spec; ValueError for one `build_retriever` would refuse."""
    if not isinstance(spec, str):
        raise ValueError(f"expected a retriever spec string, got {spec!r}")
    parts = []
    for text in (p.strip() for p in spec.split("+")):
        name, _, arg = text.partition(":")
        kind = RETRIEVER_KINDS.get(name)
        shown = mask_urls(text)  # an error names the spec with no credential in it
        if kind is None or (kind.arg == "none" and arg) or (kind.arg == "required" and not arg):
            raise ValueError(f"unknown retriever {shown!r}; valid: {', '.join(RETRIEVERS)}")
        if kind.check_arg is not None:
            kind.check_arg(arg, shown)
        parts.append(SpecPart(name, arg, text))
    return tuple(parts)
