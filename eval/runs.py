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
`TaskFolder.final_stage`, so a table shows the ranking the run ended with.

``run.json`` is written with ``metrics.json`` when a run ends: ``{"label": "hyde bm25q
qwen2.5-coder-0.5b p:3fa2c1e", "llm_free": false}``. The run's writer makes the label from
its typed config, so that a table of runs (`eval.compare`) shows it without reading a
config's shape; ``llm_free`` says that no LLM had a part in the ranking (none was called and
no generation replayed), which makes the run a candidate for the charts' no-LLM baseline. A
folder without it (written before run.json existed, or a run that has not ended) is shown
by its folder's name, and counts as LLM-free when its records show no LLM call.

A `RunFolder` stands for a run's folder, a `TaskFolder` for a task's and a `StageFolder` for
a stage's: each holds a path and names the files in it, and its methods read and write
them. The runner, `eval.compare`, `agents.trace` and `agents.sweep` all go through them
(every write atomic and durable, see `eval.plumbing.files`), which is why this sits below `agents`
and imports nothing heavy. A task's summary is `eval.task_summary.TaskSummary`, a query's
record `eval.records`'s; `RunQrels` finds the judgements of a run's tasks.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eval.json_lines import JsonFileError, decoded, parsed, raw_lines, read_json
from eval.plumbing.files import describe_os_error, safe_name, write_json, write_text
from eval.plumbing.quoting import quoted
from eval.records import iter_records, read_records
from eval.task_summary import AGENT_STAGE, TaskSummary

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

_STAGE_DIR = re.compile(r"rerank-(\d+)-(.+)")
# Any of these makes a sub-folder a task folder (a task can stop after writing any of them).
_TASK_MARKERS = (TASK_FILE, RECORDS_FILE, RUN_TREC_FILE, PER_QUERY_FILE, TASK_METRICS_FILE)


class NotARunFolder(FileNotFoundError):
    """A folder without ``config.json``; its message is the one line every command gives."""


def _file(name: str, what: str) -> property:
    """A folder's path to its file ``name`` (``what`` it holds), as a read-only attribute."""
    return property(lambda folder: folder.path / name, doc=f"Its ``{name}``: {what}.")


@dataclass(frozen=True)
class _Folder:
    """A folder of the layout; any path-like is taken and held as a Path."""

    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    @property
    def name(self) -> str:
        return self.path.name


# ---- one stage: queries.jsonl, run.trec and per_query.jsonl --------------------------------


@dataclass(frozen=True)
class StageFolder(_Folder):
    """The folder of one stage of a task: the task folder itself for the agent's stage, a
    ``rerank-<i>-<kind>`` folder in it for each later one."""

    records_path = _file(RECORDS_FILE, "one record per answered query (`eval.records`)")
    run_trec_path = _file(RUN_TREC_FILE, "its ranking (`eval.trec` reads and writes it)")
    per_query_path = _file(PER_QUERY_FILE, "its per-query metrics")

    def records(self, fields: tuple[str, ...] | None = None) -> dict[str, dict[str, Any]]:
        """The last record of each query (`eval.records.read_records`); {} when none."""
        return read_records(self.records_path, fields)

    def iter_records(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """(query id, record) of each line, streamed (`eval.records.iter_records`)."""
        return iter_records(self.records_path)

    def per_query(self) -> dict[str, dict[str, float]]:
        """``{query id: {metric: value}}`` from its ``per_query.jsonl``; {} when there is none.

        A bad line raises a one-line ValueError naming the file and line: these are the scores
        tables are made of, so a damaged file is reported rather than guessed around.
        """
        path = self.per_query_path
        if not path.is_file():
            return {}
        rows: dict[str, dict[str, float]] = {}
        for number, raw in raw_lines(path):
            line = decoded(path, number, raw)
            if not line.strip():
                continue
            rows.update([_per_query_row(path, number, parsed(path, number, line))])
        return rows

    def write_per_query(self, per_query: Mapping[str, Mapping[str, float]]) -> None:
        """Write the stage's per-query metrics (e.g. ``Evaluation.per_query``)."""
        write_text(self.per_query_path, per_query_text(per_query))


def _per_query_row(path: Path, number: int, row: Any) -> tuple[str, dict[str, float]]:
    """A per_query.jsonl line's (query id, {metric: value}); ValueError naming the field."""
    where = f"{path} line {number}"
    if not isinstance(row, dict):
        raise ValueError(f"{where}: not a per-query row (a JSON object), got {quoted(row)}")
    query_id = row.pop("query_id", None)
    if not isinstance(query_id, str) or not query_id:
        raise ValueError(f"{where}: field 'query_id': expected a query id, got {quoted(query_id)}")
    for metric, value in row.items():
        number_ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not number_ok or not math.isfinite(value):
            raise ValueError(
                f"{where}: field {quoted(metric)}: expected a finite number, got {quoted(value)}"
            )
    return query_id, row


def per_query_text(per_query: Mapping[str, Mapping[str, float]]) -> str:
    """``per_query.jsonl`` content: ``{"query_id": ..., <metric>: value, ...}`` per line,
    unrounded so the values can be re-averaged and tested for significance."""
    return "".join(json.dumps({"query_id": q, **v}) + "\n" for q, v in per_query.items())


def stage_dir_name(index: int, kind: str) -> str:
    """The folder name of the ``index``-th rerank stage (from 1) of ``kind``: "rerank-1-llm".

    A plain function: a plan names its stages (for sampling, caches) before any folder exists.
    """
    if index < 1:
        raise ValueError(f"stage index must be at least 1, got {index}")
    return f"rerank-{index}-{safe_name(kind)}"


def _stage_index(name: str) -> int | None:
    match = _STAGE_DIR.fullmatch(name)
    return int(match.group(1)) if match else None


# ---- one task: task.json, metrics.json, results.json, its stages ---------------------------


@dataclass(frozen=True)
class TaskFolder(StageFolder):
    """A task's folder; it is also its agent's stage (records, run.trec, per_query.jsonl)."""

    info_path = _file(TASK_FILE, "the data the task was run on")
    summary_path = _file(TASK_METRICS_FILE, "its summary (`eval.task_summary.TaskSummary`)")
    results_path = _file(RESULTS_FILE, "R2MED's layout (`eval.report.write_results_json`)")

    def info(self) -> dict[str, Any] | None:
        """``task.json`` (which data the task was run on); None when absent.

        A damaged one raises a one-line ValueError naming it: without it nobody can tell
        whether the saved records answer the data given now, so it is not silently ignored.
        """
        try:
            return _read_object(self.info_path)
        except FileNotFoundError:
            return None

    def write_info(self, info: Mapping[str, Any]) -> None:
        """Write ``task.json``: the data the task ran on and, under ``"binding"``, the part of
        the run's config.json its output depends on (`binding_problem` checks it)."""
        write_json(self.info_path, dict(info))

    def binding_problem(self, config: Mapping[str, Any], config_path: Path) -> str | None:
        """Why this task folder was not made under ``config`` (its run's config.json, at
        ``config_path``), in one line; None when it was, or when its task.json records no
        binding (a folder written before task.json held one).

        Every setting the task's ``task.json`` records under ``"binding"`` must have the
        same value in config.json: a task folder copied in from another run has another.
        """
        info = self.info()
        bound = info.get("binding") if info is not None else None
        if not isinstance(bound, Mapping):
            return None
        made, given = _flat(bound), _flat(config)
        differ = [path for path, value in made.items() if given.get(path, _ABSENT) != value]
        if not differ:
            return None
        shown = ", ".join(
            f"{p} {quoted(made[p], 40)} here, {quoted(given.get(p), 40)} there" for p in differ[:3]
        )
        more = f" and {len(differ) - 3} more" if len(differ) > 3 else ""
        return (
            f"{self.info_path}: this task folder was made under another config than "
            f"{config_path} ({shown}{more}): a task folder from another run?"
        )

    def summary(self) -> TaskSummary | None:
        """The task's ``metrics.json``; None when absent or damaged (it is derived, so the
        runner recomputes it from the saved records)."""
        return _summary(self.summary_path, _read_derived(self.summary_path))

    def write_summary(self, summary: TaskSummary) -> None:
        """Write the task's summary; written last, with no failures it marks the task done."""
        write_json(self.summary_path, summary.to_dict())

    def stage(self, index: int, kind: str) -> StageFolder:
        """The folder of its ``index``-th rerank stage (from 1) of ``kind``."""
        return StageFolder(self.path / stage_dir_name(index, kind))

    def stages(self) -> list[StageFolder]:
        """Its rerank stage folders present on disk, in stage order."""
        if not self.path.is_dir():
            return []
        found = [(_stage_index(p.name), p.name, p) for p in self.path.iterdir() if p.is_dir()]
        return [StageFolder(p) for index, _, p in sorted(s for s in found if s[0] is not None)]

    def stage_chain(self) -> list[StageFolder]:
        """This folder (the agent's stage) and each later stage up to the final one, in order.

        The final stage is the one the task's metrics.json names. A task without that file
        has not finished, so every stage present counts; one whose metrics.json names no
        stage ended with the agent's ranking. ValueError when it names something that is not
        a stage folder of this task (a path there would lead reads outside the run).
        """
        stages = self.stages()
        summary = self.summary()
        if summary is None:
            return [self, *stages]
        final = summary.final_stage
        if final == AGENT_STAGE:
            return [self]
        index = _stage_index(final) if isinstance(final, str) else None
        if index is None:
            raise ValueError(
                f"{self.summary_path}: final_stage {final!r} is not a stage folder "
                f"({AGENT_STAGE!r} or rerank-<i>-<kind>)"
            )
        earlier = [s for s in stages if (_stage_index(s.name) or 0) < index]
        return [self, *earlier, StageFolder(self.path / final)]

    def final_stage(self) -> StageFolder:
        """Where the task's final ranking is: this folder itself when it has no later stage."""
        return self.stage_chain()[-1]


# ---- the run: config, summary, leaderboard, its tasks ---------------------------------------


@dataclass(frozen=True)
class RunFolder(_Folder):
    """A run's folder: its config, summary, label and leaderboard, and its task folders."""

    config_path = _file(CONFIG_FILE, "the configuration the folder is bound to")
    lock_path = _file(LOCK_FILE, "held by the one process running here")

    def config(self) -> dict[str, Any]:
        """The run's ``config.json``.

        NotARunFolder (a FileNotFoundError) when there is none (not a run folder, or a new
        one); a one-line ValueError naming the file when it cannot be read or is not a JSON
        object.
        """
        try:
            return _read_object(self.config_path)
        except FileNotFoundError:
            raise NotARunFolder(f"{self.path}: not a run folder (no {CONFIG_FILE})") from None

    def write_config(self, config: Mapping[str, Any]) -> None:
        write_json(self.config_path, dict(config))

    def summary(self) -> dict[str, TaskSummary] | None:
        """The run's ``metrics.json`` ({task folder: summary}); None when absent or damaged."""
        path = self.path / RUN_METRICS_FILE
        by_task = _read_derived(path)
        if by_task is None:
            return None
        read = {k: _summary(path, v, f"{k}.") for k, v in by_task.items() if isinstance(v, dict)}
        return {k: v for k, v in read.items() if v is not None}

    def write_summary(
        self,
        by_task: Mapping[str, TaskSummary],
        label: str | None = None,
        llm_free: bool | None = None,
    ) -> None:
        """Write the run's ``metrics.json`` and, given a ``label``, its ``run.json``."""
        if label is not None:
            info: dict[str, Any] = {"label": label}
            if llm_free is not None:
                info["llm_free"] = llm_free
            write_json(self.path / RUN_INFO_FILE, info)
        write_json(self.path / RUN_METRICS_FILE, {k: s.to_dict() for k, s in by_task.items()})

    def info(self) -> dict[str, Any] | None:
        """The run's ``run.json`` (``label``, ``llm_free``); None when absent or damaged (it
        is made from config.json, which stays)."""
        return _read_derived(self.path / RUN_INFO_FILE, CONFIG_FILE)

    def write_leaderboard(self, markdown: str) -> None:
        write_text(self.path / LEADERBOARD_FILE, markdown)

    def task(self, folder: str) -> TaskFolder:
        return TaskFolder(self.path / folder)

    def tasks(self) -> list[TaskFolder]:
        """Its task folders: in the order its metrics.json lists them, then the rest sorted.

        A task folder is a sub-folder holding any file a task writes; others are ignored.
        """
        if not self.path.is_dir():
            return []
        found = {
            p.name: TaskFolder(p)
            for p in self.path.iterdir()
            if p.is_dir() and not p.name.startswith(".") and _is_task_dir(p)
        }
        listed = _read_derived(self.path / RUN_METRICS_FILE) or {}
        first = [found.pop(name) for name in listed if name in found]
        return first + [found[name] for name in sorted(found)]

    def qrels(
        self, task: str, cache_dir: Path | None = None, spec: str | None = None
    ) -> dict[str, dict[str, int]]:
        """The qrels of one of its tasks, by its config's dataset (or ``spec``); see
        `RunQrels`, which keeps loaded datasets for several lookups. QrelsError (one line)
        when unavailable."""
        return RunQrels(spec, cache_dir).get(self.path, task)


def _is_task_dir(path: Path) -> bool:
    return any((path / name).exists() for name in _TASK_MARKERS)


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
                    config = RunFolder(run_dir).config()
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


_ABSENT = object()


def _flat(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """JSON data by dotted path (``retriever.bm25.method``); a list or an empty mapping is
    one value."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, Mapping) and value:
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


# ---- reading JSON files ---------------------------------------------------------------------


def _read_object(path: Path) -> dict[str, Any]:
    try:
        value = read_json(path)
    except FileNotFoundError:
        raise
    except JsonFileError as e:
        raise ValueError(f"{e.where}: damaged, {e.problem}") from None
    except OSError as e:
        raise ValueError(f"{path}: cannot be read ({describe_os_error(e)})") from None
    if not isinstance(value, dict):
        raise ValueError(f"{path}: damaged, not a JSON object")
    return value


def _summary(path: Path, values: Any, within: str = "") -> TaskSummary | None:
    """A task's summary from ``path``'s data; None (and a warning naming the field) when a
    value is not of its type: the file is derived, so it is recomputed, never guessed from."""
    if values is None:
        return None
    try:
        return TaskSummary.from_dict(values)
    except ValueError as e:
        log.warning("%s: %s%s; ignoring it (it is derived from the saved records)", path, within, e)
        return None


def _read_derived(path: Path, source: str = "the saved records") -> dict[str, Any] | None:
    try:
        return _read_object(path)
    except FileNotFoundError:
        return None
    except ValueError as e:
        log.warning("%s; ignoring it (it is derived from %s)", e, source)
        return None
