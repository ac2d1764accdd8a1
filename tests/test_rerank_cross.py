"""The `cross` rerank stage, with a tiny cross-encoder built here from local weights.

No cross-encoder weights can be installed offline, so the bundled all-MiniLM-L6-v2 gets a fresh
classification head, seeded so its scores are the same on every run; its ranking quality is
meaningless, which is fine: the tests compare the stage with the model's own `predict`.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

import agents.registry
from agents import config as cfg
from agents.rerank import StageContext
from agents.rerank.cross import CROSS, ScoreCache, build_stage, load_cross_encoder
from agents.run import main
from eval.runs import read_records
from tests.conftest import DOCS, QUERIES

FILLER = {f"x{i}": f"Filler passage number {i} about nothing medical." for i in range(7)}
CORPUS = {**DOCS, **FILLER}


@pytest.fixture(scope="session")
def tiny_cross_encoder(tmp_path_factory) -> Path:
    import torch
    from sentence_transformers import CrossEncoder

    from retrievers.dense import resolve_model

    torch.manual_seed(0)  # the head is freshly initialised: seed it for stable scores
    model = CrossEncoder(resolve_model("all-MiniLM-L6-v2")[1], num_labels=1, device="cpu")
    path = tmp_path_factory.mktemp("cross") / "tiny-cross"
    model.save(str(path))
    return path


@pytest.fixture
def predict_calls(monkeypatch) -> list[int]:
    """Every CrossEncoder.predict call, as the number of pairs it scored."""
    from sentence_transformers import CrossEncoder

    calls: list[int] = []
    real = CrossEncoder.predict

    def spy(self, inputs, *args, **kwargs):
        calls.append(len(inputs))
        return real(self, inputs, *args, **kwargs)

    monkeypatch.setattr(CrossEncoder, "predict", spy)
    return calls


def _stage(model: Path, cache_dir: Path | None, **options):
    typed = cfg.typed_options(CROSS, {"model": str(model), "device": "cpu", **options}, "rerank")
    return build_stage(StageContext(corpus=CORPUS, task="toy", options=typed, cache_dir=cache_dir))


def _previous_ranking() -> dict[str, float]:
    ids = list(CORPUS)[::-1]  # an order the model would not give
    return {d: float(len(ids) - i) for i, d in enumerate(ids)}


def test_top_depth_is_sorted_by_the_models_scores_and_the_rest_keeps_its_place(
    tiny_cross_encoder, tmp_path
):
    stage = _stage(tiny_cross_encoder, tmp_path / "cache", depth=5)
    previous = _previous_ranking()
    query = QUERIES["q1"]
    out = asyncio.run(stage.rerank("q1", query, previous))
    ids = list(previous)
    model = load_cross_encoder(str(tiny_cross_encoder.resolve()), 512, "cpu")
    own = model.predict([(query, CORPUS[d]) for d in ids[:5]], show_progress_bar=False)
    expected = [d for _, _, d in sorted((-float(s), i, d) for i, (s, d) in
                                        enumerate(zip(own, ids[:5], strict=True)))]  # fmt: skip
    new = list(out["ranking"])
    assert new[:5] == expected
    assert new[5:] == ids[5:]
    assert sorted(new) == sorted(ids)
    scores = list(out["ranking"].values())
    assert all(a > b for a, b in zip(scores, scores[1:], strict=False))
    (step,) = out["steps"]
    assert step["node"] == "cross" and step["doc_ids"] == expected and step["cached"] == 0
    assert step["model"] == str(tiny_cross_encoder.resolve())
    assert step["scores"] == pytest.approx(sorted((float(s) for s in own), reverse=True), abs=1e-5)
    assert step["scores"] == sorted(step["scores"], reverse=True)


def test_a_second_stage_on_the_same_cache_never_calls_the_model(
    tiny_cross_encoder, tmp_path, predict_calls
):
    previous = _previous_ranking()

    def rerank(query, **options):
        stage = _stage(tiny_cross_encoder, tmp_path, **options)
        return asyncio.run(stage.rerank("q", query, previous))

    first = rerank("aspirin", depth=8)
    assert predict_calls == [8]
    # a new stage object (a rerun, another agent's run) over the same store: all hits
    second = rerank("aspirin", depth=8)
    assert predict_calls == [8]
    assert second["ranking"] == first["ranking"] and second["steps"][0]["cached"] == 8
    # deeper: only the documents not yet scored reach the model
    third = rerank("aspirin", depth=10)
    assert predict_calls == [8, 2] and third["steps"][0]["cached"] == 8
    # another query text or max length is another score
    rerank("statins", depth=8)
    rerank("aspirin", depth=8, max_length=64)
    assert predict_calls == [8, 2, 8, 8]


def test_concurrent_queries_share_the_model_one_at_a_time(tiny_cross_encoder, predict_calls):
    stage = _stage(tiny_cross_encoder, None, depth=4)
    previous = _previous_ranking()

    async def both():
        return await asyncio.gather(*(stage.rerank(q, t, previous) for q, t in QUERIES.items()))

    outs = asyncio.run(both())
    assert predict_calls == [4, 4, 4]  # no cache directory: nothing cached, nothing broken
    assert all(len(o["ranking"]) == len(CORPUS) for o in outs)


def test_scores_written_by_one_store_are_read_by_another(tmp_path):
    a, b = ScoreCache(tmp_path / "s"), ScoreCache(tmp_path / "s")
    a.set_many({"k1": 0.25, "k2": -1.5})
    assert b.get_many(["k1", "k2", "k3"]) == [0.25, -1.5, None]


def test_device_auto_resolves_to_cuda_when_torch_sees_a_gpu(tmp_path, monkeypatch):
    import sentence_transformers
    import torch

    seen: list[str] = []

    class Spy:
        def __init__(self, path, max_length=None, device=None):
            seen.append(device)

        def eval(self):
            return self

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(sentence_transformers, "CrossEncoder", Spy)
    load_cross_encoder.cache_clear()
    try:
        typed = cfg.typed_options(CROSS, {"model": str(tmp_path / "m")}, "rerank")
        assert typed["device"] == "auto"
        stage = build_stage(StageContext(corpus=CORPUS, task="toy", options=typed))
        assert stage.device == "cuda"
        stage.model()
        assert seen == ["cuda"]
    finally:
        load_cross_encoder.cache_clear()  # never leave the spy behind for other tests


def test_options_are_checked_in_one_line():
    with pytest.raises(cfg.ConfigError, match="option model is required"):
        cfg.typed_options(CROSS, {}, "rerank")
    with pytest.raises(cfg.ConfigError, match="option device must be one of"):
        cfg.typed_options(CROSS, {"model": "m", "device": "tpu"}, "rerank")
    with pytest.raises(cfg.ConfigError, match="option batch_size must be at least 1"):
        cfg.typed_options(CROSS, {"model": "m", "batch_size": 0}, "rerank")


def test_the_model_after_the_colon_fills_option_model(monkeypatch):
    monkeypatch.setitem(agents.registry.STAGES, "cross", CROSS)
    stage = cfg.parse_stage("cross:BAAI/bge-reranker-v2-m3,batch_size=16")
    assert stage.options == {**CROSS.defaults, "model": "BAAI/bge-reranker-v2-m3",
                             "batch_size": 16}  # fmt: skip
    with pytest.raises(cfg.ConfigError, match="option model is required"):
        cfg.parse_stage("cross,depth=10")


def test_module_import_stays_light():
    import subprocess
    import sys

    heavy = "('torch', 'sentence_transformers')"
    code = f"import sys, agents.rerank.cross; print([m for m in {heavy} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_end_to_end_after_the_baseline_and_a_rerun_pays_nothing(
    tiny_cross_encoder, tmp_path, toy_dir, monkeypatch, predict_calls
):
    monkeypatch.setitem(agents.registry.STAGES, "cross", CROSS)
    args = ["--agent", "none", "--dataset", str(toy_dir), "--runs-dir", str(tmp_path / "runs"),
            "--cache-dir", str(tmp_path / "cache"), "--quiet",
            "--rerank", f"cross,model={tiny_cross_encoder},depth=5,device=cpu"]  # fmt: skip
    assert main([*args, "--run-name", "a"]) == 0
    assert sum(predict_calls) > 0
    task = tmp_path / "runs" / "a" / "toy"
    first = read_records(task / "queries.jsonl")
    reranked = read_records(task / "rerank-1-cross" / "queries.jsonl")
    assert set(reranked) == set(first)
    for q, record in reranked.items():
        assert record["error"] is None
        step = record["steps"][0]
        assert step["node"] == "cross" and step["cached"] == 0
        before = [d for d, _ in first[q]["ranking"]]
        after = [d for d, _ in record["ranking"]]
        assert after[:5] == step["doc_ids"] and sorted(after) == sorted(before)
    summary = json.loads((task / "metrics.json").read_text())
    assert summary["final_stage"] == "rerank-1-cross"
    calls = len(predict_calls)
    assert main([*args, "--run-name", "b"]) == 0  # a fresh run folder, the same score cache
    assert len(predict_calls) == calls
    again = read_records(tmp_path / "runs" / "b" / "toy" / "rerank-1-cross" / "queries.jsonl")
    assert all(r["steps"][0]["cached"] == len(r["steps"][0]["doc_ids"]) for r in again.values())
    assert {q: r["ranking"] for q, r in again.items()} == {
        q: r["ranking"] for q, r in reranked.items()
    }


def test_weights_replaced_in_place_never_reuse_the_old_scores(tmp_path, predict_calls):
    import shutil

    import torch
    from sentence_transformers import CrossEncoder

    from retrievers.dense import resolve_model

    def save(seed: int, path: Path) -> None:
        torch.manual_seed(seed)
        CrossEncoder(resolve_model("all-MiniLM-L6-v2")[1], num_labels=1, device="cpu").save(
            str(path)
        )

    def rerank() -> tuple[dict, list[int]]:
        load_cross_encoder.cache_clear()
        before = len(predict_calls)  # saving a model scores a model card's examples
        result = asyncio.run(
            _stage(model, tmp_path / "cache").rerank("q1", QUERIES["q1"], _previous_ranking())
        )
        return result, predict_calls[before:]

    model = tmp_path / "retrained"
    save(0, model)
    first, calls = rerank()
    assert calls == [len(CORPUS)]
    assert rerank()[1] == []  # the same weights: every score from the cache
    shutil.rmtree(model)
    save(1, model)  # the same path, other weights
    second, calls = rerank()
    assert calls == [len(CORPUS)]  # scored again, not read from the cache
    assert first["steps"][0]["scores"] != second["steps"][0]["scores"]


def test_a_hub_model_is_named_by_the_commit_of_its_cached_snapshot(tmp_path, monkeypatch):
    """The hub cache layout (models--org--name/refs/main, snapshots/<commit>/) built here."""
    from retrievers.dense import model_revision

    commit = "0123456789abcdef0123456789abcdef01234567"
    hub = tmp_path / "hub"
    repo = hub / "models--BAAI--bge-reranker-v2-m3"
    (repo / "snapshots" / commit).mkdir(parents=True)
    (repo / "snapshots" / commit / "config.json").write_text("{}")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(hub))
    import huggingface_hub.file_download

    monkeypatch.setattr(huggingface_hub.file_download, "HF_HUB_CACHE", str(hub), raising=False)
    assert model_revision("BAAI/bge-reranker-v2-m3") == commit
    assert model_revision(str(repo / "snapshots" / commit)) == commit
    assert model_revision("BAAI/not-downloaded") is None
    assert model_revision("not a repo id!") is None
    local = tmp_path / "mine"
    local.mkdir()
    (local / "config.json").write_text("{}")
    before = model_revision(str(local))
    assert before.startswith("files:") and model_revision(str(local)) == before
    (local / "config.json").write_text('{"changed": true}')
    assert model_revision(str(local)) != before
