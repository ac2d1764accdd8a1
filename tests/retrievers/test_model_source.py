"""A model named by a folder or a hub name is checked before any work (retrievers.model_source):
a broken folder, a missing path or a hub name that cannot be had offline is one line naming
the model and what is wrong, in about a second, with no run folder; a model that loads as
the wrong class is never encoded with.

The folders are tiny models in the real layouts (tests/tiny_models.py); the hub cache is a
folder in the hub's own layout (``models--org--name/snapshots/<commit>``, ``refs/main``).
"""

from __future__ import annotations

import shutil
import struct
import time
from pathlib import Path

import pytest

import agents.commands.run
import retrievers.model_source as model_source
from retrievers.config import RetrieverConfig
from retrievers.model_source import MODEL, TOKENIZER, ModelSourceError, check_model_source
from retrievers.search import check_models
from tests import tiny_models
from tests.helpers import one_line_error

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory) -> Path:
    return tiny_models.bert(tmp_path_factory.mktemp("models") / "bert")


@pytest.fixture
def bert(bert_dir: Path, tmp_path: Path) -> Path:
    """A copy of the tiny BERT the test may damage."""
    return Path(shutil.copytree(bert_dir, tmp_path / "bert"))


@pytest.fixture
def offline(monkeypatch):
    monkeypatch.setattr(model_source, "hub_unreachable", lambda: "HF_HUB_OFFLINE is set")


@pytest.fixture
def hub_cache(tmp_path: Path, monkeypatch) -> Path:
    """An empty local hub cache of the test's own."""
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    return cache


def cached(hub_cache: Path, repo_id: str, folder: Path) -> Path:
    """``folder``'s files as the hub client caches ``repo_id``."""
    repo = hub_cache / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / COMMIT
    shutil.copytree(folder, snapshot)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    return snapshot


def refusal(name: str, needs=MODEL) -> str:
    with pytest.raises(ModelSourceError) as caught:
        check_model_source(name, "--retriever dense:X", needs)
    message = str(caught.value)
    assert "\n" not in message and message.startswith("--retriever dense:X: ")
    return message


# --- folders --------------------------------------------------------------------------------


def test_a_whole_folder_passes(bert: Path):
    check_model_source(str(bert), "--retriever dense:X")


def test_the_bundled_default_and_a_sentence_transformers_layout_pass():
    check_models(RetrieverConfig(spec="dense"))  # its Transformer module is the root


def write_header_claiming(path: Path, length: int) -> None:
    path.write_bytes(struct.pack("<Q", length) + b"{}")


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        (lambda f: f.write_bytes(f.read_bytes()[: f.stat().st_size // 2]), "incomplete metadata"),
        (lambda f: f.write_bytes(b"\x93garbage, not a model" * 50), "header too large"),
        (lambda f: write_header_claiming(f, 2**62), "header too large"),
        (lambda f: f.write_bytes(b""), "model.safetensors is empty"),
    ],
    ids=["truncated", "garbage", "2^62-byte header", "empty"],
)
def test_damaged_weights_are_refused_naming_the_file(bert: Path, damage, says):
    damage(bert / "model.safetensors")
    message = refusal(str(bert))
    assert str(bert) in message and "model.safetensors" in message and says in message


def test_no_tokenizer_files_is_refused_not_an_empty_tokenizer(bert: Path):
    for name in ("tokenizer.json", "vocab.txt"):
        (bert / name).unlink(missing_ok=True)
    assert "no tokenizer files (one of tokenizer.json, vocab.txt" in refusal(str(bert))
    # and a tokenizer alone is needed of a tokenizer= option
    assert "no tokenizer files" in refusal(str(bert), TOKENIZER)


def test_an_invalid_config_json_and_missing_weights_are_named(bert: Path):
    (bert / "config.json").write_text("{not json")
    assert "config.json is not JSON (Expecting property name" in refusal(str(bert))
    (bert / "config.json").unlink()
    assert refusal(str(bert)).endswith(f"{bert}: no config.json")


def test_missing_weights(bert: Path):
    (bert / "model.safetensors").unlink()
    assert "no weights (one of model.safetensors" in refusal(str(bert))


def test_a_sharded_checkpoint_is_checked_shard_by_shard(bert: Path):
    (bert / "model.safetensors").rename(bert / "model-00001-of-00001.safetensors")
    index = {
        "weight_map": {"embeddings.word_embeddings.weight": "model-00001-of-00001.safetensors"}
    }
    (bert / "model.safetensors.index.json").write_text(__import__("json").dumps(index))
    check_model_source(str(bert), "--retriever dense:X")
    (bert / "model-00001-of-00001.safetensors").unlink()
    assert "model-00001-of-00001.safetensors is missing" in refusal(str(bert))


def test_a_peft_adapter_folder_needs_its_weights_not_a_tokenizer(tmp_path: Path):
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text('{"base_model_name_or_path": "b"}')
    assert "an adapter without weights" in refusal(str(adapter))
    (adapter / "adapter_model.safetensors").write_bytes(b"")
    assert "adapter_model.safetensors is empty" in refusal(str(adapter))


def test_a_path_that_does_not_exist_is_no_hub_name(tmp_path: Path):
    assert refusal(str(tmp_path / "nowhere")).endswith(
        "no such folder, and not a hub name (organisation/model)"
    )
    assert "no such folder" in refusal("./models/bge")
    (tmp_path / "file").write_text("x")
    assert refusal(str(tmp_path / "file")).endswith("is a file, not a model folder")


# --- hub names --------------------------------------------------------------------------------


def test_a_hub_name_offline_and_not_cached_names_the_hub_and_a_way_out(hub_cache, offline):
    message = refusal("BAAI/bge-large-en-v1.5")
    assert message == (
        "--retriever dense:X: BAAI/bge-large-en-v1.5 is not in the local hub cache "
        f"({hub_cache}) and the Hugging Face hub cannot be reached (HF_HUB_OFFLINE is set); "
        "download it where the hub answers (hf download BAAI/bge-large-en-v1.5 --local-dir "
        "DIR) and name the folder instead"
    )


def test_a_cached_hub_name_offline_is_checked_as_its_snapshot(hub_cache, offline, bert):
    snapshot = cached(hub_cache, "org/tiny-bert", bert)
    check_model_source("org/tiny-bert", "--retriever dense:X")
    (snapshot / "model.safetensors").write_bytes(b"")
    message = refusal("org/tiny-bert")
    assert f"org/tiny-bert (hub cache {snapshot}): model.safetensors is empty" in message


def test_a_hub_name_is_left_to_the_hub_when_it_answers(hub_cache, monkeypatch):
    monkeypatch.setattr(model_source, "hub_unreachable", lambda: None)
    check_model_source("BAAI/bge-large-en-v1.5", "--retriever dense:X")  # downloaded at load


def test_the_real_reachability_check_offline(hub_cache, monkeypatch):
    """Not mocked: HF_HUB_OFFLINE is what the hub client reads, and no socket is opened."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert "(HF_HUB_OFFLINE is set)" in refusal("BAAI/bge-large-en-v1.5")


# --- the commands -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "flags",
    [
        ["--retriever", "dense:{model}"],
        ["--retriever", "bm25+dense:{model}"],
        ["--rerank", "cross:{model}"],
        ["--rerank", "reasonrank,tokenizer={model}", "--model", "scripted/m"],
        ["--rerank", "rank1,tokenizer={model}", "--model", "scripted/m"],
    ],
)
def test_a_run_naming_a_broken_model_is_one_line_at_once(bert, tmp_path, capsys, flags):
    for name in ("tokenizer.json", "vocab.txt"):
        (bert / name).unlink(missing_ok=True)
    args = [f.replace("{model}", str(bert)) for f in flags]
    started = time.monotonic()
    status = agents.commands.run.main(["--agent", "none", "--dataset", "demo",
                              "--runs-dir", str(tmp_path / "runs"), *args])  # fmt: skip
    assert status == 2 and time.monotonic() - started < 5
    line = one_line_error(capsys)
    assert line.startswith("error: --") and f"{bert}: no tokenizer files" in line
    assert not (tmp_path / "runs").exists()


def test_a_run_naming_a_hub_model_offline_is_one_line_at_once(hub_cache, offline, tmp_path,
                                                               capsys):  # fmt: skip
    for flags in (["--retriever", "dense:BAAI/bge-large-en-v1.5"],
                  ["--rerank", "cross:BAAI/bge-reranker-v2-m3"]):  # fmt: skip
        status = agents.commands.run.main(["--agent", "none", "--dataset", "demo",
                                  "--runs-dir", str(tmp_path / "runs"), *flags])  # fmt: skip
        line = one_line_error(capsys)
        assert status == 2 and "is not in the local hub cache" in line, line
        assert "Hugging Face hub cannot be reached" in line and "--local-dir" in line
    assert not (tmp_path / "runs").exists()


def test_a_model_without_its_family_s_own_code_is_refused_before_any_work(bert, tmp_path, capsys):
    runs = str(tmp_path / "runs")
    status = agents.commands.run.main(["--agent", "none", "--dataset", "demo", "--quiet",
                              "--retriever", f"dense:{bert}", "--dense-family", "nv-embed",
                              "--trust-remote-code", "--runs-dir", runs])  # fmt: skip
    assert status == 2 and not (tmp_path / "runs").exists()
    assert "config.json names no model code of its own (auto_map's AutoModel)" in (
        one_line_error(capsys)
    )


def test_a_model_that_loads_as_another_class_is_never_encoded_with(bert):
    """Past the folder check (its config.json claims code of its own), the loaded class is
    checked before the first text is encoded."""
    from retrievers.encoders import family_encoder
    from retrievers.families import family_for

    with pytest.raises(ValueError, match=r"loaded as BertModel, which has no encode\(\)"):
        family_encoder(str(bert), family_for("x", "nv-embed"), "fp32", "cpu", None, 8, True)
