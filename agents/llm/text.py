"""Reading a model's text: where a reasoning model's thinking ends and its response begins.

R2MED reads the outputs of the reasoning models it lists with one function per family
(R2MED/R2MED ``src/base.py`` L5-36, ``r1_model_list`` and ``split_response_for_r1``), and
evaluates only the response. `read_response` is that function; `reasoning_parser` names the
family of a model, by R2MED's own short names (what ``--generations r2med:<llm>`` replays) or by
the names the same models are served under (hub ids, litellm model strings):

* ``think``: the R1 distills, QwQ and Qwen3: the text after the *first* ``</think>``, stripped
  (all of it, unstripped, when there is none);
* ``huatuo-o1``: HuatuoGPT-o1: the text after the first "Final Response";
* ``sky-t1``: Sky-T1: the text between ``<|begin_of_solution|>`` and ``<|end_of_solution|>``;
* ``search-r1``: Search-R1's checkpoints: the first ``<answer>`` ... ``</answer>``;
* ``none``: any other model: the text as written.

`answer_text` (the text after the *last* ``</think>``) is for readers that look for one verdict
at the end of a reply, such as the rerank stages' judges. `whole_reply` is a reply as the model
wrote it, where a provider (or litellm) split its thinking off into ``reasoning_content``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agents.llm.responses import Completion

THINK_END = "</think>"

PARSERS = ("none", "think", "huatuo-o1", "sky-t1", "search-r1")
REASONING_SETTINGS = ("auto", *PARSERS)  # auto: from the model's name

# R2MED src/base.py L5-6 (r1_model_list) with the branch of split_response_for_r1 (L7-36) that
# reads each one.
R2MED_REASONING_MODELS: dict[str, str] = {
    **dict.fromkeys(
        ("r1-llama-8b", "r1-qwen-32b", "r1-llama-70b", "qwq-32b", "qwen3-32b", "qwen3-8b"),
        "think",
    ),
    **dict.fromkeys(("huatuo-o1-8b", "huatuo-o1-70b"), "huatuo-o1"),
    "sky-32b": "sky-t1",
    **dict.fromkeys(("qwen-7b-ins", "qwen-3b-ins"), "search-r1"),
}

# The same families under their served names, e.g. deepseek-ai/DeepSeek-R1-Distill-Qwen-32B,
# Qwen/QwQ-32B, Qwen/Qwen3-32B, FreedomIntelligence/HuatuoGPT-o1-70B, NovaSky-AI/Sky-T1-32B-
# Preview, PeterJinGo/SearchR1-nq_hotpotqa_train-qwen2.5-7b-it-em-ppo. Qwen3's hybrid models
# think unless told not to; its -Instruct-2507 releases never do.
_SERVED_NAMES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"deepseek-r1", re.IGNORECASE), "think"),
    (re.compile(r"qwq", re.IGNORECASE), "think"),
    (re.compile(r"qwen3(?!.*instruct)", re.IGNORECASE), "think"),
    (re.compile(r"huatuogpt-o1", re.IGNORECASE), "huatuo-o1"),
    (re.compile(r"sky-t1", re.IGNORECASE), "sky-t1"),
    (re.compile(r"search-?r1", re.IGNORECASE), "search-r1"),
)

_HUATUO_RESPONSE = re.compile(r"Final Response\s*(.*)", re.DOTALL)  # base.py L16
_SKY_SOLUTION = re.compile(r"<\|begin_of_solution\|>\s*([\s\S]*?)\s*<\|end_of_solution\|>")  # L23
_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)  # base.py L29


def reasoning_parser(model: str) -> str:
    """The family a model's text is read as (one of `PARSERS`), from its name.

    ``model`` is R2MED's short name ("qwq-32b") or a served name with or without its provider
    ("hosted_vllm/Qwen/QwQ-32B"); an unknown model is ``none``.
    """
    name = model.strip()
    short = name.rsplit("/", 1)[-1].lower()
    if short in R2MED_REASONING_MODELS:
        return R2MED_REASONING_MODELS[short]
    for pattern, parser in _SERVED_NAMES:
        if pattern.search(short):
            return parser
    return "none"


def resolve_parser(setting: str, model: str | None) -> str:
    """``setting`` (one of `REASONING_SETTINGS`) for a text written by ``model``."""
    if setting not in REASONING_SETTINGS:
        raise ValueError(f"reasoning must be one of {', '.join(REASONING_SETTINGS)}")
    if setting != "auto":
        return setting
    return reasoning_parser(model) if model else "none"


def read_response(text: str, parser: str) -> str:
    """The response R2MED evaluates for a text of family ``parser`` (split_response_for_r1)."""
    if parser == "none":
        return text
    if parser == "think":
        if THINK_END not in text:
            return text
        return text.split(THINK_END, 1)[1].strip()
    if parser == "huatuo-o1":
        match = _HUATUO_RESPONSE.search(text)
        return match.group(1).strip() if match else text
    if parser == "sky-t1":
        match = _SKY_SOLUTION.search(text)
        return match.group(1).strip() if match else text
    if parser == "search-r1":
        answers = _ANSWER.findall(text)
        return answers[0].strip() if answers else text
    raise ValueError(f"unknown reasoning parser {parser!r}; known: {', '.join(PARSERS)}")


def answer_text(text: str) -> str:
    """The part of a reply after its last ``</think>`` (all of it otherwise), stripped."""
    return text.rsplit(THINK_END, 1)[-1].strip()


def whole_reply(completion: Completion, opened: bool = False) -> str:
    """The reply as the model wrote it: its split-off reasoning back in ``<think>`` tags
    before the text, where there is one (a reader of the whole reply, e.g. ReasonRank's).

    ``opened``: the prompt itself opened the ``<think>`` (Rank1's), so the model did not write
    one. A reply of reasoning alone that the length limit or a stop string ended (the backend
    says which) stopped while thinking: a reasoning parser returns all of it as reasoning, and
    its ``<think>`` stays open as the model left it, so that a tag written there (a search
    query's) is still the last thing written."""
    if completion.reasoning is None:
        return completion.text
    head = "" if opened else "<think>"
    cut = completion.finish_reason == "length" or completion.stop_reason is not None
    if not completion.text and cut:
        return f"{head}{completion.reasoning}"
    return f"{head}{completion.reasoning}</think>{completion.text}"
