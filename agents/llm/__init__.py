"""The LLM stack: one client (litellm behind a response cache, retries, usage and cost), the
embedded llama.cpp models (`local`) and the scripted provider the tests use (`scripted`).

Public surface: `LLM` (the client), `Completion`, `Usage`, `LLMAuthError`, and the start-up
checks `check_model` and `check_credentials`. They are loaded on first use (PEP 562), so
code that only names them, or catches `LLMAuthError`, does not pay for importing litellm.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "LLM": "agents.llm.client",
    "Completion": "agents.llm.client",
    "check_credentials": "agents.llm.client",
    "check_model": "agents.llm.client",
    "Usage": "eval.usage",
    "LLMAuthError": "agents.llm.errors",
}
__all__ = list(_HOMES)


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'agents.llm' has no attribute {name!r}")
