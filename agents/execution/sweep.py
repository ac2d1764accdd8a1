"""Running a sweep's cells and comparing them: each cell in-process (`run_cell`, as
`agents.run` would run it) or as a Ray task (agents.execution.cluster.cells), then the cells of
each dataset compared (`eval.compare`) into ``<output>/comparison``; `dry_run` estimates each
cell instead.

Every cell runs in ``<output>/runs/<cell>`` with the same cache folder, so indexes and LLM
answers are shared; running the sweep again resumes it. A cell's refusal is its own (the next
one runs); a Ctrl-C stops the sweep.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from agents.config.run_config import RunConfig, default_run_name
from agents.config.serialise import to_dict
from agents.config.sweep_config import Sweep
from agents.config.sweep_grid import Cell, baselines, cells
from agents.execution.report import paper_average, paper_for, refused, task_printer
from eval.metrics import HEADLINE
from eval.plumbing.files import safe_name, writable_folder, write_json
from eval.runs import RunFolder
from retrievers.cluster.connect import shown


def dry_run(sweep: Sweep) -> int:
    """Each cell's dry run (`agents.execution.dry_run`): its LLM calls, tokens and cost estimated,
    nothing written, no model called. 0 when every cell could be estimated, else 2."""
    from agents.execution.dry_run import estimate, format_estimate

    grid, notes = cells(sweep)
    for note in notes:
        print(note)
    quiet = bool(sweep.options.get("quiet"))
    status = []
    for i, cell in enumerate(grid, 1):
        print(f"[{i}/{len(grid)}] {cell.name}", flush=True)

        def one(config: RunConfig = cell.config) -> int:
            print(format_estimate(estimate(config, progress=not quiet)), flush=True)
            return 0

        status.append(refused(one, prefix=f"{cell.name}: "))
    return max(status, default=0)


def run_sweep(sweep: Sweep) -> int:
    """Run every cell (resuming finished ones), then compare them; 0 when all succeeded."""
    from eval.compare import CompareError, compare_runs, comparison_markdown, write_comparison

    grid, notes = cells(sweep)
    bases = baselines(sweep)
    runs_dir = writable_folder(sweep.output / "runs", f"{sweep.path}: output")
    for note in notes:
        print(note)
    status: dict[str, int] = {}
    quiet = bool(sweep.options.get("quiet"))
    if sweep.ray is not None:
        status = _run_on_cluster(sweep, grid, runs_dir)
    for i, cell in enumerate(grid if sweep.ray is None else [], 1):
        print(f"[{i}/{len(grid)}] {cell.name}", flush=True)
        status[cell.name] = run_cell(cell.config, sweep.options.get("overwrite", False), quiet)
    write_json(
        sweep.output / "cells.json",
        [{"name": c.name, "config": to_dict(c.config), "status": status[c.name]} for c in grid],
    )

    failed = [n for n, rc in status.items() if rc != 0]
    by_dataset: dict[str, list[Cell]] = {}
    for cell in grid:
        if RunFolder(runs_dir / cell.name).config_path.is_file() and status[cell.name] in (0, 1):
            by_dataset.setdefault(cell.dataset, []).append(cell)
    for dataset, group in by_dataset.items():
        out = sweep.output / "comparison"
        if len({c.dataset for c in grid}) > 1:  # the agents' datasets, the run files' tasks
            out = out / safe_name(Path(dataset).name or dataset)
        names = [c.name for c in group]
        baseline = bases.get(dataset)
        if baseline is not None and baseline not in names:
            print(f"warning: the baseline {baseline} did not finish; {dataset} is compared "
                  f"against {names[0]} this time", file=sys.stderr)  # fmt: skip
            baseline = None
        try:
            comparison = compare_runs(
                [runs_dir / n for n in names],
                baseline=runs_dir / baseline if baseline else None,
                metric=sweep.compare.get("metric", HEADLINE),
                test=sweep.compare.get("test", "fisher"),
                cache_dir=sweep.cache_dir,
            )
        except CompareError as e:
            print(f"error: cannot compare the runs of {dataset}: {e}", file=sys.stderr)
            failed.append(f"comparison of {dataset}")
            continue
        write_comparison(comparison, out)
        print(comparison_markdown(comparison))
        print(f"comparison written to {out}")
    if failed:
        print(f"not finished: {', '.join(failed)}; run the sweep again to retry", file=sys.stderr)
        return 1
    return 0


def run_cell(config: RunConfig, overwrite: bool, quiet: bool) -> int:
    """One cell, as `agents.run` would exit on it: 0 done, 1 some queries failed, 2 refused;
    a refusal is this cell's only (the next one runs), a Ctrl-C stops the sweep."""
    name = config.run_name or default_run_name(config)
    return refused(lambda: _cell(config, overwrite, quiet), prefix=f"{name}: ")


def _cell(config: RunConfig, overwrite: bool, quiet: bool) -> int:
    from agents.execution.whole_run import run_dataset

    paper = paper_for(config)
    result = run_dataset(
        config, overwrite=overwrite, progress=not quiet, on_task=task_printer(paper)
    )
    if (average := paper_average(result, paper)) is not None:
        print(average)
    return 1 if result.failed else 0


def _run_on_cluster(sweep: Sweep, grid: list[Cell], runs_dir: Path) -> dict[str, int]:
    """Every cell a Ray task (agents.execution.cluster.cells); progress a line per finished cell."""
    from agents.execution.cluster.cells import print_outcome, run_cells
    from retrievers.cluster.connect import connect

    assert sweep.ray is not None
    ray = connect(sweep.ray)
    print(f"on the Ray cluster at {shown(sweep.ray)}: {len(grid)} cells", flush=True)
    finished = 0

    def report(name: str, outcome: Any, failure: str | None) -> None:
        nonlocal finished
        finished += 1
        where = f" (node {outcome.node})" if outcome is not None else ""
        print(f"[{finished}/{len(grid)}] {name}{where}", flush=True)
        print_outcome(name, outcome, failure)

    return run_cells(
        ray,
        run_cell,
        [(c.name, c.config) for c in grid],
        runs_dir,
        sweep.cache_dir / "llm",
        sweep.options.get("overwrite", False),
        sweep.resources_of,
        report,
    )
