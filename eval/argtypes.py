"""Checked numbers: one rule per kind of setting, for flags and configs alike.

Each checker takes a value or its text (``positive_int(3)``, ``positive_int("3")``) and
returns the number, or raises `CheckError` saying what it must be. argparse uses them as
flag types ("argument --limit: must be a positive integer, got '0'"), and the run
configuration applies the same ones to values set from Python or a sweep file, so
``--limit 0``, ``depth = -1`` or ``temperature = nan`` are refused before anything runs.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Mapping, Sequence


class CheckError(argparse.ArgumentTypeError, ValueError):
    """A value a setting cannot take; argparse prints its message after the flag."""


def _number(kind: type, value: object) -> float | int:
    given = value
    noun = "an integer" if kind is int else "a number"
    if isinstance(value, bool):
        raise CheckError(f"expected {noun}, got {value!r}")
    if isinstance(value, str):
        try:
            value = kind(value)
        except ValueError:
            raise CheckError(f"expected {noun}, got {value!r}") from None
    elif kind is int and not (isinstance(value, int) or float(value).is_integer()):  # type: ignore[arg-type]
        raise CheckError(f"expected {noun}, got {value!r}")
    elif not isinstance(value, int | float):
        raise CheckError(f"expected {noun}, got {value!r}")
    if not math.isfinite(value):
        raise CheckError(f"expected a finite number, got {given!r}")
    return kind(value)


def _bounded(kind: type, low: float | None, high: float | None, strict_low: bool, what: str):
    def check(value: object) -> float | int:
        number = _number(kind, value)
        too_low = low is not None and (number <= low if strict_low else number < low)
        if too_low or (high is not None and number > high):
            raise CheckError(f"must be {what}, got {value!r}")
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
            raise CheckError(f"must be one of {', '.join(choices)}, got {value!r}")
        return value

    return check


def boolean(value: object) -> bool:
    """A switch: true or false (or the words, as a flag or a sweep file may give them)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise CheckError(f"expected true or false, got {value!r}")


def on_off(value: object) -> bool:
    """A setting that is on or off (true or false also read, as a sweep file may give them)."""
    if isinstance(value, bool):
        return value
    words = {"on": True, "true": True, "off": False, "false": False}
    if isinstance(value, str) and value.strip().lower() in words:
        return words[value.strip().lower()]
    raise CheckError(f"expected on or off, got {value!r}")


def optional(checker: Callable[[object], object]) -> Callable[[object], object]:
    """``checker`` for a setting that may also be None (unset)."""
    return lambda value: None if value is None else checker(value)


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
