"""Quoting a user's value in an error line, bounded: one rule for every message that shows an
id, a value or a line read from a file or given from Python.

A value is shown as ``repr`` does; a long one keeps its start and end and says how long it
was (``'aaaa…zzzz' (1,000,094 characters)``), so a 1 MB document id cannot make a one-line
refusal a megabyte long, and the line's file/line prefix always shows.
"""

from __future__ import annotations

QUOTE_CHARS = 80  # the most of a value an error line quotes


def quoted(value: object, limit: int = QUOTE_CHARS) -> str:
    """``repr(value)``, its middle cut when it is longer than ``limit`` characters."""
    text = value if isinstance(value, str) else None
    shown = repr(value)
    if len(shown) <= limit:
        return shown
    keep = max(limit // 2 - 2, 4)
    length = len(text) if text is not None else len(shown)
    noun = "characters" if text is not None else "characters as text"
    return f"{shown[:keep]}…{shown[-keep:]} ({length:,} {noun})"


def clipped(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, keeping its start (where a line says which file
    and line) and its end, with how much was cut."""
    if len(text) <= limit:
        return text
    tail = max(limit // 4, 10)
    head = max(limit - tail - 40, 20)
    return f"{text[:head]} …[{len(text) - head - tail:,} characters cut]… {text[-tail:]}"
