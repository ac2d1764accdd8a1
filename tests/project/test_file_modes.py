"""Everything a run writes gets the modes the user's umask gives, so shared folders stay shared.

tempfile's mkstemp/mkdtemp make 0600 files and 0700 folders, diskcache makes its folder 0755
and SQLite its database 0644 whatever the umask: a team's results or cache folder written
that way is unreadable (or unwritable) to the rest of the group.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from agents.commands.run import main
from agents.llm import scripted
from agents.llm.cache import LLMCache
from eval.plumbing.files import create_temp_dir, create_temp_file, write_json, write_text
from retrievers.bm25 import build_bm25
from retrievers.dense import _atomic_save_npy

PASSAGE = "Metformin reduces hepatic glucose production in type 2 diabetes."
UMASKS = [0o022, 0o002, 0o077]


@pytest.fixture(params=UMASKS, ids=lambda m: f"umask{m:03o}")
def umask(request) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def wrong_modes(root: Path, umask: int) -> dict[str, str]:
    """Each file and folder under ``root`` (itself included) whose mode is not the umask's."""
    want_file, want_dir = 0o666 & ~umask, 0o777 & ~umask
    wrong = {}
    for path in [root, *root.rglob("*")]:
        want = want_dir if path.is_dir() else want_file
        if not path.is_symlink() and mode(path) != want:
            wrong[str(path.relative_to(root.parent))] = f"{mode(path):04o}, want {want:04o}"
    return wrong


def run(toy_dir: Path, runs: Path, cache: Path, name: str, *extra: str) -> int:
    return main([
        "--agent", "hyde", "--dataset", str(toy_dir), "--model", "scripted/test",
        "--runs-dir", str(runs), "--cache-dir", str(cache), "--run-name", name, "--quiet",
        *extra,
    ])  # fmt: skip


def test_a_run_writes_every_file_and_folder_with_the_umasks_mode(umask, tmp_path, toy_dir):
    scripted.install(lambda messages, params: PASSAGE)
    runs, cache = tmp_path / "runs", tmp_path / "cache"
    assert run(toy_dir, runs, cache, "bm25") == 0
    assert run(toy_dir, runs, cache, "bm25") == 0  # a resume rewrites the derived files
    written = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")}
    # what the check below covers: the run's records and tables, the LLM cache (diskcache's
    # folder and SQLite files) and the BM25 index (a folder renamed into place)
    assert {"runs/bm25/config.json", "runs/bm25/toy/queries.jsonl", "cache/llm/cache.db"} <= (
        written
    )
    assert [p for p in written if p.startswith("cache/bm25") and p.endswith("index.npz")]
    assert wrong_modes(runs, umask) | wrong_modes(cache, umask) == {}


def test_a_dense_run_writes_its_embeddings_with_the_umasks_mode(tmp_path, toy_dir):
    old = os.umask(0o002)
    try:
        scripted.install(lambda messages, params: PASSAGE)
        runs, cache = tmp_path / "runs", tmp_path / "cache"
        assert run(toy_dir, runs, cache, "dense", "--retriever", "dense") == 0
        assert list(cache.rglob("embeddings.npy")) and list(cache.rglob("meta.json"))
        assert wrong_modes(runs, 0o002) | wrong_modes(cache, 0o002) == {}
    finally:
        os.umask(old)


def test_atomic_writes_replace_with_the_umasks_mode(umask, tmp_path):
    target = tmp_path / "out" / "metrics.json"
    write_json(target, {"ndcg": 1.0})
    assert mode(target) == 0o666 & ~umask
    os.chmod(target, 0o600)  # replacing an older file gives the new one the umask's mode too
    write_text(target, "{}\n")
    assert mode(target) == 0o666 & ~umask and target.read_text() == "{}\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["metrics.json"]  # no temp left


def test_temporary_files_and_folders_get_the_umasks_mode(umask, tmp_path):
    fd, path = create_temp_file(tmp_path, prefix=".x.", suffix=".tmp")
    os.close(fd)
    folder = create_temp_dir(tmp_path, prefix=".d.")
    assert path.name.startswith(".x.") and path.name.endswith(".tmp")
    assert folder.is_dir() and folder.name.startswith(".d.")
    assert (mode(path), mode(folder)) == (0o666 & ~umask, 0o777 & ~umask)
    fd, other = create_temp_file(tmp_path, prefix=".x.", suffix=".tmp")
    os.close(fd)
    assert other != path  # a fresh name each time, never an existing file reopened


def test_cache_writers_use_the_umasks_mode(umask, tmp_path):
    root = tmp_path / "cache"
    build_bm25({"d1": "aspirin platelets", "d2": "statins"}, cache_dir=root, progress=False)
    (root / "dense").mkdir()
    _atomic_save_npy(root / "dense" / "embeddings.npy", np.zeros((2, 3), np.float32))
    store = LLMCache(root / "llm")
    entry = {"text": "x", "finish_reason": "stop", "prompt_tokens": 1, "completion_tokens": 1}
    store.set("k", {**entry, "cost": None, "model": "m"})
    store.close()
    assert list(root.glob("bm25-*/index.npz")) and list((root / "llm").glob("cache.db*"))
    assert wrong_modes(root, umask) == {}
