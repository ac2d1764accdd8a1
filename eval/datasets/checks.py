"""DataError and the checks every reader applies: JSON lines, ids, texts and grades, each
failure one line naming file, line and field; and the collector the qrels readers share.

Decisions worth knowing:

* Ids are always strings. Integer ids in JSON are converted with ``str()`` so that ``7`` in
  corpus.jsonl and ``"7"`` in a TSV qrels file name the same document. Other id types (floats,
  booleans, null) and empty ids are errors, and so is an id holding whitespace or a
  non-printable character (``id_problem``): a TREC run file cannot carry it, and an invisible
  one (NBSP, zero-width space) would silently fail to match. Rejecting it at load time costs
  nothing; finding it when ``run.trec`` is written comes after every LLM call was paid for.
* Grades are integers in ``GRADE_MIN .. GRADE_MAX``. trec_eval holds them in a C ``int``
  (pytrec_eval raises SystemError beyond it) and allocates memory in proportion to the largest
  grade (a grade of 2**31 - 1 needed about 17 GB and three minutes), so the upper bound is
  65535, far above any grading scale in use. Negative grades are accepted and counted in a
  note; the evaluator scores them as 0, i.e. judged non-relevant (``eval.evaluate``): with
  pytrec_eval that gives the same nDCG, MAP, P, recall and MRR as the negative grades
  themselves, except that a query judged only by grades of -2 or below, after another query,
  crashes pytrec_eval (segfault) instead of scoring 0.
* Duplicate doc or query ids keep the last occurrence, as R2MED's own loader does.
"""

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from eval.plumbing.decimal_text import parse_int
from eval.plumbing.quoting import quoted

_EXAMPLES = 3  # how many offending ids a note quotes


class DataError(ValueError):
    """Input data is missing or malformed; the message is one line naming file, line and field."""


# The C int trec_eval holds grades in; above, the memory trec_eval allocates per relevance
# level (see the module docstring).
GRADE_MIN = -(2**31)
GRADE_MAX = 2**16 - 1


def id_problem(value: str) -> str | None:
    """Why ``value`` cannot be a query or doc id, or ``None`` if it can.

    An id must be non-empty, without whitespace (it is a column of a TREC file) and without
    non-printable characters (zero-width and other invisible characters make ids that look
    equal and are not). The one id rule for loaders and TREC files alike.
    """
    if not value:
        return "empty id"
    for position, char in enumerate(value):
        if char.isspace() or not char.isprintable():
            kind = "whitespace" if char.isspace() else "non-printable character"
            return (
                f"id {quoted(value)} contains {kind} {char!r} (U+{ord(char):04X}) "
                f"at position {position + 1}"
            )
    return None


# --- low-level readers -------------------------------------------------------------------------


def _type_name(value: Any) -> str:
    # JSON-flavoured names read better in messages about JSON files than Python's NoneType/dict.
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, str):
        return "string"
    return type(value).__name__


def numbered_lines(path: Path) -> Iterator[tuple[int, str]]:
    """Yield (1-based line number, text) for each non-blank line.

    Bytes are decoded line by line so that bad UTF-8 is reported with its line number.
    """
    try:
        data = path.read_bytes()
    except OSError as err:
        raise DataError(f"{path}: cannot read ({err.strerror or err})") from None
    if data.startswith(b"\xef\xbb\xbf"):  # tolerate a UTF-8 byte-order mark
        data = data[3:]
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            yield number, raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise DataError(
                f"{path} line {number}: not valid UTF-8 (bad byte at column {err.start + 1})"
            ) from None


def jsonl_objects(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield (location for messages, object) for each JSON line."""
    for number, line in numbered_lines(path):
        where = f"{path} line {number}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as err:
            raise DataError(f"{where}: malformed JSON ({err.msg} at column {err.colno})") from None
        if not isinstance(obj, dict):
            raise DataError(f"{where}: expected a JSON object, got {_type_name(obj)}")
        yield where, obj


def read_id_texts(path: Path, id_key: str, text_key: str) -> dict[str, str]:
    """``id_key -> text_key`` of every line of a JSONL file, checked as task files are (one
    DataError naming file, line and field); no other field is kept."""
    out = {}
    for where, obj in jsonl_objects(path):
        text = as_text(field_value(obj, text_key, where), text_key, where)
        out[as_id(field_value(obj, id_key, where), id_key, where)] = text
    return out


def field_value(obj: dict[str, Any], key: str, where: str) -> Any:
    try:
        return obj[key]
    except KeyError:
        present = ", ".join(quoted(k) for k in list(obj)[:6]) or "none"
        raise DataError(f"{where}: missing field {key!r} (fields present: {present})") from None


def as_id(value: Any, key: str, where: str) -> str:
    if isinstance(value, str):
        if not value:
            raise DataError(f"{where}: field {key!r}: expected a non-empty id, got an empty string")
        return checked_id(value, key, where)
    # bool is an int subclass, but true/false as an id is surely a mistake.
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise DataError(
        f"{where}: field {key!r}: expected a string or integer id, got {_type_name(value)}"
    )


def checked_id(value: str, key: str, where: str) -> str:
    problem = id_problem(value)
    if problem:
        raise DataError(f"{where}: field {key!r}: {problem}")
    return value


def as_text(value: Any, key: str, where: str) -> str:
    if isinstance(value, str):
        return value
    raise DataError(f"{where}: field {key!r}: expected a string, got {_type_name(value)}")


def as_grade(value: Any, key: str, where: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        grade = value
    elif isinstance(value, str):
        try:
            grade = parse_int(value)  # as trec_eval's C reads it: no '1_0', no '١'
        except ValueError:
            raise DataError(
                f"{where}: field {key!r}: expected an integer grade, got {quoted(value)}"
            ) from None
    else:
        raise DataError(
            f"{where}: field {key!r}: expected an integer grade, got {_type_name(value)}"
        )
    if not GRADE_MIN <= grade <= GRADE_MAX:
        raise DataError(
            f"{where}: field {key!r}: grade {grade} is outside {GRADE_MIN} .. {GRADE_MAX}"
        )
    return grade


def id_examples(ids: list[str] | set[str]) -> str:
    shown = sorted(ids)[:_EXAMPLES]
    more = ", ..." if len(ids) > _EXAMPLES else ""
    return "e.g. " + ", ".join(quoted(i) for i in shown) + more


def _duplicate_note(path: Path, kind: str, dupes: set[str]) -> str:
    return (
        f"{path.name}: {len(dupes)} duplicate {kind} ids ({id_examples(dupes)}); "
        "kept the last occurrence of each, as R2MED does"
    )


# --- file readers ------------------------------------------------------------------------------


def read_texts(
    path: Path, id_key: str, kind: str, title_key: str | None = None
) -> tuple[dict[str, str], list[str]]:
    """Read an id -> text JSONL file (a corpus or a query file)."""
    texts: dict[str, str] = {}
    dupes: set[str] = set()
    for where, obj in jsonl_objects(path):
        item_id = as_id(field_value(obj, id_key, where), id_key, where)
        text = as_text(field_value(obj, "text", where), "text", where)
        if title_key is not None:
            # BEIR convention: the title is prepended; documents without one are just their text.
            title = obj.get(title_key)
            if title is not None:
                title = as_text(title, title_key, where)
            text = f"{title} {text}".strip() if title else text.strip()
        if item_id in texts:
            dupes.add(item_id)
        texts[item_id] = text
    notes = [_duplicate_note(path, kind, dupes)] if dupes else []
    return texts, notes


class QrelsBuilder:
    """Collects (query, doc, grade) triples, keeping the last grade for a repeated pair."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.qrels: dict[str, dict[str, int]] = {}
        self.repeated = 0

    def add(self, query_id: str, doc_id: str, grade: int) -> None:
        docs = self.qrels.setdefault(query_id, {})
        if doc_id in docs:
            self.repeated += 1
        docs[doc_id] = grade

    def result(self) -> tuple[dict[str, dict[str, int]], list[str]]:
        notes = []
        if self.repeated:
            notes.append(
                f"{self.path.name}: {self.repeated} repeated (query, doc) pairs; "
                "kept the last grade of each"
            )
        negative = sum(1 for docs in self.qrels.values() for g in docs.values() if g < 0)
        if negative:
            notes.append(
                f"{self.path.name}: {negative} judgements have negative grades; "
                "they are scored as grade 0 (judged non-relevant)"
            )
        return self.qrels, notes


def first_line_hint(err: DataError, first: bool, hint: str) -> DataError:
    # A first line that is neither data nor a known header is most likely an unknown header.
    return DataError(f"{err} ({hint})") if first else err
