"""A missing API key of a common provider, found without importing litellm.

litellm names the variables a provider's key is read from (`eval.plumbing.secrets.api_keys`), but
importing it takes seconds; a run refused for a missing key should say so at once. The providers
below read their key from the variables listed, exactly as litellm's ``validate_environment`` says
(tests/agents/commands/test_fast_refusals.py checks each against it), so a run with none of them set
can be refused before litellm loads. Any other provider, or a key that is set, is left to litellm's
own check.
"""

from __future__ import annotations

import os

# provider -> the variables its key is read from (any one of them will do), in litellm's order
KEY_VARIABLES: dict[str, tuple[str, ...]] = {
    "openai": ("OPENAI_API_KEY",),
    "anthropic": ("ANTHROPIC_API_KEY",),
    "gemini": ("GOOGLE_API_KEY", "GEMINI_API_KEY"),
    "groq": ("GROQ_API_KEY",),
    "mistral": ("MISTRAL_API_KEY",),
    "deepseek": ("DEEPSEEK_API_KEY",),
    "together_ai": ("TOGETHERAI_API_KEY",),
    "openrouter": ("OPENROUTER_API_KEY",),
    "cohere": ("COHERE_API_KEY",),
    "fireworks_ai": ("FIREWORKS_AI_API_KEY",),
    "xai": ("XAI_API_KEY",),
    "perplexity": ("PERPLEXITYAI_API_KEY",),
    "deepinfra": ("DEEPINFRA_API_KEY",),
    "cerebras": ("CEREBRAS_API_KEY",),
}


def known_missing_keys(model: str, api_base: str | None) -> list[str]:
    """The key variables ``model`` needs when it names a provider above and the environment
    holds none of them (litellm counts a variable set to "" as set); [] otherwise, including
    for a server given by ``api_base`` (sent a placeholder, as `agents.llm.model_checks` does)."""
    provider, slash, _ = model.partition("/")
    if api_base or not slash or provider not in KEY_VARIABLES:
        return []
    names = KEY_VARIABLES[provider]
    return [] if any(name in os.environ for name in names) else list(names)


def missing_key_line(model: str, missing: list[str]) -> str:
    """The one line refusing a run of ``model`` for want of a key in ``missing``."""
    return (
        f"{model} needs an API key: set {' or '.join(missing)} "
        "(or give --api-base for a server that needs none)"
    )
