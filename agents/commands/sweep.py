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
import fnmatch
import re
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.commands import cli
from agents.commands.cli import (
    command,
    paper_average,
    paper_for,
    refused,
    setup_logging,
    task_printer,
)
from agents.config.registry import AGENTS, STAGES
from agents.config.run_config import DEFAULT_MODEL, ConfigError, RunConfig, default_run_name
from agents.config.serialise import to_dict
from agents.config.settings import SETTINGS, from_settings
from agents.config.stages import STAGE_WIDE, parse_stage, stage_kind, takes_wide
from eval.datasets import default_cache_dir
from eval.metrics import HEADLINE
from eval.plumbing.files import safe_name, writable_folder, write_json
from eval.runs import RunFolder
from eval.trec import DUPLICATE_RULES, RUN_FILE_ORDERS
from prompts import prompt_family
from retrievers.cluster.connect import add_ray_flag, shown

_AGENT_ONLY = {"option", "final_ranking", "max_searches", "max_turns", "top_k"}
AXES = ("agent", "dataset", "retriever", "model", "prompt", "rerank")  # set per cell by the grid
RUN_KEYS = {"quiet": bool, "overwrite": bool}  # how to run, not what: not in the config
TOP_KEYS = {
    "output", "cache_dir", "agents", "retrievers", "models", "datasets", "prompts", "options",
    "compare", "reranks", "run_files", "ray",
}  # fmt: skip
RAY_KEYS = {"address", "resources", "cells"}  # [ray]: the cluster and what each cell asks of it
RUN_FILE_KEYS = ("file", "dataset")  # a run_files entry's required keys
ENTRY_KEYS = {*RUN_FILE_KEYS, "duplicates", "order"}
COMPARE_KEYS = {"metric", "baseline", "test"}
MAX_LISTED = 12  # cell names an error lists
CELL_AXES = ("dataset", "agent", "retriever", "model", "prompt", "rerank")  # as --list shows


class SweepError(ValueError):
    """A bad sweep config; the message names the file and the key."""


@dataclass(frozen=True)
class Cell:
    name: str
    dataset: str
    config: RunConfig
    # what the grid set for it, axis -> value ("-": an axis the cell does not have)
    axes: dict[str, str] = field(default_factory=dict, compare=False)


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


def load_sweep(path: Path | str) -> Sweep:
    """Read and check a sweep config; raises SweepError naming the file and the bad key.

    The file's own mistakes are found first; the models last, since asking litellm whether it
    knows one imports it (seconds)."""
    from prompts import PromptError, parse_prompt_overrides
    from retrievers.config import RetrieverConfig

    path = Path(path)
    where = str(path)

    def fail(key: str, problem: str) -> SweepError:
        return SweepError(f"{where}: key {key!r}: {problem}")

    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise SweepError(f"{where}: cannot read: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise SweepError(f"{where}: not valid TOML: {e}") from None
    if unknown := sorted(set(raw) - TOP_KEYS):
        raise fail(unknown[0], f"unknown key; known: {', '.join(sorted(TOP_KEYS))}")
    base = path.resolve().parent

    def strings(key: str, default: list[str] | None) -> list[str]:
        value = raw.get(key, default)
        if value is None:
            raise fail(key, "missing (a list of strings)")
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
            raise fail(key, f"expected a non-empty list of strings, got {value!r}")
        if len(set(value)) != len(value):
            raise fail(key, f"lists a value twice: {value!r}")
        return value

    # with run files as first stages, a sweep may have no agent
    agents = strings("agents", None) if "agents" in raw or "run_files" not in raw else []
    for a in agents:
        if a not in AGENTS:
            raise fail("agents", f"unknown agent {a!r}; known: {', '.join(AGENTS)}")
    retrievers = strings("retrievers", ["bm25"])
    for r in retrievers:
        try:
            RetrieverConfig(spec=r)
        except ValueError as e:
            raise fail("retrievers", str(e)) from None
    models = strings("models", [DEFAULT_MODEL])
    # A dataset that is a folder beside the config is found from anywhere; names stay names.
    datasets = [_dataset(base, d) for d in strings("datasets", ["demo"])]
    try:
        run_files = _run_files(raw.get("run_files", []), base, datasets)
    except ValueError as e:
        raise fail("run_files", str(e)) from None

    variants = raw.get("prompts", {"base": {}})
    if not isinstance(variants, dict) or not variants:
        raise fail(
            "prompts", "expected a table of variants, e.g. base = {} and short = {hyde = 'x.txt'}"
        )
    prompts: dict[str, dict[str, Path]] = {}
    for variant, table in variants.items():
        key = f"prompts.{variant}"
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", variant):
            raise fail(key, "a variant name may hold letters, digits, '_', '.' and '-' only")
        if not isinstance(table, dict) or not all(isinstance(v, str) for v in table.values()):
            raise fail(key, f"expected {{prompt name = 'file'}}, got {table!r}")
        specs = [f"{name}={(base / file).resolve()}" for name, file in table.items()]
        try:
            prompts[variant] = parse_prompt_overrides(specs)
        except PromptError as e:
            raise fail(key, str(e)) from None

    reranks = raw.get("reranks", [[]])
    if not isinstance(reranks, list) or not reranks:
        raise fail("reranks", f"expected a list of rerank chains, e.g. [[], ['llm-listwise']], "
                              f"got {reranks!r}")  # fmt: skip
    reranks = [[chain] if isinstance(chain, str) else chain for chain in reranks]
    for chain in reranks:
        if not isinstance(chain, list) or not all(isinstance(t, str) for t in chain):
            raise fail("reranks", f"a chain is a list of stage specs, got {chain!r}")
    if len({tuple(c) for c in reranks}) != len(reranks):
        raise fail("reranks", f"lists a chain twice: {reranks!r}")

    options = raw.get("options", {})
    if not isinstance(options, dict):
        raise fail("options", f"expected a table, got {options!r}")
    for key, value in options.items():
        if key in RUN_KEYS:
            if not isinstance(value, RUN_KEYS[key]):
                raise fail(f"options.{key}", f"expected true or false, got {value!r}")
            continue
        if key == "rerank":
            raise fail("options.rerank", "rerank chains are a grid axis: give the top-level "
                                         "key reranks = [['llm-listwise'], ...]")  # fmt: skip
        if key not in SETTINGS or key in AXES or key in ("runs_dir", "run_name", "cache_dir"):
            known = [k for k in SETTINGS if k not in AXES] + list(RUN_KEYS)
            raise fail(f"options.{key}", f"unknown option; known: {', '.join(known)}")
        agent = next((a for a in agents if key not in _AGENT_ONLY or AGENTS[a].defaults), "none")
        checked = {"agent": agent, key: value}
        if key in STAGE_WIDE:  # checked on the chains' stages that have the option
            chain = [t for c in reranks for t in c if _takes(t, key)]
            if not chain:
                raise fail(f"options.{key}", "no stage of any rerank chain has this option")
            checked["rerank"] = chain
            # together: a window is only valid with its step
            checked.update({k: v for k, v in options.items() if k in STAGE_WIDE})
        try:  # each value is checked by the config itself, as a flag's would be
            from_settings(checked)
        except ValueError as e:
            raise fail(f"options.{key}", str(e)) from None

    wide = {STAGE_WIDE[k]: v for k, v in options.items() if k in STAGE_WIDE}
    for chain in reranks:  # each stage as its cells will have it, stage-wide options given
        try:
            [parse_stage(text, wide) for text in chain]
        except ValueError as e:
            raise fail("reranks", str(e)) from None

    compare = raw.get("compare", {})
    if not isinstance(compare, dict):
        raise fail("compare", f"expected a table, got {compare!r}")
    if unknown := sorted(set(compare) - COMPARE_KEYS):
        raise fail(
            f"compare.{unknown[0]}", f"unknown key; known: {', '.join(sorted(COMPARE_KEYS))}"
        )
    for key, value in compare.items():  # checked now, not after every cell has been paid for
        try:
            _check_compare_value(key, value)
        except ValueError as e:
            raise fail(f"compare.{key}", str(e)) from None

    from agents.llm import check_model

    for m in models:
        try:
            check_model(m)
        except ValueError as e:
            raise fail("models", str(e)) from None

    address, resources, cell_resources = _ray_table(raw.get("ray", {}), fail)

    output = raw.get("output", path.stem)
    cache_dir = raw.get("cache_dir")
    for key, value in (("output", output), ("cache_dir", cache_dir)):
        if value is not None and not isinstance(value, str):
            raise fail(key, f"expected a path string, got {value!r}")
    sweep = Sweep(
        path=path,
        output=(base / output).resolve(),
        cache_dir=(base / cache_dir).resolve() if cache_dir else default_cache_dir(),
        agents=agents,
        retrievers=retrievers,
        models=models,
        datasets=datasets,
        prompts=prompts,
        options=options,
        compare=compare,
        reranks=reranks,
        run_files=run_files,
        ray=address,
        resources=resources,
        cell_resources=cell_resources,
    )
    try:
        grid = _grid(sweep)  # every cell's config is checked before anything runs
    except ConfigError as e:
        raise SweepError(f"{where}: {e}") from None
    for variant, key in _unread_overrides(sweep, grid.cells):
        replay = options.get("generations")
        hint = " (with generations, the agents send no prompt)" if replay else ""
        raise fail(
            f"prompts.{variant}",
            f"overrides prompt {key!r}, which no agent or rerank stage of this sweep reads{hint}",
        )
    _baselines(sweep, grid)  # a baseline that names no cell is refused now
    return sweep


def _ray_table(
    table: Any, fail: Callable[[str, str], SweepError]
) -> tuple[str | None, dict[str, Any], dict[str, dict[str, Any]]]:
    """[ray]: ``address`` (HOST:PORT or auto), ``resources`` (num_cpus, num_gpus, memory in
    bytes, for every cell) and ``cells`` ({"<cell-name pattern>" = {resources}})."""
    from agents.execution.cluster.cells import RESOURCE_KEYS

    if not isinstance(table, dict):
        raise fail("ray", f"expected a table, got {table!r}")
    if unknown := sorted(set(table) - RAY_KEYS):
        raise fail(f"ray.{unknown[0]}", f"unknown key; known: {', '.join(sorted(RAY_KEYS))}")
    address = table.get("address")
    if address is not None and (not isinstance(address, str) or not address):
        raise fail("ray.address", f"expected HOST:PORT or auto, got {address!r}")

    def asked(key: str, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise fail(key, f"expected a table of {', '.join(RESOURCE_KEYS)}, got {value!r}")
        for name, amount in value.items():
            if name not in RESOURCE_KEYS:
                raise fail(f"{key}.{name}", f"unknown resource; known: {', '.join(RESOURCE_KEYS)}")
            number = isinstance(amount, int | float) and not isinstance(amount, bool)
            if not number or amount < 0 or (name == "memory" and amount != int(amount)):
                raise fail(f"{key}.{name}", f"expected a number >= 0, got {amount!r}")
        return dict(value)

    resources = asked("ray.resources", table.get("resources", {}))
    cells = table.get("cells", {})
    if not isinstance(cells, dict):
        raise fail("ray.cells", f'expected {{"<cell-name pattern>" = {{...}}}}, got {cells!r}')
    by_pattern = {p: asked(f"ray.cells.{p}", v) for p, v in cells.items()}
    return address, resources, by_pattern


def _dataset(base: Path, name: str) -> str:
    """A dataset as a cell names it: a folder beside the config resolved, a name as given."""
    return str((base / name).resolve()) if (base / name).is_dir() else name


def _run_files(value: Any, base: Path, datasets: list[str]) -> list[RunFile]:
    """The `run_files` entries, each file found beside the config; ValueError on a bad one."""
    if not isinstance(value, list):
        raise ValueError(f"expected a list of run files, got {value!r}")
    out: list[RunFile] = []
    for entry in value:
        if isinstance(entry, str):  # the sweep's one task
            if len(datasets) != 1:
                raise ValueError(
                    f"{entry!r}: a run file ranks one task and datasets lists {len(datasets)}; "
                    f"give it as {{file = {entry!r}, dataset = '...'}}"
                )
            entry = {"file": entry, "dataset": datasets[0]}
        if not isinstance(entry, dict) or not set(RUN_FILE_KEYS) <= set(entry) <= ENTRY_KEYS:
            raise ValueError(
                f"expected a file or {{file = '...', dataset = '...'}} per entry, got {entry!r}"
            )
        if not all(isinstance(v, str) and v for v in entry.values()):
            raise ValueError(f"file and dataset are non-empty strings, got {entry!r}")
        file = (base / entry["file"]).resolve()
        if not file.is_file():
            raise ValueError(f"{file}: no such run file")
        duplicates = entry.get("duplicates", "refuse")
        if duplicates not in DUPLICATE_RULES:
            raise ValueError(f"duplicates {duplicates!r}: one of {', '.join(DUPLICATE_RULES)}")
        order = entry.get("order", "score")
        if order not in RUN_FILE_ORDERS:
            raise ValueError(f"order {order!r}: one of {', '.join(RUN_FILE_ORDERS)}")
        run_file = RunFile(str(file), _dataset(base, entry["dataset"]), duplicates, order)
        if not Path(run_file.dataset).is_dir() and (
            "," in run_file.dataset or run_file.dataset.strip().lower() == "r2med"
        ):
            raise ValueError(f"{run_file.dataset!r} names several tasks; a run file ranks one")
        # cells are named after the file's name and its task: two such would share a folder
        if any(Path(r.file).name == file.name and r.dataset == run_file.dataset for r in out):
            raise ValueError(f"lists two run files named {file.name} for {run_file.dataset}")
        out.append(run_file)
    return out


@dataclass
class _Grid:
    cells: list[Cell]
    # a duplicate's name -> the name of the cell that runs it
    aliases: dict[str, str] = field(default_factory=dict)
    # each cell's name -> what it runs, less the dataset: the same setup on another dataset
    setups: dict[str, tuple] = field(default_factory=dict)
    # what a cell runs, its dataset included -> its name: a second such is the same run
    keys: dict[tuple, str] = field(default_factory=dict)


def cells(sweep: Sweep) -> tuple[list[Cell], list[str]]:
    """The grid's distinct runs, in config order, and a note for each duplicate left out."""
    grid = _grid(sweep)
    notes = [f"{dup} is the same run as {kept}; run once" for dup, kept in grid.aliases.items()]
    return grid.cells, notes


def baselines(sweep: Sweep) -> dict[str, str]:
    """The ``[compare]`` baseline's cell on each dataset (its setup, run on that dataset);
    {} without a baseline. SweepError when the baseline names no cell of the grid."""
    return _baselines(sweep, _grid(sweep))


def _baselines(sweep: Sweep, grid: _Grid) -> dict[str, str]:
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


def _grid(sweep: Sweep) -> _Grid:
    grid = _Grid([])
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
                       if k not in STAGE_WIDE or any(_takes(t, k) for t in chain)},
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
_NOT_FOR_RUN_FILES = _AGENT_ONLY | {"generations", "reasoning"}


def _add_run_file_cells(grid: _Grid, sweep: Sweep, run_file: RunFile, chain: list[str]) -> None:
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
        and (k not in STAGE_WIDE or any(_takes(t, k) for t in chain))
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


def _unread_overrides(sweep: Sweep, grid: list[Cell]) -> list[tuple[str, str]]:
    """(variant, prompt) for each override that no cell of the grid reads."""
    read = {k for cell in grid for k in cell.config.prompt_files}
    return [(v, k) for v, table in sweep.prompts.items() for k in table if k not in read]


def _check_compare_value(key: str, value: Any) -> None:
    """ValueError unless ``value`` is one eval.compare takes for ``[compare]`` key ``key``."""
    from eval.metrics import metric_name
    from eval.significance import TESTS

    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {value!r}")
    if key == "metric":
        metric_name(value)
    elif key == "test" and value not in TESTS:
        raise ValueError(f"unknown test {value!r}; use one of {', '.join(TESTS)}")


def _takes(stage_text: str, key: str) -> bool:
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
