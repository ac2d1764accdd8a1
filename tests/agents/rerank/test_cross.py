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

import agents.config.registry
from agents.commands.run import main
from agents.config.run_config import ConfigError, typed_options
from agents.config.serialise import to_dict
from agents.config.settings import from_settings
from agents.config.stages import parse_stage
from agents.rerank import StageContext
from agents.rerank.cross import CROSS, ScoreCache, build_stage, load_cross_encoder
from eval.records import read_records
from tests.helpers import DOCS, QUERIES

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
    typed = typed_options(CROSS, {"model": str(model), "device": "cpu", **options}, "rerank")
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
        typed = typed_options(CROSS, {"model": str(tmp_path / "m")}, "rerank")
        assert typed["device"] == "auto"
        stage = build_stage(StageContext(corpus=CORPUS, task="toy", options=typed))
        assert stage.device == "cuda"
        stage.model()
        assert seen == ["cuda"]
    finally:
        load_cross_encoder.cache_clear()  # never leave the spy behind for other tests


def test_options_are_checked_in_one_line():
    with pytest.raises(ConfigError, match="option model is required"):
        typed_options(CROSS, {}, "rerank")
    with pytest.raises(ConfigError, match="option device must be one of"):
        typed_options(CROSS, {"model": "m", "device": "tpu"}, "rerank")
    with pytest.raises(ConfigError, match="option batch_size must be at least 1"):
        typed_options(CROSS, {"model": "m", "batch_size": 0}, "rerank")


def test_the_model_after_the_colon_fills_option_model(monkeypatch):
    monkeypatch.setitem(agents.config.registry.STAGES, "cross", CROSS)
    stage = parse_stage("cross:BAAI/bge-reranker-v2-m3,batch_size=16")
    assert stage.options == {**CROSS.defaults, "model": "BAAI/bge-reranker-v2-m3",
                             "batch_size": 16}  # fmt: skip
    with pytest.raises(ConfigError, match="option model is required"):
        parse_stage("cross,depth=10")


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
    monkeypatch.setitem(agents.config.registry.STAGES, "cross", CROSS)
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


# --- R2MED's rerankers, scored as R2MED scores them ----------------------------------------
#
# R2MED's RerankerModel (github.com/R2MED/R2MED @62b7074, src/utils.py L811-882) is written out
# below as the reference each rule must equal, on tiny models built here in their hub layout
# (config.json, tokenizer files, model.safetensors; a PEFT adapter's adapter_config.json and
# adapter_model.safetensors), from seeded random weights: no hub access is needed.

LONG = "aspirin " * 300  # longer than any max_length below: truncation decides its score
R2MED_CORPUS = {**CORPUS, "long": LONG.strip(), "d3a": DOCS["d3"]}  # d3a: a tie with d3


def _words() -> list[str]:
    import re

    texts = [*R2MED_CORPUS.values(), *QUERIES.values(), "query: document:"]
    return sorted({w for t in texts for w in re.findall(r"\w+|[^\w\s]", t.lower())})


def _bert_tokenizer():
    from transformers import AutoTokenizer

    from retrievers.dense import resolve_model

    return AutoTokenizer.from_pretrained(resolve_model("all-MiniLM-L6-v2")[1])  # BERT uncased


def _tiny_bert(folder: Path, num_labels: int, seed: int) -> Path:
    """A BertForSequenceClassification in hub layout, as monoBERT (2 labels) or a
    single-logit reranker is published."""
    import torch
    from transformers import BertConfig, BertForSequenceClassification

    tokenizer = _bert_tokenizer()
    torch.manual_seed(seed)
    dims = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2}
    config = BertConfig(vocab_size=tokenizer.vocab_size, intermediate_size=64,
                        num_labels=num_labels, **dims)  # fmt: skip
    BertForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def monobert(tmp_path_factory) -> Path:
    return _tiny_bert(tmp_path_factory.mktemp("castorini") / "monobert-large-msmarco", 2, 1)


@pytest.fixture(scope="session")
def bge(tmp_path_factory) -> Path:
    return _tiny_bert(tmp_path_factory.mktemp("BAAI") / "bge-reranker-v2-m3", 1, 2)


@pytest.fixture(scope="session")
def rankllama(tmp_path_factory) -> tuple[Path, Path]:
    """(adapter, base): a tiny Llama saved as meta-llama/Llama-2-7b-hf is (a causal LM with a
    tokenizer), and a LoRA adapter over it made with peft as castorini's rankllama is (task
    SEQ_CLS, num_labels 1, the score head saved with it, its base named in
    adapter_config.json)."""
    pytest.importorskip("peft")
    import torch
    from peft import LoraConfig, get_peft_model
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import (
        AutoModelForSequenceClassification,
        LlamaConfig,
        LlamaForCausalLM,
        PreTrainedTokenizerFast,
    )

    root = tmp_path_factory.mktemp("rankllama")
    vocab = {t: i for i, t in enumerate(["<unk>", "<s>", "</s>", *_words()])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    # Llama's tokenizer puts <s> before each sequence of a pair
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", 1)]
    )
    base = root / "Llama-2-7b-hf"
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                            unk_token="<unk>").save_pretrained(base)  # fmt: skip
    torch.manual_seed(3)
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4,
                         max_position_embeddings=1024)  # fmt: skip
    LlamaForCausalLM(config).save_pretrained(base)
    model = AutoModelForSequenceClassification.from_pretrained(base, num_labels=1)
    lora = LoraConfig(task_type="SEQ_CLS", r=4, lora_alpha=8, init_lora_weights=False,
                      target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                      "up_proj", "down_proj"])  # fmt: skip
    adapter = root / "rankllama-v1-7b-lora-passage"
    get_peft_model(model, lora).save_pretrained(adapter)
    return adapter, base


def r2med_reranker(mode: str, path, pairs: list[list[str]], max_length: int = 512) -> list[float]:
    """R2MED's ``RerankerModel(path, max_length=max_length, mode=mode).predict(pairs)``
    (src/utils.py L811-882) on one CPU, as R2MED's transformers 4.44 ran it: ``from_pretrained``
    without a dtype meant float32 then, so it is asked for (transformers 5 would take the
    config's); ``device_map="auto"`` and ``trust_remote_code`` change nothing for a stock model
    on one device."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    if mode == "llama":
        from peft import PeftModel

        adapter, base = path  # model_name_or_path[0], [1] (L821-825)
        tokenizer = AutoTokenizer.from_pretrained(base)  # L821
        base_model = AutoModelForSequenceClassification.from_pretrained(
            base, num_labels=1, dtype=torch.float16
        )  # L822-824
        model = PeftModel.from_pretrained(base_model, adapter)  # L825
        model = model.merge_and_unload()  # L826
    else:
        tokenizer = AutoTokenizer.from_pretrained(path)  # L828
        model = AutoModelForSequenceClassification.from_pretrained(path, dtype=torch.float32)
    model.eval()  # L846
    with torch.no_grad():  # L844
        if mode == "bge":  # L847-856
            inputs = tokenizer(pairs, padding=True, truncation=True, return_tensors="pt",
                               max_length=max_length)  # fmt: skip
            return model(**inputs, return_dict=True).logits.view(-1).float().cpu().tolist()
        if mode == "mono":  # L857-868
            queries, passages = zip(*pairs, strict=True)
            inputs = tokenizer(list(queries), list(passages), return_tensors="pt",
                               truncation=True, padding="longest",
                               max_length=max_length)  # fmt: skip
            return model(**inputs).logits[:, 1].squeeze(-1).cpu().tolist()
        scores = []  # mode "llama", L869-881: one pair at a time, no truncation flag given
        for sentence_pair in pairs:
            q_text = f"query: {sentence_pair[0]}"
            p_text = f"document: {sentence_pair[1]}"
            inputs = tokenizer(q_text, p_text, return_tensors="pt", max_length=max_length)
            scores.append(model(**inputs).logits[0][0].cpu().float().item())
        return scores


def r2med_top(ranking: dict[str, float], scores_of, top_k: int = 10) -> dict[str, float]:
    """R2MED's reranked list of a query (src/eval_reranker.py L112-119): the first top_k of the
    first stage scored, sorted by score descending, only those kept."""
    topk_pids = list(ranking.keys())
    scores = scores_of(topk_pids[:top_k])
    reranked = {pid: score for pid, score in zip(topk_pids[:top_k], scores, strict=False)}
    return dict(sorted(reranked.items(), key=lambda item: item[1], reverse=True)[:top_k])


def _r2med_stage(model, **options):
    typed = typed_options(CROSS, {"model": str(model), "device": "cpu", **options}, "rerank")
    ctx = StageContext(corpus=R2MED_CORPUS, task="toy", options=typed, cache_dir=None)
    return build_stage(ctx)


def _first_stage() -> dict[str, float]:
    """12 documents, the long one and the tie (d3 before d3a) in the top 10."""
    ids = ["x0", "long", "d1", "d3", "x1", "d2", "d3a", "x2", "d4", "d5", "x3", "x4"]
    return {d: float(len(ids) - i) for i, d in enumerate(ids)}


def _pairs(query: str, ids) -> list[list[str]]:
    return [[query, R2MED_CORPUS[d]] for d in ids]


@pytest.mark.parametrize(("fixture", "mode", "rule"), [("monobert", "mono", "label1"),
                                                       ("bge", "bge", "logit")])  # fmt: skip
def test_monobert_and_bge_score_as_r2med_scores_them(fixture, mode, rule, request):
    model = request.getfixturevalue(fixture)
    query = QUERIES["q2"]
    previous = _first_stage()
    out = asyncio.run(_r2med_stage(model, depth=10).rerank("q2", query, previous))
    (step,) = out["steps"]
    assert step["scoring"] == rule
    top = list(previous)[:10]
    expected = r2med_reranker(mode, model, _pairs(query, top))
    ours = dict(zip(step["doc_ids"], step["scores"], strict=True))
    assert [ours[d] for d in top] == expected  # the same batch: the same floats
    if mode == "mono":  # the raw "relevant" logit, not a softmax probability
        assert any(not 0 <= s <= 1 for s in expected)
    assert len(out["ranking"]) == len(previous)  # keep_rest: the rest stays under the top 10


def test_a_two_label_classifier_r2med_never_named_is_read_at_label_1(monobert, tmp_path):
    import shutil

    from agents.rerank.r2med_rerankers import resolve_scoring

    other = tmp_path / "some-relevance-classifier"
    shutil.copytree(monobert, other)
    assert resolve_scoring("auto", str(other), str(other)) == "label1"  # from its config.json
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "id2label": {"0": "a", "1": "b",
                                                                          "2": "c"}}))  # fmt: skip
    with pytest.raises(ValueError, match=r"^option scoring: .* has 3 labels"):
        resolve_scoring("auto", str(other), str(other))
    assert resolve_scoring("label1", str(other), str(other)) == "label1"  # the override


def test_rules_by_r2med_name():
    from agents.rerank.r2med_rerankers import rule_by_name

    assert rule_by_name("BAAI/bge-reranker-v2-m3") == "logit"
    assert rule_by_name("castorini/monobert-large-msmarco") == "label1"
    assert rule_by_name("castorini/rankllama-v1-7b-lora-passage") == "rankllama"
    assert rule_by_name("/hub/models--castorini--monobert-large-msmarco/snapshots/0a1b") == "label1"
    assert rule_by_name("cross-encoder/ms-marco-MiniLM-L-6-v2") is None


def test_rankllama_through_peft_scores_and_orders_as_r2med(rankllama):
    adapter, base = rankllama
    query = QUERIES["q2"]
    previous = _first_stage()
    stage = _r2med_stage(adapter, depth=10, max_length=24)  # the long document is cut
    out = asyncio.run(stage.rerank("q2", query, previous))
    (step,) = out["steps"]
    assert (step["scoring"], step["base"]) == ("rankllama", str(base))  # from adapter_config
    top = list(previous)[:10]
    expected = r2med_reranker("llama", (adapter, base), _pairs(query, top), max_length=24)
    ours = dict(zip(step["doc_ids"], step["scores"], strict=True))
    assert [ours[d] for d in top] == expected
    # R2MED's top 10, as its sort gives it (ties: see the test of tie order)
    r2med = r2med_top(previous, lambda ids: r2med_reranker("llama", (adapter, base),
                                                         _pairs(query, ids), 24))  # fmt: skip
    assert list(out["ranking"])[:10] == step["doc_ids"]
    assert sorted(ours.values(), reverse=True) == list(r2med.values())
    untied = [d for d in r2med if list(r2med.values()).count(r2med[d]) == 1]
    assert [d for d in step["doc_ids"] if d in untied] == untied


def test_the_long_pair_is_cut_as_transformers_4_44_cut_it(rankllama):
    """R2MED gives rankllama's tokenizer max_length and no truncation flag (src/utils.py
    L874-879); transformers 4.44 warned and truncated longest_first, and this environment's
    transformers still does (silently): the reference above, which gives no flag, is cut."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(rankllama[1])
    args = ("query: aspirin", f"document: {LONG}")
    unflagged = tokenizer(*args, max_length=24)["input_ids"]
    assert len(tokenizer(*args)["input_ids"]) > 24
    assert unflagged == tokenizer(*args, max_length=24, truncation="longest_first")["input_ids"]
    assert len(unflagged) == 24


def test_option_base_serves_an_adapter_that_names_a_hub_base(rankllama, tmp_path):
    import shutil

    adapter, base = rankllama
    moved = tmp_path / "rankllama-v1-7b-lora-passage"
    shutil.copytree(adapter, moved)
    config = json.loads((moved / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = "meta-llama/Llama-2-7b-hf"  # as castorini's names it
    (moved / "adapter_config.json").write_text(json.dumps(config))
    previous = _first_stage()
    own = asyncio.run(_r2med_stage(moved, depth=4, base=str(base)).rerank("q", "aspirin",
                                                                          previous))  # fmt: skip
    ref = asyncio.run(_r2med_stage(adapter, depth=4).rerank("q", "aspirin", previous))
    assert own["steps"][0]["scores"] == ref["steps"][0]["scores"]
    assert own["steps"][0]["base"] == str(base)


def test_without_peft_rankllama_is_refused_in_one_line(monkeypatch, tmp_path):
    import sys

    monkeypatch.setitem(sys.modules, "peft", None)  # import peft fails, as if not installed
    for options in ({"model": "castorini/rankllama-v1-7b-lora-passage"},
                    {"model": str(tmp_path / "m"), "scoring": "rankllama"}):  # fmt: skip
        typed = typed_options(CROSS, {**options, "device": "cpu"}, "rerank")
        with pytest.raises(ValueError, match=r"^scoring rankllama .* pip install peft$"):
            build_stage(StageContext(corpus=CORPUS, task="toy", options=typed))


def test_a_score_of_one_rule_is_never_served_for_another(bge, tmp_path, predict_calls):
    from agents.rerank.r2med_rerankers import TransformersScorer

    ours: list[int] = []
    real = TransformersScorer.predict

    def spy(self, pairs, batch_size):
        ours.append(len(pairs))
        return real(self, pairs, batch_size)

    previous = _previous_ranking()

    def rerank(**options):
        stage = _stage(bge, tmp_path, depth=5, **options)  # one cache folder for all
        return stage, asyncio.run(stage.rerank("q", "aspirin", previous))["steps"][0]

    with pytest.MonkeyPatch.context() as m:
        m.setattr(TransformersScorer, "predict", spy)
        stage, raw = rerank()  # the name says R2MED's bge-reranker: the raw logit
        assert ours == [5] and raw["scoring"] == stage.key_prefix()["scoring"] == "logit"
        stage, st = rerank(scoring="sentence-transformers")  # CrossEncoder: a sigmoid
        assert predict_calls == [5] and st["cached"] == 0 and "scoring" not in stage.key_prefix()
        assert all(0 < s < 1 for s in st["scores"])
        assert sorted(st["scores"]) != sorted(raw["scores"])
        assert rerank(scoring="logit")[1]["cached"] == 5 and ours == [5]


def test_ties_go_as_trec_eval_ranked_r2meds_scores(rankllama):
    """R2MED hands its raw scores to pytrec_eval (src/eval_reranker.py L117-121), which ranks
    equal float32 scores by doc id descending; the stage's list, evaluated as a ranking, must
    score what R2MED's dict scores, for graded judgements that tell every order apart."""
    import pytrec_eval

    adapter, base = rankllama
    previous = _first_stage()
    query = QUERIES["q2"]
    out = asyncio.run(_r2med_stage(adapter, depth=10).rerank("q2", query, previous))
    scores = dict(zip(out["steps"][0]["doc_ids"], out["steps"][0]["scores"], strict=True))
    assert scores["d3"] == scores["d3a"]  # the same text: a tie
    r2med = r2med_top(previous, lambda ids: [scores[d] for d in ids])
    ours = {d: s for d, s in out["ranking"].items() if d in r2med}
    assert list(ours)[:10].index("d3a") < list(ours).index("d3")  # trec: d3a > d3
    for shift in range(10):
        qrels = {"q": {d: (i + shift) % 10 + 1 for i, d in enumerate(sorted(r2med))}}
        evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"})
        assert evaluator.evaluate({"q": ours}) == evaluator.evaluate({"q": r2med})
    previous_order = _r2med_stage(adapter, depth=10, ties="previous")
    again = asyncio.run(previous_order.rerank("q2", query, previous))["steps"][0]["doc_ids"]
    assert again.index("d3") < again.index("d3a")  # the first stage's order


def test_reorder_compares_as_float32_and_breaks_ties_by_doc_id_descending():
    from agents.rerank.cross import reorder

    ids = ["a", "b", "c", "d"]
    scores = [1.0 + 1e-12, 1.0, 2.0, float("nan")]  # a and b differ beyond float32
    assert [ids[i] for i in reorder(ids, scores, "trec")] == ["c", "b", "a", "d"]
    assert [ids[i] for i in reorder(ids, scores, "previous")] == ["c", "a", "b", "d"]
    assert [ids[i] for i in reorder(ids, [1.0, 1.0, 2.0, 0.0], "previous")] == ["c", "a", "b", "d"]


def test_keep_rest_false_keeps_only_the_reranked_top_as_r2med(monobert):
    previous = _first_stage()
    out = asyncio.run(_r2med_stage(monobert, depth=10, keep_rest=False).rerank("q", "x",
                                                                             previous))  # fmt: skip
    assert list(out["ranking"]) == out["steps"][0]["doc_ids"] and len(out["ranking"]) == 10


def test_r2med_options_are_checked_in_one_line():
    for given, message in (({"scoring": "softmax"}, "option scoring must be one of auto, "),
                           ({"ties": "random"}, "option ties must be one of auto, previous, trec"),
                           ({"scoring": "logit", "base": "b"}, "option base is for a PEFT "
                                                                "adapter")):  # fmt: skip
        with pytest.raises(ConfigError, match=f"^cross: {message}"):
            typed_options(CROSS, {"model": "m", **given}, "rerank")


@pytest.mark.parametrize("name", ["bge-reranker", "monobert", "rankllama"])
def test_a_depth_10_cross_stage_over_nv_embed_is_r2meds_reranker_row(name):
    from agents.execution import published_row as paper

    model = {"bge-reranker": "BAAI/bge-reranker-v2-m3",
             "monobert": "castorini/monobert-large-msmarco",
             "rankllama": "castorini/rankllama-v1-7b-lora-passage"}[name]  # fmt: skip
    config = to_dict(from_settings({
        "agent": "none", "dataset": "r2med", "retriever": "dense:nvidia/NV-Embed-v2",
        "trust_remote_code": True,
        "rerank": [f"cross:{model},depth=10"],
    }))  # fmt: skip
    assert paper.paper_row(config) == f"reranker/{name}/nv/top_10"
    for change in ({"depth": 20}, {"max_length": 1024}, {"scoring": "sentence-transformers"}):
        other = json.loads(json.dumps(config))
        other["rerank"][0]["options"].update(change)
        assert paper.paper_row(other) is None, change


def test_end_to_end_the_rule_is_in_the_config_and_every_step(
    monobert, tmp_path, toy_dir, monkeypatch
):
    monkeypatch.setitem(agents.config.registry.STAGES, "cross", CROSS)
    assert main(["--agent", "none", "--dataset", str(toy_dir), "--runs-dir",
                 str(tmp_path / "runs"), "--cache-dir", str(tmp_path / "cache"), "--quiet",
                 "--run-name", "r", "--rerank",
                 f"cross,model={monobert},depth=10,device=cpu,scoring=label1"]) == 0  # fmt: skip
    config = json.loads((tmp_path / "runs" / "r" / "config.json").read_text())
    assert config["rerank"][0]["options"]["scoring"] == "label1"
    records = read_records(tmp_path / "runs" / "r" / "toy" / "rerank-1-cross" / "queries.jsonl")
    assert records and all(r["steps"][0]["scoring"] == "label1" for r in records.values())
