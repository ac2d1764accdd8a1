"""A model named for a run, checked at start-up: a model string some provider takes
(`check_model`: an embedded ``local/`` model among the packaged ones, else a provider litellm
knows) and a key it can have (`check_credentials`, by the rules of `eval.plumbing.secrets`).
"""

from __future__ import annotations

from agents.llm.embedded.names import LOCAL_PREFIX, is_local, local_name
from eval.plumbing.lazy import load_litellm
from eval.plumbing.secrets.api_keys import missing_key_variables
from eval.plumbing.secrets.provider_keys import missing_key_line


def check_credentials(model: str, api_base: str | None) -> None:
    """Raise ValueError naming the variable to set when `model` cannot have a key.

    A server given by `api_base` is assumed to need none (a placeholder is sent), so only a
    provider's own endpoint is checked. Local and scripted providers need none.
    """
    if api_base or is_local(model):
        return
    missing = missing_key_variables(model)
    if missing:
        raise ValueError(missing_key_line(model, missing))


def check_model(model: str) -> None:
    """Raise ValueError for a model string no provider would take, before any query runs."""
    if is_local(model):
        from agents.llm.embedded.weights import LOCAL_MODELS

        if local_name(model) not in LOCAL_MODELS:
            raise ValueError(
                f"unknown local model {model!r}; local models: "
                + ", ".join(LOCAL_PREFIX + n for n in LOCAL_MODELS)
            )
        return
    provider = model.partition("/")[0]
    litellm = load_litellm()
    if any(entry["provider"] == provider for entry in litellm.custom_provider_map):
        return
    try:
        litellm.get_llm_provider(model)
    except Exception:
        raise ValueError(
            f"unknown model {model!r}: litellm knows no provider for it; name it as "
            "provider/model, e.g. openai/gpt-4o-mini or ollama/qwen2.5"
        ) from None
