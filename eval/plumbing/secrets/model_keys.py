"""A model's API key: which variables hold it (`key_variables`), and a failed key told apart
from other errors (`is_auth_error`) and said in one line without the provider's text
(`auth_error_message`).

Which variables are credentials, and which of them litellm says a model lacks, is the one rule
of `credentials` and `api_keys` beside this module; this module only asks it. API keys come
from the environment as litellm expects (OPENAI_API_KEY, ...) and are never part of a message
here.
"""

from __future__ import annotations

import os

from eval.plumbing.lazy import load_litellm
from eval.plumbing.secrets.api_keys import (
    AMBIENT_CREDENTIALS,
    is_custom_provider,
    missing_key_variables,
    provider_of,
)
from eval.plumbing.secrets.credentials import is_credential_name

# The OpenAI SDK refuses to build a client without a key; litellm reports that as an
# InternalServerError, which would otherwise be retried as a transient 5xx.
_MISSING_KEY_MESSAGES = ("Missing credentials", "api_key client option must be set")


def key_variables(model: str) -> list[str]:
    """The environment variables to set for `model`'s API key; [] if none is known.

    litellm names only missing variables, so a set but rejected key is found among the set
    credential variables named after the provider, else litellm's <PROVIDER>_API_KEY
    convention (e.g. HOSTED_VLLM_API_KEY).
    """
    missing = missing_key_variables(model)
    provider = provider_of(model)
    if missing or provider is None or is_custom_provider(provider):
        return missing
    if provider in AMBIENT_CREDENTIALS:
        return missing
    stem = provider.replace("_", "").upper()
    present = sorted(
        name
        for name in os.environ
        if is_credential_name(name) and name.replace("_", "").upper().startswith(stem)
    )
    return present or [f"{provider.upper()}_API_KEY"]


def is_auth_error(exc: BaseException) -> bool:
    """A missing or rejected key, however litellm reports it."""
    if isinstance(exc, load_litellm().AuthenticationError):
        return True
    text = str(exc)
    return any(message in text for message in _MISSING_KEY_MESSAGES)


def auth_error_message(model: str, exc: BaseException, sent_placeholder: bool) -> str:
    """One line for an auth failure, without the provider's text (it may quote the key)."""
    status = getattr(exc, "status_code", None)
    if not isinstance(exc, load_litellm().AuthenticationError):
        why = "no API key"
    elif sent_placeholder:
        why = f"{status}: the server wants an API key"
    else:
        why = f"{status}: the API key was rejected"
    variables = key_variables(model)
    hint = f"set {' or '.join(variables)}" if variables else "check the provider's credentials"
    return f"{model}: authentication failed ({why}); {hint}"
