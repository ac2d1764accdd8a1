"""agents.sweep on the toy task with a scripted LLM: cells, resuming, comparison, bad configs."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from agents.commands.sweep import main
from agents.config.sweep_config import SweepError
from agents.config.sweep_file import load_sweep
from agents.config.sweep_grid import cells
from agents.llm import scripted

PASSAGE = "Metformin reduces hepatic glucose production in type 2 diabetes."


def write_config(folder: Path, toy_dir: Path, extra: str = "") -> Path:
    (folder / "my_hyde.txt").write_text("Write a short passage that answers: {query}\nPassage: ")
    config = folder / "sweep.toml"
    config.write_text(
        f"""
output = "out"
cache_dir = "cache"
agents = ["hyde", "query2doc"]
models = ["scripted/x"]
datasets = ["{toy_dir}"]

[prompts]
base = {{}}
shorter = {{ hyde = "my_hyde.txt" }}

[options]
quiet = true
concurrency = 2
max_tokens = 64
{extra}
"""
    )
    return config


@pytest.mark.slow
def test_sweep_runs_each_cell_once_resumes_and_compares(tmp_path, toy_dir, capsys, caplog):
    provider = scripted.install(lambda messages, params: PASSAGE)
    config = write_config(tmp_path, toy_dir)
    grid, notes = cells(load_sweep(config))
    # query2doc uses no hyde prompt: its "shorter" cell is its "base" cell, run once
    assert [c.name for c in grid] == [
        "hyde-bm25q-x-base-toy",
        "hyde-bm25q-x-shorter-toy",
        "query2doc-bm25q-x-base-toy",
    ]
    assert notes == [
        "query2doc-bm25q-x-shorter-toy is the same run as query2doc-bm25q-x-base-toy; run once"
    ]
    assert grid[1].config.prompt_files == {"hyde": str((tmp_path / "my_hyde.txt").resolve())}

    assert main([str(config)]) == 0
    assert provider.calls == 3 * 3  # three queries per cell
    runs = tmp_path / "out" / "runs"
    configs = {c.name: json.loads((runs / c.name / "config.json").read_text()) for c in grid}
    assert (
        configs["hyde-bm25q-x-base-toy"]["prompts"]
        != configs["hyde-bm25q-x-shorter-toy"]["prompts"]
    )
    assert all(cfg["llm"]["max_tokens"] == 64 for cfg in configs.values())
    comparison = tmp_path / "out" / "comparison"
    for name in ("report.md", "leaderboard.md", "leaderboard.csv", "tasks.png", "cost.png"):
        assert (comparison / name).is_file()
    assert len((comparison / "leaderboard.csv").read_text().splitlines()) == 1 + 3
    assert "Against the baseline" in capsys.readouterr().out

    caplog.set_level(logging.INFO, logger="agents.execution.whole_run")
    assert main([str(config)]) == 0  # everything finished: read back, nothing asked
    assert provider.calls == 9
    assert sum("already finished" in r.getMessage() for r in caplog.records) == 3
    status = json.loads((tmp_path / "out" / "cells.json").read_text())
    assert [s["status"] for s in status] == [0, 0, 0]


@pytest.mark.parametrize(
    "extra, key",
    [
        ("bogus = 1", "options.bogus"),
        ("limit = 'ten'", "options.limit"),
        ("[compare]\nmetrc = 'NDCG@10'", "compare.metrc"),
    ],
)
def test_bad_option_gives_one_line_naming_file_and_key(tmp_path, toy_dir, capsys, extra, key):
    config = write_config(tmp_path, toy_dir, extra)
    assert main([str(config)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert err.startswith(f"error: {config}: key '{key}':")


def test_bad_top_level_values_are_named(tmp_path, toy_dir, capsys):
    config = write_config(tmp_path, toy_dir)
    text = config.read_text()
    for old, new, key in [
        ('agents = ["hyde", "query2doc"]', 'agents = ["hide"]', "agents"),
        ('agents = ["hyde", "query2doc"]', 'agent = ["hyde"]', "agent"),
        ('"my_hyde.txt"', '"absent.txt"', "prompts.shorter"),
        ('hyde = "my_hyde.txt"', 'hyd = "my_hyde.txt"', "prompts.shorter"),
    ]:
        config.write_text(text.replace(old, new))
        assert main([str(config)]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and f"key '{key}'" in err and str(config) in err, err


def test_a_sweep_replays_generations_without_calling_a_model(tmp_path, toy_dir):
    """`generations` as a sweep option: every cell reads the file; no model is called."""
    provider = scripted.install(lambda messages, params: AssertionError("an LLM was called"))
    generations = tmp_path / "gens.jsonl"
    generations.write_text(
        "".join(json.dumps({"id": q, "hy_doc": PASSAGE}) + "\n" for q in ("q1", "q2", "q3"))
    )
    config = write_config(tmp_path, toy_dir, f'generations = "{generations}"')
    config.write_text(
        config.read_text().replace('agents = ["hyde", "query2doc"]', 'agents = ["hyde"]')
    )
    # a replay reads no prompt: a prompt variant would override nothing, and is refused
    with pytest.raises(SweepError, match="key 'prompts.shorter': overrides prompt 'hyde', "
                                         "which no agent .*with generations"):  # fmt: skip
        load_sweep(config)
    config.write_text(config.read_text().replace('shorter = { hyde = "my_hyde.txt" }', ""))
    grid, notes = cells(load_sweep(config))
    assert [c.name for c in grid] == ["hyde-bm25q-file_gens-toy"] and len(notes) == 0
    assert main([str(config)]) == 0
    assert provider.calls == 0
    runs = tmp_path / "out" / "runs"
    (run,) = [p for p in runs.iterdir() if p.is_dir()]
    recorded = json.loads((run / "config.json").read_text())
    assert recorded["generations"] == str(generations)
    assert recorded["generation_sha256"] and "file:gens" in run.name.replace("_", ":")
    assert (tmp_path / "out" / "comparison" / "report.html").is_file()


# --- a sweep read before it runs: its own folder, its cells listed, its dry run ---------------

DOCS = Path(__file__).resolve().parents[3] / "docs"


def test_every_sweep_file_under_docs_loads_and_has_its_own_output_folder():
    outputs: dict[Path, str] = {}
    files = sorted(DOCS.glob("sweep-*.toml"))
    assert len(files) >= 2
    for file in files:
        output = load_sweep(file).output
        assert output not in outputs, f"{file.name} writes to {outputs.get(output)}'s folder"
        outputs[output] = file.name


def test_list_prints_every_cell_and_what_differs_and_runs_nothing(tmp_path, toy_dir, capsys):
    provider = scripted.install(lambda messages, params: AssertionError("an LLM was called"))
    config = write_config(tmp_path, toy_dir)
    grid, _ = cells(load_sweep(config))
    assert main([str(config), "--list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (
        f"{config}: 3 cells in {tmp_path / 'out' / 'runs'}, differing in agent, prompt"
    )
    assert [line.split()[0] for line in out[1:4]] == [c.name for c in grid]
    assert out[1].split()[1:] == ["agent=hyde", "prompt=base"]
    assert out[2].split()[1:] == ["agent=hyde", "prompt=shorter"]
    assert out[4] == (
        "query2doc-bm25q-x-shorter-toy is the same run as query2doc-bm25q-x-base-toy; run once"
    )
    assert provider.calls == 0 and not (tmp_path / "out").exists()


def test_dry_run_estimates_every_cell_and_writes_nothing(tmp_path, toy_dir, capsys):
    provider = scripted.install(lambda messages, params: AssertionError("an LLM was called"))
    config = write_config(tmp_path, toy_dir)
    assert main([str(config), "--dry-run"]) == 0
    out = capsys.readouterr().out
    for i, name in enumerate(
        ["hyde-bm25q-x-base-toy", "hyde-bm25q-x-shorter-toy", "query2doc-bm25q-x-base-toy"], 1
    ):
        assert f"[{i}/3] {name}\n" in out
        assert f"dry run (no model called): {tmp_path / 'out' / 'runs' / name}" in out
    assert out.count("\ntotal: ") == 3
    assert provider.calls == 0 and not (tmp_path / "out").exists()


def test_list_and_dry_run_are_one_or_the_other(tmp_path, toy_dir, capsys):
    with pytest.raises(SystemExit) as info:
        main([str(write_config(tmp_path, toy_dir)), "--list", "--dry-run"])
    assert info.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_a_one_query_sweep_without_llm_runs_and_compares(tmp_path, toy_dir, capsys):
    """limit = 1: the comparison has one query per cell, so no test can give a p-value; the
    sweep still writes every file and says so instead of failing."""
    (tmp_path / "run.trec").write_text("q1 Q0 d2 1 2.0 x\nq1 Q0 d1 2 1.0 x\n")
    config = tmp_path / "sweep.toml"
    config.write_text(
        f'output = "out"\ncache_dir = "cache"\nagents = ["none"]\ndatasets = ["{toy_dir}"]\n'
        'run_files = ["run.trec"]\n\n[options]\nlimit = 1\nquiet = true\n'
    )
    assert main([str(config)]) == 0
    captured = capsys.readouterr()
    assert "observations" not in captured.err and "Traceback" not in captured.err
    comparison = tmp_path / "out" / "comparison"
    for name in ("report.md", "leaderboard.csv", "report.html"):
        assert (comparison / name).is_file()
    rows = (comparison / "leaderboard.csv").read_text().splitlines()
    assert len(rows) == 1 + 2
    assert "comparison written to" in captured.out
    status = json.loads((tmp_path / "out" / "cells.json").read_text())
    assert [s["status"] for s in status] == [0, 0]
