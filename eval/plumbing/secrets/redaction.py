"""Keeping credentials out of everything a run writes: records, configs, logs, sweep files.

Two places hold secrets. The environment: a variable is a credential when a word of its name
is a credential's (`*_API_KEY`, `*_TOKEN`, `*_SECRET*`, `*_PASSWORD`, `*_PASSWD`, `*_PASS`,
`*_PWD`, `*_PAT`, `*_CRED*`, `*_AUTH*`, `*_COOKIE`, `*_SIGNATURE`, ...) or a word ends in an
unambiguous one (`GITHUBTOKEN`, `DBPASSWORD`, `OPENAIKEY`), whatever provider it is for. Not
credentials, though their names hold such a fragment: the shell's and desktop's own
variables (`PWD`, `OLDPWD`, `SSH_AUTH_SOCK`, `XDG_SESSION_ID`, `KEYTIMEOUT`, ...), names
that describe a credential rather than hold it (`*_FILE`, `*_PATH`, `*_DIR`, `*_SOCK`,
`*_URL`, `*_TIMEOUT`, ...), and values that cannot be one (shorter than 8 characters, a
number, an existing path). Masking those would rewrite every recorded path under the working
directory into `<PWD>/...`.

And URLs: a password in the userinfo (`http://user:pw@host`) and query parameters named like
a credential (`?api_key=...`, `&token=...`) are masked before a URL is recorded. Provider
error messages can quote either back, so recorded errors pass through `redact` too.
"""

from __future__ import annotations

import os
import re

from eval.plumbing.secrets.api_keys import NO_KEY_PLACEHOLDER
from eval.plumbing.secrets.credentials import MASK, is_credential_name, mask_urls, public_url

__all__ = ["MASK", "NO_KEY_PLACEHOLDER", "is_credential_name", "public_url", "redact"]
_MIN_SECRET = 8  # shorter values ("1", "true") would mask ordinary words

# The shell's, the desktop's and the ssh/gpg agents' own variables: ids, paths and sockets
_PUBLIC_NAMES = frozenset(
    "PWD OLDPWD HOME PATH SHELL USER LOGNAME LANG TERM MAIL DISPLAY WAYLAND_DISPLAY "
    "HISTFILE HISTSIZE HISTFILESIZE HISTCONTROL KEYTIMEOUT SESSION_MANAGER DESKTOP_SESSION "
    "GDMSESSION DBUS_SESSION_BUS_ADDRESS SSH_AUTH_SOCK SSH_AGENT_PID SSH_ASKPASS SUDO_ASKPASS "
    "GIT_ASKPASS GPG_AGENT_INFO GPG_TTY XAUTHORITY KRB5CCNAME WINDOWPATH TMUX TMUX_PANE LESSKEY "
    "LESSKEYIN".split()
)
_PUBLIC_PREFIXES = ("XDG_", "LC_")
_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")  # no backtracking

# name: value and name=value pairs in free text (query strings, headers, JSON); a pair is
# masked when `is_credential_name` says its name is a credential's
# A name is matched from the start of its run of name characters, and whole (possessive):
# tried from every "_" inside a long run, the pattern took quadratic time (74 s on 80 KB).
_PAIR = re.compile(
    r"(?<![A-Za-z0-9_-])(?P<pre>[_-]*)(?P<key>[A-Za-z0-9][A-Za-z0-9_-]*+)"
    r"(?P<sep>[\"']?\s*(?:=|:)\s*[\"']?)(?P<value>[^\s&\"',;]+)"
)
_BEARER = re.compile(r"(?P<scheme>Bearer|Basic)\s+[A-Za-z0-9._~+/=-]+", re.IGNORECASE)


def _is_public_variable(name: str) -> bool:
    upper = name.upper()
    return upper in _PUBLIC_NAMES or upper.startswith(_PUBLIC_PREFIXES)


def _is_existing_path(value: str) -> bool:
    # only path-shaped values: a bare word could name a file in the working directory
    if not value.startswith(("/", "~", "./", "../")):
        return False
    try:
        return os.path.exists(os.path.expanduser(value))
    except (OSError, ValueError):  # embedded NUL, a name too long
        return False


def _can_be_secret(value: str) -> bool:
    """Whether ``value`` could be a credential: long enough, not a number, not a path.

    Masking a number or a path would rewrite doc ids, scores and every recorded path.
    """
    value = value.strip()
    if len(value) < _MIN_SECRET or _NUMBER.fullmatch(value):
        return False
    return not _is_existing_path(value)


def secret_values() -> dict[str, str]:
    """Environment values that are credentials, by variable name."""
    return {
        name: value
        for name, value in os.environ.items()
        if not _is_public_variable(name) and is_credential_name(name) and _can_be_secret(value)
    }


def _mask_pair(m: re.Match[str]) -> str:
    name = f"{m['pre']}{m['key']}{m['sep']}"
    if not is_credential_name(m["key"]):  # its value may hold a pair: `a=token=x`
        return f"{name}{_PAIR.sub(_mask_pair, m['value'])}"
    if _is_existing_path(m["value"]):  # `pwd: /work/run` is a folder, not a password
        return m[0]
    return f"{name}{MASK}"


def redact(text: str, extra: tuple[str, ...] = ()) -> str:
    """``text`` with every credential masked: environment secrets by their variable's name,
    URL passwords, credential-named key=value pairs, and the ``extra`` strings given."""
    # Longest first: a secret containing another is masked whole, leaving no tail behind.
    for name, value in sorted(secret_values().items(), key=lambda kv: (-len(kv[1]), kv[0])):
        text = text.replace(value, f"<{name}>")
    for value in sorted(extra, key=len, reverse=True):
        if value:
            text = text.replace(value, MASK)
    text = mask_urls(text)  # the one URL rule: userinfo, credential parameters
    text = _BEARER.sub(lambda m: f"{m['scheme']} {MASK}", text)
    return _PAIR.sub(_mask_pair, text)
