"""Every reply a rerank stage cannot use is one named outcome with its reason: counted, with
finite scores, no Python exception text in the record, and every call counted in the usage.

The bad replies come from a real HTTP server on 127.0.0.1 (raw bytes, null or impossible
logprobs, /tokenize answers of the wrong shape) or the scripted provider."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable, Iterator

import pytest

from agents.llm import LLM, scripted
from agents.llm.responses import Completion
from agents.llm.text import whole_reply
from agents.rerank import StageContext
from agents.rerank.listwise import DEFAULTS as LISTWISE_DEFAULTS
from agents.rerank.listwise import build_listwise
from agents.rerank.pointwise import DEFAULTS as POINTWISE_DEFAULTS
from agents.rerank.pointwise import build_pointwise
from agents.rerank.rank1 import DEFAULTS as RANK1_DEFAULTS
from agents.rerank.rank1 import build_rank1, read_true
from agents.rerank.reasonrank import DEFAULTS as REASONRANK_DEFAULTS
from agents.rerank.reasonrank import build_reasonrank
from eval.usage import Usage
from prompts import PromptBook
from tests.helpers import Answer, Server, chat

CORPUS = {"d1": "Paris is in France.", "d2": "Aspirin reduces fever.", "d3": "Rust is a language."}
RANKING = {"d1": 3.0, "d2": 2.0, "d3": 1.0}
EXCEPTION_TEXTS = ("Error", "Traceback", "object has no attribute", "invalid literal", "codec")


@pytest.fixture
def serve() -> Iterator[Callable[[Answer], Server]]:
    made: list[Server] = []

    def start(answer: Answer) -> Server:
        made.append(Server(answer))
        return made[-1]

    yield start
    for server in made:
        server.close()


def completion(text: str, token_logprob: float | None, top: dict) -> bytes:
    return json.dumps({
        "id": "cmpl", "object": "text_completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "text": text, "finish_reason": "length",
                     "logprobs": {"tokens": [text], "token_logprobs": [token_logprob],
                                  "top_logprobs": [top], "text_offset": [0]}}],
        "usage": {"prompt_tokens": 50, "completion_tokens": 1, "total_tokens": 51},
    }).encode()  # fmt: skip


def context(llm: LLM, defaults: dict, node: str, **options) -> StageContext:
    return StageContext(
        corpus=CORPUS, task="toy", options={**defaults, **options}, llm=llm,
        prompts=PromptBook(task="toy"), sampling={node: {"temperature": 0.0}},
    )  # fmt: skip


def rerank(build, ctx: StageContext) -> dict:
    return asyncio.run(build(ctx).rerank("q1", "what reduces fever?", RANKING))


def assert_clean(result: dict) -> None:
    """Finite scores, and no exception's text anywhere in the record."""
    text = json.dumps(result, allow_nan=True)
    for step in result["steps"]:
        score = step.get("score")
        assert score is None or math.isfinite(score), step
    assert all(math.isfinite(v) for v in result["ranking"].values())
    for marker in EXCEPTION_TEXTS:
        assert marker not in text, marker


def calls(result: dict) -> int:
    return sum(step["usage"]["calls"] for step in result["steps"])


# --- rank1 ------------------------------------------------------------------------------------

NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize(
    ("sampled", "top", "outcome", "score"),
    [
        ((" x", -0.1), [(" true", NAN), (" false", -1.0)], "bad-logprobs", None),
        ((" x", -0.1), [(" true", 5.0), (" false", -1.0)], "bad-logprobs", None),  # > 0
        ((" x", -0.1), [(" true", None), (" false", -1.0)], "bad-logprobs", None),
        ((" x", -0.1), [(" true", -INF), (" false", -INF)], "bad-logprobs", None),  # was 0/0
        ((" x", -0.1), [(" true", -1000.0), (" false", -1000.0)], "read", 0.5),  # underflow
        ((" x", -0.1), [(" false", -0.1)], "absent", None),
        # a null among the alternatives is the sampled token's own logprob when that is sent
        ((" true", -0.1), [(" true", None), (" false", -2.1)], "read", 1 / (1 + math.exp(-2))),
        ((" true", None), [(" true", None), (" false", -1.0)], "bad-logprobs", None),
    ],
)
def test_rank1_reads_impossible_logprobs_as_missing(sampled, top, outcome, score):
    got, how = read_true([(*sampled, top)])
    assert how == outcome
    assert got == (None if score is None else pytest.approx(score))


def rank1_server(serve, first_top: dict, forced_top: dict, tokenize: bytes, forced_lp=-0.2):
    def answer(path: str, body: dict) -> bytes:
        if path == "/tokenize":
            return tokenize
        if body["prompt"].endswith("</think>"):
            return completion(" true", forced_lp, forced_top)
        return completion("The passage", -0.1, first_top)

    return serve(answer)


GOOD_TOKENIZE = b'{"tokens": [7], "count": 1}'
GOOD_FORCED = {" true": math.log(0.8), " false": math.log(0.2)}


@pytest.mark.parametrize(
    ("tokenize", "why"),
    [
        (b"not json", "not JSON"),
        (b"[1, 2]", "a JSON list, not an object"),
        (b'{"tokens": ["x"]}', "'tokens' holds something other than token ids"),
        (b'{"ids": [1]}', "no 'tokens' list"),
        (b'{"tokens": [1]}\xff', "not UTF-8"),
    ],
)
def test_rank1_a_tokenize_answer_of_the_wrong_shape_is_one_named_reason(
    serve, tmp_path, tokenize, why
):
    server = rank1_server(serve, {" about": -0.1}, GOOD_FORCED, tokenize)
    llm = LLM("hosted_vllm/m", api_base=server.url, cache_dir=tmp_path / "cache")
    result = rerank(build_rank1, context(llm, RANK1_DEFAULTS, "judge"))
    assert_clean(result)
    outcomes = {s["outcome"] for s in result["steps"]}
    assert outcomes == {"forced-unrestricted"}
    forced_by = result["steps"][0]["forced_by"]
    assert forced_by.startswith("none: the server's tokenize answer") and why in forced_by
    assert [s["score"] for s in result["steps"]] == [pytest.approx(0.8)] * 3


@pytest.mark.parametrize(
    ("forced_top", "forced_lp"),
    [
        ({" true": NAN, " false": -1.0}, NAN),  # not a number
        ({" true": 3.0, " false": -1.0}, 3.0),  # above 0
        ({" true": -INF, " false": -INF}, -INF),  # no probability to share
    ],
)
def test_rank1_a_forced_token_with_bad_logprobs_is_named_and_scored_one_half(
    serve, tmp_path, forced_top, forced_lp
):
    server = rank1_server(serve, {" about": -0.1}, forced_top, GOOD_TOKENIZE, forced_lp)
    llm = LLM("hosted_vllm/m", api_base=server.url, cache_dir=tmp_path / "cache")
    result = rerank(build_rank1, context(llm, RANK1_DEFAULTS, "judge"))
    assert_clean(result)
    assert {s["outcome"] for s in result["steps"]} == {"forced-bad-logprobs"}
    assert {s["score"] for s in result["steps"]} == {0.5}


def test_rank1_a_null_logprob_litellm_cannot_read_is_named_and_not_retried(serve, tmp_path):
    forced_null = {" true": None, " false": -1.0}
    server = rank1_server(serve, {" about": -0.1}, forced_null, GOOD_TOKENIZE)
    llm = LLM("hosted_vllm/m", api_base=server.url, cache_dir=tmp_path / "cache", max_retries=6)
    result = rerank(build_rank1, context(llm, RANK1_DEFAULTS, "judge"))
    assert_clean(result)
    assert {s["outcome"] for s in result["steps"]} == {"forced-unusable-reply"}
    assert "does not fit the OpenAI schema" in result["steps"][0]["reason"]
    assert {s["score"] for s in result["steps"]} == {0.5}
    assert server.requests["/v1/completions"] == 6  # each passage: its reply, one forced try
    assert "/v1/chat/completions" not in server.requests


def test_rank1_counts_every_call_its_server_answered(serve, tmp_path):
    server = rank1_server(serve, {" about": -0.1}, GOOD_FORCED, GOOD_TOKENIZE)
    llm = LLM("hosted_vllm/m", api_base=server.url, cache_dir=tmp_path / "cache")
    result = rerank(build_rank1, context(llm, RANK1_DEFAULTS, "judge"))
    answered = server.requests["/v1/completions"]
    assert answered == 6  # each of 3 passages: the reply and its forced token
    assert calls(result) == answered == llm.usage.calls
    tokens = sum(s["usage"]["prompt_tokens"] for s in result["steps"])
    assert tokens == 50 * answered == llm.usage.prompt_tokens


def test_rank1_a_reply_that_is_not_utf8_is_named_and_not_retried(serve, tmp_path):
    server = serve(lambda path, body: completion("x", -0.1, {}).replace(b'"x"', b'"\xff"'))
    llm = LLM("hosted_vllm/m", api_base=server.url, cache_dir=tmp_path / "cache")
    result = rerank(build_rank1, context(llm, RANK1_DEFAULTS, "judge"))
    assert server.requests["/v1/completions"] == 3  # one attempt per passage: no retries
    assert {s["outcome"] for s in result["steps"]} == {"unusable-reply"}
    assert "not UTF-8" in result["steps"][0]["reason"]
    assert {s["score"] for s in result["steps"]} == {0.5} and calls(result) == 3


class SplitReplies:
    """A served model whose server split each reply's thinking off, as a reasoning parser
    does: ``reply(prompt)`` gives (reasoning, text, logprobs) for a raw prompt."""

    model, server, api_base, cache_dir = "hosted_vllm/m", "vllm", None, None

    def __init__(self, reply: Callable[[str], tuple[str | None, str, list]]) -> None:
        self.reply = reply
        self.prompts: list[str] = []

    async def complete(self, prompt: str, **params) -> Completion:
        self.prompts.append(prompt)
        reasoning, text, logprobs = self.reply(prompt)
        return Completion(text=text, finish_reason="stop", usage=Usage(calls=1), cached=False,
                          model=self.model, logprobs=logprobs, reasoning=reasoning)  # fmt: skip


def original_forced_prompt(prompt: str, text: str) -> str:
    """rank1.py L112-124 ``_fix_incomplete_responses``, transcribed for one reply."""
    text = text.rstrip()
    if not text.endswith((".", "!", "?")):
        last_punct = max(text.rfind("."), text.rfind("!"), text.rfind("?"))
        if last_punct != -1:
            text = text[: last_punct + 1]
    return f"{prompt}\n{text.strip()}\n</think>"


def test_rank1_reads_and_forces_the_reply_as_the_model_wrote_it(tmp_path):
    """A reasoning parser moves what d2's reply wrote before its ``</think>`` into
    reasoning_content; the reply never said " true" or " false" after it, so it is forced
    (rank1.py L208-212), from vLLM's whole text as Rank1 gets it (L198, skip_special_tokens
    False): "It treats fever." is the last sentence, not "maybe yes"."""
    thought, after = "It treats fever. Maybe", "\n\nmaybe yes"

    def reply(prompt: str) -> tuple[str | None, str, list]:
        if prompt.endswith("</think>"):  # the forced token: true when the reasoning was kept
            p = 0.9 if prompt.endswith("It treats fever.\n</think>") else 0.1
            top = [(" true", math.log(p)), (" false", math.log(1 - p))]
            return None, " true", [(" true", math.log(p), top)]
        if "Aspirin" in prompt:
            return thought, after, [(" yes", -0.1, [(" yes", -0.1)])]
        top = [(" true", math.log(0.5)), (" false", math.log(0.5))]
        return None, "Unrelated. </think> true", [(" true", math.log(0.5), top)]

    llm = SplitReplies(reply)
    ctx = context(llm, RANK1_DEFAULTS, "judge", force="none")
    result = rerank(build_rank1, ctx)
    d2 = next(s for s in result["steps"] if s["doc_id"] == "d2")
    whole = f"{thought}</think>{after}"
    assert d2["output"] == whole  # the trace keeps the reply whole
    assert d2["forced"]["prompt"] == original_forced_prompt(d2["prompt"], whole)
    assert d2["outcome"] == "forced" and d2["score"] == pytest.approx(0.9)
    assert list(result["ranking"])[0] == "d2"  # from the text alone it would score 0.1, last


# --- reasonrank -------------------------------------------------------------------------------


def test_reasonrank_a_reply_that_is_not_utf8_is_an_outcome_not_a_retried_error(serve, tmp_path):
    server = serve(lambda path, body: chat("[2] > [1] X").replace(b" X", b" \xff\xfe"))
    llm = LLM("openai/m", api_base=server.url, cache_dir=tmp_path / "cache", max_retries=6)
    result = rerank(build_reasonrank, context(llm, REASONRANK_DEFAULTS, "window"))
    assert server.requests["/v1/chat/completions"] == 1  # one window, one attempt
    step = result["steps"][0]
    assert step["outcome"] == "unusable-reply"
    assert "the server's reply is not UTF-8 (byte 0xff" in step["reason"]
    assert list(result["ranking"]) == ["d1", "d2", "d3"]  # the window kept its order
    assert_clean(result)


@pytest.mark.parametrize(
    ("content", "outcome", "order"),
    [
        ("<think>[3] > [1] > [2]", "no-answer", ["d3", "d1", "d2"]),  # never closed
        ("<think>so [3] > [1] > [2]</think>", "no-answer", ["d3", "d1", "d2"]),
        ("<think>a</think><answer>[2] > [3] > [1]</answer>", "answer", ["d2", "d3", "d1"]),
    ],
)
def test_reasonrank_keeps_the_whole_reply_with_its_reasoning(serve, tmp_path, content, outcome,
                                                             order):  # fmt: skip
    server = serve(lambda path, body: chat(content))
    llm = LLM("openai/m", api_base=server.url, cache_dir=tmp_path / "cache")
    result = rerank(build_reasonrank, context(llm, REASONRANK_DEFAULTS, "window"))
    step = result["steps"][0]
    assert step["output"] == content  # as received, though litellm splits the <think> off
    assert step["outcome"] == outcome and list(result["ranking"]) == order


# --- pointwise --------------------------------------------------------------------------------


def test_pointwise_keeps_the_whole_reply_and_reads_past_its_thinking(serve, tmp_path):
    server = serve(lambda path, body: chat("<think>grade 3? no: 1</think>2"))
    llm = LLM("openai/m", api_base=server.url, cache_dir=tmp_path / "cache")
    result = rerank(build_pointwise, context(llm, POINTWISE_DEFAULTS, "judge", judge="grade"))
    step = result["steps"][0]
    assert step["output"] == "<think>grade 3? no: 1</think>2"  # as received
    assert step["reply"] == "2" and step["score"] == pytest.approx(2 / 3)  # read past it


def test_pointwise_a_null_yes_logprob_is_missing_not_certainty(serve, tmp_path):
    lp = [{"token": "Yes", "logprob": None, "top_logprobs": [
        {"token": "Yes", "logprob": None}, {"token": "No", "logprob": -0.1}]}]  # fmt: skip
    server = serve(lambda path, body: chat("Yes", lp))
    llm = LLM("openai/m", api_base=server.url, cache_dir=tmp_path / "cache")
    result = rerank(build_pointwise, context(llm, POINTWISE_DEFAULTS, "judge"))
    step = result["steps"][0]
    assert step["outcome"] == "bad-logprobs" and "missing or impossible" in step["note"]
    assert step["score"] == 1.0  # read from the text ("Yes"), not from a null as p = 1
    assert step["judged_by"] == "text"
    assert_clean(result)


def test_pointwise_all_minus_infinity_is_named(tmp_path):
    top = [(" yes", -INF), (" no", -INF)]
    scripted.install(lambda messages, params: scripted.Reply("maybe", [(" yes", -INF, top)]))
    llm = LLM("scripted/x", cache_dir=tmp_path / "cache")
    result = rerank(build_pointwise, context(llm, POINTWISE_DEFAULTS, "judge"))
    assert {s["outcome"] for s in result["steps"]} == {"bad-logprobs"}
    assert {s["score"] for s in result["steps"]} == {None}  # scored 0 among ties
    assert {s["judged_by"] for s in result["steps"]} == {None}  # nothing was read
    assert_clean(result)


def test_pointwise_counts_the_call_answered_without_logprobs(serve, tmp_path):
    server = serve(lambda path, body: chat("2"))  # no logprobs: the grade path
    llm = LLM("openai/m", api_base=server.url, cache_dir=tmp_path / "cache")
    result = rerank(build_pointwise, context(llm, POINTWISE_DEFAULTS, "judge"))
    assert server.requests["/v1/chat/completions"] == 4  # the logprobs ask, then 3 grades
    assert calls(result) == 4 == llm.usage.calls
    assert [s["outcome"] for s in result["steps"]] == ["grade"] * 3


def test_pointwise_an_unreadable_reply_is_named(serve, tmp_path):
    server = serve(lambda path, body: b"<html>busy</html>")
    llm = LLM("openai/m", api_base=server.url, cache_dir=tmp_path / "cache", max_retries=6)
    result = rerank(build_pointwise, context(llm, POINTWISE_DEFAULTS, "judge"))
    assert server.requests["/v1/chat/completions"] == 3  # no retries of the same bytes
    assert {s["outcome"] for s in result["steps"]} == {"unusable-reply"}
    assert "not JSON" in result["steps"][0]["reason"]
    assert_clean(result)


# --- listwise and insertrank ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "outcome"),
    [("[2] > [3] > [1]", "permutation"), ("[2] > [2] > [9]", "repaired"),
     ("no idea", "no-permutation")],
)  # fmt: skip
def test_listwise_names_how_each_window_was_read(tmp_path, reply, outcome):
    scripted.install(lambda messages, params: reply)
    llm = LLM("scripted/x", cache_dir=tmp_path / "cache")
    result = rerank(build_listwise, context(llm, LISTWISE_DEFAULTS, "window"))
    assert [s["outcome"] for s in result["steps"]] == [outcome]


def test_listwise_an_unreadable_reply_keeps_the_window(serve, tmp_path):
    server = serve(lambda path, body: chat("[3] > [1] X").replace(b" X", b" \xff"))
    llm = LLM("openai/m", api_base=server.url, cache_dir=tmp_path / "cache", max_retries=6)
    result = rerank(build_listwise, context(llm, LISTWISE_DEFAULTS, "window"))
    assert server.requests["/v1/chat/completions"] == 1
    assert [s["outcome"] for s in result["steps"]] == ["unusable-reply"]
    assert list(result["ranking"]) == ["d1", "d2", "d3"]
    assert_clean(result)


@pytest.mark.parametrize(
    ("reasoning", "text", "opened", "finish", "stop", "written"),
    [
        (None, "answer", False, "stop", None, "answer"),
        ("thought", " answer", False, "stop", None, "<think>thought</think> answer"),
        # closed, nothing after it: litellm splits "<think>thought</think>" so
        ("thought", "", False, "stop", None, "<think>thought</think>"),
        # no text, ended by a stop string or the budget: stopped while thinking, still open
        ("thought <search>q", "", False, "stop", "</search>", "<think>thought <search>q"),
        ("thought", "", False, "length", None, "<think>thought"),
        # the prompt opened <think> (Rank1's): the model wrote only its closing tag
        ("thought", " true", True, "stop", None, "thought</think> true"),
        ("thought", "", True, "length", None, "thought"),
    ],
)
def test_a_reply_is_rebuilt_as_the_model_wrote_it(reasoning, text, opened, finish, stop, written):
    completion = Completion(text=text, finish_reason=finish, usage=Usage(calls=1), cached=False,
                            model="m", stop_reason=stop, reasoning=reasoning)  # fmt: skip
    assert whole_reply(completion, opened=opened) == written
