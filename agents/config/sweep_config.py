"""What a sweep is, as typed values: its file's tables checked (`Sweep`), a first stage read
from a TREC run file (`RunFile`), and the error a bad sweep file raises (`SweepError`).

Read from the file by agents.config.sweep_file; expanded into cells by agents.config.sweep_grid.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# options only an agent takes: a run file's cell has none, and they are checked on an agent
AGENT_ONLY = {"option", "final_ranking", "max_searches", "max_turns", "top_k"}
RUN_KEYS = {"quiet": bool, "overwrite": bool}  # how to run, not what: not in the config


class SweepError(ValueError):
    """A bad sweep config; the message names the file and the key."""


@dataclass(frozen=True)
class RunFile:
    """A first stage read from a TREC run file: the file (resolved) and the task it ranks."""

    file: str
    dataset: str
    duplicates: str = "refuse"  # a (qid, docid) pair listed twice: refused, or kept at its max
    order: str = "score"  # its documents in trec_eval's order, or as the file lists them


@dataclass
class Sweep:
    path: Path  # the config file
    output: Path
    cache_dir: Path
    agents: list[str]
    retrievers: list[str]
    models: list[str]
    datasets: list[str]
    prompts: dict[str, dict[str, Path]]  # variant -> {prompt name: file}
    options: dict[str, Any]
    # rerank chains, each a list of --rerank specs applied in order; [] reranks nothing
    reranks: list[list[str]] = field(default_factory=lambda: [[]])
    compare: dict[str, Any] = field(default_factory=dict)
    # first stages read from TREC run files, each reranked by every chain
    run_files: list[RunFile] = field(default_factory=list)
    # [ray]: the cluster's address (None: run locally), the resources every cell asks for,
    # and per cell-name pattern (fnmatch) what some ask for instead
    ray: str | None = None
    resources: dict[str, Any] = field(default_factory=dict)
    cell_resources: dict[str, dict[str, Any]] = field(default_factory=dict)

    def resources_of(self, cell: str) -> dict[str, Any]:
        """What ``cell`` asks of the cluster: the last pattern matching it wins."""
        asked = dict(self.resources)
        for pattern, table in self.cell_resources.items():
            if fnmatch.fnmatchcase(cell, pattern):
                asked.update(table)
        return asked
