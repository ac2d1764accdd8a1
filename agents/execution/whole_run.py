"""A run as a library call: `run_dataset(config) -> RunResult`.

    dataset -> tasks -> first stage (an agent per query) -> rerank stages -> evaluation

Each arrow is data on disk in the run folder: the agent's records (`<task>/queries.jsonl`)
and ranked lists (`<task>/run.trec`), then each rerank stage's in `<task>/rerank-<i>-<kind>/`,
each scored on its own; the task's `metrics.json` holds every stage's metrics and the final
one's. A run folder is bound to its configuration and each task folder to its data, so a
resumed run answers only what is missing and never reports a stale number. `python -m
agents.run` and `agents.sweep` are thin layers over `run`.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from agents.config.binding import binding, differences
from agents.config.naming import llm_free, run_label
from agents.config.registry import STAGES
from agents.config.run_config import RunConfig, default_run_name
from agents.config.serialise import from_dict, to_dict
from agents.execution.loop import run_sync
from agents.execution.plan import Plan, RunError, TaskPlan, describe_sampling, prepare
from agents.execution.run_file_stage import RunFileLists, first_stage_records
from agents.execution.task_queries import ranking_of, run_queries
from agents.rerank import StageGraph
from agents.shared.generations import describe as describe_generations
from eval import runs
from eval.datasets import Task, task_fingerprint
from eval.evaluate import Evaluation, evaluate_run, pad_run, top_k
from eval.metrics import HEADLINE
from eval.plumbing.files import safe_name, writable_folder, write_text
from eval.records import read_records, record_line
from eval.report import leaderboard_markdown, results_json, write_results_json
from eval.runs import RunFolder, StageFolder, TaskFolder
from eval.task_summary import TaskSummary
from eval.trec import write_run
from eval.usage import Usage
from retrievers.base import Retriever, SearchRequest
from retrievers.search import build_retriever

log = logging.getLogger("agents.execution.whole_run")


@dataclass
class TaskResult:
    name: str  # the task's own name
    folder: str  # its folder in the run (unique even when two tasks share a name)
    summary: TaskSummary  # what metrics.json holds: metrics, stages, usage, failures, ...
    records: dict[str, dict[str, Any]] = field(default_factory=dict)  # the final stage's

    @property
    def metrics(self) -> dict[str, float]:
        return self.summary.metrics


@dataclass
class RunResult:
    run_dir: Path
    config: RunConfig
    tasks: dict[str, TaskResult]  # by task folder
    seconds: float

    @property
    def failed(self) -> int:
        return sum(t.summary.failed for t in self.tasks.values())

    def leaderboard(self) -> str:
        """The run's table, as its leaderboard.md holds it (`leaderboard`)."""
        return leaderboard(self.run_dir.name, self.tasks)


def leaderboard(run_name: str, tasks: Mapping[str, TaskResult]) -> str:
    """A run's table (leaderboard.md, and what ``agents.run`` prints): the headline metric
    of each task folder in R2MED's order, x100."""
    scores = {folder: task.metrics[HEADLINE] for folder, task in tasks.items()}
    return leaderboard_markdown({run_name: scores}, tasks=list(tasks))


def run_dataset(
    config: RunConfig,
    *,
    overwrite: bool = False,
    progress: bool = True,
    on_task: Callable[[TaskResult], None] | None = None,
    ray: str | None = None,
) -> RunResult:
    """Run `config` to the end (resuming its run folder) and return every task's results.

    Refusals raise `RunError`, `eval.datasets.DataError`, `prompts.PromptError` or
    `eval.plumbing.files.FolderError` (all ValueErrors with one-line messages) before any model is
    called; a missing or rejected API key raises `agents.llm.LLMAuthError` after keeping every
    finished query. `on_task` is called as each task finishes. ``ray`` (a cluster's address,
    or auto) spreads each task's queries over the cluster's workers
    (agents.execution.cluster.queries).
    """
    return run_sync(arun(config, overwrite=overwrite, progress=progress, on_task=on_task, ray=ray))


async def arun(
    config: RunConfig,
    *,
    overwrite: bool = False,
    progress: bool = True,
    on_task: Callable[[TaskResult], None] | None = None,
    ray: str | None = None,
) -> RunResult:
    started = time.perf_counter()
    plan = prepare(config)
    warn_unsent(plan)
    if ray is not None:
        from agents.execution.cluster.queries import start

        plan.cluster = start(ray, plan.config, plan.cache_dir, agent_graph)
    return await _arun(plan, overwrite, progress, on_task, started)


def warn_unsent(plan: Plan) -> None:
    """Say, once per node, what sampling was asked for and is not sent."""
    for name, entry in plan.config.recorded.sampling.items():
        if entry["not_sent"]:
            log.warning("%s on %s (preset %s): %s", name, entry["model"], entry["preset"],
                        describe_sampling(entry))  # fmt: skip


async def _arun(
    plan: Plan,
    overwrite: bool,
    progress: bool,
    on_task: Callable[[TaskResult], None] | None,
    started: float,
) -> RunResult:
    config, run_dir = plan.config, plan.run_dir
    # last, so that a refused input leaves no runs folder behind
    writable_folder(config.runs_dir, "--runs-dir")
    lock = lock_run_dir(run_dir)
    try:
        fingerprints = [task_fingerprint(tp.task) for tp in plan.tasks]
        open_run_dir(run_dir, config, overwrite)
        for tp, fingerprint in zip(plan.tasks, fingerprints, strict=True):
            try:
                check_task_data(run_dir / tp.folder, tp.task, fingerprint)
                # a task folder copied in from another run: its records answer another config
                made_under = TaskFolder(run_dir / tp.folder).binding_problem
                if problem := made_under(to_dict(config), RunFolder(run_dir).config_path):
                    raise RunError(f"{problem}; pass --overwrite to redo it")
            except RunError:
                if not overwrite:
                    raise
                shutil.rmtree(run_dir / tp.folder)  # its records answer other data
        results: dict[str, TaskResult] = {}
        for tp, fingerprint in zip(plan.tasks, fingerprints, strict=True):
            result = await run_task(plan, tp, fingerprint, progress)
            results[tp.folder] = result
            if on_task is not None:
                on_task(result)
        folder = RunFolder(run_dir)
        folder.write_leaderboard(leaderboard(run_dir.name, results) + "\n")
        folder.write_summary(
            {f: r.summary for f, r in results.items()},
            label=run_label(config),
            llm_free=llm_free(config),
        )
    except OSError as e:
        if e.filename is None:  # a write that failed on a full disk names no file: name the run
            raise OSError(e.errno, e.strerror, str(run_dir)) from e
        raise
    finally:
        lock.release()
    return RunResult(run_dir, config, results, time.perf_counter() - started)


def lock_run_dir(path: Path) -> FileLock:
    """Hold the run folder for this process; a second process on it is refused at once.

    Two processes on one folder would both pay for every query and interleave their records.
    The lock is the kernel's (flock), so a crashed holder never leaves it stuck.
    """
    path.mkdir(parents=True, exist_ok=True)
    lock = FileLock(RunFolder(path).lock_path, timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise RunError(
            f"{path} is in use by another agents.run process; wait for it to finish or "
            "pass another --run-name"
        ) from None
    return lock


def open_run_dir(path: Path, cfg: RunConfig, overwrite: bool) -> None:
    """Bind `path` to `cfg`: accept it if it holds the same config, refuse otherwise.

    Only `binding(cfg)` counts, so concurrency, the cache mode or where things go may change
    between a run and its resumption. With `overwrite` only this run's own folder is emptied
    (it is one path component inside the runs dir, see `check_component`), never its parent.
    """
    folder = RunFolder(path)
    if folder.config_path.exists():
        try:
            old = binding(from_dict(folder.config()))
        except (ValueError, TypeError) as e:  # damaged, or written by an unknown version
            if not overwrite:
                raise RunError(
                    f"{e}; pass --overwrite to replace this run or --run-name for a new one"
                ) from None
            old = None
        if old == binding(cfg):
            folder.write_config(to_dict(cfg))  # runtime settings as this run uses them
            return
        if not overwrite:
            diff = differences(old, binding(cfg)) if isinstance(old, dict) else ["config"]
            raise RunError(
                f"{path} holds a run with another configuration (differs in: "
                f"{', '.join(diff)}); pass --overwrite to replace it or --run-name for a new one"
            )
        _empty_run_dir(path)
    folder.write_config(to_dict(cfg))


def _empty_run_dir(path: Path) -> None:
    for child in path.iterdir():
        if child.name == runs.LOCK_FILE:
            continue  # held by this process
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


def check_task_data(out: Path, task: Task, fingerprint: dict[str, str]) -> None:
    """Refuse a task folder whose records were made from another corpus or query set.

    A changed qrels file only needs the (free) metrics recomputed, which `run_task` does;
    records ranked over another corpus or answering other query texts cannot be reused.
    """
    folder = TaskFolder(out)
    try:
        info = folder.info()
        old = None if info is None else dict(info["fingerprint"])
    except (ValueError, KeyError, TypeError):
        raise RunError(
            f"{folder.info_path}: damaged, cannot tell which data this run used; pass "
            "--overwrite to redo the run"
        ) from None
    if old is None:
        return
    changed = [part for part in ("corpus", "queries") if old.get(part) != fingerprint[part]]
    if changed:
        raise RunError(
            f"{out}: the {' and '.join(changed)} of task {task.name} changed since this run "
            f"was made ({task.path}); pass --overwrite to redo it or --run-name for a new run"
        )


def adopt_records(source_dir: Path, stage_dir: Path) -> None:
    """Copy a finished stage's records from the source run, unless this run has them."""
    target = StageFolder(stage_dir).records_path
    if target.exists():
        return
    stage_dir.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    shutil.copyfile(StageFolder(source_dir).records_path, tmp)
    tmp.replace(target)


def adopt_run_file(lists: RunFileLists, queries: dict[str, str], out: Path) -> dict[str, dict]:
    """The first stage's records from a run file's lists, written once (whole, atomically):
    a resumed run reads them back, and its binding holds the file's sha256."""
    path = StageFolder(out).records_path
    if not path.exists():
        write_text(path, "".join(record_line(r) for r in first_stage_records(lists, queries)))
    return {q: r for q, r in read_records(path).items() if q in queries}


def _source_task(source_dir: Path, fingerprint: dict[str, str]) -> TaskSummary:
    """The source run's summary of a task, which must be finished on the same data."""
    source = TaskFolder(source_dir)
    summary = source.summary()
    if summary is None or not source.records_path.exists():
        raise RunError(
            f"{source_dir}: this task of the source run is not finished; resume that run first"
        )
    if summary.failed:
        raise RunError(
            f"{source_dir}: {summary.failed} queries of the source run failed; resume that "
            "run first (re-run its command) so every query has a first-stage list"
        )
    old = summary.data
    changed = [p for p in ("corpus", "queries") if old.get(p) != fingerprint[p]]
    if changed:
        raise RunError(
            f"{source_dir}: the {' and '.join(changed)} changed since the source run was made"
        )
    return summary


async def run_task(
    plan: Plan, tp: TaskPlan, fingerprint: dict[str, str], progress: bool = True
) -> TaskResult:
    """Answer, rank and score one task into its folder; a finished task is read back, not
    redone.

    A finished task counts only for the data it was scored on: when the qrels changed, or
    its metrics.json is damaged, the metrics are computed again from the saved records (no
    query is answered twice). A rerank of a finished run copies the first stage's records,
    and those of each leading stage configured as the source's, from it: no retriever is
    built and no agent runs.
    """
    config, task, queries = plan.config, tp.task, tp.queries
    out = plan.run_dir / tp.folder
    folder = TaskFolder(out)
    summary = folder.summary()
    if summary is not None and not summary.failed and summary.data == fingerprint:
        log.info("%s: already finished, reading %s", task.name, folder.summary_path)
        return TaskResult(task.name, out.name, summary)
    folder.write_info({"task": task.name, "path": str(task.path),
                       "fingerprint": fingerprint, "binding": binding(config)})  # fmt: skip
    started = time.perf_counter()
    qrels = {q: task.qrels[q] for q in queries if q in task.qrels}
    concurrency = query_concurrency(config)
    bm25 = None
    if tp.source_dir is not None:
        source_summary = _source_task(tp.source_dir, fingerprint)
        adopt_records(tp.source_dir, out)
        records = {q: r for q, r in folder.records().items() if q in queries}
    elif tp.run_file is not None:
        records = adopt_run_file(tp.run_file, queries, out)
    elif plan.cluster is not None:  # the graph on the cluster's workers; BM25 for its baseline
        bm25 = first_stage_bm25(plan, tp, progress)
        # built here first: a dense corpus encoded once, by the cluster, the workers sent it
        retriever = task_retriever(plan, tp, bm25, progress, ray=plan.cluster.address)
        graph = plan.cluster.graph(plan.tasks.index(tp), len(queries), retriever, plan.cache_dir)
        try:
            records = await run_queries(
                graph,
                queries,
                folder.records_path,
                concurrency=max(concurrency, plan.cluster.workers),
                progress=progress,
                label=f"{task.name} [{config.agent}]",
            )
        finally:
            graph.close()
    else:
        graph, bm25 = agent_graph(plan, tp, progress)
        records = await run_queries(
            graph,
            queries,
            folder.records_path,
            concurrency=concurrency,
            progress=progress,
            label=f"{task.name} [{config.agent}]",
        )
    stages: dict[str, dict[str, float]] = {}
    stage_dirs = [out]
    evaluation = _score_stage(out, records, qrels, task, config)
    stages[runs.AGENT_STAGE] = evaluation.mean
    failed = {q: r["error"] for q, r in records.items() if r["error"]}
    usage = _usage(records)
    outcomes: dict[str, dict[str, int]] = {}  # stage folder -> how its replies were read
    for i, stage_config in enumerate(config.rerank, 1):
        stage = folder.stage(i, stage_config.kind)
        if tp.source_dir is not None and plan.source.rerank[:i] == config.rerank[:i]:
            adopt_records(tp.source_dir / stage.name, stage.path)  # the same stage, the same lists
        graph = stage_graph(plan, tp, i, stage_config, records)
        records = await run_queries(
            graph,
            {q: queries[q] for q in graph.rankings},
            stage.records_path,
            concurrency=concurrency,
            progress=progress,
            label=f"{task.name} [{stage_config.kind}]",
        )
        failed.update({q: r["error"] for q, r in records.items() if r["error"]})
        usage.add(_usage(records))
        evaluation = _score_stage(stage.path, records, qrels, task, config)
        stages[stage.name] = evaluation.mean
        stage_dirs.append(stage.path)
        counted = _outcomes(records)
        if counted:
            outcomes[stage.name] = counted

    seconds = time.perf_counter() - started
    minutes = f"{seconds / 60:.2f} minutes"
    results = results_json(evaluation, task.name, default_run_name(config), minutes)
    write_results_json(results, folder.results_path)
    some: dict[str, Any] = {}  # what only some tasks have
    if outcomes:
        some["outcomes"] = outcomes
    if tp.generations is not None:
        some["generations"] = describe_generations(tp.generations, list(queries))
    if tp.run_file is not None:
        some["run_file"] = {"path": str(tp.run_file.path), "sha256": tp.run_file.sha256,
                            "missing": tp.run_file.missing,
                            "repeated_lines": len(tp.run_file.repeated)}  # fmt: skip
    if tp.source_dir is not None:
        some["source_run"] = str(tp.source_dir)
        if source_summary.bm25_baseline is not None and source_summary.data == fingerprint:
            some["bm25_baseline"] = source_summary.bm25_baseline
    elif plan.spec.name != "none" and bm25 is not None:
        base_run = final_run(baseline_run(bm25, queries, config.eval.depth), task, config)
        base = evaluate_run(qrels, base_run, missing=config.eval.missing, ties=config.eval.ties)
        some["bm25_baseline"] = {HEADLINE: base.mean[HEADLINE]}
    summary = TaskSummary(
        task=task.name,
        notes=task.notes,
        metrics=evaluation.mean,
        averaging=evaluation.describe(),
        queries=len(queries),
        failed=len(failed),
        failures=failed,
        usage=usage.to_dict(),
        searches_per_query=_searches_per_query(folder.records()),
        seconds=round(seconds, 3),
        data=fingerprint,
        stages=stages,
        final_stage=stage_dirs[-1].name if len(stage_dirs) > 1 else runs.AGENT_STAGE,
        **some,
    )
    folder.write_summary(summary)  # last: with failed == 0 it marks the task done
    return TaskResult(task.name, out.name, summary, records)


def query_concurrency(config: RunConfig) -> int:
    """Queries in flight: the LLM's ``concurrency``, or 4 for a run that calls no model."""
    return config.llm.concurrency if config.llm else 4


def agent_graph(plan: Plan, tp: TaskPlan, progress: bool = True) -> tuple[Any, Retriever]:
    """The agent's graph for one task of the run, and BM25 (the agent's first stage).

    The run's retriever is built (or read from its cache) over the task's corpus, and a
    retrieval server's answers are checked against what the run is bound to. `run_task` runs
    the graph over the task's queries, `agents.execution.one_query` over one query: the same graph.
    """
    bm25 = first_stage_bm25(plan, tp, progress)
    retriever = task_retriever(plan, tp, bm25, progress)
    return plan.spec.build_graph(plan.agent_context(tp, retriever, bm25)), bm25


def task_retriever(
    plan: Plan, tp: TaskPlan, bm25: Retriever, progress: bool = True, ray: str | None = None
) -> Retriever:
    """The run's retriever over the task's corpus (``bm25`` itself when that is the run's),
    built or read from its cache; a retrieval server's answers checked against what the run
    is bound to. ``ray``: the cluster that encodes a dense corpus."""
    config, task = plan.config, tp.task
    if config.retriever.spec == "bm25":
        return bm25
    retriever = build_retriever(
        config.retriever, task, plan.cache_dir, progress, embedding_transport(config), ray
    )
    indexes = config.recorded.retriever_index
    if indexes:  # each server's answers checked against what the run is bound to
        from retrievers.remote import bind

        bind(retriever, indexes.get(tp.folder, {}), task.corpus)
    return retriever


def first_stage_bm25(plan: Plan, tp: TaskPlan, progress: bool = True) -> Retriever:
    """BM25 over the task's corpus with the run's BM25 settings: the agents' first stage and
    every task's baseline."""
    retriever = dataclasses.replace(plan.config.retriever, spec="bm25")
    return build_retriever(retriever, tp.task, plan.cache_dir, progress)


def stage_graph(
    plan: Plan, tp: TaskPlan, index: int, stage_config: Any, records: dict[str, dict]
) -> StageGraph:
    """Rerank stage ``index`` (1-based) of the run over the rankings of ``records``, the
    stage before it; a failed query has no ranking and is not reranked. The stage is told
    every input list's length, in the task's order (GroupRank's shuffle stream needs them)."""
    inputs = {q: ranking_of(r) for q, r in records.items() if not r["error"]}
    stage = STAGES[stage_config.kind].build(plan.stage_context(tp, index, stage_config, inputs))
    return StageGraph(stage, inputs)


def _score_stage(
    folder: Path, records: dict, qrels: dict, task: Task, config: RunConfig
) -> Evaluation:
    """One stage's ranked lists scored, and written beside its records."""
    run = final_run({q: ranking_of(r) for q, r in records.items() if not r["error"]}, task, config)
    evaluation = evaluate_run(qrels, run, missing=config.eval.missing, ties=config.eval.ties)
    tag = f"r2med-agents-{safe_name(config.agent)}"
    stage = StageFolder(folder)
    write_run(run, stage.run_trec_path, tag=tag, depth=config.eval.depth,
              ties=config.eval.ties)  # fmt: skip
    stage.write_per_query(evaluation.per_query)
    return evaluation


def _outcomes(records: dict) -> dict[str, int]:
    """How many of a stage's steps were read each way (a reasoning reranker's reply: its
    pattern matched, a fallback, a forced token), over its finished queries."""
    counts = Counter(
        s["outcome"]
        for r in records.values()
        if not r["error"]
        for s in r["steps"]
        if "outcome" in s
    )
    return dict(sorted(counts.items()))


def _usage(records: dict) -> Usage:
    return Usage.total(Usage.from_dict(r["usage"]) for r in records.values())


def embedding_transport(config: RunConfig) -> dict[str, Any]:
    """What every embedding API call gets beside its parameters: the run's timeout, and the
    LLM client's rule for a server that needs no key (`retrievers.api_embed`; the retrieval
    server gets the same)."""
    from retrievers.api_embed import embedding_transport as transport_of

    return transport_of(config.retriever, config.timeout)


def baseline_run(bm25: Retriever, queries: dict[str, str], depth: int) -> dict:
    return {q: bm25.search(SearchRequest(query=text), depth) for q, text in queries.items()}


def final_run(run: dict, task: Task, config: RunConfig) -> dict:
    """The run as it is scored and as run.trec holds it: padded when asked, then its top
    depth, so that metrics.json and eval.score on run.trec count the same documents."""
    depth = config.eval.depth
    if config.eval.pad:
        run = pad_run(run, list(task.corpus), depth)
    return run if depth is None else top_k(run, depth, config.eval.ties)


def _searches_per_query(records: dict) -> float:
    """Searches the agent chose to make (its state's count, not its final ranking's)."""
    return round(sum(r.get("searches", 0) for r in records.values()) / max(1, len(records)), 3)
