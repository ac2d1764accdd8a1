"""Errors of the LLM stack that callers handle, importable without loading litellm."""


class LLMAuthError(Exception):
    """No API key, or a rejected one: one line that names the variable to set.

    Not a per-query failure: every other call to the provider would fail the same way.
    """


def is_context_overflow(exc: BaseException) -> bool:
    """A prompt longer than the model's context, as litellm reports it for every provider.

    Told by class name so that callers need not import litellm to ask.
    """
    return any(cls.__name__ == "ContextWindowExceededError" for cls in type(exc).__mro__)
