"""DIVER's score merges against DIVER's own code (github.com/AQ-MedAI/Diver): the BM25 + dense
merge (`--fusion diver-minmax`, Retriever/merge_scores.py at 2ecd1fc), the pointwise stage
(`diver-pointwise`, Reranker/rerank_pointwise.py at 95b111b) and the point + list merge
(`point-list`, Reranker/rerank_merge_point_and_list.py at 95b111b), each original transcribed
verbatim below with its line numbers (long lines wrapped) and compared on cases where a detail
moves a ranking; scripted, demo and embedded-model runs."""

from __future__ import annotations

import asyncio
import json
import math
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from agents.commands.run import main
from agents.config.run_config import ConfigError
from agents.config.stages import parse_stage
from agents.llm import scripted
from agents.llm.errors import LLMReplyError
from agents.llm.responses import Completion
from agents.llm.sampling import resolve
from agents.rerank import StageContext
from agents.rerank.diver_pointwise import DEFAULTS, build_diver_pointwise, read_score
from agents.rerank.point_list import merge, rank_scores
from eval.records import read_records
from eval.usage import Usage
from prompts import PromptBook, load_prompt
from retrievers.config import RetrieverConfig
from retrievers.hybrid import diver_minmax, fuse_runs, merge_minmax
from retrievers.settings import DenseConfig, FusionConfig
from tests import tiny_models

# --- the originals, transcribed ---------------------------------------------------------------

# Retriever/prompts.py at 95b111b L72-85
bright_general = """A document is relevant if it contains information that helps answer or address the query.
A document is not relevant if it doesn't contain information that helps answer the query, even if it mentions similar topics.
Is the document below relevant to answering the query below?
The answer should be 'Relevance score: X.' where X is a number from 0-10. 0 means completely irrelevant, 10 means highly relevant and completely addresses the query. Don't output anything else.

Here is the query:
<start_query>
{}
<end_query>

Here is the document:
<start_document>
{}
<end_document>
"""  # noqa: E501


# fmt: off
def merge_bm25_dense_score(bm25_scores, dense_scores, wgt_dense=0.5):
    """merge_scores.py at 2ecd1fc L10-42; the two files' contents are given (L13-16) and what
    L45 writes is returned."""
    wgt_bm25 = 1 - wgt_dense

    sorted_merge_scores = {}

    for query_id in dense_scores:
        dense_dict = dense_scores[query_id]
        bm25_dict = bm25_scores.get(query_id, {})

        # Normalize scores
        dense_values = list(dense_dict.values())
        dense_max = max(dense_values) if dense_values else 0
        dense_min = min(dense_values) if dense_values else 0
        bm25_values = list(bm25_dict.values())
        bm25_max = max(bm25_values) if bm25_values else 0
        bm25_min = min(bm25_values) if bm25_values else 0

        all_docs = set(dense_dict.keys()) | set(bm25_dict.keys())

        merged_doc_score = {}
        for did in all_docs:
            xrr_norm = (dense_dict.get(did, 0) - dense_min) / (dense_max - dense_min) if (dense_max - dense_min) != 0 else 0  # noqa: E501
            bm25_norm = (bm25_dict.get(did, 0) - bm25_min) / (bm25_max - bm25_min) if (bm25_max - bm25_min) != 0 else 0  # noqa: E501

            merged_doc_score[did] = xrr_norm * wgt_dense + bm25_norm * wgt_bm25

        sorted_docs = sorted(merged_doc_score.items(), key=lambda x: x[1], reverse=True)
        sorted_merge_scores[query_id] = dict(sorted_docs[:100])
    return sorted_merge_scores
# fmt: on


class FakeVLLM:
    """What ``LLM.generate`` returns (L59-60), each prompt answered from ``replies`` by the
    first word of its document (``replies`` misses: "")."""

    def __init__(self, replies):
        self.replies = replies
        self.prompts = []

    def generate(self, prompts, sampling_params, use_tqdm=False):
        self.prompts += prompts
        docs = [re.search(r"<start_document>\n(.*)\n<end_document>", p, re.S)[1] for p in prompts]
        texts = [self.replies.get(d.split()[0] if d.split() else "", "") for d in docs]
        return [SimpleNamespace(outputs=[SimpleNamespace(text=t)]) for t in texts]


class Reranker:
    """rerank_pointwise.py at 95b111b: ``truncate_text`` (L43-48) and ``rerank`` (L50-83)
    verbatim but for its timer (L58); its tokenizer (L25) is given, its model (L26) is
    `FakeVLLM`, its prompt ``bright_general`` (L38)."""

    def __init__(self, tokenizer, replies):
        self.tokenizer = tokenizer
        self.model = FakeVLLM(replies)
        self.sampling_params = None
        self.prompt = bright_general

    # fmt: off
    def truncate_text(self, doc_text, max_tokens=100):
        doc_ids = self.tokenizer.encode(doc_text, add_special_tokens=False)
        if len(doc_ids) > max_tokens:
            doc_ids = doc_ids[:max_tokens]

        return self.tokenizer.decode(doc_ids, skip_special_tokens=True)

    def rerank(self, docs, query, topk):
        scores = []
        batch_size = 10
        for i in range(0, len(docs), batch_size):
            list_docs = docs[i:i+batch_size]
            truncated_text = [self.truncate_text(doc["text"], max_tokens=15000) for doc in list_docs]  # noqa: E501
            doc_prompts = [self.prompt.format(query, doc) for doc in truncated_text]

            output = self.model.generate(doc_prompts, self.sampling_params, use_tqdm=False)
            doc_prompt_outputs = [o.outputs[0].text for o in output]

            for j in range(len(doc_prompt_outputs)):
                if doc_prompt_outputs[j] is None:
                    print(f"Received None for prompt {i+j}, setting score to 0.")
                    scores.append(0)
                    continue
                try:
                    # match = re.search(r"Relevance\s*score[:\s]*([0-5])", doc_prompt_outputs[j], re.IGNORECASE)  # noqa: E501
                    match = re.search(r"Relevance\s*score[:\s]*(10|0?\d(\.\d+)?)", doc_prompt_outputs[j], re.IGNORECASE)  # noqa: E501

                    if match:
                        score = float(match.group(1)) / 10
                        scores.append(score)
                    else:
                        raise ValueError("Score not found in expected format")
                except:  # noqa: E722
                    print("In exception!! {}".format(doc_prompt_outputs[j]))  # noqa: UP032
                    scores.append(0)

        ranking = {doc["id"]: score for doc, score in zip(docs, scores)}  # noqa: B905
        ranking = dict(sorted(ranking.items(), key=lambda item: item[1], reverse=True)[:topk])
        return ranking
    # fmt: on


def original_pointwise(model, query, scores, documents, input_k, k):
    """One query of rerank_pointwise.py's main (L131-141) and its interpolation (L169-175),
    verbatim: (the reranked scores, the interpolated ones). Its ``assert len(cur_score) ==
    len(sorted_scores)`` (L139) is left out: it holds only where k >= input_k."""
    # fmt: off
    all_scores = {"q": scores}
    new_scores = {}
    for qid, scores in all_scores.items():
        docs = []
        sorted_scores = sorted(scores.items(),key=lambda x:x[1],reverse=True)[:input_k]
        for did, _ in sorted_scores:
            docs.append([did, documents[did]])

        ctxs = [{'id': did, 'text': documents[did]} for did, _ in sorted_scores]
        cur_score = model.rerank(query=query, docs=ctxs, topk=k)

        new_scores[qid] = cur_score

    # break ties by interpolating with the retriever scores
    retriever_interpolated_scores = {}
    for qid in new_scores:
        retriever_interpolated_scores[qid] = {}
        for did in new_scores[qid]:
            retriever_interpolated_scores[qid][did] = (0.5 * new_scores[qid][did]) + (0.5 * all_scores[qid][did])  # noqa: E501
        retriever_interpolated_scores[qid] = dict(sorted(retriever_interpolated_scores[qid].items(),key=lambda x:x[1],reverse=True))  # noqa: E501
    return new_scores["q"], retriever_interpolated_scores["q"]
    # fmt: on


# fmt: off
def reassign_score(scores):
    """rerank_merge_point_and_list.py at 95b111b L14-21."""
    # 排第一的分数为1，其他文档分数按排名log缩放
    for qid in scores:
        num_docs = len(scores[qid])  # noqa: F841
        for rank, did in enumerate(scores[qid]):
            scores[qid][did] = -math.log(rank + 1)

    return scores


def original_point_list(point_file, list_file):
    """rerank_merge_point_and_list.py L76 and L87 (``reassign_score`` of each file's scores,
    in the files' order) and L97-103, verbatim, for one query."""
    list_rerank_scores = reassign_score({"q": dict(list_file)})
    point_rerank_scores = reassign_score({"q": dict(point_file)})
    if point_rerank_scores is not None:
        rerank_interpolated_scores = {}
        for qid in point_rerank_scores:
            rerank_interpolated_scores[qid] = {}
            for did in point_rerank_scores[qid]:
                rerank_interpolated_scores[qid][did] = 0.6 * point_rerank_scores[qid][did] + 0.4 * list_rerank_scores[qid][did]  # noqa: E501
            rerank_interpolated_scores[qid] = dict(sorted(rerank_interpolated_scores[qid].items(),key=lambda x:x[1],reverse=True))  # noqa: E501
    return rerank_interpolated_scores["q"]
# fmt: on


class Chars:
    """A tokenizer whose tokens are characters: ``decode(encode(t)) == t``, as a checkpoint's
    is on plain text."""

    def encode(self, text, add_special_tokens=False):
        return list(text)

    def decode(self, ids, skip_special_tokens=True):
        return "".join(ids)


# --- the BM25 + dense merge (--fusion diver-minmax) ---------------------------------------------


def by_id_in_ties(merged: dict[str, float]) -> list[str]:
    return [d for d, _ in sorted(merged.items(), key=lambda x: (-x[1], x[0]))]


@pytest.mark.parametrize(
    ("bm25", "dense", "weight"),
    [
        # "d" is missing from BM25, whose lowest score is 9: it normalises to (0 - 9) / 3 = -3;
        # "c", missing from the dense list, to (0 - 0.1) / 0.8
        ({"a": 12.0, "b": 10.0, "c": 9.0}, {"a": 0.1, "d": 0.9, "b": 0.5}, 0.5),
        # a list whose scores are all equal normalises to 0, its missing documents too
        ({"a": 5.0, "b": 5.0}, {"a": 0.3, "b": 0.7, "c": 0.5}, 0.5),
        # DIVER's 0.7 for BRIGHT's coding and theorem tasks (merge_scores.py L96-97)
        ({"a": 3.0, "b": 2.0, "x": 0.5}, {"b": 0.8, "a": 0.2, "y": 0.6}, 0.7),
        # no BM25 list for the query (bm25_scores.get(query_id, {}), L22)
        ({}, {"a": 0.3, "b": 0.7}, 0.5),
        # dense scores below 0: a missing document normalises above the list's lowest
        ({"a": 2.0, "b": 1.0}, {"a": -0.5, "c": -0.1}, 0.5),
    ],
)
def test_the_merge_is_merge_bm25_dense_scores(bm25, dense, weight):
    want = merge_bm25_dense_score({"q": bm25} if bm25 else {}, {"q": dense}, weight)["q"]
    got = diver_minmax([{"q": bm25}, {"q": dense}], 100, weight)["q"]
    assert got == want  # every score, to the last bit
    assert list(got) == by_id_in_ties(want)


def test_a_document_one_list_lacks_falls_below_0_where_combsum_ranks_it_first():
    bm25, dense = {"a": 12.0, "b": 10.0, "c": 9.0}, {"a": 0.1, "d": 0.9, "b": 0.5}
    merged = merge_minmax(bm25, dense, 0.5)
    assert merged["d"] == 0.5 * 1.0 + 0.5 * -3.0 == -1.0  # (0 - 9) / (12 - 9) = -3 for BM25
    assert merged["c"] == pytest.approx(0.5 * (0 - 0.1) / 0.8)
    assert list(diver_minmax([{"q": bm25}, {"q": dense}], 10)["q"]) == ["a", "b", "c", "d"]
    # ranx's CombSUM counts a missing document 0: "d" (0 + 1) then ties "a" (1 + 0) for first
    assert list(fuse_runs([{"q": bm25}, {"q": dense}], 10, "combsum")["q"]) == ["a", "d", "b", "c"]


def test_tied_merged_scores_are_ordered_by_doc_id_and_the_list_is_cut_to_keep():
    # x: 0 * 0.5 + 1 * 0.5, y: 1 * 0.5 + 0 * 0.5; DIVER's order here is a set's (hash) order
    tied = diver_minmax([{"q": {"y": 1.0, "x": 3.0}}, {"q": {"y": 3.0, "x": 1.0}}], 10)["q"]
    assert tied == {"x": 0.5, "y": 0.5} and list(tied) == ["x", "y"]
    bm25 = {f"d{i:03}": float(200 - i) for i in range(150)}
    dense = {f"d{i:03}": (i * 37 % 151) / 151 for i in range(150)}
    want = merge_bm25_dense_score({"q": bm25}, {"q": dense})["q"]
    assert len(want) == 100
    assert fuse_runs([{"q": bm25}, {"q": dense}], 1000, "diver-minmax")["q"] == want
    assert (
        list(fuse_runs([{"q": bm25}, {"q": dense}], 1000, "diver-minmax", keep=7)["q"])
        == (list(want)[:7])
    )


def test_the_fusion_settings_are_checked():
    assert FusionConfig("diver-minmax").weight == 0.5 and FusionConfig().keep == 100
    with pytest.raises(ValueError, match=r"^fusion.weight: must be a number in \[0, 1\]"):
        FusionConfig("diver-minmax", weight=1.5)
    with pytest.raises(ValueError, match="^fusion.keep: must be a positive integer"):
        FusionConfig("diver-minmax", keep=0)
    with pytest.raises(ValueError, match="^retriever.fusion.method: diver-minmax merges two"):
        RetrieverConfig("bm25+dense+dense:x", fusion=FusionConfig("diver-minmax"))


def test_a_served_index_s_settings_hash_moves_only_with_diver_minmax_s_settings(tmp_path):
    """A retrieval server's /health hash of an rrf (or combsum, combmnz) hybrid is the one it
    had before weight and keep existed: runs bound to such a server still resume."""
    import dataclasses
    import hashlib

    from eval.datasets import load_task
    from retrievers.serve.index import fingerprint

    task = load_task("demo", tmp_path)
    rrf = RetrieverConfig("bm25+dense")
    data = rrf.to_dict()
    del data["dense"]["r2med_rules"], data["fusion"]["weight"], data["fusion"]["keep"]
    before = hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()
    assert fingerprint(task, rrf)["settings"] == before[:16]
    other = dataclasses.replace(rrf, fusion=FusionConfig("rrf", weight=0.9, keep=5))
    assert fingerprint(task, other)["settings"] == before[:16]
    hashes = {
        fingerprint(task, RetrieverConfig("bm25+dense", fusion=FusionConfig("diver-minmax", **w)))[
            "settings"
        ]
        for w in ({}, {"weight": 0.7}, {"keep": 10})
    }
    assert len(hashes) == 3


def test_a_demo_run_merges_its_members_lists_as_diver_does(tmp_path):
    """--fusion diver-minmax through agents.run on the demo (BM25 and a tiny BERT embedder):
    each query's first stage is merge_scores.py's merge of the two members' lists."""
    from eval.datasets import load_task
    from retrievers.base import SearchRequest, search_all
    from retrievers.search import build_retriever

    model = tiny_models.bert(tmp_path / "bge-tiny")
    spec, cache = f"bm25+dense:{model}", tmp_path / "cache"
    assert main([
        "--agent", "none", "--dataset", "demo", "--retriever", spec, "--fusion", "diver-minmax",
        "--fusion-depth", "150", "--fusion-weight", "0.7", "--limit", "4", "--device", "cpu",
        "--runs-dir", str(tmp_path / "runs"), "--cache-dir", str(cache), "--run-name", "f",
        "--quiet",
    ]) == 0  # fmt: skip
    run_dir = tmp_path / "runs" / "f"
    fusion = json.loads((run_dir / "config.json").read_text())["retriever"]["fusion"]
    assert fusion == {"method": "diver-minmax", "k": 60, "depth": 150, "weight": 0.7, "keep": 100}
    records = read_records(run_dir / "demo" / "queries.jsonl")
    assert len(records) == 4
    task = load_task("demo", cache)
    built = [
        build_retriever(RetrieverConfig(part, dense=DenseConfig(device="cpu")), task, cache,
                        progress=False)
        for part in ("bm25", f"dense:{model}")
    ]  # fmt: skip
    # each member's list as the run searched it: one query at a time (agent none), so that
    # the query is embedded in a batch of its own
    members = [
        {q: search_all(m, {q: SearchRequest(r["query"], query_id=q)}, 150)[q]
         for q, r in records.items()}
        for m in built
    ]  # fmt: skip
    want = merge_bm25_dense_score(members[0], members[1], 0.7)
    negative = 0
    for q, record in records.items():
        got = dict((d, s) for d, s in record["ranking"])
        # the same scores kept, each document's DIVER's to the bit; which of the documents
        # tied at the 100th score make the cut is a set's hash order there, doc ids here (the
        # tiny embedder's cosines differ in their last bits only, so ties are many)
        assert sorted(got.values()) == sorted(want[q].values())
        assert all(got[d] == s for d, s in want[q].items() if d in got)
        assert list(got) == by_id_in_ties(got)
        assert len(got) == min(100, len(set(members[0][q]) | set(members[1][q])))
        # a document one list lacks takes its raw 0 there: normalised far below the list's
        # lowest score, it is merged below 0 and never kept
        merged = merge_minmax(members[0][q], members[1][q], 0.7)
        negative += sum(s < 0 and d not in got for d, s in merged.items())
    assert negative


# --- the pointwise stage (diver-pointwise) ------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "score"),
    [
        ("Relevance score: 10", 1.0),
        ("Relevance score: 10.", 1.0),
        ("relevance score 7.5", 0.75),
        ("Relevance Score:05", 0.5),
        ("RELEVANCE SCORE: 3.25/10", 0.325),
        ("Relevancescore:3", 0.3),
        ("Relevance score: 11", 0.1),  # the alternation's 10 fails, 0?\d takes the 1
        ("Relevance score: 100", 1.0),
        ("Relevance score: .5", None),
        ("Relevance score: X.", None),
        ("The document scores 8.", None),
        ("", None),
        # the first match of the whole reply, reasoning included (vLLM's generate text)
        ("<think>Relevance score: 2?</think>\nRelevance score: 9", 0.2),
        ("Relevance score:\n\n 6", 0.6),
    ],
)
def test_a_reply_is_read_as_rerank_reads_it(reply, score):
    original = Reranker(Chars(), {"doc": reply}).rerank([{"id": "d", "text": "doc"}], "q", 1)
    assert read_score(reply) == score
    assert original["d"] == (0 if score is None else score)


def test_the_prompt_is_bright_general_byte_for_byte():
    prompt = load_prompt("diver-pointwise", task="Biology")
    query, doc = "What {is} {0} a cell?\n", "A cell is {} the unit of life. {x}"
    assert prompt.render(query=query, passage=doc) == bright_general.format(query, doc)
    path = Path(prompt.path)
    assert (
        path.read_bytes()
        == bright_general.replace("{}", "{query}", 1).replace("{}", "{passage}", 1).encode()
    )


CORPUS = {
    "d1": "Alpha tumour markers are raised in hepatoblastoma.",
    "d2": "Beta blockers slow the heart.",
    "d3": "Gamma knife radiosurgery treats small lesions.",
    "d4": "Delta waves appear in deep sleep.",
    "d5": "Epsilon toxin comes from Clostridium perfringens.",
    "d6": "Zeta potential measures colloid stability.",
}
# a first stage listed out of its scores' order (d6 belongs third): the top 5 by score are
# d5, d1, d6, d2, d3. The point scores tie d5 with d1 (0.7); the interpolation ties d2 (point
# 0.6, first 0.4) with d6 (0.4, 0.6)
FIRST = {"d5": 0.9, "d1": 0.8, "d2": 0.4, "d3": 0.35, "d4": 0.3, "d6": 0.6}
REPLIES = {
    "Alpha": "Relevance score: 7",
    "Beta": "Relevance score: 6.",
    "Gamma": "I cannot say.",
    "Delta": "relevance score 0",
    "Epsilon": "Relevance Score:07",
    "Zeta": "Relevance score: 4",
}


class FakeLLM:
    """An LLM client answering raw prompts from ``REPLIES``; a reply may come with the
    reasoning a server split off (``reasoning``) or be unusable (an LLMReplyError)."""

    model = "fake/x"

    def __init__(self, replies, reasoning=None, unusable=()):
        self.replies, self.reasoning, self.unusable = replies, reasoning or {}, unusable
        self.prompts: list[str] = []

    async def complete(self, prompt, **params):
        self.prompts.append(prompt)
        word = re.search(r"<start_document>\n(\w*)", prompt)[1]
        if word in self.unusable:
            raise LLMReplyError("fake/x: the reply was cut at its 128-token budget")
        usage = Usage(calls=1, prompt_tokens=1, completion_tokens=1)
        return Completion(self.replies.get(word, ""), "stop", usage, False, self.model,
                          reasoning=self.reasoning.get(word))  # fmt: skip

    def truncate_tokens(self, text, limit):
        return text[:limit], "characters"


def stage(llm, **options):
    ctx = StageContext(corpus=CORPUS, task="toy", options={**DEFAULTS, **options}, llm=llm,
                       prompts=PromptBook(task="toy"))  # fmt: skip
    return build_diver_pointwise(ctx)


def rerank(reranker, ranking, query="Which marker?"):
    return asyncio.run(reranker.rerank("q", query, ranking))


def test_scores_sorts_cuts_and_interpolates_as_the_original(tmp_path):
    original = Reranker(Chars(), REPLIES)
    point, mixed = original_pointwise(original, "Which marker?", FIRST, CORPUS, 5, 4)
    # the original's ties keep the first stage's order (d5, d1); k=4 drops d3
    assert point == {"d5": 0.7, "d1": 0.7, "d2": 0.6, "d6": 0.4} and list(point)[0] == "d5"
    assert list(mixed) == ["d5", "d1", "d2", "d6"] and mixed["d2"] == mixed["d6"] == 0.5
    llm = FakeLLM(REPLIES)
    got = rerank(stage(llm, depth=5, k=4, interpolate=False), FIRST)
    assert got["ranking"] == point and list(got["ranking"]) == list(point)
    got = rerank(stage(llm, depth=5, k=4), FIRST)
    assert got["ranking"] == mixed and list(got["ranking"]) == list(mixed)
    # the same prompts, in the same order (d4, sixth by score, is never sent)
    assert llm.prompts[:5] == original.model.prompts
    steps = got["steps"]
    assert [s["doc_id"] for s in steps] == ["d5", "d1", "d6", "d2", "d3"]
    assert [s["outcome"] for s in steps] == ["read", "read", "read", "read", "no-score"]
    assert [s["score"] for s in steps] == [0.7, 0.7, 0.4, 0.6, 0.0]


def test_the_interpolation_keeps_the_point_order_among_its_ties():
    # d2 (point 0.6, first 0.4) and d6 (point 0.4, first 0.6) both interpolate to 0.5: the
    # stable sort keeps d2, the better point score, first; doc ids would put d2 first too,
    # so d6 is named "d0" here
    corpus = {**CORPUS, "d0": CORPUS["d6"]}
    first = {"d0": 0.6, "d2": 0.4}
    original = Reranker(Chars(), REPLIES)
    _, mixed = original_pointwise(original, "q", first, corpus, 100, 100)
    assert mixed == {"d2": 0.5, "d0": 0.5} and list(mixed) == ["d2", "d0"]
    ctx = StageContext(corpus=corpus, task="toy", options=DEFAULTS, llm=FakeLLM(REPLIES),
                       prompts=PromptBook(task="toy"))  # fmt: skip
    got = asyncio.run(build_diver_pointwise(ctx).rerank("q", "q", first))["ranking"]
    assert list(got) == ["d2", "d0"] and got == mixed


def test_the_reply_is_read_whole_and_an_unusable_one_scores_0():
    # a server that split "<think>...</think>" off: the original reads vLLM's whole text
    llm = FakeLLM(REPLIES, reasoning={"Beta": "Relevance score: 1"}, unusable=("Alpha",))
    steps = rerank(stage(llm, depth=4, interpolate=False), FIRST)["steps"]
    by_doc = {s["doc_id"]: s for s in steps}
    assert by_doc["d2"]["output"] == "<think>Relevance score: 1</think>Relevance score: 6."
    assert by_doc["d2"]["score"] == 0.1
    assert by_doc["d1"]["outcome"] == "unusable-reply" and by_doc["d1"]["score"] == 0.0
    assert "128-token budget" in by_doc["d1"]["reason"] and by_doc["d1"]["output"] is None


def test_documents_are_cut_as_truncate_text_cuts_them(tmp_path):
    """With tokenizer= the document is always re-decoded, as L43-48 do: the tiny tokenizer's
    unknown characters (here 'é') are dropped even from a document within the limit."""
    from transformers import AutoTokenizer

    folder = tmp_path / "tok"
    tiny_models.llama_tokenizer(folder, add_eos_token=False, pad_token=None)
    tokenizer = AutoTokenizer.from_pretrained(str(folder))
    corpus = {"d1": "the café serves a longer document than the limit allows", "d2": "a cafe"}
    original = Reranker(tokenizer, {})
    llm = FakeLLM({})
    ctx = StageContext(
        corpus=corpus,
        task="toy",
        llm=llm,
        prompts=PromptBook(task="toy"),
        options={**DEFAULTS, "tokenizer": str(folder), "max_doc_tokens": 6},
    )
    reranker = build_diver_pointwise(ctx)
    for doc_id, text in corpus.items():
        assert reranker.document(doc_id) == original.truncate_text(text, max_tokens=6)
    assert (
        "é" not in reranker.document("d1")
        and len(tokenizer.encode(reranker.document("d1"), add_special_tokens=False)) <= 6
    )
    step = asyncio.run(reranker.rerank("q", "q", {"d1": 1.0}))["steps"][0]
    assert step["doc_cut_by"] == f"the tokenizer of {folder}"


def test_both_presets_send_diver_s_sampling_and_the_paper_preset_vllm_s_defaults():
    vllm = ("hosted_vllm/Qwen/Qwen2.5-32B-Instruct", "vllm")
    base = {"temperature": 0.6, "top_p": 0.9, "max_tokens": 128}
    assert resolve("default", "diver-pointwise", "judge", *vllm).params == base
    paper = resolve("paper", "diver-pointwise", "judge", *vllm)
    assert paper.params == {**base, "top_k": -1, "repetition_penalty": 1.0}
    assert "rerank_pointwise.py L24" in paper.sources["repetition_penalty"]
    # an API model takes no repetition_penalty: it is not asked for
    assert resolve("paper", "diver-pointwise", "judge", "openai/gpt-4o-mini", "auto").params == (
        base
    )
    # the budget is the option max_tokens; --max-tokens beats it
    options = {**DEFAULTS, "max_tokens": 32}
    assert (
        resolve("paper", "diver-pointwise", "judge", *vllm, None, options).params["max_tokens"]
        == 32
    )
    given = resolve("paper", "diver-pointwise", "judge", *vllm, {"max_tokens": 9}, options)
    assert given.params["max_tokens"] == 9 and given.sources["max_tokens"] == "given"


# --- the point + list merge (point-list) -------------------------------------------------------


def test_the_stages_that_fit_each_role_are_every_registered_stage_that_does():
    """FITTING, written out so that the stage needs no registry, is what the registry holds:
    the LLM stages whose calls are all the role's node, with a depth, model and server."""
    from agents.config.registry import STAGES
    from agents.rerank.point_list import FITTING, ROLES

    for role, node in ROLES.items():
        fits = {
            kind for kind, spec in STAGES.items()
            if spec.uses_llm and set(spec.llm_nodes) == {node}
            and {"depth", "model", "api_base"} <= set(spec.defaults)
        }  # fmt: skip
        assert set(FITTING[role]) == fits


def test_rank_scores_and_the_merge_are_reassign_score_and_its_loop():
    point = {"z": 3.0, "b": 2.0, "c": 1.5, "a": 1.0, "e": 0.5, "f": 0.4, "g": 0.3, "h": 0.2}
    listed = {"a": 8, "b": 7, "c": 6, "e": 5, "f": 4, "g": 3, "h": 2, "z": 1}
    want = original_point_list(point, listed)
    got = merge(list(point), list(listed), 0.6, 0.4)
    assert got == want and list(got) == list(want)
    # z (point rank 0, list rank 7) and a (point rank 3, list rank 0) tie exactly:
    # 0.4 log 8 == 0.6 log 4; the stable sort keeps z, first in the point list, before a
    assert got["z"] == got["a"] and list(got).index("z") < list(got).index("a")
    assert rank_scores(["x", "y", "w"]) == {"x": -0.0, "y": -math.log(2), "w": -math.log(3)}
    with pytest.raises(KeyError, match="lacks 'q'"):
        merge(["q", "a"], ["a"], 0.6, 0.4)


def test_point_list_takes_only_stages_that_fit_each_role():
    assert parse_stage("point-list").options["pointwise"] == "diver-pointwise"
    assert parse_stage("point-list,pointwise=rank1,listwise=reasonrank").options["depth"] == 100
    for spec, message in (
        ("point-list,pointwise=llm-listwise", "pointwise must be one of .*diver-pointwise"),
        ("point-list,listwise=rank1", "listwise must be one of .*llm-listwise"),
        ("point-list,listwise=point-list", "listwise must be one of"),
        ("point-list,pointwise=cross", "pointwise must be one of"),
    ):
        with pytest.raises(ConfigError, match=message):
            parse_stage(spec)


def test_each_role_is_sent_its_stage_s_sampling():
    """A point-list call is sampled as the stage making it would be (StageSpec.sampled_as,
    read where the run records its sampling)."""
    from agents.config.run_config import LLMConfig, RunConfig
    from agents.execution.plan import record_sampling

    def sent(spec: str) -> dict[str, dict]:
        llm = LLMConfig(model="hosted_vllm/m", server="vllm", preset="paper")
        recorded = record_sampling(RunConfig(rerank=(parse_stage(spec),), llm=llm))
        return {key.split("/")[-1]: entry["params"] for key, entry in recorded.items()}

    vllm = ("hosted_vllm/m", "vllm")
    merged = sent("point-list")
    assert merged["judge"] == resolve("paper", "diver-pointwise", "judge", *vllm).params
    assert merged["window"] == resolve("paper", "llm-listwise", "window", *vllm).params
    assert merged["judge"] != merged["window"]
    assert sent("point-list,pointwise=rank1")["judge"] == sent("rank1")["judge"]


# --- end to end ---------------------------------------------------------------------------------


def respond(messages, params):
    """Raw prompts (the pointwise judgements) by the document's first word; a listwise
    window reversed."""
    text = "\n".join(str(m.get("content") or "") for m in messages)
    if params.get("raw_prompt"):
        doc = re.search(r"<start_document>\n(.*)\n<end_document>", text, re.S)[1]
        return TOY_REPLIES.get(doc.split()[0], "I do not know.")
    k = int(re.search(r"provide you with (\d+) passages", text)[1])
    return " > ".join(f"[{i}]" for i in range(k, 0, -1))


# tests/helpers.py's toy documents by first word (d5's and d1's hold no score)
TOY_REPLIES = {
    "Insulin": "It is relevant: 3 of 10.",
    "Metformin": "Relevance score: 8",
    "Aspirin": "relevance score 10",
    "Statins": "Relevance Score:08",
}


def run(tmp_path, toy_dir, stage_spec, name):
    provider = scripted.install(respond)
    assert main([
        "--agent", "none", "--dataset", str(toy_dir), "--model", "scripted/x",
        "--rerank", stage_spec, "--runs-dir", str(tmp_path / "runs"),
        "--cache-dir", str(tmp_path / "cache"), "--run-name", name, "--quiet",
    ]) == 0  # fmt: skip
    return provider, tmp_path / "runs" / name / "toy"


def test_a_run_reranks_with_diver_pointwise_and_counts_outcomes(tmp_path, toy_dir):
    provider, task_dir = run(tmp_path, toy_dir, "diver-pointwise,depth=4", "p")
    first = read_records(task_dir / "queries.jsonl")
    staged = read_records(task_dir / "rerank-1-diver-pointwise" / "queries.jsonl")
    documents = {
        d: t
        for d, t in (
            json.loads(x).values() for x in (toy_dir / "corpus.jsonl").read_text().splitlines()
        )
    }
    outcomes: dict[str, int] = {}
    for q, record in first.items():
        scores = dict((d, s) for d, s in record["ranking"])
        _, mixed = original_pointwise(Reranker(Chars(), TOY_REPLIES), record["query"], scores,
                                      documents, 4, 100)  # fmt: skip
        ranking = dict((d, s) for d, s in staged[q]["ranking"])
        assert ranking == mixed and list(ranking) == list(mixed)
        for s in staged[q]["steps"]:
            outcomes[s["outcome"]] = outcomes.get(s["outcome"], 0) + 1
    steps = sum(len(r["steps"]) for r in staged.values())
    assert provider.calls == steps and outcomes.keys() == {"read", "no-score"}
    summary = json.loads((task_dir / "metrics.json").read_text())
    assert summary["outcomes"]["rerank-1-diver-pointwise"] == outcomes
    config = json.loads((task_dir.parent / "config.json").read_text())
    assert set(config["prompts"]) == {"diver-pointwise/default"}
    sent = config["sampling"]["rerank-1-diver-pointwise/judge"]["params"]
    assert sent == {"temperature": 0.6, "top_p": 0.9, "max_tokens": 128}


def test_a_run_merges_a_pointwise_and_a_listwise_stage(tmp_path, toy_dir):
    provider, task_dir = run(tmp_path, toy_dir, "point-list,depth=4", "pl")
    first = read_records(task_dir / "queries.jsonl")
    staged = read_records(task_dir / "rerank-1-point-list" / "queries.jsonl")
    outcomes: dict[str, int] = {}
    for q, record in staged.items():
        *calls, step = record["steps"]
        assert step["node"] == "merge"
        assert step["weights"] == {"pointwise": 0.6, "listwise": 0.4}
        assert step["pointwise_stage"]["kind"] == "diver-pointwise"
        assert step["listwise_stage"]["options"]["depth"] == 4
        # both stages reranked the same first-stage list
        before = [d for d, _ in first[q]["ranking"]]
        assert [s["doc_id"] for s in calls if s["stage"] == "diver-pointwise"] == before[:4]
        windows = [s for s in calls if s["stage"] == "llm-listwise"]
        if windows:  # the last window RankGPT runs is the list's top
            assert windows[-1]["doc_ids"][1:] == before[1 : len(windows[-1]["doc_ids"])]
        else:  # a list of one document: nothing to order
            assert [d for d, _ in step["listwise"]] == before
        want = original_point_list(step["pointwise"], step["listwise"])
        ranking = dict((d, s) for d, s in record["ranking"])
        assert ranking == want and list(ranking) == list(want)
        for s in calls:
            outcomes[s["outcome"]] = outcomes.get(s["outcome"], 0) + 1
    assert provider.calls == sum(len(r["steps"]) - 1 for r in staged.values())
    assert {o.split("/")[0] for o in outcomes} == {"diver-pointwise", "llm-listwise"}
    summary = json.loads((task_dir / "metrics.json").read_text())
    assert summary["outcomes"]["rerank-1-point-list"] == outcomes
    sampling = json.loads((task_dir.parent / "config.json").read_text())["sampling"]
    # each node is sent what its stage is sent alone
    for node, kind in (("judge", "diver-pointwise"), ("window", "llm-listwise")):
        alone = resolve("default", kind, node, "scripted/x", "auto").params
        assert sampling[f"rerank-1-point-list/{node}"]["params"] == alone


@pytest.mark.slow
def test_the_embedded_model_runs_diver_pointwise(tmp_path, toy_dir, models_cache):
    """Real llama.cpp replies on raw prompts, every one read and counted; a rerun is the same,
    from the cache."""

    def run_embedded(runs_dir):
        assert main([
            "--agent", "none", "--dataset", str(toy_dir), "--model", "local/smollm2-135m",
            "--rerank", "diver-pointwise,depth=2,max_doc_tokens=64,max_tokens=16",
            "--limit", "2", "--runs-dir", str(runs_dir), "--cache-dir", str(models_cache),
            "--run-name", "e", "--quiet",
        ]) == 0  # fmt: skip
        task_dir = runs_dir / "e" / "toy"
        return read_records(task_dir / "rerank-1-diver-pointwise" / "queries.jsonl"), task_dir

    staged, task_dir = run_embedded(tmp_path / "runs")
    steps = [s for r in staged.values() for s in r["steps"]]
    first = read_records(task_dir / "queries.jsonl")
    assert len(steps) == sum(min(2, len(r["ranking"])) for r in first.values())
    assert all(r["error"] is None for r in staged.values())
    assert all(s["doc_cut_by"] == "local/smollm2-135m's own tokenizer" for s in steps)
    assert all(s["prompt"].endswith("<end_document>\n") for s in steps)
    outcomes = json.loads((task_dir / "metrics.json").read_text())["outcomes"]
    assert sum(outcomes["rerank-1-diver-pointwise"].values()) == len(steps)
    rerun, _ = run_embedded(tmp_path / "again")
    assert {q: r["ranking"] for q, r in rerun.items()} == {
        q: r["ranking"] for q, r in staged.items()
    }
    assert all(s["cached"] for r in rerun.values() for s in r["steps"])
