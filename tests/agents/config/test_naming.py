"""agents.config.naming: run folder names and labels from the typed config, and the label a run
stores in its folder for eval.compare to show."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from agents.commands.run import main as run_main
from agents.config.naming import llm_free, prompt_version, run_folder_name, run_label, stage_labels
from agents.config.run_config import Recorded, RunConfig, default_run_name
from agents.config.settings import from_settings
from agents.llm import scripted
from agents.shared.generations import parse_source
from eval.compare import compare_runs, load_run, reference_run
from eval.plumbing.files import safe_name
from eval.runs import RUN_INFO_FILE, RunFolder

O1 = {"agent": "search-o1", "model": "local/qwen2.5-coder-0.5b"}


# ---- folder names ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "changes, name",
    [
        ({}, "search-o1-bm25q-qwen2.5-coder-0.5b-demo"),
        ({"final_ranking": "fuse"}, "search-o1-bm25q-qwen2.5-coder-0.5b-demo-final_ranking=fuse"),
        ({"bm25_method": "lucene"}, "search-o1-lucene-qwen2.5-coder-0.5b-demo"),
        ({"retriever": "bm25+dense"}, "search-o1-bm25+dense-qwen2.5-coder-0.5b-demo"),
        ({"model": "openai/gpt-4o-mini"}, "search-o1-bm25q-gpt-4o-mini-demo"),
        ({"dataset": "/data/scifact/"}, "search-o1-bm25q-qwen2.5-coder-0.5b-scifact"),
        (
            {"limit": 5, "pad": True, "ties": "ascending"},
            "search-o1-bm25q-qwen2.5-coder-0.5b-demo-limit5-pad-ties=ascending",
        ),
        ({"agent": "none"}, "none-bm25q-demo"),
        ({"retriever": "api:text/embed x"}, "search-o1-api_text_embed_x-qwen2.5-coder-0.5b-demo"),
    ],
)
def test_run_folder_names_keep_todays_names(changes, name):
    config = from_settings({**O1, **changes})
    assert run_folder_name(config) == default_run_name(config) == name


def test_run_folder_name_tells_sweep_variants_and_rerank_stages_apart():
    assert run_folder_name(from_settings(O1), variant="short") == (
        "search-o1-bm25q-qwen2.5-coder-0.5b-short-demo"
    )
    staged = from_settings({**O1, "rerank": ["llm-listwise,depth=20"]})
    assert run_folder_name(staged) == (
        "search-o1-bm25q-qwen2.5-coder-0.5b-demo-rerank=llm-listwise,depth=20"
    )
    assert stage_labels(staged) == ["llm-listwise,depth=20"]  # the run's model is not repeated
    other = from_settings({**O1, "rerank": ["llm-listwise:openai/gpt-4o"]})
    assert stage_labels(other) == ["llm-listwise,model=gpt-4o"]
    served = from_settings({**O1, "rerank": ["llm-listwise:openai/m,api_base=http://u:pw@h/v1"]})
    assert stage_labels(served) == ["llm-listwise,model=m,api_base=http://u:***@h/v1"]


@pytest.mark.parametrize(
    "url, shown",
    [
        ("http://TOKEN0123456789@h/v1", "http://***@h/v1"),  # a lone userinfo is a token
        ("http://h/v1?code=c0123456789&m=q", "http://h/v1?code=***&m=q"),
        ("http://u:pw0123456789@a/v1?apikey=k0123456789", "http://u:***@a/v1?apikey=***"),
    ],
)
def test_a_stage_server_names_the_run_by_its_masked_url(url, shown):
    """Names are printed, shared and become paths: built from the URL `public_url` gives."""
    config = from_settings({**O1, "rerank": [f"llm-listwise:openai/m,api_base={url}"]})
    assert stage_labels(config) == [f"llm-listwise,model=m,api_base={shown}"]
    label = safe_name(f"rerank=llm-listwise,model=m,api_base={shown}")
    assert run_folder_name(config).endswith(label)
    assert "0123456789" not in run_folder_name(config) + run_label(config)


def test_a_remote_retriever_names_the_run_by_its_url():
    """A remote:<url> with a credential never gets this far (the config refuses it)."""
    config = from_settings({"agent": "none", "retriever": "remote:http://10.0.0.5:8000"})
    assert run_folder_name(config) == safe_name("none-remote:http://10.0.0.5:8000-demo")


def test_a_rerank_of_a_finished_run_is_named_after_it():
    cross = {"kind": "cross", "options": {"model": "BAAI/bge-reranker-base"}}
    config = RunConfig(source_run="runs/none-bm25q-demo", rerank=(cross,))
    assert run_folder_name(config) == "none-bm25q-demo-reranked-cross,model=bge-reranker-base"


# ---- labels ---------------------------------------------------------------------------------


def test_run_label_names_agent_retriever_model_and_prompt_version():
    assert run_label(from_settings({"agent": "none", "bm25_method": "lucene"})) == "none lucene"
    hyde = RunConfig(agent="hyde", recorded=Recorded(prompts={"hyde": "ab" * 32}))
    label = run_label(hyde)
    assert label == f"hyde bm25q qwen2.5-coder-0.5b p:{prompt_version({'hyde': 'ab' * 32})}"
    assert len(label.split()[-1]) == 9
    other = RunConfig(agent="hyde", recorded=Recorded(prompts={"hyde": "cd" * 32}))
    assert run_label(other) != label
    assert prompt_version({}) == "-"
    staged = from_settings({**O1, "rerank": ["llm-listwise"]})
    assert run_label(staged) == "search-o1 bm25q qwen2.5-coder-0.5b rerank:llm-listwise"


@pytest.mark.parametrize(
    "source, label",
    [
        ("r2med:o3-mini", "r2med:o3-mini"),
        (" r2med: o3-mini @ ~/gens/ ", "r2med:o3-mini@gens"),
        ("R2MED:o3-mini@/", "r2med:o3-mini"),
        ("out/mine.jsonl", "file:mine"),
        ("runs/live", "run:live"),
    ],
)
def test_a_generation_source_is_labelled_from_its_parsed_spec(source, label):
    assert parse_source(source, "hyde").label == label
    config = RunConfig(agent="hyde", generations=source)
    assert run_label(config) == f"hyde bm25q {label}"  # the source stands for the model
    assert not llm_free(config)  # an LLM wrote the texts it replays


def test_llm_free_runs_call_no_model_and_replay_no_text():
    assert llm_free(RunConfig())
    assert llm_free(from_settings({"agent": "none", "rerank": ["cross:BAAI/bge-reranker-base"]}))
    assert not llm_free(from_settings({"agent": "none", "rerank": ["llm-listwise"]}))
    assert not llm_free(RunConfig(agent="hyde"))


# ---- the label travels with the run folder ---------------------------------------------------


def _run(toy_dir: Path, root: Path, name: str, *extra: str) -> Path:
    argv = ["--dataset", str(toy_dir), "--runs-dir", str(root), "--cache-dir",
            str(root / ".cache"), "--run-name", name, "--quiet", *extra]  # fmt: skip
    assert run_main(argv) == 0
    return root / name


def test_a_run_stores_its_label_and_compare_shows_it(toy_dir, tmp_path):
    lucene = _run(toy_dir, tmp_path, "a", "--agent", "none", "--bm25-method", "lucene")
    assert RunFolder(lucene).info() == {"label": "none lucene", "llm_free": True}
    moved = tmp_path / "elsewhere"
    shutil.copytree(lucene, moved)
    config = json.loads((moved / "config.json").read_text())
    (moved / "config.json").write_text(json.dumps({**config, "agent": "renamed"}))
    info = json.loads((moved / "toy" / "task.json").read_text())
    info.pop("binding")  # else its task is refused: made under agent none, not "renamed"
    (moved / "toy" / "task.json").write_text(json.dumps(info))
    assert load_run(moved).label == "none lucene"  # read, not computed from the config


def test_an_older_folder_is_labelled_by_its_name_and_judged_by_its_calls(toy_dir, tmp_path):
    scripted.install(lambda messages, params: "Aspirin inhibits platelet cyclooxygenase.")
    hyde = _run(toy_dir, tmp_path, "hyde", "--agent", "hyde", "--model", "scripted/x")
    none = _run(toy_dir, tmp_path, "plain", "--agent", "none")
    assert RunFolder(hyde).info()["llm_free"] is False
    assert reference_run(compare_runs([hyde, none])) == "none bm25q"  # as stored
    for folder in (hyde, none):
        (folder / RUN_INFO_FILE).unlink()  # as written before run.json existed
    run = load_run(none)
    assert (run.label, run.llm_free) == ("plain", None)
    c = compare_runs([hyde, none])
    assert c.labels == ["hyde", "plain"]
    assert reference_run(c) == "plain"  # the one whose records show no LLM call
