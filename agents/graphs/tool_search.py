"""tool-search: a function-calling search agent that submits its own ranking.

The model is offered three tools in the OpenAI schema (through litellm, so any provider with
tool support works; ``local/`` models and ``--server llamacpp`` read them from the text, see
agents/llm/tool_text.py):

* ``search(query, k=top_k)``: the retriever's top k (at most ``max_k``): id, snippet, score;
* ``read(doc_id)``: a document's text, cut to ``doc_words`` words;
* ``submit(doc_ids)``: the final ranking, of documents it has seen (in a search result or
  read); other ids are refused with a message naming them, and the model may submit again.

Every call in a turn is run in order (parallel calls included) and answered with a tool
message; a call that cannot be run (bad JSON, unknown tool, wrong argument type) is answered
with an error message and the trajectory goes on. A turn without any call gets the nudge
(prompts/tool-search/nudge.txt) ``nudges`` times, then ends the trajectory. Limits end it with
a "limit" step: ``max_turns`` LLM calls, a search or read beyond ``max_searches`` /
``max_reads`` (that call and the ones after it in its turn are not run), and a conversation
that outgrows the model's context (the call fails; what was retrieved still ranks).

Final ranking (``final_ranking``), after the NeMo Retriever agent (submit, RRF as fallback):

* ``submit`` (default): the submitted ids first, in the model's order, then the reciprocal-rank
  fusion of every list retrieved on the way without them; fusion alone when nothing was
  submitted;
* ``fuse``: the fusion alone, whatever was submitted (to measure what submitting adds).

With ``fuse_query`` (default) the fusion also holds the raw query's own list at the run's depth,
so the ranking is as deep as any other agent's and a trajectory that never searched ranks as
the baseline does.

Graph: START -> reason -> (tools -> reason)* -> final -> END, with reason -> reason for a nudge.
Trace nodes: "reason" (LLM calls, with their ``tool_calls``), "tool" (one per call: arguments,
result, and for searches the retrieved ids), "nudge", "stop", "limit", "final".
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from agents.graphs.context import AgentContext, AgentState, fuse_lists, search_step
from agents.llm.dry import Reply, WorstCase
from agents.llm.errors import is_context_overflow
from agents.llm.steps import llm_call
from agents.llm.tool_text import ToolCall
from agents.shared.specs import AgentSpec
from prompts import PromptBook
from retrievers.base import SearchRequest
from retrievers.results import read_result, search_result

FINAL_RANKINGS = ("submit", "fuse")
TOOLS = ("search", "read", "submit")
LIMITS = {"search": "max_searches", "read": "max_reads"}  # the option that caps each tool

DEFAULTS: dict[str, Any] = {
    "final_ranking": "submit",
    "max_turns": 8,  # LLM calls per query
    "max_searches": 5,
    "max_reads": 5,
    "top_k": 10,  # search's k when the model gives none
    "max_k": 20,
    "snippet_words": 40,
    "doc_words": 300,
    "nudges": 1,
    "fuse_query": True,
}
PROMPTS = (
    "tool-search",
    "tool-search/search",
    "tool-search/read",
    "tool-search/submit",
    "tool-search/nudge",
)
SHOWN_IDS = 10  # unseen ids named in a refused submit


def check_options(options: Mapping[str, Any]) -> None:
    if options["final_ranking"] not in FINAL_RANKINGS:
        raise ValueError(
            f"final_ranking must be one of {FINAL_RANKINGS}, got {options['final_ranking']!r}"
        )
    for key in ("max_turns", "top_k", "max_k", "snippet_words", "doc_words"):
        if options[key] < 1:
            raise ValueError(f"{key} must be at least 1, got {options[key]}")
    for key in ("max_searches", "max_reads", "nudges"):
        if options[key] < 0:
            raise ValueError(f"{key} must be at least 0, got {options[key]}")
    if options["top_k"] > options["max_k"]:
        raise ValueError(f"top_k ({options['top_k']}) must not exceed max_k ({options['max_k']})")


def tool_schemas(book: PromptBook, options: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The three tools in the OpenAI schema; their descriptions are prompt files."""

    def tool(name: str, properties: dict, required: list[str]) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": name,
                "description": book.get("tool-search", name).render(),
                "parameters": {"type": "object", "properties": properties, "required": required},
            },
        }

    return [
        tool(
            "search",
            {
                "query": {"type": "string", "description": "the search query"},
                "k": {
                    "type": "integer",
                    "description": f"how many documents (1-{options['max_k']}, "
                    f"default {options['top_k']})",
                },
            },
            ["query"],
        ),
        tool("read", {"doc_id": {"type": "string", "description": "a document id"}}, ["doc_id"]),
        tool(
            "submit",
            {
                "doc_ids": {
                    "type": "array",
                    "items": {"type": "string"},
                    "description": "document ids, the most relevant first",
                }
            },
            ["doc_ids"],
        ),
    ]


class ToolState(AgentState, total=False):
    messages: list[dict[str, Any]]  # the conversation so far; replaced whole
    calls: list[dict[str, str]]  # the newest turn's tool calls: {"id", "name", "arguments"}
    turns: int  # LLM calls so far
    reads: int
    nudges: int
    seen: list[str]  # doc ids shown to the model (search results, reads), first seen first
    submitted: list[str] | None  # the accepted submission
    done: bool


class ToolError(ValueError):
    """A call the agent cannot run; its message goes back to the model."""


def parse_arguments(raw: str) -> dict[str, Any]:
    """A call's arguments as a mapping (an empty text is no arguments)."""
    if not raw.strip():
        return {}
    try:
        arguments = json.loads(raw)
    except ValueError as e:
        raise ToolError(f"the arguments are not valid JSON ({e}): {raw[:200]}") from None
    if not isinstance(arguments, dict):
        raise ToolError(f"the arguments must be a JSON object, got: {raw[:200]}")
    return arguments


def _string(arguments: Mapping[str, Any], name: str) -> str:
    value = arguments.get(name)
    if not isinstance(value, str) or not value.strip():
        got = "nothing" if value is None else json.dumps(value)
        raise ToolError(f"{name} must be a non-empty string, got {got}")
    return value.strip()


def _k(arguments: Mapping[str, Any], options: Mapping[str, Any]) -> int:
    k = arguments.get("k", options["top_k"])
    if isinstance(k, float) and k.is_integer():
        k = int(k)
    if not isinstance(k, int) or isinstance(k, bool):
        raise ToolError(f"k must be an integer from 1 to {options['max_k']}, got {json.dumps(k)}")
    return min(max(k, 1), options["max_k"])


def _doc_ids(arguments: Mapping[str, Any]) -> list[str]:
    ids = arguments.get("doc_ids")
    if not isinstance(ids, list) or not all(isinstance(i, str | int) for i in ids):
        got = "nothing" if ids is None else json.dumps(ids)[:200]
        raise ToolError(f"doc_ids must be a list of document ids, got {got}")
    ids = [str(i).strip() for i in ids]
    if not ids:
        raise ToolError("doc_ids is empty: submit at least one document id")
    return list(dict.fromkeys(ids))


def build_graph(ctx: AgentContext) -> Any:
    from langgraph.graph import END, START, StateGraph  # here: naming an agent is free

    options = ctx.options
    prompt = ctx.prompts.get("tool-search")
    nudge = ctx.prompts.get("tool-search", "nudge")
    schemas = tool_schemas(ctx.prompts, options)

    async def reason(state: ToolState) -> dict:
        first = prompt.render(query=state["query"], max_searches=options["max_searches"])
        messages = state.get("messages") or [{"role": "user", "content": first}]
        try:
            completion, step = await llm_call(ctx, "reason", messages, tools=schemas)
        except Exception as exc:
            if not is_context_overflow(exc):
                raise
            # what was retrieved so far still makes the ranking
            return {"steps": [_limit("the conversation outgrew the model's context")],
                    "done": True}  # fmt: skip
        step["prompt"] = {"name": prompt.name, "sha256": prompt.sha256}
        turns = state.get("turns", 0) + 1
        messages = [*messages, completion.message()]
        update: dict[str, Any] = {"steps": [step], "messages": messages, "turns": turns}
        update["calls"] = step.get("tool_calls", [])
        if update["calls"]:
            return update
        if turns >= options["max_turns"]:
            update["steps"].append(_limit(f"max_turns ({options['max_turns']}) reached"))
            return update | {"done": True}
        if state.get("nudges", 0) < options["nudges"]:
            update["messages"] = [*messages, {"role": "user", "content": nudge.render()}]
            update["steps"].append({"node": "nudge", "message": nudge.render()})
            return update | {"nudges": state.get("nudges", 0) + 1}
        update["steps"].append({"node": "stop", "reason": "the model answered without a tool call"})
        return update | {"done": True}

    def after_reason(state: ToolState) -> str:
        if state.get("done"):
            return "final"
        return "tools" if state.get("calls") else "reason"

    async def tools(state: ToolState) -> dict:
        seen = list(state.get("seen", []))
        counts = {"search": state.get("searches", 0), "read": state.get("reads", 0)}
        messages = list(state["messages"])
        steps: list[dict[str, Any]] = []
        retrieved: list[list[str]] = []
        submitted: list[str] | None = None
        stopped: str | None = None  # why the calls after this one are not run
        limit: str | None = None
        for call in state["calls"]:
            step: dict[str, Any] = {"node": "tool", "tool": call["name"], "call_id": call["id"],
                                    "arguments": call["arguments"]}  # fmt: skip
            try:
                if stopped:
                    raise ToolError(f"not run: {stopped}")
                arguments = parse_arguments(call["arguments"])
                name = call["name"]
                if name not in TOOLS:
                    raise ToolError(f"unknown tool {name!r}; the tools are {', '.join(TOOLS)}")
                if name in counts and counts[name] >= options[LIMITS[name]]:
                    limit = stopped = f"{LIMITS[name]} ({options[LIMITS[name]]}) reached"
                    raise ToolError(f"not run: {limit}")
                if name == "search":
                    result, found = _search(arguments, step, state["query_id"])
                    retrieved.append(found)
                elif name == "read":
                    result, found = _read(arguments)
                else:
                    submitted = _submit(arguments, seen)
                    result = f"Received a ranking of {len(submitted)} documents."
                    stopped = "the ranking was submitted"
                if name in counts:
                    counts[name] += 1
                    seen += [d for d in found if d not in seen]
                step["error"] = False
            except ToolError as e:
                result, step["error"] = json.dumps({"error": str(e)}, ensure_ascii=False), True
            step["result"] = result
            steps.append(step)
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
        done = submitted is not None or limit is not None
        if not done and state["turns"] >= options["max_turns"]:
            limit, done = f"max_turns ({options['max_turns']}) reached", True
        if limit is not None and submitted is None:
            steps.append(_limit(limit))
        update: dict[str, Any] = {
            "steps": steps,
            "messages": messages,
            "retrieved": retrieved,
            "searches": counts["search"],
            "reads": counts["read"],
            "seen": seen,
            "done": done,
        }
        if submitted is not None:
            update["submitted"] = submitted
        return update

    def _search(
        arguments: Mapping[str, Any], step: dict[str, Any], query_id: str
    ) -> tuple[str, list[str]]:
        query, k = _string(arguments, "query"), _k(arguments, options)
        ranking, found = search_step(ctx.retriever, "tool", SearchRequest(query), k, query_id)
        step |= {key: found[key] for key in ("retriever", "request", "doc_ids", "scores")}
        return search_result(ranking, ctx.corpus, options["snippet_words"]), list(ranking)

    def _read(arguments: Mapping[str, Any]) -> tuple[str, list[str]]:
        doc = _string(arguments, "doc_id")
        if doc not in ctx.corpus:
            raise ToolError(f"no document has id {doc!r}; read ids from your search results")
        return read_result(doc, ctx.corpus, options["doc_words"]), [doc]

    def _submit(arguments: Mapping[str, Any], seen: list[str]) -> list[str]:
        ids, known = _doc_ids(arguments), set(seen)
        unseen = [i for i in ids if i not in known]
        if unseen:
            named = ", ".join(unseen[:SHOWN_IDS]) + (" ..." if len(unseen) > SHOWN_IDS else "")
            raise ToolError(
                f"not accepted: {len(unseen)} id(s) are not in your search results: {named}. "
                "Submit only ids that search returned (search again if needed)."
            )
        return ids

    async def final(state: ToolState) -> dict:
        lists = list(state.get("retrieved", []))
        note: dict[str, Any] = {"final_ranking": options["final_ranking"]}
        step: dict[str, Any] = {}
        if options["fuse_query"] or not lists:
            ranking, step = search_step(
                ctx.retriever,
                "final",
                SearchRequest(state["query"]),
                ctx.depth,
                state["query_id"],
            )
            lists.append(list(ranking))
            if not options["fuse_query"]:
                note["note"] = "nothing was retrieved; ranked with the query"
        fused = list(fuse_lists(lists, ctx.depth))
        submitted = state.get("submitted") or []
        if options["final_ranking"] == "fuse":
            submitted = []
        order = [*submitted, *(d for d in fused if d not in set(submitted))][: ctx.depth]
        ranking = {doc: float(len(order) - i) for i, doc in enumerate(order)}
        step = {**step, "node": "final", **note, "submitted": len(submitted),
                "fused_lists": len(lists), "doc_ids": order,
                "scores": list(ranking.values())}  # fmt: skip
        texts = [m.get("content") or "" for m in state.get("messages", [])
                 if m.get("role") == "assistant"]  # fmt: skip
        generated = {"reasoning": "\n\n".join(t for t in texts if t)}
        if state.get("submitted"):
            generated["submitted"] = " ".join(state["submitted"])
        return {"steps": [step], "ranking": ranking, "generated": generated}

    graph = StateGraph(ToolState)
    graph.add_node("reason", reason)
    graph.add_node("tools", tools)
    graph.add_node("final", final)
    graph.add_edge(START, "reason")
    graph.add_conditional_edges("reason", after_reason, ["tools", "reason", "final"])
    graph.add_conditional_edges(
        "tools", lambda s: "final" if s.get("done") else "reason", ["reason", "final"]
    )
    graph.add_edge("final", END)
    return graph.compile().with_config(recursion_limit=2 * options["max_turns"] + 10)


def _limit(reason: str) -> dict[str, Any]:
    return {"node": "limit", "reason": reason}


def worst_case(case: WorstCase) -> Reply:
    """The longest trajectory, for a dry run: the first turn makes every search (of max_k
    results) and every read (of the longest documents) the limits allow, so every later prompt
    holds them all; each later turn submits an id never seen, which is refused and the
    trajectory goes on, to max_turns."""
    o = case.options
    if not any(m.get("role") == "tool" for m in case.messages):
        args = [("search", {"query": f"query {case.serial}.{i}", "k": o["max_k"]})
                for i in range(o["max_searches"])]  # fmt: skip
        args += [("read", {"doc_id": d}) for d in case.documents[: o["max_reads"]]]
    else:
        args = [("submit", {"doc_ids": [f"unseen-{case.serial}"]})]
    calls = [ToolCall(f"call-{case.serial}-{i}", name, json.dumps(a))
             for i, (name, a) in enumerate(args)]  # fmt: skip
    return Reply(case.filler, tool_calls=calls)


TOOL_SEARCH = AgentSpec(
    "tool-search",
    "function calls (search, read, submit); ranks with its submission, then RRF",
    build_graph,
    PROMPTS,
    worst_case=worst_case,
    defaults=DEFAULTS,
    check_options=check_options,
    llm_nodes=("reason",),
)
