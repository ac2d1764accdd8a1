"""Errors of the LLM stack that callers handle, importable without loading litellm."""


class LLMRunError(Exception):
    """A fault that is not one query's but the run's: every other call would meet it too, so
    the run stops (keeping every finished query) with this one line."""


class LLMAuthError(LLMRunError):
    """No API key, or a rejected one: one line that names the variable to set."""


class LLMUnavailable(LLMRunError):
    """The server stopped answering: every attempt of a call timed out or found no server.
    The line names the server and the timeout."""


class LLMReplyError(Exception):
    """A reply the client cannot use (no choices; an answer emptied by the length limit): the
    query fails with this reason, and the reply is not cached as an answer."""


def is_context_overflow(exc: BaseException) -> bool:
    """A prompt longer than the model's context, as litellm reports it for every provider.

    Told by class name so that callers need not import litellm to ask.
    """
    return any(cls.__name__ == "ContextWindowExceededError" for cls in type(exc).__mro__)
