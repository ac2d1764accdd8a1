"""Benchmark tasks (loading) and scoring (pytrec_eval), shared by every agent.

    from eval import compare_runs, default_cache_dir, evaluate_run, load_task, read_run

    task = load_task("demo", default_cache_dir())    # corpus, queries, qrels
    scores = evaluate_run(task.qrels, read_run("runs/x/demo/run.trec"))
    scores.mean["NDCG@10"], scores.per_query["q01"]

* `load_task(spec, cache_dir)` / `load_tasks`: a folder, an R2MED task, or ``demo``
  (`eval.datasets`).
* `evaluate_run(qrels, run, ...) -> Evaluation`: the one evaluator, pytrec_eval's figures
  (`eval.evaluate.evaluate`; exported under another name because ``eval.evaluate`` is its
  module, and a package attribute cannot be both).
* `compare_runs(paths, ...) -> Comparison`: run folders side by side (`eval.compare`).
* `read_run(path)` / `write_run`: TREC run files (`eval.trec`).
* `RunFolder(path)`: a run folder, read and written (`eval.runs`); a task's summary is a
  `TaskSummary` (`eval.task_summary`), a query's record a `QueryRecord` (`eval.records`).

The names load on first use (PEP 562): importing ``eval`` loads no numpy or pytrec_eval.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from eval.lazy import lazy_exports

# public name -> (module, its name there)
_EXPORTS = {
    "load_task": ("eval.datasets", "load_task"),
    "load_tasks": ("eval.datasets", "load_tasks"),
    "default_cache_dir": ("eval.datasets", "default_cache_dir"),
    "Task": ("eval.datasets", "Task"),
    "evaluate_run": ("eval.evaluate", "evaluate"),
    "Evaluation": ("eval.evaluate", "Evaluation"),
    "compare_runs": ("eval.compare.comparison", "compare_runs"),
    "read_run": ("eval.trec", "read_run"),
    "write_run": ("eval.trec", "write_run"),
    "RunFolder": ("eval.runs", "RunFolder"),
    "TaskSummary": ("eval.task_summary", "TaskSummary"),
    "QueryRecord": ("eval.records", "QueryRecord"),
}
__all__ = [  # the names, as tools read them; _EXPORTS says where each is
    "load_task",
    "load_tasks",
    "default_cache_dir",
    "Task",
    "evaluate_run",
    "Evaluation",
    "compare_runs",
    "read_run",
    "write_run",
    "RunFolder",
    "TaskSummary",
    "QueryRecord",
]

if TYPE_CHECKING:
    from eval.compare.comparison import compare_runs
    from eval.datasets import Task, default_cache_dir, load_task, load_tasks
    from eval.evaluate import Evaluation
    from eval.evaluate import evaluate as evaluate_run
    from eval.records import QueryRecord
    from eval.runs import RunFolder
    from eval.task_summary import TaskSummary
    from eval.trec import read_run, write_run


__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS, __all__)
