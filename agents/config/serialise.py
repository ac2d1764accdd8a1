"""A run's configuration as ``config.json`` holds it, both ways.

`to_dict` is the file's data: the user's settings and, among them at the top level, what the
run recorded about itself (`agents.config.run_config.Recorded`), in the key order the file has
always had, with passwords in URLs and keys in embedding options masked. `from_dict` reads it back
into an equal object (the masked values aside), so an old run folder is read and resumed as it was
written. `flatten` gives the same data by dotted path, as settings and bindings name it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from agents.config.run_config import (
    ConfigError,
    EvalConfig,
    LLMConfig,
    Recorded,
    RunConfig,
    StageConfig,
)
from eval.plumbing.secrets.redaction import public_url, redact
from retrievers.config import RetrieverConfig

# config.json's top-level keys in the order it has always written them (a run folder's file
# stays byte-identical): the recorded fields stand where RunConfig held them before they moved
# into `Recorded`
KEYS = (
    "agent", "dataset", "options", "retriever", "rerank", "llm", "eval", "limit",
    "prompt_files", "prompts", "runs_dir", "run_name", "cache_dir", "source_run", "run_file",
    "run_file_sha256", "run_file_duplicates", "run_file_order", "generations",
    "generation_sha256", "reasoning", "sampling", "chat_template_sha256", "embedded",
    "retriever_index", "timeout", "machine",
)  # fmt: skip


def to_dict(cfg: RunConfig) -> dict[str, Any]:
    """The config as plain JSON data (``config.json``), passwords in URLs and keys in
    embedding options masked; what the run recorded sits at the top level (`KEYS`)."""
    data = dataclasses.asdict(cfg)
    data.update(data.pop("recorded"))  # at the top level, where config.json keeps them
    data = {key: data.pop(key) for key in KEYS} | data  # a field KEYS lacks goes last
    data["rerank"] = [dict(s) for s in data["rerank"]]
    for stage in data["rerank"]:
        if stage["options"].get("api_base"):
            masked = public_url(stage["options"]["api_base"])
            stage["options"] = {**stage["options"], "api_base": masked}
    if data["llm"] is not None:
        data["llm"]["api_base"] = public_url(data["llm"]["api_base"])
    data["retriever"]["api"]["api_base"] = public_url(data["retriever"]["api"]["api_base"])
    # an embedding option's value may hold a key (an environment secret, a `Bearer` token)
    data["retriever"]["api"]["params"] = _redacted(data["retriever"]["api"]["params"])
    return data


def _redacted(value: Any) -> Any:
    """``value`` (JSON data) with every string in it passed through `redact`."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, Mapping):
        return {k: _redacted(v) for k, v in value.items()}
    return [_redacted(v) for v in value] if isinstance(value, list) else value


def from_dict(data: Mapping[str, Any]) -> RunConfig:
    """The config `to_dict` wrote; unknown keys are refused, naming them."""
    _known(data, (_names(RunConfig) - {"recorded"}) | _names(Recorded), "")
    values = dict(data)
    recorded = {name: values.pop(name) for name in _names(Recorded) if name in values}
    if values.get("llm") is not None:
        _known(values["llm"], _names(LLMConfig), "llm.")
        values["llm"] = LLMConfig(**values["llm"])
    if "eval" in values:
        _known(values["eval"], _names(EvalConfig), "eval.")
        values["eval"] = EvalConfig(**values["eval"])
    if "retriever" in values:
        values["retriever"] = RetrieverConfig.from_dict(_as_written(values["retriever"]))
    values["rerank"] = tuple(StageConfig(**s) for s in values.get("rerank", ()))
    return RunConfig(**values, recorded=Recorded(**recorded))


def _as_written(retriever: Any) -> Any:
    """The retriever settings a config.json holds, with what a file written before a setting
    existed ran under: ``dense.r2med_rules`` off (a run would otherwise decide it from its
    preset, and resume an old ``--preset paper`` run under rules it did not run)."""
    if not isinstance(retriever, Mapping) or not isinstance(retriever.get("dense", {}), Mapping):
        return retriever  # refused by RetrieverConfig.from_dict, naming it
    dense = retriever.get("dense", {})
    if "r2med_rules" in dense:
        return retriever
    return {**retriever, "dense": {**dense, "r2med_rules": False}}


def _names(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def _known(data: Mapping[str, Any], names: set[str], prefix: str) -> None:
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(
            f"{prefix}{unknown[0]}: unknown setting; known: {', '.join(sorted(names))}"
        )


def flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    """`to_dict` data by dotted path (``llm.temperature``); the prompts and the stages are
    one value each, as an empty mapping is."""
    if isinstance(data, Mapping) and not prefix.startswith(("prompts", "rerank")):
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(flatten(value, f"{prefix}{key}."))
        return out if data else {prefix.rstrip("."): data}
    return {prefix.rstrip("."): data}
