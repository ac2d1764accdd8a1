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
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

MASK = "***"
# Sent as api_key to an `api_base` server when the provider's key variable is unset. It is a
# request option only, like a real key: never in the cache key, params, repr or a record.
NO_KEY_PLACEHOLDER = "r2med-agents-no-key"
_MIN_SECRET = 8  # shorter values ("1", "true") would mask ordinary words

# A name word that is a credential's wherever it stands (OPENAI_API_KEY, DB_PASS, GITHUB_PAT)
_CREDENTIAL_WORDS = frozenset(
    "KEY KEYS APIKEY APIKEYS TOKEN SECRET SECRETS PASSWORD PASSWORDS PASSWD PASS PASSPHRASE "
    "PWD PAT JWT CRED CREDS CREDENTIAL CREDENTIALS AUTH AUTHORIZATION BEARER COOKIE COOKIES "
    "SIG SIGNATURE".split()
)
# Glued words (GITHUBTOKEN, PGPASSWORD): only endings that name a credential in practice. Not
# PWD (OLDPWD), AUTH (OAUTH), PASS (SSH_ASKPASS, BYPASS) nor SESSION (GDMSESSION): as words
# they still count (DB_PWD, BASIC_AUTH, DB_PASS); SESSION never does (XDG_SESSION_ID), while
# AWS_SESSION_TOKEN and SESSION_SECRET count by their other word.
_CREDENTIAL_ENDINGS = (
    "KEY", "KEYS", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDS", "CREDENTIALS",
)  # fmt: skip
# A last word saying the variable is about a credential, not one: where it is, how it is used
_DESCRIPTOR_WORDS = frozenset(
    "FILE FILES PATH DIR DIRECTORY FOLDER SOCK SOCKET PID INFO TYPE TIMEOUT TTL MANAGER "
    "ADDRESS URL URI HOST PORT DOMAIN ENDPOINT MODE METHOD PROVIDER ENABLED DISABLED NAME USER "
    "USERNAME LENGTH SIZE LIMIT COUNT EXPIRY EXPIRES ISSUER AUDIENCE ALGORITHM FORMAT VERSION "
    "REGION CMD COMMAND PROGRAM HELPER".split()
)
# The shell's, the desktop's and the ssh/gpg agents' own variables: ids, paths and sockets
_PUBLIC_NAMES = frozenset(
    "PWD OLDPWD HOME PATH SHELL USER LOGNAME LANG TERM MAIL DISPLAY WAYLAND_DISPLAY "
    "HISTFILE HISTSIZE HISTFILESIZE HISTCONTROL KEYTIMEOUT SESSION_MANAGER DESKTOP_SESSION "
    "GDMSESSION DBUS_SESSION_BUS_ADDRESS SSH_AUTH_SOCK SSH_AGENT_PID SSH_ASKPASS SUDO_ASKPASS "
    "GIT_ASKPASS GPG_AGENT_INFO GPG_TTY XAUTHORITY KRB5CCNAME WINDOWPATH TMUX TMUX_PANE LESSKEY "
    "LESSKEYIN".split()
)
_PUBLIC_PREFIXES = ("XDG_", "LC_")
_NAME_WORD = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")  # OPENAI_API_KEY, apiKey
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")

# URL userinfo in free text: scheme://user:password@host
_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<user>[^\s/:@]*):[^\s/@]+@")
# key=value pairs in free text whose key is a credential's name (query strings, headers)
_PAIR = re.compile(
    r"(?P<key>(?<![A-Za-z0-9])(?:[A-Za-z0-9]+[_-])*(?:api[_-]?key|key|token|secret|password|"
    r"passwd|pwd|auth|authorization|sig|signature))(?![A-Za-z0-9])"
    r"(?P<sep>[\"']?\s*(?:=|:)\s*[\"']?)(?P<value>[^\s&\"',;]+)",
    re.IGNORECASE,
)
_BEARER = re.compile(r"(?P<scheme>Bearer|Basic)\s+[A-Za-z0-9._~+/=-]+", re.IGNORECASE)


def is_credential_name(name: str) -> bool:
    """Whether a variable or URL parameter called ``name`` holds a credential, by its words."""
    words = [w.upper() for w in _NAME_WORD.split(name) if w]
    while words and words[-1].isdigit():  # API_KEY_2, SSH_AUTH_INFO_0: the word before counts
        words.pop()
    if not words or words[-1] in _DESCRIPTOR_WORDS:
        return False
    return any(w in _CREDENTIAL_WORDS or w.endswith(_CREDENTIAL_ENDINGS) for w in words)


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
    if _is_existing_path(m["value"]):  # `pwd: /work/run` is a folder, not a password
        return m[0]
    return f"{m['key']}{m['sep']}{MASK}"


def redact(text: str, extra: tuple[str, ...] = ()) -> str:
    """``text`` with every credential masked: environment secrets by their variable's name,
    URL passwords, credential-named key=value pairs, and the ``extra`` strings given."""
    # Longest first: a secret containing another is masked whole, leaving no tail behind.
    for name, value in sorted(secret_values().items(), key=lambda kv: (-len(kv[1]), kv[0])):
        text = text.replace(value, f"<{name}>")
    for value in sorted(extra, key=len, reverse=True):
        if value:
            text = text.replace(value, MASK)
    text = _USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", text)
    text = _BEARER.sub(lambda m: f"{m['scheme']} {MASK}", text)
    return _PAIR.sub(_mask_pair, text)


def public_url(url: str | None) -> str | None:
    """``url`` as it may be recorded: the password and credential-named parameters masked.

    Several URLs joined by commas (replicas) are masked one by one.
    """
    if not url:
        return url
    if "," in url:
        return ",".join(public_url(part) or "" for part in url.split(","))
    parts = urlsplit(url)
    netloc = parts.netloc
    if parts.password is not None:
        netloc = netloc.replace(f":{parts.password}@", f":{MASK}@", 1)
    query = urlencode(
        [(k, MASK if is_credential_name(k) else v) for k, v in parse_qsl(parts.query, True)],
        safe="*",
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
