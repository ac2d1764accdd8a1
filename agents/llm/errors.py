"""Errors of the LLM stack that callers handle, importable without loading litellm."""


class LLMAuthError(Exception):
    """No API key, or a rejected one: one line that names the variable to set.

    Not a per-query failure: every other call to the provider would fail the same way.
    """
