"""A model named by a folder or a hub name, checked before anything loads it.

Loading is where a wrong name or a broken folder would otherwise surface: offline, the hub
client retries each file for half a minute and transformers ends in a many-line ``OSError``;
a truncated ``model.safetensors`` ends in a ``SafetensorError`` traceback; a folder without
tokenizer files loads, under transformers 5, as an empty tokenizer that turns every text into
``[UNK]``. `check_model_source` decides each of these in one line before any work, without
importing torch or transformers: safetensors headers are read by the safetensors package
itself (``safe_open`` checks the header and that the data it describes is all there).

A hub name whose files are not in the local hub cache is refused when the hub cannot be
reached; where it can, the name is left to transformers, which downloads it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from eval.plumbing.quoting import clipped

# What transformers and sentence-transformers load weights from (one of them, or its index).
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
ADAPTER_WEIGHT_FILES = ("adapter_model.safetensors", "adapter_model.bin")
# A tokenizer is one of these: fast (tokenizer.json), WordPiece (vocab.txt), SentencePiece
# (tokenizer.model, spiece.model, sentencepiece.bpe.model) or byte-level BPE (vocab.json and
# merges.txt). Without any of them transformers 5 builds an empty tokenizer.
TOKENIZER_FILES = (
    "tokenizer.json",
    "vocab.txt",
    "tokenizer.model",
    "spiece.model",
    "sentencepiece.bpe.model",
    "vocab.json",
)
_REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+")
_TRANSFORMER_MODULE = "sentence_transformers.models.Transformer"


class ModelSourceError(ValueError):
    """A model that cannot load as named; the message is one line."""


@dataclass(frozen=True)
class Needs:
    """What a loader reads from the model's folder."""

    weights: bool = True
    tokenizer: bool = True
    config: bool = True  # config.json (a PEFT adapter has adapter_config.json instead)
    # the class ``AutoModel`` loads comes from the repository's own code (config.json's
    # auto_map), as NV-Embed's and ReasonIR's do: a folder without it would load as a plain
    # model (families.OWN_CODE_LOADERS)
    own_code: bool = False

    @classmethod
    def tokenizer_only(cls) -> Needs:
        return cls(weights=False, tokenizer=True, config=False)


MODEL = Needs()
TOKENIZER = Needs.tokenizer_only()
NEEDS = {"model": MODEL, "tokenizer": TOKENIZER}  # what a stage's model option names


def check_model_source(name: str, what: str, needs: Needs = MODEL) -> None:
    """Refuse, in one line starting with ``what`` (the flag or option naming the model), a
    model that cannot be loaded from ``name``: a folder missing what ``needs`` asks for or
    holding a damaged file, a path that does not exist, or a hub name that is neither in the
    local hub cache nor reachable."""
    path = Path(name).expanduser()
    if path.is_dir():
        check_folder(path, what, needs)
        return
    if path.exists():
        raise ModelSourceError(f"{what}: {path} is a file, not a model folder")
    if _looks_like_path(name) or not _REPO_ID.fullmatch(name):
        raise ModelSourceError(
            f"{what}: {clipped(name, 500)}: no such folder, and not a hub name (organisation/model)"
        )
    snapshot = cached_snapshot(name)
    why = hub_unreachable()
    if why is None:
        return  # transformers downloads what the cache lacks
    if snapshot is None:
        raise ModelSourceError(
            f"{what}: {name} is not in the local hub cache ({_hub_cache()}) and the Hugging "
            f"Face hub cannot be reached ({why}); download it where the hub answers "
            f"(hf download {name} --local-dir DIR) and name the folder instead"
        )
    check_folder(snapshot, what, needs, hub_name=name)


@contextmanager
def loading(what: str, name: str) -> Iterator[None]:
    """Around a model's load: what the checks above could not foresee (a weight file damaged
    inside, a class the folder's code does not define) as one line naming ``name``, not the
    loader's traceback."""
    from safetensors import SafetensorError

    try:
        yield
    except (OSError, SafetensorError, ImportError) as err:
        text = " ".join(str(err).split()) or type(err).__name__
        raise ModelSourceError(f"{what}: {name}: cannot load ({clipped(text, 300)})") from None


def check_folder(folder: Path, what: str, needs: Needs = MODEL, hub_name: str = "") -> None:
    """``folder`` holds what ``needs`` asks for, readable: config.json as JSON, a tokenizer's
    files, and weights whose safetensors headers describe data that is all there."""
    shown = f"{hub_name} (hub cache {folder})" if hub_name else str(folder)
    if (folder / "adapter_config.json").is_file() and not (folder / "config.json").is_file():
        _check_adapter(folder, what, shown)  # a PEFT adapter: its base model holds the rest
        return
    for module in _transformer_modules(folder, what, shown):
        if needs.config:
            config = _check_json(module / "config.json", what, shown, required=True)
            auto_map = config.get("auto_map") if isinstance(config, dict) else None
            if needs.own_code and not (isinstance(auto_map, dict) and "AutoModel" in auto_map):
                raise ModelSourceError(
                    f"{what}: {shown}: config.json names no model code of its own (auto_map's "
                    "AutoModel), which this family encodes with; pick its family with "
                    "--dense-family"
                )
        if needs.tokenizer and not any((module / f).is_file() for f in TOKENIZER_FILES):
            raise ModelSourceError(
                f"{what}: {shown}: no tokenizer files (one of {', '.join(TOKENIZER_FILES)})"
            )
        if needs.weights:
            _check_weights(module, what, shown)


def _check_adapter(folder: Path, what: str, shown: str) -> None:
    _check_json(folder / "adapter_config.json", what, shown, required=True)
    weights = [n for n in ADAPTER_WEIGHT_FILES if (folder / n).is_file()]
    if not weights:
        files = ", ".join(ADAPTER_WEIGHT_FILES)
        raise ModelSourceError(f"{what}: {shown}: an adapter without weights (one of {files})")
    for name in weights:
        _check_weight_file(folder / name, what, shown)


def _transformer_modules(folder: Path, what: str, shown: str) -> list[Path]:
    """The folders a model's transformer is loaded from: the folder itself, or for a
    sentence-transformers model each Transformer module's folder that ``modules.json`` lists."""
    listed = _check_json(folder / "modules.json", what, shown, required=False)
    if not isinstance(listed, list):
        return [folder]
    paths = [
        folder / str(m.get("path", ""))
        for m in listed
        if isinstance(m, dict) and m.get("type") == _TRANSFORMER_MODULE
    ]
    return paths or [folder]


def _check_json(file: Path, what: str, shown: str, required: bool) -> object:
    if not file.is_file():
        if required:
            raise ModelSourceError(f"{what}: {shown}: no {file.name}")
        return None
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ModelSourceError(f"{what}: {shown}: {file.name} is not JSON ({err})") from None


def _check_weights(folder: Path, what: str, shown: str) -> None:
    present = [name for name in WEIGHT_FILES if (folder / name).is_file()]
    if not present:
        raise ModelSourceError(f"{what}: {shown}: no weights (one of {', '.join(WEIGHT_FILES)})")
    for name in present:
        if name.endswith(".index.json"):
            index = _check_json(folder / name, what, shown, required=True)
            shards = sorted(set((index or {}).get("weight_map", {}).values()))  # type: ignore[union-attr]
            if not shards:
                raise ModelSourceError(f"{what}: {shown}: {name} lists no weight files")
            for shard in shards:
                _check_weight_file(folder / shard, what, shown)
        else:
            _check_weight_file(folder / name, what, shown)


def _check_weight_file(file: Path, what: str, shown: str) -> None:
    if not file.is_file():
        raise ModelSourceError(f"{what}: {shown}: {file.name} is missing")
    if file.stat().st_size == 0:
        raise ModelSourceError(f"{what}: {shown}: {file.name} is empty")
    if file.suffix != ".safetensors":
        return
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(file), framework="numpy"):
            pass
    except SafetensorError as err:
        reason = str(err).removeprefix("Error while deserializing header: ")
        raise ModelSourceError(
            f"{what}: {shown}: {file.name} is damaged or not a safetensors file ({reason})"
        ) from None


def _looks_like_path(name: str) -> bool:
    return name.startswith(("/", "./", "../", "~", ".\\")) or name.count("/") > 1 or "\\" in name


def cached_snapshot(repo_id: str) -> Path | None:
    """The newest snapshot folder of ``repo_id`` in the local hub cache, if it has one."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    try:
        return Path(snapshot_download(repo_id, local_files_only=True))
    except (LocalEntryNotFoundError, HFValidationError, OSError):
        return None


def _hub_cache() -> str:
    from huggingface_hub import constants

    return constants.HF_HUB_CACHE


def hub_unreachable() -> str | None:
    from eval.datasets import hub_unreachable as why

    return why()
