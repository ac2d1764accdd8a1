"""The LLM stack: one client (litellm behind a response cache, retries, usage and cost), the
embedded llama.cpp models (the litellm provider `local`; `weights`, `chatml`, `pool` and
`generation` behind it) and the scripted provider the tests use (`scripted`).

Public surface: `LLM` (the client), `Completion`, `Usage`, `LLMAuthError`, and the start-up
checks `check_model` and `check_credentials`. They are loaded on first use (PEP 562), so
code that only names them, or catches `LLMAuthError`, does not pay for importing litellm.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "LLM": "agents.llm.client",
    "Completion": "agents.llm.responses",
    "check_credentials": "agents.llm.keys",
    "check_model": "agents.llm.keys",
    "Usage": "eval.usage",
    "LLMAuthError": "agents.llm.errors",
}
__all__ = list(_HOMES)


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(importlib.import_module(_HOMES[name]), name)
    raise AttributeError(f"module 'agents.llm' has no attribute {name!r}")
