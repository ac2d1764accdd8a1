"""Placeholder rules: which ``str.format`` fields a prompt may use and must use, checked on read.

Placeholders are plain ``str.format`` fields, ``{name}``: ``{query}`` everywhere, ``{docs}`` for
LameR (see `agents.graphs.generate_retrieve.format_docs`) and ``{examples}`` for query2doc (its
few-shot examples, which R2MED's public code does not include). Every file, built-in or
override, is checked when it is read (`check_placeholders`): its fields must be plain names (no
conversion, format spec, attribute or index), the placeholders a prompt may use and must use
are derived from the built-in files of its family (see `placeholder_rules`), and it is rendered
once with stand-in values of the types the agents pass. So an override that drops ``{query}``,
names a placeholder no agent fills or cannot be rendered is refused at start-up instead of
sending one text for every query, or failing each query mid-run.
"""

from __future__ import annotations

import functools
import string
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from eval.datasets.vocabulary import R2MED_TASKS, TASK_KINDS
from prompts.files import (
    DEFAULT,
    Prompt,
    PromptError,
    builtin_path,
    decode_prompt,
    field_root,
    prompt_names,
)

# Variants that select a family's main prompt by task or query kind; any other built-in variant
# (search-o1/documents, search-r1/chat, ...) is a helper prompt, a family of its own.
MAIN_VARIANTS = frozenset({DEFAULT, *TASK_KINDS, *R2MED_TASKS})
# Values that are one constant for a whole run may be left out of a prompt: every query still
# gets its own text (docs/sweep-scifact.toml's zero-shot "textbook" query2doc prompt drops
# {examples}; the agent enforces max_searches whether or not the model is told). A per-query
# input ({query}, {docs}, {documents}, {observation}, ...) may not: what the agent computed
# would silently never reach the model.
RUN_CONSTANTS = frozenset({"examples", "max_searches"})
# What the agents fill placeholders with (every `render(` call under agents/): these are ints
# (counts and 1-based ranks); every other value is text, already formatted (InsertRank's
# {score} is "0.8123", not a float). A file is rendered once with such stand-ins when read.
INT_PLACEHOLDERS = frozenset({"max_searches", "num", "rank"})


@dataclass(frozen=True)
class PlaceholderRule:
    """What the prompts of one family may and must use, derived from its built-in files."""

    family: str
    allowed: frozenset[str]  # the union of the built-ins' placeholders
    required: frozenset[str]  # their intersection, less `RUN_CONSTANTS`
    builtins: tuple[str, ...]  # the files it was derived from, as "name/variant"


def prompt_family(name: str) -> str:
    """The family whose rule applies to prompt ``name`` ("hyde", "hyde/exam", "hyde/scifact").

    A helper prompt such as "search-o1/documents" is its own family; any other variant, built-in
    or not (an override resolved for a task outside R2MED), belongs to the main prompt.
    """
    family, _, variant = name.partition("/")
    if variant and variant not in MAIN_VARIANTS and name in _builtin_names():
        return name
    return family


@functools.cache
def placeholder_rules() -> dict[str, PlaceholderRule]:
    """The placeholder rule of every prompt family, from the built-in files (read once)."""
    groups: dict[str, dict[str, frozenset[str]]] = {}
    for name in prompt_names():
        path = builtin_path(name)
        fields = frozenset(_checked_fields(name, path, decode_prompt(name, path)))
        groups.setdefault(prompt_family(name), {})[name] = fields
    return {
        family: PlaceholderRule(
            family,
            frozenset().union(*members.values()),
            frozenset.intersection(*members.values()) - RUN_CONSTANTS,
            tuple(members),
        )
        for family, members in groups.items()
    }


def check_placeholders(prompt: Prompt) -> None:
    """Raise PromptError (one line naming the file and the field) unless ``prompt`` renders as
    the agents will render it: plain ``{name}`` fields only, none its family does not fill,
    none missing that it needs, and a render with stand-in values that succeeds. A family
    without built-ins has no rule: any plain field passes, and the render is still tried."""
    _checked_fields(prompt.name, prompt.path, prompt.text)
    rule = placeholder_rules().get(prompt_family(prompt.name))
    if rule is not None:
        _check_rule(prompt, rule)
    fields = rule.allowed if rule is not None else prompt.placeholders
    prompt.render(**stand_in_values(fields))  # what every query will do, done once now


def stand_in_values(fields: Iterable[str]) -> dict[str, object]:
    """A value of the type the agents pass for each placeholder (see `INT_PLACEHOLDERS`)."""
    return {f: 1 if f in INT_PLACEHOLDERS else "x" for f in fields}


def _check_rule(prompt: Prompt, rule: PlaceholderRule) -> None:
    unknown = [f for f in prompt.placeholders if f not in rule.allowed]
    if unknown:
        takes = _braced(sorted(rule.allowed)) if rule.allowed else "none"
        raise PromptError(
            f"prompt {prompt.name} ({prompt.path}) has unknown placeholder(s) {_braced(unknown)}; "
            f"{rule.family} prompts take: {takes} ({_ESCAPE_HINT})"
        )
    missing = sorted(rule.required - set(prompt.placeholders))
    if missing:
        raise PromptError(
            f"prompt {prompt.name} ({prompt.path}) lacks placeholder(s) {_braced(missing)}, "
            f"which every built-in {rule.family} prompt uses: without it the value the agent "
            "passes never reaches the model"
        )


_ESCAPE_HINT = "write {{ and }} for literal braces"


def _checked_fields(name: str, path: Path, text: str) -> list[str]:
    """The text's format fields, or PromptError for a field that is not a plain ``{name}``."""
    try:
        parsed = [(f, c, s) for _, f, s, c in string.Formatter().parse(text) if f is not None]
    except ValueError as exc:  # a lone "{" or "}"
        raise PromptError(f"prompt {name} ({path}) is malformed: {exc} ({_ESCAPE_HINT})") from exc
    for field, conversion, spec in parsed:
        if not field or field_root(field).isdigit():
            raise PromptError(
                f"prompt {name} ({path}) has a positional placeholder; use named ones such as "
                "{query}"
            )
        if conversion is not None or spec or not field.isidentifier():
            written = _as_written(field, conversion, spec)
            raise PromptError(
                f"prompt {name} ({path}) has placeholder {written}{_render_failure(written)}: "
                "only plain {name} fields are filled (no conversion, format spec, attribute or "
                f"index; {_ESCAPE_HINT})"
            )
    return list(dict.fromkeys(f for f, _, _ in parsed))


def _as_written(field: str, conversion: str | None, spec: str) -> str:
    """A format field as the file spells it: "{query!r:>5}"."""
    converted = f"{field}!{conversion}" if conversion else field
    return "{" + (f"{converted}:{spec}" if spec else converted) + "}"


def _render_failure(field: str) -> str:
    """Why ``field`` (as written, e.g. "{query:d}") fails on a stand-in value, or ""."""
    (_, name, _, _), *_ = string.Formatter().parse(field)
    try:
        field.format(**stand_in_values([field_root(name or "")]))
    except (KeyError, IndexError, ValueError, AttributeError, TypeError) as exc:
        return f", which fails to render ({type(exc).__name__}: {exc})"
    return ""


def _braced(fields: list[str]) -> str:
    return ", ".join("{" + f + "}" for f in fields)


@functools.cache
def _builtin_names() -> frozenset[str]:
    return frozenset(prompt_names())
