"""Result files written atomically and durably, and the checks on the folders they go to.

Every file a run derives (metrics, tables, TREC runs, configs) is written to a temporary file
in the same folder, fsynced, renamed over the target and the folder fsynced, so a crash or a
full disk leaves either the old file or the new one, never a truncated one that a resumed run
would trust.

Files and folders are created with the modes ``open()`` and ``mkdir()`` give (0666 and 0777
less the umask), never tempfile's private 0600/0700, so a team's shared results or cache
folder stays readable to the others under a group-friendly umask.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any


class FolderError(ValueError):
    """A folder we must write to cannot be used; the message names it and says why."""


def write_text(path: Path | str, text: str) -> None:
    """Replace ``path`` with ``text`` (UTF-8) atomically and durably."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = create_temp_file(path.parent, prefix=f".{path.name}.", suffix=".tmp")
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


_TEMP_ATTEMPTS = 100
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)  # as mkstemp: a child process inherits no temp file
# O_EXCL: never open a file someone else made (or a symlink planted) under the random name
_TEMP_FLAGS = os.O_RDWR | os.O_CREAT | os.O_EXCL | _CLOEXEC


def _temp_name(folder: Path, prefix: str, suffix: str) -> Path:
    return Path(folder) / f"{prefix}{os.urandom(8).hex()}{suffix}"


def create_temp_file(
    folder: Path | str, prefix: str = ".tmp.", suffix: str = ""
) -> tuple[int, Path]:
    """A new file in ``folder`` opened for writing, as ``(fd, path)``: ``tempfile.mkstemp``
    with the mode ``open()`` would give (0666 & ~umask) instead of 0600.

    The kernel applies the umask (and any default ACL) at creation, so there is no umask to
    read and no chmod racing other threads.
    """
    for _ in range(_TEMP_ATTEMPTS):
        path = _temp_name(Path(folder), prefix, suffix)
        try:
            return os.open(path, _TEMP_FLAGS, 0o666), path
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name in {folder}")


def create_temp_dir(folder: Path | str, prefix: str = ".tmp.") -> Path:
    """A new empty folder in ``folder``: ``tempfile.mkdtemp`` with the mode ``mkdir`` would
    give (0777 & ~umask) instead of 0700, so it can be renamed into a shared place as is."""
    for _ in range(_TEMP_ATTEMPTS):
        path = _temp_name(Path(folder), prefix, "")
        try:
            path.mkdir(0o777)
            return path
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name in {folder}")


def diskcache_folder(directory: Path | str, db_name: str = "cache.db") -> str:
    """``directory`` made ready for ``diskcache.Cache``, which makes its folder 0755 and whose
    SQLite makes ``cache.db`` 0644 whatever the umask (its -wal and -shm files copy the
    database's mode): both are created first with the umask's modes, and reused if present."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    try:
        os.close(os.open(directory / db_name, os.O_WRONLY | os.O_CREAT | _CLOEXEC, 0o666))
    except OSError:  # not ours to report: opening the cache names the problem better
        pass
    return str(directory)


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
        fd, probe = create_temp_file(path, prefix=".write-check.")
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
