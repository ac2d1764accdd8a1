"""A task's summary, the ``metrics.json`` of its folder, as a typed value.

The run's writer (`agents.execution.whole_run`) makes one per task when the task ends, and everyone
who shows a task (the printed line, `eval.compare`, the final stage's folder) reads it back
through `eval.runs.TaskFolder.summary`. The keys every task has are typed fields, in the
order ``metrics.json`` holds them; the keys only some tasks have (a rerank stage's reply
outcomes, replayed generations, a run file, a source run, the no-LLM baseline) are optional
fields written only when set; a key this version does not know is kept in ``extra`` so that a
summary read and written again loses nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, get_type_hints

from eval.plumbing.argtypes import type_problem
from eval.plumbing.quoting import quoted

AGENT_STAGE = "agent"  # the name the first stage goes by in a task's "stages"


@dataclass(frozen=True)
class TaskSummary:
    """What a finished task's ``metrics.json`` says; ``metrics`` are its final stage's."""

    task: str = ""
    notes: list[str] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)
    averaging: str = ""  # how the means were taken (`eval.evaluate.Evaluation.describe`)
    queries: int = 0
    failed: int = 0
    failures: dict[str, str] = field(default_factory=dict)  # query id -> its error
    usage: dict[str, Any] = field(default_factory=dict)  # `eval.usage.Usage.to_dict`
    searches_per_query: float = 0.0
    seconds: float = 0.0
    data: dict[str, str] = field(default_factory=dict)  # the task's data fingerprint
    stages: dict[str, dict[str, float]] = field(default_factory=dict)  # stage -> its metrics
    final_stage: str = AGENT_STAGE  # the stage folder whose ranking the metrics are of
    # only some tasks have these; None: absent from metrics.json
    outcomes: dict[str, dict[str, int]] | None = None  # stage folder -> how replies were read
    generations: dict[str, Any] | None = None  # the replayed texts' source
    run_file: dict[str, Any] | None = None  # the run file the first stage read
    source_run: str | None = None  # the finished run whose first stage this one reranked
    bm25_baseline: dict[str, float] | None = None  # the headline metric without an LLM
    extra: dict[str, Any] = field(default_factory=dict)  # keys this version does not know

    def to_dict(self) -> dict[str, Any]:
        """The summary as ``metrics.json`` holds it: typed keys in order, then the others."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        out = {k: v for k, v in out.items() if v is not None or k not in _OPTIONAL}
        return {**out, **self.extra}

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> TaskSummary:
        """A summary from ``metrics.json``; a key that an older version did not write (or
        wrote null) reads as its field's default. ValueError naming the field when a value
        is not of its field's type (``"metrics": [1]``)."""
        known = {f.name for f in fields(cls)} - {"extra"}
        typed = {k: v for k, v in values.items() if k in known and v is not None}
        # a stage's outcomes are its own to shape: only that they are a table is checked
        hints = {**get_type_hints(cls), "outcomes": dict[str, Any]}
        for name, value in typed.items():  # what readers use must be what the writer wrote
            if (expected := type_problem(value, hints[name])) is not None:
                raise ValueError(f"field {name!r}: expected {expected}, got {quoted(value)}")
        return cls(**typed, extra={k: v for k, v in values.items() if k not in known})


_OPTIONAL = ("outcomes", "generations", "run_file", "source_run", "bm25_baseline")
