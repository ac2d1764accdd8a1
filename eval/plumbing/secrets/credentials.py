"""The one rule for credentials in names and URLs, on the ground floor so every layer shares it.

A name holds a credential when a word of it is a credential's (`*_API_KEY`, `*_TOKEN`,
`*_SECRET*`, `*_PASSWORD`, `*_PASS`, `*_PWD`, `*_PAT`, `*_CRED*`, `*_AUTH*`, `*_COOKIE`,
`*_SIGNATURE`, ...) or a word ends in an unambiguous one (`GITHUBTOKEN`, `PGPASSWORD`), unless
its last word describes the credential rather than holds it (`*_FILE`, `*_PATH`, `*_URL`,
`*_TIMEOUT`, `token_type`, ...). A URL query parameter is also one when it is called `code`
(Azure Functions' `?code=`, an OAuth code).

A URL given by the user is recorded, named and printed only as `public_url` gives it: the
userinfo's password masked (`user:***@`), a lone userinfo masked whole (`***@`: a token, not
a user name), and every credential-named query or fragment parameter's value masked. Several
URLs joined by commas (replicas) are masked one by one. `url_secret` says where a URL holds a
credential, for the places that refuse one (a `remote:` retriever spec).
"""

from __future__ import annotations

import re
from urllib.parse import unquote_plus

MASK = "***"

# A name word that is a credential's wherever it stands (OPENAI_API_KEY, DB_PASS, GITHUB_PAT)
_CREDENTIAL_WORDS = frozenset(
    "KEY KEYS APIKEY APIKEYS TOKEN SECRET SECRETS PASSWORD PASSWORDS PASSWD PASS PASSPHRASE "
    "PWD PAT JWT CRED CREDS CREDENTIAL CREDENTIALS AUTH AUTHORIZATION BEARER COOKIE COOKIES "
    "SIG SIGNATURE".split()
)
# Only in a URL: as a variable's word CODE is ordinary (EXIT_CODE, CLAUDE_CODE_ENTRYPOINT)
_URL_CREDENTIAL_WORDS = frozenset({"CODE"})
# Glued words (GITHUBTOKEN, PGPASSWORD): only endings that name a credential in practice. Not
# PWD (OLDPWD), AUTH (OAUTH), PASS (SSH_ASKPASS, BYPASS) nor SESSION (GDMSESSION): as words
# they still count (DB_PWD, BASIC_AUTH, DB_PASS); SESSION never does (XDG_SESSION_ID), while
# AWS_SESSION_TOKEN and SESSION_SECRET count by their other word.
_CREDENTIAL_ENDINGS = (
    "KEY", "KEYS", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDS", "CREDENTIALS",
)  # fmt: skip
# A last word saying the name is about a credential, not one: where it is, how it is used
_DESCRIPTOR_WORDS = frozenset(
    "FILE FILES PATH DIR DIRECTORY FOLDER SOCK SOCKET PID INFO TYPE TIMEOUT TTL MANAGER "
    "ADDRESS URL URI HOST PORT DOMAIN ENDPOINT MODE METHOD PROVIDER ENABLED DISABLED NAME USER "
    "USERNAME LENGTH SIZE LIMIT COUNT EXPIRY EXPIRES ISSUER AUDIENCE ALGORITHM FORMAT VERSION "
    "REGION CMD COMMAND PROGRAM HELPER".split()
)
_NAME_WORD = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")  # OPENAI_API_KEY, apiKey
# A URL in free text (an error message): scheme://, then up to a space or a quote
# from the start of a run of scheme characters, taken whole: tried from each of its letters, a
# long run without "://" took quadratic time
URL_IN_TEXT = re.compile(r"(?<![a-zA-Z0-9+.-])[a-zA-Z][a-zA-Z0-9+.-]*+://[^\s\"'`]+")


def _words(name: str) -> list[str]:
    words = [w.upper() for w in _NAME_WORD.split(name) if w]
    while words and words[-1].isdigit():  # API_KEY_2, SSH_AUTH_INFO_0: the word before counts
        words.pop()
    return words


def is_credential_name(name: str) -> bool:
    """Whether a variable, option or header called ``name`` holds a credential, by its words."""
    words = _words(name)
    if not words or words[-1] in _DESCRIPTOR_WORDS:
        return False
    return any(w in _CREDENTIAL_WORDS or w.endswith(_CREDENTIAL_ENDINGS) for w in words)


def is_credential_parameter(name: str) -> bool:
    """Whether a URL query parameter called ``name`` holds one (``code`` too, in a URL)."""
    if is_credential_name(name):
        return True
    words = _words(name)
    return bool(words) and words[-1] not in _DESCRIPTOR_WORDS and words[-1] in _URL_CREDENTIAL_WORDS


def _split(url: str) -> tuple[str, str, str, str]:
    """``url`` as (scheme://, userinfo or "", the rest of the authority, path?query#fragment),
    by plain string cuts: the parts are given back byte for byte, unlike urlunsplit's."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return "", "", "", url
    end = min((i for i in (rest.find(c) for c in "/?#") if i >= 0), default=len(rest))
    userinfo, _, host = rest[:end].rpartition("@")
    return scheme + sep, userinfo, host, rest[end:]


def _secret_pairs(pairs: str) -> list[str]:
    """The credential-named parameters of ``a=1&token=x`` that hold a value."""
    names = [(unquote_plus(k), eq, v) for k, eq, v in (p.partition("=") for p in pairs.split("&"))]
    return [k for k, eq, v in names if eq and v and is_credential_parameter(k)]


def _mask_pairs(pairs: str) -> str:
    def one(pair: str) -> str:
        name, eq, value = pair.partition("=")
        secret = eq and value and is_credential_parameter(unquote_plus(name))
        return f"{name}={MASK}" if secret else pair

    return "&".join(one(p) for p in pairs.split("&"))


def _mask_tail(tail: str) -> str:
    """path?query#fragment with the credential parameters of the query and fragment masked
    (an OAuth redirect puts ``access_token`` in the fragment)."""
    rest, hash_, fragment = tail.partition("#")
    path, question, query = rest.partition("?")
    return path + question + _mask_pairs(query) + hash_ + _mask_pairs(fragment)


def _mask_userinfo(userinfo: str) -> str:
    user, colon, _ = userinfo.partition(":")
    return f"{user}:{MASK}" if colon else MASK  # a lone userinfo is a token, not a user name


def public_url(url: str | None) -> str | None:
    """``url`` as it may be recorded, named or printed: credentials masked (see the module)."""
    if not url:
        return url
    if "," in url:
        return ",".join(public_url(part) or "" for part in url.split(","))
    scheme, userinfo, host, tail = _split(url)
    at = f"{_mask_userinfo(userinfo)}@" if userinfo else ""
    return scheme + at + host + _mask_tail(tail)


def url_secret(url: str) -> str | None:
    """Where ``url`` (or one of several joined by commas) holds a credential: "userinfo" or
    "parameter 'token'"; None when it holds none."""
    for part in url.split(","):
        _, userinfo, _, tail = _split(part)
        if userinfo:
            return "userinfo"
        rest, _, fragment = tail.partition("#")
        found = _secret_pairs(rest.partition("?")[2]) + _secret_pairs(fragment)
        if found:
            return f"parameter {found[0]!r}"
    return None


def mask_urls(text: str) -> str:
    """``text`` with every URL in it as `public_url` gives it."""
    return URL_IN_TEXT.sub(lambda m: public_url(m[0]) or "", text)
