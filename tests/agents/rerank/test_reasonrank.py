"""The `reasonrank` stage against ReasonRank's own code (github.com/8421BCD/ReasonRank at
06721fd): its windows, its prompt, its reading of a reply; scripted and embedded models."""

from __future__ import annotations

import asyncio
import copy
import json
import math
import re

import pytest
import pytrec_eval
from ftfy import fix_text

from agents.commands.run import main
from agents.llm import LLM, scripted
from agents.llm.embedded.chatml import render_chatml
from agents.llm.sampling import resolve
from agents.rerank import StageContext
from agents.rerank.reasonrank import (
    ANSWER,
    DEFAULTS,
    build_reasonrank,
    clean_response,
    receive_permutation,
    windows,
)
from eval.records import read_records
from prompts import PromptBook
from tests import tiny_models
from tests.helpers import Server, chat

# listwise_prompt_r1.toml L3, system_prompt_reasoning
SYSTEM_PROMPT_REASONING = (
    "You are RankLLM, an intelligent assistant that can rank passages based on their relevance "
    "to the query. Given a query and a passage list, you first thinks about the reasoning "
    "process in the mind and then provides the answer (i.e., the reranked passage list). The "
    "reasoning process and answer are enclosed within <think> </think> and <answer> </answer> "
    "tags, respectively, i.e., <think> reasoning process here </think> <answer> answer here "
    "</answer>."
)


def original_windows(n: int, rank_end: int = 100, window_size: int = 20, step: int = 10):
    """reranker.py L73-75 and rankllm.py L366-384, transcribed: the windows it would run."""
    rank_start, rank_end, window_size = 0, min(rank_end, n), min(window_size, n)
    windows_end, windows_start = rank_end, rank_end - window_size
    out = []
    while windows_end > rank_start and windows_start + step != rank_start:
        windows_start = max(windows_start, rank_start)
        out.append((windows_start, windows_end))
        windows_end = windows_end - step
        windows_start = windows_start - step
    return out


def original_messages(tokenizer, query: str, passages: list[str], max_length: int) -> list[dict]:
    """rank_listwise_os_llm.py L191-214 with utils.py L61-74 and L89-112, transcribed for
    prompt_mode rank_GPT_reasoning and an R2MED document ({'contents': text}, no title)."""

    def replace_number(s):
        return re.sub(r"\[(\d+)\]", r"(\1)", s)

    query = replace_number(query).strip()
    num = len(passages)
    messages = [{"role": "system", "content": SYSTEM_PROMPT_REASONING}]
    prefix = (
        f"I will provide you with {num} passages, each indicated by a numerical identifier []. "
        f"Rank the passages based on their relevance to the search query: {query}.\n"
    )
    input_context = f"{prefix}\n"
    for rank, text in enumerate(passages, 1):
        content = fix_text(text.strip())
        content = tokenizer.convert_tokens_to_string(tokenizer.tokenize(content)[:max_length])
        input_context += f"[{rank}] {replace_number(content)}\n"
    example_ordering = "[2] > [1]"
    input_context += (
        f"Search Query: {query}.\nRank the {num} passages above based on their relevance to the "
        "search query. All the passages should be included and listed using identifiers, in "
        f"descending order of relevance. The format of the answer should be [] > [], e.g., "
        f"{example_ordering}."
    )
    messages.append({"role": "user", "content": input_context})
    return messages


# --- windows ----------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [0, 1, 2, 9, 10, 11, 15, 19, 20, 21, 25, 30, 31, 55, 99, 100, 250])
def test_windows_are_reasonranks_own_loop(n):
    assert windows(n, 100, 20, 10) == original_windows(n)


def test_the_run_scripts_setting_makes_nine_windows_from_the_bottom_up():
    # run_rank_llm.sh: --window_size 20 --step_size 10 --retrieval_num 100
    assert windows(100, 100, 20, 10) == [(80, 100), (70, 90), (60, 80), (50, 70), (40, 60),
                                         (30, 50), (20, 40), (10, 30), (0, 20)]  # fmt: skip
    # a clamped window is the last: 25 passages give two windows, not RankGPT-style three
    assert windows(25, 100, 20, 10) == [(5, 25), (0, 15)]
    # a single passage is still sent, as the original sends it
    assert windows(1, 100, 20, 10) == [(0, 1)]


# --- reading a reply --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "order", "outcome"),
    [
        ("<think>d2 is best</think>\n<answer>[2] > [3] > [1]</answer>", [1, 2, 0], "answer"),
        # the pattern is searched in the lower-cased reply (rankllm.py L459)
        ("<THINK>x</THINK> <ANSWER>[3] > [1] > [2]</ANSWER>", [2, 0, 1], "answer"),
        # cut at the budget inside the answer: the text after the last <answer> (L463-464)
        ("<think>long</think> <answer>[3] > [2", [2, 1, 0], "open-answer"),
        # no <answer>: the digits of the whole reply, reasoning included (L465-466)
        ("<think>passage [3] looks better than [1], since 2 is", [2, 0, 1], "no-answer"),
        # repeats dropped, ids outside the window dropped, the missing appended (L518-522)
        ("<think>.</think><answer>[2] > [2] > [7] > [0]</answer>", [1, 0, 2], "answer"),
        ("<think>nothing</think><answer>none</answer>", [0, 1, 2], "answer"),
        # a Unicode digit int() refuses: "unexcepted output!", the window as it was (L512-516)
        ("<think>.</think><answer>[2] > [3²]</answer>", [0, 1, 2], "unexpected"),
    ],
)
def test_replies_are_read_as_receive_permutation_reads_them(reply, order, outcome):
    assert receive_permutation(reply, 3) == (order, outcome)


def test_the_answer_pattern_is_the_toml_one():
    assert ANSWER.pattern == r"<think>.*?</think>\s*<answer>(.*?)</answer>"
    assert clean_response("<think>a\nb</think>\n\n<answer> [1] > [2] </answer>") == (
        "1     2",
        "answer",
    )


# --- the prompt ---------------------------------------------------------------------------


QUERY = "A patient’s [1] fever after [2] days: which drug?"
CORPUS = {
    "d1": "  Aspirin [3] reduces fever and pain by inhibiting cyclooxygenase enzymes.  ",
    "d2": "The patientâ€™s fever responded to paracetamol within two days of treatment.",
    "d3": "Ibuprofen is a nonsteroidal anti-inflammatory drug used for fever in children.",
}


def run_stage(tmp_path, replies, options=None, ranking=None, model="scripted/x"):
    queue = list(replies)
    seen: list[list[dict]] = []

    def respond(messages, params):
        seen.append(messages)
        return queue.pop(0)

    provider = scripted.install(respond)
    ctx = StageContext(
        corpus=CORPUS, task="toy", options={**DEFAULTS, **(options or {})},
        llm=LLM(model=model, cache_dir=tmp_path / "cache"), prompts=PromptBook(task="toy"),
    )  # fmt: skip
    ranking = ranking or {"d1": 3.0, "d2": 2.0, "d3": 1.0}
    result = asyncio.run(build_reasonrank(ctx).rerank("q1", QUERY, ranking))
    return result, seen, provider


def test_a_window_is_the_prompt_reasonranks_code_builds(tmp_path):
    folder = tmp_path / "tok"
    tiny_models.llama_tokenizer(folder, add_eos_token=False, pad_token=None)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    options = {"tokenizer": str(folder), "passage_tokens": 12}
    _, seen, _ = run_stage(tmp_path, ["<think>.</think><answer>[1]</answer>"], options)
    want = original_messages(tokenizer, QUERY, [CORPUS[d] for d in ("d1", "d2", "d3")], 12)
    # rank_listwise_os_llm.py L215-216: the chat template's prompt, then fix_text over it all
    assert render_chatml(seen[0]) == fix_text(render_chatml(want))
    user = seen[0][1]["content"]
    assert "patient's" in user and "patient’s" not in user  # mended, quotes uncurled
    assert user.count("\n[") == 3  # three passages, each on its own line


def test_each_window_step_keeps_the_whole_reply_and_its_outcome(tmp_path):
    reply = "<think>d3 treats children</think> <answer>[3] > [1] > [2]</answer>"
    result, _, provider = run_stage(tmp_path, [reply])
    (step,) = result["steps"]
    assert provider.calls == 1
    assert step["output"] == reply and step["outcome"] == "answer"
    assert step["window"] == [0, 3] and step["permutation"] == [3, 1, 2]
    assert list(result["ranking"]) == ["d3", "d1", "d2"]
    assert step["messages"][0]["content"] == SYSTEM_PROMPT_REASONING
    user = step["messages"][1]["content"]
    assert "[1] Aspirin (3) reduces" in user and "search query: A patient's (1) fever" in user
    assert "scripted/x" in step["passages_cut_by"] or "tokenizer" in step["passages_cut_by"]


def test_windows_are_called_in_order_and_each_sees_the_last_ones_result(tmp_path):
    ranking = {f"d{i}": float(10 - i) for i in (1, 2, 3)}
    replies = ["<think>.</think><answer>[2] > [1]</answer>"] * 2
    result, seen, _ = run_stage(tmp_path, replies, {"window": 2, "step": 1}, ranking)
    assert [tuple(s["window"]) for s in result["steps"]] == [(1, 3), (0, 2)]
    assert result["steps"][0]["order"] == ["d3", "d2"]
    assert result["steps"][1]["doc_ids"] == ["d1", "d3"]  # d3 climbed into the next window
    assert list(result["ranking"]) == ["d3", "d1", "d2"]


def test_both_presets_send_reasonranks_budget():
    model = "hosted_vllm/liuwenhan/reasonrank-32B"
    assert resolve("default", "reasonrank", "window", model, "vllm").params == {
        "temperature": 0.0, "max_tokens": 3172,
    }  # fmt: skip
    # rank_listwise_os_llm.py L118-122: SamplingParams(temperature=0, max_tokens=3072 + 100),
    # the rest vLLM's defaults, sent: a vLLM server would otherwise apply the checkpoint's
    # generation_config.json (Qwen2.5's repetition_penalty 1.05) to a request that names none
    assert resolve("paper", "reasonrank", "window", model, "vllm").params == {
        "temperature": 0.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0,
        "max_tokens": 3172,
    }  # fmt: skip
    api = resolve("paper", "reasonrank", "window", "openai/gpt-4o", "openai")
    assert api.params == {"temperature": 0.0, "max_tokens": 3172} and not api.not_sent
    # the budget is the stage's option
    small = resolve("paper", "reasonrank", "window", model, "vllm", options={"max_tokens": 64})
    assert small.params["max_tokens"] == 64 and small.sources["max_tokens"] == "option max_tokens"


def test_bad_options_are_refused():
    from agents.config.run_config import ConfigError
    from agents.config.stages import parse_stage

    for spec in ("reasonrank,window=0", "reasonrank,step=0", "reasonrank,passage_tokens=0",
                 "reasonrank,max_tokens=0", "reasonrank,scores=model"):  # fmt: skip
        with pytest.raises(ConfigError):
            parse_stage(spec)


# --- end to end ---------------------------------------------------------------------------


def reverse_window(messages, params):
    k = len(re.findall(r"^\[\d+\] ", messages[-1]["content"], re.MULTILINE))
    ids = " > ".join(f"[{i}]" for i in range(k, 0, -1))
    return f"<think>reversing</think>\n<answer>{ids}</answer>"


def test_a_run_reranks_with_reasonrank_and_counts_outcomes(tmp_path, toy_dir):
    provider = scripted.install(reverse_window)
    assert main([
        "--agent", "none", "--dataset", str(toy_dir), "--model", "scripted/x",
        "--rerank", "reasonrank,depth=5,window=2,step=1",
        "--runs-dir", str(tmp_path / "runs"), "--cache-dir", str(tmp_path / "cache"),
        "--run-name", "r", "--quiet",
    ]) == 0  # fmt: skip
    run_dir = tmp_path / "runs" / "r"
    first = read_records(run_dir / "toy" / "queries.jsonl")
    staged = read_records(run_dir / "toy" / "rerank-1-reasonrank" / "queries.jsonl")
    for q, record in first.items():
        before = [d for d, _ in record["ranking"]]
        steps = staged[q]["steps"]
        assert [tuple(s["window"]) for s in steps] == original_windows(len(before), 5, 2, 1)
        order = before[:]
        for s in steps:
            lo, hi = s["window"]
            order[lo:hi] = order[lo:hi][::-1]
        assert [d for d, _ in staged[q]["ranking"]] == order
    windows_run = sum(len(r["steps"]) for r in staged.values())
    assert provider.calls == windows_run
    summary = json.loads((run_dir / "toy" / "metrics.json").read_text())
    assert summary["outcomes"]["rerank-1-reasonrank"] == {"answer": windows_run}
    prompts = json.loads((run_dir / "config.json").read_text())["prompts"]
    assert {n for n in prompts if n.startswith("reasonrank")} == {
        "reasonrank/default", "reasonrank/system", "reasonrank/passage", "reasonrank/rank"
    }  # fmt: skip


@pytest.mark.slow
def test_the_embedded_model_runs_the_stage(tmp_path, toy_dir):
    """Real llama.cpp replies: a small model writes no ReasonRank answer, and every window is
    still read (by the original's fallback) and counted; a rerun is the same, from the cache."""

    def run(runs_dir):
        assert main([
            "--agent", "none", "--dataset", str(toy_dir), "--model", "local/smollm2-135m",
            "--rerank", "reasonrank,depth=3,window=2,step=1,passage_tokens=24",
            "--max-tokens", "24", "--limit", "2", "--runs-dir", str(runs_dir),
            "--cache-dir", str(tmp_path / "cache"), "--run-name", "e", "--quiet",
        ]) == 0  # fmt: skip
        run_dir = runs_dir / "e" / "toy"
        return read_records(run_dir / "rerank-1-reasonrank" / "queries.jsonl"), run_dir

    staged, run_dir = run(tmp_path / "runs")
    steps = [s for r in staged.values() for s in r["steps"]]
    assert steps and all(r["error"] is None for r in staged.values())
    assert all(s["passages_cut_by"] == "local/smollm2-135m's own tokenizer" for s in steps)
    outcomes = json.loads((run_dir / "metrics.json").read_text())["outcomes"]
    assert sum(outcomes["rerank-1-reasonrank"].values()) == len(steps)
    rerun, _ = run(tmp_path / "again")
    assert {q: r["ranking"] for q, r in rerun.items()} == {
        q: r["ranking"] for q, r in staged.items()
    }
    assert all(s["cached"] for r in rerun.values() for s in r["steps"])


@pytest.mark.parametrize("kind", ["reasonrank", "rank1"])
def test_a_tokenizer_that_does_not_load_stops_the_run_before_any_call(
    tmp_path, toy_dir, capsys, kind
):
    provider = scripted.install(reverse_window)
    missing = tmp_path / "no-such-tokenizer"
    status = main([
        "--agent", "none", "--dataset", str(toy_dir), "--model", "scripted/x",
        "--rerank", f"{kind},tokenizer={missing}", "--runs-dir", str(tmp_path / "runs"),
        "--cache-dir", str(tmp_path / "cache"), "--run-name", "t", "--quiet",
    ])  # fmt: skip
    err = capsys.readouterr().err
    assert status == 2 and provider.calls == 0 and not (tmp_path / "runs").exists()
    assert f"--rerank {kind} option tokenizer: {missing}: no such folder" in err
    assert "Traceback" not in err


# --- the new list's scores: rankllm.py L526, utils.py L194, trec_eval.py L23-30 ---------------


class Candidate:
    """data.py's Candidate, the two fields ``receive_permutation`` and the writer read."""

    def __init__(self, docid: str, score: float) -> None:
        self.docid, self.score = docid, score


def original_receive_permutation(candidates, permutation: str, rank_start: int, rank_end: int):
    """rankllm.py L511-527, transcribed (``permutation`` as ``_clean_response`` leaves it)."""
    response = [int(x) - 1 for x in permutation.split()]
    deduplicated = []
    for c in response:
        if c not in deduplicated:
            deduplicated.append(c)
    cut_range = copy.deepcopy(candidates[rank_start:rank_end])
    original_rank = [tt for tt in range(len(cut_range))]
    response = [ss for ss in deduplicated if ss in original_rank]
    response = response + [tt for tt in original_rank if tt not in response]
    for j, x in enumerate(response):
        candidates[rank_start + j] = copy.deepcopy(cut_range[x])
        candidates[rank_start + j].score = cut_range[j].score
    return candidates


def original_run(qid: str, candidates) -> dict[str, dict[str, float]]:
    """utils.py L191-194 (TrecWriter) writes the list, trec_eval.py L23-30 reads it back."""
    lines = [f"{qid} Q0 {c.docid} {rank} {c.score:.6f} reasonrank\n"
             for rank, c in enumerate(candidates, 1)]  # fmt: skip
    runs: dict[str, dict[str, float]] = {}
    for line in lines:
        line = line.split(" ")
        runs.setdefault(line[0], {})[line[2]] = float(line[4])
    return runs


# 12 passages in one window; d03 and d12's places hold first-stage scores equal to 6 decimals
TIED_FIRST_STAGE = {
    "d01": 0.95, "d02": 0.9, "d03": 0.8000001, "d04": 0.8000004, "d05": 0.7, "d06": 0.65,
    "d07": 0.6, "d08": 0.55, "d09": 0.5, "d10": 0.45, "d11": 0.4, "d12": 0.35,
}  # fmt: skip
# the model puts d12 fourth, just under d03, in the two places whose scores tie
MODEL_ORDER = [1, 2, 3, 12, 4, 5, 6, 7, 8, 9, 10, 11]


def test_each_place_keeps_its_first_stage_score_and_pytrec_eval_orders_the_ties(tmp_path):
    from eval.evaluate import evaluate_run

    corpus = {d: f"passage {d}" for d in TIED_FIRST_STAGE}
    reply = "<think>.</think><answer>" + " > ".join(f"[{i}]" for i in MODEL_ORDER) + "</answer>"
    scripted.install(lambda messages, params: reply)

    def rerank(**options):
        ctx = StageContext(
            corpus=corpus, task="toy", options={**DEFAULTS, **options},
            llm=LLM(model="scripted/x", cache_dir=tmp_path / "cache"),
            prompts=PromptBook(task="toy"),
        )  # fmt: skip
        return asyncio.run(build_reasonrank(ctx).rerank("q1", "q", TIED_FIRST_STAGE))["ranking"]

    ours, positions = rerank(), rerank(scores="positions")
    candidates = [Candidate(d, s) for d, s in TIED_FIRST_STAGE.items()]
    permutation = " ".join(str(i) for i in MODEL_ORDER)
    original = original_run("q1", original_receive_permutation(candidates, permutation, 0, 12))
    assert ours == original["q1"]  # the same scores, place by place, to the sixth decimal
    assert list(ours) == list(positions) == [f"d{i:02d}" for i in MODEL_ORDER]
    qrels = {"q1": {"d12": 1}}
    ndcg = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(original)
    ours_ndcg = evaluate_run(qrels, {"q1": ours}).per_query["q1"]["NDCG@10"]
    positions_ndcg = evaluate_run(qrels, {"q1": positions}).per_query["q1"]["NDCG@10"]
    # pytrec_eval puts d12 before d03 (doc id descending): third, not fourth as the model said
    assert ours_ndcg == pytest.approx(ndcg["q1"]["ndcg_cut_10"]) == pytest.approx(1 / math.log2(4))
    assert positions_ndcg == pytest.approx(1 / math.log2(5)) != ours_ndcg


# --- ftfy over the whole templated prompt: rank_listwise_os_llm.py L215-216 -------------------

# Qwen2.5-Instruct's chat template for plain messages (its tool branches left out)
QWEN25_TEMPLATE = (
    "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content "
    "+ '<|im_end|>' + '\\n' }}{%- endfor %}{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
ENTITY_QUERY = "Does AT&amp;T&#39;s &quot;fever&quot; plan cover a dose &lt; 5 mg?"
ENTITY_CORPUS = {
    "d1": "Doses &amp;lt; 5 mg are given by caf&eacute; staff.",
    "d2": "AT&amp;T's plan covers fever visits.",
    "d3": "Rust is a language.",
}


def test_entities_in_the_query_reach_the_model_as_the_whole_prompts_fix_text_leaves_them(
    tmp_path,
):
    from transformers import AutoTokenizer

    folder = tmp_path / "qwen"
    tiny_models.qwen_tokenizer(folder, eos_template=False, padding_side="left",
                               chat_template=QWEN25_TEMPLATE)  # fmt: skip
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    seen: list[list[dict]] = []

    def respond(messages, params):
        # a model that reads the query it is sent: the entities as written favour d2
        seen.append(messages)
        first = "[2] > [1]" if "AT&amp;T&#39;s" in messages[1]["content"] else "[1] > [2]"
        return f"<think>.</think><answer>{first} > [3]</answer>"

    scripted.install(respond)
    ctx = StageContext(
        corpus=ENTITY_CORPUS, task="toy", options={**DEFAULTS, "tokenizer": str(folder)},
        llm=LLM(model="scripted/x", cache_dir=tmp_path / "cache"), prompts=PromptBook(task="toy"),
    )  # fmt: skip
    result = asyncio.run(build_reasonrank(ctx).rerank("q1", ENTITY_QUERY, RANKING3))
    passages = [ENTITY_CORPUS[d] for d in RANKING3]
    want = fix_text(tokenizer.apply_chat_template(
        original_messages(tokenizer, ENTITY_QUERY, passages, 512), tokenize=False,
        add_generation_prompt=True,
    ))  # fmt: skip
    ours = tokenizer.apply_chat_template(seen[0], tokenize=False, add_generation_prompt=True)
    assert ours == want
    user = seen[0][1]["content"]
    # the query's entities stay (the prompt's first "<" turned ftfy's unescaping off); each
    # passage was mended alone before (utils.py L103), its entities unescaped there
    assert user.count("AT&amp;T&#39;s &quot;fever&quot; plan cover a dose &lt; 5 mg") == 2
    assert "[1] Doses < 5 mg are given by café staff." in user
    assert fix_text(user) != user  # mending the message alone would have unescaped the query
    assert list(result["ranking"]) == ["d2", "d1", "d3"]


RANKING3 = {"d1": 3.0, "d2": 2.0, "d3": 1.0}


# --- the tokenizer and the sampling under --preset paper: L99, L210, L118-122 -----------------


def test_the_paper_preset_cuts_with_the_served_checkpoints_tokenizer_and_sends_its_sampling(
    tmp_path, toy_dir
):
    from transformers import AutoTokenizer

    checkpoint = tmp_path / "liuwenhan" / "reasonrank-7B"  # a served folder: its tokenizer
    tiny_models.qwen_tokenizer(checkpoint, eos_template=False, padding_side="left",
                               chat_template=QWEN25_TEMPLATE)  # fmt: skip
    # a vLLM-shaped server: every window answered "[2] > [1]", each request's body kept
    server = Server(lambda path, body: chat("<think>.</think><answer>[2] > [1]</answer>"))
    try:
        assert main([
            "--agent", "none", "--dataset", str(toy_dir), "--preset", "paper",
            "--model", f"hosted_vllm/{checkpoint}", "--api-base", server.url,
            "--rerank", "reasonrank,depth=3,window=3,passage_tokens=6", "--limit", "1",
            "--runs-dir", str(tmp_path / "runs"), "--cache-dir", str(tmp_path / "cache"),
            "--run-name", "p", "--quiet",
        ]) == 0  # fmt: skip
    finally:
        server.close()
    config = json.loads((tmp_path / "runs" / "p" / "config.json").read_text())
    assert config["rerank"][0]["options"]["tokenizer"] == str(checkpoint)  # recorded
    sent = {"temperature": 0.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0,
            "max_tokens": 3172}  # fmt: skip
    assert config["sampling"]["rerank-1-reasonrank/window"]["params"] == sent
    (body,) = server.bodies
    assert {k: body[k] for k in sent} == sent  # vLLM's own fields sent beside OpenAI's
    staged = read_records(tmp_path / "runs" / "p" / "toy" / "rerank-1-reasonrank" /
                          "queries.jsonl")  # fmt: skip
    (record,) = staged.values()
    (step,) = record["steps"]
    assert step["passages_cut_by"] == f"the tokenizer of {checkpoint}"
    tokenizer = AutoTokenizer.from_pretrained(str(checkpoint))
    corpus = {json.loads(line)["id"]: json.loads(line)["text"]
              for line in (toy_dir / "corpus.jsonl").read_text().splitlines()}  # fmt: skip
    want = original_messages(tokenizer, record["query"], [corpus[d] for d in step["doc_ids"]], 6)
    assert body["messages"][1]["content"] == fix_text(want[1]["content"], unescape_html=False)


def test_the_paper_preset_refuses_a_checkpoint_tokenizer_it_cannot_load(tmp_path, toy_dir,
                                                                         capsys):  # fmt: skip
    status = main([
        "--agent", "none", "--dataset", str(toy_dir), "--preset", "paper",
        "--model", f"hosted_vllm/{tmp_path / 'no-such-checkpoint'}",
        "--api-base", "http://127.0.0.1:9/v1", "--rerank", "reasonrank",
        "--runs-dir", str(tmp_path / "runs"), "--cache-dir", str(tmp_path / "cache"),
        "--run-name", "t", "--quiet",
    ])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and not (tmp_path / "runs").exists()
    assert err[-1].startswith("error: --rerank reasonrank option tokenizer (--preset paper")
    assert "no-such-checkpoint" in err[-1]
