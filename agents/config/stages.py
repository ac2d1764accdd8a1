"""Rerank stages from text: a ``--rerank`` spec (``kind[:model],key=value,...``) into a
typed `agents.config.run_config.StageConfig`, and the stage-wide settings (``--rerank-depth``, ...)
that fill an option of every stage having it. The command lines, sweep files and `from_settings`
read stage specs through this module alone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agents.config.registry import STAGES
from agents.config.run_config import ConfigError, StageConfig
from eval.plumbing.flags import key_values

# settings that fill one option of every rerank stage having it, where its spec does not
STAGE_WIDE = {
    "rerank_model": "model",
    "rerank_api_base": "api_base",
    "rerank_depth": "depth",
    "rerank_window": "window",
    "rerank_step": "step",
}


def parse_stage(text: str, wide: Mapping[str, Any] | None = None) -> StageConfig:
    """``"kind[:model],key=value,..."`` -> a StageConfig (options typed by the stage's
    defaults); ``cross:BAAI/bge-reranker-v2-m3`` is ``cross`` with option model=....

    ``wide`` holds options for every stage (``--rerank-depth``, ...); a stage takes those it
    has and its text does not set. A model is only ever an LLM stage's to take this way: a
    cross-encoder is always named by its spec.
    """
    if isinstance(text, StageConfig):
        return text
    head, *pairs = [p.strip() for p in str(text).split(",")]
    kind, colon, model = head.partition(":")
    options = option_pairs(pairs, f"rerank {kind}")
    if colon:
        if "model" in options:
            raise ConfigError(f"rerank {text!r}: the model is given twice")
        options["model"] = model
    for name, value in (wide or {}).items():
        if name not in options and takes_wide(kind, name):
            options[name] = value
    return StageConfig(kind, options)


def takes_wide(kind: str, name: str) -> bool:
    """Whether a stage of ``kind`` takes the stage-wide option ``name`` (a `STAGE_WIDE`
    value): it has that option, and a model only if it calls an LLM."""
    spec = STAGES.get(kind)
    return spec is not None and name in spec.defaults and (name != "model" or spec.uses_llm)


def stage_kind(text: str) -> str:
    """The kind a ``--rerank`` spec names (``cross:m,depth=5`` -> ``cross``), unchecked."""
    return str(text).split(",", 1)[0].partition(":")[0].strip()


def stages_with(texts: Sequence[Any], wide: Mapping[str, Any]) -> tuple[StageConfig, ...]:
    """The stages of ``texts``, each given the ``wide`` options it has; a wide option that
    no stage has is refused, naming its flag."""
    stages = tuple(parse_stage(t, wide) for t in texts)
    for key, name in STAGE_WIDE.items():
        if name not in wide:
            continue
        if not any(takes_wide(s.kind, name) for s in stages):
            kinds = ", ".join(s.kind for s in stages)
            raise ConfigError(f"{key} {wide[name]}: no rerank stage has option {name} ({kinds})")
    return stages


def option_pairs(items: Any, what: str) -> dict[str, Any]:
    """``key=value`` items (or a mapping) -> a dict; a malformed item is a ConfigError."""
    try:
        return key_values(items, what)
    except ValueError as e:
        raise ConfigError(str(e)) from None
