"""Search-o1 (Li et al., 2025, arXiv 2501.05366): a reasoning model searches in mid-thought.

The model reasons until it writes ``<|begin_search_query|> q <|end_search_query|>`` (generation
stops at the end tag). The query is searched (top_k documents from ``ctx.retriever``), and
Reason-in-Documents, a second LLM call over the previous reasoning, the query and the
documents, condenses them into the "Final Information" that goes back into the reasoning as
``<|begin_search_result|> ... <|end_search_result|>``; then the model goes on. A trajectory
ends when a turn asks for no search (or an empty one); its output is ranked by
`agents.graphs.search_loop` as R2MED ranks Search-o1's outputs.

As sunnynexus/Search-o1 ``scripts/run_search_o1.py`` runs single-question QA (the instruction
R2MED's queries get, ``get_singleqa_search_o1_instruction``): up to ``max_searches`` 5 searches
(L198-205) in ``max_turns`` 15 reasoning calls (L80-85), ``top_k`` 10 documents, each shown up
to ``doc_chars`` 6,000 characters (``max_doc_len * 2``, L640-644, the page's start when no
snippet locates it: our documents have none); past the limit or for a query already searched
the result block holds their canned message (L596-608), and the model goes on. A QwQ model
gets Search-o1's QwQ task prompt (L337-338, ``scripts/prompts.py`` L358-363; option
``qwq_prompt``, which `agents.llm.sampling.OPTION_RULES` sets for a model named "qwq"). A turn
is a search only as Search-o1 reads one (L529-532, ``extract_between`` L412-417): its text,
with the stop string that ended it, ends with ``<|end_search_query|>``, and the query is the
content of its last complete begin/end pair, stripped and not empty; any other turn ends the
trajectory (L610-613). What Reason-in-Documents found is read as ``scripts/evaluate.py``
L20-29 reads it (``information`` option ``original``): the text after the last
"\n**Final Information**" with its newlines deleted, else after "\n**Modified Reasoning
Steps**", else "No helpful information found.".

The last turn is a turn like the others (L496-685): its search is made (or refused with the
canned message) and read by Reason-in-Documents, and what that found joins the output, before
the loop checks ``turn >= MAX_TURN`` and stops (L683-685); the output that is evaluated is
that whole text (L701). So here: a trajectory that reaches ``max_turns`` still asking to
search ends after that search (the "limit" step says so), its result in the output the final
ranking reads and its list among those ``fuse`` fuses.

Tags are read from the reply as the model wrote it (`agents.llm.text.whole_reply`):
litellm moves a leading ``<think>...</think>`` into ``reasoning_content`` for ``openai/`` and
``hosted_vllm/`` models, and a search query written while thinking is still a search, as it is
in Search-o1, which reads vLLM's raw text (L522, L529). The trajectory goes on with the whole
reply, and Reason-in-Documents' reply is read whole too.

Which stop string ended a turn is known where the backend says (``Completion.stop_reason``:
the embedded ``local/`` models, vLLM, a dry run); for other backends, which strip the stop
string and do not name it, a normal finish after an unclosed query is taken as having stopped
at ``<|end_search_query|>``, the one stop string asked for, and the step says so
(``stop_assumed``).

Ours, each an option: ``information=lenient`` also takes "Final Information:" and
un-starred headings, joins lines with spaces and falls back to the whole reply (small models
rarely write the heading exactly); ``max_refusals=N`` ends a trajectory after N refused
searches in a row (0, the original: never); ``lenient_query`` also searches a query the
model left unclosed when it ended its turn, and the query before text a backend wrote past
the stop string (the text after it dropped), taking the query after the last begin tag;
``query_fallback`` (on unless ``--preset paper``) searches the raw query when the output
holds nothing to search (`agents.graphs.search_loop`). An output cut at max_tokens inside an
unclosed search query is unfinished reasoning, not a search: the trajectory ends with it.

LLM modes (option ``llm_mode``, see agents/graphs/search_loop.py): ``local/`` models continue
their own partial assistant turn, as Search-o1 runs with vLLM; chat APIs (litellm providers,
``scripted/``) get each result as a user message.

Graph: START -> reason -> (search -> [documents] -> reason)* -> [limit] -> final -> END, a
last turn that searches going from its search (or documents) to the limit.
Trace nodes: "reason" and "documents" (LLM calls), "search" (a retrieval; only these count as
searches), "search_skipped" (a canned message), "limit", "final" (the final ranking).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from agents.graphs.context import AgentContext, search_step
from agents.graphs.generate_retrieve import replay_graph
from agents.graphs.search_loop import (
    SearchState,
    build_messages,
    check_options,
    env_segment,
    final_ranking,
    model_segment,
    parse_call,
    resolve_llm_mode,
    transcript,
)
from agents.llm.dry import Reply, WorstCase
from agents.llm.embedded.names import is_local
from agents.llm.steps import llm_call
from agents.llm.text import answer_text, whole_reply
from agents.shared.specs import AgentSpec
from retrievers.base import SearchRequest

BEGIN_QUERY = "<|begin_search_query|>"
END_QUERY = "<|end_search_query|>"
BEGIN_RESULT = "<|begin_search_result|>"
END_RESULT = "<|end_search_result|>"

# Search-o1's own canned texts (scripts/run_search_o1.py L597, L604; scripts/evaluate.py L29).
REPEATED_QUERY = "You have searched this query. Please refer to previous results."
SEARCH_LIMIT = "The maximum search limit is exceeded. You are not allowed to search."
NO_INFORMATION = "No helpful information found."

DOC_TEMPLATE = "**Document {i}:**\n{text}\n"  # theirs: "**Web Page {i}:**\n" + the page as JSON
INFORMATION_READERS = ("original", "lenient")

DEFAULTS: dict[str, Any] = {
    "final_ranking": "answer",
    "max_searches": 5,
    "max_turns": 15,
    "top_k": 10,
    "llm_mode": "auto",
    "doc_chars": 6000,  # each document shown up to this many characters
    "information": "original",  # how Reason-in-Documents' reply is read: original | lenient
    "max_refusals": 0,  # end after this many refused searches in a row (0: never, as Search-o1)
    # Search-o1's QwQ task prompt (prompts/search-o1/qwq.txt); agents.llm.sampling's
    # OPTION_RULES turn it on for a model named "qwq", as run_search_o1.py L337-338 does
    "qwq_prompt": False,
    # ours: also search an unclosed query at a turn's end (Search-o1 L532: only a turn that
    # ends with the end tag is a search)
    "lenient_query": False,
    "query_fallback": True,  # ours: search the raw query when the output holds nothing
}
PROMPTS = ("search-o1", "search-o1/qwq", "search-o1/documents", "search-o1/chat")
QUERY_PAIR = re.compile(re.escape(BEGIN_QUERY) + r"(.*?)" + re.escape(END_QUERY), re.DOTALL)


class SearchO1State(SearchState, total=False):
    hits: list[str]  # doc ids of the newest search, waiting for Reason-in-Documents
    refusals: int  # searches refused in a row (repeated, over the limit, empty)


def truncate_reasoning(reasoning: str) -> str:
    """The previous reasoning as Reason-in-Documents sees it, as Search-o1's code builds it.

    Lines become "Step i: ..." steps; past 5 steps only the first, the last 4 (the last of
    which is the empty string after the final separator) and every step holding a search
    query or result are kept, each run of dropped steps becoming "...".
    """
    lines = reasoning.replace("\n\n", "\n").split("\n")
    steps = "".join(f"Step {i}: {line}\n\n" for i, line in enumerate(lines, 1)).split("\n\n")
    if len(steps) <= 5:
        return "\n\n".join(steps).strip("\n")
    kept = ""
    for i, step in enumerate(steps):
        if i == 0 or i >= len(steps) - 4 or BEGIN_QUERY in step or BEGIN_RESULT in step:
            kept += step + "\n\n"
        elif not kept.endswith("\n\n...\n\n"):
            kept += "...\n\n"
    return kept.strip("\n")


def final_information(text: str, reader: str = "original") -> str:
    """What Reason-in-Documents found, read as Search-o1 reads it (``original``,
    scripts/evaluate.py L20-29) or leniently (see the module docstring)."""
    if reader == "original":
        # theirs: .strip("```"), which is .strip("`")
        info, steps = "\n**Final Information**", "\n**Modified Reasoning Steps**"
        if info in text:
            return text.split(info)[-1].replace("\n", "").strip("`").strip()
        if steps in text:
            return text.split(steps)[-1].strip("`").strip()
        return NO_INFORMATION
    # lenient: after the last heading in any of its forms, lines joined with spaces (which
    # keeps the result one step for `truncate_reasoning` and keeps the word breaks)
    text = answer_text(text)
    for marker in ("**Final Information**", "Final Information:"):
        if marker in text:
            text = text.rsplit(marker, 1)[-1]
            break
    text = " ".join(line.strip() for line in text.strip("`*: \n").splitlines() if line.strip())
    return text.strip("`").strip() or NO_INFORMATION


@dataclass(frozen=True)
class Turn:
    """One reasoning turn as read: its search query (None: not a search), the text the
    trajectory keeps, and whether the stop string that ended it was assumed, not reported."""

    query: str | None
    kept: str
    stop_assumed: bool = False


def names_stop_strings(llm: Any) -> bool:
    """Whether the backend reports the stop string that ended a text (``stop_reason``): the
    embedded models (agents/llm/embedded/provider.py) and vLLM do, and so does a dry run's worst
    case."""
    return llm.dry is not None or is_local(llm.model) or llm.server == "vllm"


def read_turn(
    text: str, finish_reason: str | None, stop_reason: str | None, names_stops: bool
) -> Turn:
    """A turn as Search-o1 reads it (run_search_o1.py L529-532): the text with the stop string
    that ended it (vLLM's ``include_stop_str_in_output``, L406), a search only when it ends
    with the end tag, its query the last complete pair's content (``extract_between``,
    L412-417, a non-greedy match), stripped and not empty."""
    assumed = False
    if text.rstrip().endswith(END_QUERY) or finish_reason == "length":
        ended_at_tag = False  # already there, or cut at max_tokens
    elif stop_reason is not None or names_stops:
        ended_at_tag = stop_reason == END_QUERY
    else:  # the backend strips the stop string and does not name it: END_QUERY is the only
        # one asked for, so a normal finish inside an open query is taken as having hit it
        is_open = text.rfind(BEGIN_QUERY) > text.rfind(END_QUERY)
        ended_at_tag = assumed = finish_reason == "stop" and is_open
    full = text + END_QUERY if ended_at_tag else text
    pairs = QUERY_PAIR.findall(full)
    query = pairs[-1].strip() if pairs else None
    if query and full.rstrip().endswith(END_QUERY):
        return Turn(query, full, assumed)
    return Turn(None, full)


def result_segment(information: str) -> dict[str, Any]:
    return env_segment(f"\n\n{BEGIN_RESULT}{information}{END_RESULT}\n\n")


def canned_segment(message: str) -> dict[str, Any]:
    return env_segment(f"\n{BEGIN_RESULT}\n{message}\n{END_RESULT}\n")


def format_documents(texts: list[str], max_chars: int) -> str:
    """The documents as Reason-in-Documents sees them, each cut to ``max_chars`` characters."""
    return "".join(DOC_TEMPLATE.format(i=i, text=t[:max_chars]) for i, t in enumerate(texts, 1))


def final_answer(segments: list[dict[str, Any]]) -> str:
    """The last turn's text after its last ``</think>``, without an unexecuted search call."""
    last = next((s["text"] for s in reversed(segments) if s["role"] == "model"), "")
    return answer_text(last.split(BEGIN_QUERY, 1)[0] if BEGIN_QUERY in last else last)


def build_graph(ctx: AgentContext) -> Any:
    if ctx.generations is not None:
        return replay_graph("search-o1", ctx)
    from langgraph.graph import END, START, StateGraph  # here: naming an agent is free

    options = ctx.options
    mode = resolve_llm_mode(ctx)
    max_turns, max_searches = options["max_turns"], options["max_searches"]
    # run_search_o1.py L337-340: the QwQ variant of the task prompt, else the other
    instruction = ctx.prompts.get("search-o1", "qwq" if options["qwq_prompt"] else None)
    documents_prompt = ctx.prompts.get("search-o1", "documents")
    chat_prompt = ctx.prompts.get("search-o1", "chat")
    names_stops = ctx.llm is not None and names_stop_strings(ctx.llm)

    def read(text: str, completion: Any) -> Turn:
        if options["lenient_query"]:
            call, kept = parse_call(text, BEGIN_QUERY, END_QUERY, completion.finish_reason)
            return Turn(call, kept)
        return read_turn(text, completion.finish_reason, completion.stop_reason, names_stops)

    async def reason(state: SearchO1State) -> dict:
        segments = state.get("segments", [])
        prompt = instruction.render(query=state["query"], max_searches=max_searches)
        messages = build_messages(prompt, segments, mode, chat_prompt)
        completion, step = await llm_call(ctx, "reason", messages, stop=[END_QUERY])
        text = whole_reply(completion)  # the thinking a provider split off is the model's text
        turn = read(text, completion)
        call = turn.query
        step |= {"llm_mode": mode, "search_query": call, "output": text}
        if turn.stop_assumed:
            step["stop_assumed"] = END_QUERY
        step["prompt"] = {"name": instruction.name, "sha256": instruction.sha256}
        steps = [step]
        if step["finish_reason"] == "length" and call is None:
            unclosed = BEGIN_QUERY in text
            cut = "inside an unclosed search query" if unclosed else "mid-reasoning"
            steps.append(
                {
                    "node": "limit",
                    "reason": f"output cut at max_tokens {cut}; treated as unfinished "
                    "reasoning (no search), the trajectory ends with it",
                }
            )
        return {
            "steps": steps,
            "segments": [*segments, model_segment(turn.kept)],
            "turns": state.get("turns", 0) + 1,
            "call": call,
        }

    def after_reason(state: SearchO1State) -> str:
        if not state.get("call"):  # no search, or an empty one: finished (L532, L610-613)
            return "final"
        return "search"  # the last turn's too: the loop stops after it (L683-685)

    def last_turn(state: SearchO1State) -> bool:
        return state["turns"] >= max_turns

    async def search(state: SearchO1State) -> dict:
        query, searches = state["call"], state.get("searches", 0)
        queries = state.get("queries", [])
        segments = state["segments"]
        refusal = _refusal(query, searches, max_searches, queries)
        if refusal is not None:
            step = {"node": "search_skipped", "query": query, "reason": refusal[0]}
            return {
                "steps": [step | {"message": refusal[1]}],
                "segments": [*segments, canned_segment(refusal[1])],
                "hits": [],
                "refusals": state.get("refusals", 0) + 1,
            }
        ranking, step = search_step(
            ctx.retriever, "search", SearchRequest(query=query), options["top_k"], state["query_id"]
        )
        update = {
            "steps": [step],
            "retrieved": [list(ranking)],
            "searches": searches + 1,
            "queries": [*queries, query],
            "hits": list(ranking),
            "refusals": 0,
        }
        if not ranking:  # nothing matched: no documents to reason over
            update["segments"] = [*segments, result_segment(NO_INFORMATION)]
        return update

    def after_search(state: SearchO1State) -> str:
        if state.get("hits"):
            return "documents"
        # Not in Search-o1: a model that keeps asking for searches it was refused is stuck
        # (small models repeat one query until max_turns); stop paying for its turns.
        stuck = options["max_refusals"] and state.get("refusals", 0) >= options["max_refusals"]
        return "limit" if stuck or last_turn(state) else "reason"

    async def documents(state: SearchO1State) -> dict:
        segments = state["segments"]
        texts = [ctx.corpus[doc_id] for doc_id in state["hits"]]
        prompt = documents_prompt.render(
            prev_reasoning=truncate_reasoning(transcript(segments)),
            search_query=state["call"],
            documents=format_documents(texts, options["doc_chars"]),
        )
        completion, step = await llm_call(ctx, "documents", [{"role": "user", "content": prompt}])
        text = whole_reply(completion)  # "**Final Information**" is read from the whole reply
        information = final_information(text, options["information"])
        step |= {"output": text, "information": information}
        return {
            "steps": [step],
            "segments": [*segments, result_segment(information)],
            "hits": [],
        }

    async def limit(state: SearchO1State) -> dict:
        if last_turn(state):
            reason = (
                f"max_turns ({max_turns}) reached while the model still asked to search "
                f"({state['call']!r}); that search was made or refused as any turn's is, "
                "as Search-o1 ends its loop after it (run_search_o1.py L683-685); ranking "
                "with what it has"
            )
        else:
            reason = (
                f"{state['refusals']} searches refused in a row (max_refusals); the model is "
                f"stuck on {state['call']!r}; ranking with what it has"
            )
        return {"steps": [{"node": "limit", "reason": reason}]}

    async def final(state: SearchO1State) -> dict:
        return await final_ranking(ctx, state, "search-o1", final_answer(state.get("segments", [])))

    graph = StateGraph(SearchO1State)
    graph.add_node("reason", reason)
    graph.add_node("search", search)
    graph.add_node("documents", documents)
    graph.add_node("limit", limit)
    graph.add_node("final", final)
    graph.add_edge(START, "reason")
    graph.add_conditional_edges("reason", after_reason, ["search", "final"])
    graph.add_conditional_edges("search", after_search, ["documents", "reason", "limit"])
    graph.add_conditional_edges(
        "documents", lambda state: "limit" if last_turn(state) else "reason", ["reason", "limit"]
    )
    graph.add_edge("limit", "final")
    graph.add_edge("final", END)
    # Up to 3 nodes per turn plus limit and final: our limits always end the run first.
    return graph.compile().with_config(recursion_limit=3 * max_turns + 10)


def _refusal(
    query: str, searches: int, max_searches: int, queries: list[str]
) -> tuple[str, str] | None:
    """Why a search is not made, and the canned result that says so; None to search."""
    if searches >= max_searches:  # Search-o1 checks the limit before the repeat
        return "search limit", SEARCH_LIMIT
    if query in queries:
        return "repeated query", REPEATED_QUERY
    return None


WORST_QUERY = "worst-case query"


def worst_case(case: WorstCase) -> Reply:
    """The longest trajectory, for a dry run: every Reason-in-Documents reply is all Final
    Information (carried into every later prompt), and every turn ends in a search query: new
    ones, all searched, up to max_searches; with max_refusals, repeats of the last one
    (refused) go between the last searches, as many in a row as do not end the trajectory, so
    that it reaches max_turns or (max_searches + 1) * max_refusals turns, whichever is fewer."""
    if case.node == "documents":
        return Reply(f"\n**Final Information**\n{case.filler}")
    o = case.options
    text = "".join(str(m.get("content") or "") for m in case.messages)
    asked = re.findall(re.escape(BEGIN_QUERY) + f"({WORST_QUERY} \\d+)", text)
    searches, limit, refusals = len(set(asked)), o["max_searches"], o["max_refusals"]
    turns = min(o["max_turns"], (limit + 1) * refusals) if refusals else o["max_turns"]
    repeats_left = max(0, turns - limit - refusals) - (len(asked) - searches)
    tail = next((i for i, q in enumerate(reversed(asked)) if q != asked[-1]), len(asked)) - 1
    # repeats as late as they fit: each search still to come can follow refusals - 1 of them
    repeat = (asked and searches < limit and tail < refusals - 1
              and repeats_left > (limit - searches - 1) * (refusals - 1))  # fmt: skip
    query = asked[-1] if repeat else f"{WORST_QUERY} {case.serial}"
    return Reply(f"{case.filler}{BEGIN_QUERY}{query}", stop_reason=END_QUERY)


SEARCH_O1 = AgentSpec(
    "search-o1",
    "Search-o1: search mid-reasoning, Reason-in-Documents; ranks with the answer",
    build_graph,
    PROMPTS,
    worst_case=worst_case,
    defaults=DEFAULTS,
    check_options=check_options,
    llm_nodes=("reason", "documents"),
)
