"""The worst-case model a dry run puts behind the one LLM client: it answers every call at no
cost, with the longest reply the call allows, and counts what a real model would be paid for.

`LLM.chat` hands a dry client's calls here instead of to a provider: the prompt is counted with
the model's tokenizer (`agents.llm.tokens`) and with its whole completion budget
(``max_tokens``, cut to what the context leaves where the embedded provider cuts it); a prompt
that outgrows the model's context is counted as filling it (a provider would refuse it, but a
trajectory that read less would make the call), and every call is answered with what the
agent's or stage's ``worst_case`` hook writes from a filler of that length: by default the
filler alone; an agent that searches answers with a search every turn (see
`agents.graphs.search_o1.worst_case`). No cache is read or written and no network is opened.
"""

from __future__ import annotations

import contextvars
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.llm.tokens import Counter, counter
from agents.llm.tool_text import ToolCall
from eval.usage import Usage

# the graph node making the current call (set by `agents.llm.steps.llm_call`): hooks answer by it
NODE: contextvars.ContextVar[str] = contextvars.ContextVar("node", default="")
FILLER_WORD = "the"  # one token, after a space, in the BPE vocabularies of the models here


@dataclass(frozen=True)
class WorstCase:
    """What a ``worst_case`` hook answers from."""

    node: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    filler: str  # a text as long as the call's whole completion budget
    documents: Sequence[str]  # the ids the dry retriever returns, longest document first
    options: Mapping[str, Any]  # the agent's or stage's options
    serial: int  # this call's number in the run: a search query made of it is never repeated


@dataclass
class Reply:
    text: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    stop_reason: str | None = None  # the stop string the text ended at


Hook = Callable[[WorstCase], Reply]


def filler_reply(case: WorstCase) -> Reply:
    return Reply(case.filler)


@dataclass
class Tally:
    """What one stage's calls would be paid for."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    overflows: int = 0  # calls whose prompt outgrew the context (counted as filling it)
    unbudgeted: int = 0  # calls without max_tokens and no known context (counted as 0 tokens)


class DryModel:
    """Shared by a dry run's clients: one counter per model, and the stage being counted."""

    def __init__(self, cache_dir: Path, documents: Sequence[str] = ()) -> None:
        self.cache_dir = cache_dir
        self.documents = documents
        self.hook: Hook = filler_reply
        self.options: Mapping[str, Any] = {}
        self.tally = Tally()
        self._counters: dict[str, Counter] = {}
        self._serial = itertools.count(1)

    def begin(self, hook: Hook | None, options: Mapping[str, Any]) -> Tally:
        """Count a new stage's calls, answered by ``hook`` (the filler alone when None)."""
        self.hook, self.options, self.tally = hook or filler_reply, options, Tally()
        return self.tally

    def counter(self, model: str) -> Counter:
        if model not in self._counters:
            self._counters[model] = counter(model, self.cache_dir)
        return self._counters[model]

    def tokenizers(self) -> dict[str, str]:
        return {model: c.described for model, c in self._counters.items()}

    def close(self) -> None:
        for c in self._counters.values():
            c.close()
        self._counters.clear()

    def complete(self, model: str, messages: list[dict], request: Mapping[str, Any]) -> Any:
        """The call's worst-case `Completion`, counted in the stage's tally."""
        from agents.llm.responses import Completion

        count = self.counter(model)
        tools = request.get("tools")
        prompt = count.count(messages, tools)
        budget = request.get("max_tokens", request.get("max_completion_tokens"))
        context = count.context
        if context is not None and prompt >= context:
            # a provider refuses it unpaid, but a trajectory that read less would make the
            # call: it is counted as filling the context, and the trajectory goes on
            self.tally.overflows += 1
            if budget is None:
                prompt, budget = context - 1, 1
            elif count.local:  # the embedded provider cuts max_tokens to what is left
                budget = min(budget, context - 1)
                prompt = context - budget
            else:
                prompt = context - 1
        elif budget is None or (count.local and context is not None):
            room = None if context is None else context - prompt
            budget = room if budget is None else min(budget, room)  # type: ignore[type-var]
        if budget is None:
            self.tally.unbudgeted += 1
        case = WorstCase(
            node=NODE.get(), messages=messages, tools=tools,
            filler=" ".join([FILLER_WORD] * max(1, budget or 1)), documents=self.documents,
            options=self.options, serial=next(self._serial),
        )  # fmt: skip
        reply = self.hook(case)
        self.tally.calls += 1
        self.tally.prompt_tokens += prompt
        self.tally.completion_tokens += budget or 0
        usage = Usage(calls=1, prompt_tokens=prompt, completion_tokens=budget or 0, cost=None)
        return Completion(
            text=reply.text, finish_reason="tool_calls" if reply.tool_calls else "stop",
            usage=usage, cached=False, model=model,
            logprobs=[] if request.get("logprobs") else None,  # no judgement token: read text
            stop_reason=reply.stop_reason, tool_calls=list(reply.tool_calls),
        )  # fmt: skip

    def truncate(self, model: str, text: str, limit: int) -> tuple[str, str]:
        return self.counter(model).truncate(text, limit)
