"""Numbers in users' files and flags, read as trec_eval's C reads them: ASCII only.

Python's ``float()`` and ``int()`` take forms C's ``strtod``/``atoi`` do not (``1_000``,
non-ASCII digits such as ``'١٢'``, surrounding Unicode spaces), so a file that trec_eval reads
one way would be read another here. These readers take exactly the ASCII decimal forms
``strtod`` takes: an optional sign, digits with an optional decimal point, an optional
exponent (``-1.5e-3``, ``.5``, ``3.``), nothing around them; an integer is an optional sign
and digits. ``nan``, ``inf`` and hexadecimal floats, which ``strtod`` also reads, are refused:
no score, grade or setting here may be non-finite.
"""

from __future__ import annotations

import math
import re

_DECIMAL = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)
_NON_FINITE = ("nan", "inf", "infinity")
_INTEGER = re.compile(r"[+-]?[0-9]+", re.ASCII)


def parse_float(text: str) -> float:
    """``text`` as a finite float, read as C's ``strtod`` reads an ASCII decimal; ValueError
    saying what it expected otherwise (a number too large for a double is not finite)."""
    if not _DECIMAL.fullmatch(text):
        if text.strip().lower().lstrip("+-") in _NON_FINITE:
            raise ValueError("expected a finite number")
        raise ValueError("expected a number (ASCII digits, '.', an exponent)")
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("expected a finite number (too large for a double)")
    return value


def parse_int(text: str) -> int:
    """``text`` as an integer: an optional sign and ASCII digits, nothing else."""
    if not _INTEGER.fullmatch(text):
        raise ValueError("expected an integer (ASCII digits)")
    try:
        return int(text)
    except ValueError:  # longer than Python converts (sys.get_int_max_str_digits)
        raise ValueError(f"expected an integer, got one of {len(text):,} digits") from None
