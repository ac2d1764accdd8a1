"""Listwise LLM reranking with RankGPT's sliding window (`llm-listwise`) and InsertRank's
variant that shows each passage's first-stage score (`insertrank`).

The model sees a window of passages numbered [1]..[k] and answers with a permutation such as
``[2] > [1] > [3]``. Windows move from the bottom of the top-``depth`` list to its top, so a
relevant passage found low can climb one step per window (RankGPT, Sun et al. 2023,
`sliding_windows` in github.com/sunnweiwei/RankGPT rank_gpt.py). The messages are RankGPT's
multi-turn form: one user turn per passage, each acknowledged by the assistant.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from agents.llm.errors import LLMReplyError, is_context_overflow
from agents.llm.steps import llm_call

# Light imports only: agents.config.registry pulls in this module, and agents.llm.steps needs no LLM
# library until a call is made.
from agents.llm.text import answer_text, whole_reply
from agents.rerank import StageContext, ranked
from agents.shared.specs import StageSpec
from eval.usage import Usage

# doc_words counts whitespace-separated words, which is what RankGPT's "max_length = 300"
# actually cuts (`" ".join(content.split()[:300])`); it is not a tokenizer count.
# model "" is the run's --model (and its --api-base); agents.config.run_config fills in the name
DEFAULTS: dict[str, Any] = {
    "model": "",
    "api_base": "",
    "depth": 100,
    "window": 20,
    "step": 10,
    "doc_words": 300,
}
INSERTRANK_DEFAULTS: dict[str, Any] = {**DEFAULTS, "score_name": "BM25"}
# Fixed files of a prompt family besides its main one (default.txt: the opening user turn).
PARTS = ("system", "ready", "passage", "received", "rank")

_BRACKETED = re.compile(r"\[\s*(\d+)\s*\]")
_CHAIN = re.compile(r"\d+(?:\s*>\s*\d+)+")
_NUMBER = re.compile(r"\d+")
NO_PERMUTATION = "no usable passage id in the reply; the window keeps its order"
# how each window's reply was read: its step's outcome, counted in the task's metrics.json
OUTCOMES = {
    "permutation": "the reply listed every id of the window once",
    "repaired": "ids outside the window or repeated were dropped, or missing ones appended "
    "in their previous order (note says which)",
    "no-permutation": "no usable passage id in the reply: the window kept its order",
    "unusable-reply": "the reply could not be read (reason says why): the window kept its order",
}
# Where a window does not fit the model's context, its passages are cut to half as many words
# and it is sent again, down to this; every window starts again from doc_words, so a prompt
# never depends on which query ran first.
MIN_DOC_WORDS = 8


def check_options(options: dict[str, Any]) -> None:
    for key in ("depth", "window", "step", "doc_words"):
        if options[key] < 1:
            raise ValueError(f"{key} must be at least 1, got {options[key]}")
    if options["window"] < 2:
        raise ValueError(f"window must hold at least 2 passages, got {options['window']}")
    if options["step"] > options["window"]:
        # a step longer than the window would skip passages between windows
        raise ValueError(f"step ({options['step']}) must not exceed window ({options['window']})")


def check_insertrank_options(options: dict[str, Any]) -> None:
    check_options(options)
    if not str(options["score_name"]).strip():
        raise ValueError("score_name must not be empty")


def windows(n: int, depth: int, window: int, step: int) -> list[tuple[int, int]]:
    """The [start, end) positions each window reranks, in the order they run.

    RankGPT's arithmetic: end = min(depth, n), start = end - window, both moving up by
    ``step``. RankGPT stops as soon as start < 0, which never reranks the top when
    (end - window) is not a multiple of step, and reranks nothing when n < window; here the
    last window is clamped to start at 0 instead, so the list's top is always judged. Where
    RankGPT's loop ends exactly at 0 (e.g. 100/20/10: 9 windows) the two agree. Windows of
    one passage are left out: there is nothing to order.
    """
    end = min(depth, n)
    start = end - window
    out: list[tuple[int, int]] = []
    while end > 0:
        lo = max(start, 0)
        if end - lo >= 2:
            out.append((lo, end))
        if lo == 0:
            break
        end -= step
        start -= step
    return out


def parse_permutation(text: str, k: int) -> tuple[list[int], str | None]:
    """The model's reply as a full permutation of 1..k, and a note on anything repaired.

    Only the text after a reasoning model's last ``</think>`` counts. Ids are read from
    brackets (``[3] > [1]``) when there are any, else from bare numbers chained by ``>``
    (``3 > 1``), else from any number in the reply, which is RankGPT's `clean_response`
    (digits only); the tiers keep a stray "the 20 passages" from becoming an id when the
    reply also has a proper permutation. Duplicates keep their first place, ids outside 1..k
    are dropped, and ids left out follow the listed ones in their previous order.
    """
    answer = answer_text(text)
    found = [int(m) for m in _BRACKETED.findall(answer)]
    if not found:
        found = [int(n) for chain in _CHAIN.findall(answer) for n in _NUMBER.findall(chain)]
    if not found:
        found = [int(n) for n in _NUMBER.findall(answer)]
    listed: list[int] = []
    duplicates: list[int] = []
    out_of_range: list[int] = []
    for i in found:
        if not 1 <= i <= k:
            out_of_range.append(i)
        elif i in listed:
            duplicates.append(i)
        else:
            listed.append(i)
    if not listed:
        return list(range(1, k + 1)), NO_PERMUTATION
    missing = [i for i in range(1, k + 1) if i not in listed]
    notes = []
    if out_of_range:
        notes.append(f"ignored ids outside 1..{k}: {out_of_range}")
    if duplicates:
        notes.append(f"ignored repeated ids: {duplicates}")
    if missing:
        notes.append(f"ids not listed, kept in their previous order after the others: {missing}")
    return listed + missing, "; ".join(notes) or None


def cut_words(text: str, words: int) -> str:
    return " ".join(text.split()[:words])


class ListwiseReranker:
    """One task's listwise stage; `show_scores` is InsertRank's change to the prompt."""

    def __init__(self, ctx: StageContext, family: str, show_scores: bool) -> None:
        self.ctx = ctx
        self.options = ctx.options
        self.show_scores = show_scores
        # loaded here, not per query, so that building the stage records every prompt it sends
        self.opening = ctx.prompts.get(family)
        self.parts = {part: ctx.prompts.get(family, part) for part in PARTS}
        self.constants = {"score_name": ctx.options["score_name"]} if show_scores else {}

    def messages(
        self, query: str, doc_ids: list[str], scores: Mapping[str, float], words: int
    ) -> list[dict[str, str]]:
        fixed = {**self.constants, "query": query, "num": len(doc_ids)}
        parts = self.parts
        messages = [
            {"role": "system", "content": parts["system"].render(**fixed)},
            {"role": "user", "content": self.opening.render(**fixed)},
            {"role": "assistant", "content": parts["ready"].render(**fixed)},
        ]
        for rank, doc_id in enumerate(doc_ids, 1):
            values = {
                **fixed,
                "rank": rank,
                "passage": cut_words(self.ctx.corpus[doc_id], words),
                "score": f"{scores[doc_id]:.4g}",
            }
            messages.append({"role": "user", "content": parts["passage"].render(**values)})
            messages.append({"role": "assistant", "content": parts["received"].render(**values)})
        messages.append({"role": "user", "content": parts["rank"].render(**fixed)})
        return messages

    async def ask(
        self, query: str, ids: list[str], scores: Mapping[str, float]
    ) -> tuple[str, dict[str, Any], int]:
        """One window's call, its passages cut shorter while the prompt overflows the context."""
        words = self.options["doc_words"]
        while True:
            try:
                completion, call = await llm_call(
                    self.ctx, "window", self.messages(query, ids, scores, words)
                )
                # the reply as received: litellm moves a leading <think>...</think> into
                # reasoning_content; the trace keeps it, and answer_text reads past it
                text = whole_reply(completion)
                return text, {**call, "output": text}, words
            except Exception as exc:
                if not is_context_overflow(exc) or words <= MIN_DOC_WORDS:
                    raise
                words = max(MIN_DOC_WORDS, words // 2)

    async def rerank(
        self, query_id: str, query: str, ranking: Mapping[str, float]
    ) -> dict[str, Any]:
        order = list(ranking)
        steps: list[dict[str, Any]] = []
        o = self.options
        for start, end in windows(len(order), o["depth"], o["window"], o["step"]):
            ids = order[start:end]
            try:
                text, call, words = await self.ask(query, ids, ranking)
            except LLMReplyError as exc:  # the window keeps its order
                steps.append({
                    "node": "window", "window": [start, end], "doc_ids": ids, "reply": None,
                    "permutation": list(range(1, len(ids) + 1)), "order": ids,
                    "outcome": "unusable-reply", "reason": str(exc), "note": str(exc),
                    "output": None, "usage": Usage.unread_call().to_dict(),
                })  # fmt: skip
                continue
            permutation, note = parse_permutation(text, len(ids))
            outcome = (
                "no-permutation"
                if note == NO_PERMUTATION
                else "repaired"
                if note
                else "permutation"
            )
            if words < o["doc_words"]:
                fitted = f"passages cut to {words} words to fit the model's context"
                note = f"{fitted}; {note}" if note else fitted
            order[start:end] = [ids[i - 1] for i in permutation]
            steps.append({
                "node": "window",
                "window": [start, end],
                "doc_ids": ids,
                "reply": answer_text(text),
                "permutation": permutation,
                "order": order[start:end],
                "doc_words": words,
                "note": note,
                "outcome": outcome,
                **{k: v for k, v in call.items() if k != "node"},
            })  # fmt: skip
        return {"ranking": ranked(order), "steps": steps}


def build_listwise(ctx: StageContext) -> ListwiseReranker:
    return ListwiseReranker(ctx, "rerank-listwise", show_scores=False)


def build_insertrank(ctx: StageContext) -> ListwiseReranker:
    return ListwiseReranker(ctx, "insertrank", show_scores=True)


LISTWISE = StageSpec(
    "llm-listwise",
    "RankGPT listwise LLM reranking, sliding window from the bottom of the top-depth list up",
    build_listwise,
    uses_llm=True,
    llm_nodes=("window",),
    prompts=("rerank-listwise",),
    defaults=DEFAULTS,
    check_options=check_options,
)
INSERTRANK = StageSpec(
    "insertrank",
    "InsertRank: listwise LLM reranking with each passage's first-stage score in the prompt",
    build_insertrank,
    uses_llm=True,
    llm_nodes=("window",),
    prompts=("insertrank",),
    defaults=INSERTRANK_DEFAULTS,
    check_options=check_insertrank_options,
)
