"""Rank1 (`rank1`): pointwise reasoning reranking as its own code runs it.

Rank1 (Weller et al. 2025; github.com/orionw/rank1 at 30585c2, ``rank1.py``) judges each
(query, passage) alone, on a raw prompt (no chat template; vLLM's ``LLM.generate``, L184):

* the prompt (``return_prompt`` L241-247, ``prompts/rank1/default.txt``): "Determine if the
  following passage is relevant ...", ``Query:``, ``Passage:`` and an opened ``<think>``; the
  query first goes through the dataset's instruction (``prompts.py`` ``PROMPT_DICT``, its
  ``FILL_QUERY_HERE`` our ``{query}``; L242); ``prompts.py`` has none for R2MED's tasks, so
  ``get_prompt`` returns None and the query is sent as it is (``prompts/rank1-query/``, where
  a per-task instruction may be added);
* sampling (L86-92): temperature 0, ``max_tokens`` 8,192 (``max_output_tokens``, L35: the
  stage's option ``max_tokens``, which ``--max-tokens`` fills where the stage's spec does not),
  ``logprobs=20``, stop at ``"</think> true"`` or ``"</think> false"`` (the sampling table
  under both presets; ``--preset paper`` also sends the top_p, top_k and repetition_penalty
  vLLM's ``SamplingParams`` defaulted to, which a vLLM server would otherwise take from the
  checkpoint's generation_config.json);
* the score (L197-223): at the reply's last token (the one that completed the stop string),
  P(true) / (P(true) + P(false)) from the log-probabilities of the tokens " true" and
  " false", which must both be among its alternatives;
* otherwise the reply is forced (``_fix_incomplete_responses`` L94-162): cut after its last
  ``.``, ``!`` or ``?`` (when it does not end in one), the prompt sent again as
  ``f"{prompt}\\n{cut}\\n</think>"`` for one token restricted to " true" and " false"
  (``allowed_token_ids``, temperature 0, ``logprobs=20``; one token, L128, by construction:
  no budget to set), scored the same way; a forced reply whose last position lacks either
  token scores 0.5 (L140-149);
* the order: scores are kept at full precision (``all_scores``, L156, L219) and MTEB hands them
  to pytrec_eval (``run_mteb.py`` L82-91), which ranks them as float32, equal scores by doc id
  descending; so does this stage (option ``ties``: ``trec``, the default; ``previous`` keeps
  the previous stage's order among equal scores). The trace keeps each score unrounded.

The reply is read as the model wrote it: the prompt opens ``<think>``, so a reasoning parser
that splits the reply moves what precedes the model's ``</think>`` into ``reasoning_content``;
`agents.llm.text.whole_reply` (``opened``) puts it back (``reasoning</think>text``)
before the reply is cut for its forced prompt (L113-124), and the trace keeps it whole.

Restricting the forced token needs the ids of " true" and " false" (the first token of each,
L73-74) and a server that restricts: ``force=auto`` uses vLLM's ``allowed_token_ids`` for
``--server vllm`` and the in-process providers, a logit bias of +100 on both ids for other
servers (llama.cpp, OpenAI-like; the ratio P(true) / P(false) is unchanged by adding the same
bias to both), and no restriction when no ids can be had (``tokenizer=`` names a Hugging Face
tokenizer; else the embedded model's own, else the server's tokenize endpoint): the forced
token is then read from the likeliest 20 as it comes, stated in the step as ``forced_by``.
llama-cpp-python's server reports the log-probabilities from before the bias, so the two are
read from the model's own likeliest 20 there: the same ratio as the embedded model's masked
pair (tests/agents/llm/test_llamacpp_server.py), 0.5 when either is outside them.
Each judgement's outcome (`OUTCOMES`) is in its trace step and counted in the summary: a
reply the stage cannot use (unreadable, no choices; log-probabilities of " true" or " false"
that are missing or impossible, which `agents.llm.responses` reads as None; a /tokenize answer
of the wrong shape) is a named outcome with its reason, scored 0.5 as an unread reply, never a
non-finite score or an exception's text. A judgement's step counts every call it made: its
``usage`` is the judging call's plus the forced call's (which ``forced.usage`` shows alone).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping, Sequence
from typing import Any

from agents.llm.embedded.names import LOCAL_PREFIX, is_local, local_name
from agents.llm.errors import LLMReplyError
from agents.llm.sampling import RANK1_MAX_OUTPUT
from agents.llm.steps import llm_complete_call
from agents.llm.text import whole_reply
from agents.rerank import StageContext, ranked
from agents.rerank.cross import reorder
from agents.rerank.reasonrank import load_tokenizer
from agents.shared.specs import StageSpec
from eval.usage import Usage

FAMILY = "rank1"
QUERY_FAMILY = "rank1-query"  # prompts.py PROMPT_DICT: the dataset's instruction
FORCES = ("auto", "allowed_token_ids", "logit_bias", "none")
DEFAULTS: dict[str, Any] = {
    # the run's --model (and its --api-base); agents.config.run_config fills in the name
    "model": "",
    "api_base": "",
    "depth": 100,
    "force": "auto",
    # a Hugging Face tokenizer (folder or hub id) for the ids of " true" and " false"
    "tokenizer": "",
    "max_tokens": RANK1_MAX_OUTPUT,  # each judgement's thinking budget, L35
    "ties": "trec",  # TIES
}
# equal scores: as pytrec_eval ranks the original's (float32, doc id descending), or in the
# previous stage's order
TIES = ("trec", "previous")
STOP = ["</think> true", "</think> false"]  # rank1.py L90
TRUE, FALSE = " true", " false"  # rank1.py L73-74
TOP_LOGPROBS = 20  # rank1.py L89, L129
UNREAD_SCORE = 0.5  # rank1.py L146
BIAS = 100.0
OUTCOMES = {
    "closed": "the reply closed </think> with true or false: scored at its last token",
    "forced": "forced with '\\n</think>' and one true/false token: scored there",
    "forced-unread": "the forced token's alternatives lacked true or false: scored 0.5",
    "forced-bad-logprobs": "the forced token's logprob of true or false was missing or "
    "impossible (null, NaN, above 0; both -inf): scored 0.5",
    "forced-unrestricted": "forced, unrestricted: the server's /tokenize answer was unusable "
    "(forced_by says why)",
    "unusable-reply": "the reply could not be read (reason says why): scored 0.5",
    "forced-unusable-reply": "the forced reply could not be read (reason says why): scored 0.5",
}


def check_options(options: dict[str, Any]) -> None:
    for key in ("depth", "max_tokens"):
        if options[key] < 1:
            raise ValueError(f"{key} must be at least 1, got {options[key]}")
    for key, allowed in (("force", FORCES), ("ties", TIES)):
        if options[key] not in allowed:
            raise ValueError(f"{key} must be one of {', '.join(allowed)}, got {options[key]!r}")


Logprobs = Sequence[tuple[str, float | None, Sequence[tuple[str, float | None]]]]


def read_true(logprobs: Logprobs | None) -> tuple[float | None, str]:
    """P(true) / (P(true) + P(false)) at the last token and "read"; (None, "absent") when its
    alternatives (the sampled token among them) lack " true" or " false" (rank1.py L200-219);
    (None, "bad-logprobs") when either's logprob is missing or impossible (None: see
    `agents.llm.responses.logprob_value`) or both are -inf (no probability to share)."""
    if not logprobs:
        return None, "absent"
    token, logprob, top = logprobs[-1]
    seen = dict(top)
    if seen.get(token) is None:
        seen[token] = logprob
    if TRUE not in seen or FALSE not in seen:
        return None, "absent"
    # impossible values (NaN, above 0) are missing, however the logprobs were decoded
    from agents.llm.responses import logprob_value  # imports litellm: not at naming the stage

    lp_true, lp_false = logprob_value(seen[TRUE]), logprob_value(seen[FALSE])
    if lp_true is None or lp_false is None or lp_true == lp_false == -math.inf:
        return None, "bad-logprobs"
    # the two-way softmax, exact where exp() of either alone underflows to 0
    gap = lp_false - lp_true
    return (0.0 if gap > 700 else 1.0 / (1.0 + math.exp(gap))), "read"


def true_probability(logprobs: Logprobs | None) -> float | None:
    """P(true) / (P(true) + P(false)) at the last token, or None when it cannot be read."""
    return read_true(logprobs)[0]


def cut_to_sentence(text: str) -> str:
    """A reply cut after its last sentence end, as ``_fix_incomplete_responses`` cuts it
    (L112-119)."""
    text = text.rstrip()
    if not text.endswith((".", "!", "?")):
        last = max(text.rfind("."), text.rfind("!"), text.rfind("?"))
        if last != -1:
            text = text[: last + 1]
    return text.strip()


def forced_prompt(prompt: str, reply: str) -> str:
    return f"{prompt}\n{cut_to_sentence(reply)}\n</think>"  # rank1.py L121-124


class Rank1Reranker:
    def __init__(self, ctx: StageContext) -> None:
        self.ctx = ctx
        self.options = ctx.options
        # loaded here, not per query, so that building the stage records every prompt it sends
        self.prompt = ctx.prompts.get(FAMILY)
        self.instruction = ctx.prompts.get(QUERY_FAMILY)  # by task, as prompts.py keys it
        self._force: tuple[str, dict[str, Any]] | None = None
        self.tokenize_fault = False  # the server's /tokenize answer could not be read
        name = self.options["tokenizer"]
        self.hub_tokenizer = load_tokenizer(name) if name else None  # refused before any call

    def render(self, query: str, passage: str) -> str:
        return self.prompt.render(query=self.instruction.render(query=query), passage=passage)

    async def force(self) -> tuple[str, dict[str, Any]]:
        """How the forced token is restricted (a ``forced_by`` note) and the request's
        parameters that do it; decided once, on the first forced reply (a server may be
        asked to tokenize: off the event loop)."""
        if self._force is None:
            self._force = await asyncio.to_thread(self._restriction)
        return self._force

    def _restriction(self) -> tuple[str, dict[str, Any]]:
        llm, how = self.ctx.llm, self.options["force"]
        custom = llm.model.startswith((LOCAL_PREFIX, "scripted/"))
        if how == "auto":
            native = custom or llm.server == "vllm"
            how = "allowed_token_ids" if native else "logit_bias"
        if how == "none":
            return "none: asked for no restriction", {}
        try:
            ids = self.token_ids()
        except LLMReplyError as exc:  # a /tokenize answer of the wrong shape
            self.tokenize_fault = True
            return f"none: {exc}; the token is read from the likeliest 20 as it comes", {}
        if ids is None:
            return (
                "none: no tokenizer gives the ids of ' true' and ' false' (tokenizer= names "
                "one); the token is read from the likeliest 20 as it comes",
                {},
            )
        if how == "allowed_token_ids":
            return f"allowed_token_ids {ids}", {"extra_body": {"allowed_token_ids": ids}}
        return f"logit_bias +{BIAS:g} on {ids}", {"logit_bias": {str(i): BIAS for i in ids}}

    def token_ids(self) -> list[int] | None:
        """The first token of " true" and of " false" (rank1.py L73-74), from the tokenizer
        option, the embedded model's own, or the server's; None when none gives them."""
        llm, name = self.ctx.llm, self.options["tokenizer"]
        if name:
            tok = self.hub_tokenizer
            return [tok(w, add_special_tokens=False).input_ids[0] for w in (TRUE, FALSE)]
        if is_local(llm.model):
            from agents.llm.embedded.pool import tokenizer

            tok = tokenizer(local_name(llm.model), llm.cache_dir)
            return [tok.tokenize(w)[0] for w in (TRUE, FALSE)]
        from agents.llm.serving import server_token_ids

        found = [server_token_ids(llm.api_base, llm.server, llm.model, w) for w in (TRUE, FALSE)]
        return [ids[0] for ids in found] if all(found) else None  # type: ignore[index]

    async def judge(self, query: str, passage: str) -> dict[str, Any]:
        prompt = self.render(query, passage)
        try:
            completion, call = await llm_complete_call(
                self.ctx, "judge", prompt, stop=STOP, logprobs=True, top_logprobs=TOP_LOGPROBS
            )
        except LLMReplyError as exc:
            return unread(prompt, "unusable-reply", str(exc))
        # the call's output is the whole reply, the reasoning too
        reply = whole_reply(completion, opened=True)
        step: dict[str, Any] = {k: v for k, v in call.items() if k != "node"} | {"output": reply}
        score, _ = read_true(completion.logprobs)
        if score is not None:
            return {**step, "score": score, "outcome": "closed"}
        forced_by, restriction = await self.force()
        sent = forced_prompt(prompt, reply)
        try:
            forced, forced_call = await llm_complete_call(
                self.ctx, "judge", sent,
                max_tokens=1, temperature=0.0, logprobs=True, top_logprobs=TOP_LOGPROBS,
                **restriction,
            )  # fmt: skip
        except LLMReplyError as exc:
            failed = unread(sent, "forced-unusable-reply", str(exc))
            usage = Usage.total(Usage.from_dict(c["usage"]) for c in (step, failed))
            return {
                **step,
                "score": UNREAD_SCORE,
                "outcome": failed.pop("outcome"),
                "reason": failed.pop("reason"),
                "forced_by": forced_by,
                "forced": {k: failed[k] for k in ("prompt", "output", "usage")},
                "usage": usage.to_dict(),
            }
        score, how = read_true(forced.logprobs)
        outcome = "forced" if score is not None else "forced-unread"
        out = {**step}
        if how == "bad-logprobs":
            outcome = "forced-bad-logprobs"
            out["reason"] = "the logprob of ' true' or ' false' is missing or impossible"
        elif score is not None and self.tokenize_fault:
            outcome = "forced-unrestricted"
        usage = Usage.total(Usage.from_dict(c["usage"]) for c in (call, forced_call))
        return {
            **out,
            "score": UNREAD_SCORE if score is None else score,
            "outcome": outcome,
            "forced_by": forced_by,
            "forced": {k: v for k, v in forced_call.items() if k != "node"},
            "usage": usage.to_dict(),  # both calls: the forced one is a call too
        }

    async def rerank(
        self, query_id: str, query: str, ranking: Mapping[str, float]
    ) -> dict[str, Any]:
        order = list(ranking)
        top = order[: self.options["depth"]]
        steps: list[dict[str, Any]] = []
        scores: dict[str, float] = {}
        for rank, doc_id in enumerate(top, 1):
            step = await self.judge(query, self.ctx.corpus[doc_id])
            steps.append({"node": "judge", "doc_id": doc_id, "rank": rank, **step})
            scores[doc_id] = step["score"]
        # pytrec_eval's order of the full-precision scores (or the previous one among ties)
        at = reorder(top, [scores[d] for d in top], self.options["ties"])
        return {"ranking": ranked([top[i] for i in at] + order[len(top) :]), "steps": steps}


def unread(prompt: str, outcome: str, reason: str) -> dict[str, Any]:
    """The step of a judgement whose reply could not be read: scored as an unread one."""
    return {
        "prompt": prompt,
        "output": None,
        "score": UNREAD_SCORE,
        "outcome": outcome,
        "reason": reason,
        "usage": Usage.unread_call().to_dict(),
    }


def build_rank1(ctx: StageContext) -> Rank1Reranker:
    return Rank1Reranker(ctx)


RANK1 = StageSpec(
    "rank1",
    "Rank1: the model reasons on each passage alone; P(true) at the token that ends </think>",
    build_rank1,
    uses_llm=True,
    llm_nodes=("judge",),
    prompts=(FAMILY, QUERY_FAMILY),
    defaults=DEFAULTS,
    check_options=check_options,
    models={"tokenizer": "tokenizer"},
)
