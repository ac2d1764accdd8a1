"""The listwise LLM stages (RankGPT's sliding window, InsertRank) with a scripted model."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from agents.commands.run import main
from agents.config.registry import STAGES
from agents.llm import LLM, scripted
from agents.rerank import StageContext
from agents.rerank.listwise import (
    INSERTRANK,
    LISTWISE,
    NO_PERMUTATION,
    build_insertrank,
    build_listwise,
    parse_permutation,
    windows,
)
from eval.records import read_records
from prompts import PromptBook

STAGE_FILE = "queries.jsonl"


@pytest.fixture
def listwise_stages(monkeypatch):
    monkeypatch.setitem(STAGES, "llm-listwise", LISTWISE)
    monkeypatch.setitem(STAGES, "insertrank", INSERTRANK)


# --- the window arithmetic ---------------------------------------------------------------


def test_windows_match_rankgpt_on_its_default_100_20_10():
    expected = [(80, 100), (70, 90), (60, 80), (50, 70), (40, 60), (30, 50), (20, 40),
                (10, 30), (0, 20)]  # fmt: skip
    assert windows(100, 100, 20, 10) == expected


def test_windows_cover_only_the_top_depth_when_the_list_is_longer():
    assert windows(1000, 100, 20, 10) == windows(100, 100, 20, 10)
    assert windows(50, 30, 20, 10) == [(10, 30), (0, 20)]


def test_a_list_shorter_than_the_window_is_one_window():
    # RankGPT's loop would not run at all (start = 5 - 20 < 0): nothing reranked
    assert windows(5, 100, 20, 10) == [(0, 5)]
    assert windows(20, 100, 20, 10) == [(0, 20)]


def test_a_step_equal_to_the_window_makes_disjoint_windows():
    assert windows(100, 100, 20, 20) == [(80, 100), (60, 80), (40, 60), (20, 40), (0, 20)]


def test_the_last_window_is_clamped_to_reach_the_top():
    # RankGPT stops after (1, 4) and never judges position 0
    assert windows(6, 100, 3, 2) == [(3, 6), (1, 4), (0, 2)]
    assert windows(21, 100, 20, 10) == [(1, 21), (0, 11)]


def test_windows_of_one_passage_or_none_are_left_out():
    assert windows(0, 100, 20, 10) == []
    assert windows(1, 100, 20, 10) == []
    assert windows(4, 100, 3, 3) == [(1, 4)]  # the clamped (0, 1) holds one passage
    assert windows(5, 1, 3, 2) == []  # depth 1: nothing to order


# --- parsing the reply -------------------------------------------------------------------


@pytest.mark.parametrize(
    "reply, k, permutation",
    [
        ("[2] > [3] > [1]", 3, [2, 3, 1]),
        ("[2]>[3]>[1]", 3, [2, 3, 1]),
        ("[ 2 ] > [ 3 ] > [ 1 ]", 3, [2, 3, 1]),
        ("2 > 3 > 1", 3, [2, 3, 1]),
        ("The ranking is: [3] > [1] > [2].", 3, [3, 1, 2]),
        ("[02] > [1] > [3]", 3, [2, 1, 3]),
        # brackets win over other numbers in the text
        ("Of the 3 passages: [2] > [1] > [3]", 3, [2, 1, 3]),
        # a '>' chain wins over stray bare numbers
        ("Of the 3 passages, 2 > 1 > 3", 3, [2, 1, 3]),
        # no brackets and no chain: any number, as RankGPT's clean_response
        ("2, 3, 1", 3, [2, 3, 1]),
        ("3", 3, [3, 1, 2]),
        ("<think>maybe [1] > [2] > [3]</think>[3] > [2] > [1]", 3, [3, 2, 1]),
        ("<think>a</think>x<think>[1] > [2]</think> [2] > [3]", 3, [2, 3, 1]),
    ],
)
def test_replies_parse_to_a_full_permutation(reply, k, permutation):
    assert parse_permutation(reply, k)[0] == permutation


def test_a_clean_full_permutation_has_no_note():
    assert parse_permutation("[2] > [3] > [1]", 3) == ([2, 3, 1], None)


def test_left_out_ids_follow_the_listed_ones_in_their_previous_order():
    permutation, note = parse_permutation("[4] > [2]", 5)
    assert permutation == [4, 2, 1, 3, 5]
    assert note == "ids not listed, kept in their previous order after the others: [1, 3, 5]"


def test_duplicates_keep_their_first_place():
    permutation, note = parse_permutation("[2] > [1] > [2] > [3] > [1]", 3)
    assert permutation == [2, 1, 3]
    assert note == "ignored repeated ids: [2, 1]"


def test_out_of_range_ids_are_ignored():
    permutation, note = parse_permutation("[0] > [4] > [3] > [12] > [1]", 3)
    assert permutation == [3, 1, 2]
    assert "ignored ids outside 1..3: [0, 4, 12]" in note
    assert "[2]" in note  # and 2 was left out


@pytest.mark.parametrize(
    "reply",
    ["", "I cannot rank these passages.", "[7] > [9]", "<think>[2] > [1]</think>no idea", "[]"],
)
def test_a_reply_without_a_usable_id_leaves_the_window_as_it_was(reply):
    assert parse_permutation(reply, 3) == ([1, 2, 3], NO_PERMUTATION)


# --- a whole rerank, by hand -------------------------------------------------------------

CORPUS = {f"d{i}": f"passage number {i} " + "word " * 400 for i in range(1, 6)}
RANKING = {"d1": 9.5, "d2": 8.25, "d3": 7.0, "d4": 6.125, "d5": 5.0}


def passages(messages: list[dict]) -> list[str]:
    """The passage turns of a RankGPT window, in the order shown."""
    return [m["content"] for m in messages if m["role"] == "user" and m["content"][:1] == "["]


def run_stage(tmp_path, builder, replies, options=None, ranking=RANKING):
    queue = list(replies)
    seen: list[list[dict]] = []

    def respond(messages, params):
        seen.append(messages)
        return queue.pop(0)

    provider = scripted.install(respond)
    opts = {"depth": 100, "window": 3, "step": 2, "doc_words": 300, **(options or {})}
    if builder is build_insertrank:
        opts.setdefault("score_name", "BM25")
    ctx = StageContext(
        corpus=CORPUS, task="toy", options=opts,
        llm=LLM(model="scripted/x", cache_dir=tmp_path / "cache"), prompts=PromptBook(task="toy"),
    )  # fmt: skip
    result = asyncio.run(builder(ctx).rerank("q1", "which passage?", ranking))
    return result, seen, provider


def test_a_rerank_moves_documents_window_by_window(tmp_path):
    # windows (2, 5) then (0, 3) over d1..d5
    result, seen, provider = run_stage(tmp_path, build_listwise, ["[3] > [1]", "[3] > [2] > [1]"])
    assert provider.calls == 2
    first, second = result["steps"]
    assert first["window"] == [2, 5] and first["doc_ids"] == ["d3", "d4", "d5"]
    assert first["permutation"] == [3, 1, 2]
    assert first["order"] == ["d5", "d3", "d4"]  # d4, left out, goes after the listed ones
    assert first["note"].startswith("ids not listed")
    # the second window sees the first one's result: d5 has climbed into it
    assert second["window"] == [0, 3] and second["doc_ids"] == ["d1", "d2", "d5"]
    assert second["order"] == ["d5", "d2", "d1"] and second["note"] is None
    assert list(result["ranking"]) == ["d5", "d2", "d1", "d3", "d4"]
    scores = list(result["ranking"].values())
    assert scores == [5.0, 4.0, 3.0, 2.0, 1.0]
    assert [p.split()[:3] for p in passages(seen[0])] == [
        ["[1]", "passage", "number"], ["[2]", "passage", "number"], ["[3]", "passage", "number"]
    ]  # fmt: skip
    assert passages(seen[0])[0].startswith("[1] passage number 3 ")
    assert len(passages(seen[0])[0].split()) == 1 + 300  # "[1]" + doc_words


def test_each_window_step_holds_the_call_and_its_reading(tmp_path):
    result, _, _ = run_stage(tmp_path, build_listwise, ["<think>hmm</think>[2] > [1]", "nothing"])
    first, second = result["steps"]
    assert first["node"] == "window"
    assert first["output"] == "<think>hmm</think>[2] > [1]" and first["reply"] == "[2] > [1]"
    assert first["messages"][0]["role"] == "system"
    assert first["usage"]["calls"] == 1 and first["usage"]["prompt_tokens"] > 0
    assert first["cached"] is False
    assert second["note"] == NO_PERMUTATION
    assert second["doc_ids"] == second["order"]


def test_documents_below_depth_keep_their_order_under_the_reranked_ones(tmp_path):
    result, seen, _ = run_stage(tmp_path, build_listwise, ["[3] > [2] > [1]"], {"depth": 3})
    assert len(seen) == 1
    assert list(result["ranking"]) == ["d3", "d2", "d1", "d4", "d5"]


def test_a_list_of_one_document_calls_no_model(tmp_path):
    result, seen, _ = run_stage(tmp_path, build_listwise, [], ranking={"d1": 1.0})
    assert seen == [] and result == {"ranking": {"d1": 1.0}, "steps": []}


def test_insertrank_shows_each_passage_with_its_first_stage_score(tmp_path):
    _, seen, _ = run_stage(tmp_path, build_insertrank, ["[1] > [2] > [3]"] * 2)
    shown = passages(seen[0])
    assert shown[0].startswith("[1] (BM25 score: 7) passage number 3 ")
    assert shown[1].startswith("[2] (BM25 score: 6.125) passage number 4 ")
    assert "BM25 score" in seen[0][1]["content"]
    plain = passages(run_stage(tmp_path / "b", build_listwise, ["[1]"] * 2)[1][0])
    assert not any("score" in p for p in plain)


def test_bad_options_are_refused(listwise_stages):
    from agents.config.run_config import ConfigError
    from agents.config.stages import parse_stage

    for spec in ("llm-listwise,window=1", "llm-listwise,step=30", "llm-listwise,depth=0",
                 "insertrank,score_name= "):  # fmt: skip
        with pytest.raises(ConfigError):
            parse_stage(spec)
    assert parse_stage("llm-listwise,depth=5,window=3,step=2").options == {
        "model": "", "api_base": "", "depth": 5, "window": 3, "step": 2, "doc_words": 300
    }  # fmt: skip


# --- end to end --------------------------------------------------------------------------


def reverse_all(messages, params):
    """Put the window upside down: the model's whole reply."""
    k = len(passages(messages))
    return " > ".join(f"[{i}]" for i in range(k, 0, -1))


def test_a_run_with_no_agent_llm_reranks_and_a_second_run_calls_no_model(
    tmp_path, toy_dir, listwise_stages
):
    provider = scripted.install(reverse_all)

    def cli(name):
        return main([
            "--agent", "none", "--dataset", str(toy_dir), "--model", "scripted/x",
            # the toy task's BM25 lists hold 1 to 3 documents: window 2 makes them overlap
            "--rerank", "llm-listwise,depth=5,window=2,step=1",
            "--runs-dir", str(tmp_path / "runs"), "--cache-dir", str(tmp_path / "cache"),
            "--run-name", name, "--quiet",
        ])  # fmt: skip

    assert cli("a") == 0
    calls = provider.calls
    assert calls > 0
    run_dir = tmp_path / "runs" / "a"
    config = json.loads((run_dir / "config.json").read_text())
    assert config["llm"]["model"] == "scripted/x"  # the stage needs a model, the agent none
    first = read_records(run_dir / "toy" / "queries.jsonl")
    second = read_records(run_dir / "toy" / "rerank-1-llm-listwise" / "queries.jsonl")
    for q, record in first.items():
        before = [d for d, _ in record["ranking"]]
        after = [d for d, _ in second[q]["ranking"]]
        assert sorted(after) == sorted(before)
        steps = second[q]["steps"]
        assert [tuple(s["window"]) for s in steps] == windows(len(before), 5, 2, 1)
        # replaying every window's reversal by hand gives the saved order
        order = before[:]
        for s in steps:
            lo, hi = s["window"]
            assert s["doc_ids"] == order[lo:hi]
            order[lo:hi] = order[lo:hi][::-1]
            assert s["order"] == order[lo:hi]
        assert after == order
        assert second[q]["usage"]["prompt_tokens"] > 0 or not steps
    assert calls == sum(len(r["steps"]) for r in second.values())  # one call per window
    assert any(len(r["steps"]) >= 2 for r in second.values())  # windows that overlap
    summary = json.loads((run_dir / "toy" / "metrics.json").read_text())
    assert summary["final_stage"] == "rerank-1-llm-listwise"

    assert cli("b") == 0  # another folder, the same cache: every window is a cache hit
    assert provider.calls == calls
    stage_dir = tmp_path / "runs" / "b" / "toy" / "rerank-1-llm-listwise"
    again = read_records(stage_dir / "queries.jsonl")
    for q, record in again.items():
        assert record["ranking"] == second[q]["ranking"]
        assert all(s["cached"] for s in record["steps"])


def test_building_the_stages_records_their_prompts(tmp_path, toy_dir, listwise_stages):
    scripted.install(reverse_all)
    assert main([
        "--agent", "none", "--dataset", str(toy_dir), "--model", "scripted/x",
        "--rerank", "insertrank,depth=5,window=3,step=2",
        "--runs-dir", str(tmp_path / "runs"), "--cache-dir", str(tmp_path / "cache"),
        "--run-name", "i", "--quiet",
    ]) == 0  # fmt: skip
    recorded = json.loads((tmp_path / "runs" / "i" / "config.json").read_text())["prompts"]
    names = {n for n in recorded if n.startswith("insertrank/")}
    assert names == {f"insertrank/{p}" for p in
                     ("default", "system", "ready", "passage", "received", "rank")}  # fmt: skip
    records = read_records(tmp_path / "runs" / "i" / "toy" / "rerank-1-insertrank" / STAGE_FILE)
    shown = [m["content"] for r in records.values() for s in r["steps"] for m in s["messages"]]
    assert any(re.match(r"\[1\] \(BM25 score: [0-9.]+\) ", c) for c in shown)


def test_a_window_too_long_for_the_context_is_sent_again_with_shorter_passages(tmp_path):
    import litellm

    sizes = []

    def small_context(messages, params):
        words = sum(len(m["content"].split()) for m in messages)
        sizes.append(words)
        if words > 500:  # three 300-word passages do not fit, three of 75 do
            return litellm.ContextWindowExceededError(
                message="prompt too long", model="x", llm_provider="scripted"
            )
        return "[3] > [2] > [1]"

    scripted.install(small_context)
    ctx = StageContext(
        corpus=CORPUS, task="toy", options={"depth": 3, "window": 3, "step": 2, "doc_words": 300},
        llm=LLM(model="scripted/x", cache_dir=tmp_path / "cache"), prompts=PromptBook(task="toy"),
    )  # fmt: skip
    result = asyncio.run(build_listwise(ctx).rerank("q1", "which passage?", RANKING))
    assert len(sizes) == 3 and sizes == sorted(sizes, reverse=True)  # 300, 150, 75 words
    (step,) = result["steps"]
    assert step["doc_words"] == 75
    assert step["note"] == "passages cut to 75 words to fit the model's context"
    assert list(result["ranking"])[:3] == ["d3", "d2", "d1"]
    assert len(passages(step["messages"])[0].split()) == 1 + 75

    def never_fits(messages, params):
        return litellm.ContextWindowExceededError(message="no", model="x", llm_provider="s")

    scripted.install(never_fits)
    ctx.llm = LLM(model="scripted/x")
    with pytest.raises(litellm.ContextWindowExceededError):
        asyncio.run(build_listwise(ctx).rerank("q1", "which passage?", RANKING))
