"""Which layout a folder holds, and loading tasks: a folder, an R2MED task name, ``demo``,
``r2med`` or a comma-separated list; the qrels reader chosen by file name.

Two on-disk layouts are understood:

* R2MED: ``corpus.jsonl`` {"id", "text"}, ``query.jsonl`` {"id", "text", ...} and
  ``qrels.jsonl`` {"q_id", "p_id", "score"}, or a TREC ``qrels.txt`` (``qid 0 docid grade``).
* BEIR: ``corpus.jsonl`` {"_id", "title", "text"}, ``queries.jsonl`` {"_id", "text"} and
  ``qrels/test.tsv`` (tab separated, after BEIR's ``query-id corpus-id score`` header line,
  which is recognised by those names and optional; TREC qrels have no header).

Decisions worth knowing:

* Qrels naming unknown docs are kept: those docs still count as relevant, so they cap recall
  exactly as they do in the original benchmark. Qrels naming unknown queries are dropped, since
  such a query has no text to run.
* Problems that leave a usable task (duplicates, empty texts, dangling qrels, queries without
  qrels, negative grades) become ``Task.notes`` and log warnings; anything that makes the data
  unusable or ambiguous raises ``DataError`` with a one-line message naming the file, line and
  field.
"""

import logging
from pathlib import Path

from eval.datasets.beir import read_qrels_tsv
from eval.datasets.checks import DataError, id_examples, read_texts
from eval.datasets.r2med import (
    download_error,
    fetch_r2med,
    hub_copy,
    hub_unreachable,
    read_qrels_jsonl,
    read_qrels_trec,
    unknown_task,
)
from eval.datasets.task import Task
from eval.datasets.vocabulary import DEMO_DIR, R2MED_TASKS, r2med_task_name

log = logging.getLogger(__package__)  # "eval.datasets", the name its warnings always had

_EXPECTED_LAYOUTS = (
    "expected R2MED files (corpus.jsonl, query.jsonl, qrels.jsonl or qrels.txt) "
    "or BEIR files (corpus.jsonl, queries.jsonl, qrels/test.tsv)"
)


def read_qrels(path: Path | str) -> tuple[dict[str, dict[str, int]], list[str]]:
    """Qrels from R2MED ``.jsonl``, BEIR ``.tsv`` (BEIR's header line optional) or TREC (any
    other name, no header), with their notes. A file holding no judgement (empty, blank, or a
    header alone) raises DataError naming it: scored, it would make every run worth 0."""
    path = Path(path)
    if path.suffix == ".jsonl":
        qrels, notes = read_qrels_jsonl(path)
    elif path.suffix == ".tsv":
        qrels, notes = read_qrels_tsv(path)
    else:
        qrels, notes = read_qrels_trec(path)
    if not qrels:
        raise DataError(f"{path} holds no relevance judgements (an empty qrels file)")
    return qrels, notes


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
            f"{len(empty_queries)} queries have empty text ({id_examples(empty_queries)})"
        )

    unknown_queries = [qid for qid in task.qrels if qid not in task.queries]
    if unknown_queries:
        pairs = sum(len(task.qrels[qid]) for qid in unknown_queries)
        for qid in unknown_queries:
            del task.qrels[qid]
        task.notes.append(
            f"{qrels_name}: {pairs} judgements name {len(unknown_queries)} queries missing from "
            f"the query file ({id_examples(unknown_queries)}); dropped, as they have no text to run"
        )

    unknown_docs = {doc for docs in task.qrels.values() for doc in docs if doc not in task.corpus}
    if unknown_docs:
        pairs = sum(1 for docs in task.qrels.values() for doc in docs if doc in unknown_docs)
        task.notes.append(
            f"{qrels_name}: {pairs} judgements name {len(unknown_docs)} docs missing from "
            f"corpus.jsonl ({id_examples(unknown_docs)}); kept, so they still count against recall"
        )

    unjudged = [qid for qid in task.queries if qid not in task.qrels]
    if unjudged:
        task.notes.append(
            f"{len(unjudged)} of {len(task.queries)} queries have no qrels "
            f"({id_examples(unjudged)}); they are kept but cannot be scored"
        )


def load_folder(path: Path | str, name: str | None = None) -> Task:
    """Load a task from a folder in R2MED or BEIR layout (detected from the file names)."""
    path = Path(path).expanduser()
    if not path.is_dir():
        raise DataError(f"{path}: not a folder; {_EXPECTED_LAYOUTS}")
    layout, corpus_file, queries_file, qrels_file = _find_layout(path)

    if layout == "r2med":
        corpus, notes = read_texts(corpus_file, "id", "doc")
        queries, query_notes = read_texts(queries_file, "id", "query")
    else:
        corpus, notes = read_texts(corpus_file, "_id", "doc", title_key="title")
        queries, query_notes = read_texts(queries_file, "_id", "query")
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
        raise unknown_task(spec)
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
        if isinstance(source, str) and hub_copy(source, cache_dir) is None:
            unreachable = unreachable or hub_unreachable()
            if unreachable:
                hub = Path(cache_dir) / "hf"
                raise download_error(source, f"not in the hub cache {hub}; {unreachable}")
