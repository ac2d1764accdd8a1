"""DIVER's pointwise helpfulness stage (`diver-pointwise`) as its code runs it.

DIVER (AQ-MedAI/Diver at 95b111b, ``Reranker/rerank_pointwise.py``, the stage behind its
published reranker figures, ``reranker_script.sh`` L11-21) asks an LLM how helpful each of the
first stage's top documents is to the query, one document at a time:

* the documents: the first stage's top ``input_k`` by score, ties in the list's order
  (``--input_k 100``, L133 and ``reranker_script.sh`` L17), each cut to its first 15,000
  tokens of the model's tokenizer and decoded without special tokens (``truncate_text``
  L43-48, L55);
* the prompt: ``bright_general.format(query, doc)`` (L56; ``Retriever/prompts.py`` L72-85,
  ``prompts/diver-pointwise/default.txt``), which every R2MED task gets (BRIGHT's coding and
  theorem tasks have their own, L28-38);
* the call: vLLM's ``LLM.generate`` on that text, no chat template (L59), sampled at
  temperature 0.6, top_p 0.9, at most 128 tokens (L24; its ``logprobs=10`` are never read, and
  are not asked for here): the sampling table (`agents.llm.sampling`) under both presets, its
  budget the ``max_tokens`` option (``--max-tokens`` fills it where the spec does not), and
  under ``--preset paper`` vLLM's defaults for the rest (top_k off, repetition_penalty 1.0)
  sent to open models, which a vLLM server would otherwise take from the checkpoint's
  ``generation_config.json``;
* the score (L62-78): the first match of ``Relevance\\s*score[:\\s]*(10|0?\\d(\\.\\d+)?)`` in the
  reply, case-insensitive, divided by 10; no match (or no reply) scores 0. So "Relevance score:
  10" is 1.0, "relevance score 7.5" 0.75, "Relevance Score:05" 0.5 and "Relevance score: 11"
  0.1 (the alternation's ``10`` fails, ``0?\\d`` takes the "1");
* the list: the judged documents sorted by score, best first, stable (ties keep the first
  stage's order), the top ``k`` kept (``--k 100``; L81-82);
* then each score interpolated with the first stage's, ``0.5 * point + 0.5 * first`` (L169-175),
  and sorted again, stable: the ``None_reranked_score.json`` that DIVER's merges read
  (``reranker_script.sh`` L52-53; `agents.rerank.point_list`). ``interpolate=false`` keeps the
  point scores (DIVER's ``None_score.json``).

The stage's list is DIVER's file: the top ``k`` of the judged documents with their scores
(interpolated, or not), and nothing below ``depth``: an interpolated score is not comparable
with a first-stage one, so the rest cannot follow in order. The first-stage scores are the
input ranking's (DIVER's: its BM25 + dense merge, ``--fusion diver-minmax``).

The reply is read whole (`agents.llm.text.whole_reply`): a server that splits a
``<think>`` block off gets it put back, as vLLM's ``generate`` returns it. Each reply's outcome
(`OUTCOMES`) is in its trace step and counted in the task's metrics.json. Documents are cut
with the ``tokenizer`` option's Hugging Face tokenizer as the original cuts (encode, first
``max_doc_tokens`` ids, decode without special tokens, whatever the length), else with the
LLM's (`agents.llm.LLM.truncate_tokens`: the embedded model's own; litellm's for a served one,
an approximation), which leaves a text within the limit as it is. The original's batches of 10
prompts change no reply. At temperature 0.6 a reply is one draw, which no other engine replays
(the original's ``torch.manual_seed(42)``, L41, does not reach vLLM's sampler); here the first
draw is cached and every rerun reads it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from agents.llm.errors import LLMReplyError
from agents.llm.steps import llm_complete_call
from agents.llm.text import whole_reply
from agents.rerank import StageContext
from agents.rerank.reasonrank import load_tokenizer
from agents.shared.specs import StageSpec
from eval.usage import Usage

FAMILY = "diver-pointwise"
DEFAULTS: dict[str, Any] = {
    # the run's --model (and its --api-base); agents.config.run_config fills in the name
    "model": "",
    "api_base": "",
    "depth": 100,  # --input_k
    "k": 100,  # --k: the judged documents kept
    "max_doc_tokens": 15000,  # truncate_text(..., max_tokens=15000), L55
    "max_tokens": 128,  # SamplingParams(max_tokens=128), L24
    "interpolate": True,  # L169-175: the score DIVER's merges read
    "weight": 0.5,  # the point score's share of the interpolation, the first stage's 1 - it
    # a Hugging Face tokenizer (folder or hub id) to cut documents with, as the original cuts
    # with the checkpoint's; "" = the LLM's own (the embedded model's) or litellm's for it
    "tokenizer": "",
}
# rerank_pointwise.py L69, searched with re.IGNORECASE
SCORE = re.compile(r"Relevance\s*score[:\s]*(10|0?\d(\.\d+)?)", re.IGNORECASE)
UNREAD_SCORE = 0.0  # L63-65, L76-78
OUTCOMES = {
    "read": "a relevance score was read from the reply: score / 10",
    "no-score": "no 'Relevance score: X' in the reply: scored 0 (the original's exception path)",
    "unusable-reply": "the reply could not be read as received (reason says why: not UTF-8, "
    "no choices, emptied by the length limit): scored 0",
}


def check_options(options: dict[str, Any]) -> None:
    for key in ("depth", "k", "max_doc_tokens", "max_tokens"):
        if options[key] < 1:
            raise ValueError(f"{key} must be at least 1, got {options[key]}")
    if not 0.0 <= options["weight"] <= 1.0:
        raise ValueError(f"weight must be in [0, 1], got {options['weight']}")


def read_score(reply: str) -> float | None:
    """The reply's relevance score / 10, as L69-73 read it; None where L75 raises."""
    match = SCORE.search(reply)
    return float(match.group(1)) / 10 if match else None


def sort_top(scores: Mapping[str, float], k: int) -> dict[str, float]:
    """``scores`` (in the first stage's order) sorted best first, stable, the top ``k``
    (L81-82)."""
    return dict(sorted(scores.items(), key=lambda item: item[1], reverse=True)[:k])


def interpolated(
    point: Mapping[str, float], first: Mapping[str, float], weight: float
) -> dict[str, float]:
    """``weight * point + (1 - weight) * first`` for each document of ``point``, sorted again,
    stable (L170-175; 0.5 and 0.5 there)."""
    mixed = {d: (weight * s) + ((1 - weight) * first[d]) for d, s in point.items()}
    return dict(sorted(mixed.items(), key=lambda x: x[1], reverse=True))


class DiverPointwiseReranker:
    def __init__(self, ctx: StageContext) -> None:
        self.ctx = ctx
        self.options = ctx.options
        # loaded here, not per query, so that building the stage records every prompt it sends
        self.prompt = ctx.prompts.get(FAMILY)
        name = ctx.options["tokenizer"]
        self._tokenizer = load_tokenizer(name) if name else None  # refused before any call
        self.cut_by = f"the tokenizer of {name}" if name else ""

    def document(self, doc_id: str) -> str:
        """A document as ``truncate_text`` leaves it (L43-48)."""
        text, limit = self.ctx.corpus[doc_id], self.options["max_doc_tokens"]
        if self._tokenizer is None:
            text, self.cut_by = self.ctx.llm.truncate_tokens(text, limit)
            return text
        tok = self._tokenizer
        ids = tok.encode(text, add_special_tokens=False)[:limit]
        return tok.decode(ids, skip_special_tokens=True)

    async def judge(self, query: str, doc_id: str) -> dict[str, Any]:
        """One document's judgement: its step (the call, the reading, the score)."""
        prompt = self.prompt.render(query=query, passage=self.document(doc_id))
        try:
            # the budget is the sampling table's, from the option max_tokens
            completion, call = await llm_complete_call(self.ctx, "judge", prompt)
        except LLMReplyError as exc:
            return {
                "prompt": prompt, "output": None, "score": UNREAD_SCORE,
                "outcome": "unusable-reply", "reason": str(exc),
                "usage": Usage.unread_call().to_dict(),
            }  # fmt: skip
        reply = whole_reply(completion)
        score = read_score(reply)
        return {
            # the call's output is the whole reply, as vLLM's generate returns it
            **{k: v for k, v in call.items() if k != "node"},
            "output": reply,
            "score": UNREAD_SCORE if score is None else score,
            "outcome": "no-score" if score is None else "read",
        }

    async def rerank(
        self, query_id: str, query: str, ranking: Mapping[str, float]
    ) -> dict[str, Any]:
        o = self.options
        # the first stage's top depth by score, stable (L133): a list read in a run file's
        # order is put in its scores' order
        top = sorted(ranking, key=lambda d: ranking[d], reverse=True)[: o["depth"]]
        steps: list[dict[str, Any]] = []
        scores: dict[str, float] = {}
        for rank, doc_id in enumerate(top, 1):
            step = await self.judge(query, doc_id)
            steps.append({"node": "judge", "doc_id": doc_id, "rank": rank,
                          "doc_cut_by": self.cut_by, **step})  # fmt: skip
            scores[doc_id] = step["score"]
        point = sort_top(scores, o["k"])
        if not o["interpolate"]:
            return {"ranking": point, "steps": steps}
        return {"ranking": interpolated(point, ranking, o["weight"]), "steps": steps}


def build_diver_pointwise(ctx: StageContext) -> DiverPointwiseReranker:
    return DiverPointwiseReranker(ctx)


DIVER_POINTWISE = StageSpec(
    "diver-pointwise",
    "DIVER's pointwise stage: a 0-10 helpfulness score per document, then 0.5/0.5 with the "
    "first stage's",
    build_diver_pointwise,
    uses_llm=True,
    llm_nodes=("judge",),
    prompts=(FAMILY,),
    defaults=DEFAULTS,
    check_options=check_options,
    models={"tokenizer": "tokenizer"},
)
