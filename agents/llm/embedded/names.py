"""How an embedded llama.cpp model is named: ``local/<name>``, ``<name>`` a key of
``agents.llm.embedded.weights.LOCAL_MODELS``. A leaf (it imports only the provider's name), so that
any module may ask whether a model runs in this process without loading llama.cpp or litellm."""

from __future__ import annotations

from eval.plumbing.secrets.api_keys import EMBEDDED_PROVIDER

LOCAL_PREFIX = f"{EMBEDDED_PROVIDER}/"


def is_local(model: str) -> bool:
    """Whether ``model`` names an embedded llama.cpp model, which runs in this process."""
    return model.startswith(LOCAL_PREFIX)


def local_name(model: str) -> str:
    """``local/<name>`` -> ``<name>``, the embedded model's key in ``LOCAL_MODELS``."""
    return model.removeprefix(LOCAL_PREFIX)
