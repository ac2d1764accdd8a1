"""Run a grid of configurations and compare them: `python -m agents.sweep sweep.toml`.

The TOML file (see docs/sweep-example.toml) lists agents × retrievers × models × prompt
variants × rerank chains × datasets, plus settings shared by every cell (`[options]`: any key of
`agents.config.settings.SETTINGS`, i.e. any `agents.run` flag without "--", "_" for "-"). Each cell
is a `RunConfig`, run in-process by `agents.execution.whole_run.run_dataset` in
`<output>/runs/<cell>`, all with the same cache folder, so indexes and LLM answers are shared.
Running the sweep again resumes it: finished tasks are read back and only what is missing is
answered. At the end the cells of each dataset are compared (`eval.compare`) into
`<output>/comparison` (one sub-folder per dataset when there are several). Each cell prints what
`agents.run` prints per task (agents.commands.cli), with R2MED's figure when the cell reproduces a
published row.

Cells that would run the same configuration are run once: agents without an LLM ignore the
model and prompt axes (unless a rerank stage calls a model), and a prompt variant that
overrides no prompt an agent or its stages use is that agent's run without overrides. An
override that no cell of the whole grid reads is refused, as is a ``[compare]`` value
eval.compare would reject (a baseline that names no cell, an unknown metric or test): the
whole file is checked in `load_sweep`, before any cell runs. A baseline names one cell; on
each other dataset the cell of the same setup is the baseline.

This module is the command line only: the file is read by agents.config.sweep_file, its grid
expanded by agents.config.sweep_grid, and its cells run by agents.execution.sweep.

`reranks` is a list of rerank chains (each a list of `--rerank` specs, [] for none); the
stage-wide settings (`rerank_depth`, `rerank_window`, ...) apply to the chains whose stages
have them.

`run_files` adds first stages read from TREC run files (`agents.execution.run_file_stage`) beside
the agents: each ``{file = "...", dataset = "..."}`` (``duplicates = "max"`` to read a file that
repeats a (qid, docid) pair, ``order = "file"`` to keep its line order; or just the file, when
`datasets` names one task) is
reranked by every chain of `reranks` ([] scores the file alone), as `python -m agents.rerank
FILE --task DATASET` would; with run files, `agents` may be left out. Options for an agent or
a retriever do not apply to these cells.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from agents.commands import cli
from agents.commands.cli import command, setup_logging
from agents.config.sweep_file import load_sweep
from agents.config.sweep_grid import list_cells
from agents.execution.sweep import dry_run, run_sweep
from retrievers.cluster.connect import add_ray_flag


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m agents.sweep",
        description="Run a grid of agents.run configurations from a TOML file and compare them.",
    )
    p.add_argument("config", type=Path, help="the sweep's TOML file (see docs/sweep-example.toml)")
    what = p.add_mutually_exclusive_group()
    what.add_argument(
        "--list",
        action="store_true",
        help="print each cell (its run folder, what differs); run none",
    )
    what.add_argument(
        "--dry-run",
        action="store_true",
        help="estimate each cell's LLM calls, tokens and cost; call no model, write nothing",
    )
    add_ray_flag(p, "run the cells, over the file's [ray] address,")
    args = p.parse_args(argv)
    setup_logging()

    def body() -> int:
        sweep = load_sweep(args.config)
        if args.ray is not None:
            sweep = dataclasses.replace(sweep, ray=args.ray)
        if args.list:
            print(list_cells(sweep))
            return 0
        return dry_run(sweep) if args.dry_run else run_sweep(sweep)

    return command(body, resumable=not (args.list or args.dry_run))


if __name__ == "__main__":
    cli.exit_with(main())
