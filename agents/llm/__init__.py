"""The LLM stack: one client (litellm behind a response cache, retries, usage and cost), the
embedded llama.cpp models (the litellm provider `local`; `weights`, `chatml`, `pool` and
`generation` behind it) and the scripted provider the tests use (`scripted`).

Public surface: `LLM` (the client), `Completion`, `Usage`, `LLMAuthError`, and the start-up
checks `check_model` and `check_credentials`. They are loaded on first use (PEP 562), so
code that only names them, or catches `LLMAuthError`, does not pay for importing litellm.
"""

from __future__ import annotations

from eval.plumbing.lazy import lazy_face

# module -> the public names defined there, each under its own name
__all__, __getattr__, __dir__ = lazy_face(
    globals(),
    {
        "agents.llm.client": ("LLM",),
        "agents.llm.responses": ("Completion",),
        "agents.llm.model_checks": ("check_credentials", "check_model"),
        "eval.usage": ("Usage",),
        "agents.llm.errors": ("LLMAuthError",),
    },
)
