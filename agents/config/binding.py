"""What a run folder is bound to: the part of a config that decides the run's output.

A run folder records its config (``config.json``); a run resumes in it only when its `binding`
is the folder's. The settings outside it (`RUNTIME`, `LLM_RUNTIME`: where things go, how fast
the calls are made) may change between a run and its resumption; `differences` names the
settings in which two bindings differ, by their flags' names, for the refusal.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agents.config.run_config import RunConfig
from agents.config.serialise import flatten, to_dict
from agents.config.settings import SETTINGS

RUNTIME = ("runs_dir", "run_name", "cache_dir", "prompt_files", "timeout", "machine")  # not what
LLM_RUNTIME = (  # how fast
    "cache",
    "concurrency",
    "rate_limit",
    "routing",
    "local_instances",
    "local_prefix_reuse",
)


def binding(cfg: RunConfig) -> dict[str, Any]:
    """What a run folder is bound to: everything that decides the output."""
    data = to_dict(cfg)
    for key in RUNTIME:
        data.pop(key)
    if data["llm"] is not None:
        for key in LLM_RUNTIME:
            data["llm"].pop(key)
    return data


def differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """The settings (by their flat names where they have one) in which two bindings differ."""
    flat_old, flat_new = flatten(old), flatten(new)
    paths = sorted(p for p in set(flat_old) | set(flat_new) if flat_old.get(p) != flat_new.get(p))
    by_path = {s.path: key for key, s in SETTINGS.items()}
    names = []
    for path in paths:
        top = path.split(".")[0]
        grouped = ("options", "prompts", "rerank", "sampling", "machine", "generation_sha256",
                   "retriever_index", "embedded")  # fmt: skip
        name = by_path.get(path) or (top if top in grouped else path)
        if top == "options":
            name = path.split(".", 1)[1]
        names.append(name)
    return list(dict.fromkeys(names))
