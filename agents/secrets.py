"""Keeping credentials out of everything a run writes: records, configs, logs, sweep files.

Two places hold secrets. The environment: any variable named like a credential (`*KEY*`,
`*TOKEN*`, `*SECRET*`, `*PASS*`, `*PWD*`, `*AUTH*`, `*CRED*`, `*BEARER*`, `*COOKIE*`,
`*SESSION*`, `*SIGNATURE*`) is treated as one, whatever provider it is for. And URLs: a
password in the userinfo (`http://user:pw@host`) and query parameters named like a
credential (`?api_key=...`, `&token=...`) are masked before a URL is recorded. Provider
error messages can quote either back, so recorded errors pass through `redact` too.
"""

from __future__ import annotations

import os
import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

SECRET_NAME = re.compile(
    r"KEY|TOKEN|SECRET|PASS|PWD|AUTH|CRED|BEARER|COOKIE|SESSION|SIGNATURE|SIG$", re.IGNORECASE
)
MASK = "***"
# Sent as api_key to an `api_base` server when the provider's key variable is unset. It is a
# request option only, like a real key: never in the cache key, params, repr or a record.
NO_KEY_PLACEHOLDER = "r2med-agents-no-key"
_MIN_SECRET = 8  # shorter values ("1", "true") would mask ordinary words

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


def secret_values() -> dict[str, str]:
    """Environment values that are credentials, by variable name."""
    return {
        name: value
        for name, value in os.environ.items()
        if SECRET_NAME.search(name) and len(value) >= _MIN_SECRET
    }


def redact(text: str, extra: tuple[str, ...] = ()) -> str:
    """``text`` with every credential masked: environment secrets by their variable's name,
    URL passwords, credential-named key=value pairs, and the ``extra`` strings given."""
    for name, value in sorted(secret_values().items(), key=lambda kv: -len(kv[1])):
        text = text.replace(value, f"<{name}>")
    for value in extra:
        if value:
            text = text.replace(value, MASK)
    text = _USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", text)
    text = _BEARER.sub(lambda m: f"{m['scheme']} {MASK}", text)
    return _PAIR.sub(lambda m: f"{m['key']}{m['sep']}{MASK}", text)


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
        [(k, MASK if SECRET_NAME.search(k) else v) for k, v in parse_qsl(parts.query, True)],
        safe="*",
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
