"""Result files written atomically and durably, and the checks on the folders they go to.

Every file a run derives (metrics, tables, TREC runs, configs) is written to a temporary file
in the same folder, fsynced, renamed over the target and the folder fsynced, so a crash or a
full disk leaves either the old file or the new one, never a truncated one that a resumed run
would trust.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any


class FolderError(ValueError):
    """A folder we must write to cannot be used; the message names it and says why."""


def write_text(path: Path | str, text: str) -> None:
    """Replace ``path`` with ``text`` (UTF-8) atomically and durably."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def write_json(path: Path | str, value: Any, **dump_options: Any) -> None:
    """``write_text`` of ``value`` as JSON (indent 2 unless told otherwise), newline-ended."""
    dump_options.setdefault("indent", 2)
    write_text(path, json.dumps(value, **dump_options) + "\n")


def fsync_dir(folder: Path) -> None:
    """Make a rename inside ``folder`` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def writable_folder(path: Path | str, what: str) -> Path:
    """Create ``path`` if needed and prove we can write in it; else one-line ``FolderError``.

    Checked before any work starts, so a read-only, full or mistyped folder (a file where a
    folder should be) is refused up front rather than after the LLM calls were paid for.
    """
    path = Path(path).expanduser()
    for parent in [path, *path.parents]:
        if parent.exists() and not parent.is_dir():
            raise FolderError(f"{what} {path}: {parent} is a file, not a folder")
        if parent.exists():
            break
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=path, prefix=".write-check.")
        try:
            os.write(fd, b"x")
            os.fsync(fd)
        finally:
            os.close(fd)
            os.unlink(probe)
    except OSError as e:
        raise FolderError(f"{what} {path}: cannot write there ({describe_os_error(e)})") from None
    return path


def describe_os_error(e: OSError) -> str:
    """A short reason for an OSError, with the disk-full and read-only cases spelled out."""
    if e.errno == errno.ENOSPC:
        return "no space left on the device"
    if e.errno == errno.EROFS:
        return "read-only file system"
    if e.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    return e.strerror or type(e).__name__


_UNSAFE = re.compile(r"[^A-Za-z0-9_.=+,@-]+")
MAX_NAME = 200  # bytes; file systems allow 255 per path component


def safe_name(text: str) -> str:
    """``text`` as one portable path component: unsafe runs become '_', and a name too long
    for a file system is cut and ends in a hash of the whole text, so distinct texts stay
    distinct."""
    name = _UNSAFE.sub("_", text).strip("_.") or "x"
    if len(name) > MAX_NAME:  # ASCII after the substitution: characters are bytes
        digest = hashlib.sha256(text.encode()).hexdigest()[:8]
        name = name[: MAX_NAME - 9].rstrip("_.") + "-" + digest
    return name


def check_component(name: str, flag: str) -> str:
    """Refuse a user-given folder name that is not exactly one path component.

    ``.``, ``..``, absolute paths and names with a separator would put (and, with
    ``--overwrite``, delete) a folder outside the one meant.
    """
    bad = (
        not name
        or name in (".", "..")
        or "/" in name
        or "\\" in name
        or "\0" in name
        or name != name.strip()
        or any(not c.isprintable() for c in name)
    )
    if bad:
        raise ValueError(
            f"{flag} {name!r}: must be a single folder name (no '/', not '.' or '..', "
            "no leading or trailing spaces)"
        )
    if len(name.encode()) > 255:
        raise ValueError(f"{flag}: a folder name is at most 255 bytes, got {len(name.encode())}")
    return name
