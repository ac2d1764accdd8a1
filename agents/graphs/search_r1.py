"""Search-R1 (Jin et al., 2025, arXiv 2503.09516): a model trained to think, search and answer.

The loop is Search-R1's evaluation rollout (PeterGriffinJin/Search-R1
``search_r1/llm_agent/generation.py`` L220-319, ``run_llm_loop``):

* Up to ``max_turns`` (4, ``scripts/nq_hotpotqa/evaluate.sh``) search turns. Each turn's text
  ends at its first ``</search>`` or ``</answer>`` (L61-66: the stop strings here); its action
  is the first complete ``<search>...</search>`` or ``<answer>...</answer>`` in it (L422). An
  answer ends the trajectory; a search (its content stripped, empty or not) returns the top
  ``top_k`` (3) documents as ``\\n\\n<information>...</information>\\n\\n`` (L391); a turn with
  neither gets Search-R1's "My previous action is invalid" message (L396-398).
* Each observation, the whole block with its tags, is cut to ``obs_tokens`` (500,
  ``data.max_obs_length``) tokens of the model's tokenizer (L87-89).
* If no answer came, one more turn with search off and nothing added before it (L278-310): a
  search written there is not run. Option ``final_nudge`` (ours, off) adds
  prompts/search-r1/final.txt before that turn, asking for the answer.
* Under ``--preset paper`` (`agents.llm.sampling.OPTION_RULES`; off by default, each an
  option): ``context_tokens`` 4096 keeps what the model is sent to its last 4,096 tokens, as
  the rollout cuts its rolling input to ``max_prompt_length`` from the left before every turn
  (L107-115; ``scripts/nq_hotpotqa/evaluate.sh`` L20): see "The rolling input" below.
  ``question_mark`` strips the question and ends it with "?" where it lacks one, as
  Search-R1's data script does (``scripts/data_process/nq_search.py`` L61-63). Search-R1's
  ``max_start_length`` (2,048, evaluate.sh L22) is not applied: it cuts only the copy of the
  prompt the rollout returns with its output (``verl/trainer/ppo/ray_trainer.py`` L512,
  generation.py L223 and L326-332), never what the model reads, which starts from the whole
  prompt (L231; a prompt over ``max_prompt_length`` is refused,
  ``verl/utils/dataset/rl_dataset.py`` L134-139; here it is cut like any other input).

The rolling input. Search-R1's model reads token ids, not messages: the prompt through the
checkpoint's chat template with its assistant turn opened (rl_dataset.py L128-139), then each
turn's text (cut at its closing tag, L54-75) and each observation, every piece tokenized alone
without special tokens added (generation.py L45-52, L77-91; ``verl/utils/torch_functional.py``
L236), concatenated, and cut to the last ``max_prompt_length`` ids (L107-115), the chat
template's own tokens at the front the first to go. With ``context_tokens`` and an LLM mode
that continues the model's turn, the agent does the same: it renders the prompt with the chat
template itself, counts each piece's tokens, keeps the last ``context_tokens`` of them and
sends that text as a raw completion (`agents.llm.LLM.complete`; the step records the
``prompt`` sent, its prompt file as ``prompt_file``, ``rendered_by`` and, when something was
cut, ``context_cut``). The template and tokens are the checkpoint's own where one is known
here: option ``tokenizer`` (a Hugging Face tokenizer folder or hub id: its chat template and
its tokenizer, as Search-R1 loads them), else an embedded ``local/`` model's ChatML with its
default system message and its own tokenizer; else, for ``--server llamacpp``, the template
its prompts are rendered with and litellm's tokenizer for the model (an approximation the
step names). The server tokenizes the text it is sent again, which can join tokens
differently where two pieces meet; Search-R1's vLLM got the ids themselves. Where no chat
template is known here (a chat API, or a vLLM or SGLang server without ``tokenizer``), the
cut falls on the messages instead: whole messages, then the start of the first one it
reaches, counted by `agents.llm.tokens.model_counter`, so the chat template's tokens stay,
and ``context_cut`` says so. The transcript the final ranking reads is never cut.

Tags are read from the reply as the model wrote it (`agents.llm.text.whole_reply`):
litellm moves a leading ``<think>...</think>`` into ``reasoning_content`` for ``openai/`` and
``hosted_vllm/`` models, while Search-R1 reads the whole decoded response (L56-66, L422), so a
``<search>`` or ``<answer>`` written inside the thinking is still the turn's action, and the
trajectory goes on with the whole reply.

Documents are formatted as Search-R1's ``_passages2string`` (L460-469) formats its retrieval
server's ``contents``: the first line is the title, ``Doc i(Title: <first line>) <rest>``.

Final ranking (default ``answer``, see agents/graphs/search_loop.py): the trajectory's output is
read as R2MED reads its Search-R1 outputs (``src/base.py`` L28-33): the first ``<answer>``, and
searched alone by BM25, averaged with the query by dense retrievers.

LLM modes as for search-o1: ``local/`` models continue the partial assistant turn, as
Search-R1's rollout appends observations to the response; chat APIs get them as user messages.

Graph: START -> reason -> (search -> reason)* -> final -> END; the invalid-action retry is a
reason -> reason edge. Trace nodes: "reason" (LLM calls), "search" (retrievals), "limit",
"final" (the final ranking).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
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
    resolve_llm_mode,
)
from agents.llm.dry import Reply, WorstCase
from agents.llm.embedded.names import is_local
from agents.llm.steps import llm_call, llm_complete_call
from agents.llm.text import whole_reply
from agents.llm.tokens import Counter, model_counter
from agents.shared.specs import AgentSpec
from retrievers.base import SearchRequest

SEARCH, END_SEARCH = "<search>", "</search>"
ANSWER, END_ANSWER = "<answer>", "</answer>"

# Search-R1's own text (search_r1/llm_agent/generation.py L396-398, execute_predictions).
INVALID_ACTION = (
    "\nMy previous action is invalid. "
    "If I want to search, I should put the query between <search> and </search>. "
    "If I want to give the final answer, I should put the answer between <answer> and "
    "</answer>. Let me try again.\n"
)
_ACTION = re.compile(r"<(search|answer)>(.*?)</\1>", re.DOTALL)  # generation.py L422

DEFAULTS: dict[str, Any] = {
    "final_ranking": "answer",
    "max_turns": 4,  # search turns; one more without search follows
    "top_k": 3,
    "obs_tokens": 500,  # each <information> block cut to this many tokens (0: no cut)
    "final_nudge": False,  # ours: ask for the answer before the turn without search
    "llm_mode": "auto",
    # Search-R1's, under --preset paper (off by default): the input kept to its last this
    # many tokens (generation.py L107-115; 0: no cut) and the question ended with "?"
    # (nq_search.py L61-63)
    "context_tokens": 0,
    "question_mark": False,
    # a Hugging Face tokenizer (folder or hub id): the checkpoint's chat template and tokens,
    # which the context_tokens cut renders and counts with, as Search-R1 does
    "tokenizer": "",
    "query_fallback": True,  # ours: search the raw query when the output holds nothing
}
PROMPTS = ("search-r1", "search-r1/chat", "search-r1/final")


def parse_action(
    text: str, finish_reason: str | None = "stop", stop_reason: str | None = None
) -> tuple[str | None, str | None, str]:
    """A turn's action as Search-R1 reads it: ("search" | "answer" | None, its stripped
    content, the text kept: everything up to and including the first closing tag).

    The stop strings end a turn before its closing tag, so a turn that stopped at one gets the
    tag back first, as Search-R1's rollout holds it: the one the backend names
    (``stop_reason``), else the later-opened tag's; a turn cut at max_tokens gets none.
    """
    cut = len(text)
    for tag in (END_SEARCH, END_ANSWER):  # generation.py L61-66: the first </search>, else ...
        at = text.find(tag)
        if at >= 0:
            cut = at + len(tag)
            break
    else:
        if stop_reason in (END_SEARCH, END_ANSWER):
            text, cut = text + stop_reason, len(text) + len(stop_reason)
        elif finish_reason != "length":
            opened = max(text.rfind(SEARCH), text.rfind(ANSWER))
            if opened >= 0:
                tag = END_SEARCH if text.rfind(SEARCH) == opened else END_ANSWER
                text, cut = text + tag, len(text) + len(tag)
    kept = text[:cut]
    match = _ACTION.search(kept)
    if match is None:
        return None, None, kept
    return match.group(1), match.group(2).strip(), kept


def search_r1_question(query: str) -> str:
    """The question as Search-R1's data script writes it (nq_search.py L61-63): stripped, and
    ended with "?" when it does not end with one."""
    question = query.strip()
    return question if question.endswith("?") else question + "?"


def fit_context(
    messages: list[dict[str, str]], limit: int, counter: Counter
) -> tuple[list[dict[str, str]], dict[str, Any] | None]:
    """``messages`` kept to their last ``limit`` tokens, as Search-R1 keeps its rolling input
    (generation.py L107-115): whole messages from the front are emptied, then the start of the
    next one cut, by the tokens of their contents; and what was done (None: nothing)."""
    total = counter.count(messages)
    if total <= limit:
        return messages, None
    excess = total - limit
    fitted = []
    for message in messages:
        content = message["content"]
        if excess > 0 and content:
            tokens = counter.text_tokens(content)
            kept = max(tokens - excess, 0)
            excess -= tokens - kept
            content = counter.keep_last(content, kept)
        fitted.append({**message, "content": content})
    cut = {"limit": limit, "tokens": total, "cut": total - limit, "counted_by": counter.described}
    return fitted, cut


@dataclass(frozen=True)
class Window:
    """How the rolling input is rendered and counted: ``render`` puts the prompt through the
    chat template with the assistant turn opened; ``counter`` tokenizes a piece alone."""

    render: Callable[[str], str]
    counter: Counter
    rendered_by: str


def rolling_input(
    pieces: list[str], limit: int, counter: Counter
) -> tuple[str, dict[str, Any] | None]:
    """The pieces (the rendered prompt, then each turn's text and each observation) joined and
    kept to their last ``limit`` tokens, each piece tokenized alone as Search-R1 tokenizes its
    prompt, responses and observations (generation.py L45-52, L77-91) and the concatenated ids
    cut from the left (L107-115); and what was cut (None: nothing)."""
    counts = [counter.text_tokens(piece) for piece in pieces]
    total = sum(counts)
    if total <= limit:
        return "".join(pieces), None
    excess, kept = total - limit, []
    for piece, tokens in zip(pieces, counts, strict=True):
        if excess >= tokens:  # the whole piece is before the cut
            excess -= tokens
            continue
        kept.append(counter.keep_last(piece, tokens - excess) if excess else piece)
        excess = 0
    cut = {"limit": limit, "tokens": total, "cut": total - limit, "counted_by": counter.described}
    return "".join(kept), cut


class HubCounter(Counter):
    """A Hugging Face tokenizer's ids of a text, no special tokens added (Search-R1's
    ``add_special_tokens=False``), and the text of ids, special tokens kept (its vLLM read the
    ids themselves)."""

    def __init__(self, name: str, tokenizer: Any) -> None:
        super().__init__()
        self._tok = tokenizer
        self.described = f"the tokenizer of {name} (exact)"

    def _encode(self, text: str) -> list[int]:
        return list(self._tok(text, add_special_tokens=False)["input_ids"])

    def _decode(self, ids: list[int]) -> str:
        return str(self._tok.decode(ids))


@functools.cache
def hub_tokenizer(name: str) -> Any:
    from agents.rerank.reasonrank import load_tokenizer  # transformers: only when asked for

    return load_tokenizer(name)


def hub_window(name: str) -> Window:
    """The checkpoint's own template and tokens (rl_dataset.py L128-131: its chat template
    when it has one, else the prompt as it is)."""
    tok = hub_tokenizer(name)

    def render(prompt: str) -> str:
        if not tok.chat_template:
            return prompt
        chat = [{"role": "user", "content": prompt}]
        return str(tok.apply_chat_template(chat, add_generation_prompt=True, tokenize=False))

    return Window(render, HubCounter(name, tok), f"the chat template of {name}")


def model_window(llm: Any) -> Window | None:
    """The template and tokens of the model ``llm`` calls, where known here: an embedded
    model's ChatML and tokenizer, a llama.cpp server's template (litellm's tokens); None for
    backends whose template is on the server or that take no raw text."""
    if is_local(llm.model):
        from agents.llm.embedded.chatml import render_chatml

        counter = model_counter(llm)
        system = counter.default_system

        def chatml(prompt: str) -> str:
            return render_chatml([{"role": "user", "content": prompt}], system)

        return Window(chatml, counter, f"{llm.model}'s ChatML")
    if not llm.renders_prompts:
        return None
    if llm.dry is None:
        llm.prepare()  # the server's own template, unless --chat-template gave one
    if llm.template is None:
        return None
    template = llm.template

    def templated(prompt: str) -> str:
        return template.render([{"role": "user", "content": prompt}])

    return Window(templated, model_counter(llm), f"the chat template {template.name}")


def format_passages(texts: list[str]) -> str:
    """Search-R1's ``_passages2string``: the first line of each text is its title."""
    out = ""
    for i, content in enumerate(texts, 1):
        title, _, rest = content.partition("\n")
        out += f"Doc {i}(Title: {title}) {rest}\n"
    return out


def build_graph(ctx: AgentContext) -> Any:
    if ctx.generations is not None:
        return replay_graph("search-r1", ctx)
    from langgraph.graph import END, START, StateGraph  # here: naming an agent is free

    options = ctx.options
    mode = resolve_llm_mode(ctx)
    max_turns = options["max_turns"]
    prompt = ctx.prompts.get("search-r1")
    chat_prompt = ctx.prompts.get("search-r1", "chat")
    final_nudge = ctx.prompts.get("search-r1", "final") if options["final_nudge"] else None
    window = options["context_tokens"]
    counter = model_counter(ctx.llm) if window and ctx.llm is not None else None
    # the checkpoint's own tokenizer, loaded now: a wrong name stops the run before any call
    hub = hub_window(options["tokenizer"]) if window and options["tokenizer"] else None
    rolling: list[Window | None] = []  # the model's own, found at the first call

    def raw_window() -> Window | None:
        """How the raw rolling input is rendered and cut; None: cut the messages instead."""
        if not window or mode != "continue":
            return None
        if hub is not None:
            return hub
        if not rolling:
            rolling.append(model_window(ctx.llm))
        return rolling[0]

    async def call(state_query: str, segments: list[dict[str, Any]]) -> tuple[Any, dict]:
        """The turn's call: the rolling input as a raw completion where a template is known
        here, else the messages (cut to the window's last tokens when there is one)."""
        user = prompt.render(query=state_query)
        stop = [END_SEARCH, END_ANSWER]
        raw = raw_window()
        if raw is not None:
            pieces = [raw.render(user), *(s["text"] for s in segments)]
            text, cut = rolling_input(pieces, window, raw.counter)
            completion, step = await llm_complete_call(ctx, "reason", text, stop=stop)
            step["rendered_by"] = raw.rendered_by
        else:
            messages = build_messages(user, segments, mode, chat_prompt)
            cut = None
            if counter is not None:
                messages, cut = fit_context(messages, window, counter)
                if cut is not None:
                    cut["note"] = (
                        "message text cut, the chat template's tokens kept: no chat template "
                        "is known here for Search-R1's cut of the whole input (tokenizer= "
                        "names the checkpoint's)"
                    )
            completion, step = await llm_call(ctx, "reason", messages, stop=stop)
        if cut is not None:
            step["context_cut"] = cut
        return completion, step

    def question(state: SearchState) -> str:
        return search_r1_question(state["query"]) if options["question_mark"] else state["query"]

    async def reason(state: SearchState) -> dict:
        turns = state.get("turns", 0) + 1
        last = turns > max_turns  # the rollout after the search turns: search is off
        segments = list(state.get("segments", []))
        if last and final_nudge is not None:
            segments.append(env_segment(final_nudge.render(), wrap=False))
        completion, step = await call(question(state), segments)
        text = whole_reply(completion)  # the thinking a provider split off is the model's text
        action, content, kept = parse_action(text, completion.finish_reason, completion.stop_reason)
        step |= {"llm_mode": mode, "action": action, "content": content, "final_turn": last}
        step["output"] = text
        # a raw completion's step holds the text sent as its "prompt" (agents.llm.steps)
        used = {"name": prompt.name, "sha256": prompt.sha256}
        step["prompt_file" if "rendered_by" in step else "prompt"] = used
        steps = [step]
        segments.append(model_segment(kept))
        if last and action == "search":
            steps.append({"node": "limit", "reason": "the turn after the search turns: its "
                          "search is not run"})  # fmt: skip
        elif action is None and not last:
            segments.append(env_segment(INVALID_ACTION, wrap=False))
        return {
            "steps": steps,
            "segments": segments,
            "turns": turns,
            "call": content if action == "search" and not last else None,
            "done": action == "answer" or last,
            "generated": {"answer": content} if action == "answer" else {},
        }

    def after_reason(state: SearchState) -> str:
        if state["done"]:
            return "final"
        return "search" if state.get("call") is not None else "reason"

    async def search(state: SearchState) -> dict:
        ranking, step = search_step(
            ctx.retriever,
            "search",
            SearchRequest(query=state["call"]),
            options["top_k"],
            state["query_id"],
        )
        docs = format_passages([ctx.corpus[d] for d in ranking])
        observation = f"\n\n<information>{docs.strip()}</information>\n\n"
        if options["obs_tokens"] and ctx.llm is not None:
            observation, counted = ctx.llm.truncate_tokens(observation, options["obs_tokens"])
            step["obs_tokens"] = {"limit": options["obs_tokens"], "counted_by": counted}
        return {
            "steps": [step],
            "retrieved": [list(ranking)],
            "segments": [*state["segments"], env_segment(observation)],
            "searches": state.get("searches", 0) + 1,
        }

    async def final(state: SearchState) -> dict:
        answer = state.get("generated", {}).get("answer")
        update = await final_ranking(ctx, state, "search-r1", answer or "")
        if answer is None:
            update["steps"][0]["note_answer"] = "no <answer> in the trajectory"
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
    return graph.compile().with_config(recursion_limit=2 * max_turns + 12)


def worst_case(case: WorstCase) -> Reply:
    """The longest trajectory, for a dry run: every turn a search (its observation the longest
    documents cut to obs_tokens), the turn after them too (not run)."""
    return Reply(f"{case.filler}{SEARCH} query {case.serial}", stop_reason=END_SEARCH)


SEARCH_R1 = AgentSpec(
    "search-r1",
    "Search-R1: think/search/answer turns; ranks with its first <answer>",
    build_graph,
    PROMPTS,
    worst_case=worst_case,
    defaults=DEFAULTS,
    check_options=check_options,
    llm_nodes=("reason",),
    parser="search-r1",
)
