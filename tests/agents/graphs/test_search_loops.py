"""search-o1 and search-r1 end to end, with scripted LLMs that play out a trajectory.

Each `respond(messages, params)` decides the model's next output from what it is shown, so a
trajectory is deterministic; `params["stop"]` holds the stop strings litellm passes on.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from agents.config.registry import AGENTS
from agents.config.run_config import typed_options
from agents.graphs.context import AgentContext
from agents.graphs.search_loop import parse_call, strip_tags
from agents.graphs.search_o1 import (
    BEGIN_QUERY,
    BEGIN_RESULT,
    END_QUERY,
    END_RESULT,
    REPEATED_QUERY,
    SEARCH_LIMIT,
    truncate_reasoning,
)
from agents.graphs.search_o1 import build_graph as build_o1
from agents.graphs.search_r1 import INVALID_ACTION, parse_action
from agents.graphs.search_r1 import build_graph as build_r1
from agents.llm import LLM, Completion, Usage, scripted
from eval.datasets import load_tasks
from retrievers.config import RetrieverConfig
from retrievers.search import build_retriever
from tests.helpers import nodes, records
from tests.helpers import run_agent as run

ASPIRIN = "How does aspirin act on platelets?"


@pytest.fixture
def toy(tmp_path: Path, toy_dir: Path) -> dict:
    return {"data": toy_dir, "runs": tmp_path / "runs", "cache": tmp_path / "cache"}


def turn(messages: list[dict]) -> int:
    """Which reasoning turn a call is (1-based), in either LLM mode."""
    if messages[-1]["role"] == "assistant":  # continue mode: count the results spliced in
        text = messages[-1]["content"]
        return 1 + text.count(END_RESULT) + text.count("</information>") + text.count("invalid")
    return 1 + sum(m["role"] == "assistant" for m in messages)


def reading(messages: list[dict]) -> bool:
    return messages[0]["content"].startswith("**Task Instruction:**")


INFO = "Reading the documents.\n**Final Information**\n\nAspirin blocks\nplatelet cyclooxygenase."


def o1_searcher(queries: list[str], answer: str = "Aspirin inhibits platelet cyclooxygenase."):
    """A Search-o1 model that searches `queries` in turn, then answers."""
    calls = []

    def respond(messages: list[dict], params: dict) -> str:
        calls.append({"messages": messages, "stop": params.get("stop")})
        if reading(messages):
            return INFO
        n = turn(messages)
        if n <= len(queries):
            return f"Step {n}: I should look this up.\n\n{BEGIN_QUERY}{queries[n - 1]}"
        return answer

    return respond, calls


# --- search-o1 through agents.run --------------------------------------------------------


def test_o1_searches_reads_and_answers_in_chat_mode(toy):
    respond, calls = o1_searcher(["aspirin platelets"])
    scripted.install(respond)
    assert run(toy, "search-o1") == 0
    rec = records(toy)["q2"]
    assert nodes(rec) == ["reason", "search", "documents", "reason", "final"]
    search = rec["steps"][1]
    assert search["request"]["query"] == "aspirin platelets" and search["doc_ids"][0] == "d3"
    reader = rec["steps"][2]["messages"][0]["content"]
    assert "**Document 1:**\nAspirin irreversibly inhibits" in reader
    assert "Step 1: Step 1: I should look this up." in reader  # Search-o1's step numbering
    # scripts/evaluate.py L25: the newlines of the information are deleted
    assert rec["steps"][2]["information"] == "Aspirin blocksplatelet cyclooxygenase."
    # chat mode (auto for non-local models): the result arrives as a user message
    second = rec["steps"][3]["messages"]
    assert [m["role"] for m in second] == ["user", "assistant", "user"]
    assert second[1]["content"].endswith(f"{BEGIN_QUERY}aspirin platelets{END_QUERY}")
    assert second[2]["content"].startswith(
        f"{BEGIN_RESULT}Aspirin blocksplatelet cyclooxygenase.{END_RESULT}"
    )
    assert "Continue your reasoning" in second[2]["content"]
    assert all(c["stop"] == [END_QUERY] for c in calls if not reading(c["messages"]))
    assert rec["generated"]["answer"] == "Aspirin inhibits platelet cyclooxygenase."
    assert BEGIN_RESULT in rec["generated"]["passage"]
    final = rec["steps"][-1]
    # a model outside R2MED's reasoning list: its whole output is searched, as R2MED searches
    # a hy_doc (src/eval_BM25.py L133), and averaged with the query by dense retrievers
    assert final["request"]["sparse_text"] == rec["generated"]["passage"]
    assert final["request"]["expansion"] == rec["generated"]["passage"]
    assert final["reasoning"] == "none"
    assert rec["ranking"][0][0] == "d3" and len(rec["ranking"]) > 0
    metrics = json.loads((toy["runs"] / "run" / "toy" / "metrics.json").read_text())
    assert metrics["searches_per_query"] == 1.0


def test_o1_continue_mode_splices_the_result_into_the_assistant_turn(toy):
    respond, _ = o1_searcher(["aspirin platelets"])
    scripted.install(respond)
    assert run(toy, "search-o1", "--option", "llm_mode=continue") == 0
    rec = records(toy)["q2"]
    second = rec["steps"][3]["messages"]
    assert [m["role"] for m in second] == ["user", "assistant"]
    assert second[1]["content"].endswith(
        f"{BEGIN_QUERY}aspirin platelets{END_QUERY}\n\n"
        f"{BEGIN_RESULT}Aspirin blocksplatelet cyclooxygenase.{END_RESULT}\n\n"
    )
    assert rec["steps"][0]["llm_mode"] == "continue"
    # Search-o1's limit for single-question QA (scripts/run_search_o1.py L198-205)
    assert "The maximum number of search attempts is limited to 5." in second[0]["content"]


def test_o1_without_search_answers_at_once(toy):
    text = "<think>statins</think>Statins lower cholesterol."
    scripted.install(lambda m, p: text)
    assert run(toy, "search-o1") == 0
    rec = records(toy)["q3"]
    assert nodes(rec) == ["reason", "final"]
    assert rec["generated"]["answer"] == "Statins lower cholesterol."
    assert rec["steps"][-1]["request"]["sparse_text"] == text  # not a listed reasoning model
    assert rec["ranking"][0][0] == "d4"
    # read as a reasoning model: the response after the first </think> (src/base.py L9-13)
    assert run(toy, "search-o1", "--reasoning", "think", name="think") == 0
    rec = records(toy, "think")["q3"]
    assert rec["steps"][-1]["request"]["sparse_text"] == "Statins lower cholesterol."


def test_o1_repeated_query_gets_the_canned_message_without_a_search(toy):
    respond, _ = o1_searcher(["aspirin platelets", "aspirin platelets"])
    scripted.install(respond)
    assert run(toy, "search-o1") == 0
    rec = records(toy)["q2"]
    assert nodes(rec).count("search") == 1
    skipped = next(s for s in rec["steps"] if s["node"] == "search_skipped")
    assert skipped["reason"] == "repeated query" and skipped["message"] == REPEATED_QUERY
    third = [s for s in rec["steps"] if s["node"] == "reason"][2]["messages"]
    assert f"{BEGIN_RESULT}\n{REPEATED_QUERY}\n{END_RESULT}" in third[-1]["content"]


def test_o1_refused_searches_never_stop_it_unless_asked(toy):
    respond, _ = o1_searcher(["aspirin platelets"] * 10)
    scripted.install(respond)
    assert run(toy, "search-o1") == 0
    strict = records(toy)["q2"]
    # Search-o1 (run_search_o1.py L596-608): canned messages until it answers (turn 11)
    assert nodes(strict).count("reason") == 11 and nodes(strict).count("search_skipped") == 9
    assert "limit" not in nodes(strict)
    # ours, asked for: stop after two refusals in a row
    assert run(toy, "search-o1", "--option", "max_refusals=2", name="stuck") == 0
    rec = records(toy, "stuck")["q2"]
    assert nodes(rec).count("search") == 1 and nodes(rec).count("search_skipped") == 2
    assert nodes(rec)[-2:] == ["limit", "final"]
    assert "2 searches refused in a row" in rec["steps"][-2]["reason"]


def test_o1_search_limit_refuses_the_second_search(toy):
    respond, _ = o1_searcher(["aspirin platelets", "cyclooxygenase"])
    scripted.install(respond)
    assert run(toy, "search-o1", "--max-searches", "1") == 0
    rec = records(toy)["q2"]
    assert nodes(rec).count("search") == 1
    skipped = next(s for s in rec["steps"] if s["node"] == "search_skipped")
    assert skipped["reason"] == "search limit" and skipped["message"] == SEARCH_LIMIT
    first = rec["steps"][0]["messages"][0]["content"]
    assert "The maximum number of search attempts is limited to 1." in first


def test_o1_max_turns_ends_a_model_that_searches_forever(toy):
    def respond(messages, params):
        if reading(messages):
            return INFO
        return f"More.\n\n{BEGIN_QUERY}aspirin query {turn(messages)}"

    scripted.install(respond)
    assert run(toy, "search-o1", "--max-turns", "20", "--max-searches", "30") == 0
    rec = records(toy)["q2"]
    # the last turn's search is made and read too (run_search_o1.py L683-685)
    assert nodes(rec).count("reason") == 20 and nodes(rec).count("search") == 20
    assert nodes(rec)[-4:] == ["search", "documents", "limit", "final"]
    assert "max_turns (20)" in rec["steps"][-2]["reason"]
    assert rec["generated"]["answer"] == "More."  # the unexecuted search call is cut off
    assert rec["ranking"][0][0] == "d3" and rec["error"] is None


def test_o1_output_matching_no_document_falls_back_to_the_query(toy):
    scripted.install(lambda m, p: "More.")
    assert run(toy, "search-o1") == 0
    rec = records(toy)["q2"]
    # "More." matches no document: the ranking falls back to the query rather than nothing
    assert rec["steps"][-1]["note"].startswith("the answer matched no document")
    assert rec["ranking"][0][0] == "d3"


def test_o1_llm_error_mid_trajectory_fails_that_query_only(toy, capsys):
    respond, _ = o1_searcher(["aspirin platelets"])

    def failing(messages, params):
        if ASPIRIN in messages[0]["content"] and turn(messages) == 2:
            return ValueError("scripted failure")
        return respond(messages, params)

    scripted.install(failing)
    assert run(toy, "search-o1") == 1
    recs = records(toy)
    assert "scripted failure" in recs["q2"]["error"]
    assert recs["q1"]["error"] is None and recs["q1"]["ranking"]
    assert "1 queries failed" in capsys.readouterr().err


@pytest.mark.parametrize("mode", ["answer", "fuse", "trace"])
def test_o1_final_ranking_modes(toy, mode):
    respond, _ = o1_searcher(["aspirin platelets"], answer="Statins lower cholesterol.")
    scripted.install(respond)
    assert run(toy, "search-o1", "--final-ranking", mode, name=mode) == 0
    rec = records(toy, mode)["q2"]
    final = rec["steps"][-1]
    assert final["node"] == "final" and final["final_ranking"] == mode
    ranked = [d for d, _ in rec["ranking"]]
    if mode == "answer":
        assert final["request"]["sparse_text"] == rec["generated"]["passage"]
        assert rec["generated"]["passage"].endswith("Statins lower cholesterol.")
        assert set(ranked[:2]) == {"d3", "d4"}
    elif mode == "fuse":
        # the search's list (aspirin: d3) and the output's, fused
        assert final["fused_lists"] == 2 and set(ranked[:2]) == {"d3", "d4"}
    else:
        text = final["request"]["sparse_text"]
        assert "aspirin platelets" in text and "Statins" in text and "<|" not in text
        assert text == strip_tags(rec["generated"]["passage"])


def test_o1_fuse_without_search_is_the_answer_list(toy):
    scripted.install(lambda m, p: "Statins lower cholesterol.")
    assert run(toy, "search-o1", "--final-ranking", "fuse") == 0
    rec = records(toy)["q3"]
    assert rec["steps"][-1]["fused_lists"] == 1 and rec["ranking"][0][0] == "d4"


def test_o1_empty_answer_falls_back_to_the_query(toy):
    scripted.install(lambda m, p: "")
    assert run(toy, "search-o1") == 0
    rec = records(toy)["q2"]
    assert rec["steps"][-1]["note"].startswith("empty answer")
    assert rec["ranking"][0][0] == "d3"


def test_bad_option_value_is_a_clear_error(toy, capsys):
    scripted.install(lambda m, p: "")
    assert run(toy, "search-o1", "--option", "llm_mode=stream") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "llm_mode" in err[0]
    assert not toy["runs"].exists()  # refused before the run folder was made


# --- malformed tags ------------------------------------------------------------------------


def test_parse_call_handles_malformed_tags():
    b, e = BEGIN_QUERY, END_QUERY
    assert parse_call("plain reasoning", b, e, "stop") == (None, "plain reasoning")
    assert parse_call(f"x {b} q ", b, e, "stop") == ("q", f"x {b} q {e}")  # stop string cut
    assert parse_call(f"x {b} q", b, e, "length")[0] is None  # cut at max_tokens: unfinished
    assert parse_call(f"{b}{e}", b, e, "stop")[0] == ""  # empty query
    assert parse_call(f"{b} a {b} b", b, e, "stop")[0] == "b"  # nested: after the LAST begin
    # a backend that ignored the stop and made up a result: the made-up part is dropped
    call, kept = parse_call(f"{b}q{e}{BEGIN_RESULT}fake{END_RESULT}", b, e, "stop")
    assert call == "q" and kept == f"{b}q{e}"


def test_truncate_reasoning_keeps_first_last_and_search_steps():
    lines = [f"line {i}" for i in range(1, 11)]
    lines[4] = f"{BEGIN_QUERY}q{END_QUERY}"
    kept = truncate_reasoning("\n\n".join(lines))
    assert kept.startswith("Step 1: line 1\n\n...\n\nStep 5: <|begin_search_query|>")
    assert kept.endswith("...\n\nStep 8: line 8\n\nStep 9: line 9\n\nStep 10: line 10")
    assert truncate_reasoning("a\nb") == "Step 1: a\n\nStep 2: b"


class FakeLLM:
    """Returns scripted texts with a chosen finish_reason and stop_reason (the scripted provider
    cannot): each output is (text, finish_reason) or (text, finish_reason, stop_reason)."""

    continues_turns = False  # a chat API, as agents.llm.LLM says of one
    dry = None

    def __init__(self, outputs: list[tuple], model: str = "fake/test", server: str = "openai"):
        self.outputs = list(outputs)
        self.calls: list[list[dict]] = []
        self.model, self.server = model, server

    async def chat(self, messages, stop=None, **params):
        self.calls.append(messages)
        text, finish, *stop_reason = self.outputs.pop(0)
        return Completion(text, finish, Usage(calls=1), False, self.model,
                          stop_reason=stop_reason[0] if stop_reason else None)  # fmt: skip


def graph_run(toy: dict, build, llm, query: str = ASPIRIN, **options) -> dict:
    task = load_tasks(str(toy["data"]), toy["cache"])[0]
    bm25 = build_retriever(RetrieverConfig("bm25"), task, toy["cache"], progress=False)
    agent = "search-o1" if build is build_o1 else "search-r1"
    options = typed_options(AGENTS[agent], options, "option")  # completed as a run does
    ctx = AgentContext(bm25, bm25, task.corpus, task.name, llm, options=options)
    state = {"query_id": "q", "query": query, "steps": [], "generated": {}}
    return asyncio.run(build(ctx).ainvoke(state))


def test_o1_unclosed_query_cut_at_max_tokens_is_not_a_search(toy):
    llm = FakeLLM([(f"Aspirin acts on COX.\n\n{BEGIN_QUERY}aspirin plate", "length")])
    state = graph_run(toy, build_o1, llm)
    assert [s["node"] for s in state["steps"]] == ["reason", "limit", "final"]
    assert "unclosed search query" in state["steps"][1]["reason"]
    assert state["generated"]["answer"] == "Aspirin acts on COX."
    assert state["ranking"]


def test_o1_empty_and_nested_queries(toy):
    # an empty query ends the trajectory, as Search-o1's `if search_query and ...`
    # (scripts/run_search_o1.py L532)
    llm = FakeLLM([(f"Let me search.\n\n{BEGIN_QUERY}  ", "stop")])
    state = graph_run(toy, build_o1, llm, llm_mode="chat")
    assert [s["node"] for s in state["steps"]] == ["reason", "final"]
    nested = [
        (f"{BEGIN_QUERY}wrong {BEGIN_QUERY}aspirin platelets", "stop"),
        (INFO, "stop"),
        ("Aspirin blocks platelet cyclooxygenase.", "stop"),
    ]
    # Search-o1's extract_between (L412-417) matches from the first begin tag, non-greedily
    state = graph_run(toy, build_o1, FakeLLM(nested), llm_mode="chat")
    steps = state["steps"]
    assert [s["node"] for s in steps] == ["reason", "search", "documents", "reason", "final"]
    assert steps[1]["request"]["query"] == f"wrong {BEGIN_QUERY}aspirin platelets"
    assert steps[0]["stop_assumed"] == END_QUERY  # a chat API does not name its stop string
    # ours, lenient: the query after the last begin tag
    state = graph_run(toy, build_o1, FakeLLM(nested), llm_mode="chat", lenient_query=True)
    assert state["steps"][1]["request"]["query"] == "aspirin platelets"


def test_o1_a_turn_is_a_search_only_when_it_ends_with_the_end_tag(toy):
    """scripts/run_search_o1.py L532: `search_query and seq['output'].rstrip().endswith(
    END_SEARCH_QUERY)`; any other turn ends the trajectory (L610-613). A backend that names
    its stop string (an embedded model, vLLM) says whether the turn ended there."""
    unclosed = f"Aspirin acts on COX.\n\n{BEGIN_QUERY}aspirin platelets"
    local = {"model": "local/qwen2.5-coder-0.5b", "server": "openai"}
    # the model ended its turn (no stop string) inside an unclosed query: not a search
    state = graph_run(toy, build_o1, FakeLLM([(unclosed, "stop", None)], **local),
                      llm_mode="chat")  # fmt: skip
    assert [s["node"] for s in state["steps"]] == ["reason", "final"]
    assert state["steps"][0]["search_query"] is None
    # it stopped at <|end_search_query|>: a search
    llm = FakeLLM([(unclosed, "stop", END_QUERY), (INFO, "stop"), ("done", "stop")],
                  model="openai/m", server="vllm")  # fmt: skip
    state = graph_run(toy, build_o1, llm, llm_mode="chat")
    assert [s["node"] for s in state["steps"]][:3] == ["reason", "search", "documents"]
    assert "stop_assumed" not in state["steps"][0]
    # a backend that wrote on past the closed query: the turn does not end with the tag
    past = f"{BEGIN_QUERY}aspirin platelets{END_QUERY}{BEGIN_RESULT}made up{END_RESULT} Done."
    state = graph_run(toy, build_o1, FakeLLM([(past, "stop")]), llm_mode="chat")
    assert [s["node"] for s in state["steps"]] == ["reason", "final"]
    assert state["generated"]["passage"] == past  # kept whole, as Search-o1 keeps it
    # ours, lenient: both searched
    state = graph_run(toy, build_o1, FakeLLM([(unclosed, "stop", None), (INFO, "stop"),
                                              ("done", "stop")], **local),
                      llm_mode="chat", lenient_query=True)  # fmt: skip
    assert [s["node"] for s in state["steps"]][:2] == ["reason", "search"]


def test_o1_reason_in_documents_is_read_as_search_o1_reads_it(toy):
    """scripts/evaluate.py L20-29: after the last "\\n**Final Information**" with the newlines
    deleted, else after "\\n**Modified Reasoning Steps**", else the canned text."""
    from agents.graphs.search_o1 import NO_INFORMATION, final_information

    assert final_information(INFO) == "Aspirin blocksplatelet cyclooxygenase."
    # .strip("```").strip(): the backticks after the newline stay, as in Search-o1
    assert final_information("x\n**Modified Reasoning Steps**\n```Step 1: a\nb```") == (
        "```Step 1: a\nb"
    )  # fmt: skip
    assert final_information("Final Information: aspirin") == NO_INFORMATION
    assert final_information("Final Information: aspirin", "lenient") == "aspirin"
    llm = FakeLLM([
        (f"{BEGIN_QUERY}aspirin platelets", "stop"),
        ("The documents say aspirin blocks COX.", "stop"),  # no heading
        ("Aspirin blocks COX.", "stop"),
    ])  # fmt: skip
    state = graph_run(toy, build_o1, llm, llm_mode="chat")
    assert state["steps"][2]["information"] == NO_INFORMATION
    assert f"{BEGIN_RESULT}{NO_INFORMATION}{END_RESULT}" in llm.calls[2][-1]["content"]


def test_o1_documents_are_shown_up_to_6000_characters(toy, tmp_path):
    """run_search_o1.py L640-644: a page without a located snippet is shown up to
    max_doc_len * 2 = 6,000 characters."""
    long = "aspirin platelets " + "x" * 9000
    data = tmp_path / "long"
    data.mkdir()
    (data / "corpus.jsonl").write_text(json.dumps({"id": "d1", "text": long}) + "\n")
    (data / "query.jsonl").write_text(json.dumps({"id": "q", "text": ASPIRIN}) + "\n")
    (data / "qrels.jsonl").write_text(json.dumps({"q_id": "q", "p_id": "d1", "score": 1}) + "\n")
    llm = FakeLLM([(f"{BEGIN_QUERY}aspirin platelets", "stop"), (INFO, "stop"), ("done", "stop")])
    graph_run({**toy, "data": data}, build_o1, llm, llm_mode="chat")
    shown = llm.calls[1][0]["content"]
    assert f"**Document 1:**\n{long[:6000]}\n" in shown and long[:6001] not in shown


# --- search-r1 -----------------------------------------------------------------------------


def r1_model(final_turn: str = "<think>COX blocked</think>\n<answer> COX inhibition"):
    calls = []

    def respond(messages, params):
        calls.append({"messages": messages, "stop": params.get("stop")})
        if turn(messages) == 1:
            return "<think>I need to look this up.</think>\n<search> aspirin platelets "
        return final_turn

    return respond, calls


def test_r1_searches_then_answers(toy):
    respond, calls = r1_model()
    scripted.install(respond)
    assert run(toy, "search-r1") == 0
    rec = records(toy)["q2"]
    assert nodes(rec) == ["reason", "search", "reason", "final"]
    assert rec["steps"][1]["request"]["query"] == "aspirin platelets"
    assert len(rec["steps"][1]["doc_ids"]) <= 3
    second = rec["steps"][2]["messages"]
    assert [m["role"] for m in second] == ["user", "assistant", "user"]
    assert second[1]["content"].endswith("<search> aspirin platelets </search>")
    # generation.py L460-469: "Doc i(Title: <first line>) <rest>"; a one-line document is
    # all title
    assert second[2]["content"].startswith(
        "<information>Doc 1(Title: Aspirin irreversibly inhibits platelet cyclooxygenase.)"
    )  # fmt: skip
    assert calls[0]["stop"] == ["</search>", "</answer>"]
    assert rec["generated"]["answer"] == "COX inhibition"
    # R2MED reads Search-R1's output by its first <answer> (src/base.py L28-34)
    assert rec["generated"]["passage"].endswith("<answer> COX inhibition</answer>")
    assert rec["steps"][-1]["request"]["sparse_text"] == "COX inhibition"
    assert rec["steps"][-1]["reasoning"] == "search-r1"
    assert rec["steps"][0]["prompt"]["name"] == "search-r1/default"
    assert "Question: How does aspirin act on platelets?\n" in second[0]["content"]


def test_r1_continue_mode_and_only_the_newest_turn_is_parsed(toy):
    # turn 2 writes no tag: the older <search> in the same assistant text must not rerun
    respond, calls = r1_model(final_turn="<think>hmm</think>")
    scripted.install(respond)
    assert run(toy, "search-r1", "--option", "llm_mode=continue") == 0
    rec = records(toy)["q2"]
    assert nodes(rec).count("search") == 1
    # four search turns, then one with search off (generation.py L234-310)
    assert [s.get("action") for s in rec["steps"] if s["node"] == "reason"] == [
        "search", None, None, None, None,
    ]  # fmt: skip
    second = rec["steps"][2]["messages"]
    assert [m["role"] for m in second] == ["user", "assistant"]
    assert "</search>\n\n<information>Doc 1(Title: Aspirin" in second[1]["content"]
    third = rec["steps"][3]["messages"][1]["content"]
    assert third.endswith("<think>hmm</think>" + INVALID_ACTION)


def test_r1_search_turns_then_one_with_search_off(toy):
    """generation.py L234-310: max_turns search turns, then one more generation whose search
    is not run, with nothing added before it."""
    scripted.install(
        lambda messages, params: f"<think>look</think><search> aspirin {turn(messages)} "
    )
    assert run(toy, "search-r1", "--max-turns", "2") == 0
    rec = records(toy)["q2"]
    assert nodes(rec) == ["reason", "search", "reason", "search", "reason", "limit", "final"]
    last = rec["steps"][4]
    assert last["final_turn"] and last["action"] == "search"
    assert "No more searches" not in json.dumps(last["messages"])
    assert "not run" in rec["steps"][5]["reason"]
    assert rec["steps"][-1]["note_answer"].startswith("no <answer>")
    assert rec["ranking"]
    # ours, asked for: the nudge before that turn
    assert run(toy, "search-r1", "--max-turns", "2", "--option", "final_nudge=true",
               name="nudged") == 0  # fmt: skip
    last = [s for s in records(toy, "nudged")["q2"]["steps"] if s["node"] == "reason"][-1]
    assert "No more searches are allowed" in last["messages"][-1]["content"]


def test_r1_information_block_is_cut_to_obs_tokens(toy):
    """generation.py L87-89: the observation, tags included, cut to max_obs_length tokens."""
    import litellm

    scripted.install(lambda m, p: "<search> aspirin platelets statins warfarin </search>")
    assert run(toy, "search-r1", "--option", "obs_tokens=12", "--max-turns", "1") == 0
    rec = records(toy)["q2"]
    search = rec["steps"][1]
    assert search["obs_tokens"]["limit"] == 12
    shown = rec["steps"][2]["messages"][-1]["content"]
    full = "<information>Doc 1(Title: Aspirin irreversibly inhibits platelet cyclooxygenase.)"
    cut = litellm.decode(model="scripted/test", tokens=litellm.encode(
        model="scripted/test", text=f"\n\n{full}")[:12])  # fmt: skip
    assert cut.strip() in shown and full not in shown


def test_parse_action_reads_a_turn_as_search_r1_does():
    # generation.py L61-66: the text up to its first </search>, else its first </answer>;
    # L422: the first complete <search>/<answer> pair is the action, its content stripped
    assert parse_action("<think>a</think><search> q ", "stop")[:2] == ("search", "q")
    assert parse_action("<search>q</search> <answer> x", "stop") == (
        "search", "q", "<search>q</search>"
    )  # fmt: skip
    assert parse_action("<answer> x </answer> <search>q</search>", "stop")[:2] == ("answer", "x")
    assert parse_action("<search> q", "length")[:2] == (None, None)  # cut at max_tokens
    assert parse_action("<search></search>", "stop")[:2] == ("search", "")  # empty is a search
    assert parse_action("<answer>a", "stop", "</answer>")[:2] == ("answer", "a")
    assert parse_action("no tags", "stop")[:2] == (None, None)


def test_r1_final_ranking_modes_and_recursion_limit(toy):
    respond, _ = r1_model()
    scripted.install(respond)
    for mode in ("fuse", "trace"):
        llm = LLM(model="scripted/test")
        state = graph_run(toy, build_r1, llm, final_ranking=mode)
        final = state["steps"][-1]
        assert final["final_ranking"] == mode and state["ranking"]
        if mode == "fuse":
            assert final["fused_lists"] == 2
        else:
            assert "<think>" not in final["request"]["sparse_text"]
