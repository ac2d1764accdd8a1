"""The `rank1` stage against Rank1's own code (github.com/orionw/rank1 at 30585c2, rank1.py):
its prompt, its score, its forced completion; scripted and embedded models. Its forced path
through a real llama.cpp server is in tests/agents/llm/test_llamacpp_server.py."""

from __future__ import annotations

import asyncio
import json
import math

import pytest

from agents.commands.run import main
from agents.commands.trace import main as trace_main
from agents.llm import LLM, scripted
from agents.llm.sampling import resolve
from agents.rerank import StageContext
from agents.rerank.rank1 import (
    DEFAULTS,
    STOP,
    build_rank1,
    cut_to_sentence,
    forced_prompt,
    true_probability,
)
from eval.records import read_records
from prompts import PromptBook
from tests import tiny_models
from tests.helpers import send_body

LN = math.log


def original_prompt(query: str, doc_content: str, prompt: str | None = None) -> str:
    """rank1.py L241-247 ``return_prompt``, transcribed."""
    query = prompt.replace("FILL_QUERY_HERE", query) if prompt else query
    return (
        "Determine if the following passage is relevant to the query. "
        "Answer only with 'true' or 'false'.\n"
        f"Query: {query}\n"
        f"Passage: {doc_content}\n"
        "<think>"
    )


# --- the score and the forced prompt ------------------------------------------------------


def test_the_score_is_p_true_over_p_true_and_false_at_the_last_token():
    # rank1.py L214-219: exp(true) / (exp(true) + exp(false)) from the final token's top 20
    last = (" true", LN(0.6), [(" true", LN(0.6)), (" false", LN(0.2)), (" maybe", LN(0.1))])
    assert true_probability([("x", -1.0, []), last]) == pytest.approx(0.75)


def test_the_sampled_token_counts_among_the_alternatives():
    last = (" false", LN(0.3), [(" true", LN(0.5))])
    assert true_probability([last]) == pytest.approx(0.5 / 0.8)


@pytest.mark.parametrize(
    "logprobs",
    [
        None,
        [],
        # L208-212: either token missing from the final position -> the forced path
        [(" true", LN(0.9), [(" true", LN(0.9)), (" True", LN(0.05))])],
        # a judgement earlier in the reply does not count: only the last position is read
        [(" false", LN(0.5), [(" true", LN(0.4)), (" false", LN(0.5))]), (".", -0.1, [])],
        # " true" is matched as the token Rank1's tokenizer gives, with its space
        [("true", LN(0.7), [("true", LN(0.7)), ("false", LN(0.3))])],
    ],
)
def test_a_last_position_without_both_tokens_has_no_score(logprobs):
    assert true_probability(logprobs) is None


@pytest.mark.parametrize(
    ("reply", "cut"),
    [
        # rank1.py L113-119: cut after the last . ! or ?, stripped
        ("The passage is about fever. It says aspirin", "The passage is about fever."),
        ("  Relevant? Probably! But the dose  ", "Relevant? Probably!"),
        ("Ends well.   ", "Ends well."),
        ("no sentence end at all", "no sentence end at all"),
        ("", ""),
    ],
)
def test_an_unfinished_reply_is_cut_to_its_last_sentence(reply, cut):
    assert cut_to_sentence(reply) == cut


def test_the_forced_prompt_closes_the_thinking():
    # rank1.py L121-124
    assert forced_prompt("P<think>", "A. B") == "P<think>\nA.\n</think>"


def test_the_prompt_is_rank1s_return_prompt():
    book = PromptBook(task="Biology")
    ctx = StageContext(corpus={}, task="Biology", options=DEFAULTS, prompts=book)
    stage = build_rank1(ctx)
    query, passage = "Why do cells divide?\nDetails: mitosis", "Cells divide to grow.\n\nMore."
    # prompts.py has no R2MED task: get_prompt returns None, the query goes in as it is (L242)
    assert stage.render(query, passage) == original_prompt(query, passage)
    assert book.used["rank1-query/default"]


def test_both_presets_send_rank1s_sampling():
    model = "hosted_vllm/jhu-clsp/rank1-7b"
    sent = resolve("default", "rank1", "judge", model, "vllm").params
    assert sent == {"temperature": 0.0, "max_tokens": 8192}
    # rank1.py L86-92: SamplingParams(temperature=0, max_tokens=8192, ...), the rest vLLM's
    # defaults, sent: a vLLM server would otherwise apply the checkpoint's
    # generation_config.json to a request that names none (repetition_penalty, top_k, top_p)
    assert resolve("paper", "rank1", "judge", model, "vllm").params == {
        "temperature": 0.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0,
        "max_tokens": 8192,
    }  # fmt: skip
    # the thinking budget is the stage's option (L35 max_output_tokens)
    small = resolve("paper", "rank1", "judge", model, "vllm", options={"max_tokens": 32})
    assert small.params["max_tokens"] == 32 and small.sources["max_tokens"] == "option max_tokens"


def test_bad_options_are_refused():
    from agents.config.run_config import ConfigError
    from agents.config.stages import parse_stage

    for spec in ("rank1,depth=0", "rank1,force=maybe", "rank1,max_tokens=0", "rank1,ties=random"):
        with pytest.raises(ConfigError):
            parse_stage(spec)


# --- a whole rerank, scripted ---------------------------------------------------------------

CORPUS = {"d1": "Paris is in France.", "d2": "Aspirin reduces fever.", "d3": "Rust is a language."}
RANKING = {"d1": 3.0, "d2": 2.0, "d3": 1.0}


def judged(p_true: float, text: str = "It is. </think> true") -> scripted.Reply:
    top = [(" true", LN(p_true)), (" false", LN(1 - p_true))]
    return scripted.Reply(text, [("It", -0.1, []), (" true", LN(p_true), top)])


def run_stage(tmp_path, respond, options=None):
    seen: list[tuple[list[dict], dict]] = []

    def record(messages, params):
        seen.append((messages, params))
        return respond(messages, params)

    provider = scripted.install(record)
    ctx = StageContext(
        corpus=CORPUS, task="toy", options={**DEFAULTS, **(options or {})},
        llm=LLM(model="scripted/x", cache_dir=tmp_path / "cache"), prompts=PromptBook(task="toy"),
        sampling={"judge": {"temperature": 0.0, "max_tokens": 8192}},
    )  # fmt: skip
    result = asyncio.run(build_rank1(ctx).rerank("q1", "what reduces fever?", RANKING))
    return result, seen, provider


def test_each_passage_is_one_raw_completion_scored_at_its_last_token(tmp_path):
    def respond(messages, params):
        return judged(0.9 if "Aspirin" in messages[0]["content"] else 0.2)

    result, seen, provider = run_stage(tmp_path, respond)
    assert provider.calls == 3
    assert list(result["ranking"]) == ["d2", "d3", "d1"]  # d1 and d3 tie: doc id descending
    messages, params = seen[0]
    assert params["raw_prompt"] is True and params["stop"] == STOP
    assert params["logprobs"] is True and params["top_logprobs"] == 20
    assert messages[0]["content"] == original_prompt("what reduces fever?", CORPUS["d1"])
    step = result["steps"][1]
    assert step["doc_id"] == "d2" and step["outcome"] == "closed"
    assert step["score"] == pytest.approx(0.9) and step["output"] == "It is. </think> true"
    assert step["prompt"] == original_prompt("what reduces fever?", CORPUS["d2"])


@pytest.fixture
def hub_tokenizer(tmp_path):
    """A tokenizer folder in a hub checkpoint's layout, and the ids Rank1 takes from it."""
    from transformers import AutoTokenizer

    folder = tmp_path / "tokenizer"
    tiny_models.llama_tokenizer(folder, add_eos_token=False, pad_token=None)
    tok = AutoTokenizer.from_pretrained(str(folder))
    # rank1.py L73-74: the first id of " true" and of " false", no special tokens
    return str(folder), [tok(w, add_special_tokens=False).input_ids[0] for w in (" true", " false")]


def test_an_unclosed_reply_is_forced_to_one_restricted_token(tmp_path, hub_tokenizer):
    def respond(messages, params):
        if messages[0]["content"].endswith("</think>"):  # the forced call
            return judged(0.7 if "Aspirin" in messages[0]["content"] else 0.4, " true")
        return scripted.Reply("The passage mentions fever. It seems", [("seems", -0.5, [])])

    folder, ids = hub_tokenizer
    result, seen, provider = run_stage(tmp_path, respond, {"tokenizer": folder})
    assert provider.calls == 6  # each passage: its reply, then the forced token
    forced_messages, forced_params = seen[1]
    opened = original_prompt("what reduces fever?", CORPUS["d1"])
    assert forced_messages[0]["content"] == opened + "\nThe passage mentions fever.\n</think>"
    assert forced_params["max_tokens"] == 1 and forced_params["temperature"] == 0.0
    assert forced_params["extra_body"]["allowed_token_ids"] == ids
    step = result["steps"][1]
    assert step["outcome"] == "forced" and step["score"] == pytest.approx(0.7)
    assert step["forced_by"].startswith("allowed_token_ids")
    assert step["forced"]["prompt"].endswith("\n</think>")
    assert list(result["ranking"]) == ["d2", "d3", "d1"]  # d1 and d3 tie: doc id descending


def test_a_forced_token_without_both_alternatives_scores_one_half(tmp_path):
    def respond(messages, params):
        if messages[0]["content"].endswith("</think>"):
            return scripted.Reply(" true", [(" true", -0.01, [(" true", -0.01)])])
        return "no judgement here"

    result, _, _ = run_stage(tmp_path, respond)
    assert {s["outcome"] for s in result["steps"]} == {"forced-unread"}
    assert {s["score"] for s in result["steps"]} == {0.5}  # rank1.py L146
    # equal scores in pytrec_eval's order (doc id descending), as MTEB hands Rank1's scores to
    # it (run_mteb.py L82-91); ties=previous keeps the first stage's order among them
    assert list(result["ranking"]) == ["d3", "d2", "d1"]
    result, _, _ = run_stage(tmp_path / "previous", respond, {"ties": "previous"})
    assert list(result["ranking"]) == list(RANKING)


def test_logit_bias_and_no_restriction_are_sent_as_asked(tmp_path, hub_tokenizer):
    def respond(messages, params):
        if messages[0]["content"].endswith("</think>"):
            return judged(0.6, " true")
        return "unfinished"

    folder, ids = hub_tokenizer
    _, seen, _ = run_stage(tmp_path / "a", respond, {"force": "logit_bias", "tokenizer": folder})
    assert seen[1][1]["logit_bias"] == {str(i): 100.0 for i in ids}
    result, seen, _ = run_stage(tmp_path / "b", respond, {"force": "none", "tokenizer": folder})
    assert "logit_bias" not in seen[1][1] and "extra_body" not in seen[1][1]
    assert result["steps"][0]["forced_by"] == "none: asked for no restriction"
    # no tokenizer and a server that tokenizes nothing: unrestricted, and the step says why
    result, seen, _ = run_stage(tmp_path / "c", respond)
    assert "extra_body" not in seen[1][1]
    assert result["steps"][0]["forced_by"].startswith("none: no tokenizer gives the ids")


def test_a_run_counts_each_outcome_and_a_rerun_calls_nothing(tmp_path, toy_dir, capsys):
    def respond(messages, params):
        prompt = messages[0]["content"]
        if prompt.endswith("</think>"):
            return judged(0.3, " false")
        if "Metformin" in prompt:
            return judged(0.95)
        return "thinking without end"

    provider = scripted.install(respond)

    def cli(name):
        return main([
            "--agent", "none", "--dataset", str(toy_dir), "--model", "scripted/x",
            "--rerank", "rank1,depth=5", "--runs-dir", str(tmp_path / "runs"),
            "--cache-dir", str(tmp_path / "cache"), "--run-name", name, "--quiet",
        ])  # fmt: skip

    assert cli("a") == 0
    run_dir = tmp_path / "runs" / "a" / "toy"
    staged = read_records(run_dir / "rerank-1-rank1" / "queries.jsonl")
    steps = [s for r in staged.values() for s in r["steps"]]
    closed = sum(s["outcome"] == "closed" for s in steps)
    assert closed >= 1 and provider.calls == len(steps) + (len(steps) - closed)
    assert [d for d, _ in staged["q1"]["ranking"]][0] == "d2"  # the Metformin passage
    outcomes = json.loads((run_dir / "metrics.json").read_text())["outcomes"]
    assert outcomes["rerank-1-rank1"] == {"closed": closed, "forced": len(steps) - closed}
    capsys.readouterr()
    assert trace_main([str(tmp_path / "runs" / "a"), "q1"]) == 0
    shown = capsys.readouterr().out
    assert "input (raw prompt):" in shown and "<think>" in shown
    assert "document d2 [R1] (was rank" in shown and "read: closed" in shown
    assert "read: forced" in shown and "forced (none: no tokenizer gives" in shown
    calls = provider.calls
    assert cli("b") == 0
    assert provider.calls == calls


# --- the embedded model -------------------------------------------------------------------


@pytest.mark.slow
def test_the_embedded_model_forces_with_its_own_token_ids(tmp_path):
    """Real llama.cpp: a small model never closes </think> in 16 tokens, so every passage is
    forced; the forced token is " true" or " false" and the two alternatives are all it has."""
    from agents.llm.embedded.pool import tokenizer

    ctx = StageContext(
        corpus=CORPUS, task="toy", options={**DEFAULTS, "depth": 2},
        llm=LLM(model="local/qwen2.5-coder-0.5b", cache_dir=tmp_path / "cache"),
        prompts=PromptBook(task="toy"), sampling={"judge": {"temperature": 0.0, "max_tokens": 16}},
    )  # fmt: skip
    result = asyncio.run(build_rank1(ctx).rerank("q1", "what reduces fever?", RANKING))
    tok = tokenizer("qwen2.5-coder-0.5b")
    ids = [tok.tokenize(" true")[0], tok.tokenize(" false")[0]]
    for step in result["steps"]:
        assert step["outcome"] == "forced" and step["forced_by"] == f"allowed_token_ids {ids}"
        assert step["forced"]["output"] in (" true", " false")
        assert 0.0 < step["score"] < 1.0
    again = asyncio.run(build_rank1(ctx).rerank("q1", "what reduces fever?", RANKING))
    assert again["ranking"] == result["ranking"]
    assert all(s["cached"] and s["forced"]["cached"] for s in again["steps"])


# --- the wire: what a vLLM server is sent -----------------------------------------------------


class FakeVLLM:
    """A vLLM-shaped server: /tokenize gives ids, /v1/completions answers and keeps each body.
    The first completion of a passage never closes </think>; the forced one answers " true"."""

    def __init__(self) -> None:
        self.bodies: list[dict] = []
        self.tokenized: list[dict] = []

    def answer(self, path: str, body: dict) -> dict:
        if path == "/tokenize":
            self.tokenized.append(body)
            return {"tokens": [101] if body["prompt"] == " true" else [202], "count": 1}
        self.bodies.append(body)
        forced = body["prompt"].endswith("</think>")
        text = " true" if forced else "The passage is about"
        top = {" true": math.log(0.8), " false": math.log(0.2)} if forced else {" about": -0.1}
        return {
            "id": "cmpl-1", "object": "text_completion", "created": 0, "model": "rank1",
            "choices": [{"index": 0, "text": text, "finish_reason": "length",
                         "logprobs": {"tokens": [text], "token_logprobs": [-0.2],
                                      "top_logprobs": [top], "text_offset": [0]}}],
            "usage": {"prompt_tokens": 50, "completion_tokens": 1, "total_tokens": 51},
        }  # fmt: skip


def test_a_vllm_server_gets_raw_prompts_and_allowed_token_ids_from_its_tokenizer(tmp_path):
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    fake = FakeVLLM()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet test output
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            reply = json.dumps(fake.answer(self.path, body)).encode()
            send_body(self, reply)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        llm = LLM("hosted_vllm/jhu-clsp/rank1-7b", cache_dir=tmp_path / "cache",
                  api_base=f"http://127.0.0.1:{httpd.server_address[1]}/v1")  # fmt: skip
        ctx = StageContext(
            corpus=CORPUS, task="toy", options={**DEFAULTS, "depth": 2}, llm=llm,
            prompts=PromptBook(task="toy"),
            sampling={"judge": {"temperature": 0.0, "max_tokens": 8192}},
        )  # fmt: skip
        result = asyncio.run(build_rank1(ctx).rerank("q1", "what reduces fever?", RANKING))
    finally:
        httpd.shutdown()
        httpd.server_close()
    # the ids of " true" and " false" come from the server's own tokenizer, without specials
    assert [b["prompt"] for b in fake.tokenized] == [" true", " false"]
    assert all(b["add_special_tokens"] is False for b in fake.tokenized)
    first, forced = fake.bodies[0], fake.bodies[1]
    # rank1.py L86-92: the raw prompt, temperature 0, 8,192 tokens, logprobs 20, its stops
    assert first["prompt"] == original_prompt("what reduces fever?", CORPUS["d1"])
    assert (first["temperature"], first["max_tokens"], first["logprobs"]) == (0.0, 8192, 20)
    assert first["stop"] == STOP and "messages" not in first
    # L126-133: one token among the two, greedy, logprobs 20
    assert forced["allowed_token_ids"] == [101, 202]
    assert (forced["max_tokens"], forced["temperature"], forced["logprobs"]) == (1, 0.0, 20)
    assert forced["prompt"].endswith("\nThe passage is about\n</think>")
    assert [s["score"] for s in result["steps"]] == [pytest.approx(0.8)] * 2
    assert {s["forced_by"] for s in result["steps"]} == {"allowed_token_ids [101, 202]"}


# --- scores at full precision: rank1.py L152-156, L215-219; run_mteb.py L82-91 ---------------


def original_score(true_logit: float, false_logit: float) -> float:
    """rank1.py L215-219 (and L152-156), transcribed: no rounding."""
    true_score = math.exp(true_logit)
    false_score = math.exp(false_logit)
    return true_score / (true_score + false_score)


# log-probabilities of " true" and " false" whose scores agree to 6 decimals, not after
CONFIDENT = {"d1": (-1e-6, -13.9), "d2": (-1e-6, -14.3), "d3": (LN(0.2), LN(0.8))}


def test_scores_that_agree_to_six_decimals_are_ordered_as_rank1s_are(tmp_path):
    import pytrec_eval

    from eval.evaluate import evaluate_run

    def respond(messages, params):
        doc = next(d for d, text in CORPUS.items() if text in messages[0]["content"])
        lp_true, lp_false = CONFIDENT[doc]
        top = [(" true", lp_true), (" false", lp_false)]
        return scripted.Reply("It is. </think> true", [(" true", lp_true, top)])

    result, _, _ = run_stage(tmp_path, respond)
    original = {d: original_score(*lps) for d, lps in CONFIDENT.items()}
    assert round(original["d1"], 6) == round(original["d2"], 6) and original["d2"] > original["d1"]
    # the trace keeps each score as computed, unrounded
    assert {s["doc_id"]: s["score"] for s in result["steps"]} == pytest.approx(original, rel=1e-12)
    # MTEB hands the scores to pytrec_eval (run_mteb.py L82-91): d2 first; rounded to 6
    # decimals they would tie and keep the first stage's order, d1 first
    assert list(result["ranking"]) == ["d2", "d1", "d3"]
    qrels = {"q1": {"d2": 1}}
    want = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate({"q1": original})
    got = evaluate_run(qrels, {"q1": result["ranking"]}).per_query["q1"]["NDCG@10"]
    assert got == want["q1"]["ndcg_cut_10"] == 1.0
    rounded = {d: round(s, 6) for d, s in original.items()}  # the stage before this fix
    stable = sorted(rounded, key=lambda d: -rounded[d])
    before = evaluate_run(qrels, {"q1": {d: 3.0 - i for i, d in enumerate(stable)}})
    assert before.per_query["q1"]["NDCG@10"] < got
