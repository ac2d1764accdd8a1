"""Checked numbers: one rule per kind of setting, for flags and configs alike.

Each checker takes a value or its text (``positive_int(3)``, ``positive_int("3")``) and
returns the number, or raises `CheckError` saying what it must be. argparse uses them as
flag types ("argument --limit: must be a positive integer, got '0'"), and the run
configuration applies the same ones to values set from Python or a sweep file, so
``--limit 0``, ``depth = -1`` or ``temperature = nan`` are refused before anything runs.
A flag's text is read as C reads a number (`eval.plumbing.decimal_text`: ASCII decimals, no
``1_000``, no ``'١٢'``). `check_fields` checks a whole config dataclass: each field against
its annotation first (so a value from Python must be of the field's type), then its rule.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import numbers
import types
import typing
from collections.abc import Callable, Mapping, Sequence

from eval.plumbing.decimal_text import parse_float, parse_int
from eval.plumbing.quoting import quoted
from eval.plumbing.secrets.credentials import mask_urls


class CheckError(argparse.ArgumentTypeError, ValueError):
    """A value a setting cannot take; argparse prints its message after the flag."""


def _number(kind: type, value: object) -> float | int:
    given = value
    noun = "an integer" if kind is int else "a number"
    if isinstance(value, bool):
        raise CheckError(f"expected {noun}, got {quoted(value)}")
    if isinstance(value, str):  # a flag's text, read as C reads it (no '1_000', no '١٢')
        try:
            value = parse_int(value) if kind is int else parse_float(value)
        except ValueError as e:
            raise CheckError(f"{e}, got {quoted(value)}") from None
    elif kind is int and not (isinstance(value, int) or float(value).is_integer()):  # type: ignore[arg-type]
        raise CheckError(f"expected {noun}, got {quoted(value)}")
    elif not isinstance(value, int | float):
        raise CheckError(f"expected {noun}, got {quoted(value)}")
    if not math.isfinite(value):
        raise CheckError(f"expected a finite number, got {quoted(given)}")
    return kind(value)


def _bounded(kind: type, low: float | None, high: float | None, strict_low: bool, what: str):
    def check(value: object) -> float | int:
        number = _number(kind, value)
        too_low = low is not None and (number <= low if strict_low else number < low)
        if too_low or (high is not None and number > high):
            raise CheckError(f"must be {what}, got {quoted(value)}")
        return number

    check.__name__ = what.replace(" ", "_")
    return check


positive_int: Callable[[object], int] = _bounded(int, 0, None, True, "a positive integer")
non_negative_int: Callable[[object], int] = _bounded(int, 0, None, False, "an integer >= 0")
positive_float: Callable[[object], float] = _bounded(float, 0, None, True, "a number > 0")
non_negative_float: Callable[[object], float] = _bounded(float, 0, None, False, "a number >= 0")
unit_float: Callable[[object], float] = _bounded(float, 0, 1, False, "a number in [0, 1]")


def integer_from(low: int) -> Callable[[object], int]:
    """A checker for an integer of at least ``low`` (-1 is "off" for some samplers)."""
    return _bounded(int, low, None, False, f"an integer >= {low}")


def one_of(choices: Sequence[str] | Mapping[str, str]) -> Callable[[object], str]:
    """A checker for a setting that takes one of ``choices`` (a mapping's keys)."""

    def check(value: object) -> str:
        if not isinstance(value, str) or value not in choices:
            raise CheckError(f"must be one of {', '.join(choices)}, got {quoted(value)}")
        return value

    return check


def boolean(value: object) -> bool:
    """A switch: true or false (or the words, as a flag or a sweep file may give them)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise CheckError(f"expected true or false, got {quoted(value)}")


def on_off(value: object) -> bool:
    """A setting that is on or off (true or false also read, as a sweep file may give them)."""
    if isinstance(value, bool):
        return value
    words = {"on": True, "true": True, "off": False, "false": False}
    if isinstance(value, str) and value.strip().lower() in words:
        return words[value.strip().lower()]
    raise CheckError(f"expected on or off, got {quoted(value)}")


def server_urls(value: object) -> str:
    """An ``http(s)://host[:port][/path]`` URL, or several joined by commas (replicas): a
    server address without its scheme would be sent nowhere and retried as an outage."""
    from urllib.parse import urlsplit

    if not isinstance(value, str) or not value.strip():
        raise CheckError(f"expected a URL, got {quoted(mask_urls(str(value)))}")
    for url in (u.strip() for u in value.split(",")):
        try:
            parts = urlsplit(url)
            port_ok = parts.port is None or parts.port > 0
        except ValueError:
            port_ok = False
            parts = None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname or (
            not port_ok
        ):  # fmt: skip
            raise CheckError(
                f"expected http://HOST:PORT[/v1] (or several joined by commas), got "
                f"{quoted(mask_urls(url))}"
            )
    return value


def optional(checker: Callable[[object], object]) -> Callable[[object], object]:
    """``checker`` for a setting that may also be None (unset)."""
    return lambda value: None if value is None else checker(value)


def check_fields(
    obj: object,
    where: str,
    rules: Mapping[str, Callable[[object], object]],
    error: type[ValueError] = ValueError,
) -> None:
    """Check every field of the frozen dataclass ``obj`` once: its value against the field's
    annotation (an ``int`` field takes an integer, not text, a float or a bool; ``X | None``
    alone takes None; a ``str`` field takes text), then against its rule in ``rules`` (the
    checker its flag uses too), storing what the rule returns. A refusal is one ``error`` line
    naming the field as ``where.name`` and the value (clipped); a value of the wrong type
    names the class and its field too (``LLMConfig.max_tokens``).

    Text is read into numbers by the flags (argparse applies the same rules to a flag's text);
    a value given from Python, a sweep file or config.json is already typed, so it must be of
    the field's type.
    """
    cls = type(obj)
    hints = _hints(cls)
    for f in dataclasses.fields(obj):  # type: ignore[arg-type]
        value = getattr(obj, f.name)
        name = f"{where}.{f.name}" if where else f.name
        expected = type_problem(value, hints[f.name])
        if expected is not None:
            # a URL's password never reaches the line (an api_base given as a list)
            given = "None" if value is None else f"{type(value).__name__} {quoted(value)}"
            given = mask_urls(given)
            raise error(f"{name}: expected {expected}, got {given} ({cls.__name__}.{f.name})")
        if f.name in rules:
            try:
                value = rules[f.name](value)
            except ValueError as e:
                raise error(f"{name}: {e}") from None
            object.__setattr__(obj, f.name, value)


@functools.cache
def _hints(cls: type) -> dict[str, object]:
    return typing.get_type_hints(cls)


def type_problem(value: object, hint: object) -> str | None:
    """What ``hint`` (a field's annotation) expects, when ``value`` is not of it; else None.
    A container's items are checked too; an item of a dataclass type may be its table
    (a mapping of its fields), which the holding config builds it from."""
    origin = typing.get_origin(hint)
    if hint is typing.Any:
        return None
    if origin in (typing.Union, types.UnionType):
        members = typing.get_args(hint)
        if any(type_problem(value, m) is None for m in members):
            return None
        return " or ".join(_noun(m) for m in members)
    if hint is type(None):
        return None if value is None else "None"
    if hint is bool:
        return None if isinstance(value, bool) else _noun(hint)
    if hint is int:
        ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
        return None if ok else _noun(hint)
    if hint is float:
        ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
        return None if ok else _noun(hint)
    if hint is str:
        return None if isinstance(value, str) else _noun(hint)
    if origin in (dict, Mapping, typing.Mapping) or hint in (dict, Mapping):
        if not isinstance(value, Mapping):
            return _noun(hint)
        key, item = typing.get_args(hint) or (typing.Any, typing.Any)
        for k, v in value.items():
            if type_problem(k, key) is not None or type_problem(v, item) is not None:
                return f"{_noun(hint)}, not one holding {quoted(k)}: {type(v).__name__}"
        return None
    if origin is tuple or hint is tuple:
        if not isinstance(value, tuple | list):
            return _noun(hint)
        args = [a for a in typing.get_args(hint) if a is not Ellipsis]
        item = args[0] if args else typing.Any
        for v in value:
            table = dataclasses.is_dataclass(item) and isinstance(v, Mapping)
            if not table and type_problem(v, item) is not None:
                return f"{_noun(hint)}, not one holding {type(v).__name__} {quoted(v)}"
        return None
    if isinstance(hint, type):
        return None if isinstance(value, hint) else _noun(hint)
    return None  # an annotation this check does not read: the field's rule decides


def _noun(hint: object) -> str:
    nouns = {bool: "true or false", int: "an integer", float: "a number", str: "text"}
    if hint is typing.Any:
        return "anything"
    if hint in nouns:
        return nouns[hint]  # type: ignore[index]
    if hint is type(None):
        return "None"
    origin = typing.get_origin(hint) or hint
    if origin in (dict, Mapping, typing.Mapping):
        key, item = typing.get_args(hint) or (typing.Any, typing.Any)
        if key is typing.Any and item is typing.Any:
            return "a mapping"
        return f"a mapping of {_noun(key)} to {_noun(item)}"
    if origin is tuple:
        args = [a for a in typing.get_args(hint) if a is not Ellipsis]
        return f"a list of {_noun(args[0])}" if args else "a list"
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(_noun(m) for m in typing.get_args(hint))
    return f"a {getattr(hint, '__name__', hint)}"


def check_field(
    obj: object,
    name: str,
    where: str,
    checker: Callable[[object], object],
    error: type[ValueError] = ValueError,
) -> None:
    """Check a frozen dataclass's field with ``checker`` and store what it returns (text ->
    number); a refusal is ``error`` naming the field as ``where.name``."""
    try:
        value = checker(getattr(obj, name))
    except ValueError as e:
        raise error(f"{where}.{name}: {e}" if where else f"{name}: {e}") from None
    object.__setattr__(obj, name, value)
