"""ReasonRank (`reasonrank`): listwise reasoning reranking as its own code runs it.

ReasonRank (Liu et al. 2025; github.com/8421BCD/ReasonRank at 06721fd, the code its R2MED
figures come from) reranks the top 100 in one pass of windows of 20 moving up by 10
(``run_rank_llm.sh``: ``--window_size 20 --step_size 10 --retrieval_num 100 --num_passes 1
--prompt_mode rank_GPT_reasoning``). Each window is one call:

* messages (``rerank/rank_listwise_os_llm.py`` L199-216): the system prompt
  ``system_prompt_reasoning`` of ``listwise_prompt_r1.toml`` (``prompts/reasonrank/system.txt``)
  and one user turn: ``add_prefix_prompt`` (``utils.py`` L63) and a newline, every passage as
  ``f"[{rank}] {content}\\n"``, then ``add_post_prompt`` (L72-74); the whole chat-templated
  prompt mended by ``ftfy.fix_text`` (L216). ftfy mends a text line by line and, from the first
  line holding a ``<`` on, leaves HTML entities as they are; a chat template's prompt opens
  with one (``<|im_start|>``), so no entity of the prompt is unescaped there. Here the server
  applies the template, so each message's text is mended line by line with unescaping off
  (`mended_prompt`): the same text, entities in the query kept
  (tests/agents/rerank/test_reasonrank.py compares both over a chat template);
* the query with ``[n]`` written ``(n)`` and stripped (L194, ``rankllm.py`` L529-530);
* each passage (``utils.py`` L89-109, ``truncate_by_word=False`` at L210): stripped, mended by
  ``fix_text`` (entities unescaped there, as ftfy's default does in a text without ``<``), cut
  to its first ``DOC_MAXLEN`` = 512 tokens of the checkpoint's tokenizer (L99, L210;
  ``index_and_topics.py`` L249-257, ``run_rank_llm.py`` L282), ``[n]`` written ``(n)``.
  Option ``tokenizer`` names the tokenizer; under ``--preset paper`` it is the served
  checkpoint's own unless given (`paper_tokenizer`: the model's name after its provider, loaded
  when the stage is built, refused in one line naming the option if it cannot be), and the
  embedded model cuts with its own; otherwise litellm's tokenizer for the model cuts them (an
  approximation), and every step says which (``passages_cut_by``);
* sampling (L118-122): temperature 0, ``max_tokens`` = ``reasoning_maxlen`` + 100 = 3,172,
  the stage's option ``max_tokens`` (the sampling table under both presets: the budget is the
  protocol's; ``--max-tokens`` fills it where the stage's spec does not); ``--preset paper``
  also sends the top_p, top_k and repetition_penalty vLLM's ``SamplingParams`` defaulted to;
* the reply read by ``rankllm.py`` ``_clean_response`` (L456-474): the ``<answer>`` of
  ``<think>.*?</think>\\s*<answer>(.*?)</answer>`` searched in the lower-cased reply; failing
  that, the text after its last ``<answer>``; failing that, the whole reply (the original
  prints "the reasoning length is too long." and reads the digits of the reasoning). Every
  non-digit becomes a space; ids minus one, repeats dropped, ids outside the window dropped,
  the missing appended in their order (``receive_permutation`` L511-527). A digit that is not
  an ASCII number (``int`` fails) leaves the window as it was (L512-516).

Each reply's outcome (`OUTCOMES`) is in its trace step and counted in the task's summary. The
reply is read whole: litellm moves a leading ``<think>...</think>`` into ``reasoning_content``,
and it is put back (`agents.llm.text.whole_reply`), so the pattern sees what the model
wrote and the trace keeps the reasoning as received.
The windows are ReasonRank's own loop (`windows`), which differs from RankGPT's and from
``llm-listwise``'s at the top of a list whose length is not a multiple of the step.

The new list's scores (option ``scores``): ``first-stage`` (default) as ReasonRank's published
runs hold them: ``receive_permutation`` gives each position the score its candidate there had
(``rankllm.py`` L526), so the list keeps the first stage's scores position by position, the run
file writes them with 6 decimals (``utils.py`` L194) and ``trec_eval.py`` L27 reads them back;
pytrec_eval then orders equal scores itself, by doc id descending (as eval/evaluate.py does
with ``--ties trec``), not in the model's order. ``positions`` scores the model's order n..1
instead, which every reader keeps as it is.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from agents.llm.embedded.names import LOCAL_PREFIX
from agents.llm.errors import LLMReplyError
from agents.llm.sampling import OPEN_SERVERS, REASONRANK_MAXLEN
from agents.llm.steps import llm_call
from agents.llm.text import whole_reply
from agents.rerank import StageContext, ranked
from agents.shared.specs import StageSpec
from eval.usage import Usage

FAMILY = "reasonrank"
PARTS = ("system", "passage", "rank")  # besides default.txt, the user turn's opening
DEFAULTS: dict[str, Any] = {
    # the run's --model (and its --api-base); agents.config.run_config fills in the name
    "model": "",
    "api_base": "",
    "depth": 100,  # --retrieval_num
    "window": 20,  # --window_size
    "step": 10,  # --step_size
    "passage_tokens": 512,  # DOC_MAXLEN of every r2med_* dataset
    # a Hugging Face tokenizer (folder or hub id) to cut passages with, as the original cuts
    # with the checkpoint's; "" = the LLM's own (the embedded model's) or litellm's for it
    # (--preset paper: the served checkpoint's, `paper_tokenizer`)
    "tokenizer": "",
    "max_tokens": REASONRANK_MAXLEN + 100,  # each window's budget, L121
    "scores": "first-stage",  # SCORES
}
# what the new list's scores are: each position's first-stage score (rankllm.py L526, written
# to 6 decimals, utils.py L194), or the model's order as n..1
SCORES = ("first-stage", "positions")
# listwise_prompt_r1.toml L5 ``pattern``, searched with re.DOTALL (rankllm.py L458-459)
ANSWER = re.compile(r"<think>.*?</think>\s*<answer>(.*?)</answer>", re.DOTALL)
_BRACKETED_NUMBER = re.compile(r"\[(\d+)\]")
OUTCOMES = {
    "answer": "the <think>...</think> <answer>...</answer> pattern matched",
    "open-answer": "no full pattern: the text after the last <answer> was read",
    "no-answer": "no <answer>: the digits of the whole reply were read (the original's path)",
    "unexpected": "a non-ASCII digit in the answer: the window kept its order",
    "unusable-reply": "the reply could not be read as received (reason says why: not UTF-8, "
    "no choices, emptied by the length limit): the window kept its order",
}


def check_options(options: dict[str, Any]) -> None:
    for key in ("depth", "window", "step", "passage_tokens", "max_tokens"):
        if options[key] < 1:
            raise ValueError(f"{key} must be at least 1, got {options[key]}")
    if options["scores"] not in SCORES:
        raise ValueError(f"scores must be one of {', '.join(SCORES)}, got {options['scores']!r}")


def paper_tokenizer(model: str, server: str) -> str | None:
    """The tokenizer ``--preset paper`` cuts passages with when none is given: the served
    checkpoint's own, named by the model's name after its litellm provider
    (``hosted_vllm/liuwenhan/reasonrank-32B`` -> ``liuwenhan/reasonrank-32B``), as ReasonRank
    cuts with its checkpoint's (rank_listwise_os_llm.py L99, L210). None where there is none to
    name: the embedded and scripted models (cut with their own) and API models (``server`` is
    the resolved kind, agents.llm.serving.resolve_server)."""
    if model.startswith((LOCAL_PREFIX, "scripted/")):
        return None
    if not (model.startswith("hosted_vllm/") or server in OPEN_SERVERS):
        return None
    _, slash, name = model.partition("/")
    return name if slash and name else model


def windows(n: int, depth: int, window: int, step: int) -> list[tuple[int, int]]:
    """The [start, end) positions each window reranks, in the order ReasonRank runs them.

    ``reranker.py`` L73-75 caps the end at the list's length and the window at it too;
    ``rankllm.py`` L366-384 then loops while ``end > 0 and start + step != 0``, clamping the
    start at 0 inside the loop, so a clamped window is always the last. 100/20/10 gives nine
    windows, (80, 100) up to (0, 20); a list of 25 gives (5, 25) and (0, 15).
    """
    end = min(depth, n)
    start = end - min(window, n)
    out: list[tuple[int, int]] = []
    while end > 0 and start + step != 0:
        start = max(start, 0)
        out.append((start, end))
        end -= step
        start -= step
    return out


def replace_number(text: str) -> str:
    """``[n]`` written ``(n)``, so that a passage cannot look like an identifier (L529-530)."""
    return _BRACKETED_NUMBER.sub(r"(\1)", text)


def clean_response(reply: str) -> tuple[str, str]:
    """The digits ``_clean_response`` keeps of a reply (others as spaces), and its outcome."""
    match = ANSWER.search(reply.lower())
    if match:
        text, outcome = match.group(1).strip(), "answer"
    elif "<answer>" in reply:
        text, outcome = reply.split("<answer>")[-1], "open-answer"
    else:
        text, outcome = reply, "no-answer"
    return "".join(c if c.isdigit() else " " for c in text).strip(), outcome


def receive_permutation(reply: str, k: int) -> tuple[list[int], str]:
    """The window's new order as 0-based positions, and the reply's outcome."""
    digits, outcome = clean_response(reply)
    try:
        listed = [int(x) - 1 for x in digits.split()]
    except ValueError:  # "unexcepted output!": the window is left as it was (L514-516)
        return list(range(k)), "unexpected"
    order = [i for i in dict.fromkeys(listed) if 0 <= i < k]
    return order + [i for i in range(k) if i not in order], outcome


def first_stage_scores(
    before: Sequence[str], ranking: Mapping[str, float], after: Sequence[str]
) -> dict[str, float]:
    """``after`` scored as ReasonRank's published runs score it: position i keeps the score of
    the document that held it in ``before`` (rankllm.py L526), written with 6 decimals and read
    back (utils.py L194, trec_eval.py L27)."""
    return {d: float(f"{ranking[before[i]]:.6f}") for i, d in enumerate(after)}


def load_tokenizer(name: str) -> Any:
    """A Hugging Face tokenizer by hub id or folder, loaded when the stage is built so that a
    wrong name stops the run before any call (one line, naming the option)."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(name)
    except (OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ValueError(f"option tokenizer={name}: no tokenizer loads from it ({first})") from None


def mended(text: str) -> str:
    """A passage as ``convert_doc_to_prompt_content`` mends it (utils.py L103): ftfy's
    defaults, HTML entities unescaped in lines before the first ``<``."""
    from ftfy import fix_text  # imported when a window is built: naming the stage stays light

    return fix_text(text)


def mended_prompt(text: str) -> str:
    """A message's text as ``fix_text`` over the whole chat-templated prompt mends it (L216):
    line by line, with HTML unescaping off, since the prompt's first line holds a ``<``."""
    from ftfy import fix_text

    return fix_text(text, unescape_html=False)


class ReasonRankReranker:
    def __init__(self, ctx: StageContext) -> None:
        self.ctx = ctx
        self.options = ctx.options
        # loaded here, not per query, so that building the stage records every prompt it sends
        self.opening = ctx.prompts.get(FAMILY)
        self.parts = {part: ctx.prompts.get(FAMILY, part) for part in PARTS}
        self._tokenizer = (
            load_tokenizer(ctx.options["tokenizer"]) if ctx.options["tokenizer"] else None
        )
        self.cut_by = f"the tokenizer of {ctx.options['tokenizer']}" if self._tokenizer else ""

    def passage(self, doc_id: str) -> str:
        """A passage as ``convert_doc_to_prompt_content`` writes it (utils.py L89-109)."""
        content = mended(self.ctx.corpus[doc_id].strip())
        return replace_number(self.cut(content, self.options["passage_tokens"]))

    def cut(self, text: str, limit: int) -> str:
        if self._tokenizer is None:
            text, self.cut_by = self.ctx.llm.truncate_tokens(text, limit)
            return text
        tok = self._tokenizer
        return tok.convert_tokens_to_string(tok.tokenize(text)[:limit])

    def messages(self, query: str, doc_ids: list[str]) -> list[dict[str, str]]:
        values = {"query": replace_number(query).strip(), "num": len(doc_ids)}
        user = self.opening.render(**values)
        for rank, doc_id in enumerate(doc_ids, 1):
            user += self.parts["passage"].render(rank=rank, passage=self.passage(doc_id))
        user += self.parts["rank"].render(**values)
        system = self.parts["system"].render()
        return [
            {"role": "system", "content": mended_prompt(system)},
            {"role": "user", "content": mended_prompt(user)},
        ]

    async def rerank(
        self, query_id: str, query: str, ranking: Mapping[str, float]
    ) -> dict[str, Any]:
        before = list(ranking)
        order = before[:]
        steps: list[dict[str, Any]] = []
        o = self.options
        for start, end in windows(len(order), o["depth"], o["window"], o["step"]):
            ids = order[start:end]
            messages = self.messages(query, ids)
            try:
                completion, call = await llm_call(self.ctx, "window", messages)
            except LLMReplyError as exc:  # the window keeps its order
                steps.append(unusable_window(start, end, ids, messages, str(exc)))
                continue
            # the reply as the model wrote it: litellm moves a leading <think>...</think>
            # into reasoning_content, which ReasonRank's pattern (and the trace) needs
            reply = whole_reply(completion)
            call = {**call, "output": reply}
            permutation, outcome = receive_permutation(reply, len(ids))
            order[start:end] = [ids[i] for i in permutation]
            steps.append({
                "node": "window",
                "window": [start, end],
                "doc_ids": ids,
                "outcome": outcome,
                "permutation": [i + 1 for i in permutation],
                "order": order[start:end],
                "passages_cut_by": self.cut_by,
                # the call's output is the whole reply, the reasoning too
                **{k: v for k, v in call.items() if k != "node"},
            })  # fmt: skip
        if o["scores"] == "positions":
            return {"ranking": ranked(order), "steps": steps}
        return {"ranking": first_stage_scores(before, ranking, order), "steps": steps}


def unusable_window(
    start: int, end: int, ids: list[str], messages: list[dict], reason: str
) -> dict[str, Any]:
    """The step of a window whose reply could not be read: the window keeps its order."""
    return {
        "node": "window", "window": [start, end], "doc_ids": ids, "outcome": "unusable-reply",
        "reason": reason, "permutation": list(range(1, len(ids) + 1)), "order": ids,
        "messages": messages, "output": None, "usage": Usage.unread_call().to_dict(),
    }  # fmt: skip


def build_reasonrank(ctx: StageContext) -> ReasonRankReranker:
    return ReasonRankReranker(ctx)


REASONRANK = StageSpec(
    "reasonrank",
    "ReasonRank: listwise reasoning over windows of 20 by 10 (its prompt, budget and parser)",
    build_reasonrank,
    uses_llm=True,
    llm_nodes=("window",),
    prompts=(FAMILY,),
    defaults=DEFAULTS,
    check_options=check_options,
    models={"tokenizer": "tokenizer"},
    preset_options=lambda preset, model, server: (
        {"tokenizer": name}
        if preset == "paper" and (name := paper_tokenizer(model, server))
        else {}
    ),
)
