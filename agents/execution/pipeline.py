"""A run's agent and rerank stages over one task, prepared once, for queries of any text.

`Pipeline.open(config)` prepares the run of ``config`` as `agents.execution.whole_run.run_dataset`
does (`agents.execution.plan.prepare`: the same checks, prompts, sampling, LLM clients and
response cache), builds the agent's graph over the task's corpus once, and then ranks whatever
queries it is given through the same graph and stage code as a run (`run_one`, `stage_graph`).
This is what the integrations call (LangChain, LlamaIndex, MTEB's search protocol:
`agents.integrations`): a corpus another tool hands over is a `Task` held in memory
(``task=``), and a plain retriever is the ``none`` agent (`Pipeline.retriever`).

Nothing is written but the caches (index, embeddings, LLM responses): a second identical
question costs nothing and gets the same ranking.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agents.config.run_config import RunConfig
from agents.execution.loop import run_sync
from agents.execution.one_query import TEXT_QUERY_ID
from agents.execution.plan import Plan, RunError, TaskPlan, prepare
from agents.execution.task_queries import run_one
from agents.execution.whole_run import agent_graph, query_concurrency, stage_graph, warn_unsent
from eval.datasets import Task
from eval.plumbing.progress import progress_bar
from retrievers.config import RetrieverConfig

log = logging.getLogger(__name__)

Ranking = list[tuple[str, float]]  # (doc id, score), best first


class QueryFailed(RuntimeError):
    """A query the pipeline could not rank (the agent's or a stage's recorded failure)."""


@dataclass
class Pipeline:
    plan: Plan
    task_plan: TaskPlan
    _graph: Any = field(default=None, repr=False)

    @classmethod
    def open(cls, config: RunConfig, *, task: Task | None = None) -> Pipeline:
        """``config``'s agent and stages over ``task`` (in memory), or over ``config.dataset``'s
        one task. Refusals are the run's: one-line ValueErrors, before any model is called."""
        if config.source_run or config.run_file:
            raise RunError("a pipeline ranks new queries: source_run and run_file rerank a "
                           "finished run's lists; give an agent instead")  # fmt: skip
        plan = prepare(config, tasks=None if task is None else [task])
        if len(plan.tasks) != 1:
            names = ", ".join(tp.folder for tp in plan.tasks)
            raise RunError(f"--dataset names {len(plan.tasks)} tasks ({names}); a pipeline "
                           "searches one: name one task")  # fmt: skip
        warn_unsent(plan)
        return cls(plan, plan.tasks[0])

    @classmethod
    def retriever(
        cls,
        spec: str | RetrieverConfig,
        *,
        dataset: str = "demo",
        task: Task | None = None,
        depth: int | None = None,
        cache_dir: str | None = None,
    ) -> Pipeline:
        """A retriever spec alone (``"bm25"``, ``"dense:<model>"``, ``"bm25+dense"``, ...): the
        ``none`` agent, which sends the raw query to it; no LLM is called."""
        config = retriever_run(spec, dataset=dataset, depth=depth, cache_dir=cache_dir)
        return cls.open(config, task=task)

    @property
    def config(self) -> RunConfig:
        return self.plan.config

    @property
    def corpus(self) -> dict[str, str]:
        """doc id -> the text the retrievers index."""
        return self.task_plan.task.corpus

    @property
    def name(self) -> str:
        """The run name a run of the config gets (agent, retriever, stages)."""
        return self.plan.run_dir.name

    def search(self, query: str, k: int | None = None) -> Ranking:
        """The final ranking of one query of your own (top ``k``; all the run keeps without)."""
        return run_sync(self.asearch(query, k))

    async def asearch(self, query: str, k: int | None = None) -> Ranking:
        if not isinstance(query, str) or not query.strip():
            raise RunError(f"query: an empty query ({query!r})")
        check_k(k)
        [(ranking, error)] = (await self._rank({TEXT_QUERY_ID: query}, progress=False)).values()
        if error:
            raise QueryFailed(f"query {query[:60]!r}: {error}")
        return ranking[:k]

    def search_many(
        self, queries: Mapping[str, str], k: int | None = None, progress: bool = True
    ) -> dict[str, Ranking]:
        """``{query id: final ranking}`` for ``{query id: text}``, run concurrently as a run
        runs them. A query that fails gets an empty ranking and one warning line (a run's
        record of it would say the same); the others are kept."""
        return run_sync(self.asearch_many(queries, k, progress))

    async def asearch_many(
        self, queries: Mapping[str, str], k: int | None = None, progress: bool = True
    ) -> dict[str, Ranking]:
        check_k(k)
        ranked = await self._rank(dict(queries), progress)
        out = {}
        for qid, (ranking, error) in ranked.items():
            if error:
                log.warning("query %s failed: %s", qid, error)
            out[qid] = ranking[:k]
        return out

    async def _rank(
        self, queries: dict[str, str], progress: bool
    ) -> dict[str, tuple[Ranking, str | None]]:
        plan, tp = self.plan, self.task_plan
        if self._graph is None:  # the retriever is built (or read from its cache) once
            self._graph, _ = agent_graph(plan, tp, progress)
        concurrency = query_concurrency(plan.config)
        label = f"{tp.task.name} [{plan.config.agent}]"
        records = await _run_all(self._graph, queries, concurrency, progress, label)
        for i, stage_config in enumerate(plan.config.rerank, 1):
            graph = stage_graph(plan, tp, i, stage_config, records)
            label = f"{tp.task.name} [{stage_config.kind}]"
            reranked = await _run_all(graph, {q: queries[q] for q in graph.rankings},
                                      concurrency, progress, label)  # fmt: skip
            records = {**records, **reranked}
        return {
            qid: ([(doc, score) for doc, score in r["ranking"]], r["error"])
            for qid, r in records.items()
        }


def retriever_run(
    spec: str | RetrieverConfig,
    *,
    dataset: str = "demo",
    depth: int | None = None,
    cache_dir: str | None = None,
) -> RunConfig:
    """The run of a retriever alone: the ``none`` agent, no LLM; ``depth`` the documents kept
    per query (the run's default without)."""
    retriever = spec if isinstance(spec, RetrieverConfig) else RetrieverConfig(spec=spec)
    config = RunConfig(agent="none", dataset=dataset, retriever=retriever, llm=None,
                       cache_dir=cache_dir)  # fmt: skip
    if depth is None:
        return config
    return dataclasses.replace(config, eval=dataclasses.replace(config.eval, depth=depth))


def check_k(k: int | None) -> None:
    """``k``, the documents a search returns: a positive whole number, or None (all kept)."""
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
        raise RunError(f"k: a positive number of documents, not {k!r}")


async def _run_all(
    graph: Any, queries: dict[str, str], concurrency: int, progress: bool, label: str
) -> dict[str, dict[str, Any]]:
    """Every query's record through ``graph``, ``concurrency`` at a time, in ``queries``' order."""
    sem = asyncio.Semaphore(max(1, concurrency))
    bar = progress_bar(total=len(queries), desc=label, disable=not progress or len(queries) < 2,
                       file=sys.stderr, unit="q")  # fmt: skip

    async def one(qid: str) -> dict[str, Any]:
        async with sem:
            record = await run_one(graph, qid, queries[qid])
        bar.update(1)
        return record

    try:
        records = await asyncio.gather(*(one(q) for q in queries))
    finally:
        bar.close()
    return dict(zip(queries, records, strict=True))
