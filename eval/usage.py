"""LLM usage (calls, tokens, cost, time) and the one rule for summing it.

It lives here, below `agents`, because the runner sums it per query and per task and
`eval.compare` sums it again over the saved records: both must add unknown costs alike.
No heavy imports: `agents.trace` and `eval.compare` read usage without loading litellm.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any


@dataclass
class Usage:
    """Calls, tokens, cost and time, summed per call, per query or per run."""

    calls: int = 0
    cached_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float | None = 0.0  # USD; None as soon as any summed call could not be priced
    latency_s: float = 0.0

    def add(self, other: Usage) -> None:
        self.calls += other.calls
        self.cached_calls += other.cached_calls
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        # a total with an unpriced part is unknown, not the priced part passed off as all
        self.cost = None if self.cost is None or other.cost is None else self.cost + other.cost
        self.latency_s += other.latency_s

    @classmethod
    def unread_call(cls) -> Usage:
        """One call whose reply could not be used as an answer: counted as a call, its
        tokens unknown (0) and its cost unknown (None)."""
        return cls(calls=1, cost=None)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any] | None) -> Usage:
        """The inverse of ``to_dict``, lenient with records written by older versions.

        Unknown keys are ignored and null counts read as 0, but a missing or null cost
        reads as unknown (None): a record that does not say what it cost was not priced.
        """
        values = values or {}
        cost = values.get("cost")
        return cls(
            calls=int(values.get("calls") or 0),
            cached_calls=int(values.get("cached_calls") or 0),
            prompt_tokens=int(values.get("prompt_tokens") or 0),
            completion_tokens=int(values.get("completion_tokens") or 0),
            cost=None if cost is None else float(cost),
            latency_s=float(values.get("latency_s") or 0.0),
        )

    @classmethod
    def total(cls, usages: Iterable[Usage]) -> Usage:
        """The sum of ``usages`` by ``add`` (a fresh object; none of them is changed)."""
        out = cls()
        for usage in usages:
            out.add(usage)
        return out
