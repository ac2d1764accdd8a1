"""argparse types for numeric flags: each refuses a value it cannot use in one line.

``--limit 0``, ``--depth -1``, ``--b 2`` or ``--temperature nan`` would otherwise be accepted
and give empty or wrong results with exit 0; argparse turns the ArgumentTypeError into
"argument --flag: <message>" before anything is loaded.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def _number(kind: type, text: str) -> float | int:
    try:
        value = kind(text)
    except ValueError:
        noun = "an integer" if kind is int else "a number"
        raise argparse.ArgumentTypeError(f"expected {noun}, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def _bounded(kind: type, low: float | None, high: float | None, strict_low: bool, what: str):
    def parse(text: str) -> float | int:
        value = _number(kind, text)
        if low is not None and (value <= low if strict_low else value < low):
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
        return value

    parse.__name__ = what.replace(" ", "_")
    return parse


positive_int: Callable[[str], int] = _bounded(int, 0, None, True, "a positive integer")
non_negative_int: Callable[[str], int] = _bounded(int, 0, None, False, "an integer >= 0")
positive_float: Callable[[str], float] = _bounded(float, 0, None, True, "a number > 0")
non_negative_float: Callable[[str], float] = _bounded(float, 0, None, False, "a number >= 0")
unit_float: Callable[[str], float] = _bounded(float, 0, 1, False, "a number in [0, 1]")
