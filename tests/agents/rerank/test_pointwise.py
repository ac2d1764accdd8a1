"""The pointwise LLM stage: logprob scoring, the graded fallback, reasoning, and a real run."""

from __future__ import annotations

import asyncio
import json
import math

import pytest

from agents.commands.run import main
from agents.commands.trace import main as trace_main
from agents.llm import LLM, scripted
from agents.rerank import StageContext
from agents.rerank.pointwise import (
    DEFAULTS,
    NO_JUDGEMENT,
    answer_start,
    build_pointwise,
    parse_grade,
    parse_yes_no,
    yes_probability,
)
from eval.records import read_records
from prompts import PromptBook

LN = math.log

# --- reading a judgement -----------------------------------------------------------------


def test_yes_probability_sums_the_spellings_of_yes_and_of_no():
    # worked by hand: P(yes) = 0.6 + 0.05, P(no) = 0.3; other tokens do not count
    logprobs = [("Yes", LN(0.6), [("Yes", LN(0.6)), ("No", LN(0.3)), (" yes", LN(0.05)),
                                  ("Maybe", LN(0.04))])]  # fmt: skip
    assert yes_probability(logprobs, last=False) == pytest.approx(0.65 / 0.95)


def test_the_sampled_token_counts_when_no_alternatives_came_back():
    assert yes_probability([("no", LN(0.7), [])], last=False) == 0.0
    assert yes_probability([("True", LN(0.7), [])], last=False) == 1.0


def test_the_judged_token_is_the_first_yes_or_no_unless_reasoning_where_it_is_the_last():
    logprobs = [
        ("<think>", 0.0, []), ("yes", LN(0.9), [("yes", LN(0.9)), ("no", LN(0.1))]),
        ("</", 0.0, []), ("think>", 0.0, []),
        ("Answer", 0.0, []), (":", 0.0, []),
        (" no", LN(0.8), [(" no", LN(0.8)), (" yes", LN(0.2))]),
    ]  # fmt: skip
    # only tokens after the last </think> are the answer, even when it is split over tokens
    assert answer_start([t for t, _, _ in logprobs]) == 4
    assert yes_probability(logprobs, last=True) == pytest.approx(0.2)
    assert yes_probability(logprobs, last=False) == pytest.approx(0.2)  # the answer's only one
    plain = [("Yes", LN(0.7), [("Yes", LN(0.7)), ("No", LN(0.3))]), (",", 0.0, []),
             ("no", LN(0.6), [("no", LN(0.6)), ("yes", LN(0.4))])]  # fmt: skip
    assert yes_probability(plain, last=False) == pytest.approx(0.7)
    assert yes_probability(plain, last=True) == pytest.approx(0.4)


def test_an_answer_that_writes_no_yes_or_no_is_read_where_one_was_offered():
    # "The answer is" (cut at 3 tokens): its first position offered No and Yes
    logprobs = [("The", LN(0.1), [("No", LN(0.4)), ("Yes", LN(0.1)), ("The", LN(0.1))]),
                (" answer", LN(0.9), [(" answer", LN(0.9))]), (" is", LN(0.8), [])]  # fmt: skip
    assert yes_probability(logprobs, last=False) == pytest.approx(0.2)


def test_an_answer_without_yes_or_no_has_no_probability():
    assert yes_probability([("Maybe", -0.1, [("Maybe", -0.1), ("Perhaps", -3.0)])], False) is None
    assert yes_probability([], False) is None
    # "yesterday" is not "yes"
    assert yes_probability([("yesterday", -0.1, [])], False) is None


@pytest.mark.parametrize(
    ("text", "last", "grade"),
    [
        ("2", False, 2),
        ("Grade: 3", False, 3),
        ("<think>maybe 1, maybe 0</think>Grade: 2", True, 2),
        ("1 ... on reflection 3", True, 3),
        ("1 ... on reflection 3", False, 1),
        ("12 of 30 words; grade 0", False, 0),  # 12 and 30 are not grades
        ("4", False, None),
        ("relevant", False, None),
    ],
)
def test_grades_are_read_from_the_answer(text, last, grade):
    assert parse_grade(text, last) == grade


def test_yes_no_are_read_from_the_answer_text():
    assert parse_yes_no("Yes.", False) is True
    assert parse_yes_no("<think>yes?</think> Answer: false", True) is False
    assert parse_yes_no("It depends.", False) is None


# --- the stage with a scripted model -----------------------------------------------------

CORPUS = {"d1": "alpha " * 400, "d2": "beta passage", "d3": "gamma passage", "d4": "delta"}
RANKING = {"d1": 4.0, "d2": 3.0, "d3": 2.0, "d4": 1.0}
P_YES = {"alpha": 0.2, "beta": 0.9, "gamma": 0.6}


def passage_of(messages):
    return messages[-1]["content"].split("Passage: ", 1)[1].split()[0]


def with_logprobs(messages, params):
    p = P_YES[passage_of(messages)]
    token = "yes" if p >= 0.5 else "no"
    return scripted.Reply(token, [(token, LN(max(p, 1 - p)), [("yes", LN(p)), ("no", LN(1 - p))])])


def run_stage(tmp_path, respond, options=None, ranking=RANKING):
    seen: list[tuple[list[dict], dict]] = []

    def record(messages, params):
        seen.append((messages, params))
        return respond(messages, params)

    provider = scripted.install(record)
    ctx = StageContext(
        corpus=CORPUS, task="toy", options={**DEFAULTS, "depth": 3, **(options or {})},
        llm=LLM(model="scripted/x", cache_dir=tmp_path / "cache"), prompts=PromptBook(task="toy"),
    )  # fmt: skip
    result = asyncio.run(build_pointwise(ctx).rerank("q1", "which passage?", ranking))
    return result, seen, provider


def test_logprobs_order_the_top_depth_and_the_rest_keeps_its_place(tmp_path):
    result, seen, provider = run_stage(tmp_path, with_logprobs)
    assert provider.calls == 3  # depth 3: d4 is not judged
    assert list(result["ranking"]) == ["d2", "d3", "d1", "d4"]
    assert list(result["ranking"].values()) == [4.0, 3.0, 2.0, 1.0]
    steps = result["steps"]
    assert [(s["doc_id"], s["rank"], s["judged_by"]) for s in steps] == [
        ("d1", 1, "logprobs"), ("d2", 2, "logprobs"), ("d3", 3, "logprobs")
    ]  # fmt: skip
    assert [s["score"] for s in steps] == [pytest.approx(0.2), pytest.approx(0.9),
                                          pytest.approx(0.6)]  # fmt: skip
    messages, params = seen[0]
    assert params["logprobs"] is True and params["top_logprobs"] == 20
    assert params["max_tokens"] == 8  # answer_tokens: no reasoning asked for
    assert 'Answer with only "yes" or "no"' in messages[-1]["content"]
    # passages are cut to doc_words
    assert messages[-1]["content"].count("alpha") == DEFAULTS["doc_words"]
    assert steps[0]["usage"]["calls"] == 1 and steps[0]["cached"] is False


def test_judgements_that_agree_to_6_decimals_are_ordered_by_their_full_scores(tmp_path):
    """Scores are not rounded before the sort: 0.9999991 and 0.9999994 both round to
    0.999999, which would leave the first-stage order; unrounded, the surer one leads."""
    sure = {"alpha": 0.9999991, "beta": 0.9999994, "gamma": 0.6}

    def respond(messages, params):
        p = sure[passage_of(messages)]
        return scripted.Reply("yes", [("yes", LN(p), [("yes", LN(p)), ("no", LN(1 - p))])])

    result, _, _ = run_stage(tmp_path, respond)
    assert list(result["ranking"]) == ["d2", "d1", "d3", "d4"]
    assert result["steps"][1]["score"] > result["steps"][0]["score"]


def test_without_logprobs_auto_falls_back_to_a_graded_judgement_once(tmp_path):
    grades = {"alpha": "1", "beta": "3", "gamma": "Grade: 2"}

    def text_only(messages, params):
        content = messages[-1]["content"]
        return "yes" if "0, 1, 2 or 3" not in content else grades[passage_of(messages)]

    result, seen, provider = run_stage(tmp_path, text_only)
    # the first passage is asked for logprobs, gets none, and is graded; the rest only graded
    assert provider.calls == 4
    assert [p.get("logprobs") for _, p in seen] == [True, None, None, None]
    assert list(result["ranking"])[:3] == ["d2", "d3", "d1"]
    assert [s["judged_by"] for s in result["steps"]] == ["grade"] * 3
    assert [s["score"] for s in result["steps"]] == [pytest.approx(1 / 3), 1.0,
                                                     pytest.approx(2 / 3)]  # fmt: skip


def test_judge_logprobs_refuses_a_provider_without_them(tmp_path):
    with pytest.raises(RuntimeError, match="returned no logprobs; use judge=grade"):
        run_stage(tmp_path, lambda m, p: "yes", {"judge": "logprobs"})


def test_judge_grade_never_asks_for_logprobs(tmp_path):
    result, seen, _ = run_stage(tmp_path, lambda m, p: "2", {"judge": "grade"})
    assert all("logprobs" not in p for _, p in seen) and len(seen) == 3
    assert [s["score"] for s in result["steps"]] == [pytest.approx(2 / 3)] * 3


def test_reasoning_first_reads_the_last_judgement_after_think(tmp_path):
    def reasoner(messages, params):
        assert "First reason step by step" in messages[-1]["content"]
        verdict = "yes" if passage_of(messages) == "gamma" else "no"
        return f"<think>yes or no? I said no before.</think>It fits... Answer: {verdict}"

    result, seen, _ = run_stage(tmp_path, reasoner, {"reason": True, "judge": "grade"})
    assert "max_tokens" not in seen[0][1]  # the run's --max-tokens, room to reason
    # judge=grade with reason: the reason-grade prompt; its reply has no grade digit
    assert all(s["note"] == NO_JUDGEMENT for s in result["steps"])

    result, _, _ = run_stage(tmp_path / "b", reasoner, {"reason": True, "judge": "auto"})
    # no logprobs from this provider: graded, and "Answer: yes" holds no grade either
    assert list(result["ranking"]) == ["d1", "d2", "d3", "d4"]  # all 0: previous order kept

    def reasoner_lp(messages, params):
        text = reasoner(messages, params)
        *thought, verdict = text.split()
        p = 0.9 if verdict == "yes" else 0.1
        tokens = [(w + " ", 0.0, []) for w in thought]
        judged = (verdict, LN(p), [("yes", LN(p)), ("no", LN(1 - p))])
        return scripted.Reply(text, [*tokens, judged])

    result, _, _ = run_stage(tmp_path / "c", reasoner_lp, {"reason": True})
    assert list(result["ranking"])[0] == "d3"
    assert [s["judged_by"] for s in result["steps"]] == ["logprobs"] * 3


def test_an_unjudged_passage_scores_zero_with_a_note(tmp_path):
    result, _, _ = run_stage(tmp_path, lambda m, p: scripted.Reply("Maybe", [("Maybe", -0.1, [])]))
    assert {s["note"] for s in result["steps"]} == {NO_JUDGEMENT}
    assert list(result["ranking"]) == list(RANKING)  # every score 0: ties keep their order


def test_logprobs_are_cached_with_the_reply(tmp_path):
    first, _, provider = run_stage(tmp_path, with_logprobs)
    again, _, provider = run_stage(tmp_path, with_logprobs)  # the same cache folder
    assert provider.calls == 0
    assert all(s["cached"] for s in again["steps"])
    assert [s["score"] for s in again["steps"]] == [s["score"] for s in first["steps"]]


def test_bad_options_are_refused():
    from agents.config.run_config import ConfigError
    from agents.config.stages import parse_stage

    for spec in ("llm-pointwise,judge=maybe", "llm-pointwise,top_logprobs=21",
                 "llm-pointwise,depth=0", "llm-pointwise,reason=perhaps"):  # fmt: skip
        with pytest.raises(ConfigError):
            parse_stage(spec)


# --- end to end --------------------------------------------------------------------------


def test_a_run_judges_each_passage_and_the_trace_shows_every_judgement(tmp_path, toy_dir, capsys):
    def respond(messages, params):
        relevant = "Metformin" in messages[-1]["content"]
        p = 0.9 if relevant else 0.2
        return scripted.Reply("yes", [("yes", LN(p), [("yes", LN(p)), ("no", LN(1 - p))])])

    provider = scripted.install(respond)

    def cli(name):
        return main([
            "--agent", "none", "--dataset", str(toy_dir), "--model", "scripted/x",
            "--rerank", "llm-pointwise,depth=5",
            "--runs-dir", str(tmp_path / "runs"), "--cache-dir", str(tmp_path / "cache"),
            "--run-name", name, "--quiet",
        ])  # fmt: skip

    assert cli("a") == 0
    run_dir = tmp_path / "runs" / "a"
    first = read_records(run_dir / "toy" / "queries.jsonl")
    staged = read_records(run_dir / "toy" / "rerank-1-llm-pointwise" / "queries.jsonl")
    assert provider.calls == sum(len(r["ranking"][:5]) for r in first.values())
    q1 = [d for d, _ in staged["q1"]["ranking"]]
    assert q1[0] == "d2"  # the Metformin passage
    assert staged["q1"]["usage"]["calls"] == len(staged["q1"]["steps"])
    capsys.readouterr()
    assert trace_main([str(run_dir), "q1"]) == 0
    shown = capsys.readouterr().out
    assert "stage rerank-1-llm-pointwise" in shown
    assert "document d2 [R1] (was rank" in shown and "score 0.9 from logprobs" in shown

    calls = provider.calls
    assert cli("b") == 0  # same cache: no call
    assert provider.calls == calls
    summary = json.loads((tmp_path / "runs" / "b" / "toy" / "metrics.json").read_text())
    assert summary["final_stage"] == "rerank-1-llm-pointwise"


def test_the_embedded_model_returns_logprobs_that_score_a_judgement(tmp_path):
    """Real llama.cpp logprobs: greedy picks the likeliest token, probabilities are proper."""
    llm = LLM(model="local/smollm2-135m", cache_dir=tmp_path / "cache")
    messages = [{"role": "user", "content": "Is Paris in France? Answer yes or no."}]
    completion = asyncio.run(
        llm.chat(messages, temperature=0, max_tokens=3, logprobs=True, top_logprobs=5)
    )
    assert completion.logprobs is not None
    assert "".join(t for t, _, _ in completion.logprobs) == completion.text
    for token, logprob, top in completion.logprobs:
        assert len(top) == 5
        assert top[0][0] == token and top[0][1] == pytest.approx(logprob)  # greedy
        assert [lp for _, lp in top] == sorted((lp for _, lp in top), reverse=True)
        assert 0.0 < sum(math.exp(lp) for _, lp in top) <= 1.0 + 1e-9
    again = asyncio.run(
        llm.chat(messages, temperature=0, max_tokens=3, logprobs=True, top_logprobs=5)
    )
    assert again.cached and again.logprobs == completion.logprobs
    plain = asyncio.run(llm.chat(messages, temperature=0, max_tokens=3))
    assert plain.logprobs is None and plain.text == completion.text
    llm.close()
