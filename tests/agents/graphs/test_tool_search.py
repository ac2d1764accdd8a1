"""tool-search end to end: scripted models that return native tool calls (as API models do)
and the text path (Qwen's <tool_call> format) that local/ models use, parsed and rendered by
agents/llm/tool_text.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agents.commands.trace import main as trace_main
from agents.llm import scripted
from agents.llm.scripted import Reply
from agents.llm.tool_text import parse_tool_calls, text_messages
from tests.helpers import nodes, records, run_agent


@pytest.fixture
def toy(tmp_path: Path, toy_dir: Path) -> dict:
    return {"data": toy_dir, "runs": tmp_path / "runs", "cache": tmp_path / "cache"}


def run(toy: dict, *extra: str, name: str = "run") -> int:
    return run_agent(toy, "tool-search", *extra, name=name)


def turn(messages: list[dict]) -> int:
    return 1 + sum(m["role"] == "assistant" for m in messages)


def tool_results(messages: list[dict]) -> list[dict]:
    return [m for m in messages if m["role"] == "tool"]


def scripted_plan(plan: list, calls: list | None = None):
    """A model that plays `plan[turn - 1]` at each turn (a Reply, or text), the same for every
    query; `calls` collects what it was sent."""

    def respond(messages: list[dict], params: dict):
        if calls is not None:
            calls.append({"messages": messages, "params": params})
        n = turn(messages)
        return plan[min(n, len(plan)) - 1]

    return respond


def only(query_id: str, plan: list, other: object = "I cannot help."):
    """A plan for one query (found by its text); every other query gets `other`."""
    from tests.helpers import QUERIES

    def respond(messages: list[dict], params: dict):
        if QUERIES[query_id] not in messages[0]["content"]:
            return other
        n = turn(messages)
        return plan[min(n, len(plan)) - 1]

    return respond


SEARCH_READ_SUBMIT = [
    Reply("Let me search.", tool_calls=[("search", {"query": "aspirin platelets", "k": 3})]),
    Reply(tool_calls=[("read", {"doc_id": "d3"})]),
    Reply("d3 answers it.", tool_calls=[("submit", {"doc_ids": ["d3"]})]),
]


# --- native tool calls (scripted provider) ------------------------------------------------


def test_search_read_submit_and_its_final_ranking(toy):
    calls: list = []
    scripted.install(scripted_plan(SEARCH_READ_SUBMIT, calls))
    assert run(toy) == 0
    rec = records(toy)["q2"]
    assert nodes(rec) == ["reason", "tool", "reason", "tool", "reason", "tool", "final"]
    # the tools were offered in the OpenAI schema, with descriptions from the prompt files
    tools = calls[0]["params"]["tools"]
    assert [t["function"]["name"] for t in tools] == ["search", "read", "submit"]
    assert tools[0]["function"]["description"].startswith("Search the corpus.")
    search = rec["steps"][1]
    assert search["tool"] == "search" and search["request"]["query"] == "aspirin platelets"
    assert search["doc_ids"][0] == "d3" and len(search["doc_ids"]) <= 3 and not search["error"]
    hits = json.loads(search["result"])
    assert hits[0]["id"] == "d3" and "snippet" in hits[0] and "score" in hits[0]
    assert json.loads(rec["steps"][3]["result"])["text"].startswith("Aspirin irreversibly")
    # each result went back as a tool message answering its call
    second = rec["steps"][2]["messages"]
    assert [m["role"] for m in second] == ["user", "assistant", "tool"]
    assert second[1]["tool_calls"][0]["id"] == second[2]["tool_call_id"]
    assert second[1]["content"] == "Let me search."
    final = rec["steps"][-1]
    assert final["submitted"] == 1 and final["final_ranking"] == "submit"
    ranking = [d for d, _ in rec["ranking"]]
    assert ranking[0] == "d3" and len(ranking) == len(set(ranking))
    # the rest is the fusion of the search and of the query's own list (fuse_query)
    assert set(search["doc_ids"]) <= set(ranking) and final["fused_lists"] == 2
    assert rec["generated"]["submitted"] == "d3"
    scores = [s for _, s in rec["ranking"]]
    assert scores == sorted(scores, reverse=True) and len(set(scores)) == len(scores)


def test_fuse_only_ignores_the_submission(toy):
    plan = [
        Reply(
            tool_calls=[
                ("search", {"query": "metformin glucose"}),
                ("search", {"query": "hepatic glucose"}),
                ("search", {"query": "warfarin vitamin K"}),
            ]
        ),  # fmt: skip
        Reply(tool_calls=[("submit", {"doc_ids": ["d5", "d2"]})]),
    ]
    scripted.install(scripted_plan(plan))
    assert run(toy, "--final-ranking", "submit", name="submit") == 0
    scripted.install(scripted_plan(plan))
    assert run(toy, "--final-ranking", "fuse", name="fuse") == 0
    submit, fuse = records(toy, "submit")["q1"], records(toy, "fuse")["q1"]
    assert [d for d, _ in submit["ranking"]][:2] == ["d5", "d2"]
    assert fuse["steps"][-1]["submitted"] == 0 and fuse["steps"][-1]["fused_lists"] == 4
    # the fusion: RRF of the agent's searches and the query's own list, where d2 leads
    assert [d for d, _ in fuse["ranking"]][:2] == ["d2", "d5"]


def test_parallel_calls_in_one_turn_are_all_run(toy):
    plan = [
        Reply(
            tool_calls=[
                ("search", {"query": "aspirin"}),
                ("search", {"query": "platelet"}),
                ("read", {"doc_id": "d3"}),
            ]
        ),  # fmt: skip
        Reply(tool_calls=[("submit", {"doc_ids": ["d3"]})]),
    ]
    calls: list = []
    scripted.install(scripted_plan(plan, calls))
    assert run(toy) == 0
    rec = records(toy)["q2"]
    assert nodes(rec) == ["reason", "tool", "tool", "tool", "reason", "tool", "final"]
    answered = tool_results(rec["steps"][4]["messages"])
    asked = rec["steps"][4]["messages"][1]["tool_calls"]
    assert [m["tool_call_id"] for m in answered] == [c["id"] for c in asked]
    assert rec["steps"][-1]["fused_lists"] == 3  # two searches + the query's list


def test_unseen_ids_are_refused_and_the_model_can_submit_again(toy):
    plan = [
        Reply(tool_calls=[("search", {"query": "aspirin", "k": 1})]),
        Reply(tool_calls=[("submit", {"doc_ids": ["d3", "d9", "d4"]})]),
        Reply(tool_calls=[("submit", {"doc_ids": ["d3"]})]),
    ]
    scripted.install(scripted_plan(plan))
    assert run(toy) == 0
    rec = records(toy)["q2"]
    refused = rec["steps"][3]
    assert refused["tool"] == "submit" and refused["error"]
    message = json.loads(refused["result"])["error"]
    assert "d9" in message and "d4" in message and "d3," not in message
    assert rec["steps"][5]["error"] is False and rec["steps"][-1]["submitted"] == 1


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (("search", "{not json"), "not valid JSON"),
        (("search", "[1, 2]"), "must be a JSON object"),
        (("lookup", {"query": "x"}), "unknown tool 'lookup'"),
        (("search", {"query": 7}), "query must be a non-empty string"),
        (("search", {"query": "aspirin", "k": "ten"}), "k must be an integer"),
        (("read", {"doc_id": "nope"}), "no document has id 'nope'"),
        (("submit", {"doc_ids": "d3"}), "doc_ids must be a list"),
        (("submit", {"doc_ids": []}), "doc_ids is empty"),
    ],
)
def test_a_malformed_call_gets_an_error_and_the_trajectory_goes_on(toy, call, expected):
    plan = [Reply(tool_calls=[call]), *SEARCH_READ_SUBMIT]
    scripted.install(only("q2", plan))
    assert run(toy) == 0
    rec = records(toy)["q2"]
    bad = rec["steps"][1]
    assert bad["error"] and expected in json.loads(bad["result"])["error"]
    answered = tool_results(rec["steps"][2]["messages"])[0]
    assert expected in answered["content"]  # the model is told
    assert rec["steps"][-1]["submitted"] == 1 and rec["ranking"][0][0] == "d3"


def test_turn_limit_ends_with_a_limit_step_and_falls_back_to_fusion(toy):
    searching = [Reply(tool_calls=[("search", {"query": f"aspirin {i}"})]) for i in range(9)]
    scripted.install(scripted_plan(searching))
    assert run(toy, "--max-turns", "3", "--max-searches", "9") == 0
    rec = records(toy)["q2"]
    assert nodes(rec).count("reason") == 3 and nodes(rec)[-2:] == ["limit", "final"]
    assert "max_turns (3)" in rec["steps"][-2]["reason"]
    final = rec["steps"][-1]
    assert final["submitted"] == 0 and final["fused_lists"] == 4
    assert rec["ranking"][0][0] == "d3"


@pytest.mark.parametrize(("tool", "flag"), [("search", "--max-searches"), ("read", "--option")])
def test_search_and_read_limits_end_the_trajectory(toy, tool, flag):
    args = {"search": {"query": "aspirin"}, "read": {"doc_id": "d3"}}[tool]
    plan = [
        Reply(tool_calls=[("search", {"query": "aspirin"})]),
        Reply(tool_calls=[(tool, args), (tool, args), ("submit", {"doc_ids": ["d3"]})]),
    ]
    scripted.install(scripted_plan(plan))
    value = "1" if tool == "search" else "max_reads=1"
    assert run(toy, flag, value) == 0
    rec = records(toy)["q2"]
    limit = "max_searches (1)" if tool == "search" else "max_reads (1)"
    assert nodes(rec)[-2:] == ["limit", "final"] and limit in rec["steps"][-2]["reason"]
    over = [s for s in rec["steps"] if s["node"] == "tool" and s["error"]]
    # the call over the limit and the ones after it in its turn are not run
    assert all("not run" in json.loads(s["result"])["error"] for s in over)
    assert over[-1]["tool"] == "submit" and rec["steps"][-1]["submitted"] == 0


def test_a_conversation_outgrowing_the_context_ends_with_a_limit_and_keeps_its_searches(toy):
    import litellm

    overflow = litellm.ContextWindowExceededError(
        message="too long", model="scripted/test", llm_provider="scripted"
    )
    scripted.install(scripted_plan([SEARCH_READ_SUBMIT[0], overflow]))
    assert run(toy) == 0
    rec = records(toy)["q2"]
    assert nodes(rec) == ["reason", "tool", "limit", "final"] and not rec.get("error")
    assert "context" in rec["steps"][2]["reason"] and rec["steps"][-1]["fused_lists"] == 2


def test_no_tool_call_is_nudged_then_ends_with_the_query_fallback(toy):
    calls: list = []
    scripted.install(scripted_plan(["Aspirin blocks platelets."], calls))
    assert run(toy, "--option", "fuse_query=false") == 0
    rec = records(toy)["q2"]
    assert nodes(rec) == ["reason", "nudge", "reason", "stop", "final"]
    assert calls[1]["messages"][-1]["content"].startswith("You did not call a tool.")
    final = rec["steps"][-1]
    assert final["submitted"] == 0 and "ranked with the query" in final["note"]
    assert rec["ranking"][0][0] == "d3"


def test_a_cached_rerun_makes_no_llm_call(toy):
    provider = scripted.install(scripted_plan(SEARCH_READ_SUBMIT))
    assert run(toy, name="first") == 0
    first = provider.calls
    assert first == 9  # three turns for each of the three queries
    assert run(toy, name="second") == 0
    assert provider.calls == first
    a, b = records(toy, "first"), records(toy, "second")
    assert {q: r["ranking"] for q, r in a.items()} == {q: r["ranking"] for q, r in b.items()}
    assert all(s.get("cached", True) for r in b.values() for s in r["steps"])
    config = json.loads((toy["runs"] / "second" / "config.json").read_text())
    text = json.dumps(config)
    assert "tool-search/search" in text and "max_reads" in text


def test_the_trace_shows_tool_calls_and_results(toy, capsys):
    scripted.install(scripted_plan(SEARCH_READ_SUBMIT))
    assert run(toy) == 0
    capsys.readouterr()
    assert trace_main([str(toy["runs"] / "run"), "q2"]) == 0
    out = capsys.readouterr().out
    assert 'search({"query": "aspirin platelets", "k": 3})' in out
    assert "submit" in out and '"id": "d3"' in out


# --- the text path (local/ models, --server llamacpp) -----------------------------------


def test_parse_tool_calls_reads_qwen_blocks():
    text = (
        'I will search.\n<tool_call>\n{"name": "search", "arguments": {"query": "a"}}\n'
        '</tool_call>\n<tool_call>\n{"name": "read", "arguments": {"doc_id": "d1"}}\n'
        "</tool_call>"
    )
    content, calls = parse_tool_calls(text)
    assert content == "I will search."
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("search", {"query": "a"}),
        ("read", {"doc_id": "d1"}),
    ]
    assert calls == parse_tool_calls(text)[1] and calls[0].id != calls[1].id
    # bad JSON is still a call, its arguments the raw text; an unclosed block is read too
    _, (bad,) = parse_tool_calls('<tool_call>{"name": "search", "arguments": {"query": }')
    assert bad.name == "search" and "query" in bad.arguments
    assert parse_tool_calls("no call here") == ("no call here", [])


def _qwen_template(messages: list[dict], tools: list[dict]) -> str:
    """Qwen2.5's chat template (as the embedded GGUF carries it), rendered as transformers
    renders chat templates."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    from llama_cpp import Llama

    from agents.llm.embedded.weights import model_file

    llm = Llama(model_path=str(model_file("qwen2.5-coder-0.5b")), vocab_only=True, verbose=False)
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda x: json.dumps(x, ensure_ascii=False)
    template = env.from_string(llm.metadata["tokenizer.chat_template"])
    return template.render(messages=messages, tools=tools, add_generation_prompt=True)


def test_text_rendering_equals_qwens_own_template():
    from agents.config.registry import AGENTS
    from agents.graphs.tool_search import tool_schemas
    from agents.llm.embedded.chatml import render_chatml
    from agents.llm.embedded.weights import LOCAL_MODELS
    from prompts import PromptBook

    tools = tool_schemas(PromptBook(task="toy"), AGENTS["tool-search"].defaults)
    conversation = [
        {"role": "user", "content": "Find papers on aspirin."},
        {"role": "assistant", "content": "Searching.", "tool_calls": [
            {"id": "a", "type": "function",
             "function": {"name": "search", "arguments": '{"query": "aspirin é"}'}},
            {"id": "b", "type": "function",
             "function": {"name": "read", "arguments": '{"doc_id": "d3"}'}},
        ]},
        {"role": "tool", "tool_call_id": "a", "content": '[{"id": "d3"}]'},
        {"role": "tool", "tool_call_id": "b", "content": '{"id": "d3", "text": "..."}'},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c", "type": "function",
             "function": {"name": "submit", "arguments": '{"doc_ids": ["d3"]}'}}]},
        {"role": "tool", "tool_call_id": "c", "content": "Received."},
    ]  # fmt: skip
    system = LOCAL_MODELS["qwen2.5-coder-0.5b"].default_system
    ours = render_chatml(text_messages(conversation, tools, system), system)
    # the template wants arguments as mappings (transformers' and vLLM's convention)
    theirs_messages = [
        {**m, "tool_calls": [
            {**c, "function": {**c["function"],
                               "arguments": json.loads(c["function"]["arguments"])}}
            for c in m["tool_calls"]]} if m.get("tool_calls") else m
        for m in conversation
    ]  # fmt: skip
    assert ours == _qwen_template(theirs_messages, tools)
    with_system = [{"role": "system", "content": "Be brief."}, *conversation[:1]]
    assert render_chatml(text_messages(with_system, tools, system), system) == _qwen_template(
        with_system, tools
    )


def test_a_json_call_outside_tags_is_read_when_it_names_an_offered_tool():
    fenced = 'Searching.\n```json\n{"name": "search", "arguments": {"query": "asparagus"}}\n```'
    content, (call,) = parse_tool_calls(fenced, ["search", "submit"])
    assert content == "Searching." and json.loads(call.arguments) == {"query": "asparagus"}
    bare = '{"name": "submit", "arguments": {"doc_ids": ["d1"]}}'
    assert parse_tool_calls(bare, ["submit"])[1][0].name == "submit"
    lines = (
        '{"name": "search", "arguments": {"query": "a"}}\n'
        '{"name": "submit", "arguments": {"doc_ids": ["d1"], "doc_ids": ["d2"]}}'
    )
    content, calls = parse_tool_calls(lines, ["search", "submit"])
    assert content == "" and [c.name for c in calls] == ["search", "submit"]
    assert json.loads(calls[1].arguments) == {"doc_ids": ["d2"]}  # JSON's last key wins
    # not a call: JSON that names no offered tool, or no tools offered at all
    assert parse_tool_calls('{"name": "other", "arguments": {}}', ["search"])[1] == []
    assert parse_tool_calls(fenced)[1] == []
