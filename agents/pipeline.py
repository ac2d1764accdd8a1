"""A run as a library call: `run(config) -> RunResult`.

    dataset -> tasks -> first stage (an agent per query) -> rerank stages -> evaluation

Each arrow is data on disk in the run folder: the agent's records (`<task>/queries.jsonl`)
and ranked lists (`<task>/run.trec`), then each rerank stage's in `<task>/rerank-<i>-<kind>/`,
each scored on its own; the task's `metrics.json` holds every stage's metrics and the final
one's. A run folder is bound to its configuration and each task folder to its data, so a
resumed run answers only what is missing and never reports a stale number. `python -m
agents.run` and `agents.sweep` are thin layers over `run`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from agents.config import (
    RunConfig,
    binding,
    default_run_name,
    differences,
    from_dict,
    to_dict,
)
from agents.generations import Generations
from agents.generations import describe as describe_generations
from agents.graphs.context import AgentContext
from agents.registry import AGENTS, STAGES, AgentSpec
from agents.rerank import StageContext, StageGraph
from agents.runner import ranking_of, run_queries
from eval import runs
from eval.datasets import Task, default_cache_dir, load_tasks, task_fingerprint
from eval.evaluate import Evaluation, evaluate, pad_run, top_k
from eval.files import safe_name, writable_folder
from eval.report import leaderboard_markdown, results_json, write_results_json
from eval.trec import write_run
from eval.usage import Usage
from prompts import PromptBook
from retrievers.search import Retriever, SearchRequest, build_retriever

log = logging.getLogger("agents.pipeline")

HEADLINE = "NDCG@10"


class RunError(ValueError):
    """A run that cannot start as asked; the message is one line saying why and what to do."""


@dataclass
class TaskResult:
    name: str  # the task's own name
    folder: str  # its folder in the run (unique even when two tasks share a name)
    summary: dict[str, Any]  # what metrics.json holds: metrics, stages, usage, failures, ...
    records: dict[str, dict[str, Any]] = field(default_factory=dict)  # the final stage's

    @property
    def metrics(self) -> dict[str, float]:
        return self.summary["metrics"]


@dataclass
class RunResult:
    run_dir: Path
    config: RunConfig
    tasks: dict[str, TaskResult]  # by task folder
    seconds: float

    @property
    def failed(self) -> int:
        return sum(t.summary["failed"] for t in self.tasks.values())


def run(
    config: RunConfig,
    *,
    overwrite: bool = False,
    progress: bool = True,
    on_task: Callable[[TaskResult], None] | None = None,
) -> RunResult:
    """Run `config` to the end (resuming its run folder) and return every task's results.

    Refusals raise `RunError`, `eval.datasets.DataError`, `prompts.PromptError` or
    `eval.files.FolderError` (all ValueErrors with one-line messages) before any model is
    called; a missing or rejected API key raises `agents.llm.LLMAuthError` after keeping every
    finished query. `on_task` is called as each task finishes.
    """
    return asyncio.run(arun(config, overwrite=overwrite, progress=progress, on_task=on_task))


async def arun(
    config: RunConfig,
    *,
    overwrite: bool = False,
    progress: bool = True,
    on_task: Callable[[TaskResult], None] | None = None,
) -> RunResult:
    started = time.perf_counter()
    spec = AGENTS[config.agent]
    cache_dir = writable_folder(config.cache_dir or default_cache_dir(), "--cache-dir")
    if config.llm is not None:
        from agents.llm import check_credentials, check_model

        for model, api_base in config.llm_targets():
            check_model(model)
            check_credentials(model, api_base)
    try:
        return await _arun(config, spec, cache_dir, overwrite, progress, on_task, started)
    finally:
        if "litellm" in sys.modules:  # its HTTP sessions, if a run opened any
            from agents.llm.client import close_clients

            await close_clients()


async def _arun(
    config: RunConfig,
    spec: AgentSpec,
    cache_dir: Path,
    overwrite: bool,
    progress: bool,
    on_task: Callable[[TaskResult], None] | None,
    started: float,
) -> RunResult:
    from agents import machine

    # the clients first: a llama.cpp server that reports no chat template is refused before a
    # run folder exists
    llms = _llms(config, cache_dir)
    for client in llms.values():
        client.prepare()
    templates = [c.template.sha256 for c in llms.values() if c.template is not None]
    if templates:
        config = dataclasses.replace(config, chat_template_sha256=templates[0])
    embedded = any(model.startswith("local/") for model, _ in config.llm_targets())
    config = dataclasses.replace(config, machine=machine.describe(embedded))
    source = read_source_run(config) if config.source_run else None
    overrides = {name: Path(path) for name, path in config.prompt_files.items()}
    tasks = load_tasks(config.dataset, cache_dir)
    folders = task_folders(tasks)
    books = {t.name: PromptBook(overrides, t.name) for t in tasks}
    prompts = record_prompts(spec, config, tasks, books, source)
    config = dataclasses.replace(config, prompts=prompts, sampling=record_sampling(config, source))
    for name, entry in config.sampling.items():
        if entry["not_sent"]:  # what was asked for and is not sent is said, once per node
            log.warning("%s on %s (preset %s): %s", name, entry["model"], entry["preset"],
                        describe_sampling(entry))  # fmt: skip
    generations = {}
    if config.generations and source is None:  # a rerank reads the source's lists instead
        generations = read_generations(config, tasks, folders, cache_dir)
        config = dataclasses.replace(
            config, generation_sha256={f: g.sha256 for f, g in generations.items()}
        )
    # last, so that a refused input leaves no runs folder behind
    runs_dir = writable_folder(config.runs_dir, "--runs-dir")
    run_dir = runs_dir / (config.run_name or default_run_name(config))
    lock = lock_run_dir(run_dir)
    try:
        fingerprints = [task_fingerprint(t) for t in tasks]
        open_run_dir(run_dir, config, overwrite)
        for task, folder, fingerprint in zip(tasks, folders, fingerprints, strict=True):
            try:
                check_task_data(run_dir / folder, task, fingerprint)
            except RunError:
                if not overwrite:
                    raise
                shutil.rmtree(run_dir / folder)  # its records answer other data
        results: dict[str, TaskResult] = {}
        for task, folder, fingerprint in zip(tasks, folders, fingerprints, strict=True):
            result = await run_task(
                task, config, spec, llms, run_dir / folder, cache_dir, books[task.name],
                fingerprint, progress,
                source=(source, Path(config.source_run) / folder) if source else None,
                generations=generations.get(folder),
            )  # fmt: skip
            results[folder] = result
            if on_task is not None:
                on_task(result)
        table = leaderboard_markdown(
            {run_dir.name: {f: r.metrics[HEADLINE] for f, r in results.items()}},
            tasks=list(results),
        )
        runs.write_leaderboard(run_dir, table + "\n")
        runs.write_run_summary(run_dir, {f: r.summary for f, r in results.items()})
    except OSError as e:
        if e.filename is None:  # a write that failed on a full disk names no file: name the run
            raise OSError(e.errno, e.strerror, str(run_dir)) from e
        raise
    finally:
        lock.release()
    return RunResult(run_dir, config, results, time.perf_counter() - started)


def record_prompts(
    spec: AgentSpec,
    config: RunConfig,
    tasks: list[Task],
    books: dict[str, PromptBook],
    source: RunConfig | None = None,
) -> dict[str, str]:
    """Every prompt the run will send, by name and sha256, recorded as the graphs load them.

    The graphs (and the LLM stages) are built once per task without retrievers or a model:
    building only loads prompts. The same books then serve the real graphs, which get each
    prompt from the book's memory, so the recorded text is the text sent. A rerank of a
    finished run records its agent's prompts as that run did (they are not sent again).
    """
    used: dict[str, str] = {}
    if source is not None:
        stage_families = {f for s in STAGES.values() for f in s.prompts}
        used.update(
            (n, h) for n, h in source.prompts.items() if n.split("/")[0] not in stage_families
        )
    for task in tasks:
        # a rerank of a finished run sends no agent prompt, nor does a replay of generations
        if source is None and not config.generations:
            ctx = AgentContext(
                retriever=None, first_stage=None, corpus={}, task=task.name,
                prompts=books[task.name], options=config.options,
            )  # fmt: skip
            spec.build_graph(ctx)
        for stage in config.rerank:
            if STAGES[stage.kind].uses_llm:  # the others read no prompt (and may load models)
                STAGES[stage.kind].build(_stage_context(stage, task, config, None, books, None))
        used.update(books[task.name].used)
    # an override no prompt of the run reads would change nothing, silently (a prompt of
    # another agent, a task kind the dataset lacks, a replay that sends no prompt); a rerank
    # keeps its source run's, which its agent read
    inherited = set(source.prompt_files) if source is not None else set()
    read = set().union(*(b.overrides_read for b in books.values()))
    unread = sorted(set(config.prompt_files) - read - inherited)
    if unread:
        from prompts import PromptError

        raise PromptError(
            f"--prompt {unread[0]}={config.prompt_files[unread[0]]}: no prompt this run sends "
            f"reads it (it sends: {', '.join(sorted(used)) or 'none'})"
        )
    return dict(sorted(used.items()))


def record_sampling(config: RunConfig, source: RunConfig | None = None) -> dict[str, Any]:
    """What every LLM call of the run is sent, by "<agent or stage folder>/<node>": the
    preset's values for its method, node and model family, the settings given over them, and
    what is not sent (agents.llm.sampling). A rerank of a finished run keeps its agent's."""
    if config.llm is None:
        return {}
    from agents.llm.sampling import resolve
    from agents.llm.serving import resolve_server

    llm = config.llm
    explicit = llm.explicit_sampling()
    out: dict[str, Any] = {}

    def put(name: str, method: str, node: str, model: str, server: str, options: Any) -> None:
        sampling = resolve(llm.preset, method, node, model, server, explicit, options)
        out[f"{name}/{node}"] = {"model": model, "preset": llm.preset, **sampling.to_dict()}

    if source is not None:
        out.update((k, v) for k, v in source.sampling.items() if k.split("/")[0] == config.agent)
    elif config.agent_calls_llm:
        server = resolve_server(llm.server, llm.model)
        for node in AGENTS[config.agent].llm_nodes:
            put(config.agent, config.agent, node, llm.model, server, config.options)
    for i, stage in enumerate(config.rerank, 1):
        if not STAGES[stage.kind].uses_llm:
            continue
        model, api_base = config.stage_llm(stage)
        server = resolve_server(llm.server if api_base == llm.api_base else "auto", model)
        for node in STAGES[stage.kind].llm_nodes:
            put(runs.stage_dir_name(i, stage.kind), stage.kind, node, model, server, stage.options)
    return out


def describe_sampling(entry: dict[str, Any]) -> str:
    """One line on what a node's calls are sent, and what not."""
    sent = ", ".join(f"{k} {v}" for k, v in entry["params"].items()) or "nothing"
    line = f"sends {sent}"
    if entry["not_sent"]:
        line += "; not sent: " + "; ".join(f"{k} ({w})" for k, w in entry["not_sent"].items())
    return line


def node_sampling(config: RunConfig, name: str) -> dict[str, dict[str, Any]]:
    """node -> the parameters sent, for the agent or stage folder ``name`` of the run."""
    prefix = f"{name}/"
    return {
        k.removeprefix(prefix): dict(v["params"])
        for k, v in config.sampling.items()
        if k.startswith(prefix)
    }


def text_parser(config: RunConfig, generations: Generations | None = None) -> str:
    """How the run's generated texts are read (agents.llm.text): the setting, else the
    agent's own protocol, else the writing model's family (a replay's source model)."""
    from agents.llm.text import reasoning_parser

    if config.reasoning != "auto":
        return config.reasoning
    own = AGENTS[config.agent].parser
    if own is not None:
        return own
    if generations is not None:
        model = generations.model
    else:
        model = config.llm.model if config.llm is not None and config.agent_calls_llm else None
    return reasoning_parser(model) if model else "none"


def read_generations(
    config: RunConfig, tasks: list[Task], folders: list[str], cache_dir: Path
) -> dict[str, Generations]:
    """Each task's generated texts from the run's source, by task folder; the queries a source
    has no text for are reported now, before any query runs (one line per task)."""
    from agents.generations import load_generations, missing_line, parse_source

    assert config.generations is not None
    spec = parse_source(config.generations, config.agent)
    out = {}
    for task, folder in zip(tasks, folders, strict=True):
        gens = load_generations(spec, config.agent, task.name, folder, cache_dir)
        line = missing_line(gens, folder, list(_limited(task, config.limit)))
        if line:
            log.warning("%s", line)
        out[folder] = gens
    return out


def _llms(config: RunConfig, cache_dir: Path) -> dict[tuple[str, str | None], Any]:
    """One client per (model, api_base) the run calls, so each has its own rate limit."""
    if config.llm is None:
        return {}
    from agents.llm import LLM

    llm = config.llm
    return {
        (model, api_base): LLM(
            model=model,
            api_base=api_base,
            cache_dir=cache_dir,
            cache_mode=llm.cache,
            rate_limit=llm.rate_limit,
            # the server kind is the run's server's; a stage's own server is a generic API
            server=llm.server if api_base == llm.api_base else "auto",
            chat_template=llm.chat_template if api_base == llm.api_base else None,
            routing=llm.routing,
            timeout=config.timeout,
        )
        for model, api_base in config.llm_targets()
    }


def _stage_context(stage, task, config, llm, books, cache_dir, folder="") -> StageContext:
    return StageContext(
        corpus=task.corpus, task=task.name, options=stage.options, llm=llm,
        depth=config.eval.depth, prompts=books[task.name], cache_dir=cache_dir,
        sampling=node_sampling(config, folder) if folder else {},
    )  # fmt: skip


def lock_run_dir(path: Path) -> FileLock:
    """Hold the run folder for this process; a second process on it is refused at once.

    Two processes on one folder would both pay for every query and interleave their records.
    The lock is the kernel's (flock), so a crashed holder never leaves it stuck.
    """
    path.mkdir(parents=True, exist_ok=True)
    lock = FileLock(path / runs.LOCK_FILE, timeout=0)
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
    if (path / runs.CONFIG_FILE).exists():
        try:
            old = binding(from_dict(runs.read_config(path)))
        except (ValueError, TypeError) as e:  # damaged, or written by an unknown version
            if not overwrite:
                raise RunError(
                    f"{e}; pass --overwrite to replace this run or --run-name for a new one"
                ) from None
            old = None
        if old == binding(cfg):
            runs.write_config(path, to_dict(cfg))  # runtime settings as this run uses them
            return
        if not overwrite:
            diff = differences(old, binding(cfg)) if isinstance(old, dict) else ["config"]
            raise RunError(
                f"{path} holds a run with another configuration (differs in: "
                f"{', '.join(diff)}); pass --overwrite to replace it or --run-name for a new one"
            )
        _empty_run_dir(path)
    runs.write_config(path, to_dict(cfg))


def _empty_run_dir(path: Path) -> None:
    for child in path.iterdir():
        if child.name == runs.LOCK_FILE:
            continue  # held by this process
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()


def task_folders(tasks: list[Task]) -> list[str]:
    """One folder name per task; tasks of the same name (``a/toy,b/toy``) never share one.

    A task given twice is refused: it would be run and counted twice.
    """
    seen: dict[Path, str] = {}
    for task in tasks:
        where = task.path.resolve()
        if where in seen:
            raise RunError(f"--dataset names {task.name} ({task.path}) twice")
        seen[where] = task.name
    names = [t.name for t in tasks]
    folders = []
    for task in tasks:
        if names.count(task.name) == 1:
            folders.append(safe_name(task.name))
            continue
        # readable where the parent folders differ, a hash of the path where they do not
        parent = task.path.resolve().parent.name
        label = f"{parent}-{task.name}"
        if sum(f"{t.path.resolve().parent.name}-{t.name}" == label for t in tasks) > 1:
            label += "-" + hashlib.sha256(str(task.path.resolve()).encode()).hexdigest()[:8]
        folders.append(safe_name(label))
    return folders


def check_task_data(out: Path, task: Task, fingerprint: dict[str, str]) -> None:
    """Refuse a task folder whose records were made from another corpus or query set.

    A changed qrels file only needs the (free) metrics recomputed, which `run_task` does;
    records ranked over another corpus or answering other query texts cannot be reused.
    """
    try:
        info = runs.read_task_info(out)
        old = None if info is None else dict(info["fingerprint"])
    except (ValueError, KeyError, TypeError):
        raise RunError(
            f"{out / runs.TASK_FILE}: damaged, cannot tell which data this run used; pass "
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


FIRST_STAGE_FIELDS = (
    "agent", "dataset", "options", "retriever", "limit", "eval", "generations",
    "generation_sha256",
)  # fmt: skip


def read_source_run(config: RunConfig) -> RunConfig:
    """The finished run `config` reranks, checked to have made the same first stage."""
    path = Path(config.source_run or "")
    try:
        source = from_dict(runs.read_config(path))
    except FileNotFoundError:
        raise RunError(f"{path}: not a run folder (no {runs.CONFIG_FILE})") from None
    except (ValueError, TypeError) as e:
        raise RunError(f"{path / runs.CONFIG_FILE}: {e}") from None
    differ = [f for f in FIRST_STAGE_FIELDS if getattr(source, f) != getattr(config, f)]
    if source.llm is not None and source.agent_calls_llm:
        mine = dataclasses.replace(
            config.llm,
            **{k: getattr(source.llm, k) for k in ("cache", "concurrency", "rate_limit")},
        )
        if mine != source.llm:
            differ.append("llm")
    if differ:
        raise RunError(
            f"{path} made its first stage with other settings ({', '.join(differ)}); a rerank "
            "reuses that run's settings for everything before its stages"
        )
    return source


def adopt_records(source_dir: Path, stage_dir: Path) -> None:
    """Copy a finished stage's records from the source run, unless this run has them."""
    target = runs.records_path(stage_dir)
    if target.exists():
        return
    stage_dir.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    shutil.copyfile(runs.records_path(source_dir), tmp)
    tmp.replace(target)


def _source_task(source_dir: Path, fingerprint: dict[str, str]) -> dict[str, Any]:
    """The source run's summary of a task, which must be finished on the same data."""
    summary = runs.read_task_summary(source_dir)
    if summary is None or not runs.records_path(source_dir).exists():
        raise RunError(
            f"{source_dir}: this task of the source run is not finished; resume that run first"
        )
    if summary.get("failed"):
        raise RunError(
            f"{source_dir}: {summary['failed']} queries of the source run failed; resume that "
            "run first (re-run its command) so every query has a first-stage list"
        )
    old = summary.get("data") or {}
    changed = [p for p in ("corpus", "queries") if old.get(p) != fingerprint[p]]
    if changed:
        raise RunError(
            f"{source_dir}: the {' and '.join(changed)} changed since the source run was made"
        )
    return summary


async def run_task(
    task: Task,
    config: RunConfig,
    spec: AgentSpec,
    llms: dict[tuple[str, str | None], Any],
    out: Path,
    cache_dir: Path,
    prompts: PromptBook,
    fingerprint: dict[str, str],
    progress: bool = True,
    source: tuple[RunConfig, Path] | None = None,
    generations: Generations | None = None,
) -> TaskResult:
    """Answer, rank and score one task into `out`; a finished task is read back, not redone.

    A finished task counts only for the data it was scored on: when the qrels changed, or
    its metrics.json is damaged, the metrics are computed again from the saved records (no
    query is answered twice). With `source` (a finished run and its folder for this task)
    the first stage's records, and those of each leading stage configured as the source's,
    are copied from it: no retriever is built and no agent runs.
    """
    summary = runs.read_task_summary(out)
    if summary is not None and not summary.get("failed") and summary.get("data") == fingerprint:
        log.info("%s: already finished, reading %s", task.name, out / runs.TASK_METRICS_FILE)
        return TaskResult(task.name, out.name, summary)
    runs.write_task_info(out, {"task": task.name, "path": str(task.path),
                               "fingerprint": fingerprint})  # fmt: skip
    started = time.perf_counter()
    queries = _limited(task, config.limit)
    qrels = {q: task.qrels[q] for q in queries if q in task.qrels}
    concurrency = config.llm.concurrency if config.llm else 4
    bm25 = None
    if source is not None:
        _, source_dir = source
        source_summary = _source_task(source_dir, fingerprint)
        adopt_records(source_dir, out)
        records = {q: r for q, r in runs.read_records(runs.records_path(out)).items()
                   if q in queries}  # fmt: skip
    else:
        bm25 = build_retriever(
            dataclasses.replace(config.retriever, spec="bm25"), task, cache_dir, progress
        )
        retriever = (
            bm25
            if config.retriever.spec == "bm25"
            else build_retriever(
                config.retriever, task, cache_dir, progress, embedding_transport(config)
            )
        )
        ctx = AgentContext(
            retriever=retriever,
            first_stage=bm25,
            corpus=task.corpus,
            task=task.name,
            llm=llms.get((config.llm.model, config.llm.api_base)) if config.llm else None,
            depth=config.eval.depth,
            prompts=prompts,
            options=config.options,
            generations=generations,
            parser=text_parser(config, generations),
            sampling=node_sampling(config, config.agent),
        )
        records = await run_queries(
            spec.build_graph(ctx),
            queries,
            runs.records_path(out),
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
    for i, stage_config in enumerate(config.rerank, 1):
        folder = out / runs.stage_dir_name(i, stage_config.kind)
        if source is not None and source[0].rerank[:i] == config.rerank[:i]:
            adopt_records(source[1] / folder.name, folder)  # the same stage on the same lists
        llm = llms[config.stage_llm(stage_config)] if STAGES[stage_config.kind].uses_llm else None
        stage = STAGES[stage_config.kind].build(
            _stage_context(
                stage_config, task, config, llm, {task.name: prompts}, cache_dir, folder.name
            )  # fmt: skip
        )
        inputs = {q: ranking_of(r) for q, r in records.items() if not r["error"]}
        records = await run_queries(
            StageGraph(stage, inputs),
            {q: queries[q] for q in inputs},
            runs.records_path(folder),
            concurrency=concurrency,
            progress=progress,
            label=f"{task.name} [{stage_config.kind}]",
        )
        failed.update({q: r["error"] for q, r in records.items() if r["error"]})
        usage.add(_usage(records))
        evaluation = _score_stage(folder, records, qrels, task, config)
        stages[folder.name] = evaluation.mean
        stage_dirs.append(folder)

    seconds = time.perf_counter() - started
    minutes = f"{seconds / 60:.2f} minutes"
    results = results_json(evaluation, task.name, default_run_name(config), minutes)
    write_results_json(results, runs.results_path(out))
    summary = {
        "task": task.name,
        "notes": task.notes,
        "metrics": evaluation.mean,
        "averaging": evaluation.describe(),
        "queries": len(queries),
        "failed": len(failed),
        "failures": failed,
        "usage": usage.to_dict(),
        "searches_per_query": _searches_per_query(runs.read_records(runs.records_path(out))),
        "seconds": round(seconds, 3),
        "data": fingerprint,
        "stages": stages,
        "final_stage": stage_dirs[-1].name if len(stage_dirs) > 1 else runs.AGENT_STAGE,
    }
    if generations is not None:
        summary["generations"] = describe_generations(generations, list(queries))
    if source is not None:
        summary["source_run"] = str(source[1])
        if "bm25_baseline" in source_summary and source_summary.get("data") == fingerprint:
            summary["bm25_baseline"] = source_summary["bm25_baseline"]
    elif spec.name != "none" and bm25 is not None:
        base_run = _final_run(baseline_run(bm25, queries, config.eval.depth), task, config)
        base = evaluate(qrels, base_run, missing=config.eval.missing, ties=config.eval.ties)
        summary["bm25_baseline"] = {HEADLINE: base.mean[HEADLINE]}
    runs.write_task_summary(out, summary)  # last: with failed == 0 it marks the task done
    return TaskResult(task.name, out.name, summary, records)


def _score_stage(
    folder: Path, records: dict, qrels: dict, task: Task, config: RunConfig
) -> Evaluation:
    """One stage's ranked lists scored, and written beside its records."""
    run = _final_run({q: ranking_of(r) for q, r in records.items() if not r["error"]}, task, config)
    evaluation = evaluate(qrels, run, missing=config.eval.missing, ties=config.eval.ties)
    tag = f"r2med-agents-{safe_name(config.agent)}"
    write_run(run, runs.run_trec_path(folder), tag=tag, depth=config.eval.depth,
              ties=config.eval.ties)  # fmt: skip
    runs.write_per_query(folder, evaluation.per_query)
    return evaluation


def _usage(records: dict) -> Usage:
    return Usage.total(Usage.from_dict(r["usage"]) for r in records.values())


def _limited(task: Task, limit: int | None) -> dict[str, str]:
    return dict(list(task.queries.items())[:limit]) if limit else dict(task.queries)


def embedding_transport(config: RunConfig) -> dict[str, Any]:
    """What every embedding API call gets beside its parameters: the run's timeout, and the
    LLM client's rule for a server that needs no key (a placeholder when the provider's key
    variable is unset and ``--embed-api-base`` names a server)."""
    transport: dict[str, Any] = {"timeout": config.timeout}
    api = config.retriever.api
    models = [p.arg for p in config.retriever.parts if p.kind == "api"]
    if api.api_base and models and "api_key" not in api.params:
        from agents.llm.client import missing_key_variables
        from agents.secrets import NO_KEY_PLACEHOLDER

        if any(missing_key_variables(m) for m in models):
            transport["api_key"] = NO_KEY_PLACEHOLDER
    return transport


def baseline_run(bm25: Retriever, queries: dict[str, str], depth: int) -> dict:
    return {q: bm25.search(SearchRequest(query=text), depth) for q, text in queries.items()}


def _final_run(run: dict, task: Task, config: RunConfig) -> dict:
    """The run as it is scored and as run.trec holds it: padded when asked, then its top
    depth, so that metrics.json and eval.score on run.trec count the same documents."""
    depth = config.eval.depth
    if config.eval.pad:
        run = pad_run(run, list(task.corpus), depth)
    return run if depth is None else top_k(run, depth, config.eval.ties)


def _searches_per_query(records: dict) -> float:
    """Searches the agent chose to make (its state's count, not its final ranking's)."""
    return round(sum(r.get("searches", 0) for r in records.values()) / max(1, len(records)), 3)
