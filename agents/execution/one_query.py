"""One query through a run's agent and rerank stages: `run_query(config, "q01") -> QueryResult`.

For iterating on a prompt or reading a failure from Python: the run of ``config`` is prepared
as `agents.execution.whole_run.run_dataset` prepares it (`agents.execution.plan.prepare`: the same
checks, prompts and overrides, sampling, LLM clients and response cache), and the query goes through
the same graph and stage code (`agents.execution.whole_run.agent_graph`, `stage_graph`,
`agents.execution.task_queries.run_one`). So a query of a task gets the ranking its record in a run
of ``config`` holds; only nothing is written: no run folder, no records. Figures, when the task has
qrels for the query, are `eval.evaluate`'s on the ranking as a run scores it
(`agents.execution.whole_run.final_run`).

`run_query` is synchronous; called where an event loop is already running (a Jupyter cell),
it runs the query on its own loop in a worker thread and waits, so the same call works in a
script and a notebook. `await arun_query(...)` runs it on the caller's loop instead.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from agents.config.run_config import RunConfig
from agents.execution.loop import run_sync
from agents.execution.plan import Plan, RunError, TaskPlan, prepare
from agents.execution.run_file_stage import first_stage_records
from agents.execution.task_queries import run_one
from agents.execution.whole_run import agent_graph, final_run, stage_graph, warn_unsent
from eval import runs
from eval.evaluate import evaluate_run
from eval.usage import Usage

# the id a query given only as text goes by (a retriever drops the document of the query's id)
TEXT_QUERY_ID = "text"


@dataclass(frozen=True)
class StageResult:
    """One stage of the query: the agent (``"agent"``) or a rerank stage (its folder name in a
    run, ``rerank-<i>-<kind>``)."""

    name: str
    ranking: list[tuple[str, float]]  # doc id, score; best first
    steps: list[dict[str, Any]]  # the trajectory, as `python -m agents.trace` shows it
    usage: Usage
    metrics: dict[str, float] | None  # None when the task has no qrels for the query
    error: str | None  # the query's failure at this stage, as a run records it
    record: dict[str, Any]  # the record a run would append to this stage's queries.jsonl

    @property
    def calls(self) -> list[dict[str, Any]]:
        """The steps that called the LLM: ``node``, the ``messages`` (or raw ``prompt``) sent,
        the ``output``, whether it was ``cached``, and its ``usage``."""
        return [step for step in self.steps if "usage" in step]


@dataclass(frozen=True)
class QueryResult:
    query_id: str
    query: str
    task: str  # the task's folder in a run of the config
    stages: list[StageResult]  # the agent's, then each rerank stage's that ran
    prompts: dict[str, str]  # every prompt the config sends, name -> sha256 (as a run records)
    config: RunConfig  # completed as a run's config.json holds it
    seconds: float

    @property
    def ranking(self) -> list[tuple[str, float]]:
        """The final ranking: the last stage's."""
        return self.stages[-1].ranking

    @property
    def metrics(self) -> dict[str, float] | None:
        """The final ranking's figures (nDCG@10, ...), None without qrels for the query."""
        return self.stages[-1].metrics

    @property
    def error(self) -> str | None:
        return next((s.error for s in self.stages if s.error), None)

    @property
    def steps(self) -> list[dict[str, Any]]:
        """Every stage's steps, in order, each with its ``stage`` name added."""
        return [{"stage": s.name, **step} for s in self.stages for step in s.steps]

    @property
    def calls(self) -> list[dict[str, Any]]:
        """Every LLM call of every stage (see `StageResult.calls`), with its ``stage``."""
        return [step for step in self.steps if "usage" in step]

    @property
    def generated(self) -> dict[str, str]:
        """The texts the agent generated (a HyDE passage, a rewrite, ...), by name."""
        return dict(self.stages[0].record.get("generated", {}))

    @property
    def usage(self) -> Usage:
        return Usage.total(s.usage for s in self.stages)


def run_query(
    config: RunConfig,
    query_id: str | None = None,
    *,
    text: str | None = None,
    task: str | None = None,
    progress: bool = False,
) -> QueryResult:
    """Run ``config``'s agent and rerank stages on one query and return what happened.

    ``query_id`` names a query of the task (every query of it, whatever ``config.limit``);
    ``text`` is a query of your own (with ``query_id`` too, that query's qrels score it).
    ``task`` picks one task when ``config.dataset`` names several. Refusals are the run's
    (`RunError`, `eval.datasets.DataError`, `prompts.PromptError`: one-line ValueErrors).
    A query's own failure is not raised: it is the result's ``error``, as a run records it.
    """
    return run_sync(arun_query(config, query_id, text=text, task=task, progress=progress))


async def arun_query(
    config: RunConfig,
    query_id: str | None = None,
    *,
    text: str | None = None,
    task: str | None = None,
    progress: bool = False,
) -> QueryResult:
    """`run_query` on the running event loop: ``await arun_query(...)`` in a notebook."""
    started = time.perf_counter()
    if query_id is None and text is None:
        raise RunError("run_query: give a query id of the task, or text=, a query of your own")
    if config.source_run:
        raise RunError(
            "run_query does not rerank a finished run (source_run); give its stage's run.trec "
            "as run_file instead"
        )
    plan = prepare(config)
    warn_unsent(plan)
    tp = _task_plan(plan, task)
    qid, query = _the_query(tp, query_id, text)
    stages = await _stages(plan, tp, qid, query, progress)
    prompts = dict(plan.config.recorded.prompts)
    return QueryResult(qid, query, tp.folder, stages, prompts, plan.config,
                       round(time.perf_counter() - started, 3))  # fmt: skip


async def _stages(
    plan: Plan, tp: TaskPlan, qid: str, query: str, progress: bool
) -> list[StageResult]:
    """The query's record at each stage, as `agents.execution.whole_run.run_task` makes them."""
    if tp.run_file is not None:
        if qid not in tp.run_file.lists:
            raise RunError(f"query {qid}: the run file {tp.run_file.path} does not rank it")
        [record] = first_stage_records(tp.run_file, {qid: query})
    else:
        graph, _ = agent_graph(plan, tp, progress)
        record = await run_one(graph, qid, query)
    qrels = tp.task.qrels.get(qid)
    stages = [_stage(plan, tp, runs.AGENT_STAGE, record, qrels)]
    for i, stage_config in enumerate(plan.config.rerank, 1):
        if record["error"]:  # a failed query has no ranking to rerank, as in a run
            break
        record = await run_one(stage_graph(plan, tp, i, stage_config, {qid: record}), qid, query)
        stages.append(_stage(plan, tp, runs.stage_dir_name(i, stage_config.kind), record, qrels))
    return stages


def _stage(
    plan: Plan, tp: TaskPlan, name: str, record: dict[str, Any], qrels: dict[str, int] | None
) -> StageResult:
    ranking = [(doc, score) for doc, score in record["ranking"]]
    metrics = None
    if qrels is not None:
        config, qid = plan.config, record["query_id"]
        ranked = {} if record["error"] else {qid: dict(ranking)}
        scored = evaluate_run({qid: qrels}, final_run(ranked, tp.task, config),
                          missing=config.eval.missing, ties=config.eval.ties)  # fmt: skip
        metrics = scored.per_query.get(qid)
    return StageResult(name, ranking, list(record["steps"]), Usage.from_dict(record["usage"]),
                       metrics, record["error"], record)  # fmt: skip


def _task_plan(plan: Plan, task: str | None) -> TaskPlan:
    names = [tp.folder for tp in plan.tasks]
    if task is None:
        if len(plan.tasks) > 1:
            raise RunError(f"--dataset names {len(names)} tasks; pick one with task= "
                           f"({', '.join(names)})")  # fmt: skip
        return plan.tasks[0]
    found = [tp for tp in plan.tasks if task in (tp.folder, tp.task.name)]
    if len(found) != 1:
        raise RunError(f"task {task!r}: not one of the run's tasks ({', '.join(names)})")
    return found[0]


def _the_query(tp: TaskPlan, query_id: str | None, text: str | None) -> tuple[str, str]:
    queries = tp.task.queries
    if query_id is not None and query_id not in queries:
        ids = list(queries)
        shown = ", ".join(ids[:3]) + (f", ... {ids[-1]}" if len(ids) > 3 else "")
        raise RunError(f"query {query_id!r}: not a query of task {tp.task.name} "
                       f"({len(ids)} queries: {shown})")  # fmt: skip
    if text is not None:
        if not text.strip():
            raise RunError("text: an empty query")
        return query_id or TEXT_QUERY_ID, text
    assert query_id is not None
    return query_id, queries[query_id]
