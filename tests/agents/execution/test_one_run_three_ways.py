"""One pipeline, one config: the Python call, the CLI and a sweep make the same run.

dataset -> agent -> rerank stages -> evaluator, every arrow saved in the run folder.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from agents.commands.run import main
from agents.config.binding import binding
from agents.config.registry import STAGES, StageSpec
from agents.config.run_config import ConfigError, LLMConfig, RunConfig, StageConfig
from agents.config.serialise import from_dict, to_dict
from agents.config.settings import from_settings
from agents.config.stages import parse_stage
from agents.execution.whole_run import run_dataset
from agents.llm import scripted
from eval.records import read_records
from tests.helpers import REPO

PASSAGE = "Statins inhibit HMG-CoA reductase and lower cholesterol."


def snapshot(folder: Path) -> dict[str, object]:
    """A run folder's content, minus what differs between two runs of the same config
    (wall times; the config's runtime part is compared separately)."""
    out: dict[str, object] = {}
    for path in sorted(folder.rglob("*")):
        if not path.is_file() or path.name in (".lock", "config.json"):
            continue
        rel = str(path.relative_to(folder))
        if path.suffix == ".jsonl":
            rows = [json.loads(line) for line in path.read_text().splitlines()]
            for row in rows:
                row.pop("seconds", None)
                for step in row.get("steps", []):
                    step.pop("seconds", None)
                    step.get("usage", {}).pop("latency_s", None)
                row.get("usage", {}).pop("latency_s", None)
            out[rel] = sorted(rows, key=lambda r: r.get("query_id", ""))  # finishing order varies
        elif path.name in ("metrics.json", "results.json"):
            out[rel] = _without_times(json.loads(path.read_text()))
        else:
            out[rel] = path.read_text().replace(f"| {folder.name} |", "| <run> |")
    return out


def _without_times(value):
    if isinstance(value, dict):
        return {
            k: _without_times(v)
            for k, v in value.items()
            if k not in ("seconds", "evaluation_time", "latency_s", "cached_calls")
        }
    return value


@pytest.fixture
def scripted_model():
    return scripted.install(lambda messages, params: PASSAGE)


def cli(tmp_path: Path, toy_dir: Path | str, name: str, *extra: str, cache: str = "cache") -> int:
    return main([
        "--agent", "hyde", "--dataset", str(toy_dir), "--model", "scripted/x",
        "--runs-dir", str(tmp_path / "runs"), "--cache-dir", str(tmp_path / cache),
        "--run-name", name, "--quiet", *extra,
    ])  # fmt: skip


def test_the_python_call_and_the_cli_make_the_same_run(tmp_path, scripted_model):
    """On the bundled demo (15 queries, 342 passages), as the issue asks."""
    assert cli(tmp_path, "demo", "by-cli", "--max-tokens", "64", cache="cli-cache") == 0
    config = RunConfig(
        agent="hyde",
        dataset="demo",
        llm=LLMConfig(model="scripted/x", max_tokens=64),
        runs_dir=str(tmp_path / "runs"),
        cache_dir=str(tmp_path / "python-cache"),  # both pay: identical usage too
        run_name="by-python",
    )
    result = run_dataset(config, progress=False)
    assert result.failed == 0
    runs = tmp_path / "runs"
    assert snapshot(runs / "by-python") == snapshot(runs / "by-cli")
    assert (
        result.tasks["demo"].metrics
        == json.loads((runs / "by-cli" / "demo" / "metrics.json").read_text())["metrics"]
    )
    assert len(result.tasks["demo"].records) == 15
    by_cli = json.loads((runs / "by-cli" / "config.json").read_text())
    by_python = json.loads((runs / "by-python" / "config.json").read_text())
    assert binding(from_dict(by_cli)) == binding(from_dict(by_python))


def test_config_json_reads_back_as_the_same_config_and_the_same_run(
    tmp_path, toy_dir, scripted_model
):
    assert cli(tmp_path, toy_dir, "r", "--depth", "50", "--temperature", "0.5", "--pad") == 0
    saved = json.loads((tmp_path / "runs" / "r" / "config.json").read_text())
    config = from_dict(saved)
    assert to_dict(config) == saved  # a lossless round trip
    assert config.eval.depth == 50 and config.eval.pad and config.llm.temperature == 0.5
    assert config.recorded.prompts and all(len(h) == 64 for h in config.recorded.prompts.values())
    calls = scripted_model.calls
    result = run_dataset(config, progress=False)  # recognised as the same run: resumed, not refused
    assert scripted_model.calls == calls
    assert result.run_dir == tmp_path / "runs" / "r"
    # only the settings that decide the output bind the folder
    assert cli(tmp_path, toy_dir, "r", "--depth", "50", "--temperature", "0.5", "--pad",
               "--concurrency", "1", "--cache", "off") == 0  # fmt: skip


def test_unknown_keys_in_a_saved_config_are_named():
    with pytest.raises(ConfigError, match="llm.temprature: unknown setting"):
        from_dict({"agent": "hyde", "llm": {"temprature": 1}})


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"limit": 0}, "limit: must be a positive integer"),
        ({"depth": -1}, "eval.depth: must be a positive integer"),
        ({"agent": "hyde", "temperature": float("nan")}, "llm.temperature: expected a finite"),
        ({"agent": "hyde", "cache": "sometimes"}, "llm.cache: must be one of"),
        ({"agent": "search-o1", "max_turns": 0}, "max_turns must be at least 1"),
        ({"agent": "hyde", "option": ["max_turns=3"]}, "'hyde' has options: none"),
        ({"colour": "red"}, "colour: unknown setting"),
    ],
)
def test_bad_settings_are_refused_by_the_config_itself(settings, message):
    with pytest.raises(ConfigError, match=message):
        from_settings(settings)


def test_a_sweep_cell_and_the_same_cli_command_make_the_same_folder(
    tmp_path, toy_dir, scripted_model
):
    from agents.commands.sweep import main as sweep_main
    from agents.config.sweep_file import load_sweep
    from agents.config.sweep_grid import cells

    (tmp_path / "sweep.toml").write_text(
        f'output = "out"\ncache_dir = "cache"\nagents = ["hyde"]\nmodels = ["scripted/x"]\n'
        f'datasets = ["{toy_dir}"]\n[options]\nquiet = true\nmax_tokens = 64\ndepth = 20\n'
    )
    assert sweep_main([str(tmp_path / "sweep.toml")]) == 0
    [cell] = cells(load_sweep(tmp_path / "sweep.toml"))[0]
    assert isinstance(cell.config, RunConfig)  # a cell is a config, never an argv
    code = main([
        "--agent", "hyde", "--dataset", str(toy_dir), "--model", "scripted/x",
        "--max-tokens", "64", "--depth", "20", "--runs-dir", str(tmp_path / "cli"),
        "--cache-dir", str(tmp_path / "cli-cache"), "--quiet",
    ])  # fmt: skip
    assert code == 0  # (its own cache: both pay, so even the usage is the same)
    [cli_dir] = (tmp_path / "cli").iterdir()
    sweep_dir = tmp_path / "out" / "runs" / cell.name
    assert snapshot(sweep_dir) == snapshot(cli_dir)
    read = lambda d: binding(from_dict(json.loads((d / "config.json").read_text())))  # noqa: E731
    assert read(sweep_dir) == read(cli_dir)


def test_a_sub_prompt_override_is_recorded_with_the_text_the_model_received(tmp_path, toy_dir):
    text = "Condense what these say about {search_query}: {documents}\nGiven: {prev_reasoning}"
    override = tmp_path / "documents.txt"
    override.write_text(text)

    def respond(messages, params):
        if "Condense" in messages[-1]["content"]:
            return "Statins lower LDL."
        return "<|begin_search_query|>statins<|end_search_query|>"

    provider = scripted.install(respond)
    prompt = f"search-o1/documents={override}"
    extra = ["--agent", "search-o1", "--limit", "1", "--prompt", prompt, "--max-searches", "1"]
    assert cli(tmp_path, toy_dir, "o1", *extra) == 0
    config = json.loads((tmp_path / "runs" / "o1" / "config.json").read_text())
    assert config["prompts"]["search-o1/documents"] == hashlib.sha256(text.encode()).hexdigest()
    # the family's main prompt is untouched by a sub-prompt override
    main_prompt = (REPO / "prompts" / "search-o1" / "default.txt").read_bytes()
    assert config["prompts"]["search-o1/default"] == hashlib.sha256(main_prompt).hexdigest()
    record = read_records(tmp_path / "runs" / "o1" / "toy" / "queries.jsonl")["q1"]
    [documents_step] = [s for s in record["steps"] if s["node"] == "documents"]
    sent = documents_step["messages"][0]["content"]
    assert sent.startswith("Condense what these say about statins: ")
    assert provider.calls >= 2


class Reverse:
    """A test stage: the top `n` in reverse order, the rest below them as they were."""

    def __init__(self, ctx):
        self.n = ctx.options["n"]

    async def rerank(self, query_id, query, ranking):
        ids = list(ranking)
        top, rest = ids[: self.n][::-1], ids[self.n :]
        new = {d: float(len(ids) - i) for i, d in enumerate(top + rest)}
        return {"ranking": new, "steps": [{"node": "reverse", "doc_ids": top}]}


@pytest.fixture
def reverse_stage():
    STAGES["reverse"] = StageSpec("reverse", "test stage", Reverse, defaults={"n": 2})
    yield
    del STAGES["reverse"]


def test_a_rerank_stage_runs_on_the_saved_first_stage_and_is_scored(
    tmp_path, toy_dir, reverse_stage
):
    args = ["--agent", "none", "--dataset", str(toy_dir), "--runs-dir", str(tmp_path / "runs"),
            "--cache-dir", str(tmp_path / "cache"), "--run-name", "r", "--quiet"]  # fmt: skip
    assert main([*args, "--rerank", "reverse,n=2"]) == 0
    task = tmp_path / "runs" / "r" / "toy"
    first = read_records(task / "queries.jsonl")
    second = read_records(task / "rerank-1-reverse" / "queries.jsonl")
    for q, record in first.items():
        ids = [d for d, _ in record["ranking"]]
        assert [d for d, _ in second[q]["ranking"]][:2] == ids[:2][::-1]
    summary = json.loads((task / "metrics.json").read_text())
    assert summary["final_stage"] == "rerank-1-reverse"
    assert summary["stages"]["agent"]["NDCG@10"] == pytest.approx(1.0)  # d-relevant first
    assert summary["metrics"] == summary["stages"]["rerank-1-reverse"]
    assert summary["metrics"]["NDCG@10"] < 1.0  # the relevant doc moved to rank 2
    assert (task / "rerank-1-reverse" / "run.trec").is_file()
    config = json.loads((tmp_path / "runs" / "r" / "config.json").read_text())
    assert config["rerank"] == [{"kind": "reverse", "options": {"n": 2}}]
    assert main([*args, "--rerank", "reverse,n=3"]) == 2  # another config: refused


def test_retriever_settings_on_the_command_line_reach_the_retriever(tmp_path, toy_dir, monkeypatch):
    import agents.execution.whole_run

    seen = []

    def recording(config, task, cache_dir, progress=True):
        seen.append(config)
        raise ValueError("stop here: the settings arrived")

    monkeypatch.setattr(agents.execution.whole_run, "build_retriever", recording)
    code = main([
        "--agent", "none", "--dataset", str(toy_dir), "--runs-dir", str(tmp_path / "runs"),
        "--cache-dir", str(tmp_path / "cache"), "--quiet",
        "--retriever", "bm25+dense+api:text-embedding-3-small", "--device", "cpu",
        "--batch-size", "7", "--max-length", "64", "--dtype", "fp32", "--instructions", "none",
        "--embed-api-base", "http://127.0.0.1:9/v1", "--embed-option", "dimensions=256",
        "--embed-batch-size", "5", "--fusion", "combsum", "--fusion-k", "30",
        "--bm25-method", "lucene", "--k1", "1.2", "--b", "0.75",
    ])  # fmt: skip
    assert code == 2
    [first] = seen  # BM25 (for the baselines) is built first, with every setting beside it
    assert first.bm25.method == "lucene" and first.bm25.k1 == 1.2 and first.bm25.b == 0.75
    assert first.dense.device == "cpu" and first.dense.batch_size == 7
    assert first.dense.max_length == 64 and first.dense.instructions == "none"
    assert first.api.api_base == "http://127.0.0.1:9/v1" and first.api.batch_size == 5
    assert first.fusion.method == "combsum" and first.fusion.k == 30
    saved = json.loads(next((tmp_path / "runs").glob("*/config.json")).read_text())["retriever"]
    assert saved["spec"] == "bm25+dense+api:text-embedding-3-small"
    assert saved["dense"] == {"device": "cpu", "dtype": "fp32", "batch_size": 7,
                              "max_length": 64, "instructions": "none", "family": "auto",
                              "trust_remote_code": False,
                              "ignore_identical_ids": True,
                              "r2med_rules": False}  # fmt: skip
    assert saved["api"] == {"api_base": "http://127.0.0.1:9/v1", "batch_size": 5,
                            "params": {"dimensions": "256"}}  # fmt: skip
    assert saved["fusion"]["method"] == "combsum" and saved["fusion"]["k"] == 30
    assert from_dict({"retriever": saved}).retriever.dense == first.dense


def test_a_stage_spec_names_its_model_after_a_colon(monkeypatch):
    monkeypatch.setitem(
        STAGES, "judge", StageSpec("judge", "test", Reverse, defaults={"model": "", "n": 1})
    )
    stage = parse_stage("judge:BAAI/bge-reranker-v2-m3,n=3")
    assert stage == StageConfig("judge", {"model": "BAAI/bge-reranker-v2-m3", "n": 3})
    with pytest.raises(ConfigError, match="given twice"):
        parse_stage("judge:a,model=b")
    with pytest.raises(ConfigError, match="unknown stage 'nope'"):
        parse_stage("nope")
