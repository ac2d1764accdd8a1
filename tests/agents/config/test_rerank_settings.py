"""Rerank settings on the command line and in sweeps: stage-wide flags, the stage's model."""

from __future__ import annotations

import json

import pytest

from agents.commands.run import main
from agents.config.run_config import ConfigError, RunConfig, default_run_name
from agents.config.serialise import to_dict
from agents.config.settings import from_settings
from agents.config.sweep_config import SweepError
from agents.config.sweep_file import load_sweep
from agents.config.sweep_grid import cells
from agents.llm import scripted
from eval.records import read_records


def stages(**settings):
    return from_settings(settings).rerank


def test_stage_wide_flags_fill_the_stages_that_have_the_option_unless_their_spec_sets_it():
    listwise, cross, pointwise = stages(
        rerank=["llm-listwise,window=4", "cross:some/model", "llm-pointwise,depth=7"],
        rerank_depth=20, rerank_window=10, rerank_step=3,
    )  # fmt: skip
    assert (listwise.options["depth"], listwise.options["window"], listwise.options["step"]) == (
        20, 4, 3  # window from its spec
    )  # fmt: skip
    assert cross.options["depth"] == 20 and cross.options["model"] == "some/model"
    assert pointwise.options["depth"] == 7 and "window" not in pointwise.options


def test_a_stage_wide_flag_no_stage_takes_is_refused_naming_it():
    with pytest.raises(ConfigError, match="rerank_window 10: no rerank stage has option window"):
        stages(rerank=["cross:m"], rerank_window=10)
    with pytest.raises(ConfigError, match="rerank_depth: there is no rerank stage"):
        stages(rerank_depth=10)
    with pytest.raises(ConfigError, match="rerank_model x/y: no rerank stage has option model"):
        stages(rerank=["cross:m"], rerank_model="x/y")  # a cross-encoder is named by its spec


def test_llm_stages_rerank_with_the_run_model_unless_given_their_own():
    (own,) = stages(rerank=["llm-listwise"], model="openai/gpt-4o-mini", api_base="http://h:1")
    assert own.options["model"] == "openai/gpt-4o-mini"
    config = from_settings({"rerank": ["llm-listwise", "llm-pointwise:openai/gpt-4o"],
                            "model": "hosted_vllm/qwen", "api_base": "http://h:1"})  # fmt: skip
    listwise, pointwise = config.rerank
    # the run's model keeps the run's server; another model is never sent there
    assert config.stage_llm(listwise) == ("hosted_vllm/qwen", "http://h:1")
    assert config.stage_llm(pointwise) == ("openai/gpt-4o", None)
    assert config.llm_targets() == [("hosted_vllm/qwen", "http://h:1"), ("openai/gpt-4o", None)]
    config = from_settings({"agent": "none", "rerank": ["llm-listwise"], "rerank_model": "a/b"})
    assert config.llm_targets() == [("a/b", None)]  # the agent calls no model


def test_a_stage_api_base_password_never_reaches_the_config():
    config = from_settings({"rerank": ["llm-listwise:openai/m,api_base=http://u:hunter2@h:1/v1"]})
    text = json.dumps(to_dict(config))
    assert "hunter2" not in text and "http://u:***@h:1/v1" in text


def test_folder_names_tell_stage_options_and_a_stage_model_apart():
    base = {"agent": "none", "model": "local/qwen2.5-coder-0.5b"}
    names = {
        default_run_name(from_settings({**base, "rerank": spec}))
        for spec in (["llm-listwise"], ["llm-listwise,depth=20"], ["llm-listwise:openai/gpt-4o"])
    }
    assert names == {
        "none-bm25q-qwen2.5-coder-0.5b-demo-rerank=llm-listwise",
        "none-bm25q-qwen2.5-coder-0.5b-demo-rerank=llm-listwise,depth=20",
        "none-bm25q-qwen2.5-coder-0.5b-demo-rerank=llm-listwise,model=gpt-4o",
    }
    assert RunConfig().rerank == ()


def test_a_rerank_model_serves_the_stage_and_the_run_model_the_agent(tmp_path, toy_dir):
    asked: list[str] = []

    def respond(messages, params):
        content = messages[-1]["content"]
        if "Rank the" in content or "rank the" in content:
            asked.append("rerank")
            return "[2] > [1]"
        asked.append("agent")
        return "Metformin lowers hepatic glucose production."

    scripted.install(respond, name="agentmodel")
    stage_provider = scripted.install(respond, name="stagemodel")
    assert main([
        "--agent", "hyde", "--dataset", str(toy_dir), "--model", "agentmodel/a",
        "--rerank", "llm-listwise", "--rerank-model", "stagemodel/b", "--rerank-window", "2",
        "--rerank-step", "1", "--rerank-depth", "3",
        "--runs-dir", str(tmp_path / "runs"), "--cache-dir", str(tmp_path / "cache"),
        "--run-name", "r", "--quiet",
    ]) == 0  # fmt: skip
    config = json.loads((tmp_path / "runs" / "r" / "config.json").read_text())
    (stage,) = config["rerank"]
    assert stage["options"]["model"] == "stagemodel/b"
    assert (stage["options"]["depth"], stage["options"]["window"], stage["options"]["step"]) == (
        3, 2, 1
    )  # fmt: skip
    staged = read_records(tmp_path / "runs" / "r" / "toy" / "rerank-1-llm-listwise" /
                          "queries.jsonl")  # fmt: skip
    windows = sum(len(r["steps"]) for r in staged.values())
    assert windows > 0 and stage_provider.calls == windows


def test_a_sweep_grids_rerank_chains_and_applies_stage_wide_options(tmp_path, toy_dir):
    scripted.install(lambda messages, params: "[1]")
    config = tmp_path / "sweep.toml"
    config.write_text(f"""
output = "out"
agents = ["none"]
models = ["scripted/x"]
datasets = ["{toy_dir}"]
reranks = [[], ["llm-listwise"], ["llm-pointwise", "llm-listwise,window=3"]]

[options]
rerank_window = 2
rerank_step = 1
rerank_depth = 5
""")
    grid, notes = cells(load_sweep(config))
    assert notes == []
    names = [c.name for c in grid]
    assert names == [
        "none-bm25q-toy",  # no LLM anywhere: no model in its name
        "none-bm25q-x-base-toy-rerank=llm-listwise,depth=5,window=2,step=1",
        "none-bm25q-x-base-toy-rerank=llm-pointwise,depth=5-rerank=llm-listwise,depth=5,window=3,"
        "step=1",
    ]
    assert grid[0].config.llm is None
    assert grid[2].config.rerank[1].options["window"] == 3  # the spec's own wins

    text = config.read_text()
    config.write_text(text.replace("rerank_step = 1", "rerank_step = 9"))
    with pytest.raises(SweepError, match=r"llm-listwise: step \(9\) must not exceed window \(2\)"):
        load_sweep(config)
    config.write_text(text.replace("rerank_window = 2", 'rerank = ["cross:m"]'))
    with pytest.raises(SweepError, match="options.rerank.*top-level key reranks"):
        load_sweep(config)
    chains = 'reranks = [[], ["llm-listwise"], ["llm-pointwise", "llm-listwise,window=3"]]'
    config.write_text(text.replace(chains, 'reranks = [["llm-pointwise"]]'))
    with pytest.raises(SweepError, match="options.rerank_window.*no stage of any rerank chain"):
        load_sweep(config)


# --- budgets: each reasoning stage's is its option max_tokens ---------------------------------


def judged(messages, params):
    """Rank1's prompt gets a closed judgement; any other call a ReasonRank answer, or a text."""
    prompt = messages[0]["content"]
    if prompt.startswith("Determine if the following passage is relevant"):
        top = [(" true", -0.1), (" false", -2.4)]
        return scripted.Reply("It is. </think> true", [(" true", -0.1, top)])
    if "Rank the" in messages[-1]["content"]:
        return "<think>.</think><answer>[2] > [1]</answer>"
    return "Metformin lowers hepatic glucose production."


def test_budgets_are_options_with_the_originals_values_recorded():
    rank1, reasonrank, listwise = stages(rerank=["rank1", "reasonrank", "llm-listwise"])
    # rank1.py L35 max_output_tokens; rank_listwise_os_llm.py L121 reasoning_maxlen + 100
    assert rank1.options["max_tokens"] == 8192 and reasonrank.options["max_tokens"] == 3172
    assert (reasonrank.options["window"], reasonrank.options["step"]) == (20, 10)
    assert (reasonrank.options["depth"], reasonrank.options["passage_tokens"]) == (100, 512)
    assert "max_tokens" not in listwise.options  # no budget of its own: the run's
    # --max-tokens fills the budget of every stage whose spec does not give one
    rank1, reasonrank = stages(rerank=["rank1", "reasonrank,max_tokens=64"], max_tokens=50)
    assert (rank1.options["max_tokens"], reasonrank.options["max_tokens"]) == (50, 64)


def test_max_tokens_reaches_each_reasoning_stage_and_a_stages_own_budget_wins(tmp_path, toy_dir):
    budgets: list[int] = []

    def respond(messages, params):
        budgets.append(params.get("max_tokens"))
        return judged(messages, params)

    scripted.install(respond)
    assert main([
        "--agent", "none", "--dataset", str(toy_dir), "--model", "scripted/x",
        "--rerank", "rank1,depth=2", "--rerank", "reasonrank,depth=2,window=2,max_tokens=64",
        "--max-tokens", "50", "--limit", "1",
        "--runs-dir", str(tmp_path / "runs"), "--cache-dir", str(tmp_path / "cache"),
        "--run-name", "r", "--quiet",
    ]) == 0  # fmt: skip
    config = json.loads((tmp_path / "runs" / "r" / "config.json").read_text())
    assert [s["options"]["max_tokens"] for s in config["rerank"]] == [50, 64]
    sampling = config["sampling"]
    assert sampling["rerank-1-rank1/judge"]["params"]["max_tokens"] == 50
    assert sampling["rerank-2-reasonrank/window"]["params"]["max_tokens"] == 64
    assert sorted(set(budgets)) == [50, 64]  # what the calls were sent


def rerank_main(argv: list[str]) -> int:
    from agents.commands.rerank import main as rerank

    return rerank(argv)


def test_a_rerank_of_an_llm_agents_run_gives_max_tokens_to_its_stages(tmp_path, toy_dir, capsys):
    """The complaint: a finished run whose agent was sent --max-tokens 16 kept every stage at
    that (or refused another --max-tokens). Its agent keeps its budget; the stages take theirs."""
    budgets: list[int] = []

    def respond(messages, params):
        budgets.append(params.get("max_tokens"))
        return judged(messages, params)

    scripted.install(respond)
    assert main([
        "--agent", "hyde", "--dataset", str(toy_dir), "--model", "scripted/x", "--limit", "1",
        "--max-tokens", "16", "--runs-dir", str(tmp_path / "runs"),
        "--cache-dir", str(tmp_path / "cache"), "--run-name", "src", "--quiet",
    ]) == 0  # fmt: skip
    source = tmp_path / "runs" / "src"
    budgets.clear()
    assert rerank_main([str(source), "--rerank", "rank1,depth=2", "--max-tokens", "40",
                        "--run-name", "rr", "--quiet"]) == 0  # fmt: skip
    config = json.loads((tmp_path / "runs" / "rr" / "config.json").read_text())
    assert config["llm"]["max_tokens"] == 16  # the source's agent, as it ran
    assert config["rerank"][0]["options"]["max_tokens"] == 40
    assert config["sampling"]["hyde/generate"]["params"]["max_tokens"] == 16
    assert config["sampling"]["rerank-1-rank1/judge"]["params"]["max_tokens"] == 40
    assert set(budgets) == {40}
    # a stage's spec still wins, as --rerank-depth's stages do
    assert rerank_main([str(source), "--rerank", "rank1,depth=2,max_tokens=8192",
                        "--run-name", "own", "--quiet"]) == 0  # fmt: skip
    own = json.loads((tmp_path / "runs" / "own" / "config.json").read_text())
    assert own["sampling"]["rerank-1-rank1/judge"]["params"]["max_tokens"] == 8192
    # no stage with a budget of its own: another --max-tokens is the agent's, refused
    capsys.readouterr()
    assert rerank_main([str(source), "--rerank", "llm-listwise", "--max-tokens", "40",
                        "--run-name", "lw", "--quiet"]) == 2  # fmt: skip
    assert "--max-tokens 40: the source run's agent used 16" in capsys.readouterr().err


@pytest.mark.slow
def test_the_embedded_model_judges_with_rank1_on_the_budget_it_is_given(tmp_path, toy_dir):
    """The complaint, on the embedded model: rank1 after an agent's run sent 8,192 tokens a
    judgement whatever --max-tokens said; now each judgement thinks at most 32."""
    common = ["--runs-dir", str(tmp_path / "runs"), "--cache-dir", str(tmp_path / "cache"),
              "--quiet"]  # fmt: skip
    source = ["--agent", "hyde", "--dataset", str(toy_dir), "--model", "local/smollm2-135m",
              "--max-tokens", "8", "--limit", "1", "--run-name", "src"]  # fmt: skip
    assert main([*source, *common]) == 0
    assert rerank_main([str(tmp_path / "runs" / "src"), "--rerank", "rank1,depth=2",
                        "--max-tokens", "32", "--run-name", "rr", *common]) == 0  # fmt: skip
    run = tmp_path / "runs" / "rr"
    config = json.loads((run / "config.json").read_text())
    assert config["sampling"]["rerank-1-rank1/judge"]["params"]["max_tokens"] == 32
    staged = read_records(run / "toy" / "rerank-1-rank1" / "queries.jsonl")
    steps = [s for r in staged.values() for s in r["steps"]]
    assert 1 <= len(steps) <= 2  # depth 2 of the agent's list
    for step in steps:  # the judging call, and the forced token where there is one
        forced = step.get("forced", {}).get("usage", {}).get("completion_tokens", 0)
        assert step["usage"]["completion_tokens"] - forced <= 32
