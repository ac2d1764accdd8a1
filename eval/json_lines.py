"""Reading the JSON and JSON-lines files eval reads, with every refusal naming the file and
the line: ``<file> line <n>: not valid UTF-8 (bad byte at column <c>)``, ``... not valid JSON
(<why>, column <c>)``. What a line must hold (its fields) is each reader's to check; quoted
values go through `eval.plumbing.quoting`, so a line stays short whatever the file holds.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from typing import Any

PathLike = str | os.PathLike[str]


class JsonFileError(ValueError):
    """A file that is not the JSON it should be; the message names file and line
    (``where``) and what is wrong (``problem``)."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}")
        self.where = where
        self.problem = problem


def decoded(path: PathLike, number: int, raw: bytes) -> str:
    """Line ``number`` of ``path`` (its bytes ``raw``) as text; JsonFileError if not UTF-8."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        problem = f"not valid UTF-8 (bad byte at column {e.start + 1})"
        raise JsonFileError(f"{os.fspath(path)} line {number}", problem) from None


def parsed(path: PathLike, number: int, text: str) -> Any:
    """Line ``number`` of a JSON-lines file as its value; JsonFileError if it is not JSON."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise JsonFileError(
            f"{os.fspath(path)} line {number}", f"not valid JSON ({e.msg}, column {e.colno})"
        ) from None
    except RecursionError:
        raise JsonFileError(f"{os.fspath(path)} line {number}", "JSON nested too deep") from None


def raw_lines(path: PathLike) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes without the line end) of each line, streamed."""
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            yield number, raw.rstrip(b"\r\n")


def read_json(path: PathLike) -> Any:
    """The value of the JSON file ``path``; JsonFileError naming the line where it is not
    UTF-8 or not JSON (a UTF-8 byte-order mark is skipped). OSError when it cannot be read."""
    with open(path, "rb") as f:
        data = f.read()
    data = data.removeprefix(b"\xef\xbb\xbf")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1
        raise JsonFileError(
            f"{os.fspath(path)} line {line}", f"not valid UTF-8 (bad byte at column {column})"
        ) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise JsonFileError(
            f"{os.fspath(path)} line {e.lineno}", f"not valid JSON ({e.msg}, column {e.colno})"
        ) from None
    except RecursionError:
        raise JsonFileError(os.fspath(path), "JSON nested too deep") from None
