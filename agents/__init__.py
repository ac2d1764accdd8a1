"""Agents over R2MED's tasks, as a library: a whole run, or one query.

    from agents import LLMConfig, RunConfig, run_dataset, run_query

    config = RunConfig(agent="hyde", dataset="demo", llm=LLMConfig(model="local/smollm2-135m"))
    result = run_query(config, "q01")   # one query: trajectory, ranking, figures (docs/python.md)
    run = run_dataset(config)           # the whole run, as `python -m agents.run` makes it

The names load on first use (PEP 562), so `import agents` and the command lines
(`python -m agents.run`, ...) pay for nothing they do not use. The whole-run call is
`run_dataset` (`agents.execution.whole_run`): the name ``agents.run`` is the command line's
module. `StageConfig` puts a rerank stage in a `RunConfig` (``stages=(StageConfig(...),)``).
"""

from __future__ import annotations

from eval.plumbing.lazy import lazy_face

# module -> the public names defined there, each under its own name
__all__, __getattr__, __dir__ = lazy_face(
    globals(),
    {
        "agents.config.run_config": ("RunConfig", "LLMConfig", "StageConfig"),
        "agents.config.settings": ("from_settings",),
        "agents.execution.whole_run": ("run_dataset", "RunResult"),
        "agents.execution.one_query": ("run_query", "arun_query", "QueryResult"),
    },
)
