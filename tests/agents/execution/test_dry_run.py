"""`python -m agents.run ... --dry-run`: calls, tokens and cost of a run, no model called."""

from __future__ import annotations

import json
import shutil

import litellm  # noqa: E402
import pytest

from agents.commands.run import main
from agents.config.settings import from_settings
from agents.execution.dry_run import MEASURED, WORST_CASE, estimate, format_estimate, usd
from agents.llm import scripted
from agents.llm.embedded.weights import readable_model_file
from agents.rerank.listwise import windows
from eval.records import read_records
from eval.usage import Usage
from prompts import PromptBook
from tests.helpers import DOCS, QUERIES

PASSAGE = "Metformin lowers hepatic glucose production in type 2 diabetes."
BOUND = WORST_CASE
UNPRICED = "n/a: not in litellm's price map"


def stages(est):
    """The estimate's stages, task by task, in order."""
    return [stage for _, stage in est.stages]


@pytest.fixture
def provider():
    return scripted.install(lambda messages, params: PASSAGE)


def flags(tmp_path, *args: str) -> list[str]:
    return [*args, "--runs-dir", str(tmp_path / "runs"), "--cache-dir", str(tmp_path / "cache"),
            "--quiet"]  # fmt: skip


def settings(tmp_path, **values) -> dict:
    return {"runs_dir": str(tmp_path / "runs"), "cache_dir": str(tmp_path / "cache"), **values}


def config_of(tmp_path, toy_dir, **values):
    """The config of a dry run on the toy task (scripted model unless given)."""
    return from_settings(
        settings(tmp_path, dataset=str(toy_dir), **{"model": "scripted/x", **values})
    )


def rows(out: str, stage: str) -> list[list[str]]:
    """The table rows of one stage: [task, stage, queries, calls/q, prompt, completion, ...]."""
    return [line.split() for line in out.splitlines() if line.split()[1:2] == [stage]]


def count(model: str, messages: list[dict]) -> int:
    return litellm.token_counter(model=model, messages=messages)


def hyde_messages(query: str, task: str = "toy") -> list[dict]:
    book = PromptBook({}, task)
    return [
        {"role": "system", "content": book.get("system").text},
        {"role": "user", "content": book.get("hyde").render(query=query)},
    ]


def test_a_dry_run_of_two_tasks_estimates_each_and_calls_no_model(
    tmp_path, toy_dir, provider, capsys
):
    other = shutil.copytree(toy_dir, tmp_path / "toy2")
    argv = flags(tmp_path, "--agent", "hyde", "--model", "scripted/x",
                 "--dataset", f"{toy_dir},{other}", "--dry-run")  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert provider.calls == 0
    assert not (tmp_path / "runs").exists()
    assert not (tmp_path / "cache").exists()  # no LLM cache, no index
    found = rows(out, "hyde")
    assert [r[0] for r in found] == ["toy", "toy2"]
    expected = sum(count("scripted/x", hyde_messages(q)) for q in QUERIES.values()) / 3
    for _, _, queries, calls, prompt, completion, *source in found:
        assert (queries, calls, " ".join(source)) == ("3", "1", "worst case")
        assert int(prompt) == round(expected)
        assert completion == "512"  # --max-tokens' default
    assert "total: 6 LLM calls" in out
    assert f"cost: {UNPRICED} (scripted/x)" in out


def test_the_bound_counts_the_prompts_the_run_then_sends(tmp_path, toy_dir):
    sent = []

    def respond(messages, params):
        sent.append(messages)
        return PASSAGE

    scripted.install(respond)
    for agent in ("hyde", "query2doc"):
        sent.clear()
        bound = stages(estimate(config_of(tmp_path, toy_dir, agent=agent, run_name=agent)))[0]
        assert bound.source == BOUND
        assert main(flags(tmp_path, "--agent", agent, "--model", "scripted/x",
                          "--dataset", str(toy_dir), "--run-name", agent)) == 0  # fmt: skip
        assert len(sent) == 3
        assert bound.prompt_tokens == sum(count("scripted/x", m) for m in sent) / 3


def test_after_a_run_the_figures_are_measured_from_its_records(tmp_path, toy_dir, provider, capsys):
    argv = flags(tmp_path, "--agent", "hyde", "--model", "scripted/x", "--dataset", str(toy_dir))
    assert main(argv) == 0
    capsys.readouterr()
    calls = provider.calls
    config = config_of(tmp_path, toy_dir, agent="hyde")
    est = estimate(config)
    (stage,) = stages(est)
    records = read_records(est.run_dir / "toy" / "queries.jsonl")
    usages = [Usage.from_dict(r["usage"]) for r in records.values()]
    assert est.state == "measured" and stage.source == MEASURED
    assert stage.measured_queries == 3
    assert stage.calls == sum(u.calls for u in usages) / 3 == 1
    assert stage.prompt_tokens == sum(u.prompt_tokens for u in usages) / 3
    assert stage.completion_tokens == sum(u.completion_tokens for u in usages) / 3
    # the scripted model counts words: far below the bound's 512 completion tokens
    assert stage.completion_tokens == len(PASSAGE.split())
    assert main([*argv, "--dry-run"]) == 0
    assert rows(capsys.readouterr().out, "hyde")[0][6:] == ["measured", "(3", "q)"]
    assert provider.calls == calls

    # a half-done run: the mean of the queries answered so far, said so
    path = est.run_dir / "toy" / "queries.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:2]))
    (stage,) = stages(estimate(config))
    assert (stage.source, stage.measured_queries, stage.queries) == (MEASURED, 2, 3)
    assert stage.notes == ["mean of the 2 of 3 queries answered so far"]


def test_cached_calls_count_as_the_calls_they_stand_for(tmp_path, toy_dir, provider):
    base = flags(tmp_path, "--agent", "hyde", "--model", "scripted/x", "--dataset", str(toy_dir))
    assert main([*base, "--run-name", "first"]) == 0
    assert main([*base, "--run-name", "again"]) == 0  # every answer from the LLM cache
    records = read_records(tmp_path / "runs" / "again" / "toy" / "queries.jsonl")
    assert all(r["usage"]["cached_calls"] == 1 for r in records.values())
    (stage,) = stages(estimate(config_of(tmp_path, toy_dir, agent="hyde", run_name="again")))
    assert stage.source == MEASURED and stage.calls == 1
    assert stage.prompt_tokens > 0


def test_a_folder_of_another_configuration_is_not_measured(tmp_path, toy_dir, provider):
    base = flags(tmp_path, "--agent", "hyde", "--model", "scripted/x", "--dataset", str(toy_dir),
                 "--run-name", "r")  # fmt: skip
    assert main(base) == 0
    est = estimate(config_of(tmp_path, toy_dir, agent="hyde", max_tokens=64, run_name="r"))
    assert est.state == "other"
    assert stages(est)[0].source == BOUND
    assert stages(est)[0].completion_tokens == 64


def test_rerank_stages_make_one_call_per_window_or_per_passage(tmp_path, toy_dir, provider):
    def stage(spec: str):
        agent, rerank = stages(estimate(config_of(tmp_path, toy_dir, agent="none", rerank=[spec])))
        assert agent.model is None and agent.calls == 0
        return rerank

    # a first-stage list is at most as long as the corpus (5) here
    listwise = stage("llm-listwise,depth=5,window=2,step=1")
    assert listwise.source == BOUND
    assert listwise.calls == len(windows(5, 5, 2, 1)) == 4
    assert listwise.completion_tokens == 4 * 512
    assert stage("llm-listwise,depth=3,window=2,step=1").calls == len(windows(5, 3, 2, 1))
    pointwise = stage("llm-pointwise,depth=3")
    assert pointwise.calls == 3
    assert pointwise.completion_tokens == 3 * 8  # answer_tokens
    assert stage("llm-pointwise,depth=30").calls == len(DOCS)
    assert stage("llm-pointwise,depth=3,reason=true").completion_tokens == 3 * 512
    assert provider.calls == 0


def test_a_stage_bound_takes_the_list_lengths_the_agent_recorded(tmp_path, toy_dir, provider):
    scripted.install(lambda m, p: "3")  # a grade for every passage
    spec = "llm-pointwise,depth=3,judge=grade"
    argv = flags(tmp_path, "--agent", "none", "--model", "scripted/x", "--dataset", str(toy_dir),
                 "--rerank", spec)  # fmt: skip
    assert main(argv) == 0
    config = config_of(tmp_path, toy_dir, agent="none", rerank=[spec])
    est = estimate(config)
    stage_dir = est.run_dir / "toy" / "rerank-1-llm-pointwise"
    measured = stages(est)[1]
    assert measured.source == MEASURED
    lengths = [len(r["ranking"]) for r in read_records(est.run_dir / "toy" / "queries.jsonl")
               .values()]  # fmt: skip
    assert max(lengths) < len(DOCS)  # BM25 finds only some of the toy documents
    expected = sum(min(3, n) for n in lengths) / 3
    assert measured.calls == expected
    (stage_dir / "queries.jsonl").unlink()  # as if the stage had not started
    bound = stages(estimate(config))[1]
    assert bound.source == BOUND
    assert bound.calls == expected


@pytest.mark.parametrize(
    "options, calls",
    [
        ([], 15 + 5),  # 15 reasoning turns, 5 searches each read by Reason-in-Documents
        (["max_turns=15", "max_searches=10", "max_refusals=2"], 15 + 10),
        (["max_turns=15", "max_searches=10", "max_refusals=1"], 11 + 10),  # one refusal ends it
        (["max_turns=15", "max_searches=0", "max_refusals=2"], 2),
        (["max_turns=4", "max_searches=10"], 4 + 4),  # the last turn searches (L683-685)
    ],
)
def test_search_o1s_worst_case_runs_its_own_limits(tmp_path, toy_dir, options, calls):
    """The bound is the real graph's: its limits, however they combine, give the calls."""
    config = config_of(tmp_path, toy_dir, agent="search-o1", option=options)
    assert stages(estimate(config))[0].calls == calls


def test_search_agents_are_bounded_by_their_limits(tmp_path, toy_dir):

    def searcher(messages, params):
        if messages[0]["content"].startswith("**Task Instruction:**"):  # Reason-in-Documents
            return "**Final Information** Aspirin blocks platelet cyclooxygenase."
        turn = sum(m["role"] == "assistant" for m in messages) + 1
        return f"Let me look.\n\n<|begin_search_query|>aspirin query {turn}"

    provider = scripted.install(searcher)
    bound = stages(estimate(config_of(tmp_path, toy_dir, agent="search-o1")))[0]
    # Search-o1's limits: 15 reasoning turns, 5 searches each read by Reason-in-Documents
    assert (bound.source, bound.calls) == (BOUND, 15 + 5)
    assert bound.completion_tokens == 20 * 512
    assert provider.calls == 0
    first = count("scripted/x", [{"role": "user", "content": PromptBook({}, "toy").get(
        "search-o1").render(query=QUERIES["q1"], max_searches=5)}])  # fmt: skip
    assert bound.prompt_tokens > 15 * first  # the prompt grows turn by turn
    assert main(flags(tmp_path, "--agent", "search-o1", "--model", "scripted/x",
                      "--dataset", str(toy_dir))) == 0  # fmt: skip
    measured = stages(estimate(config_of(tmp_path, toy_dir, agent="search-o1")))[0]
    assert measured.source == MEASURED
    assert 10 < measured.calls <= bound.calls  # 5 searches, 5 readings, then canned results

    r1 = stages(estimate(config_of(tmp_path, toy_dir, agent="search-r1")))[0]
    assert r1.calls == 5  # max_turns search turns, then one with search off


def test_a_priced_model_gets_a_cost_from_litellms_price_map(tmp_path, toy_dir, monkeypatch, capsys):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-a-real-key")
    model = "openai/gpt-4o-mini"
    argv = flags(tmp_path, "--agent", "hyde", "--model", model, "--dataset", str(toy_dir),
                 "--rerank", "llm-pointwise,depth=2")  # fmt: skip
    assert main([*argv, "--dry-run"]) == 0
    out = capsys.readouterr().out
    est = estimate(config_of(tmp_path, toy_dir, agent="hyde", model=model,
                             rerank=["llm-pointwise,depth=2"]))  # fmt: skip
    prompt_cost, completion_cost = litellm.cost_per_token(
        model=model, prompt_tokens=round(est.total('prompt_tokens')),
        completion_tokens=round(est.total('completion_tokens')),
    )  # fmt: skip
    assert est.cost is not None and est.cost > 0
    assert est.cost == pytest.approx(prompt_cost + completion_cost)
    assert f"cost: {usd(est.cost)}" in out
    assert est.total("calls") == 3 * (1 + 2)
    assert not (tmp_path / "runs").exists()

    # without a key the dry run is refused as the run would be, before anything else
    monkeypatch.delenv("OPENAI_API_KEY")
    assert main([*argv, "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "OPENAI_API_KEY" in err and err.count("\n") == 1


def test_a_local_model_has_no_price(tmp_path, toy_dir, capsys):
    argv = flags(tmp_path, "--agent", "hyde", "--model", "local/smollm2-135m",
                 "--dataset", str(toy_dir), "--dry-run")  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"cost: {UNPRICED} (local/smollm2-135m)" in out
    assert (
        estimate(config_of(tmp_path, toy_dir, agent="hyde", model="local/smollm2-135m")).cost
        is None
    )


def test_a_local_model_is_counted_with_its_own_tokenizer(tmp_path, toy_dir):
    from llama_cpp import Llama

    from agents.llm.embedded.chatml import render_chatml
    from agents.llm.embedded.weights import LOCAL_MODELS, model_file

    model = "local/smollm2-135m"
    spec = "llm-listwise,depth=5,window=3,step=2"
    config = config_of(tmp_path, toy_dir, agent="hyde", model=model, limit=1, rerank=[spec])
    est = estimate(config)
    assert "own tokenizer" in est.tokenizers[model]
    agent, listwise = stages(est)
    tokenizer = Llama(model_path=str(model_file(model)), vocab_only=True, verbose=False)
    try:
        system = LOCAL_MODELS["smollm2-135m"].default_system

        def tokens(messages):
            prompt = render_chatml(messages, system)
            return len(tokenizer.tokenize(prompt.encode(), add_bos=True, special=True))

        assert agent.prompt_tokens > 0
        assert agent.prompt_tokens == tokens(hyde_messages(QUERIES["q1"]))
        # listwise windows: many turns, counted turn by turn, as the whole prompt counts
        from agents.rerank import StageContext
        from agents.rerank.listwise import build_listwise

        stage = build_listwise(StageContext(
            corpus=DOCS, task="toy", options=config.rerank[0].options,
            prompts=PromptBook({}, "toy"),
        ))  # fmt: skip
        ids = sorted(DOCS, key=lambda d: -len(DOCS[d]))
        spans = windows(len(DOCS), 5, 3, 2)
        expected = sum(
            tokens(stage.messages(QUERIES["q1"], ids[: end - start],
                                  dict.fromkeys(ids, 1.0), 300))
            for start, end in spans
        )  # fmt: skip
        assert listwise.calls == len(spans)
        assert listwise.prompt_tokens == expected
    finally:
        tokenizer.close()


def test_a_split_local_model_not_yet_joined_is_not_joined_by_a_dry_run(tmp_path, toy_dir):
    assert readable_model_file("local/qwen2.5-coder-0.5b", tmp_path / "cache") is None
    assert not (tmp_path / "cache").exists()
    assert readable_model_file("local/smollm2-135m", tmp_path / "cache") is not None
    est = estimate(config_of(tmp_path, toy_dir, agent="hyde", model="local/qwen2.5-coder-0.5b"))
    assert "not the model's own: its file is not joined yet" in est.tokenizers[
        "local/qwen2.5-coder-0.5b"]  # fmt: skip
    assert stages(est)[0].calls == 1
    assert not (tmp_path / "cache").exists()


def test_bad_input_fails_with_the_runs_one_line_error(tmp_path, toy_dir, provider, capsys):
    for argv in (
        ["--agent", "hyde", "--model", "scripted/x", "--dataset", str(tmp_path / "missing")],
        ["--agent", "hyde", "--model", "nosuchprovider", "--dataset", str(toy_dir)],
        ["--agent", "hyde", "--model", "scripted/x", "--dataset", f"{toy_dir},{toy_dir}"],
    ):
        assert main(flags(tmp_path, *argv, "--dry-run")) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1, err
    assert not (tmp_path / "runs").exists()
    assert provider.calls == 0


def test_format_estimate_is_one_row_per_task_and_stage(tmp_path, toy_dir, provider):
    config = config_of(tmp_path, toy_dir, agent="hyde", rerank=["llm-pointwise,depth=2"])
    text = format_estimate(estimate(config))
    assert len(rows(text, "hyde")) == 1
    assert len(rows(text, "rerank-1-llm-pointwise")) == 1
    assert text.splitlines()[-1].startswith("total: 9 LLM calls")
    json.dumps(text)  # plain text


@pytest.mark.parametrize(
    "agent, options, calls",
    [
        # search, read, a refused search, the last turn: the bound's own shape
        ("search-o1", ["max_turns=3", "max_searches=1", "max_refusals=0", "top_k=5"], 4),
        # three search turns, then one with search off
        ("search-r1", ["max_turns=3", "top_k=5"], 4),
    ],
)
def test_a_search_agents_bound_holds_a_trajectory_of_the_longest_outputs(
    tmp_path, toy_dir, agent, options, calls
):
    m = 200
    sent = []

    def longest(messages, params):
        sent.append(messages)
        text = "aspirin" + " the" * (m - 1)
        if messages[0]["content"].startswith("**Task Instruction:**"):  # Reason-in-Documents
            return text
        return f"<|begin_search_query|>{text}" if agent == "search-o1" else f"<search>{text}"

    scripted.install(longest)
    values = {"agent": agent, "max_tokens": m, "option": options}
    bound = stages(estimate(config_of(tmp_path, toy_dir, **values)))[0]
    assert (bound.calls, bound.completion_tokens) == (calls, calls * m)
    argv = ["--agent", agent, "--max-tokens", str(m), "--dataset", str(toy_dir)]
    argv += ["--cache", "off"]  # every query reads the same documents with the same prompt
    argv += [a for o in options for a in ("--option", o)]
    assert main(flags(tmp_path, "--model", "scripted/x", *argv)) == 0
    assert len(sent) == 3 * calls
    actual = sum(count("scripted/x", messages) for messages in sent) / 3
    # the corpus's longest documents stand in for the few BM25 finds: a little more
    assert actual <= bound.prompt_tokens <= 1.25 * actual


def test_costs_print_in_dollars_and_cents_or_four_figures():
    assert (usd(1234.567), usd(0.0123456), usd(0.00001234), usd(0.0)) == (
        "USD 1,234.57", "USD 0.01235", "USD 0.00001234", "USD 0.00"
    )  # fmt: skip


def test_a_new_agent_needs_nothing_more_for_its_dry_run(tmp_path, toy_dir, provider, monkeypatch):
    """A registry entry and a graph: its dry run runs that graph, every reply the filler."""
    from agents.config.registry import AGENTS, AgentSpec
    from agents.graphs.generate_retrieve import SPECS, build_graph

    spec = AgentSpec("mine", "a new agent", build_graph,
                     ("hyde",), bound=(SPECS["hyde"],), llm_nodes=("generate",))  # fmt: skip
    monkeypatch.setitem(AGENTS, "mine", spec)
    config = config_of(tmp_path, toy_dir, agent="mine", rerank=["llm-pointwise,depth=2"])
    est = estimate(config)
    agent, pointwise = stages(est)
    assert (agent.source, agent.calls, agent.completion_tokens) == (BOUND, 1, 512)
    assert agent.prompt_tokens == sum(count("scripted/x", hyde_messages(q))
                                      for q in QUERIES.values()) / 3  # fmt: skip
    assert pointwise.source == BOUND and est.total("calls") == 3 * (1 + 2)
    assert provider.calls == 0
    assert rows(format_estimate(est), "mine")[0][3:] == ["1", "45", "512", "worst", "case"] or (
        rows(format_estimate(est), "mine")[0][3] == "1"
    )


def test_a_listwise_window_too_long_for_the_context_is_counted_as_filling_it(tmp_path, capsys):
    """A window past the context is counted as filling it: the most a call can be paid for."""
    folder = tmp_path / "long"
    folder.mkdir()
    words = " ".join(f"word{i}" for i in range(3000))  # ~3 tokens a word: 3 of them overflow
    with open(folder / "corpus.jsonl", "w") as f:
        for i in range(3):
            f.write(json.dumps({"id": f"d{i}", "text": words}) + "\n")
    (folder / "query.jsonl").write_text(json.dumps({"id": "q1", "text": "word1 word2"}) + "\n")
    (folder / "qrels.jsonl").write_text(json.dumps({"q_id": "q1", "p_id": "d0", "score": 1}) + "\n")
    assert main(flags(tmp_path, "--dataset", str(folder), "--agent", "none",
                      "--model", "local/smollm2-135m",
                      "--rerank", "llm-listwise,depth=3,window=3,step=2,doc_words=3000",
                      "--dry-run")) == 0  # fmt: skip
    out = capsys.readouterr().out
    ((*_, calls, prompt, completion, _source, _bound),) = rows(out, "rerank-1-llm-listwise")
    assert calls == "1"
    # the context less a whole reply's room (--max-tokens 512)
    assert int(prompt.replace(",", "")) == 8192 - 512 and completion == "512"
    assert "counted as filling it" in out


# --- tool-search -----------------------------------------------------------------------------


def tool_search_first_prompt(query: str, max_searches: int = 5, **options) -> list[dict]:
    """tool-search's first turn as the model sees it: the user prompt and the tools, as text."""
    from agents.graphs.tool_search import DEFAULTS, tool_schemas
    from agents.llm.tool_text import text_messages

    book = PromptBook({}, "toy")
    content = book.get("tool-search").render(query=query, max_searches=max_searches)
    tools = tool_schemas(book, {**DEFAULTS, "max_searches": max_searches, **options})
    return text_messages([{"role": "user", "content": content}], tools, None)


def test_tool_search_is_bounded_by_its_limits(tmp_path, toy_dir):
    from agents.llm.scripted import Reply

    plan = [
        Reply("Let me search.", tool_calls=[("search", {"query": "aspirin platelets", "k": 3})]),
        Reply(tool_calls=[("read", {"doc_id": "d3"})]),
        Reply("d3 answers it.", tool_calls=[("submit", {"doc_ids": ["d3"]})]),
    ]

    def respond(messages, params):
        return plan[min(sum(m["role"] == "assistant" for m in messages), len(plan) - 1)]

    provider = scripted.install(respond)

    def bound(*options: str):
        config = config_of(tmp_path, toy_dir, agent="tool-search", option=list(options))
        return stages(estimate(config))[0]

    full = bound()
    assert (full.source, full.calls, full.completion_tokens) == (BOUND, 8, 8 * 512)  # max_turns
    assert provider.calls == 0
    # the first turn: the user prompt and the tools (as tool_text renders them), nothing else
    first = bound("max_turns=1")
    expected = sum(count("scripted/x", tool_search_first_prompt(q)) for q in QUERIES.values())
    assert first.calls == 1 and first.prompt_tokens == expected / 3
    # from the second turn on: every search and read the limits allow; then a turn's output and
    # a refused submission each
    two, three = bound("max_turns=2"), bound("max_turns=3")
    assert two.calls == 2 and three.calls == 3
    second, third = two.prompt_tokens - first.prompt_tokens, three.prompt_tokens - two.prompt_tokens
    assert first.prompt_tokens + 512 < second < third
    # fewer searches, reads, hits or words make smaller prompts; the nudges add to them
    assert bound("max_searches=1").prompt_tokens < full.prompt_tokens
    assert bound("max_reads=0").prompt_tokens < full.prompt_tokens
    assert bound("max_k=2", "top_k=2").prompt_tokens < full.prompt_tokens  # 5 documents here
    assert bound("doc_words=5").prompt_tokens < full.prompt_tokens
    # the worst case calls a tool every turn (a refused submission after the first): no nudge
    assert bound("nudges=0").prompt_tokens == full.prompt_tokens == bound("nudges=3").prompt_tokens

    # a run of the same configuration: measured from its records
    assert main(flags(tmp_path, "--agent", "tool-search", "--model", "scripted/x",
                      "--dataset", str(toy_dir))) == 0  # fmt: skip
    measured = stages(estimate(config_of(tmp_path, toy_dir, agent="tool-search")))[0]
    assert (measured.source, measured.measured_queries) == (MEASURED, 3)
    assert measured.calls == 3 and provider.calls == 9  # search, read, submit
    assert measured.calls <= full.calls and measured.prompt_tokens <= full.prompt_tokens


def test_tool_searchs_bound_holds_a_trajectory_that_uses_every_limit(tmp_path, toy_dir):
    """Every search (all five documents each) and read in the first turn, then outputs without a
    call: nudged once, then the turn limit."""
    from agents.llm.scripted import Reply
    from agents.llm.tool_text import text_messages

    m = 200
    options = ["max_turns=3", "max_searches=2", "max_reads=2", "max_k=5", "top_k=5"]
    words = "aspirin" + " the" * (m - 100)  # the calls take the rest of max_tokens
    query = {"query": "insulin metformin aspirin statins warfarin", "k": 5}
    calls = [("search", query), ("search", query), ("read", {"doc_id": "d5"}),
             ("read", {"doc_id": "d4"})]  # fmt: skip
    sent = []

    def respond(messages, params):
        sent.append(text_messages(messages, params["tools"], None))
        first = not any(m["role"] == "assistant" for m in messages)
        return Reply(words, tool_calls=calls) if first else words

    scripted.install(respond)
    values = {"agent": "tool-search", "max_tokens": m, "option": options}
    bound = stages(estimate(config_of(tmp_path, toy_dir, **values)))[0]
    assert (bound.calls, bound.completion_tokens) == (3, 3 * m)
    argv = ["--agent", "tool-search", "--max-tokens", str(m), "--dataset", str(toy_dir)]
    argv += ["--concurrency", "1"]  # one query after the other: its three prompts in turn
    argv += [a for o in options for a in ("--option", o)]
    assert main(flags(tmp_path, "--model", "scripted/x", *argv)) == 0
    assert len(sent) == 3 * 3
    assert all(s[-1]["content"].startswith("<tool_response>") for s in sent[1::3])
    assert all(s[-1]["content"].startswith("You did not call a tool.") for s in sent[2::3])
    actual = sum(count("scripted/x", messages) for messages in sent) / 3
    assert actual <= bound.prompt_tokens <= 1.25 * actual


def test_tool_search_with_a_local_model_counts_the_text_the_model_is_sent(tmp_path, toy_dir):
    from llama_cpp import Llama

    from agents.llm.embedded.chatml import render_chatml
    from agents.llm.embedded.weights import LOCAL_MODELS, model_file

    model = "local/smollm2-135m"
    values = {"agent": "tool-search", "model": model, "limit": 1}
    first = estimate(config_of(tmp_path, toy_dir, option=["max_turns=1"], **values))
    assert "own tokenizer" in first.tokenizers[model]
    system = LOCAL_MODELS["smollm2-135m"].default_system
    tokenizer = Llama(model_path=str(model_file(model)), vocab_only=True, verbose=False)
    try:
        from agents.graphs.tool_search import DEFAULTS, tool_schemas
        from agents.llm.tool_text import text_messages

        book = PromptBook({}, "toy")
        content = book.get("tool-search").render(query=QUERIES["q1"], max_searches=5)
        shown = text_messages([{"role": "user", "content": content}],
                              tool_schemas(book, DEFAULTS), system)  # fmt: skip
        prompt = render_chatml(shown, system)
        tokens = len(tokenizer.tokenize(prompt.encode(), add_bos=True, special=True))
    finally:
        tokenizer.close()
    assert stages(first)[0].prompt_tokens == tokens
    assert stages(estimate(config_of(tmp_path, toy_dir, **values)))[0].calls == 8


def test_tool_search_prompts_past_the_context_are_counted_as_filling_it(tmp_path, capsys):
    """All the searches at once overflow the context from the second turn; a model that searched
    less would still make those turns: each counted as the most a call can be paid for."""
    folder = tmp_path / "long"
    folder.mkdir()
    words = " ".join(f"word{i}" for i in range(3000))
    with open(folder / "corpus.jsonl", "w") as f:
        for i in range(3):
            f.write(json.dumps({"id": f"d{i}", "text": words}) + "\n")
    (folder / "query.jsonl").write_text(json.dumps({"id": "q1", "text": "word1 word2"}) + "\n")
    (folder / "qrels.jsonl").write_text(json.dumps({"q_id": "q1", "p_id": "d0", "score": 1}) + "\n")
    assert main(flags(tmp_path, "--dataset", str(folder), "--agent", "tool-search",
                      "--model", "local/smollm2-135m", "--max-turns", "3",
                      "--option", "doc_words=3000", "--dry-run")) == 0  # fmt: skip
    out = capsys.readouterr().out
    ((*_, calls, prompt, completion, _source, _bound),) = rows(out, "tool-search")
    assert calls == "3" and completion == f"{3 * 512:,}"
    first = int(prompt.replace(",", "")) - 2 * (8192 - 512)  # n_ctx less the reply's room
    assert 0 < first < 8192 - 512
    assert "counted as filling it" in out
