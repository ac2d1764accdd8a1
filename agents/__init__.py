"""Agents over R2MED's tasks, as a library: a whole run, or one query.

    from agents import LLMConfig, RunConfig, run_dataset, run_query

    config = RunConfig(agent="hyde", dataset="demo", llm=LLMConfig(model="local/smollm2-135m"))
    result = run_query(config, "q01")   # one query: trajectory, ranking, figures (docs/python.md)
    run = run_dataset(config)           # the whole run, as `python -m agents.run` makes it

The names load on first use (PEP 562), so `import agents` and the command lines
(`python -m agents.run`, ...) pay for nothing they do not use. The whole-run call is
`run_dataset`, which is `agents.pipeline.run`: the name ``agents.run`` is the command line's
module, and a package attribute cannot be both.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from eval.lazy import lazy_exports

# public name -> (module, its name there)
_EXPORTS = {
    "RunConfig": ("agents.config", "RunConfig"),
    "LLMConfig": ("agents.config", "LLMConfig"),
    "from_settings": ("agents.settings", "from_settings"),
    "run_dataset": ("agents.pipeline", "run"),
    "RunResult": ("agents.pipeline", "RunResult"),
    "run_query": ("agents.query", "run_query"),
    "arun_query": ("agents.query", "arun_query"),
    "QueryResult": ("agents.query", "QueryResult"),
}
__all__ = [  # the names, as tools read them; _EXPORTS says where each is
    "RunConfig",
    "LLMConfig",
    "from_settings",
    "run_dataset",
    "RunResult",
    "run_query",
    "arun_query",
    "QueryResult",
]

if TYPE_CHECKING:
    from agents.config import LLMConfig, RunConfig
    from agents.pipeline import RunResult
    from agents.pipeline import run as run_dataset
    from agents.query import QueryResult, arun_query, run_query
    from agents.settings import from_settings


__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS, __all__)
