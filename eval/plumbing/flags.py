"""Flat settings as command-line flags: a `Setting` per flag, and `add_flags` to add them.

A setting's key is its flag (``max_tokens`` is ``--max-tokens``) and its name in a sweep
file; its path says where it goes in a configuration (``retriever.bm25.k1``). Each flag
defaults to "not given" (None), so that the configuration's own default applies; the help
shows that default. `retrievers.flags` builds the retriever's settings from its config's
fields, and `agents.config.settings.SETTINGS` holds them with the run's own.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Setting:
    path: str  # where it goes in the config ("llm.temperature"); "" for special handling
    help: str
    type: Callable[[str], Any] | None = None  # the flag's parser (a checker from argtypes)
    choices: Sequence[str] | None = None
    many: bool = False  # repeatable: a list of values
    flag_only: bool = False  # a command-line shortcut (e.g. --max-turns for an option)
    metavar: str | None = None
    switch: bool = False  # a flag that takes no value: given means true


def add_flags(
    parser: argparse.ArgumentParser,
    settings: Mapping[str, Setting],
    defaults: Mapping[str, Any],
    only: Sequence[str] | None = None,
) -> None:
    """One flag per setting (or per setting in ``only``), each defaulting to "not given";
    its help ends with ``defaults[key]`` where that says something."""
    for key, s in settings.items():
        if only is not None and key not in only:
            continue
        shown = defaults.get(key)
        help_text = s.help + (f" (default: {shown})" if shown not in (None, "", [], {}) else "")
        kwargs: dict[str, Any] = {"help": help_text, "default": None, "dest": key}
        if s.metavar:
            kwargs["metavar"] = s.metavar
        if s.switch:
            kwargs.update(action="store_true", default=None)
        elif s.many:
            kwargs.update(action="append")
        else:
            if s.type is not None:
                kwargs["type"] = s.type
            if s.choices is not None:
                kwargs["choices"] = list(s.choices)
        parser.add_argument("--" + key.replace("_", "-"), **kwargs)


def key_values(items: Any, what: str) -> dict[str, Any]:
    """``["k=v", ...]`` (a repeated KEY=VALUE flag) as a dict; a mapping is taken as it is."""
    if isinstance(items, Mapping):
        return dict(items)
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = str(item).partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{what} {item!r}: expected KEY=VALUE")
        out[key.strip()] = value.strip()
    return out
