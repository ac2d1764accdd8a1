"""Search-R1 (Jin et al., 2025, arXiv 2503.09516): a model trained to think, search and answer.

The model writes ``<think>...</think>``, then either ``<search> q </search>`` (generation stops
there; the top_k documents come back as ``<information>...</information>``) or
``<answer>...</answer>``, which ends the trajectory. Only the newest turn is parsed; its last
opened tag is the action (the stop strings end the text right after it). A turn with neither
gets Search-R1's "My previous action is invalid" message and the model tries again.

Turns: ``max_turns`` reasoning calls in all. The last one may not search: before it the agent
adds a nudge (prompts/search-r1/final.txt), and it stops only at ``</answer>``; a search
written in it is ignored and a "limit" step notes it. (Search-R1 itself runs ``max_turns``
search turns and then one more generation with search off, without a nudge.)

Final ranking (default ``answer``, see agents/graphs/search_loop.py): Search-R1's answers are
short by design ("without detailed illustrations", e.g. "<answer> Beijing </answer>"), so the
passage searched is the last turn's last ``<think>`` followed by the ``<answer>``; the think is
where the medical content a retriever can match lives. With no ``<answer>`` at all, the last
turn's text without tags is used.

LLM modes as for search-o1: ``local/`` models continue the partial assistant turn, as
Search-R1's rollout appends observations to the response; chat APIs get them as user messages.

Graph: START -> reason -> (search -> reason)* -> final -> END; the invalid-action retry is a
reason -> reason edge. Trace nodes: "reason" (LLM calls), "search" (retrievals), "limit",
"final" (the final ranking).
"""

from __future__ import annotations

import re
from typing import Any

from agents.graphs.context import AgentContext, llm_step, search_step
from agents.graphs.search_loop import (
    SearchState,
    build_messages,
    env_segment,
    final_ranking,
    model_segment,
    parse_call,
    resolve_llm_mode,
    strip_tags,
)
from prompts import format_docs
from retrievers.base import SearchRequest

SEARCH, END_SEARCH = "<search>", "</search>"
ANSWER, END_ANSWER = "<answer>", "</answer>"

# Search-R1's own text (search_r1/llm_agent/generation.py, execute_predictions).
INVALID_ACTION = (
    "\nMy previous action is invalid. "
    "If I want to search, I should put the query between <search> and </search>. "
    "If I want to give the final answer, I should put the answer between <answer> and "
    "</answer>. Let me try again.\n"
)
# Theirs is "Doc {i}(Title: {title}) {text}\n" over Wikipedia's "title\ntext"; our corpora
# have no titles, so the title part is left out.
DOC_TEMPLATE = "Doc {i} {text}\n"

DEFAULTS: dict[str, Any] = {
    "final_ranking": "answer",
    "max_turns": 4,
    "top_k": 3,
    "llm_mode": "auto",
    "doc_words": 400,  # Search-R1's Wikipedia passages are ~100 words; R2MED's can be long
}
PROMPTS = ("search-r1", "search-r1/chat", "search-r1/final")

_THINK = re.compile(r"<think>(.*?)(?:</think>|$)", re.DOTALL)


def parse_action(text: str, finish_reason: str | None) -> tuple[str | None, str | None, str]:
    """The newest turn's action: ("search" | "answer" | None, its content, text to keep).

    The later-opened of ``<search>`` and ``<answer>`` is the action. An unclosed answer counts
    (it can only end the trajectory); an unclosed search cut at max_tokens, or an empty one,
    is no action.
    """
    if text.rfind(ANSWER) > text.rfind(SEARCH):
        answer, kept = parse_call(text, ANSWER, END_ANSWER, None)
        return "answer", answer, kept
    query, kept = parse_call(text, SEARCH, END_SEARCH, finish_reason)
    if not query:
        return None, None, text
    return "search", query, kept


def answer_passage(text: str, answer: str | None) -> str:
    """What the final ranking searches: the turn's last think, then its answer."""
    if answer is None:
        return strip_tags(text)
    thinks = _THINK.findall(text)
    return "\n".join(part.strip() for part in (thinks[-1] if thinks else "", answer) if part)


def build_graph(ctx: AgentContext) -> Any:
    from langgraph.graph import END, START, StateGraph  # here: naming an agent is free

    options = ctx.options
    mode = resolve_llm_mode(ctx)
    max_turns = options["max_turns"]
    prompt = ctx.prompts.get("search-r1")
    chat_prompt = ctx.prompts.get("search-r1", "chat")
    final_nudge = ctx.prompts.get("search-r1", "final")

    async def reason(state: SearchState) -> dict:
        turns = state.get("turns", 0) + 1
        last = turns >= max_turns
        segments = list(state.get("segments", []))
        if last:
            segments.append(env_segment(final_nudge.text, wrap=False))
        messages = build_messages(prompt.render(query=state["query"]), segments, mode, chat_prompt)
        stop = [END_ANSWER] if last else [END_SEARCH, END_ANSWER]
        text, step = await llm_step(ctx, "reason", messages, stop=stop)
        action, content, kept = parse_action(text, step["finish_reason"])
        if last and action == "search":
            action, content = None, None
        step |= {"llm_mode": mode, "action": action, "content": content, "final_turn": last}
        step["prompt"] = {"name": prompt.name, "sha256": prompt.sha256}
        steps = [step]
        segments.append(model_segment(kept))
        if last and SEARCH in text:
            steps.append(
                {"node": "limit", "reason": "final turn: no search allowed; its search is ignored"}
            )
        if action is None and not last:
            segments.append(env_segment(INVALID_ACTION, wrap=False))
        return {
            "steps": steps,
            "segments": segments,
            "turns": turns,
            "call": content if action == "search" else None,
            "done": action == "answer" or last,
            "generated": {"answer": content} if action == "answer" else {},
        }

    def after_reason(state: SearchState) -> str:
        if state["done"]:
            return "final"
        return "search" if state.get("call") else "reason"

    async def search(state: SearchState) -> dict:
        ranking, step = search_step(
            ctx.retriever, "search", SearchRequest(query=state["call"]), options["top_k"]
        )
        docs = format_docs([ctx.corpus[d] for d in ranking], options["doc_words"], DOC_TEMPLATE)
        observation = f"\n\n<information>{docs.strip()}</information>\n\n"
        return {
            "steps": [step],
            "retrieved": [list(ranking)],
            "segments": [*state["segments"], env_segment(observation)],
            "searches": state.get("searches", 0) + 1,
        }

    async def final(state: SearchState) -> dict:
        segments = state.get("segments", [])
        newest = next((s["text"] for s in reversed(segments) if s["role"] == "model"), "")
        answer = state.get("generated", {}).get("answer")
        update = await final_ranking(ctx, state, answer or "", answer_passage(newest, answer))
        if answer is None:
            update["steps"][0]["note_answer"] = "no <answer>; searched the last turn's text"
        return update

    graph = StateGraph(SearchState)
    graph.add_node("reason", reason)
    graph.add_node("search", search)
    graph.add_node("final", final)
    graph.add_edge(START, "reason")
    graph.add_conditional_edges("reason", after_reason, ["search", "reason", "final"])
    graph.add_edge("search", "reason")
    graph.add_edge("final", END)
    # Two nodes per turn plus the final one: our turn limit always ends the run first.
    return graph.compile().with_config(recursion_limit=2 * max_turns + 10)
