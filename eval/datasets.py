"""Load retrieval benchmarks into plain dicts: R2MED (local or from the Hugging Face hub) and BEIR.

Two on-disk layouts are understood:

* R2MED: ``corpus.jsonl`` {"id", "text"}, ``query.jsonl`` {"id", "text", ...} and
  ``qrels.jsonl`` {"q_id", "p_id", "score"}, or a TREC ``qrels.txt`` (``qid 0 docid grade``).
* BEIR: ``corpus.jsonl`` {"_id", "title", "text"}, ``queries.jsonl`` {"_id", "text"} and
  ``qrels/test.tsv`` (tab separated, after BEIR's ``query-id corpus-id score`` header line,
  which is recognised by those names and optional; TREC qrels have no header).

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
* Qrels naming unknown docs are kept: those docs still count as relevant, so they cap recall
  exactly as they do in the original benchmark. Qrels naming unknown queries are dropped, since
  such a query has no text to run.
* Problems that leave a usable task (duplicates, empty texts, dangling qrels, queries without
  qrels, negative grades) become ``Task.notes`` and log warnings; anything that makes the data
  unusable or ambiguous raises ``DataError`` with a one-line message naming the file, line and
  field.
"""

import json
import logging
import os
import socket
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from eval.plumbing.decimal_text import parse_int
from eval.plumbing.fingerprint import corpus_fingerprint
from eval.plumbing.quoting import quoted

log = logging.getLogger(__name__)

CACHE_ENV = "R2MED_AGENTS_CACHE"


def default_cache_dir() -> Path:
    """Where downloads, indexes, embeddings, models and LLM answers are cached by default."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "r2med-agents")


R2MED_TASKS: tuple[str, ...] = (
    "Biology",
    "Bioinformatics",
    "Medical-Sciences",
    "MedXpertQA-Exam",
    "MedQA-Diag",
    "PMC-Treatment",
    "PMC-Clinical",
    "IIYi-Clinical",
)

# Pinned to the commits mteb evaluates, so scores stay comparable if the hub repos change.
R2MED_REVISIONS: dict[str, str] = {
    "Biology": "8b9fec2db9eda4b5742d03732213fbaee8169556",
    "Bioinformatics": "6021fce366892cbfd7837fa85a4128ea93315e18",
    "Medical-Sciences": "1b48911514c80bf9182222d99752ad75e23b4b47",
    "MedXpertQA-Exam": "b457ea43db9ae5db74c3a3e5be0a213d0f85ac3a",
    "MedQA-Diag": "78b585990279cc01a493f876c1b0cf09557fba57",
    "PMC-Treatment": "53c489a44a3664ba352c07550b72b4525a5968d5",
    "PMC-Clinical": "812829522f7eaa407ef82b96717be85788a50f7e",
    "IIYi-Clinical": "974abbc9bc281c3169180a6aa5d7586cfd2f5877",
}

# The query style of each task, which picks the agents' prompts and the retrievers'
# instructions: a StackExchange-like post, a board-exam question, a clinical case, or a case
# whose answer is a similar case.
R2MED_KINDS: dict[str, str] = {
    "Biology": "post",
    "Bioinformatics": "post",
    "Medical-Sciences": "post",
    "MedXpertQA-Exam": "exam",
    "MedQA-Diag": "exam",
    "PMC-Treatment": "case",
    "PMC-Clinical": "similar-case",
    "IIYi-Clinical": "similar-case",
}
TASK_KINDS: tuple[str, ...] = ("post", "exam", "case", "similar-case")


def task_kind(name: str) -> str:
    """The query style of a task by name; tasks outside R2MED (e.g. SciFact) count as posts."""
    canonical = r2med_task_name(name)
    return R2MED_KINDS[canonical] if canonical else "post"


R2MED_FILES: tuple[str, ...] = ("corpus.jsonl", "query.jsonl", "qrels.jsonl")

# A small synthetic task in R2MED layout that ships with the package, so that everything runs
# offline; load it with the name "demo". Its scores say nothing about R2MED (see its README).
DEMO_DIR = Path(__file__).resolve().parent / "demo"

_EXPECTED_LAYOUTS = (
    "expected R2MED files (corpus.jsonl, query.jsonl, qrels.jsonl or qrels.txt) "
    "or BEIR files (corpus.jsonl, queries.jsonl, qrels/test.tsv)"
)
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


@dataclass
class Task:
    name: str
    corpus: dict[str, str]  # doc id -> retrieval text
    queries: dict[str, str]  # query id -> text
    qrels: dict[str, dict[str, int]]  # query id -> doc id -> relevance grade
    path: Path
    notes: list[str] = field(default_factory=list)


def task_fingerprint(task: Task) -> dict[str, str]:
    """sha256 hex digests of the task's corpus, queries and qrels, to bind results to data.

    The corpus digest is ``retrievers.fingerprint.corpus_fingerprint`` of its ids and texts in
    corpus order, the key the dense index cache uses: corpus order is part of the data, since
    it decides which tied documents make a top-k cut and which zero-score documents pad a
    ranking (``eval.evaluate.pad_run``). Query order decides nothing, so queries and qrels
    are hashed as canonical JSON with sorted keys (the same function, header only).
    """
    return {
        "corpus": corpus_fingerprint(list(task.corpus), list(task.corpus.values())),
        "queries": _canonical_digest(task.queries),
        "qrels": _canonical_digest(task.qrels),
    }


def _canonical_digest(data: Mapping[str, Any]) -> str:
    return corpus_fingerprint((), (), header=data)


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


def _lines(path: Path) -> Iterator[tuple[int, str]]:
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


def _jsonl(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield (location for messages, object) for each JSON line."""
    for number, line in _lines(path):
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
    for where, obj in _jsonl(path):
        text = _as_text(_get(obj, text_key, where), text_key, where)
        out[_as_id(_get(obj, id_key, where), id_key, where)] = text
    return out


def _get(obj: dict[str, Any], key: str, where: str) -> Any:
    try:
        return obj[key]
    except KeyError:
        present = ", ".join(quoted(k) for k in list(obj)[:6]) or "none"
        raise DataError(f"{where}: missing field {key!r} (fields present: {present})") from None


def _as_id(value: Any, key: str, where: str) -> str:
    if isinstance(value, str):
        if not value:
            raise DataError(f"{where}: field {key!r}: expected a non-empty id, got an empty string")
        return _checked_id(value, key, where)
    # bool is an int subclass, but true/false as an id is surely a mistake.
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise DataError(
        f"{where}: field {key!r}: expected a string or integer id, got {_type_name(value)}"
    )


def _checked_id(value: str, key: str, where: str) -> str:
    problem = id_problem(value)
    if problem:
        raise DataError(f"{where}: field {key!r}: {problem}")
    return value


def _as_text(value: Any, key: str, where: str) -> str:
    if isinstance(value, str):
        return value
    raise DataError(f"{where}: field {key!r}: expected a string, got {_type_name(value)}")


def _as_grade(value: Any, key: str, where: str) -> int:
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


def _examples(ids: list[str] | set[str]) -> str:
    shown = sorted(ids)[:_EXAMPLES]
    more = ", ..." if len(ids) > _EXAMPLES else ""
    return "e.g. " + ", ".join(quoted(i) for i in shown) + more


def _duplicate_note(path: Path, kind: str, dupes: set[str]) -> str:
    return (
        f"{path.name}: {len(dupes)} duplicate {kind} ids ({_examples(dupes)}); "
        "kept the last occurrence of each, as R2MED does"
    )


# --- file readers ------------------------------------------------------------------------------


def _read_texts(
    path: Path, id_key: str, kind: str, title_key: str | None = None
) -> tuple[dict[str, str], list[str]]:
    """Read an id -> text JSONL file (a corpus or a query file)."""
    texts: dict[str, str] = {}
    dupes: set[str] = set()
    for where, obj in _jsonl(path):
        item_id = _as_id(_get(obj, id_key, where), id_key, where)
        text = _as_text(_get(obj, "text", where), "text", where)
        if title_key is not None:
            # BEIR convention: the title is prepended; documents without one are just their text.
            title = obj.get(title_key)
            if title is not None:
                title = _as_text(title, title_key, where)
            text = f"{title} {text}".strip() if title else text.strip()
        if item_id in texts:
            dupes.add(item_id)
        texts[item_id] = text
    notes = [_duplicate_note(path, kind, dupes)] if dupes else []
    return texts, notes


class _QrelsBuilder:
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


def _read_qrels_jsonl(path: Path) -> tuple[dict[str, dict[str, int]], list[str]]:
    builder = _QrelsBuilder(path)
    for where, obj in _jsonl(path):
        builder.add(
            _as_id(_get(obj, "q_id", where), "q_id", where),
            _as_id(_get(obj, "p_id", where), "p_id", where),
            _as_grade(_get(obj, "score", where), "score", where),
        )
    return builder.result()


_TREC_NO_HEADER = "TREC qrels have no header line"
# BEIR's header (qrels/test.tsv), compared by name: a first line is a header because it says
# so, never because it fails to parse, which would silently drop the first judgement of a file
# written without one. "_" for "-" and any case are accepted.
_TSV_HEADER = ("query-id", "corpus-id", "score")
_TSV_HEADER_HINT = "the only header line recognised is BEIR's 'query-id corpus-id score'"


def _first_line_hint(err: DataError, first: bool, hint: str) -> DataError:
    # A first line that is neither data nor a known header is most likely an unknown header.
    return DataError(f"{err} ({hint})") if first else err


def _read_qrels_trec(path: Path) -> tuple[dict[str, dict[str, int]], list[str]]:
    """TREC qrels: ``qid iteration docid grade``, any whitespace between columns, no header."""
    builder = _QrelsBuilder(path)
    for i, (number, line) in enumerate(_lines(path)):
        where = f"{path} line {number}"
        cols = line.split()
        try:
            if len(cols) != 4:
                raise DataError(f"{where}: expected 4 columns 'qid 0 docid grade', got {len(cols)}")
            builder.add(
                _checked_id(cols[0], "qid", where),
                _checked_id(cols[2], "docid", where),
                _as_grade(cols[3], "grade", where),
            )
        except DataError as err:
            raise _first_line_hint(err, i == 0, _TREC_NO_HEADER) from None
    return builder.result()


def _is_tsv_header(cols: list[str]) -> bool:
    return tuple(c.lower().replace("_", "-") for c in cols) == _TSV_HEADER


def _read_qrels_tsv(path: Path) -> tuple[dict[str, dict[str, int]], list[str]]:
    """BEIR qrels: ``query-id<TAB>corpus-id<TAB>score``, after BEIR's header line if any."""
    builder = _QrelsBuilder(path)
    for i, (number, line) in enumerate(_lines(path)):
        where = f"{path} line {number}"
        cols = [c.strip() for c in line.split("\t")]
        if i == 0 and _is_tsv_header(cols):
            continue  # only the first line: a header further down is an error
        try:
            _add_tsv_row(builder, cols, where)
        except DataError as err:
            raise _first_line_hint(err, i == 0, _TSV_HEADER_HINT) from None
    return builder.result()


def _add_tsv_row(builder: _QrelsBuilder, cols: list[str], where: str) -> None:
    if len(cols) != 3:
        raise DataError(
            f"{where}: expected 3 tab-separated columns 'query-id corpus-id score', got {len(cols)}"
        )
    if not cols[0] or not cols[1]:
        key = "query-id" if not cols[0] else "corpus-id"
        raise DataError(f"{where}: field {key!r}: expected a non-empty id")
    builder.add(
        _checked_id(cols[0], "query-id", where),
        _checked_id(cols[1], "corpus-id", where),
        _as_grade(cols[2], "score", where),
    )


def read_qrels(path: Path | str) -> tuple[dict[str, dict[str, int]], list[str]]:
    """Qrels from R2MED ``.jsonl``, BEIR ``.tsv`` (BEIR's header line optional) or TREC (any
    other name, no header), with their notes. A file holding no judgement (empty, blank, or a
    header alone) raises DataError naming it: scored, it would make every run worth 0."""
    path = Path(path)
    if path.suffix == ".jsonl":
        qrels, notes = _read_qrels_jsonl(path)
    elif path.suffix == ".tsv":
        qrels, notes = _read_qrels_tsv(path)
    else:
        qrels, notes = _read_qrels_trec(path)
    if not qrels:
        raise DataError(f"{path} holds no relevance judgements (an empty qrels file)")
    return qrels, notes


# --- layouts -----------------------------------------------------------------------------------


def _find_layout(path: Path) -> tuple[str, Path, Path, Path]:
    """Return (layout, corpus file, queries file, qrels file), or raise naming what is missing."""
    corpus = path / "corpus.jsonl"
    if (path / "query.jsonl").is_file():
        qrels = next((p for p in (path / "qrels.jsonl", path / "qrels.txt") if p.is_file()), None)
        missing = [] if corpus.is_file() else ["corpus.jsonl"]
        if qrels is None:
            missing.append("qrels.jsonl (or qrels.txt)")
        if missing:
            raise DataError(
                f"{path}: R2MED layout (query.jsonl found) but missing {', '.join(missing)}"
            )
        return "r2med", corpus, path / "query.jsonl", qrels
    if (path / "queries.jsonl").is_file():
        qrels = path / "qrels" / "test.tsv"
        missing = [] if corpus.is_file() else ["corpus.jsonl"]
        if not qrels.is_file():
            others = sorted(p.name for p in (path / "qrels").glob("*.tsv"))
            found = (
                f" (qrels/ has: {', '.join(others)}; only the test split is used)" if others else ""
            )
            missing.append("qrels/test.tsv" + found)
        if missing:
            raise DataError(
                f"{path}: BEIR layout (queries.jsonl found) but missing {', '.join(missing)}"
            )
        return "beir", corpus, path / "queries.jsonl", qrels
    raise DataError(f"{path}: no dataset files found; {_EXPECTED_LAYOUTS}")


def _cross_check(task: Task, qrels_name: str) -> None:
    """Reject unusable tasks; turn survivable inconsistencies into notes."""
    if not task.corpus:
        raise DataError(f"{task.path}: corpus.jsonl holds no documents")
    if not task.queries:
        raise DataError(f"{task.path}: the query file holds no queries")
    if not task.qrels:
        raise DataError(f"{task.path}: {qrels_name} holds no relevance judgements")

    empty_docs = sum(1 for text in task.corpus.values() if not text.strip())
    if empty_docs:
        task.notes.append(f"corpus.jsonl: {empty_docs} documents have empty text")
    empty_queries = [qid for qid, text in task.queries.items() if not text.strip()]
    if empty_queries:
        task.notes.append(
            f"{len(empty_queries)} queries have empty text ({_examples(empty_queries)})"
        )

    unknown_queries = [qid for qid in task.qrels if qid not in task.queries]
    if unknown_queries:
        pairs = sum(len(task.qrels[qid]) for qid in unknown_queries)
        for qid in unknown_queries:
            del task.qrels[qid]
        task.notes.append(
            f"{qrels_name}: {pairs} judgements name {len(unknown_queries)} queries missing from "
            f"the query file ({_examples(unknown_queries)}); dropped, as they have no text to run"
        )

    unknown_docs = {doc for docs in task.qrels.values() for doc in docs if doc not in task.corpus}
    if unknown_docs:
        pairs = sum(1 for docs in task.qrels.values() for doc in docs if doc in unknown_docs)
        task.notes.append(
            f"{qrels_name}: {pairs} judgements name {len(unknown_docs)} docs missing from "
            f"corpus.jsonl ({_examples(unknown_docs)}); kept, so they still count against recall"
        )

    unjudged = [qid for qid in task.queries if qid not in task.qrels]
    if unjudged:
        task.notes.append(
            f"{len(unjudged)} of {len(task.queries)} queries have no qrels "
            f"({_examples(unjudged)}); they are kept but cannot be scored"
        )


def load_folder(path: Path | str, name: str | None = None) -> Task:
    """Load a task from a folder in R2MED or BEIR layout (detected from the file names)."""
    path = Path(path).expanduser()
    if not path.is_dir():
        raise DataError(f"{path}: not a folder; {_EXPECTED_LAYOUTS}")
    layout, corpus_file, queries_file, qrels_file = _find_layout(path)

    if layout == "r2med":
        corpus, notes = _read_texts(corpus_file, "id", "doc")
        queries, query_notes = _read_texts(queries_file, "id", "query")
    else:
        corpus, notes = _read_texts(corpus_file, "_id", "doc", title_key="title")
        queries, query_notes = _read_texts(queries_file, "_id", "query")
    qrels, qrels_notes = read_qrels(qrels_file)

    task = Task(
        name=name or path.resolve().name,
        corpus=corpus,
        queries=queries,
        qrels=qrels,
        path=path,
        notes=notes + query_notes + qrels_notes,
    )
    _cross_check(task, qrels_file.relative_to(path).as_posix())
    for note in task.notes:
        log.warning("%s: %s", task.name, note)
    return task


# --- R2MED from the hub ------------------------------------------------------------------------


def r2med_task_name(spec: str) -> str | None:
    """R2MED's spelling of a task name given in any case (``R2MED/`` prefix allowed), or None
    for a name outside R2MED. The one rule every part (loader, prompts, instructions) uses."""
    key = spec.strip().lower().removeprefix("r2med/")
    return next((t for t in R2MED_TASKS if t.lower() == key), None)


def _unknown_task(spec: str) -> DataError:
    return DataError(
        f"{spec!r} is neither a folder nor an R2MED task; valid names: "
        f"{', '.join(R2MED_TASKS)} (or 'r2med' for all), or 'demo'"
    )


def fetch_r2med(task: str, cache_dir: Path) -> Path:
    """Download (or find in the cache) one R2MED task at its pinned revision; return its folder."""
    canonical = r2med_task_name(task)
    if canonical is None:
        raise _unknown_task(task)
    cached = _hub_copy(canonical, cache_dir)
    if cached is not None:  # no network: a pinned revision's files never change
        return cached
    why = hub_unreachable()
    if why is not None:
        raise _download_error(canonical, f"not in the hub cache {Path(cache_dir) / 'hf'}; {why}")
    # Imported here so that loading local folders never pays for huggingface_hub's import.
    from huggingface_hub import hf_hub_download

    folder: Path | None = None
    for filename in R2MED_FILES:
        try:
            local = hf_hub_download(
                f"R2MED/{canonical}",
                filename,
                repo_type="dataset",
                revision=R2MED_REVISIONS[canonical],
                cache_dir=Path(cache_dir) / "hf",
            )
        except Exception as err:  # offline, hub down, auth, missing file: all end the same way
            raise _download_error(canonical, type(err).__name__, filename) from err
        folder = Path(local).parent
    assert folder is not None
    return folder


def _download_error(canonical: str, why: str, filename: str = "") -> DataError:
    what = f"R2MED/{canonical} {filename}".rstrip()
    return DataError(
        f"cannot download {what} ({why}; offline?): "
        f"put {', '.join(R2MED_FILES)} in a folder and pass --dataset <folder>"
    )


def _hub_copy(canonical: str, cache_dir: Path) -> Path | None:
    """The task's folder in the local hub cache at its pinned revision, when it holds every
    file; None otherwise. Reads the cache's layout only: no network."""
    from huggingface_hub import try_to_load_from_cache  # light: the client loads on download

    found = [
        try_to_load_from_cache(
            f"R2MED/{canonical}", filename, cache_dir=Path(cache_dir) / "hf",
            revision=R2MED_REVISIONS[canonical], repo_type="dataset",
        )
        for filename in R2MED_FILES
    ]  # fmt: skip
    if all(isinstance(path, str) for path in found):
        return Path(found[0]).parent
    return None


_PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy")


def hub_unreachable(timeout: float = 5.0) -> str | None:
    """Why the Hugging Face hub cannot be reached now (offline mode, or its host does not
    resolve or answer), else None. Asked before a download: offline, the hub client retries
    each file five times (about 25 s) before it gives up. Behind a proxy the client's own
    error says why, so the host is not probed."""
    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return "HF_HUB_OFFLINE is set"
    if any(os.environ.get(name) for name in _PROXY_VARIABLES):
        return None
    url = urlsplit(constants.ENDPOINT)
    host = url.hostname or ""
    port = url.port or (80 if url.scheme == "http" else 443)
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as err:
        return f"{host} cannot be reached: {err.strerror or type(err).__name__}"
    return None


def load_task(spec: str, cache_dir: Path) -> Task:
    """Load a task from a folder path or, failing that, an R2MED task name or ``demo``
    (case-insensitive)."""
    source = _task_source(spec)
    if isinstance(source, str):
        return load_folder(fetch_r2med(source, cache_dir), name=source)
    return load_folder(source, name="demo" if source == DEMO_DIR else None)


def _task_source(spec: str) -> Path | str:
    """The folder ``spec`` names, or the R2MED task (its canonical name) to fetch."""
    path = Path(spec).expanduser()
    if path.is_dir():
        return path
    if spec.strip().lower() == "demo":
        return DEMO_DIR
    canonical = r2med_task_name(spec)
    if canonical is None:
        if path.exists():
            raise DataError(f"{path}: not a folder; {_EXPECTED_LAYOUTS}")
        raise _unknown_task(spec)
    return canonical


def task_specs(spec: str) -> list[str]:
    """The tasks ``spec`` names one by one: ``r2med`` is all eight, a comma (in a name that is
    not a folder) separates tasks."""
    if spec.strip().lower() == "r2med":
        return list(R2MED_TASKS)
    if "," in spec and not Path(spec).expanduser().is_dir():
        return [one for part in spec.split(",") if part.strip() for one in task_specs(part.strip())]
    return [spec]


def load_tasks(spec: str, cache_dir: Path) -> list[Task]:
    """Like load_task, plus ``r2med`` for all eight tasks and comma-separated lists."""
    return [load_task(one, cache_dir) for one in task_specs(spec)]


def check_tasks(spec: str, cache_dir: Path) -> None:
    """Refuse at once, reading no task file, a ``spec`` `load_tasks` would refuse for want of
    a folder, a name or the hub: each R2MED task it names is in the hub cache or the hub can
    be reached. A command asks this before its heavy imports, so the line comes in a moment."""
    unreachable: str | None = None
    for one in task_specs(spec):
        source = _task_source(one)
        if isinstance(source, str) and _hub_copy(source, cache_dir) is None:
            unreachable = unreachable or hub_unreachable()
            if unreachable:
                hub = Path(cache_dir) / "hf"
                raise _download_error(source, f"not in the hub cache {hub}; {unreachable}")
