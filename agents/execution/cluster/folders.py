"""Folders sent between a driver and its workers as bytes: nothing assumes a shared disk.

A cell's inputs that live on the driver's disk (a dataset folder, prompt files, a run file, a
generations file, the cell's run folder when it resumes) travel to the worker, and the run
folder travels back. Paths recorded in a run folder's JSON files (config.json, task.json) are
the driver's on the driver and the worker's on the worker: `relocate` rewrites them, so a run
folder resumes on either side and its config.json says what the driver asked for.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def pack(folder: Path) -> bytes:
    """``folder``'s files as a tar archive."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path in sorted(p for p in Path(folder).rglob("*") if p.is_file()):
            if path.name != ".lock":  # a lock is the process's that held it
                tar.add(path, arcname=str(path.relative_to(folder)))
    return buffer.getvalue()


def unpack(data: bytes, folder: Path) -> Path:
    """Write an archive made by `pack` into ``folder`` (made if missing)."""
    folder.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
        tar.extractall(folder, filter="data")  # no absolute paths, links or devices
    return folder


def relocate(folder: Path, paths: Mapping[str, str]) -> None:
    """Rewrite every string in ``folder``'s JSON files that is one of ``paths``' keys, or a path
    below one, to the same place below its value."""
    for file in sorted(Path(folder).rglob("*.json")):
        text = file.read_text(encoding="utf-8")
        data = json.loads(text)
        moved = _moved(data, paths)
        if moved != data:
            indent = 2 if text.startswith("{\n") or text.startswith("[\n") else None
            tmp = file.with_name(file.name + ".tmp")
            tmp.write_text(json.dumps(moved, indent=indent) + ("\n" if text.endswith("\n") else ""))
            os.replace(tmp, file)


def _moved(value: Any, paths: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        for old, new in paths.items():
            if value == old or value.startswith(old.rstrip("/") + "/"):
                return new + value[len(old) :]
        return value
    if isinstance(value, list):
        return [_moved(v, paths) for v in value]
    if isinstance(value, dict):
        return {k: _moved(v, paths) for k, v in value.items()}
    return value
