"""The retriever's command-line flags, built from its config's fields: one help text each.

Each `retrievers.config` / `retrievers.settings` field that is a flag names it in its metadata
(`retrievers.settings.flag_metadata`: the key, its help, how the flag reads a value);
`retriever_settings` gives them in field order as `eval.plumbing.flags.Setting`, with their
paths into a run's config (``retriever.bm25.k1``).
`TASK_SETTINGS` are what a retriever is built over and with besides its config: the dataset,
the cache folder and a call's timeout. `add_retriever_arguments` adds both (the retrieval
server's flags); ``agents.config.settings.SETTINGS`` holds the same settings among the run's, so the
two command lines take the same names, checks and defaults. `retriever_from_settings` builds
the `RetrieverConfig` the flat values describe.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import fields, is_dataclass
from typing import Any

from eval.plumbing.argtypes import positive_float
from eval.plumbing.flags import Setting, add_flags, key_values
from eval.plumbing.retry import DEFAULT_TIMEOUT_S
from retrievers.config import RetrieverConfig

SECTION = RetrieverConfig.SECTION

TASK_SETTINGS: dict[str, Setting] = {
    "dataset": Setting(
        "dataset", "'demo' (bundled), a folder, an R2MED task name, 'r2med', or a comma list"
    ),
    "timeout": Setting(
        "timeout",
        "seconds an LLM or embedding call waits for the server's answer, per attempt; a run "
        "whose server stops answering ends with one line naming it",
        positive_float,
        metavar="SECONDS",
    ),
    "cache_dir": Setting("cache_dir", "indexes, LLM cache, downloads"),
}
# what a run takes when a task setting is not given (agents.config.run_config.RunConfig's defaults)
TASK_DEFAULTS: dict[str, Any] = {"dataset": "demo", "timeout": DEFAULT_TIMEOUT_S}


def retriever_settings() -> dict[str, Setting]:
    """Every retriever flag, by key (``bm25_method`` is ``--bm25-method``), in field order."""
    out: dict[str, Setting] = {}
    for f in fields(RetrieverConfig):
        if "flag" in f.metadata:
            out[f.metadata["flag"]] = _setting(f.metadata, f"{SECTION}.{f.name}")
        elif is_dataclass(f.default_factory):  # a sub-config: bm25, dense, api, fusion
            for inner in fields(f.default_factory):
                if "flag" in inner.metadata:
                    path = f"{SECTION}.{f.name}.{inner.name}"
                    out[inner.metadata["flag"]] = _setting(inner.metadata, path)
    return out


def _setting(metadata: Mapping[str, Any], path: str) -> Setting:
    how = dict(metadata["flag_how"])
    if "choices" in how:
        how["choices"] = tuple(how["choices"])
    return Setting(path, metadata["help"], **how)


def retriever_defaults() -> dict[str, Any]:
    """Each retriever flag's default, as its help shows it."""
    config: Any = RetrieverConfig()
    out = {}
    for key, s in retriever_settings().items():
        value = config
        for name in s.path.split(".")[1:]:
            value = getattr(value, name)
        out[key] = value
    return out


def add_retriever_arguments(parser: argparse.ArgumentParser) -> None:
    """The dataset flag, every retriever flag, then the timeout and cache folder flags."""
    settings = {"dataset": TASK_SETTINGS["dataset"], **retriever_settings(), **TASK_SETTINGS}
    add_flags(parser, settings, {**retriever_defaults(), **TASK_DEFAULTS})


def retriever_from_settings(values: Mapping[str, Any]) -> RetrieverConfig:
    """The config flat settings describe (keys of `retriever_settings`, as text or values);
    those not given keep their defaults. A refusal names the field from ``retriever.``."""
    settings = retriever_settings()
    groups: dict[str, dict[str, Any]] = {}
    for key, value in values.items():
        section, _, name = settings[key].path.removeprefix(f"{SECTION}.").rpartition(".")
        if settings[key].many:  # --embed-option KEY=VALUE, given again for each
            value = key_values(value, key)
        groups.setdefault(section, {})[name] = value
    try:
        subconfigs = {
            f.name: f.default_factory(**groups.get(f.name, {}))  # type: ignore[misc]
            for f in fields(RetrieverConfig)
            if is_dataclass(f.default_factory)
        }
        return RetrieverConfig(**groups.get("", {}), **subconfigs)
    except ValueError as e:  # the dataclasses name the field within them ("dense.batch_size")
        message = str(e)
        raise ValueError(
            message if message.startswith(f"{SECTION}.") else f"{SECTION}.{message}"
        ) from None
