"""Whether a model API's key is in the environment, and what a server that needs none is sent.

One rule for the LLM client (agents.llm.client) and the embedding calls (retrievers.api_embed),
on the ground floor so that both share it: litellm names the credential variables a model's
provider needs; those the environment lacks are "missing". A call to an ``api_base`` server
(vLLM, llama.cpp, TEI: most need no key) whose key is missing is sent `NO_KEY_PLACEHOLDER` as
its ``api_key``, since the OpenAI SDK refuses to build a client without one. litellm is
imported when a model is first looked up.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from eval.plumbing.lazy import load_litellm
from eval.plumbing.secrets.credentials import is_credential_name

# Sent as api_key to an `api_base` server when the provider's key variable is unset. It is a
# request option only, like a real key: never in the cache key, params, repr or a record.
NO_KEY_PLACEHOLDER = "r2med-agents-no-key"

# Providers whose SDKs find credentials beyond environment variables (AWS config files and
# instance roles, Azure AD and managed identities, Google ADC): an unset variable proves
# nothing, and an api_key would switch them to another auth scheme.
# litellm's provider name for the embedded llama.cpp models (agents.llm.embedded.provider), which
# need no key: model names "local/<name>"
EMBEDDED_PROVIDER = "local"

AMBIENT_CREDENTIALS = frozenset({"bedrock", "sagemaker", "azure", "azure_ai", "vertex_ai"})


def is_custom_provider(provider: str) -> bool:
    """A provider registered with litellm as custom (``local``: the embedded models')."""
    return provider == EMBEDDED_PROVIDER or any(
        entry["provider"] == provider for entry in load_litellm().custom_provider_map
    )


def provider_of(model: str) -> str | None:
    """litellm's provider for ``model``; None for a model litellm does not know."""
    try:
        return load_litellm().get_llm_provider(model)[1]
    except Exception:  # an unknown model; the caller's own checks report it
        return None


def missing_key_variables(model: str) -> list[str]:
    """The credential variables litellm says `model` needs and the environment lacks."""
    provider = provider_of(model)
    if provider is None or is_custom_provider(provider) or provider in AMBIENT_CREDENTIALS:
        return []
    missing = load_litellm().validate_environment(model=model)["missing_keys"]
    # litellm also reports *_API_BASE, *_API_VERSION, VERTEXAI_PROJECT, ...: not secrets
    return [name for name in missing if is_credential_name(name)]


def placeholder_key(
    models: Iterable[str], api_base: str | None, params: Mapping[str, Any]
) -> dict[str, str]:
    """``{"api_key": NO_KEY_PLACEHOLDER}`` for calls to the server ``api_base`` names when
    ``params`` gives no key and the environment lacks one of ``models``' keys; else ``{}``."""
    models = list(models)
    if api_base and models and "api_key" not in params:
        if any(missing_key_variables(m) for m in models):
            return {"api_key": NO_KEY_PLACEHOLDER}
    return {}
