"""What a server holds for each task: its retriever and the fingerprint of that index.

The fingerprint names the corpus (the task's corpus fingerprint, as a run folder records it),
the retriever spec with a hash of all its settings, and this package's version: `/health`
reports it, and a run with ``--retriever remote:`` checks the corpus and binds to the rest.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from eval.datasets import Task, task_fingerprint
from retrievers.base import Retriever
from retrievers.config import RetrieverConfig
from retrievers.search import build_retriever


def package_version() -> str:
    try:
        return version("r2med-agents")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


@dataclass
class ServedIndex:
    task: Task
    retriever: Retriever
    fingerprint: dict[str, str]

    @property
    def corpus(self) -> Mapping[str, str]:
        return self.task.corpus


def fingerprint(task: Task, config: RetrieverConfig) -> dict[str, str]:
    data = config.to_dict()
    if data["dense"]["r2med_rules"] is None:  # unset: the hash it had before the setting
        del data["dense"]["r2med_rules"]
    if data["fusion"]["method"] != "diver-minmax":  # its settings alone: the hash as before
        del data["fusion"]["weight"], data["fusion"]["keep"]
    settings = json.dumps(data, sort_keys=True, default=str)
    return {
        "corpus": task_fingerprint(task)["corpus"],
        "retriever": config.spec,
        "settings": hashlib.sha256(settings.encode()).hexdigest()[:16],
        "version": package_version(),
    }


def build_indexes(
    config: RetrieverConfig,
    tasks: list[Task],
    cache_dir: Path | None,
    progress: bool = True,
    transport: Mapping[str, Any] | None = None,
    ray: str | None = None,
) -> dict[str, ServedIndex]:
    """One index per task, by task name; a name given twice is refused (one line). ``ray``:
    the Ray cluster whose workers encode a dense retriever's corpora."""
    out: dict[str, ServedIndex] = {}
    for task in tasks:
        if task.name in out:
            raise ValueError(f"--dataset names two tasks called {task.name}; serve them apart")
        retriever = build_retriever(config, task, cache_dir, progress, transport, ray)
        out[task.name] = ServedIndex(task, retriever, fingerprint(task, config))
    return out
