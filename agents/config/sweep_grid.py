"""A sweep's grid: the cells its axes expand to (agents × retrievers × models × prompt
variants × rerank chains × datasets, and each run file × rerank chains), each a `RunConfig`.

Cells that would run the same configuration are one: agents without an LLM ignore the model
and prompt axes (unless a rerank stage calls a model), and a prompt variant that overrides no
prompt an agent or its stages use is that agent's run without overrides. A baseline names one
cell; on each other dataset the cell of the same setup is the baseline. Expanding loads no
data and runs nothing.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from agents.config.registry import AGENTS, STAGES
from agents.config.run_config import RunConfig, default_run_name
from agents.config.settings import SETTINGS, from_settings
from agents.config.stages import STAGE_WIDE, stage_kind, takes_wide
from agents.config.sweep_config import AGENT_ONLY, RUN_KEYS, RunFile, Sweep, SweepError
from prompts import prompt_family

MAX_LISTED = 12  # cell names an error lists
CELL_AXES = ("dataset", "agent", "retriever", "model", "prompt", "rerank")  # as --list shows


@dataclass(frozen=True)
class Cell:
    """One run of the grid: its run folder's name, its dataset and its configuration."""

    name: str
    dataset: str
    config: RunConfig
    # what the grid set for it, axis -> value ("-": an axis the cell does not have)
    axes: dict[str, str] = field(default_factory=dict, compare=False)


@dataclass
class Grid:
    """The grid's distinct cells and what tells duplicates and setups apart."""

    cells: list[Cell]
    # a duplicate's name -> the name of the cell that runs it
    aliases: dict[str, str] = field(default_factory=dict)
    # each cell's name -> what it runs, less the dataset: the same setup on another dataset
    setups: dict[str, tuple] = field(default_factory=dict)
    # what a cell runs, its dataset included -> its name: a second such is the same run
    keys: dict[tuple, str] = field(default_factory=dict)


def cells(sweep: Sweep) -> tuple[list[Cell], list[str]]:
    """The grid's distinct runs, in config order, and a note for each duplicate left out."""
    grid = expand(sweep)
    notes = [f"{dup} is the same run as {kept}; run once" for dup, kept in grid.aliases.items()]
    return grid.cells, notes


def baselines(sweep: Sweep) -> dict[str, str]:
    """The ``[compare]`` baseline's cell on each dataset (its setup, run on that dataset);
    {} without a baseline. SweepError when the baseline names no cell of the grid."""
    return baseline_cells(sweep, expand(sweep))


def baseline_cells(sweep: Sweep, grid: Grid) -> dict[str, str]:
    """`baselines` on a grid already expanded."""
    baseline = sweep.compare.get("baseline")
    if baseline is None:
        return {}
    # a duplicate's name is the cell it is the same run as, on any dataset
    kept = grid.aliases.get(baseline, baseline)
    if kept not in grid.setups:
        names = [c.name for c in grid.cells]
        shown = ", ".join(names[:MAX_LISTED]) + (", ..." if len(names) > MAX_LISTED else "")
        raise SweepError(
            f"{sweep.path}: key 'compare.baseline': no cell is named {baseline!r}; cells: {shown}"
        )
    setup = grid.setups[kept]
    return {c.dataset: c.name for c in grid.cells if grid.setups[c.name] == setup}


def expand(sweep: Sweep) -> Grid:
    """Every cell of ``sweep``, in config order; each config is built (ConfigError if one
    cannot be), and a cell that would run what another runs is an alias of it."""
    grid = Grid([])
    seen = grid.keys
    shared = {k: v for k, v in sweep.options.items() if k not in RUN_KEYS}
    combos = [
        (dataset, agent, retriever, chain)
        for dataset in sweep.datasets
        for agent in sweep.agents
        for retriever in sweep.retrievers
        for chain in sweep.reranks
    ]
    for dataset, agent, retriever, chain in combos:
        spec = AGENTS[agent]
        stages = [STAGES[stage_kind(text)] for text in chain]
        replay = bool(shared.get("generations"))  # the agent reads its texts, calls no model
        agent_prompts = () if replay else spec.prompts  # a replay sends no prompt of its own
        stage_prompts = [p for s in stages for p in s.prompts]
        uses_llm = (spec.uses_llm and not replay) or any(s.uses_llm for s in stages)
        for model in sweep.models if uses_llm else [None]:
            for variant, overrides in sweep.prompts.items():
                used = {
                    k: v for k, v in overrides.items()
                    if any(_reads(p, k) for p in agent_prompts)
                    or any(_reads(p, k, helpers=True) for p in stage_prompts)
                }  # fmt: skip
                settings = {
                    # a stage-wide option goes to the chains with a stage that has it
                    **{k: v for k, v in shared.items()
                       if k not in STAGE_WIDE or any(takes(t, k) for t in chain)},
                    "agent": agent, "dataset": dataset, "retriever": retriever,
                    "runs_dir": str(sweep.output / "runs"), "cache_dir": str(sweep.cache_dir),
                }  # fmt: skip
                if chain:
                    settings["rerank"] = chain
                if model:
                    settings["model"] = model
                if used:
                    settings["prompt"] = {k: str(v) for k, v in used.items()}
                config = from_settings(settings)
                name = default_run_name(config, variant if model else None)
                setup = (agent, retriever, tuple(chain), model, tuple(sorted(used.items())))
                key = (dataset, *setup)
                if key in seen:
                    if seen[key] != name:
                        grid.aliases.setdefault(name, seen[key])
                    continue
                seen[key] = name
                grid.setups[name] = setup
                config = dataclasses.replace(config, run_name=name)
                axes = {"dataset": dataset, "agent": agent, "retriever": retriever,
                        "model": model or "-", "prompt": variant if model else "-",
                        "rerank": " > ".join(chain) or "none"}  # fmt: skip
                grid.cells.append(Cell(name, dataset, config, axes))
    for run_file in sweep.run_files:
        for chain in sweep.reranks:
            _add_run_file_cells(grid, sweep, run_file, chain)
    return grid


# what a run file's cell does not take: it runs no agent, builds no retriever, replays nothing
_NOT_FOR_RUN_FILES = AGENT_ONLY | {"generations", "reasoning"}


def _add_run_file_cells(grid: Grid, sweep: Sweep, run_file: RunFile, chain: list[str]) -> None:
    """The cells that rerank ``run_file`` with ``chain``: one per model and prompt variant
    when a stage calls a model, else one."""
    stages = [STAGES[stage_kind(text)] for text in chain]
    stage_prompts = [p for s in stages for p in s.prompts]
    shared = {
        k: v
        for k, v in sweep.options.items()
        if k not in RUN_KEYS
        and k not in _NOT_FOR_RUN_FILES
        and not SETTINGS[k].path.startswith("retriever.")
        and (k not in STAGE_WIDE or any(takes(t, k) for t in chain))
    }
    uses_llm = any(s.uses_llm for s in stages)
    for model in sweep.models if uses_llm else [None]:
        for variant, overrides in sweep.prompts.items():
            used = {
                k: v for k, v in overrides.items()
                if any(_reads(p, k, helpers=True) for p in stage_prompts)
            }  # fmt: skip
            settings = {**shared, "agent": "none", "dataset": run_file.dataset,
                        "runs_dir": str(sweep.output / "runs"),
                        "cache_dir": str(sweep.cache_dir)}  # fmt: skip
            if chain:
                settings["rerank"] = chain
            if model:
                settings["model"] = model
            if used:
                settings["prompt"] = {k: str(v) for k, v in used.items()}
            config = dataclasses.replace(from_settings(settings), run_file=run_file.file,
                                         run_file_duplicates=run_file.duplicates,
                                         run_file_order=run_file.order)  # fmt: skip
            name = default_run_name(config, variant if model else None)
            # by the file's name: ReasonRank's e5 runs of every task are one setup
            setup = (f"run:{Path(run_file.file).name}", tuple(chain), model,
                     tuple(sorted(used.items())))  # fmt: skip
            key = (run_file.dataset, run_file.file, *setup)
            if key in grid.keys:
                if grid.keys[key] != name:
                    grid.aliases.setdefault(name, grid.keys[key])
                continue
            grid.keys[key] = name
            grid.setups[name] = setup
            config = dataclasses.replace(config, run_name=name)
            axes = {"dataset": run_file.dataset, "agent": f"run file {Path(run_file.file).name}",
                    "retriever": "-", "model": model or "-", "prompt": variant if model else "-",
                    "rerank": " > ".join(chain) or "none"}  # fmt: skip
            grid.cells.append(Cell(name, run_file.dataset, config, axes))


def _reads(entry: str, key: str, helpers: bool = False) -> bool:
    """Whether the prompt a registry entry names reads the override ``key``.

    "search-o1/documents" (a helper) reads only its own override; "hyde" reads the family's
    main prompt ("hyde", "hyde/exam", "hyde/Biology"), and with ``helpers`` (a rerank stage,
    which names only its family) the family's helpers too ("rerank-listwise/passage"). So
    hyde's "system" reads no "system/reason" override, which only the reason agent reads.
    """
    if "/" in entry:
        return key == entry
    family = prompt_family(key)
    return family == entry or (helpers and family.startswith(f"{entry}/"))


def unread_overrides(sweep: Sweep, grid: list[Cell]) -> list[tuple[str, str]]:
    """(variant, prompt) for each override that no cell of the grid reads."""
    read = {k for cell in grid for k in cell.config.prompt_files}
    return [(v, k) for v, table in sweep.prompts.items() for k in table if k not in read]


def takes(stage_text: str, key: str) -> bool:
    """Whether the stage of a --rerank spec has the option a stage-wide setting fills."""
    return takes_wide(stage_kind(stage_text), STAGE_WIDE[key])


def list_cells(sweep: Sweep) -> str:
    """The grid as text: one line per cell, its run folder's name and the values of the axes
    that differ between cells, then the duplicates run once. Runs nothing, loads no data."""
    grid, notes = cells(sweep)
    axes = [a for a in CELL_AXES if len({c.axes.get(a, "-") for c in grid}) > 1]
    width = max(len(c.name) for c in grid)
    lines = [
        f"{sweep.path}: {len(grid)} cells in {sweep.output / 'runs'}"
        + (f", differing in {', '.join(axes)}" if axes else "")
    ]
    for cell in grid:
        differs = "  ".join(f"{a}={cell.axes.get(a, '-')}" for a in axes)
        lines.append(f"  {cell.name:<{width}}  {differs}".rstrip())
    return "\n".join(lines + notes)
