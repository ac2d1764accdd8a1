"""A run's LLM bill before it is paid: calls, tokens and cost per task and stage, no model called.

    python -m agents.run --agent search-o1 --dataset demo --dry-run

`estimate(config)` gives, for each task folder of the run and each of its stages (the agent,
then every rerank stage), the LLM calls per query, the prompt and completion tokens per query
and where the figures come from:

* ``measured``: the run folder of this very configuration (its ``config.json`` binds the same
  settings, `agents.config.binding`) holds records for the stage: the mean usage of its
  answered queries (all of them, or those done so far). A cached call counts as the call it
  stands for, with the tokens it stored (a fresh run pays for it).
* ``bound``: otherwise, an upper bound from the prompts and the limits. Every prompt is built
  from the task's own prompt files and queries and counted with the model's tokenizer; each
  completion is the run's ``max_tokens`` (a pointwise judge without reasoning: its
  ``answer_tokens``). Where a prompt holds documents the search would pick, the task's
  longest documents (cut as the stage cuts them) stand in for them; where it holds the
  model's own earlier outputs, each is ``max_tokens`` long. A call whose prompt cannot fit
  the model's context (when known) fails unpaid, so it caps what a call may cost, and ends
  an iterative agent's trajectory; except ``tool-search``'s, whose prompts are the union of
  worst cases (a model that searched less would still make the turn): such a call is
  counted as filling the context.

Calls per query in the bound: generate-then-retrieve agents make one; ``search-o1`` at most
``max_turns`` reasoning calls (fewer when ``max_refusals`` stops a model stuck on refused
searches: at most ``(max_searches + 1) * max_refusals``) plus one Reason-in-Documents call per
search made, at most ``min(max_searches, reasoning calls - 1)``; ``search-r1`` at most
``max_turns + 1`` (its search turns, then one with search off); ``tool-search`` at most
``max_turns``, every prompt from the second on holding every search and read the limits
allow (``max_searches`` results of ``max_k`` snippets,
``max_reads`` documents cut to ``doc_words``, all asked for in the first turn, the worst case)
and one nudge per earlier turn, up to ``nudges``; ``llm-pointwise`` one per passage of its top
``depth``; listwise stages one per window of `agents.rerank.listwise.windows`. A first-stage
list is at most ``eval.depth`` long (and never longer than the corpus) unless the agent's records
say how long it is.

Tokens: ``local/`` models are counted with their own tokenizer on the ChatML prompt the
embedded provider sends (exact); other models with litellm's ``token_counter`` and its
bundled tiktoken encoding (exact for OpenAI's older models, an approximation for others).
Tools (``tool-search``) are counted as `agents.llm.tool_text.text_messages` writes them and the
tool turns into plain messages: exactly what a ``local/`` model (or ``--server llamacpp``) is
sent; for an API model, which gets them as JSON and formats them its own way, an approximation.
Cost comes from litellm's local price map; local, self-hosted and unknown models have none.
Nothing here calls a model, opens the network or writes a file: the dry run leaves no run
folder, cache entry or joined model file behind.
"""

from __future__ import annotations

import os

# Must precede the litellm import: otherwise importing litellm fetches the cost map online.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import dataclasses
import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from agents.config import RunConfig, binding, default_run_name, from_dict
from agents.registry import AGENTS, STAGES
from eval import runs
from eval.datasets import Task, default_cache_dir, load_tasks

MEASURED = "measured"
BOUND = "bound"
NO_LLM = "no LLM"
UNKNOWN = "unknown"  # an agent or stage of a kind this module has no bound for
UNPRICED = "unknown: not in litellm's price map"

Messages = list[dict[str, str]]
ToolMessages = list[dict[str, Any]]  # with tool_calls and tool turns (tool-search)


@dataclass
class StageEstimate:
    """One stage of one task: figures per query, for all of the task's queries."""

    name: str  # "agent" or the stage's folder, "rerank-1-llm-listwise"
    kind: str  # the agent's or the stage's kind
    model: str | None  # None: the stage calls no model
    queries: int  # queries it answers in a fresh run
    calls: float = 0.0  # per query
    prompt_tokens: float = 0.0  # per query
    completion_tokens: float = 0.0  # per query
    source: str = NO_LLM  # MEASURED, BOUND, NO_LLM or UNKNOWN
    measured_queries: int = 0  # with MEASURED: how many answered queries the mean is over
    notes: list[str] = field(default_factory=list)
    cost: float | None = 0.0  # USD for all its queries; None when the model has no price

    @property
    def total_calls(self) -> float:
        return self.calls * self.queries

    @property
    def total_prompt_tokens(self) -> float:
        return self.prompt_tokens * self.queries

    @property
    def total_completion_tokens(self) -> float:
        return self.completion_tokens * self.queries


@dataclass
class TaskEstimate:
    task: str  # the task's name
    folder: str  # its folder in the run
    queries: int
    stages: list[StageEstimate]


@dataclass
class Estimate:
    run_dir: Path  # where the run would go (never created by the estimate)
    state: str  # "new", "measured" (same configuration) or "other" (another one is there)
    tasks: list[TaskEstimate]
    tokenizers: dict[str, str]  # model -> how its tokens were counted (bounds only)
    notes: list[str] = field(default_factory=list)

    @property
    def stages(self) -> list[StageEstimate]:
        return [s for t in self.tasks for s in t.stages]

    @property
    def calls(self) -> float:
        return sum(s.total_calls for s in self.stages)

    @property
    def prompt_tokens(self) -> float:
        return sum(s.total_prompt_tokens for s in self.stages)

    @property
    def completion_tokens(self) -> float:
        return sum(s.total_completion_tokens for s in self.stages)

    @property
    def cost(self) -> float | None:
        """USD for the whole run; None when any model it pays for has no price (or a stage
        has no bound)."""
        costs = [s.cost for s in self.stages if s.total_calls or s.source == UNKNOWN]
        return None if any(c is None for c in costs) else float(sum(costs))  # type: ignore[misc]

    @property
    def unbounded(self) -> list[str]:
        """The kinds of agent or stage without a figure (the totals leave them out)."""
        return list(dict.fromkeys(s.kind for s in self.stages if s.source == UNKNOWN))

    @property
    def unpriced(self) -> list[str]:
        return list(dict.fromkeys(
            s.model for s in self.stages if s.total_calls and s.cost is None and s.model
        ))  # fmt: skip


# --- the estimate ----------------------------------------------------------------------------


def estimate(config: RunConfig) -> Estimate:
    """What a fresh run of ``config`` would cost, measured where its run folder says, else
    bounded; refuses bad input with the run's own one-line errors (ValueErrors) first."""
    from agents.pipeline import record_prompts, task_folders
    from prompts import PromptBook

    if config.llm is not None:
        from agents.llm.client import check_credentials, check_model

        for model, api_base in config.llm_targets():
            check_model(model)
            check_credentials(model, api_base)
    cache_dir = Path(config.cache_dir or default_cache_dir()).expanduser()
    overrides = {name: Path(path) for name, path in config.prompt_files.items()}
    tasks = load_tasks(config.dataset, cache_dir)
    folders = task_folders(tasks)
    books = {t.name: PromptBook(overrides, t.name) for t in tasks}
    spec = AGENTS[config.agent]
    source = None
    if config.source_run:
        from agents.pipeline import read_source_run

        source = read_source_run(config)
    from agents.pipeline import record_sampling

    config = dataclasses.replace(
        config,
        prompts=record_prompts(spec, config, tasks, books, source),
        sampling=record_sampling(config, source),
    )
    run_dir = Path(config.runs_dir).expanduser() / (config.run_name or default_run_name(config))
    state = _run_state(run_dir, config)
    counters = _Counters(cache_dir)
    notes: list[str] = []
    try:
        out = []
        for task, folder in zip(tasks, folders, strict=True):
            task_dir = run_dir / folder if state == "measured" else None
            out.append(_task_estimate(task, folder, config, books[task.name], task_dir, counters))
        tokenizers = counters.described()
    finally:
        counters.close()
    if "api:" in config.retriever.spec:
        notes.append("the embedding API's calls (retriever api:...) are not counted")
    if config.source_run:
        notes.append(f"the agent's lists are copied from {config.source_run}: no agent calls")
    return Estimate(run_dir, state, out, tokenizers, notes)


def _run_state(run_dir: Path, config: RunConfig) -> str:
    try:
        saved = runs.read_config(run_dir)
    except FileNotFoundError:
        return "new"
    except ValueError:
        return "other"
    try:
        same = binding(from_dict(saved)) == binding(config)
    except (ValueError, TypeError):
        return "other"
    return "measured" if same else "other"


def _task_estimate(
    task: Task,
    folder: str,
    config: RunConfig,
    book: Any,
    task_dir: Path | None,
    counters: _Counters,
) -> TaskEstimate:
    from agents.pipeline import _limited

    queries = _limited(task, config.limit)
    bounds = _Bounds(task, config, book, counters)
    stages: list[StageEstimate] = []
    # the first stage's list length per query: from the agent's records where there are some
    lengths = {q: min(config.eval.depth, len(task.corpus)) for q in queries}

    agent = StageEstimate(runs.AGENT_STAGE, config.agent, None, len(queries))
    records = _records(task_dir, queries) if task_dir is not None else {}
    lengths.update({q: len(r.get("ranking") or ()) for q, r in records.items()})
    if config.source_run:
        pass  # the agent's lists are copied: no call
    elif config.agent_calls_llm:  # not a replay of generations (--generations)
        assert config.llm is not None
        agent.model = config.llm.model
        if records:
            _measured(agent, records)
        else:
            try:
                _bounded(agent, [bounds.agent(q) for q in queries.values()])
                agent.notes += bounds.agent_notes()
            except _NoBound as e:
                _unknown(agent, str(e))
    stages.append(agent)

    for i, stage_config in enumerate(config.rerank, 1):
        name = runs.stage_dir_name(i, stage_config.kind)
        stage = StageEstimate(name, stage_config.kind, None, len(queries))
        stages.append(stage)
        if not STAGES[stage_config.kind].uses_llm:
            continue
        stage.model = config.stage_llm(stage_config)[0]
        records = _records(task_dir / name, queries) if task_dir is not None else {}
        if records:
            _measured(stage, records)
        else:
            try:
                calls = [bounds.stage(stage_config, q, lengths[q_id])
                         for q_id, q in queries.items()]  # fmt: skip
                _bounded(stage, calls)
                stage.notes += bounds.stage_notes(stage_config)
            except _NoBound as e:
                _unknown(stage, str(e))
    for stage in stages:
        stage.cost = _stage_cost(stage)
    return TaskEstimate(task.name, folder, len(queries), stages)


def _records(stage_dir: Path, queries: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """The stage's answered queries of this run (failed ones have no usage to go by)."""
    found = runs.read_records(
        runs.records_path(stage_dir), fields=("query_id", "usage", "error", "ranking")
    )
    return {q: r for q, r in found.items() if q in queries and not r.get("error")}


def _measured(stage: StageEstimate, records: Mapping[str, Mapping[str, Any]]) -> None:
    from eval.usage import Usage

    usages = [Usage.from_dict(r.get("usage")) for r in records.values()]
    n = len(usages)
    # Usage.calls counts cache hits too (cached_calls is the part of it that was free), with
    # the tokens they stored: what a fresh run pays
    stage.calls = sum(u.calls for u in usages) / n
    stage.prompt_tokens = sum(u.prompt_tokens for u in usages) / n
    stage.completion_tokens = sum(u.completion_tokens for u in usages) / n
    stage.source = MEASURED
    stage.measured_queries = n
    if n < stage.queries:
        stage.notes.append(f"mean of the {n} of {stage.queries} queries answered so far")


def _unknown(stage: StageEstimate, why: str) -> None:
    stage.source = UNKNOWN
    stage.notes.append(f"{why}; left out of the totals (a run's records would measure it)")


def _bounded(stage: StageEstimate, per_query: Sequence[list[tuple[int, int]]]) -> None:
    """Per-query lists of (prompt, completion) tokens per call, as means per query."""
    n = max(1, len(per_query))
    stage.calls = sum(len(calls) for calls in per_query) / n
    stage.prompt_tokens = sum(p for calls in per_query for p, _ in calls) / n
    stage.completion_tokens = sum(c for calls in per_query for _, c in calls) / n
    stage.source = BOUND


# --- upper bounds from the prompts -----------------------------------------------------------


class _NoBound(Exception):
    """An agent or stage kind this module does not know how to bound."""


class _Bounds:
    """The calls one task's queries may make, each as (prompt tokens, completion tokens)."""

    def __init__(self, task: Task, config: RunConfig, book: Any, counters: _Counters) -> None:
        self.task = task
        self.config = config
        self.book = book
        self.counters = counters
        self._longest: dict[int, list[str]] = {}
        self._stages: dict[int, Any] = {}
        self._capped: set[str] = set()

    # the parts every bound shares

    @property
    def max_tokens(self) -> int | None:
        """The agent's longest completion budget (its sampling, agents.llm.sampling)."""
        return budget(self.config, self.config.agent)

    def stage_max_tokens(self, stage_config: Any) -> int | None:
        from eval.runs import stage_dir_name

        i = self.config.rerank.index(stage_config) + 1
        return budget(self.config, stage_dir_name(i, stage_config.kind))

    def longest(self, k: int, words: int) -> list[str]:
        """The ids of the ``k`` documents longest once cut to ``words`` words (in characters):
        what stands in for the documents a search would return."""
        have = self._longest.get(words, [])
        if len(have) < min(k, len(self.task.corpus)):
            have = _longest_documents(self.task.corpus, max(k, 2 * len(have)), words)
            self._longest[words] = have
        return have[:k]

    def texts(self, k: int, words: int) -> list[str]:
        return [self.task.corpus[d] for d in self.longest(k, words)]

    def call(
        self,
        model: str,
        messages: ToolMessages,
        completion: int | None,
        what: str,
        tools: list[dict[str, Any]] | None = None,
    ) -> tuple[int, int] | None:
        """One call's (prompt, completion) tokens; None when its prompt cannot fit the model's
        context (the call fails, unpaid). The completion is cut to what the context leaves."""
        counter = self.counters.get(model)
        prompt = counter.count(messages, tools)
        limit = counter.context
        if limit is not None and prompt >= limit:
            self._capped.add(what)
            return None
        if completion is None:  # no max_tokens: up to the context, where it is known
            completion = 0 if limit is None else limit - prompt
        elif counter.local and limit is not None:  # the embedded provider cuts max_tokens so
            completion = min(completion, limit - prompt)
        return prompt, completion

    def filled(self, model: str, completion: int | None) -> tuple[int, int]:
        """The most a call can be paid for when its prompt would outgrow the model's context:
        the longest prompt that fits (with the embedded provider, less the completion it cuts
        to what the context leaves)."""
        counter = self.counters.get(model)
        limit = counter.context
        assert limit is not None
        if completion is None:
            return limit - 1, 1
        if counter.local:
            completion = min(completion, limit - 1)
            return limit - completion, completion
        return limit - 1, completion

    @staticmethod
    def filler(tokens: int | None) -> str:
        """A text of about ``tokens`` tokens (" the" is one token in the BPE vocabularies
        here): a model output of the longest length allowed."""
        return " ".join(["the"] * max(1, tokens or 1))

    # the agent

    def agent(self, query: str) -> list[tuple[int, int]]:
        name = self.config.agent
        if name in ("search-o1", "search-r1"):
            return self._search_o1(query) if name == "search-o1" else self._search_r1(query)
        if name == "tool-search":
            return self._tool_search(query)
        from agents.graphs.generate_retrieve import SPECS

        if name in SPECS:
            return self._generate(SPECS[name], query)
        raise _NoBound(f"no bound known for agent {name!r}")  # a new agent: add one here

    def agent_notes(self) -> list[str]:
        notes = []
        if self.config.agent == "lamer":
            notes.append("prompt holds the corpus's 10 longest documents for BM25's top 10")
        if self.config.agent in ("search-o1", "search-r1"):
            notes.append(
                "every output max_tokens long, every search returning the corpus's longest "
                "documents"
            )
        if self.config.agent == "tool-search":
            notes.append(
                "every output max_tokens long; from the second turn on, every search and read "
                "the limits allow (the corpus's longest documents) and the nudges; the error "
                "messages of refused or malformed calls not counted"
            )
            llm = self.config.llm
            assert llm is not None
            if not self.counters.get(llm.model).local and llm.server != "llamacpp":
                notes.append(
                    "tools and tool turns counted as the text local/ models are sent "
                    "(agents/llm/tool_text.py): an approximation of the provider's own format"
                )
        if "agent" in self._capped and self.config.agent == "tool-search":
            notes.append("calls whose prompt outgrows the model's context counted as filling it "
                         "(a trajectory that searched or read less makes them)")  # fmt: skip
        elif "agent" in self._capped:
            notes.append("calls whose prompt outgrows the model's context end the trajectory")
        if self.max_tokens is None:
            notes.append("no max_tokens: completions bounded by the context only")
        return notes

    def _generate(self, spec: Any, query: str) -> list[tuple[int, int]]:
        from agents.graphs.generate_retrieve import LAMER_DOC_WORDS, LAMER_DOCS
        from prompts import format_docs

        book = self.book
        prompt = book.get(spec.prompt)
        system = book.get("system", spec.system) if spec.system else book.get("system")
        values = {"query": query, "docs": ""}
        if spec.reads_docs:
            values["docs"] = format_docs(self.texts(LAMER_DOCS, LAMER_DOC_WORDS), LAMER_DOC_WORDS)
        if spec.few_shot:
            values["examples"] = book.get(f"{spec.prompt}-examples").render()
        messages = [
            {"role": "system", "content": system.render()},
            {"role": "user", "content": prompt.render(**values)},
        ]
        assert self.config.llm is not None
        call = self.call(self.config.llm.model, messages, self.max_tokens, "agent")
        return [call] if call else []

    def _mode(self) -> str:
        """The agent's LLM mode, as it resolves it (from its options and the model's name)."""
        from agents.graphs.search_loop import resolve_llm_mode

        llm = self.config.llm
        assert llm is not None
        from agents.llm.serving import continues_turns

        continues = continues_turns(llm.server, llm.model)
        stub = SimpleNamespace(model=llm.model, continues_turns=continues)
        return resolve_llm_mode(SimpleNamespace(options=self.config.options, llm=stub))  # type: ignore[arg-type]

    def _search_o1(self, query: str) -> list[tuple[int, int]]:
        from agents.graphs import search_o1 as o1
        from agents.graphs.search_loop import build_messages, model_segment, transcript

        assert self.config.llm is not None
        model, m = self.config.llm.model, self.max_tokens
        o = self.config.options
        reasoning, searches = search_o1_calls(o["max_turns"], o["max_searches"], o["max_refusals"])
        instruction = self.book.get("search-o1").render(query=query, max_searches=o["max_searches"])
        documents_prompt = self.book.get("search-o1", "documents")
        chat = self.book.get("search-o1", "chat")
        mode = self._mode()
        output = self.filler(m)
        documents = o1.format_documents(self.texts(o["top_k"], 10**6), o["doc_chars"])
        canned = max((o1.REPEATED_QUERY, o1.SEARCH_LIMIT), key=len)
        segments: list[dict[str, Any]] = []
        calls: list[tuple[int, int]] = []
        # the searches come first: their results are the longest text a turn can add
        for turn in range(1, reasoning + 1):
            call = self.call(model, build_messages(instruction, segments, mode, chat), m, "agent")
            if call is None:
                break
            calls.append(call)
            if turn == reasoning:
                break
            segments.append(model_segment(f"{o1.BEGIN_QUERY}{output}{o1.END_QUERY}"))
            if turn > searches:
                segments.append(o1.canned_segment(canned))
                continue
            prompt = documents_prompt.render(
                prev_reasoning=o1.truncate_reasoning(transcript(segments)),
                search_query=output,
                documents=documents,
            )
            call = self.call(model, [{"role": "user", "content": prompt}], m, "agent")
            if call is None:
                break
            calls.append(call)
            segments.append(o1.result_segment(output))
        return calls

    def _search_r1(self, query: str) -> list[tuple[int, int]]:
        from agents.graphs import search_r1 as r1
        from agents.graphs.search_loop import build_messages, env_segment, model_segment

        assert self.config.llm is not None
        model, m = self.config.llm.model, self.max_tokens
        o = self.config.options
        prompt = self.book.get("search-r1").render(query=query)
        chat = self.book.get("search-r1", "chat")
        nudge = self.book.get("search-r1", "final")
        mode = self._mode()
        output = self.filler(m)
        docs = r1.format_passages(self.texts(o["top_k"], 10**6))
        # what a turn adds after the model's output: the search's documents (cut to
        # obs_tokens, counted as the bound counts), or the message for an invalid action,
        # whichever is longer (as chat mode shows it)
        observation = f"\n\n<information>{docs.strip()}</information>\n\n"
        count = self.counters.get(model).count_text
        if o["obs_tokens"]:
            while count(observation) > o["obs_tokens"] and len(observation) > 1:
                observation = observation[: len(observation) * 9 // 10]
        if count(chat.render(observation=observation.strip())) >= count(r1.INVALID_ACTION.strip()):
            added = env_segment(observation)
        else:
            added = env_segment(r1.INVALID_ACTION, wrap=False)
        segments: list[dict[str, Any]] = []
        calls: list[tuple[int, int]] = []
        turns = o["max_turns"] + 1  # the search turns, then one with search off
        nudged = o["final_nudge"]
        for turn in range(1, turns + 1):
            last = turn == turns and nudged
            shown_segments = segments + [env_segment(nudge.render(), wrap=False)] * last
            messages = build_messages(prompt, shown_segments, mode, chat)
            call = self.call(model, messages, m, "agent")
            if call is None:
                break
            calls.append(call)
            segments += [model_segment(f"{r1.SEARCH}{output}{r1.END_SEARCH}"), added]
        return calls

    def _tool_search(self, query: str) -> list[tuple[int, int]]:
        import json

        from agents.graphs.tool_search import read_result, search_result, tool_schemas
        from agents.llm.tool_text import ToolCall

        assert self.config.llm is not None
        model, m = self.config.llm.model, self.max_tokens
        o = self.config.options
        corpus = self.task.corpus
        tools = tool_schemas(self.book, o)
        prompt = self.book.get("tool-search").render(query=query, max_searches=o["max_searches"])
        nudge = {"role": "user", "content": self.book.get("tool-search", "nudge").render()}
        output = self.filler(m)
        # the worst case: every search and read the limits allow, all made in the first turn
        # (in parallel), each search's max_k hits and each read the corpus's longest documents
        hits = dict.fromkeys(self.longest(o["max_k"], o["snippet_words"]), 123.456)
        search = search_result(hits, corpus, o["snippet_words"])
        longest = self.longest(o["max_reads"], o["doc_words"])
        reads = [longest[i % len(longest)] for i in range(o["max_reads"] if longest else 0)]
        made = [("search", {"query": "the", "k": o["max_k"]}, search)] * o["max_searches"]
        made += [
            ("read", {"doc_id": doc}, read_result(doc, corpus, o["doc_words"]))
            for doc in reads
        ]  # fmt: skip
        first: dict[str, Any] = {"role": "assistant", "content": output}
        if made:
            first["tool_calls"] = [ToolCall(f"call_{i}", name, json.dumps(arguments)).to_message()
                                   for i, (name, arguments, _) in enumerate(made)]  # fmt: skip
        results = [{"role": "tool", "tool_call_id": f"call_{i}", "content": result}
                   for i, (_, _, result) in enumerate(made)]  # fmt: skip
        shown: ToolMessages = [{"role": "user", "content": prompt}]
        calls: list[tuple[int, int]] = []
        for turn in range(1, o["max_turns"] + 1):
            # too long for the context: a model that searched or read less still makes the turn
            calls.append(self.call(model, shown, m, "agent", tools) or self.filled(model, m))
            shown += [first, *results] if turn == 1 else [{"role": "assistant", "content": output}]
            if turn <= o["nudges"]:  # any turn may be the one nudged: one after each, up to nudges
                shown.append(nudge)
        return calls

    # the rerank stages

    def _stage(self, stage_config: Any) -> Any:
        """The stage as the run builds it, without a model: it only loads its prompts."""
        key = id(stage_config)
        if key not in self._stages:
            from agents.rerank import StageContext

            ctx = StageContext(
                corpus=self.task.corpus, task=self.task.name, options=stage_config.options,
                llm=None, depth=self.config.eval.depth, prompts=self.book, cache_dir=None,
            )  # fmt: skip
            self._stages[key] = STAGES[stage_config.kind].build(ctx)
        return self._stages[key]

    def stage(self, stage_config: Any, query: str, length: int) -> list[tuple[int, int]]:
        from agents.rerank.listwise import MIN_DOC_WORDS, ListwiseReranker, cut_words, windows
        from agents.rerank.pointwise import PointwiseReranker

        stage = self._stage(stage_config)
        o = stage_config.options
        model = self.config.stage_llm(stage_config)[0]
        what = stage_config.kind
        calls: list[tuple[int, int]] = []
        if isinstance(stage, PointwiseReranker):
            prompt = stage.grade_prompt if o["judge"] == "grade" else stage.judge_prompt
            completion = self.stage_max_tokens(stage_config) if o["reason"] else o["answer_tokens"]
            for doc in self.texts(min(o["depth"], length), o["doc_words"]):
                content = prompt.render(query=query, passage=cut_words(doc, o["doc_words"]))
                call = self.call(model, [{"role": "user", "content": content}], completion, what)
                if call is None:  # the query fails at this passage
                    break
                calls.append(call)
            return calls
        if isinstance(stage, ListwiseReranker):
            for start, end in windows(length, o["depth"], o["window"], o["step"]):
                ids = self.longest(end - start, o["doc_words"])
                scores = dict.fromkeys(ids, 123.456)
                # as ListwiseReranker.ask: a window that overflows the context fails unpaid
                # and is sent again with passages cut to half the words, down to the minimum
                words = o["doc_words"]
                m = self.stage_max_tokens(stage_config)
                call = self.call(model, stage.messages(query, ids, scores, words), m, what)
                while call is None and words > MIN_DOC_WORDS:
                    words = max(MIN_DOC_WORDS, words // 2)
                    call = self.call(model, stage.messages(query, ids, scores, words), m, what)
                if call is None:  # the query fails at this window
                    break
                calls.append(call)
            return calls
        raise _NoBound(f"no bound known for rerank stage {stage_config.kind!r}")

    def stage_notes(self, stage_config: Any) -> list[str]:
        o = stage_config.options
        notes = [f"passages: the corpus's longest documents, cut to {o['doc_words']} words"]
        local = self.config.stage_llm(stage_config)[0].startswith("local/")  # has logprobs
        if stage_config.kind == "llm-pointwise" and o["judge"] == "auto" and not local:
            notes.append("+1 call per query where the provider returns no logprobs (judge=auto)")
        if stage_config.kind in self._capped:
            notes.append("windows too long for the model's context counted with passages cut "
                         "shorter until they fit, as the stage sends them")  # fmt: skip
        return notes


def budget(config: RunConfig, name: str) -> int | None:
    """The longest completion budget of the agent or stage folder ``name``'s calls; None when
    one of them has none (then the context bounds it)."""
    prefix = f"{name}/"
    limits = [
        entry["params"].get("max_tokens", entry["params"].get("max_completion_tokens"))
        for key, entry in config.sampling.items()
        if key.startswith(prefix)
    ]
    return None if not limits or None in limits else max(limits)


def search_o1_calls(max_turns: int, max_searches: int, max_refusals: int) -> tuple[int, int]:
    """Search-o1's most (reasoning, Reason-in-Documents) calls per query.

    Every turn is a reasoning call, and no search follows the last one (``max_turns``). Past
    ``max_searches`` every search is refused, and ``max_refusals`` refusals in a row end the
    trajectory; a search made resets that count, so each search may follow
    ``max_refusals - 1`` refusals: at most ``(max_searches + 1) * max_refusals`` turns.
    """
    reasoning = max_turns
    if max_refusals:
        reasoning = min(reasoning, (max_searches + 1) * max_refusals)
    return reasoning, min(max_searches, reasoning - 1)


def _longest_documents(corpus: Mapping[str, str], k: int, words: int) -> list[str]:
    """The ids of the ``k`` documents whose first ``words`` words are longest, longest first.

    A cut is never longer than its text, so documents are cut longest text first and the
    search stops once no remaining text can beat the k-th cut found.
    """
    by_length = sorted(corpus, key=lambda d: -len(corpus[d]))
    best: list[tuple[int, int, str]] = []  # a min-heap of (cut length, -position, id)
    for position, doc_id in enumerate(by_length):
        if len(best) == k and len(corpus[doc_id]) <= best[0][0]:
            break
        cut = len(" ".join(corpus[doc_id].split()[:words]))
        item = (cut, -position, doc_id)
        if len(best) < k:
            heapq.heappush(best, item)
        elif item > best[0]:
            heapq.heapreplace(best, item)
    return [doc_id for _, _, doc_id in sorted(best, reverse=True)]


# --- counting tokens -------------------------------------------------------------------------


class _Counter:
    """Tokens of a chat request for one model; counts each message (or ChatML turn) once,
    so a query's prompts cost only what differs between them."""

    local = False
    context: int | None = None
    described = ""
    default_system: str | None = None  # the system prompt a local/ model gets when none is sent

    def __init__(self) -> None:
        self._memo: dict[str, int] = {}

    def count(self, messages: ToolMessages, tools: list[dict[str, Any]] | None = None) -> int:
        """With tools or tool turns, the plain messages `tool_text.text_messages` makes of
        them (what a local/ model is sent; each still counted once)."""
        from agents.llm.tool_text import text_messages, uses_tools

        if uses_tools(messages, tools):
            messages = text_messages(messages, tools, self.default_system)
        return self._count(messages)

    def _count(self, messages: Messages) -> int:
        raise NotImplementedError

    def count_text(self, text: str) -> int:
        return self.count([{"role": "user", "content": text}])

    def close(self) -> None:
        pass


class _LiteLLMCounter(_Counter):
    """litellm's token_counter, which adds a fixed overhead per message and per request; the
    sum of the messages counted one by one is checked against a whole request once."""

    def __init__(self, model: str) -> None:
        super().__init__()
        import litellm

        import agents.llm.client  # noqa: F401  (quiets litellm's console hints)

        self.model = model
        self._litellm = litellm
        self._checked = False
        self.context = _api_context(model)
        self.described = (
            "litellm's token_counter (its bundled tiktoken cl100k_base; approximate for models "
            "that tokenize otherwise)"
        )

    def _counted(self, **kwargs: Any) -> int:
        litellm = self._litellm
        saved = litellm.disable_hf_tokenizer_download, litellm.disable_token_counter
        # never download a Hugging Face tokenizer: the dry run opens no network
        litellm.disable_hf_tokenizer_download, litellm.disable_token_counter = True, False
        try:
            return int(litellm.token_counter(model=self.model, **kwargs))
        finally:
            litellm.disable_hf_tokenizer_download, litellm.disable_token_counter = saved

    def _count(self, messages: Messages) -> int:
        if not self._checked:
            self._checked = True
            self._additive = self._by_message(messages) == self._counted(messages=messages)
        if not self._additive:
            return self._counted(messages=messages)
        return self._by_message(messages)

    def _by_message(self, messages: Messages) -> int:
        empty = self._memo.get("")
        if empty is None:
            empty = self._memo[""] = self._counted(messages=[])
        total = empty
        for message in messages:
            key = f"{message['role']}\0{message['content']}"
            if key not in self._memo:
                self._memo[key] = self._counted(messages=[message]) - empty
            total += self._memo[key]
        return total


class _LocalCounter(_Counter):
    """An embedded model's own tokenizer on the ChatML prompt its provider renders (exact)."""

    local = True

    def __init__(self, name: str, path: Path) -> None:
        super().__init__()
        from llama_cpp import Llama
        from llama_cpp._utils import suppress_stdout_stderr

        from agents.llm.local import LOCAL_MODELS

        self.short = name.removeprefix("local/")
        self.default_system = LOCAL_MODELS[self.short].default_system
        self.context = LOCAL_MODELS[self.short].n_ctx
        # the vocabulary alone; llama.cpp warns on stderr that it has no context size
        with suppress_stdout_stderr(disable=False):
            self._llm = Llama(model_path=str(path), vocab_only=True, verbose=False)
        self._bos = len(self.tokenize("x")) - len(self.tokenize("x", add_bos=False))
        self.described = f"{self.short}'s own tokenizer on the ChatML prompt (exact)"

    def tokenize(self, text: str, add_bos: bool = True) -> list[int]:
        return self._llm.tokenize(text.encode("utf-8"), add_bos=add_bos, special=True)

    def _count(self, messages: Messages) -> int:
        from agents.llm.local import render_chatml

        prompt = render_chatml(messages, self.default_system)
        # every turn starts with the special token <|im_start|>, where tokenization restarts:
        # the turns can be counted apart (and each only once across queries)
        marker = "<|im_start|>"
        head, *turns = prompt.split(marker)
        total = self._bos + (len(self.tokenize(head, add_bos=False)) if head else 0)
        for turn in turns:
            piece = marker + turn
            if piece not in self._memo:
                self._memo[piece] = len(self.tokenize(piece, add_bos=False))
            total += self._memo[piece]
        return total

    def close(self) -> None:
        self._llm.close()


class _Counters:
    def __init__(self, cache_dir: Path) -> None:
        self.cache_dir = cache_dir
        self._by_model: dict[str, _Counter] = {}

    def get(self, model: str) -> _Counter:
        if model not in self._by_model:
            self._by_model[model] = self._make(model)
        return self._by_model[model]

    def _make(self, model: str) -> _Counter:
        if model.startswith("local/"):
            path = local_model_path(model, self.cache_dir)
            why = "its file is not joined yet (the first run joins it)"
            if path is not None:
                try:
                    return _LocalCounter(model, path)
                except Exception as e:  # a damaged file: the run will say so
                    why = f"its tokenizer did not load ({type(e).__name__})"
            counter = _LiteLLMCounter(model)
            counter.context = _local_context(model)
            counter.default_system = _local_system(model)
            counter.local = True
            counter.described += f"; not the model's own: {why}"
            return counter
        return _LiteLLMCounter(model)

    def described(self) -> dict[str, str]:
        return {model: c.described for model, c in self._by_model.items()}

    def close(self) -> None:
        for counter in self._by_model.values():
            counter.close()
        self._by_model.clear()


def local_model_path(model: str, cache_dir: Path) -> Path | None:
    """The GGUF file of a ``local/`` model if it can be read as it is: a single-part model's
    file, or a split one's file already joined by a run; None otherwise (joining would write
    half a gigabyte into the cache, which a dry run does not do)."""
    from agents.llm import local

    try:
        _, info = local._lookup(model)
        parts = [local._part_path(part, info) for part in info.parts]
    except (ValueError, local.LocalModelError):
        return None
    if len(parts) == 1:
        return parts[0]
    joined = cache_dir / "models" / info.filename
    expected = sum(p.stat().st_size for p in parts)
    return joined if joined.is_file() and joined.stat().st_size == expected else None


def _local_context(model: str) -> int | None:
    from agents.llm.local import LOCAL_MODELS

    info = LOCAL_MODELS.get(model.removeprefix("local/"))
    return info.n_ctx if info else None


def _local_system(model: str) -> str | None:
    from agents.llm.local import LOCAL_MODELS

    info = LOCAL_MODELS.get(model.removeprefix("local/"))
    return info.default_system if info else None


def _api_context(model: str) -> int | None:
    """The model's input limit in litellm's local map, when it has one."""
    import litellm

    try:
        limit = litellm.get_model_info(model).get("max_input_tokens")
    except Exception:  # an unmapped model: no limit known
        return None
    return int(limit) if limit else None


# --- cost ------------------------------------------------------------------------------------


def price(model: str, prompt_tokens: int, completion_tokens: int) -> float | None:
    """USD for these tokens from litellm's local price map; None for local or unknown models
    (the same rule as the LLM client's: a local model's name could match a priced one)."""
    if model.startswith("local/"):
        return None
    import litellm

    import agents.llm.client  # noqa: F401  (quiets litellm's console hints)

    try:
        prompt_cost, completion_cost = litellm.cost_per_token(
            model=model, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens
        )
    except Exception:  # unmapped models raise assorted errors
        return None
    return float(prompt_cost) + float(completion_cost)


def _stage_cost(stage: StageEstimate) -> float | None:
    if stage.source == UNKNOWN:
        return None
    if stage.model is None or not stage.total_calls:
        return 0.0
    return price(
        stage.model, round(stage.total_prompt_tokens), round(stage.total_completion_tokens)
    )


# --- printing --------------------------------------------------------------------------------


def format_estimate(est: Estimate) -> str:
    """The estimate as lines to print: a header, one row per task and stage, the totals."""
    state = {
        "new": "no run folder yet: upper bounds from the prompts and the limits",
        "measured": "a run of this configuration is there: measured where it has records",
        "other": "it holds another configuration: upper bounds from the prompts and the limits",
    }[est.state]
    lines = [f"dry run (no model called): {est.run_dir}", f"  {state}"]
    header = ("task", "stage", "queries", "calls/q", "prompt tok/q", "completion tok/q", "source")
    rows = []
    notes: list[str] = []
    for task in est.tasks:
        for stage in task.stages:
            label = stage.kind if stage.name == runs.AGENT_STAGE else stage.name
            if stage.model is None:
                rows.append((task.folder, label, str(stage.queries), "0", "-", "-", NO_LLM))
                continue
            notes += [f"{label}: {note}" for note in stage.notes]
            if stage.source == UNKNOWN:
                rows.append((task.folder, label, str(stage.queries), "?", "?", "?", UNKNOWN))
                continue
            source = {
                MEASURED: f"measured ({stage.measured_queries} q)",
                BOUND: "upper bound",
            }.get(stage.source, stage.source)
            rows.append((
                task.folder, label, str(stage.queries), _number(stage.calls, 1),
                _number(stage.prompt_tokens), _number(stage.completion_tokens), source,
            ))  # fmt: skip
    widths = [max(len(r[i]) for r in (header, *rows)) for i in range(len(header))]
    right = {2, 3, 4, 5}
    for row in (header, *rows):
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in
                 enumerate(zip(row, widths, strict=True))]  # fmt: skip
        lines.append("  " + "  ".join(cells).rstrip())
    for note in [*dict.fromkeys(notes), *est.notes]:
        lines.append(f"  note: {note}")
    for model, how in est.tokenizers.items():
        lines.append(f"  tokens of {model}: {how}")
    cost = est.cost
    if cost is not None:
        priced = usd(cost)
    elif est.unpriced:
        priced = f"{UNPRICED} ({', '.join(est.unpriced)})"
    else:
        priced = "unknown"
    unbounded = est.unbounded
    lines.append(
        f"total{' without ' + ', '.join(unbounded) if unbounded else ''}: "
        f"{_number(est.calls)} LLM calls, {_number(est.prompt_tokens)} prompt + "
        f"{_number(est.completion_tokens)} completion tokens; cost: {priced}"
    )
    return "\n".join(lines)


def usd(cost: float) -> str:
    """A cost as printed: cents for a dollar or more, else four significant figures."""
    if cost >= 1 or cost <= 0:
        return f"USD {cost:,.2f}"
    return f"USD {cost:.{3 - math.floor(math.log10(cost))}f}"


def _number(value: float, decimals: int = 0) -> str:
    if decimals and value != round(value):
        return f"{value:,.{decimals}f}"
    return f"{round(value):,}"
