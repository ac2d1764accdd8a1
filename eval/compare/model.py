"""What a comparison is made of: runs as read, and what is computed from them.

Plain data; the reading is `eval.compare.reading`, the computing `eval.compare.comparison`,
and every renderer (markdown, files, charts, report.html) reads these and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eval.references.model import Reference
from eval.runs import RunQrels
from eval.significance import PairedTest
from eval.task_summary import TaskSummary
from eval.usage import Usage


class CompareError(ValueError):
    """Runs that cannot be compared; the message says which run and why."""


@dataclass(frozen=True)
class TaskFiles:
    """What one task folder of a run holds, read once; scores are its final stage's."""

    per_query: dict[str, dict[str, float]]  # per_query.jsonl ({} if absent)
    summary: TaskSummary | None  # the task's metrics.json (None if absent or damaged)
    # queries.jsonl without steps: per query, the record of the latest stage that has one
    records: dict[str, dict[str, Any]]
    usage: dict[str, Usage]  # per query, summed over every stage up to the final one
    run_trec: Path
    summary_damaged: bool = False
    stages: int = 0  # rerank stages up to the final one (0: the agent's ranking is final)


@dataclass(frozen=True)
class RunData:
    path: Path
    label: str  # the one the run stored, else its folder's name (see `eval.runs.RunFolder.info`)
    config: dict[str, Any]
    tasks: dict[str, TaskFiles]
    llm_free: bool | None = None  # as the run stored it; None: not stored (an older folder)
    unscored: tuple[str, ...] = ()  # task folders with neither per_query.jsonl nor run.trec

    @property
    def reranked(self) -> bool:
        return any(files.stages for files in self.tasks.values())


@dataclass(frozen=True)
class Delta:
    """A run against the baseline on one task (or "Overall"), over the shared queries."""

    n: int
    wins: int
    ties: int
    losses: int
    baseline: float  # mean of the baseline's scores
    value: float  # mean of this run's scores
    p_value: float | None  # None where the test has none (too few queries): `p_reason`
    p_reason: str = ""

    def p_text(self, spec: str = ".3g") -> str:
        """The p-value as ``spec`` formats it, or ``n/a (why)``."""
        return PairedTest(self.p_value, self.p_reason).text(spec)

    @property
    def significant(self) -> bool:
        return PairedTest(self.p_value, self.p_reason).significant

    @property
    def delta(self) -> float:
        return self.value - self.baseline


@dataclass(frozen=True)
class Mover:
    task: str
    query_id: str
    baseline: float
    value: float
    text: str

    @property
    def delta(self) -> float:
        return self.value - self.baseline


@dataclass(frozen=True)
class Cost:
    """LLM usage of a run over the compared tasks, summed from its per-query records.

    ``total_cost`` is the run's cost by ``Usage.add``: None (unknown) as soon as one call
    could not be priced. Of the queries that made a call not answered from the cache,
    ``priced`` could be priced and ``unpriced`` could not; ``cost`` sums the priced ones:
    equal to ``total_cost`` when none was unpriced, else a lower bound. A query whose calls
    were all cached paid nothing this time (its tokens still count) and says nothing of
    whether its model is priced. ``wall_s`` is the time of each task's last (resumed)
    execution, from metrics.json.
    """

    queries: int
    calls: int
    cached_calls: int
    prompt_tokens: int
    completion_tokens: int
    cost: float
    priced: int
    llm_s: float
    wall_s: float
    failed: int
    total_cost: float | None = 0.0
    unpriced: int = 0

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @property
    def cost_known(self) -> bool:
        return self.total_cost is not None

    def cost_text(self) -> str:
        """The cost cell: ``$0`` when nothing was paid, ``n/a`` when the model is not priced
        (a local, self-hosted or unknown model), a lower bound when only some queries were."""
        if self.unpriced == 0:
            return "$0" if self.cost == 0 else f"${self.cost:.4f}"
        if self.priced == 0:
            return "n/a"
        paid = self.priced + self.unpriced
        return f">= ${self.cost:.4f} ({self.priced}/{paid} queries priced)"


@dataclass(frozen=True)
class Published:
    """A published row beside the runs: its figure for the metric on each compared task it
    reports, and each run's difference from it (run − paper) per task and on "Avg", the mean
    over those same tasks on both sides."""

    reference: Reference
    figures: dict[str, float]  # compared task -> the paper's value
    differences: dict[str, dict[str, float]]  # run label -> task or "Avg" -> run − paper

    @property
    def label(self) -> str:
        return self.reference.label

    @property
    def avg(self) -> float | None:
        """The paper's mean over the compared tasks it reports (None when it reports none)."""
        return sum(self.figures.values()) / len(self.figures) if self.figures else None


@dataclass
class Comparison:
    metric: str
    test: str
    labels: list[str]  # in the order given; the baseline is labels[baseline_index]
    baseline: str
    tasks: list[str]  # compared tasks, R2MED order first
    runs: dict[str, RunData]
    scores: dict[str, dict[str, dict[str, float]]]  # label -> task -> query -> value
    means: dict[str, dict[str, float]]  # label -> task -> mean, rounded as metrics.json
    deltas: dict[str, dict[str, Delta]]  # label -> task or "Overall" -> Delta
    movers: dict[str, tuple[list[Mover], list[Mover]]]  # label -> (most up, most down)
    costs: dict[str, Cost]
    notes: list[str] = field(default_factory=list)
    # the qrels the comparison used (and loaded), for the HTML report's relevance marks
    qrels: RunQrels = field(default_factory=RunQrels, repr=False, compare=False)
    published: list[Published] = field(default_factory=list)  # --reference rows, in order

    def avg(self, label: str) -> float:
        values = [self.means[label][t] for t in self.tasks]
        return sum(values) / len(values) if values else 0.0


def leaderboard_rows(c: Comparison) -> dict[str, dict[str, float]]:
    """The runs' means by task, then each published row's figures (the tasks it reports)."""
    rows = {label: dict(c.means[label]) for label in c.labels}
    return rows | {p.label: dict(p.figures) for p in c.published}


def reference_run(c: Comparison) -> str:
    """The run the charts mark as the no-LLM baseline: the baseline when no LLM had a part in
    its ranking, else the first such run (ones without rerank stages first), else the
    baseline. A folder that stored no word on it counts as LLM-free when its records show no
    LLM call."""

    def llm_free(label: str) -> bool:
        stored = c.runs[label].llm_free
        return stored if stored is not None else c.costs[label].calls == 0

    if llm_free(c.baseline):
        return c.baseline
    candidates = [k for k in c.labels if llm_free(k)]
    candidates.sort(key=lambda k: c.runs[k].reranked)  # stable: keeps the order given
    return candidates[0] if candidates else c.baseline
