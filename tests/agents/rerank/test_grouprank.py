"""The `grouprank` stage against GroupRank's own code (github.com/AQ-MedAI/Diver at 95b111b,
``Reranker/rerank_groupwise.py``), transcribed below with its line numbers: the prompts and
groups it builds, its shuffle stream over queries and passes, its reading of a reply, its
averaging and interpolation; scripted runs, the embedded model and a llama.cpp server."""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import types
from collections import defaultdict
from random import Random

import pytest

from agents.commands.run import main
from agents.llm import LLM, scripted
from agents.llm.embedded.chatml import render_chatml
from agents.llm.sampling import resolve
from agents.rerank import StageContext
from agents.rerank.grouprank import (
    DEFAULTS,
    OUTCOMES,
    build_grouprank,
    extract_scores,
    group_result,
    shuffle_stream,
    stream_sha256,
)
from eval.records import read_records
from prompts import PromptBook
from tests import tiny_models
from tests.helpers import QUERIES

# --- the original, transcribed ------------------------------------------------------------

# L42-62, ``self.group_system_prompt``
GROUP_SYSTEM_PROMPT = (
    "Your task is to evaluate and rank documents based on how well they help answer the "
    "given query. Follow this evaluation priority:\n"
    "1. PRIMARY: Usefulness & Helpfulness - Does the document provide actionable "
    "information, solutions, or direct answers that help address the user's needs?\n"
    "2. SECONDARY: Relevance - Does the document contain information related to the query "
    "topic?\n"
    "\n"
    "Evaluation Process:\n"
    "1. First, identify the user's core intent and what kind of help they need from the "
    "query\n"
    "2. For each document, assess:\n"
    "   - How directly it addresses the user's intent\n"
    "   - What actionable information or answers it provides\n"
    "   - How much it helps solve the user's problem or need\n"
    "3. Compare documents against each other to ensure proper ranking\n"
    "4. Assign scores that reflect the relative usefulness ranking\n"
    "\n"
    "Scoring Scale (0-10):\n"
    "- 9-10: Extremely helpful, directly answers the query with actionable information\n"
    "- 7-8: Very helpful, provides substantial useful information for the query\n"
    "- 5-6: Moderately helpful, contains some useful information but incomplete\n"
    "- 3-4: Minimally helpful, limited useful information despite topic relevance\n"
    "- 1-2: Barely helpful, mentions related topics but provides little useful information\n"
    "- 0: Not helpful at all, cannot assist with answering the query\n"
)
# L64-82, ``self.group_user_prompt`` (a str.format template: its braces doubled, L79)
GROUP_USER_PROMPT = (
    "I will provide you {TOPK} documents, each indicated by a numerical identifier []. "
    "Score these documents based on their Usefulness and Relevance to the query.\n"
    "Query:\n"
    "{QUERY}\n"
    "\n"
    "Documents:\n"
    "{PASSAGES}\n"
    "\n"
    "## Final Output Format\n"
    "You must structure your response in exactly two parts: provide your brief reasoning "
    "process first, then output final scores in JSON format like below, with document IDs "
    "as string keys and integer scores as values for all {TOPK} documents. \n"
    "The reasoning process and answer are enclosed within <reason> </reason> and <answer> "
    "</answer> tags, respectively. Do NOT output anything outside the specified tags. "
    "Follow this exact format:\n"
    "<reason> \n"
    "[Analyze each document's usefulness and relevance to the query, explaining your "
    "scoring rationale]\n"
    "</reason>\n"
    "<answer> \n"
    "```json\n"
    '{{"[1]": 5, "[2]": 3, "[3]": 8}}\n'
    "``` \n"
    "</answer>\n"
)


def original(tokenizer, generate, seed: int = 666):
    """rerank_groupwise.py L19-174 transcribed (``self.llm`` answers with ``generate``, a
    function of the chat-templated prompt; the module's ``random`` is its own stream here,
    seeded as L19 seeds it; its prints and comments on progress left out)."""
    random = Random(seed)  # L19: random.seed(666)

    def tqdm(iterable, total=None):
        return iterable

    def avg_scores(did_scores):  # L22-33
        # 1. 使用 defaultdict(list) 来按 doc_id 聚合所有分数
        scores_by_doc = defaultdict(list)
        for doc_id, score in did_scores:
            scores_by_doc[doc_id].append(score)

        # 2. 计算每个 doc_id 的平均分
        average_scores = {}
        for doc_id, scores in scores_by_doc.items():
            average_scores[doc_id] = sum(scores) / len(scores)

        return [(k, v) for k, v in average_scores.items()]

    class LLMStandIn:
        def generate(self, prompts, sampling_params, use_tqdm=True):
            return [
                types.SimpleNamespace(outputs=[types.SimpleNamespace(text=generate(p))])
                for p in prompts
            ]

    class GroupReranker:  # L36
        def __init__(self) -> None:  # L37-82, the model and its sampling aside
            self.llm = LLMStandIn()
            self.tokenizer = tokenizer
            self.sampling_params = None
            self.group_system_prompt = GROUP_SYSTEM_PROMPT
            self.group_user_prompt = GROUP_USER_PROMPT
            self.avg_scores = avg_scores

        def _extract_rerank_output(self, output_str):  # L84-114
            if output_str is None:
                return None

            # 把answer部分提取出来
            answer_match = re.search(r"<answer>(.*?)</answer>", output_str, re.DOTALL)
            if answer_match:
                output_str = answer_match.group(1).strip()

            # 定位JSON代码块
            # 方法1: 尝试提取带```json标记的内容
            try:
                json_matches = re.findall(r"(?:```json\s*)([\s\S]+?)(?:\s*```)", output_str)
                if json_matches:
                    json_str = json_matches[-1].strip()
                else:
                    # 方法2: 未找到标记时，尝试提取整个JSON结构
                    json_str = re.findall(r"\{[\s\S]*?\}", output_str)[-1]

                # 修复常见的JSON格式问题
                json_str = json_str.strip()
                json_str = re.sub(r"(\[\d+\])\]", r"\1", json_str)  # 1. "[7]]:" -> "[7]":"
                if json_str.count("{") > json_str.count("}"):  # 2. 确保JSON完整
                    json_str += "}"
                json_str = re.sub(r"\s+", " ", json_str).replace("\n", " ").strip()  # 3.

                idx_score = dict(json.loads(json_str))
            except:  # noqa: E722 (the original's bare except)
                raise ValueError("未找到有效的JSON内容")  # noqa: B904
            return idx_score

        def prepare_groups_one_epoch(  # L116-141
            self, qid_queries, qid_did_ctxs, topk, group_size=10, interval=20, max_doc_lens=3000
        ):
            batch_messages = []
            batch_info = []  # 保存qid, dids, doc_texts等
            for item in qid_queries:
                qid, query = item["qid"], item["query"]
                docs = qid_did_ctxs[qid]
                random.shuffle(docs)
                for i in range(0, len(docs), interval):
                    doc_group = docs[i : i + group_size]
                    dids = []
                    doc_texts = []
                    for doc in doc_group:
                        dids.append(doc["id"])
                        doc_texts.append(re.sub("\n+", " ", doc["text"])[:max_doc_lens])
                    docs_str = "".join(
                        [
                            "[{}]. {}\n\n".format(idx + 1, doc_text)  # noqa: UP032
                            for idx, doc_text in enumerate(doc_texts)
                        ]
                    )
                    group_texts = self.group_user_prompt.format(
                        QUERY=query, PASSAGES=docs_str, TOPK=len(dids)
                    )
                    message = self.tokenizer.apply_chat_template(
                        [
                            {"role": "system", "content": self.group_system_prompt},
                            {"role": "user", "content": group_texts},
                        ],
                        tokenize=False,
                        add_generation_prompt=True,
                    )
                    batch_messages.append(message)
                    batch_info.append((qid, dids))
            return batch_messages, batch_info

        def rerank_by_group(  # L143-174
            self, qid_queries, qid_did_ctxs, topk, group_size=20, interval=20, num_epoch=2,
            max_doc_lens=3000,
        ):  # fmt: skip
            total_batch_messages, total_batch_info = [], []
            for epoch in range(num_epoch):  # noqa: B007
                batch_messages, batch_info = self.prepare_groups_one_epoch(
                    qid_queries, qid_did_ctxs, topk, group_size, interval, max_doc_lens
                )
                total_batch_messages.extend(batch_messages)
                total_batch_info.extend(batch_info)
            self.sent = (total_batch_messages, total_batch_info)  # kept for the test

            outputs = self.llm.generate(total_batch_messages, self.sampling_params, use_tqdm=True)

            new_scores = {item["qid"]: [] for item in qid_queries}

            for out, (qid, dids) in tqdm(
                zip(outputs, total_batch_info),  # noqa: B905
                total=len(total_batch_info),
            ):
                output_str = out.outputs[0].text
                try:
                    idx_score = self._extract_rerank_output(output_str)
                    did_score = [
                        (dids[int(idx.strip().strip("[]")) - 1], score / 10)
                        for idx, score in idx_score.items()
                    ]
                except Exception:
                    did_score = [(did, 0) for did in dids]
                new_scores[qid].extend(did_score)
            for qid, did_scores in new_scores.items():
                did_scores = avg_scores(did_scores)
                new_scores[qid] = dict(
                    sorted(did_scores, key=lambda item: item[1], reverse=True)[:topk]
                )
            return new_scores

    return GroupReranker()


def original_interpolation(new_scores, all_scores):
    """rerank_groupwise.py L267-273, transcribed."""
    retriever_interpolated_scores = {}
    for qid in new_scores:
        retriever_interpolated_scores[qid] = {}
        for did in new_scores[qid]:
            retriever_interpolated_scores[qid][did] = (0.6 * new_scores[qid][did]) + (
                0.4 * all_scores[qid][did]
            )
        retriever_interpolated_scores[qid] = dict(
            sorted(retriever_interpolated_scores[qid].items(), key=lambda x: x[1], reverse=True)
        )
    return retriever_interpolated_scores


def original_did_score(reranker, output_str, dids):
    """rerank_groupwise.py L160-167: one reply's (document, score) pairs, and whether the
    original failed to read it (its except branch)."""
    failed = False
    try:
        idx_score = reranker._extract_rerank_output(output_str)
        did_score = [
            (dids[int(idx.strip().strip("[]")) - 1], score / 10) for idx, score in idx_score.items()
        ]
    except Exception:
        did_score = [(did, 0) for did in dids]
        failed = True
    return did_score, failed


# --- a tokenizer with a chat template -----------------------------------------------------

# Qwen2.5's ChatML, as its template renders a system and a user turn
CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}"
)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    folder = tmp_path_factory.mktemp("qwen-tok")
    tiny_models.qwen_tokenizer(folder, eos_template=False, padding_side="left",
                               chat_template=CHATML)  # fmt: skip
    return AutoTokenizer.from_pretrained(str(folder))


def templated(tokenizer, messages):
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


# --- reading a reply ----------------------------------------------------------------------

FENCED = '<reason>d2 helps most</reason>\n<answer>\n```json\n{"[1]": 3, "[2]": 9}\n```\n</answer>'
REPLIES = [
    FENCED,
    # the last fenced block wins; text outside <answer> is not read
    '```json\n{"[1]": 1}\n```<answer>```json\n{"[1]": 2}\n``` and '
    '```json\n{"[2]": 7}\n```</answer>',
    # no fence: the last {...} of the answer, non-greedy (the first closing brace ends it)
    '<answer>first {"[1]": 1} then {"[2]": 4, "[1]": 6}</answer>',
    '<reason>x</reason> {"[1]": 10, "[2]": 0}',  # no <answer>: the whole reply
    '<answer>```json\n{"[1]]": 5, "[2]]": 8}\n```</answer>',  # "[7]]" mended
    '<answer>```json\n{"[1]": 5, "[2]": 8\n```</answer>',  # a missing } added
    '<answer>{"[1]": 5, "[2]": {"x": 1}</answer>',  # the non-greedy {...} is cut short
    '<answer>```json\n{"[0]": 4, "[1]": 6}\n```</answer>',  # [0] is the last document
    '<answer>```json\n{"[3]": 4, "[1]": 6}\n```</answer>',  # outside the group of 2
    '<answer>```json\n{"[-1]": 4}\n```</answer>',  # -1 - 1: the second to last
    '<answer>```json\n{"[1]": "5", "[2]": 6}\n```</answer>',  # a string score
    '<answer>```json\n{"[1]": null}\n```</answer>',
    '<answer>```json\n{"[2]": 7}\n```</answer>',  # [1] left out
    '<answer>```json\n{"1": 7.5, "[[2]]": true}\n```</answer>',  # brackets optional, a bool
    '<answer>```json\n{"[1]": 2, "[1]": 9}\n```</answer>',  # a key twice: the last
    '<answer>```json\n[["[1]", 4], ["[2]", 5]]\n```</answer>',  # pairs: dict() takes them
    "<answer>```json\n[[1, 4]]\n```</answer>",  # an int key: idx.strip() fails
    '<answer>```json\n{"[ 1 ]": 3, "[\n2]": 1}\n```</answer>',  # spaces, a newline collapsed
    '<answer>```json\n{"[1]": 1e400}\n```</answer>',  # inf: read, then refused here
    "<answer>I would rank document 2 first.</answer>",  # no JSON at all
    "",
    "<answer>```json\n```</answer>",
    '<answer>```json\n{"[1]": 4,}\n```</answer>',  # a trailing comma: not JSON
    '<answer>```json\n{"[1]": 5}\n```',  # an unclosed <answer>: the whole reply is read
]


@pytest.mark.parametrize("reply", REPLIES)
def test_the_reply_is_read_as_extract_rerank_output_reads_it(reply):
    reranker = original(None, None)
    try:
        expected = reranker._extract_rerank_output(reply)
    except ValueError:
        expected = None
    try:
        got, _ = extract_scores(reply)
    except ValueError:
        got = None
    assert got == expected


@pytest.mark.parametrize("reply", REPLIES)
def test_each_reply_scores_its_group_as_rerank_by_group_does(reply):
    dids = ["d1", "d2"]
    expected, failed = original_did_score(original(None, None), reply, dids)
    result = group_result(reply, dids)
    if "1e400" in reply:  # the one departure: a score that is not finite is not carried on
        assert expected == [("d1", float("inf"))] and not failed
        assert result["outcome"] == "unread" and "not a finite number" in result["reason"]
        assert result["scores"] == [("d1", 0), ("d2", 0)]
        return
    assert result["scores"] == expected
    assert result["outcome"] in OUTCOMES
    assert (result["outcome"] == "unread") == failed


@pytest.mark.parametrize(
    ("reply", "outcome", "scores"),
    [
        (FENCED, "read", [("d1", 0.3), ("d2", 0.9)]),
        ('<answer>{"[1]": 3, "[2]": 9}</answer>', "repaired", [("d1", 0.3), ("d2", 0.9)]),
        ('```json\n{"[1]]": 3, "[2]": 9}\n```', "repaired", [("d1", 0.3), ("d2", 0.9)]),
        ('```json\n{"[1]": 3, "[2]": 9\n```', "repaired", [("d1", 0.3), ("d2", 0.9)]),
        # [0] is Python's index -1: the group's last document, scored twice here
        ('```json\n{"[0]": 4, "[2]": 6}\n```', "read", [("d2", 0.4), ("d2", 0.6)]),
        ('```json\n{"[3]": 4}\n```', "unread", [("d1", 0), ("d2", 0)]),
        ('```json\n{"[1]": "4"}\n```', "unread", [("d1", 0), ("d2", 0)]),
        ("no json here", "unread", [("d1", 0), ("d2", 0)]),
    ],
)
def test_outcomes_say_how_a_group_was_read(reply, outcome, scores):
    result = group_result(reply, ["d1", "d2"])
    assert (result["outcome"], result["scores"]) == (outcome, scores)


# --- the shuffle stream -------------------------------------------------------------------


def test_the_stream_is_the_originals_global_shuffles_query_after_query_pass_after_pass():
    lengths = {"q1": 25, "q2": 7, "q3": 13}
    reranker = original(None, None)
    ctxs = {q: [{"id": f"{q}-{i}", "text": "t"} for i in range(n)] for q, n in lengths.items()}
    queries = [{"qid": q, "query": q} for q in lengths]
    reranker.tokenizer = types.SimpleNamespace(apply_chat_template=lambda m, **k: "")
    passes = []
    for _ in range(2):  # rerank_by_group's loop over prepare_groups_one_epoch (L145-148)
        _, info = reranker.prepare_groups_one_epoch(queries, ctxs, 100, 10, 10)
        passes.append(info)
    stream = shuffle_stream(lengths, 2, 666)
    for p, info in enumerate(passes):
        for q, n in lengths.items():
            order = [f"{q}-{i}" for i in stream[q][p]]
            groups = [order[i : i + 10] for i in range(0, n, 10)]
            assert [dids for qid, dids in info if qid == q] == groups
    # the second pass shuffles the first pass's order, not the first stage's again
    rng, fresh = Random(666), []
    for _ in range(2):
        order = list(range(25))
        rng.shuffle(order)
        fresh.append(order)
    alone = shuffle_stream({"q1": 25}, 2, 666)["q1"]
    assert alone[0] == fresh[0] and alone[1] != fresh[1]
    # and every query's draws depend on the queries before it
    assert shuffle_stream(lengths, 2, 666)["q2"] != shuffle_stream({"q2": 7}, 2, 666)["q2"]


# --- the whole stage against rerank_by_group and the interpolation ------------------------

LONG = "Glucose is made by the liver.\n\n\nMetformin lowers it; " * 3


def corpus_of(lengths: dict[str, int]) -> dict[str, str]:
    return {
        f"{q}-{i}": f"Document {q}-{i} about drug {i % 4}.\nLine two {{braces}} [3].{LONG[: i * 7]}"
        for q, n in lengths.items()
        for i in range(n)
    }


def first_stage(lengths: dict[str, int]) -> dict[str, dict[str, float]]:
    """Scores with ties, in the order sorted() gives them (L234)."""
    return {q: {f"{q}-{i}": float(20 - i // 3) for i in range(n)} for q, n in lengths.items()}


def scripted_reply(prompt: str) -> str:
    """A reply of a kind chosen by the prompt's hash: well-formed, repaired, unread."""
    texts = re.findall(r"^\[\d+\]\. (.*)$", prompt, re.MULTILINE)
    n = len(texts)
    score = [int(hashlib.sha256(t.encode()).hexdigest()[:2], 16) % 11 for t in texts]
    body = ", ".join(f'"[{i}]": {s}' for i, s in enumerate(score, 1))
    kind = int(hashlib.sha256(prompt.encode()).hexdigest()[:4], 16) % 8
    if kind == 0:  # fenced, with an earlier block that is not read
        first = '```json\n{"[1]": 1}\n```'
        return f"<reason>r</reason>\n<answer>{first} ```json\n{{{body}}}\n```</answer>"
    if kind == 1:  # bare
        return f"<reason>r</reason> <answer>{{{body}}}</answer>"
    if kind == 2:  # "[n]]" mended
        return "<answer>```json\n{" + body.replace('"[1]"', '"[1]]"') + "}\n```</answer>"
    if kind == 3:  # a } missing
        return "<answer>```json\n{" + body + "\n```</answer>"
    if kind == 4:  # [0] and [n] both: the last document twice, the first never
        return "<answer>```json\n{" + body.replace('"[1]"', '"[0]"') + "}\n```</answer>"
    if kind == 5:  # an id outside the group: the whole group 0
        return "<answer>```json\n{" + body + f', "[{n + 1}]": 5' + "}\n```</answer>"
    if kind == 6:  # half of them left out
        half = ", ".join(body.split(", ")[: max(1, n // 2)])
        return "<answer>```json\n{" + half + "}\n```</answer>"
    return "<reason>cannot decide</reason><answer>all equally useful</answer>"


def run_stage(tmp_path, corpus, rankings, options, lengths=None, respond=None, order=None):
    """The stage over ``rankings`` (every query, in ``order``), scripted; returns
    {query: result}, the messages of every call and the provider."""
    seen: list[list[dict]] = []

    def reply(messages, params):
        seen.append(messages)
        return respond(messages, params)

    provider = scripted.install(reply)
    options = {**DEFAULTS, **options}
    ctx = StageContext(
        corpus=corpus, task="toy", options=options,
        llm=LLM(model="scripted/x", cache_dir=tmp_path / "cache"), prompts=PromptBook(task="toy"),
        sampling={"group": {"temperature": 0.3, "top_p": 0.8, "max_tokens": options["max_tokens"]}},
        list_lengths={q: len(r) for q, r in rankings.items()} if lengths is None else lengths,
    )  # fmt: skip
    stage = build_grouprank(ctx)
    results = {}
    for q in order or list(rankings):
        results[q] = asyncio.run(stage.rerank(q, f"query {q}: which {{drug}}?", rankings[q]))
    return results, seen, provider


@pytest.mark.parametrize(
    "options",
    [
        {"depth": 20, "k": 100},
        {"depth": 20, "k": 8, "interpolate": False},
        {"depth": 100, "k": 100, "group_size": 4, "interval": 3, "passes": 3},  # overlapping
        {"depth": 100, "k": 100, "group_size": 3, "interval": 5},  # gaps: some never scored
    ],
)
def test_the_stage_ranks_as_rerank_by_group_then_the_interpolation(tmp_path, tokenizer, options):
    lengths = {"q1": 25, "q2": 7, "q3": 13}
    corpus, first = corpus_of(lengths), first_stage(lengths)
    o = {**DEFAULTS, "max_doc_chars": 70, **options}
    reranker = original(tokenizer, scripted_reply)
    ctxs = {  # L233-238: the top input_k, as {'id', 'text'}
        q: [{"id": d, "text": corpus[d]} for d, _ in
            sorted(s.items(), key=lambda x: x[1], reverse=True)[: o["depth"]]]
        for q, s in first.items()
    }  # fmt: skip
    queries = [{"qid": q, "query": f"query {q}: which {{drug}}?"} for q in lengths]
    new_scores = reranker.rerank_by_group(queries, ctxs, o["k"], o["group_size"], o["interval"],
                                          o["passes"], o["max_doc_chars"])  # fmt: skip
    expected = original_interpolation(new_scores, first) if o["interpolate"] else new_scores

    def respond(messages, params):
        return scripted_reply(templated(tokenizer, messages))

    # the queries in another order than the stream's: each still draws its own place in it
    results, seen, _ = run_stage(tmp_path, corpus, first, options | {"max_doc_chars": 70},
                                 respond=respond, order=["q3", "q1", "q2"])  # fmt: skip
    for q in lengths:
        assert list(results[q]["ranking"].items()) == list(expected[q].items())
        groups = [s["doc_ids"] for s in results[q]["steps"] if s["node"] == "group"]
        assert groups == [dids for qid, dids in reranker.sent[1] if qid == q]
    # every prompt, through the chat template, the original's bytes
    assert sorted(templated(tokenizer, m) for m in seen) == sorted(reranker.sent[0])
    outcomes = {s["outcome"] for r in results.values() for s in r["steps"] if "outcome" in s}
    assert outcomes == {"read", "repaired", "unread"}


def test_the_prompt_is_the_originals_to_the_byte(tokenizer, tmp_path):
    corpus = {"a": "First\n\n\nline\r\nsecond " + "x" * 40, "b": "B {not a field} }{"}
    _, seen, _ = run_stage(tmp_path, corpus, {"q": {"a": 2.0, "b": 1.0}},
                           {"max_doc_chars": 30, "passes": 1},
                           respond=lambda m, p: FENCED)  # fmt: skip
    (messages,) = seen
    (order,) = shuffle_stream({"q": 2}, 1, 666)["q"]  # the one pass's order
    # L130-132
    doc_texts = [re.sub("\n+", " ", corpus[("a", "b")[i]])[:30] for i in order]
    docs_str = "".join(["[{}]. {}\n\n".format(i + 1, t) for i, t in enumerate(doc_texts)])  # noqa: UP032
    user = GROUP_USER_PROMPT.format(QUERY="query q: which {drug}?", PASSAGES=docs_str, TOPK=2)
    want = [{"role": "system", "content": GROUP_SYSTEM_PROMPT}, {"role": "user", "content": user}]
    assert messages == want
    assert templated(tokenizer, messages) == templated(tokenizer, want)
    assert render_chatml(messages) == templated(tokenizer, want)  # what the embedded model reads
    assert '{"[1]": 5, "[2]": 3, "[3]": 8}' in user and "{{" not in user
    # the shipped files: the original's strings, placeholders renamed
    book = PromptBook(task="toy")
    assert book.get("grouprank", "system").text == GROUP_SYSTEM_PROMPT
    renamed = {"{TOPK}": "{num}", "{QUERY}": "{query}", "{PASSAGES}": "{passages}"}
    text = GROUP_USER_PROMPT
    for old, new in renamed.items():
        text = text.replace(old, new)
    assert book.get("grouprank").text == text


# --- steps, options, sampling -------------------------------------------------------------


def test_each_group_step_holds_its_documents_pass_scores_and_call(tmp_path):
    rankings = {"q": {f"d{i}": float(10 - i) for i in range(5)}}
    corpus = {d: f"text of {d}" for d in rankings["q"]}
    reply = "<think>hidden</think><reason>x</reason><answer>```json\n" + '{"[2]": 7}\n```</answer>'
    results, seen, provider = run_stage(tmp_path, corpus, rankings, {"group_size": 3,
                                        "interval": 3}, respond=lambda m, p: reply)  # fmt: skip
    steps = results["q"]["steps"]
    assert [s["node"] for s in steps] == ["shuffle", "group", "group", "group", "group", "merge"]
    shuffle = steps[0]
    assert shuffle["seed"] == 666 and shuffle["stream_position"] == 1
    assert shuffle["stream_queries"] == 1 and shuffle["stream_sha256"] == stream_sha256({"q": 5})
    groups = steps[1:-1]
    assert [(s["pass"], s["group"], len(s["doc_ids"])) for s in groups] == [
        (1, 1, 3), (1, 2, 2), (2, 1, 3), (2, 2, 2)
    ]  # fmt: skip
    for s in groups:
        assert s["outcome"] == "read" and s["output"] == reply
        assert s["scores"] == [(s["doc_ids"][1], 0.7)]
        assert s["unscored"] == [d for d in s["doc_ids"] if d != s["doc_ids"][1]]
        assert s["messages"][0]["content"] == GROUP_SYSTEM_PROMPT and s["usage"]["calls"] == 1
    assert provider.calls == 4 == len(seen)
    # the kept documents are the scored ones (at most 4 of 5); interpolated, 0.6/0.4
    ranking = results["q"]["ranking"]
    scored = {d for s in groups for d, _ in s["scores"]}
    assert set(ranking) == scored
    for d, value in ranking.items():
        assert value == pytest.approx(0.6 * 0.7 + 0.4 * rankings["q"][d])
    assert steps[-1]["interpolated"] is True


def test_keep_rest_appends_the_unscored_below(tmp_path):
    rankings = {"q": {f"d{i}": float(10 - i) for i in range(6)}}
    corpus = {d: d for d in rankings["q"]}
    results, _, _ = run_stage(tmp_path, corpus, rankings,
                              {"depth": 4, "k": 2, "keep_rest": True, "passes": 1},
                              respond=lambda m, p: "no json")  # fmt: skip
    ranking = results["q"]["ranking"]
    assert len(ranking) == 6 and list(ranking)[4:] == ["d4", "d5"]
    values = list(ranking.values())
    assert values == sorted(values, reverse=True) and len(set(values)) >= 4
    # the original keeps only the top k: every group unread scores 0 (L167)
    alone, _, _ = run_stage(tmp_path, corpus, rankings, {"depth": 4, "k": 2, "passes": 1},
                            respond=lambda m, p: "no json")  # fmt: skip
    assert len(alone["q"]["ranking"]) == 2


def test_a_reply_the_client_cannot_use_scores_its_group_0():
    from agents.llm.errors import LLMReplyError

    class Unreadable:  # an LLM whose every reply the client refuses (agents.llm.errors)
        async def chat(self, messages, **params):
            raise LLMReplyError("the server's reply is not UTF-8 (byte 0xff at 9)")

    ctx = StageContext(corpus={"a": "A", "b": "B"}, task="toy", options={**DEFAULTS, "passes": 1},
                       llm=Unreadable(), prompts=PromptBook(task="toy"))  # fmt: skip
    result = asyncio.run(build_grouprank(ctx).rerank("q", "Q", {"a": 2.0, "b": 1.0}))
    (group,) = [s for s in result["steps"] if s["node"] == "group"]
    assert group["outcome"] == "unusable-reply" and "not UTF-8" in group["reason"]
    assert sorted(group["scores"]) == [("a", 0), ("b", 0)] and group["usage"]["calls"] == 1
    assert result["ranking"] == {"a": 0.4 * 2.0, "b": 0.4 * 1.0}  # 0.6 * 0 + 0.4 * first


def test_the_sampling_is_the_originals_and_the_budget_an_option():
    source = "AQ-MedAI/Diver Reranker/rerank_groupwise.py L40"
    model = "hosted_vllm/AQ-MedAI/Diver-GroupRank-7B"
    for preset in ("default", "paper"):
        sent = resolve(preset, "grouprank", "group", model, "vllm", options=DEFAULTS)
        expected = {"temperature": 0.3, "top_p": 0.8, "max_tokens": 8000}
        if preset == "paper":  # vLLM's SamplingParams defaults, sent: not generation_config's
            expected |= {"top_k": -1, "repetition_penalty": 1.0}
        assert sent.params == expected and sent.sources["temperature"].startswith(source)
        assert sent.sources["max_tokens"].startswith(source)
    small = resolve("paper", "grouprank", "group", model, "vllm", options={"max_tokens": 64})
    assert small.params["max_tokens"] == 64 and small.sources["max_tokens"] == "option max_tokens"
    given = resolve("default", "grouprank", "group", model, "vllm", {"max_tokens": 32},
                    {"max_tokens": 64})  # fmt: skip
    assert given.params["max_tokens"] == 32 and given.sources["max_tokens"] == "given"
    api = resolve("paper", "grouprank", "group", "openai/gpt-4o-mini", "auto", options=DEFAULTS)
    assert "repetition_penalty" not in api.params and "top_k" not in api.params
    o3 = resolve("default", "grouprank", "group", "openai/o3-mini", "auto",
                  options={"max_tokens": 500})  # fmt: skip
    assert o3.params == {"max_completion_tokens": 500}


def test_bad_options_are_refused():
    from agents.config.run_config import ConfigError
    from agents.config.stages import parse_stage

    for key in ("depth", "k", "group_size", "interval", "passes", "max_doc_chars", "max_tokens"):
        with pytest.raises(ConfigError, match=f"{key} must be at least 1"):
            parse_stage(f"grouprank,{key}=0")


# --- end to end ---------------------------------------------------------------------------


def all_nines(messages, params):
    n = len(re.findall(r"^\[\d+\]\. ", messages[-1]["content"], re.MULTILINE))
    body = ", ".join(f'"[{i}]": {9 - i % 3}' for i in range(1, n + 1))
    return "<reason>ok</reason>\n<answer>\n```json\n{" + body + "}\n```\n</answer>"


def toy_run(tmp_path, toy_dir, *flags, name="r"):
    assert main([
        "--agent", "none", "--dataset", str(toy_dir), "--model", "scripted/x",
        "--runs-dir", str(tmp_path / "runs"), "--cache-dir", str(tmp_path / "cache"),
        "--run-name", name, "--quiet", *flags,
    ]) == 0  # fmt: skip
    return tmp_path / "runs" / name


def test_a_run_counts_outcomes_records_sampling_and_replays_the_originals_stream(tmp_path, toy_dir):
    budgets = []

    def respond(messages, params):
        budgets.append(params.get("max_tokens"))
        return all_nines(messages, params)

    provider = scripted.install(respond)
    run_dir = toy_run(
        tmp_path, toy_dir, "--rerank", "grouprank,group_size=2,interval=2,max_tokens=77"
    )
    first = read_records(run_dir / "toy" / "queries.jsonl")
    staged = read_records(run_dir / "toy" / "rerank-1-grouprank" / "queries.jsonl")
    calls = sum(s["node"] == "group" for r in staged.values() for s in r["steps"])
    assert provider.calls == calls and set(budgets) == {77}  # the option reached every call
    summary = json.loads((run_dir / "toy" / "metrics.json").read_text())
    assert summary["outcomes"]["rerank-1-grouprank"] == {"read": calls}
    config = json.loads((run_dir / "config.json").read_text())
    sent = config["sampling"]["rerank-1-grouprank/group"]
    assert (
        sent["params"]["max_tokens"] == 77 and sent["sources"]["max_tokens"] == "option max_tokens"
    )
    assert config["rerank"][0]["options"]["max_tokens"] == 77
    assert {n for n in config["prompts"] if n.startswith("grouprank")} == {
        "grouprank/default", "grouprank/system", "grouprank/passage"
    }  # fmt: skip
    # the stream over the task's queries in order, each list as the first stage left it
    lists = {q: [d for d, _ in first[q]["ranking"]] for q in QUERIES}
    reranker = original(None, None)
    reranker.tokenizer = types.SimpleNamespace(apply_chat_template=lambda m, **k: "")
    ctxs = {q: [{"id": d, "text": ""} for d in ids] for q, ids in lists.items()}
    info = []
    for _ in range(2):
        info += reranker.prepare_groups_one_epoch(
            [{"qid": q, "query": ""} for q in QUERIES], ctxs, 100, 2, 2
        )[1]
    lengths = {q: len(ids) for q, ids in lists.items()}
    for position, q in enumerate(QUERIES, 1):
        steps = staged[q]["steps"]
        assert [s["doc_ids"] for s in steps if s["node"] == "group"] == [
            dids for qid, dids in info if qid == q
        ]
        assert (steps[0]["stream_position"], steps[0]["stream_queries"]) == (position, 3)
        assert steps[0]["stream_sha256"] == stream_sha256(lengths)


def test_the_trace_shows_each_groups_documents_and_scores(tmp_path, toy_dir, capsys):
    from agents.commands.trace import main as trace_main

    scripted.install(all_nines)
    run_dir = toy_run(tmp_path, toy_dir, "--rerank", "grouprank,group_size=2,interval=2")
    capsys.readouterr()
    assert trace_main([str(run_dir), "q1"]) == 0
    out = capsys.readouterr().out
    assert "seed 666: query 1 of 3 in the stream" in out
    assert "pass 1, group 1: " in out and "pass 2, group 1: " in out
    assert re.search(r"scores: d\d \[R1\] 0\.8|scores: d\d 0\.8", out)
    assert "read: read" in out


def test_a_run_over_fewer_queries_draws_another_stream_and_says_so(tmp_path, toy_dir):
    scripted.install(all_nines)
    whole = toy_run(tmp_path, toy_dir, "--rerank", "grouprank", name="whole")
    part = toy_run(tmp_path, toy_dir, "--rerank", "grouprank", "--limit", "2", name="part")

    def shuffles(run_dir):
        staged = read_records(run_dir / "toy" / "rerank-1-grouprank" / "queries.jsonl")
        return {q: r["steps"][0] for q, r in staged.items()}

    a, b = shuffles(whole), shuffles(part)
    assert a["q1"]["stream_queries"] == 3 and b["q1"]["stream_queries"] == 2
    assert a["q1"]["stream_sha256"] != b["q1"]["stream_sha256"]


def test_a_rerank_of_a_run_file_replays_the_stream_in_the_tasks_order(tmp_path, toy_dir):
    from agents.commands.rerank import main as rerank_main

    scripted.install(all_nines)
    run_file = tmp_path / "first.trec"
    lines = [f"{q} Q0 d{i} {i} {10 - i}.0 x" for q in reversed(list(QUERIES)) for i in (1, 2, 3)]
    run_file.write_text("\n".join(lines) + "\n")
    assert rerank_main([
        str(run_file), "--task", str(toy_dir), "--rerank", "grouprank", "--rerank-model",
        "scripted/x",
        "--runs-dir", str(tmp_path / "runs"), "--cache-dir", str(tmp_path / "cache"),
        "--run-name", "f", "--quiet",
    ]) == 0  # fmt: skip
    staged = read_records(tmp_path / "runs" / "f" / "toy" / "rerank-1-grouprank" / "queries.jsonl")
    stream = shuffle_stream(dict.fromkeys(QUERIES, 3), 2, 666)  # the task's order, not the file's
    for position, q in enumerate(QUERIES, 1):
        steps = staged[q]["steps"]
        assert steps[0]["stream_position"] == position
        ids = ["d1", "d2", "d3"]
        assert [s["doc_ids"] for s in steps if s["node"] == "group"] == [
            [ids[i] for i in order] for order in stream[q]
        ]


def test_the_dry_run_counts_20_calls_a_query_at_the_originals_settings(tmp_path):
    from agents.config.settings import from_settings
    from agents.execution.dry_run import estimate

    def stage(spec: str):
        config = from_settings({"dataset": "demo", "model": "scripted/x", "agent": "none",
                                "rerank": [spec], "limit": 1, "runs_dir": str(tmp_path / "runs"),
                                "cache_dir": str(tmp_path / "cache")})  # fmt: skip
        return [s for _, s in estimate(config).stages][1]

    full = stage("grouprank")
    assert full.calls == 20 and full.completion_tokens == 20 * 8000
    small = stage("grouprank,depth=20,passes=1,max_tokens=100")
    assert small.calls == 2 and small.completion_tokens == 2 * 100


@pytest.mark.slow
def test_the_embedded_model_runs_the_stage_on_the_demo(tmp_path):
    """Real llama.cpp replies with a small budget (the option): every group is read or scored
    0 and counted; a rerun is the same ranking, from the cache."""

    def run(runs_dir):
        assert main([
            "--agent", "none", "--dataset", "demo", "--model", "local/smollm2-135m",
            "--rerank", "grouprank,depth=2,group_size=2,interval=2,max_doc_chars=120,max_tokens=32",
            "--limit", "2", "--runs-dir", str(runs_dir), "--cache-dir", str(tmp_path / "cache"),
            "--run-name", "e", "--quiet",
        ]) == 0  # fmt: skip
        run_dir = runs_dir / "e" / "demo"
        return read_records(run_dir / "rerank-1-grouprank" / "queries.jsonl"), run_dir

    staged, run_dir = run(tmp_path / "runs")
    groups = [s for r in staged.values() for s in r["steps"] if s["node"] == "group"]
    # 2 queries, 2 passes, one group of 2 in each
    assert len(groups) == 2 * 2 and all(r["error"] is None for r in staged.values())
    assert all(s["usage"]["completion_tokens"] <= 32 for s in groups)  # the option's budget
    outcomes = json.loads((run_dir / "metrics.json").read_text())["outcomes"]
    assert sum(outcomes["rerank-1-grouprank"].values()) == len(groups)
    rerun, _ = run(tmp_path / "again")
    assert {q: r["ranking"] for q, r in rerun.items()} == {
        q: r["ranking"] for q, r in staged.items()
    }
    assert all(s["cached"] for r in rerun.values() for s in r["steps"] if s["node"] == "group")


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory):
    from tests.agents.llm.test_llamacpp_server import _serve

    yield from _serve(tmp_path_factory.mktemp("grouprank-server"), api_key=None, n_ctx=4096)


@pytest.mark.slow
def test_through_a_llamacpp_server_the_groups_equal_the_embedded_models(llama_server, tmp_path):
    """The stage's calls through a real llama.cpp server (prompts rendered by the model's own
    chat template, at temperature 0) read the same replies as the embedded model's."""
    from tests.agents.llm.test_llamacpp_server import SERVED, gguf_template

    template = gguf_template("smollm2-135m", tmp_path)
    spec = "grouprank,depth=2,group_size=2,interval=2,passes=1,max_doc_chars=120,max_tokens=24"

    def run(name, *flags):
        assert main([
            "--agent", "none", "--dataset", "demo", "--limit", "1", "--rerank", spec,
            "--temperature", "0", "--runs-dir", str(tmp_path / "runs"),
            "--cache-dir", str(tmp_path / name), "--run-name", name, "--quiet", *flags,
        ]) == 0  # fmt: skip
        path = tmp_path / "runs" / name / "demo" / "rerank-1-grouprank" / "queries.jsonl"
        return read_records(path)

    local = run("local", "--model", "local/smollm2-135m", "--local-instances", "1")
    before = len(llama_server.completions_endpoint())
    served = run("served", "--model", f"openai/{SERVED}", "--api-base", llama_server.url,
                 "--server", "llamacpp", "--chat-template", str(template))  # fmt: skip

    def calls(records):
        return [(s["doc_ids"], s["messages"], s["output"], s["outcome"])
                for r in records.values() for s in r["steps"] if s["node"] == "group"]  # fmt: skip

    assert calls(served) == calls(local) and len(calls(served)) == 1
    assert {q: r["ranking"] for q, r in served.items()} == {
        q: r["ranking"] for q, r in local.items()
    }
    # each call after its one-token reset request (serving.FreshPrompts)
    assert len(llama_server.completions_endpoint()) - before == 2
