"""Reading a sweep's TOML file into typed values (agents.config.sweep_config.Sweep), every
table checked by a function of its own, so that a bad file is refused before any cell runs.

`load_sweep` refuses (SweepError) with one line naming the file and the key: an unknown key, a
value of the wrong shape, an agent, retriever, prompt file, rerank stage, option, ``[compare]``
value or ``[ray]`` resource that is not one, and, once the grid is expanded
(agents.config.sweep_grid), a cell whose config cannot be built, an override that no cell of
the grid reads, and a baseline that names no cell.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agents.config.registry import AGENTS
from agents.config.run_config import DEFAULT_MODEL, ConfigError
from agents.config.settings import SETTINGS, from_settings
from agents.config.stages import STAGE_WIDE, parse_stage
from agents.config.sweep_config import AGENT_ONLY, RUN_KEYS, RunFile, Sweep, SweepError
from agents.config.sweep_grid import baseline_cells, expand, takes, unread_overrides
from eval.datasets import default_cache_dir
from eval.trec import DUPLICATE_RULES, RUN_FILE_ORDERS

AXES = ("agent", "dataset", "retriever", "model", "prompt", "rerank")  # set per cell by the grid
TOP_KEYS = {
    "output", "cache_dir", "agents", "retrievers", "models", "datasets", "prompts", "options",
    "compare", "reranks", "run_files", "ray",
}  # fmt: skip
RAY_KEYS = {"address", "resources", "cells"}  # [ray]: the cluster and what each cell asks of it
RESOURCE_KEYS = ("num_cpus", "num_gpus", "memory")  # Ray's, per cell or for every cell
RUN_FILE_KEYS = ("file", "dataset")  # a run_files entry's required keys
ENTRY_KEYS = {*RUN_FILE_KEYS, "duplicates", "order"}
COMPARE_KEYS = {"metric", "baseline", "test"}

Fail = Callable[[str, str], SweepError]  # (key, problem) -> the error naming file and key


def load_sweep(path: Path | str) -> Sweep:
    """Read and check a sweep config; raises SweepError naming the file and the bad key.

    The file's own mistakes are found first; the models last, since asking litellm whether it
    knows one imports it (seconds)."""
    path = Path(path)
    where = str(path)

    def fail(key: str, problem: str) -> SweepError:
        return SweepError(f"{where}: key {key!r}: {problem}")

    raw = _read(path, fail)
    base = path.resolve().parent
    agents = _agents(raw, fail)
    retrievers = _retrievers(raw, fail)
    models = _strings(raw, "models", [DEFAULT_MODEL], fail)
    # A dataset that is a folder beside the config is found from anywhere; names stay names.
    datasets = [_dataset(base, d) for d in _strings(raw, "datasets", ["demo"], fail)]
    try:
        run_files = _run_files(raw.get("run_files", []), base, datasets)
    except ValueError as e:
        raise fail("run_files", str(e)) from None
    prompts = _prompts(raw.get("prompts", {"base": {}}), base, fail)
    reranks = _reranks(raw.get("reranks", [[]]), fail)
    options = _options(raw.get("options", {}), agents, reranks, fail)
    _check_chains(reranks, options, fail)
    compare = _compare(raw.get("compare", {}), fail)
    _check_models(models, fail)
    address, resources, cell_resources = _ray_table(raw.get("ray", {}), fail)
    output, cache_dir = _folders(raw, path.stem, fail)
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
    _check_grid(sweep, fail)
    return sweep


def _read(path: Path, fail: Fail) -> dict[str, Any]:
    """The file's tables; a file that cannot be read, is not TOML or has an unknown key is
    refused."""
    where = str(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise SweepError(f"{where}: cannot read: {e.strerror or e}") from None
    except tomllib.TOMLDecodeError as e:
        raise SweepError(f"{where}: not valid TOML: {e}") from None
    if unknown := sorted(set(raw) - TOP_KEYS):
        raise fail(unknown[0], f"unknown key; known: {', '.join(sorted(TOP_KEYS))}")
    return raw


def _strings(raw: dict[str, Any], key: str, default: list[str] | None, fail: Fail) -> list[str]:
    """A key holding one string or a non-empty list of distinct strings, as a list."""
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


def _agents(raw: dict[str, Any], fail: Fail) -> list[str]:
    """`agents`: registered agents; with run files as first stages, a sweep may have none."""
    if "agents" not in raw and "run_files" in raw:
        return []
    agents = _strings(raw, "agents", None, fail)
    for a in agents:
        if a not in AGENTS:
            raise fail("agents", f"unknown agent {a!r}; known: {', '.join(AGENTS)}")
    return agents


def _retrievers(raw: dict[str, Any], fail: Fail) -> list[str]:
    """`retrievers`: each a spec `RetrieverConfig` takes (default bm25)."""
    from retrievers.config import RetrieverConfig

    retrievers = _strings(raw, "retrievers", ["bm25"], fail)
    for r in retrievers:
        try:
            RetrieverConfig(spec=r)
        except ValueError as e:
            raise fail("retrievers", str(e)) from None
    return retrievers


def _prompts(variants: Any, base: Path, fail: Fail) -> dict[str, dict[str, Path]]:
    """`prompts`: variant -> {prompt name: file beside the config}, each override checked."""
    from prompts import PromptError, parse_prompt_overrides

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
    return prompts


def _reranks(reranks: Any, fail: Fail) -> list[list[str]]:
    """`reranks`: distinct chains, each a list of --rerank specs (a lone spec is a chain)."""
    if not isinstance(reranks, list) or not reranks:
        raise fail("reranks", f"expected a list of rerank chains, e.g. [[], ['llm-listwise']], "
                              f"got {reranks!r}")  # fmt: skip
    reranks = [[chain] if isinstance(chain, str) else chain for chain in reranks]
    for chain in reranks:
        if not isinstance(chain, list) or not all(isinstance(t, str) for t in chain):
            raise fail("reranks", f"a chain is a list of stage specs, got {chain!r}")
    if len({tuple(c) for c in reranks}) != len(reranks):
        raise fail("reranks", f"lists a chain twice: {reranks!r}")
    return reranks


def _options(
    options: Any, agents: list[str], reranks: list[list[str]], fail: Fail
) -> dict[str, Any]:
    """`[options]`: how to run (`RUN_KEYS`) and any setting that is not a grid axis, each
    value checked by the config itself, as a flag's would be."""
    if not isinstance(options, dict):
        raise fail("options", f"expected a table, got {options!r}")
    for key, value in options.items():
        if key in RUN_KEYS:
            if not isinstance(value, RUN_KEYS[key]):
                raise fail(f"options.{key}", f"expected true or false, got {value!r}")
            continue
        _check_option(key, value, options, agents, reranks, fail)
    return options


def _check_option(
    key: str,
    value: Any,
    options: dict[str, Any],
    agents: list[str],
    reranks: list[list[str]],
    fail: Fail,
) -> None:
    """One setting of `[options]`: known, not an axis, and a value its config takes."""
    if key == "rerank":
        raise fail("options.rerank", "rerank chains are a grid axis: give the top-level "
                                     "key reranks = [['llm-listwise'], ...]")  # fmt: skip
    if key not in SETTINGS or key in AXES or key in ("runs_dir", "run_name", "cache_dir"):
        known = [k for k in SETTINGS if k not in AXES] + list(RUN_KEYS)
        raise fail(f"options.{key}", f"unknown option; known: {', '.join(known)}")
    agent = next((a for a in agents if key not in AGENT_ONLY or AGENTS[a].defaults), "none")
    checked = {"agent": agent, key: value}
    if key in STAGE_WIDE:  # checked on the chains' stages that have the option
        chain = [t for c in reranks for t in c if takes(t, key)]
        if not chain:
            raise fail(f"options.{key}", "no stage of any rerank chain has this option")
        checked["rerank"] = chain
        # together: a window is only valid with its step
        checked.update({k: v for k, v in options.items() if k in STAGE_WIDE})
    try:  # each value is checked by the config itself, as a flag's would be
        from_settings(checked)
    except ValueError as e:
        raise fail(f"options.{key}", str(e)) from None


def _check_chains(reranks: list[list[str]], options: dict[str, Any], fail: Fail) -> None:
    """Each stage of `reranks` as its cells will have it, stage-wide options given."""
    wide = {STAGE_WIDE[k]: v for k, v in options.items() if k in STAGE_WIDE}
    for chain in reranks:
        try:
            [parse_stage(text, wide) for text in chain]
        except ValueError as e:
            raise fail("reranks", str(e)) from None


def _compare(compare: Any, fail: Fail) -> dict[str, Any]:
    """`[compare]`: checked now, not after every cell has been paid for."""
    if not isinstance(compare, dict):
        raise fail("compare", f"expected a table, got {compare!r}")
    if unknown := sorted(set(compare) - COMPARE_KEYS):
        raise fail(
            f"compare.{unknown[0]}", f"unknown key; known: {', '.join(sorted(COMPARE_KEYS))}"
        )
    for key, value in compare.items():
        try:
            _check_compare_value(key, value)
        except ValueError as e:
            raise fail(f"compare.{key}", str(e)) from None
    return compare


def _check_models(models: list[str], fail: Fail) -> None:
    """`models`: each one litellm knows (asking imports it: seconds, so asked last)."""
    from agents.llm import check_model

    for m in models:
        try:
            check_model(m)
        except ValueError as e:
            raise fail("models", str(e)) from None


def _ray_table(
    table: Any, fail: Fail
) -> tuple[str | None, dict[str, Any], dict[str, dict[str, Any]]]:
    """[ray]: ``address`` (HOST:PORT or auto), ``resources`` (num_cpus, num_gpus, memory in
    bytes, for every cell) and ``cells`` ({"<cell-name pattern>" = {resources}})."""
    if not isinstance(table, dict):
        raise fail("ray", f"expected a table, got {table!r}")
    if unknown := sorted(set(table) - RAY_KEYS):
        raise fail(f"ray.{unknown[0]}", f"unknown key; known: {', '.join(sorted(RAY_KEYS))}")
    address = table.get("address")
    if address is not None and (not isinstance(address, str) or not address):
        raise fail("ray.address", f"expected HOST:PORT or auto, got {address!r}")
    resources = _resources("ray.resources", table.get("resources", {}), fail)
    cells = table.get("cells", {})
    if not isinstance(cells, dict):
        raise fail("ray.cells", f'expected {{"<cell-name pattern>" = {{...}}}}, got {cells!r}')
    by_pattern = {p: _resources(f"ray.cells.{p}", v, fail) for p, v in cells.items()}
    return address, resources, by_pattern


def _resources(key: str, value: Any, fail: Fail) -> dict[str, Any]:
    """A table of Ray resources (`RESOURCE_KEYS`), each a number >= 0 (memory whole bytes)."""
    if not isinstance(value, dict):
        raise fail(key, f"expected a table of {', '.join(RESOURCE_KEYS)}, got {value!r}")
    for name, amount in value.items():
        if name not in RESOURCE_KEYS:
            raise fail(f"{key}.{name}", f"unknown resource; known: {', '.join(RESOURCE_KEYS)}")
        number = isinstance(amount, int | float) and not isinstance(amount, bool)
        if not number or amount < 0 or (name == "memory" and amount != int(amount)):
            raise fail(f"{key}.{name}", f"expected a number >= 0, got {amount!r}")
    return dict(value)


def _folders(raw: dict[str, Any], stem: str, fail: Fail) -> tuple[str, str | None]:
    """`output` (default: the file's name less .toml) and `cache_dir`, as given."""
    output = raw.get("output", stem)
    cache_dir = raw.get("cache_dir")
    for key, value in (("output", output), ("cache_dir", cache_dir)):
        if value is not None and not isinstance(value, str):
            raise fail(key, f"expected a path string, got {value!r}")
    return output, cache_dir


def _check_grid(sweep: Sweep, fail: Fail) -> None:
    """The grid of the checked file: every cell's config is built, every override read by
    some cell, and the baseline names a cell, before anything runs."""
    try:
        grid = expand(sweep)
    except ConfigError as e:
        raise SweepError(f"{sweep.path}: {e}") from None
    for variant, key in unread_overrides(sweep, grid.cells):
        replay = sweep.options.get("generations")
        hint = " (with generations, the agents send no prompt)" if replay else ""
        raise fail(
            f"prompts.{variant}",
            f"overrides prompt {key!r}, which no agent or rerank stage of this sweep reads{hint}",
        )
    baseline_cells(sweep, grid)  # a baseline that names no cell is refused now


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
