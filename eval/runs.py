"""The layout of a run folder, and the one module that reads and writes it.

::

    <run>/config.json                the configuration the folder is bound to
    <run>/metrics.json               {task folder: that task's summary}, in run order
    <run>/run.json                   how the run is shown beside others (see below)
    <run>/leaderboard.md             R2MED's task order, x100
    <run>/<task>/task.json           the data the task was run on (name, path, fingerprint)
    <run>/<task>/queries.jsonl       one record per answered query, appended as it finishes
    <run>/<task>/run.trec            the agent's ranking (top depth)
    <run>/<task>/per_query.jsonl     its per-query metrics
    <run>/<task>/results.json        R2MED's results layout
    <run>/<task>/metrics.json        the task's summary, written last: it marks the task done
    <run>/<task>/rerank-<i>-<kind>/  a later stage: its own queries.jsonl, run.trec and
                                     per_query.jsonl, made from the stage before it

A task whose ranking went through later stages says so in its metrics.json:
``"stages": {"agent" or stage folder: metrics}`` and ``"final_stage": <its folder name>``,
and its ``"metrics"`` are the final stage's. Readers find the files to score through
`final_stage_dir`, so a table shows the ranking the run ended with.

``run.json`` is written with ``metrics.json`` when a run ends: ``{"label": "hyde bm25q
qwen2.5-coder-0.5b p:3fa2c1e", "llm_free": false}``. The run's writer makes the label from
its typed config, so that a table of runs (`eval.compare`) shows it without reading a
config's shape; ``llm_free`` says that no LLM had a part in the ranking (none was called and
no generation replayed), which makes the run a candidate for the charts' no-LLM baseline. A
folder without it (written before run.json existed, or a run that has not ended) is shown
by its folder's name, and counts as LLM-free when its records show no LLM call.

The runner, `eval.compare`, `agents.trace` and `agents.sweep` all read and write through
here (every write atomic and durable, see `eval.files`), which is why it sits below
`agents` and imports nothing heavy; `RunQrels` finds the judgements of a run's tasks.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from eval.files import describe_os_error, safe_name, write_json, write_text

log = logging.getLogger(__name__)

CONFIG_FILE = "config.json"
RUN_METRICS_FILE = "metrics.json"
RUN_INFO_FILE = "run.json"
LEADERBOARD_FILE = "leaderboard.md"
LOCK_FILE = ".lock"
TASK_FILE = "task.json"
RECORDS_FILE = "queries.jsonl"
RUN_TREC_FILE = "run.trec"
PER_QUERY_FILE = "per_query.jsonl"
RESULTS_FILE = "results.json"
TASK_METRICS_FILE = "metrics.json"

AGENT_STAGE = "agent"  # the name the first stage goes by in a task's "stages"
_STAGE_DIR = re.compile(r"rerank-(\d+)-(.+)")
# Any of these makes a sub-folder a task folder (a task can stop after writing any of them).
_TASK_MARKERS = (TASK_FILE, RECORDS_FILE, RUN_TREC_FILE, PER_QUERY_FILE, TASK_METRICS_FILE)


# ---- records (queries.jsonl) --------------------------------------------------------------


def records_path(stage_dir: Path) -> Path:
    """The ``queries.jsonl`` of a task folder or of one of its stage folders."""
    return Path(stage_dir) / RECORDS_FILE


# Each text of a record is stored once. A string of at least SHARED_MIN characters that an
# earlier one of the same record equals is written {"$dup": i}, one that extends an earlier one
# (a trajectory growing turn by turn) {"$ext": i, "add": rest}, where i counts the record's
# long strings in the order json.dumps writes them; readers get the texts back.
SHARED_MIN = 200


def pack_record(record: Mapping[str, Any]) -> Any:
    """``record`` with its repeated long texts replaced by references (see `SHARED_MIN`)."""
    seen: list[str] = []
    index: dict[str, int] = {}

    def pack(value: Any) -> Any:
        if isinstance(value, str) and len(value) >= SHARED_MIN:
            if value in index:
                return {"$dup": index[value]}
            base = max(
                (i for i, s in enumerate(seen) if value.startswith(s)),
                key=lambda i: len(seen[i]),
                default=None,
            )
            index[value] = len(seen)
            seen.append(value)
            if base is not None:
                return {"$ext": base, "add": value[len(seen[base]) :]}
            return value
        if isinstance(value, Mapping):
            return {k: pack(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [pack(v) for v in value]
        return value

    return pack(record)


def unpack_record(record: Any) -> Any:
    """The record `pack_record` packed, its texts whole again."""
    seen: list[str] = []

    def unpack(value: Any) -> Any:
        if isinstance(value, str):
            if len(value) >= SHARED_MIN:
                seen.append(value)
            return value
        if isinstance(value, dict):
            if value.keys() == {"$dup"}:
                return seen[value["$dup"]]
            if value.keys() == {"$ext", "add"}:
                text = seen[value["$ext"]] + value["add"]
                seen.append(text)
                return text
            return {k: unpack(v) for k, v in value.items()}
        if isinstance(value, list):
            return [unpack(v) for v in value]
        return value

    return unpack(record)


def iter_records(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """(query id, record) of each line of a ``queries.jsonl``, in file order, streamed (traces
    can be large); a torn line is skipped. A later line of the same query replaces an earlier."""
    if not path.exists():
        return
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                record = unpack_record(json.loads(line))
            except (json.JSONDecodeError, IndexError, TypeError):
                continue  # a line cut short by a crash: that query simply runs again
            if isinstance(record, dict) and isinstance(record.get("query_id"), str):
                yield record["query_id"], record


def read_records(path: Path, fields: tuple[str, ...] | None = None) -> dict[str, dict[str, Any]]:
    """The last record of each query in a ``queries.jsonl``; a torn last line is ignored.

    ``fields`` keeps only those keys of each record (traces can be large).
    """
    records: dict[str, dict[str, Any]] = {}
    for record_id, record in iter_records(path):
        if fields is not None:
            record = {k: record.get(k) for k in fields}
        records[record_id] = record
    return records


def record_line(record: Mapping[str, Any]) -> str:
    """One record as the line appended to ``queries.jsonl`` (the caller flushes and fsyncs),
    each of its texts stored once."""
    return json.dumps(pack_record(record), ensure_ascii=False) + "\n"


# ---- the run: config, summary, leaderboard --------------------------------------------------


class NotARunFolder(FileNotFoundError):
    """A folder without ``config.json``; its message is the one line every command gives."""


def read_config(run_dir: Path) -> dict[str, Any]:
    """The run's ``config.json``.

    NotARunFolder (a FileNotFoundError) when there is none (not a run folder, or a new one);
    a one-line ValueError naming the file when it cannot be read or is not a JSON object.
    """
    try:
        return _read_object(Path(run_dir) / CONFIG_FILE)
    except FileNotFoundError:
        raise NotARunFolder(f"{run_dir}: not a run folder (no {CONFIG_FILE})") from None


def write_config(run_dir: Path, config: Mapping[str, Any]) -> None:
    write_json(Path(run_dir) / CONFIG_FILE, dict(config))


def read_run_summary(run_dir: Path) -> dict[str, Any] | None:
    """The run's ``metrics.json`` ({task folder: summary}); None when absent or damaged."""
    return _read_derived(Path(run_dir) / RUN_METRICS_FILE)


def write_run_summary(
    run_dir: Path,
    by_task: Mapping[str, Mapping[str, Any]],
    label: str | None = None,
    llm_free: bool | None = None,
) -> None:
    """Write the run's ``metrics.json`` and, given a ``label``, its ``run.json``."""
    if label is not None:
        info: dict[str, Any] = {"label": label}
        if llm_free is not None:
            info["llm_free"] = llm_free
        write_json(Path(run_dir) / RUN_INFO_FILE, info)
    write_json(Path(run_dir) / RUN_METRICS_FILE, dict(by_task))


def read_run_info(run_dir: Path) -> dict[str, Any] | None:
    """The run's ``run.json`` (``label``, ``llm_free``); None when absent or damaged (it is
    made from config.json, which stays)."""
    return _read_derived(Path(run_dir) / RUN_INFO_FILE, "config.json")


def write_leaderboard(run_dir: Path, markdown: str) -> None:
    write_text(Path(run_dir) / LEADERBOARD_FILE, markdown)


def task_dirs(run_dir: Path) -> list[Path]:
    """The run's task folders: in the order its metrics.json lists them, then the rest sorted.

    A task folder is a sub-folder holding any file a task writes; others are ignored.
    """
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    found = {
        p.name: p
        for p in run_dir.iterdir()
        if p.is_dir() and not p.name.startswith(".") and _is_task_dir(p)
    }
    listed = [found.pop(name) for name in read_run_summary(run_dir) or {} if name in found]
    return listed + [found[name] for name in sorted(found)]


def _is_task_dir(path: Path) -> bool:
    return any((path / name).exists() for name in _TASK_MARKERS)


# ---- one task: task.json, metrics.json, results.json ----------------------------------------


def read_task_info(task_dir: Path) -> dict[str, Any] | None:
    """``task.json`` (which data the task was run on); None when absent.

    A damaged one raises a one-line ValueError naming it: without it nobody can tell whether
    the saved records answer the data given now, so it is not silently ignored.
    """
    try:
        return _read_object(Path(task_dir) / TASK_FILE)
    except FileNotFoundError:
        return None


def write_task_info(task_dir: Path, info: Mapping[str, Any]) -> None:
    write_json(Path(task_dir) / TASK_FILE, dict(info))


def read_task_summary(task_dir: Path) -> dict[str, Any] | None:
    """The task's ``metrics.json``; None when absent or damaged (it is derived, so the
    runner recomputes it from the saved records)."""
    return _read_derived(Path(task_dir) / TASK_METRICS_FILE)


def write_task_summary(task_dir: Path, summary: Mapping[str, Any]) -> None:
    """Write the task's summary; written last, with no failures it marks the task done."""
    write_json(Path(task_dir) / TASK_METRICS_FILE, dict(summary))


def results_path(task_dir: Path) -> Path:
    """Where the task's R2MED-layout ``results.json`` goes (`eval.report.write_results_json`)."""
    return Path(task_dir) / RESULTS_FILE


# ---- stages: run.trec and per_query.jsonl ---------------------------------------------------


def stage_dir_name(index: int, kind: str) -> str:
    """The folder of the ``index``-th rerank stage (from 1) of ``kind``: "rerank-1-llm"."""
    if index < 1:
        raise ValueError(f"stage index must be at least 1, got {index}")
    return f"rerank-{index}-{safe_name(kind)}"


def stage_dirs(task_dir: Path) -> list[Path]:
    """The task's rerank stage folders present on disk, in stage order."""
    task_dir = Path(task_dir)
    if not task_dir.is_dir():
        return []
    stages = [(_stage_index(p.name), p.name, p) for p in task_dir.iterdir() if p.is_dir()]
    return [p for index, _, p in sorted(s for s in stages if s[0] is not None)]


def stage_chain(task_dir: Path) -> list[Path]:
    """The task folder (the agent's stage) and each later stage up to the final one, in order.

    The final stage is the one the task's metrics.json names. A task without that file has
    not finished, so every stage present counts; one whose metrics.json names no stage
    ended with the agent's ranking. ValueError when it names something that is not a stage
    folder of this task (a path there would lead reads outside the run).
    """
    task_dir = Path(task_dir)
    stages = stage_dirs(task_dir)
    summary = read_task_summary(task_dir)
    if summary is None:
        return [task_dir, *stages]
    final = summary.get("final_stage", AGENT_STAGE)
    if final == AGENT_STAGE:
        return [task_dir]
    index = _stage_index(final) if isinstance(final, str) else None
    if index is None:
        raise ValueError(
            f"{task_dir / TASK_METRICS_FILE}: final_stage {final!r} is not a stage folder "
            f"({AGENT_STAGE!r} or rerank-<i>-<kind>)"
        )
    earlier = [p for p in stages if (_stage_index(p.name) or 0) < index]
    return [task_dir, *earlier, task_dir / final]


def final_stage_dir(task_dir: Path) -> Path:
    """Where the task's final ranking is: the task folder itself when it has no later stage."""
    return stage_chain(task_dir)[-1]


def _stage_index(name: str) -> int | None:
    match = _STAGE_DIR.fullmatch(name)
    return int(match.group(1)) if match else None


def run_trec_path(stage_dir: Path) -> Path:
    """The ``run.trec`` of a task folder or stage folder (`eval.trec` reads and writes it)."""
    return Path(stage_dir) / RUN_TREC_FILE


def per_query_path(stage_dir: Path) -> Path:
    return Path(stage_dir) / PER_QUERY_FILE


def read_per_query(stage_dir: Path) -> dict[str, dict[str, float]]:
    """``{query id: {metric: value}}`` from a ``per_query.jsonl``; {} when there is none.

    A bad line raises a one-line ValueError naming the file and line: these are the scores
    tables are made of, so a damaged file is reported rather than guessed around.
    """
    path = per_query_path(stage_dir)
    if not path.is_file():
        return {}
    rows: dict[str, dict[str, float]] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            query_id = str(row.pop("query_id"))
        except (json.JSONDecodeError, AttributeError, KeyError, TypeError):
            raise ValueError(f"{path}, line {number}: not a per-query row") from None
        rows[query_id] = row
    return rows


def per_query_text(per_query: Mapping[str, Mapping[str, float]]) -> str:
    """``per_query.jsonl`` content: ``{"query_id": ..., <metric>: value, ...}`` per line,
    unrounded so the values can be re-averaged and tested for significance."""
    return "".join(json.dumps({"query_id": q, **v}) + "\n" for q, v in per_query.items())


def write_per_query(stage_dir: Path, per_query: Mapping[str, Mapping[str, float]]) -> None:
    """Write a stage's per-query metrics (e.g. ``Evaluation.per_query``)."""
    write_text(per_query_path(stage_dir), per_query_text(per_query))


# ---- qrels of a run's dataset ---------------------------------------------------------------


class QrelsError(ValueError):
    """The qrels of a run's task cannot be had; the message is one line naming run and dataset."""


class RunQrels:
    """Relevance judgements of runs' tasks, ``{query id: {doc id: grade}}``, by the dataset
    each run's config.json names (or ``spec`` for every run), loaded on first use and kept:
    loading means reading whole datasets, corpus included, so it is done once per dataset.

    `eval.compare` scores with these and its report.html (`eval.compare.html`) marks
    documents relevant with them, so that a mark and a score always come from the same
    judgements.
    """

    def __init__(self, spec: str | None = None, cache_dir: Path | None = None) -> None:
        self.spec = spec
        self.cache_dir = cache_dir
        self._loaded: dict[str, dict[str, dict[str, dict[str, int]]]] = {}

    def get(
        self, run_dir: Path, task: str, config: Mapping[str, Any] | None = None
    ) -> dict[str, dict[str, int]]:
        """The qrels of ``task`` for the run in ``run_dir`` (``config``: its config.json, when
        already read). QrelsError when the dataset is unnamed, cannot be loaded or lacks it."""
        run_dir = Path(run_dir)
        spec = self.spec
        if spec is None:
            if config is None:
                try:
                    config = read_config(run_dir)
                except (NotARunFolder, ValueError) as e:  # one line naming the folder or file
                    raise QrelsError(str(e)) from None
            spec = config.get("dataset")
        if not spec or not isinstance(spec, str):
            raise QrelsError(f"{run_dir}: config.json names no dataset")
        if spec not in self._loaded:
            # Imported here: eval.datasets is heavy and most readers of run folders never need it.
            from eval.datasets import DataError, default_cache_dir, load_tasks

            cache_dir = self.cache_dir if self.cache_dir is not None else default_cache_dir()
            try:
                self._loaded[spec] = {t.name: t.qrels for t in load_tasks(spec, cache_dir)}
            except DataError as e:
                raise QrelsError(f"{run_dir}: cannot load qrels of dataset {spec!r} ({e})") from e
        if task not in self._loaded[spec]:
            raise QrelsError(f"dataset {spec!r} has no task {task!r} (run {run_dir})")
        return self._loaded[spec][task]


def run_qrels(
    run_dir: Path, task: str, cache_dir: Path | None = None, spec: str | None = None
) -> dict[str, dict[str, int]]:
    """The qrels of one task of a run, by its config's dataset (or ``spec``); see `RunQrels`,
    which keeps loaded datasets for several lookups. QrelsError (one line) when unavailable."""
    return RunQrels(spec, cache_dir).get(run_dir, task)


# ---- reading JSON files ---------------------------------------------------------------------


def _read_object(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: damaged, cannot be read ({type(e).__name__})") from None
    except OSError as e:
        raise ValueError(f"{path}: cannot be read ({describe_os_error(e)})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path}: damaged, not a JSON object")
    return value


def _read_derived(path: Path, source: str = "the saved records") -> dict[str, Any] | None:
    try:
        return _read_object(path)
    except FileNotFoundError:
        return None
    except ValueError as e:
        log.warning("%s; ignoring it (it is derived from %s)", e, source)
        return None
