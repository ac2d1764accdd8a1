"""Load retrieval benchmarks into plain dicts: R2MED (local or from the Hugging Face hub) and BEIR.

    from eval.datasets import load_task

    task = load_task("Biology", cache_dir)    # a folder, an R2MED task, or "demo"

* `load_task` / `load_tasks` / `load_folder` / `check_tasks` / `read_qrels`: which layout a
  folder holds, its files read and cross-checked into a `Task` (`eval.datasets.layout`).
* `fetch_r2med`, `hub_unreachable`: R2MED's tasks from the hub, and R2MED's qrels files
  (`eval.datasets.r2med`); BEIR's ``qrels/test.tsv`` is read by `eval.datasets.beir`.
* `DataError`, `id_problem`, `GRADE_MIN` .. `GRADE_MAX`, `read_id_texts`: the checks every
  reader applies, and the decisions behind them (`eval.datasets.checks`).
* `Task`, `task_fingerprint`: one loaded task, and the digests that bind results to its data
  (`eval.datasets.task`).
* `R2MED_TASKS`, `R2MED_REVISIONS`, `R2MED_KINDS`, `R2MED_FILES`, `TASK_KINDS`, `task_kind`,
  `r2med_task_name`, `default_cache_dir`, `DEMO_DIR`: the benchmark's names
  (`eval.datasets.vocabulary`).

The names load on first use (PEP 562): the hub client loads only when a task is fetched.
"""

from __future__ import annotations

from eval.plumbing.lazy import lazy_face

# module -> the public names defined there that are used outside this package
__all__, __getattr__, __dir__ = lazy_face(
    globals(),
    {
        "eval.datasets.layout": (
            "check_tasks",
            "load_folder",
            "load_task",
            "load_tasks",
            "read_qrels",
        ),
        "eval.datasets.r2med": ("fetch_r2med", "hub_unreachable"),
        "eval.datasets.checks": (
            "DataError",
            "GRADE_MAX",
            "GRADE_MIN",
            "id_problem",
            "read_id_texts",
        ),
        "eval.datasets.task": ("Task", "task_fingerprint"),
        "eval.datasets.vocabulary": (
            "DEMO_DIR",
            "R2MED_FILES",
            "R2MED_KINDS",
            "R2MED_REVISIONS",
            "R2MED_TASKS",
            "TASK_KINDS",
            "default_cache_dir",
            "r2med_task_name",
            "task_kind",
        ),
    },
)
