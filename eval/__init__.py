"""Benchmark tasks (loading) and scoring (pytrec_eval), shared by every agent.

    from eval import compare_runs, default_cache_dir, evaluate_run, load_task, read_run

    task = load_task("demo", default_cache_dir())    # corpus, queries, qrels
    scores = evaluate_run(task.qrels, read_run("runs/x/demo/run.trec"))
    scores.mean["NDCG@10"], scores.per_query["q01"]

* `load_task(spec, cache_dir)` / `load_tasks`: a folder, an R2MED task, or ``demo``
  (`eval.datasets`).
* `evaluate_run(qrels, run, ...) -> Evaluation`: the one evaluator, pytrec_eval's figures
  (`eval.evaluate`).
* `compare_runs(paths, ...) -> Comparison`: run folders side by side (`eval.compare`).
* `read_run(path)` / `write_run`: TREC run files (`eval.trec`).
* `export_run(run_dir, out_dir)`: a run folder as ranx and ir-measures read it (`eval.export`,
  ``python -m eval.export``; docs/integrations.md).
* `RunFolder(path)`: a run folder, read and written (`eval.runs`); a task's summary is a
  `TaskSummary` (`eval.task_summary`), a query's record a `QueryRecord` (`eval.records`).

The names load on first use (PEP 562): importing ``eval`` loads no numpy or pytrec_eval.
"""

from __future__ import annotations

from eval.plumbing.lazy import lazy_face

# module -> the public names defined there, each under its own name
__all__, __getattr__, __dir__ = lazy_face(
    globals(),
    {
        "eval.datasets": ("load_task", "load_tasks", "default_cache_dir", "Task"),
        "eval.evaluate": ("evaluate_run", "Evaluation"),
        "eval.compare.comparison": ("compare_runs",),
        "eval.trec": ("read_run", "write_run"),
        "eval.export": ("export_run",),
        "eval.runs": ("RunFolder",),
        "eval.task_summary": ("TaskSummary",),
        "eval.records": ("QueryRecord",),
    },
)
