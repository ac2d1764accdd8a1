"""A run's LLM bill before it is paid: calls, tokens and cost per task and stage, no model called.

    python -m agents.run --agent search-o1 --dataset demo --dry-run

The run is prepared as for real (`agents.execution.plan.prepare`: the same checks, prompts and
sampling), then its own graphs and rerank stages run over every query with a worst-case model behind
the one LLM client (`agents.llm.dry`) and a retriever that returns the corpus's longest documents:
every completion as long as its ``max_tokens`` allows, every search the agent may make (the
agent's ``worst_case`` hook, in its own module), every limit reached. A call whose prompt
outgrows the model's context is counted as filling it, and the graph goes on. A figure is
``measured`` instead where the run folder of this very configuration (its config.json binds
the same settings) holds records for the stage: the mean usage of its answered queries, a
cached call counting as the call it stands for. Cost comes from litellm's local price map;
local, self-hosted and unknown models have none. Nothing is written: no run folder, cache
entry or joined model file. With ``progress``, what it is doing is shown on stderr as it goes
(preparing the run on a terminal, then a bar per stage with the calls and tokens counted).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.config.binding import binding
from agents.config.registry import STAGES
from agents.config.run_config import RunConfig
from agents.config.serialise import from_dict
from agents.execution.loop import run_sync
from agents.execution.plan import Plan, TaskPlan, prepare
from agents.execution.task_queries import ranking_of
from agents.llm.dry import DryModel, Tally
from agents.llm.tokens import price
from eval import runs
from eval.datasets import default_cache_dir
from eval.plumbing.progress import progress_bar, transient
from eval.usage import Usage

MEASURED, WORST_CASE, NO_LLM = "measured", "worst case", "no LLM"


@dataclass
class StageEstimate:
    """One stage of one task: figures per query, over all of the task's queries."""

    name: str  # "agent" or the stage's folder, "rerank-1-llm-listwise"
    kind: str
    model: str | None  # None: the stage calls no model
    queries: int
    calls: float = 0.0  # per query, as are the tokens
    prompt_tokens: float = 0.0
    completion_tokens: float = 0.0
    source: str = NO_LLM
    measured_queries: int = 0
    notes: list[str] = field(default_factory=list)
    cost: float | None = 0.0  # USD for all its queries; None when the model has no price

    def total(self, what: str) -> float:
        return getattr(self, what) * self.queries


@dataclass
class Estimate:
    run_dir: Path  # where the run would go (never created here)
    state: str  # "new", "measured" (same configuration) or "other" (another one is there)
    stages: list[tuple[str, StageEstimate]]  # (task folder, stage)
    tokenizers: dict[str, str]  # model -> how its tokens were counted
    notes: list[str] = field(default_factory=list)

    def total(self, what: str) -> float:
        return sum(s.total(what) for _, s in self.stages)

    @property
    def cost(self) -> float | None:
        """USD for the whole run; None when a model it pays for has no price."""
        costs = [s.cost for _, s in self.stages if s.calls]
        return None if None in costs else float(sum(costs))  # type: ignore[arg-type]

    @property
    def unpriced(self) -> list[str]:
        return list(dict.fromkeys(m for _, s in self.stages
                                  if s.calls and s.cost is None and (m := s.model)))  # fmt: skip


@dataclass
class LongestDocuments:
    """The dry run's retriever: whatever is asked, the corpus's longest documents first."""

    order: list[str]
    name: str = "longest documents (dry run)"

    @classmethod
    def of(cls, corpus: Mapping[str, str]) -> LongestDocuments:
        return cls(sorted(corpus, key=lambda d: (-len(corpus[d]), d)))

    def search(self, request: Any, k: int = 100) -> dict[str, float]:
        return {d: float(k - i) for i, d in enumerate(self.order[:k])}


def estimate(config: RunConfig, progress: bool = False) -> Estimate:
    """What a fresh run of ``config`` would cost; bad input is refused with the run's own
    one-line errors (ValueErrors) first. ``progress``: say on stderr what it is doing."""
    dry = DryModel(Path(config.cache_dir or default_cache_dir()).expanduser())
    try:
        # taken back when done: a refusal is still the one line printed
        with transient("dry run: checking the run and loading its LLM stack ...", progress):
            plan = prepare(config, dry=dry)
            state = run_state(plan)
        stages = run_sync(_estimate(plan, dry, state == MEASURED, progress))
        tokenizers = dry.tokenizers()
    finally:
        dry.close()
    notes = []
    if "api:" in plan.config.retriever.spec:
        notes.append("the embedding API's calls (retriever api:...) are not counted")
    if plan.config.source_run:
        notes.append(f"the agent's lists are copied from {plan.config.source_run}: no agent calls")
    return Estimate(plan.run_dir, "new" if state is None else state, stages, tokenizers, notes)


def run_state(plan: Plan) -> str | None:
    """None: no run folder yet; MEASURED: it holds this configuration; "other" otherwise."""
    try:
        saved = from_dict(runs.RunFolder(plan.run_dir).config())
    except FileNotFoundError:
        return None
    except (ValueError, TypeError):
        return "other"
    # what only a run asks of its servers is taken as the folder says
    kept = saved.recorded
    mine = plan.config.with_recorded(chat_template_sha256=kept.chat_template_sha256,
                                     generation_sha256=kept.generation_sha256)  # fmt: skip
    return MEASURED if binding(saved) == binding(mine) else "other"


async def _estimate(
    plan: Plan, dry: DryModel, measured: bool, progress: bool = False
) -> list[tuple[str, StageEstimate]]:
    out = []
    for tp in plan.tasks:
        task_dir = plan.run_dir / tp.folder if measured else None
        out += [(tp.folder, s) for s in await _task(plan, tp, dry, task_dir, progress)]
    return out


async def _task(
    plan: Plan, tp: TaskPlan, dry: DryModel, task_dir: Path | None, progress: bool = False
) -> list[StageEstimate]:
    """Each stage in turn, on the lists the stage before it made: the run's own where its
    records hold them, else the dry run's (the longest documents)."""
    config, n = plan.config, len(tp.queries)
    stub = LongestDocuments.of(tp.task.corpus)
    dry.documents = stub.order
    depth = min(config.eval.depth or len(stub.order), len(stub.order))
    lists = {q: stub.search(None, depth) for q in tp.queries}
    agent = StageEstimate(runs.AGENT_STAGE, config.agent, None, n)
    calls_llm = not config.source_run and config.agent_calls_llm and config.llm is not None
    graph = plan.spec.build_graph(plan.agent_context(tp, stub, stub)) if calls_llm else None
    if graph is not None:
        agent.model = config.llm.model  # type: ignore[union-attr]
    tally = dry.begin(plan.spec.worst_case, config.options)
    lists = await _stage(agent, task_dir, tp, tally, graph and functools.partial(_invoke, graph),
                         lists, progress)  # fmt: skip
    stages = [agent]
    for i, stage_config in enumerate(config.rerank, 1):
        spec = STAGES[stage_config.kind]
        name = runs.stage_dir_name(i, stage_config.kind)
        stage = StageEstimate(name, stage_config.kind, None, n)
        stages.append(stage)
        rerank = None
        if spec.uses_llm:  # the others call no model (and may load one to build)
            stage.model = config.stage_llm(stage_config)[0]
            rerank = spec.build(plan.stage_context(tp, i, stage_config, lists)).rerank
        tally = dry.begin(spec.worst_case, stage_config.options)
        lists = await _stage(stage, task_dir / name if task_dir else None, tp, tally, rerank,
                             lists, progress)  # fmt: skip
    for stage in stages:
        stage.cost = _cost(stage)
    return stages


async def _invoke(graph: Any, query_id: str, query: str, _: Any) -> dict[str, Any]:
    return await graph.ainvoke({"query_id": query_id, "query": query})


async def _stage(
    stage: StageEstimate,
    stage_dir: Path | None,
    tp: TaskPlan,
    tally: Tally,
    answer: Any,
    lists: dict[str, dict[str, float]],
    progress: bool = False,
) -> dict[str, dict[str, float]]:
    """Measure the stage from its records, or count it by answering every query (``answer``:
    None for a stage that calls no model); the lists it hands on."""
    found = (
        {}
        if stage_dir is None
        else runs.StageFolder(stage_dir).records(fields=("query_id", "usage", "error", "ranking"))
    )
    records = {q: r for q, r in found.items() if q in tp.queries and not r.get("error")}
    if records and stage.model is not None:  # the run's own records say what its queries cost
        usages = [Usage.from_dict(r.get("usage")) for r in records.values()]
        _per_query(
            stage,
            len(usages),
            sum(u.calls for u in usages),
            sum(u.prompt_tokens for u in usages),
            sum(u.completion_tokens for u in usages),
        )
        stage.source, stage.measured_queries = MEASURED, len(records)
        if len(records) < stage.queries:
            stage.notes.append(f"mean of the {len(records)} of {stage.queries} queries "
                               "answered so far")  # fmt: skip
    elif answer is not None:
        out = {}
        label = stage.kind if stage.name == runs.AGENT_STAGE else stage.name
        bar = None
        for query_id, text in tp.queries.items():
            out[query_id] = (await answer(query_id, text, lists[query_id]))["ranking"]
            if bar is None:  # after the first query: a refusal at its first call is one line
                bar = progress_bar(total=len(tp.queries), desc=f"dry run {tp.folder} [{label}]",
                                   unit="q", leave=False, disable=not progress)  # fmt: skip
            # the worst-case calls answered and their prompts tokenized so far
            bar.set_postfix_str(f"{tally.calls:,} calls, {tally.prompt_tokens:,} prompt tok "
                                "counted", refresh=False)  # fmt: skip
            bar.update(1)
        if bar is not None:
            bar.close()
        _per_query(stage, len(tp.queries), tally.calls, tally.prompt_tokens,
                   tally.completion_tokens)  # fmt: skip
        stage.source = WORST_CASE
        if tally.overflows:
            stage.notes.append(f"{tally.overflows} calls' prompts outgrow the model's context: "
                               "each counted as filling it (a trajectory that read less makes "
                               "them)")  # fmt: skip
        if tally.unbudgeted:
            stage.notes.append("no max_tokens and no known context: completions counted as 0")
        lists = out
    return {**lists, **{q: ranking_of(r) for q, r in records.items()}}


def _per_query(stage: StageEstimate, n: int, calls: int, prompt: int, completion: int) -> None:
    n = max(1, n)
    stage.calls, stage.prompt_tokens = calls / n, prompt / n
    stage.completion_tokens = completion / n


def _cost(stage: StageEstimate) -> float | None:
    if stage.model is None or not stage.calls:
        return 0.0
    return price(stage.model, round(stage.total("prompt_tokens")),
                 round(stage.total("completion_tokens")))  # fmt: skip


def format_estimate(est: Estimate) -> str:
    """The estimate as lines to print: a header, one row per task and stage, the totals."""
    state = {
        "new": "no run folder yet: the worst case, from the run's own graphs",
        MEASURED: "a run of this configuration is there: measured where it has records",
        "other": "it holds another configuration: the worst case, from the run's own graphs",
    }[est.state]
    lines = [f"dry run (no model called): {est.run_dir}", f"  {state}"]
    header = ("task", "stage", "queries", "calls/q", "prompt tok/q", "completion tok/q", "source")
    rows, notes = [header], []
    for folder, s in est.stages:
        label = s.kind if s.name == runs.AGENT_STAGE else s.name
        notes += [f"{label}: {note}" for note in s.notes]
        if s.model is None:
            rows.append((folder, label, str(s.queries), "0", "-", "-", NO_LLM))
            continue
        source = f"measured ({s.measured_queries} q)" if s.source == MEASURED else s.source
        rows.append((folder, label, str(s.queries), _number(s.calls, 1),
                     _number(s.prompt_tokens), _number(s.completion_tokens), source))  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for row in rows:
        cells = [c.rjust(w) if 2 <= i <= 5 else c.ljust(w)
                 for i, (c, w) in enumerate(zip(row, widths, strict=True))]  # fmt: skip
        lines.append("  " + "  ".join(cells).rstrip())
    lines += [f"  note: {note}" for note in [*dict.fromkeys(notes), *est.notes]]
    lines += [f"  tokens of {model}: {how}" for model, how in est.tokenizers.items()]
    cost = est.cost
    # a model with no price (local, self-hosted, unknown) is n/a, as eval.compare's cell; the
    # priced stages beside it are a lower bound
    part = sum(s.cost or 0.0 for _, s in est.stages if s.calls)
    priced = usd(cost) if cost is not None else (
        f"{f'>= {usd(part)};' if part > 0 else 'n/a:'} not in litellm's price map "
        f"({', '.join(est.unpriced)})")  # fmt: skip
    lines.append(
        f"total: {_number(est.total('calls'))} LLM calls, {_number(est.total('prompt_tokens'))} "
        f"prompt + {_number(est.total('completion_tokens'))} completion tokens; cost: {priced}"
    )
    return "\n".join(lines)


def usd(cost: float) -> str:
    """A cost as printed: cents for a dollar or more, else four significant figures."""
    if cost >= 1 or cost <= 0:
        return f"USD {cost:,.2f}"
    return f"USD {cost:.{3 - math.floor(math.log10(cost))}f}"


def _number(value: float, decimals: int = 0) -> str:
    if decimals and value != round(value):
        return f"{value:,.{decimals}f}"
    return f"{round(value):,}"
