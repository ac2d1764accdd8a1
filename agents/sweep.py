"""Run a grid of configurations and compare them: `python -m agents.sweep sweep.toml`.

The TOML file (see docs/sweep-example.toml) lists agents × retrievers × models × prompt
variants × datasets, plus options shared by every cell. Each cell is one `agents.run` run,
in-process, in `<output>/runs/<cell>`, all with the same `--cache-dir`, so indexes and LLM
answers are shared. Running the sweep again resumes it: agents.run reads back finished
tasks and answers only what is missing. At the end the cells of each dataset are compared
(`eval.compare`) into `<output>/comparison` (one sub-folder per dataset when there are
several).

Cells that would run the same configuration are run once: agents without an LLM ignore the
model and prompt axes, and a prompt variant that overrides no prompt an agent uses is that
agent's run without overrides.
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.run import DEFAULT_MODEL
from agents.run import main as run_main
from agents.secrets import redact
from eval.datasets import default_cache_dir
from eval.files import FolderError, writable_folder, write_json

# Options shared by every cell, as agents.run flags: key -> type the value must have.
OPTION_TYPES: dict[str, type | tuple[type, ...]] = {
    "limit": int,
    "max_tokens": int,
    "concurrency": int,
    "depth": int,
    "temperature": (int, float),
    "k1": (int, float),
    "b": (int, float),
    "rate_limit": (int, float),
    "bm25_method": str,
    "missing": str,
    "api_base": str,
    "cache": str,
    "final_ranking": str,
    "max_searches": int,
    "max_turns": int,
    "top_k": int,
    "option": list,  # agent settings, ["max_turns=8", ...] -> --option each
    "quiet": bool,
    "overwrite": bool,
}
TOP_KEYS = {
    "output", "cache_dir", "agents", "retrievers", "models", "datasets", "prompts", "options",
    "compare",
}  # fmt: skip
COMPARE_KEYS = {"metric", "baseline", "test"}


class SweepError(ValueError):
    """A bad sweep config; the message names the file and the key."""


@dataclass(frozen=True)
class Cell:
    name: str
    dataset: str
    argv: list[str]


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
    compare: dict[str, Any] = field(default_factory=dict)


def load_sweep(path: Path | str) -> Sweep:
    """Read and check a sweep config; raises SweepError naming the file and the bad key."""
    from agents.llm import check_model
    from agents.registry import AGENTS
    from prompts import PromptError, parse_prompt_overrides
    from retrievers.search import check_spec

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

    agents = strings("agents", None)
    for a in agents:
        if a not in AGENTS:
            raise fail("agents", f"unknown agent {a!r}; known: {', '.join(AGENTS)}")
    retrievers = strings("retrievers", ["bm25"])
    for r in retrievers:
        try:
            check_spec(r)
        except ValueError as e:
            raise fail("retrievers", str(e)) from None
    models = strings("models", [DEFAULT_MODEL])
    for m in models:
        try:
            check_model(m)
        except ValueError as e:
            raise fail("models", str(e)) from None
    # A dataset that is a folder beside the config is found from anywhere; names stay names.
    datasets = [
        str((base / d).resolve()) if (base / d).is_dir() else d
        for d in strings("datasets", ["demo"])
    ]

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

    options = raw.get("options", {})
    if not isinstance(options, dict):
        raise fail("options", f"expected a table, got {options!r}")
    for key, value in options.items():
        if key not in OPTION_TYPES:
            raise fail(f"options.{key}", f"unknown option; known: {', '.join(OPTION_TYPES)}")
        expected = OPTION_TYPES[key]
        if isinstance(value, bool) and expected is not bool or not isinstance(value, expected):
            raise fail(f"options.{key}", f"expected {_type_name(expected)}, got {value!r}")
        if key == "option" and not all(isinstance(v, str) and "=" in v for v in value):
            raise fail("options.option", f"expected a list of 'KEY=VALUE' strings, got {value!r}")

    compare = raw.get("compare", {})
    if not isinstance(compare, dict):
        raise fail("compare", f"expected a table, got {compare!r}")
    if unknown := sorted(set(compare) - COMPARE_KEYS):
        raise fail(
            f"compare.{unknown[0]}", f"unknown key; known: {', '.join(sorted(COMPARE_KEYS))}"
        )

    output = raw.get("output", path.stem)
    cache_dir = raw.get("cache_dir")
    for key, value in (("output", output), ("cache_dir", cache_dir)):
        if value is not None and not isinstance(value, str):
            raise fail(key, f"expected a path string, got {value!r}")
    return Sweep(
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
    )


def cells(sweep: Sweep) -> tuple[list[Cell], list[str]]:
    """The grid's distinct runs, in config order, and a note for each duplicate left out."""
    from agents.registry import AGENTS

    out: list[Cell] = []
    notes: list[str] = []
    seen: dict[tuple, str] = {}
    shared = _option_flags(sweep.options)
    for dataset in sweep.datasets:
        for agent in sweep.agents:
            spec = AGENTS[agent]
            families = {p.split("/")[0] for p in spec.prompts}
            for retriever in sweep.retrievers:
                for model in sweep.models if spec.uses_llm else [None]:
                    for variant, overrides in sweep.prompts.items():
                        used = {k: v for k, v in overrides.items() if k.split("/")[0] in families}
                        key = (dataset, agent, retriever, model, tuple(sorted(used.items())))
                        parts = [agent, _slug(retriever)]
                        if model:
                            parts += [_slug(model.split("/")[-1]), variant]
                        parts.append(_slug(Path(dataset).name or dataset))
                        name = "-".join(parts)
                        if key in seen:
                            if seen[key] != name:
                                notes.append(f"{name} is the same run as {seen[key]}; run once")
                            continue
                        seen[key] = name
                        argv = ["--agent", agent, "--dataset", dataset, "--retriever", retriever]
                        if model:
                            argv += ["--model", model]
                        for prompt, file in used.items():
                            argv += ["--prompt", f"{prompt}={file}"]
                        out.append(Cell(name, dataset, argv + shared))
    return out, notes


def run_sweep(sweep: Sweep) -> int:
    """Run every cell (resuming finished ones), then compare them; 0 when all succeeded."""
    from eval.compare import CompareError, compare_runs, comparison_markdown, write_comparison

    grid, notes = cells(sweep)
    runs_dir = writable_folder(sweep.output / "runs", f"{sweep.path}: output")
    for note in notes:
        print(note)
    status: dict[str, int | str] = {}
    for i, cell in enumerate(grid, 1):
        argv = [*cell.argv, "--runs-dir", str(runs_dir), "--run-name", cell.name]
        argv += ["--cache-dir", str(sweep.cache_dir)]
        print(f"[{i}/{len(grid)}] {cell.name}", flush=True)
        try:
            status[cell.name] = run_main(argv)
        except SystemExit as e:  # argparse or a refused run folder: this cell only
            status[cell.name] = e.code if isinstance(e.code, int) else 2
            if isinstance(e.code, str):
                print(e.code, file=sys.stderr)
    write_json(
        sweep.output / "cells.json",
        [{"name": c.name, "argv": [redact(a) for a in c.argv], "status": status[c.name]}
         for c in grid],  # fmt: skip
    )

    failed = [n for n, rc in status.items() if rc != 0]
    by_dataset: dict[str, list[Cell]] = {}
    for cell in grid:
        if (runs_dir / cell.name / "config.json").is_file() and status[cell.name] in (0, 1):
            by_dataset.setdefault(cell.dataset, []).append(cell)
    for dataset, group in by_dataset.items():
        out = sweep.output / "comparison"
        if len(sweep.datasets) > 1:
            out = out / _slug(Path(dataset).name or dataset)
        names = [c.name for c in group]
        baseline = sweep.compare.get("baseline")
        if baseline not in names:
            baseline = None
        try:
            comparison = compare_runs(
                [runs_dir / n for n in names],
                baseline=runs_dir / baseline if baseline else None,
                metric=sweep.compare.get("metric", "NDCG@10"),
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


def _option_flags(options: dict[str, Any]) -> list[str]:
    flags: list[str] = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if key == "option":
            for pair in value:
                flags += ["--option", pair]
        elif isinstance(value, bool):
            flags += [flag] if value else []
        else:
            flags += [flag, str(value)]
    return flags


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "x"


def _type_name(expected: type | tuple[type, ...]) -> str:
    types = expected if isinstance(expected, tuple) else (expected,)
    names = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}
    return " or ".join(names.get(t, f"a {t.__name__}") for t in types)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m agents.sweep",
        description="Run a grid of agents.run configurations from a TOML file and compare them.",
    )
    p.add_argument("config", type=Path, help="the sweep's TOML file (see docs/sweep-example.toml)")
    args = p.parse_args(argv)
    try:
        sweep = load_sweep(args.config)
        return run_sweep(sweep)
    except (SweepError, FolderError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
