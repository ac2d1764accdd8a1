"""What the iterative search agents (search-o1, search-r1) share: the transcript in either LLM
mode, tag parsing, and the final ranking that turns a trajectory into one ranked list.

Transcript. A trajectory is a list of segments: the model's outputs ("model") and what the
agent puts back in (search results, canned messages, nudges: "env"). It becomes messages in
one of two LLM modes:

* ``continue``: [user(prompt), assistant(every segment joined)]. The model continues its own
  unfinished turn, with the results spliced into its text, as Search-o1 and Search-R1 run
  with vLLM. Needs a backend that continues a trailing assistant message: ``local/`` models
  do (agents/llm/embedded/chatml.py renders ChatML without closing the last turn), and so do servers
  driven as agents/llm/serving.py describes.
* ``chat``: each model output is an assistant message and what follows it a user message,
  for chat APIs that always start a new assistant turn.
* ``auto`` (default): ``continue`` for ``local/`` models and for vLLM, SGLang and llama.cpp
  servers (``--server``, see agents/llm/serving.py), ``chat`` for everything else (API models,
  ``scripted/`` test models, generic OpenAI-compatible servers).

Final ranking (option ``final_ranking``), always retrieved at ``ctx.depth`` with ``ctx.retriever``:

* ``answer`` (default): the trajectory's output (the model's text with what the agent put back
  in, Search-o1's ``seq['output']``) searched as R2MED searches its Search-o1 and Search-R1
  outputs (`agents.graphs.combine`): a reasoning model's response (after its first
  ``</think>``; Search-R1's first ``<answer>``) or, for other models, the whole output, scored
  alone by BM25 and averaged with the query by dense retrievers. With the option
  ``query_fallback`` (ours; on unless ``--preset paper``) an empty response, or one that
  matches no document, is searched as the raw query instead, and the step says so. Without
  it the response is searched as it is, as R2MED searches it (``src/eval_BM25.py`` L124-133
  has no fallback): BM25 then ranks nothing, which ``--pad`` turns into R2MED's list, the
  first documents of the corpus at score 0 (R2MED's BM25 scores every document 0 for a text
  without a corpus term and keeps the first 100 of its stable sort, L74-83).
* ``fuse``: reciprocal-rank fusion (retrievers.hybrid.rrf_fuse) of every list the agent
  retrieved on the way plus the ``answer`` list; with no search it is the ``answer`` list.
* ``trace``: the whole trajectory, tags removed, as BM25 text and dense expansion.

Replies are read, and the trajectory goes on, as the model wrote them
(`agents.llm.text.whole_reply`): litellm moves a reply's leading ``<think>...</think>``
into ``reasoning_content`` for ``openai/`` and ``hosted_vllm/`` models (and vLLM's reasoning
parsers send it there), while the originals read vLLM's raw text, tags written while thinking
included.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from agents.graphs.combine import NO_TERM, falls_back, r2med_request
from agents.graphs.context import AgentContext, AgentState, fuse_lists, search_step
from retrievers.base import SearchRequest

LLM_MODES = ("auto", "continue", "chat")
FINAL_RANKINGS = ("answer", "fuse", "trace")


class SearchState(AgentState, total=False):
    segments: list[dict[str, Any]]  # {"role": "model" | "env", "text", "wrap"}; replaced whole
    turns: int  # reasoning LLM calls so far
    queries: list[str]  # the queries searched, for Search-o1's repeated-query check
    call: str | None  # the search query of the newest turn, if it asked for one
    done: bool  # the newest turn ended the trajectory (an answer, or no search call)


def check_options(options: Mapping[str, Any]) -> None:
    """Fail at graph build time, not mid-run, on an option value the agents cannot use."""
    if options["llm_mode"] not in LLM_MODES:
        raise ValueError(f"llm_mode must be one of {LLM_MODES}, got {options['llm_mode']!r}")
    if options.get("information", "original") not in ("original", "lenient"):
        raise ValueError(f"information must be original or lenient, got {options['information']!r}")
    if options["final_ranking"] not in FINAL_RANKINGS:
        raise ValueError(
            f"final_ranking must be one of {FINAL_RANKINGS}, got {options['final_ranking']!r}"
        )
    for key in ("max_turns", "top_k", "doc_chars"):
        if key in options and options[key] < 1:
            raise ValueError(f"{key} must be at least 1, got {options[key]}")
    for key in ("max_searches", "max_refusals", "obs_tokens", "context_tokens"):
        if key in options and options[key] < 0:
            raise ValueError(f"{key} must be at least 0, got {options[key]}")


def resolve_llm_mode(ctx: AgentContext) -> str:
    mode = ctx.options["llm_mode"]
    if mode != "auto":
        return mode
    # local/ models and vLLM, SGLang and llama.cpp servers continue a turn (agents.llm.serving)
    return "continue" if ctx.llm is not None and ctx.llm.continues_turns else "chat"


def model_segment(text: str) -> dict[str, Any]:
    return {"role": "model", "text": text, "wrap": False}


def env_segment(text: str, wrap: bool = True) -> dict[str, Any]:
    """Text the agent adds; ``wrap`` = in chat mode it goes inside the agent's chat prompt
    (search results do; nudges that already speak to the model do not)."""
    return {"role": "env", "text": text, "wrap": wrap}


def build_messages(
    prompt: str, segments: list[dict[str, Any]], mode: str, chat_wrap: Any
) -> list[dict[str, str]]:
    """The messages for the next reasoning call (see the module docstring for the modes)."""
    messages = [{"role": "user", "content": prompt}]
    if mode == "continue":
        if segments:
            messages.append({"role": "assistant", "content": "".join(s["text"] for s in segments)})
        return messages
    for segment in segments:
        if segment["role"] == "model":
            messages.append({"role": "assistant", "content": segment["text"]})
            continue
        text = segment["text"].strip()
        if segment["wrap"]:
            text = chat_wrap.render(observation=text)
        if messages[-1]["role"] == "user":
            # Chat APIs want turns to alternate: what the agent adds back to back is one message
            # (and text added before the first output joins the prompt).
            messages[-1] = {**messages[-1], "content": f"{messages[-1]['content']}\n\n{text}"}
        else:
            messages.append({"role": "user", "content": text})
    return messages


def transcript(segments: list[dict[str, Any]]) -> str:
    """The trajectory as one text, the same in both modes (what ``continue`` shows the model)."""
    return "".join(s["text"] for s in segments)


def parse_call(
    text: str, begin: str, end: str, finish_reason: str | None
) -> tuple[str | None, str]:
    """Find a tool call at the end of a model output: returns (call, text to keep).

    ``call`` is the text after the LAST ``begin`` tag (a nested or repeated begin counts from
    the innermost), stripped; None when there is no begin tag, or when the output was cut at
    max_tokens (finish_reason "length") before the ``end`` tag: that is unfinished writing,
    not a request. The stop string is not part of the returned text, so a begin tag without
    an end tag at a normal finish is a complete call. If the backend ignored the stop and
    wrote on past ``end``, the text after it is dropped. The kept text ends with ``end``.
    """
    start = text.rfind(begin)
    if start < 0:
        return None, text
    rest = text[start + len(begin) :]
    close = rest.find(end)
    if close >= 0:
        return rest[:close].strip(), text[: start + len(begin) + close] + end
    if finish_reason == "length":
        return None, text
    return rest.strip(), text + end


_TAG = re.compile(r"<\|?/?[a-z_]+\|?>")


def strip_tags(text: str) -> str:
    """Drop protocol tags (<think>, <|begin_search_query|>, ...) so BM25 does not match them."""
    return " ".join(_TAG.sub(" ", text).split())


async def final_ranking(
    ctx: AgentContext, state: SearchState, method: str, answer: str
) -> dict[str, Any]:
    """The state update of the "final" node: the ranking, its step and the generated texts.

    ``method`` names the agent whose output this is; ``answer`` is what the trajectory ended
    with, kept for the trace.
    """
    mode = ctx.options["final_ranking"]
    query = state["query"]
    output = transcript(state.get("segments", []))
    generated = {"answer": answer, "passage": output}
    note: dict[str, Any] = {"final_ranking": mode, "reasoning": ctx.parser}

    if mode == "trace":
        text = strip_tags(output)
        if not text:
            text = query
            note["note"] = "empty trace; searched with the query instead"
        request = SearchRequest(query=query, expansion=text, sparse_text=text)
        ranking, step = search_step(ctx.retriever, "final", request, ctx.depth, state["query_id"])
        return {"steps": [step | note], "ranking": ranking, "generated": generated}

    fallback = ctx.options.get("query_fallback", True)
    if falls_back(output, ctx.parser, fallback):
        request = SearchRequest(query=query)
        note["note"] = "empty answer; searched with the query instead"
    else:
        request = r2med_request(method, query, output, ctx.parser)
        if request.sparse_text == NO_TERM:
            note["note"] = "empty answer; searched as it is, as R2MED searches it"
    ranking, step = search_step(ctx.retriever, "final", request, ctx.depth, state["query_id"])
    if not ranking and request.sparse_text is not None:
        if fallback:
            # BM25 finds nothing for an answer without a corpus term ("More."); an empty list
            # would score 0 where the query alone finds something.
            request = SearchRequest(query=query)
            ranking, step = search_step(
                ctx.retriever, "final", request, ctx.depth, state["query_id"]
            )
            note["note"] = "the answer matched no document; searched with the query instead"
        else:
            note.setdefault("note", "the answer matched no document")
            note["note"] += "; nothing ranked, as R2MED ranks it (--pad: its zero-score list)"
    if mode == "fuse":
        lists = state.get("retrieved", [])
        note["fused_lists"] = len(lists) + 1
        if lists:
            ranking = fuse_lists([*lists, list(ranking)], ctx.depth)
            step = step | {
                "doc_ids": list(ranking),
                "scores": [round(s, 6) for s in ranking.values()],
            }
    return {"steps": [step | note], "ranking": ranking, "generated": generated}
