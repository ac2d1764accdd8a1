"""Pointwise LLM reranking (`llm-pointwise`): the model judges each (query, passage) alone.

With token log-probabilities (litellm's ``logprobs`` / ``top_logprobs``: OpenAI, vLLM,
SGLang, llama.cpp's server, the embedded models) the score is P(yes) / (P(yes) + P(no)) at
the answer token, summed over its spellings ("yes", " Yes", "true", ...), the relevance
score of monoT5 / RankLLaMA-style judges. Where the provider returns none, the model grades
the passage 0-3 in text and the score is grade / 3, so both land on one 0-1 scale.

``reason=true`` lets the model reason before it judges (Rank1, Weller et al. 2025): only the
text after a reasoning model's last ``</think>`` is read, and the judgement is the last
yes/no (or grade) in it rather than the first. Each passage is one call; a query's passages
are judged one after another so that ``--concurrency`` stays the number of calls in flight.
Each judgement's outcome (`OUTCOMES`) is in its step and counted in the task's metrics.json,
and its ``usage`` counts every call it made (a logprobs call answered without any, then the
grade call).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from agents.llm.errors import LLMReplyError
from agents.llm.steps import llm_call
from agents.llm.text import THINK_END, answer_text, whole_reply
from agents.rerank import StageContext, by_score, ranked
from agents.rerank.listwise import cut_words
from agents.shared.specs import StageSpec
from eval.usage import Usage

FAMILY = "rerank-pointwise"
JUDGES = ("auto", "logprobs", "grade")
DEFAULTS: dict[str, Any] = {
    # the run's --model (and its --api-base); agents.config.run_config fills in the name
    "model": "",
    "api_base": "",
    "depth": 100,
    "doc_words": 300,
    # auto: logprobs where the provider returns them, else a 0-3 grade in text
    "judge": "auto",
    "reason": False,
    # tokens the answer may take when the model does not reason (reasoning: the run's
    # --max-tokens); a few, since models write "Yes." or " yes\n"
    "answer_tokens": 8,
    "top_logprobs": 20,  # OpenAI's and vLLM's default cap
}
YES = frozenset({"yes", "true"})
NO = frozenset({"no", "false"})
GRADES = range(4)
_WORD = re.compile(r"[a-z]+|\d")
_GRADE = re.compile(r"(?<!\d)[0-3](?!\d)")
NO_JUDGEMENT = "no judgement in the reply; scored 0 and kept in its previous order among ties"
# how each judgement was read: its step's outcome, counted in the task's metrics.json
OUTCOMES = {
    "logprobs": "P(yes) from the judgement token's logprobs",
    "text": "no yes/no token among the logprobs: the reply's yes/no read from its text",
    "bad-logprobs": "the judgement token's yes/no logprobs were missing or impossible (null, "
    "NaN, above 0, all -inf): the reply's text read (note says why)",
    "grade": "a 0-3 grade read from the reply: grade / 3",
    "no-judgement": "no judgement in the reply: scored 0",
    "unusable-reply": "the reply could not be read (reason says why): scored 0",
}


def check_options(options: dict[str, Any]) -> None:
    for key in ("depth", "doc_words", "answer_tokens"):
        if options[key] < 1:
            raise ValueError(f"{key} must be at least 1, got {options[key]}")
    if not 0 <= options["top_logprobs"] <= 20:
        raise ValueError(f"top_logprobs must be 0..20, got {options['top_logprobs']}")
    if options["judge"] not in JUDGES:
        raise ValueError(f"judge must be one of {', '.join(JUDGES)}, got {options['judge']!r}")


def _word(token: str) -> str:
    """A token's text as a judgement word: " Yes." -> "yes", "3" -> "3"."""
    found = _WORD.findall(token.strip().lower())
    return found[0] if len(found) == 1 else ""


def answer_start(tokens: Sequence[str]) -> int:
    """The index of the first token after the last ``</think>`` (0 when there is none)."""
    text = ""
    ends: list[int] = []
    for i, token in enumerate(tokens):
        text += token
        if text.endswith(THINK_END) or THINK_END in token:
            ends.append(i + 1)
    return ends[-1] if ends else 0


def yes_probability(
    logprobs: Sequence[tuple[str, float | None, Sequence[tuple[str, float | None]]]], last: bool
) -> float | None:
    """P(yes) / (P(yes) + P(no)) at the answer's judgement token, from its alternatives.

    The judgement token is the answer's first (or ``last``) sampled yes/no token; when the
    model wrote none ("The answer is..." cut short), it is the first answer position whose
    alternatives hold a yes or a no, the position a yes/no judge reads. None when no
    position does; `BadLogprobs` when that position's yes/no logprobs are missing or
    impossible (None: `agents.llm.responses.logprob_value`) or all -inf.
    """
    tokens = [token for token, _, _ in logprobs]
    answer = range(answer_start(tokens), len(tokens))
    sampled = [i for i in answer if _word(tokens[i]) in YES | NO]
    if sampled:
        at = sampled[-1] if last else sampled[0]
    else:
        offered = [i for i in answer if any(_word(t) in YES | NO for t, _ in logprobs[i][2])]
        if not offered:
            return None
        at = offered[0]
    token, logprob, top = logprobs[at]
    # the sampled token is among the alternatives unless top_logprobs was 0; count it once
    seen = {alt: lp for alt, lp in top}
    if seen.get(token) is None:
        seen[token] = logprob
    judged = [(alt, lp) for alt, lp in seen.items() if _word(alt) in YES | NO]
    if any(lp is None for _, lp in judged):
        raise BadLogprobs("a yes/no token's logprob is missing or impossible (null, NaN, >0)")
    p_yes = sum(math.exp(lp) for alt, lp in judged if _word(alt) in YES)
    p_no = sum(math.exp(lp) for alt, lp in judged if _word(alt) in NO)
    if p_yes + p_no == 0.0:
        raise BadLogprobs("the yes/no tokens' probabilities are all 0 (-inf or underflow)")
    return p_yes / (p_yes + p_no)


class BadLogprobs(ValueError):
    """Logprobs at the judgement token that give no probability (`yes_probability`)."""


def parse_grade(text: str, last: bool) -> int | None:
    """The 0-3 grade in the reply's answer (its first, or ``last``, lone digit 0-3)."""
    found = _GRADE.findall(answer_text(text))
    if not found:
        return None
    return int(found[-1] if last else found[0])


def parse_yes_no(text: str, last: bool) -> bool | None:
    """The reply's yes/no (or true/false) answer as a bool; None when it gives none."""
    words = [w for w in _WORD.findall(answer_text(text).lower()) if w in YES | NO]
    if not words:
        return None
    return (words[-1] if last else words[0]) in YES


class PointwiseReranker:
    def __init__(self, ctx: StageContext) -> None:
        self.ctx = ctx
        self.options = o = ctx.options
        reason = o["reason"]
        # loaded here, not per query, so that building the stage records every prompt it sends
        self.judge_prompt = ctx.prompts.get(FAMILY, "reason") if reason else ctx.prompts.get(FAMILY)
        self.grade_prompt = ctx.prompts.get(FAMILY, "reason-grade" if reason else "grade")
        # set when a provider answers a logprobs request without them: it has none to give
        self.provider_has_no_logprobs = o["judge"] == "grade"

    def _params(self, with_logprobs: bool) -> dict[str, Any]:
        params: dict[str, Any] = {}
        if not self.options["reason"]:
            params["max_tokens"] = self.options["answer_tokens"]
        if with_logprobs:
            # drop_params: a provider that cannot return logprobs answers without them
            # (the grade fallback) instead of refusing the request
            params.update(logprobs=True, top_logprobs=self.options["top_logprobs"])
            if self.options["judge"] == "auto":
                params["drop_params"] = True
        return params

    async def judge(self, query: str, passage: str) -> dict[str, Any]:
        """One passage's judgement: its step (the call, the reading, the score)."""
        last = self.options["reason"]
        values = {"query": query, "passage": passage}
        spent: list[dict[str, Any]] = []  # a logprobs call answered without them, if any
        if not self.provider_has_no_logprobs:
            messages = [{"role": "user", "content": self.judge_prompt.render(**values)}]
            try:
                completion, call = await llm_call(self.ctx, "judge", messages, **self._params(True))
            except LLMReplyError as exc:
                return _unusable(messages, str(exc))
            text, logprobs = whole_reply(completion), completion.logprobs
            if logprobs is not None:
                outcome, note = "logprobs", None
                try:
                    score = yes_probability(logprobs, last)
                except BadLogprobs as exc:
                    score, outcome, note = None, "bad-logprobs", f"{exc}; read the text"
                if score is None:  # the model wrote no yes/no: its text may still say
                    answer = parse_yes_no(text, last)
                    score = None if answer is None else float(answer)
                    if outcome == "logprobs":
                        outcome = "no-judgement" if answer is None else "text"
                        note = NO_JUDGEMENT if answer is None else "no yes/no token; read the text"
                # what the score was read from: the logprobs, else the reply's text
                source = (
                    "logprobs" if outcome == "logprobs" else "text" if score is not None else None
                )
                return {**_judged(call, text, score, source, note), "outcome": outcome}
            if self.options["judge"] == "logprobs":
                raise RuntimeError(
                    f"{self.ctx.llm.model} returned no logprobs; use judge=grade or judge=auto"
                )
            self.provider_has_no_logprobs = True
            spent.append(call["usage"])
        messages = [{"role": "user", "content": self.grade_prompt.render(**values)}]
        try:
            completion, call = await llm_call(self.ctx, "judge", messages, **self._params(False))
        except LLMReplyError as exc:
            return _unusable(messages, str(exc), spent)
        text = whole_reply(completion)
        grade = parse_grade(text, last)
        score = None if grade is None else grade / 3
        step = _judged(call, text, score, "grade", None if grade is not None else NO_JUDGEMENT)
        # every call counts: the one answered without logprobs too
        usage = Usage.total(Usage.from_dict(u) for u in [*spent, call["usage"]])
        return {**step, "outcome": "grade" if grade is not None else "no-judgement",
                "usage": usage.to_dict()}  # fmt: skip

    async def rerank(
        self, query_id: str, query: str, ranking: Mapping[str, float]
    ) -> dict[str, Any]:
        order = list(ranking)
        top = order[: self.options["depth"]]
        steps: list[dict[str, Any]] = []
        scores: dict[str, float] = {}
        for rank, doc_id in enumerate(top, 1):
            passage = cut_words(self.ctx.corpus[doc_id], self.options["doc_words"])
            step = await self.judge(query, passage)
            steps.append({"node": "judge", "doc_id": doc_id, "rank": rank, **step})
            scores[doc_id] = step["score"] if step["score"] is not None else 0.0
        return {"ranking": ranked(by_score(order, scores)), "steps": steps}


def _judged(
    call: dict[str, Any], text: str, score: float | None, source: str | None, note: str | None
) -> dict[str, Any]:
    return {
        "reply": answer_text(text),
        # unrounded: two confident judgements that agree to 6 decimals are not a tie
        "score": score,
        "judged_by": source,
        "note": note,
        **{k: v for k, v in call.items() if k != "node"},
        "output": text,  # the whole reply, the reasoning too
    }


def _unusable(
    messages: list[dict], reason: str, spent: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """The step of a judgement whose reply could not be read: no score (0 among ties)."""
    usage = Usage.total([*(Usage.from_dict(u) for u in spent or ()), Usage.unread_call()])
    return {
        "reply": None, "score": None, "judged_by": None, "note": reason,
        "outcome": "unusable-reply", "reason": reason, "messages": messages,
        "output": None, "usage": usage.to_dict(),
    }  # fmt: skip


def build_pointwise(ctx: StageContext) -> PointwiseReranker:
    return PointwiseReranker(ctx)


POINTWISE = StageSpec(
    "llm-pointwise",
    "the LLM judges each of the top-depth passages alone: P(yes) from logprobs, else a 0-3 grade",
    build_pointwise,
    uses_llm=True,
    llm_nodes=("judge",),
    prompts=(FAMILY,),
    defaults=DEFAULTS,
    check_options=check_options,
)
