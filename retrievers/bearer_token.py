"""The retrieval server's bearer token as read from the environment: one rule for the server
(`retrievers.serve`, HTTP API and MCP over HTTP alike) and its client (`retrievers.remote`).

The rule: a variable that is unset or empty means no token. Any other value must be printable
ASCII with no space (characters ``!`` to ``~``): an HTTP header carries ASCII only, and nothing
is stripped, so a value read from a file with its line end is refused here rather than sent as
a header that h11 rejects (or compared unequal by the server). A server that listens on an
address other than loopback needs at least `MIN_LENGTH` such characters: a short token
guards nothing against a client that can try as many as it likes.

No message says which character is wrong, where it is, or how long the token is: only the
variable's name and the kind of fault.
"""

from __future__ import annotations

import os

MIN_LENGTH = 16  # for a server off loopback
RULE = "printable ASCII with no space or line end"
STRONG_RULE = f"at least {MIN_LENGTH} characters of {RULE}"
MAKE_ONE = "python -c 'import secrets; print(secrets.token_urlsafe(32))'"


class TokenError(ValueError):
    """The token's variable holds a value that cannot be a bearer token; the message names the
    variable and the fault, never a character of the value."""


def fault(value: str) -> str | None:
    """What keeps ``value`` from being a bearer token (a phrase), or None."""
    if not value.strip():
        return "holds only whitespace"
    if value != value.strip():
        return "starts or ends with whitespace (a line end read from a file?)"
    if not value.isascii():
        return "holds a character that is not ASCII"
    if any(c.isspace() for c in value):
        return "holds whitespace"
    if not value.isprintable():
        return "holds a control character"
    return None


def read_token(variable: str) -> str | None:
    """The token in ``$variable``; None when it is unset or empty; `TokenError` in one line
    when it breaks the rule."""
    value = os.environ.get(variable) if variable else None
    if not value:
        return None
    problem = fault(value)
    if problem is not None:
        raise TokenError(f"${variable} {problem}: a bearer token is {RULE}; set it again")
    return value


def check_strong(token: str, variable: str, host: str) -> None:
    """`TokenError` unless ``token`` is long enough to guard a server on ``host`` (off
    loopback)."""
    if len(token) < MIN_LENGTH:
        raise TokenError(
            f"${variable} is too short to guard --host {host} (reachable from other machines): "
            f"a token there is {STRONG_RULE}; make one with {MAKE_ONE}"
        )
