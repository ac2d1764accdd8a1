import hashlib
from pathlib import Path

import numpy as np
import pytest

from eval.datasets import Task  # noqa: E402
from retrievers import dense  # noqa: E402
from retrievers.base import SearchRequest  # noqa: E402
from retrievers.config import RetrieverConfig  # noqa: E402
from retrievers.dense import (  # noqa: E402
    DenseIndex,
    build_dense,
    build_index,
    corpus_fingerprint,
    instructions_for,
    prefixing,
    resolve_device,
)
from retrievers.search import build_retriever  # noqa: E402
from retrievers.settings import ApiEmbedConfig, DenseConfig  # noqa: E402

TINY = {
    "d1": "Aspirin irreversibly inhibits cyclooxygenase and platelet aggregation.",
    "d2": "Insulin lowers blood glucose by promoting uptake into muscle and fat.",
    "d3": "The mitochondrion produces ATP through oxidative phosphorylation.",
    "d4": "Penicillin blocks bacterial cell wall synthesis.",
}


def fake_vectors(calls: list[list[str]], dim: int = 8):
    """Deterministic pseudo-embeddings from a hash of each text; records every call."""

    def encode(texts: list[str]) -> np.ndarray:
        calls.append(list(texts))
        rows = [
            np.frombuffer(hashlib.sha256(t.encode()).digest()[: dim * 4], dtype=np.uint32)
            for t in texts
        ]
        emb = np.asarray(rows, dtype=np.float64).reshape(len(texts), dim) / 2**32 - 0.5
        emb = emb.astype(np.float32)
        return emb / np.linalg.norm(emb, axis=1, keepdims=True)

    return encode


def fake_encoder(calls: list[list[str]], dim: int = 8):
    """`fake_vectors` as an encoder that puts the instruction in front of each text."""
    return prefixing(fake_vectors(calls, dim))


PLAIN = instructions_for("all-MiniLM-L6-v2")


# --- instructions --------------------------------------------------------------------------


def test_e5_on_pmc_clinical_gets_the_similar_cases_instruction():
    inst = instructions_for("intfloat/e5-mistral-7b-instruct", "PMC-Clinical")
    assert inst.family == "e5-mistral"
    assert inst.query == (
        "Instruct: Given a Clinical Case, retrieve similar cases that help diagnose the case\n"
        "Query: "
    )
    assert inst.doc == "" and inst.expansion == ""
    # task names are matched like eval.datasets matches them
    assert instructions_for("intfloat/e5-mistral-7b-instruct", "r2med/pmc-clinical") == inst


def test_instruction_lookup_per_family_and_task():
    assert "Biology post" in instructions_for("Qwen/Qwen3-Embedding-8B", "Biology").query
    treat = instructions_for("Salesforce/SFR-Embedding-Mistral", "PMC-Treatment").query
    assert "relevant passages that help answer the case" in treat
    bge = instructions_for("BAAI/bge-large-en-v1.5", "PMC-Clinical")
    assert bge.query == "Represent this sentence for searching relevant passages: "
    assert instructions_for("all-MiniLM-L6-v2", "Biology") == PLAIN
    assert PLAIN.query == PLAIN.doc == PLAIN.expansion == ""
    assert instructions_for("facebook/contriever-msmarco", "Biology").query == ""
    # tasks outside R2MED get the family's generic instruction
    scifact = instructions_for("intfloat/e5-mistral-7b-instruct", "scifact").query
    assert "retrieve relevant documents that answer the question" in scifact
    # Instructor puts the query instruction in front of expansions too, as R2MED does
    inst = instructions_for("hkunlp/instructor-xl", "IIYi-Clinical")
    assert inst.expansion == inst.query and inst.doc.startswith("Represent the Clinical Case")


# --- cache ---------------------------------------------------------------------------------


def test_second_build_reads_the_cache_and_does_not_encode(tmp_path):
    calls: list[list[str]] = []
    first = build_index(TINY, "fake", fake_encoder(calls), PLAIN, tmp_path, progress=False)
    assert sum(map(len, calls)) == len(TINY)
    calls.clear()
    second = build_index(TINY, "fake", fake_encoder(calls), PLAIN, tmp_path, progress=False)
    assert calls == []
    np.testing.assert_array_equal(first.doc_embeddings, second.doc_embeddings)
    assert second.doc_ids == list(TINY)
    # a different encoder id is a different cache entry
    build_index(TINY, "fake-2", fake_encoder(calls), PLAIN, tmp_path, progress=False)
    assert sum(map(len, calls)) == len(TINY)


def test_build_dense_reuses_cache_without_encoding(tmp_path, monkeypatch):
    build_dense(TINY, cache_dir=tmp_path, progress=False)

    def boom(*args, **kwargs):
        raise AssertionError("encoded again")

    monkeypatch.setattr(dense, "_encode_corpus", boom)
    index = build_dense(TINY, cache_dir=tmp_path, progress=False)
    assert index.doc_embeddings.shape == (4, 384)


def test_fingerprint_changes_with_text_and_ids():
    ids, texts = list(TINY), list(TINY.values())
    base = corpus_fingerprint(ids, texts)
    assert corpus_fingerprint(ids, texts[:-1] + [texts[-1] + "."]) != base
    assert corpus_fingerprint(ids[:-1] + ["d5"], texts) != base
    assert corpus_fingerprint(["a", "b"], ["bc", "d"]) != corpus_fingerprint(
        ["a", "bb"], ["c", "d"]
    )
    assert corpus_fingerprint(ids, texts) == base


def test_changed_text_misses_the_cache(tmp_path):
    calls: list[list[str]] = []
    build_index(TINY, "fake", fake_encoder(calls), PLAIN, tmp_path, progress=False)
    calls.clear()
    changed = {**TINY, "d4": TINY["d4"] + " It is a beta-lactam."}
    build_index(changed, "fake", fake_encoder(calls), PLAIN, tmp_path, progress=False)
    assert sum(map(len, calls)) == len(TINY)


def test_interrupted_encode_resumes_from_saved_chunks(tmp_path):
    corpus = {f"d{i}": f"document number {i} " * (i + 1) for i in range(10)}
    calls: list[list[str]] = []
    encode = fake_encoder(calls)

    def dies_on_third_chunk(texts, instruction, role):
        if len(calls) == 2:
            raise KeyboardInterrupt
        return encode(texts, instruction, role)

    with pytest.raises(KeyboardInterrupt):
        build_index(corpus, "fake", dies_on_third_chunk, PLAIN, tmp_path, False, chunk_size=3)
    calls.clear()
    index = build_index(corpus, "fake", encode, PLAIN, tmp_path, False, chunk_size=3)
    assert sum(map(len, calls)) == 4  # chunks 3 and 4 (3 + 1 docs) only
    fresh = build_index(corpus, "fake", encode, PLAIN, None, False)
    np.testing.assert_allclose(index.doc_embeddings, fresh.doc_embeddings, rtol=1e-6)
    assert not list(tmp_path.rglob("chunks/*"))


# --- search --------------------------------------------------------------------------------


def test_search_vectors_is_exact_cosine_top_k_with_ties_in_corpus_order():
    emb = np.array([[1, 0], [0, 1], [1, 0], [0.6, 0.8]], dtype=np.float32)
    index = DenseIndex("x", lambda t: emb[:0], PLAIN, ["a", "b", "c", "d"], emb, "")
    (top,) = index.search_vectors(np.array([[2.0, 0.0]]), k=3)
    assert list(top) == ["a", "c", "d"]
    assert top["a"] == pytest.approx(1.0) and top["d"] == pytest.approx(0.6)
    assert len(index.search_vectors(np.array([[0.0, 1.0]]), k=10)[0]) == 4


def test_expansion_is_averaged_with_the_query_like_r2med(tmp_path):
    from sentence_transformers import SentenceTransformer

    index = build_dense(TINY, cache_dir=tmp_path, dtype="fp32", progress=False)
    query = "What drug stops platelets from clumping?"
    expansion = "Aspirin acetylates COX-1, so platelets make less thromboxane A2."
    got = index.search(query, k=4, expansion=expansion)

    model = SentenceTransformer(dense.resolve_model("all-MiniLM-L6-v2")[1], device="cpu")
    docs = model.encode(list(TINY.values()), normalize_embeddings=True)
    q, e = model.encode([query, expansion], normalize_embeddings=True)
    v = (q + e) / 2
    expected = docs @ (v / np.linalg.norm(v))
    order = np.argsort(-expected)
    assert list(got) == [list(TINY)[i] for i in order]
    np.testing.assert_allclose(list(got.values()), expected[order], atol=1e-5)
    # and it is not just the query alone
    alone = docs @ q
    assert not np.allclose(alone, expected, atol=1e-3)
    assert index.search(query, k=4) == pytest.approx(
        dict(zip(TINY, alone.tolist(), strict=True)), abs=1e-5
    )


# --- API embedder --------------------------------------------------------------------------


class FakeEmbeddingAPI:
    """Stands in for litellm.embedding: hashed vectors, answers in reverse order."""

    def __init__(self, fail_first: int = 0):
        self.batches: list[list[str]] = []
        self.kwargs: list[dict] = []  # the extra arguments of every answered call
        self.fail_first = fail_first

    def __call__(self, model, input, **kwargs):
        import litellm

        if self.fail_first:
            self.fail_first -= 1
            raise litellm.RateLimitError("slow down", llm_provider="openai", model=model)
        self.batches.append(list(input))
        self.kwargs.append(kwargs)
        vecs = fake_vectors([])(list(input))
        data = [{"embedding": v.tolist(), "index": i} for i, v in enumerate(vecs)]
        return litellm.EmbeddingResponse(model=model, data=data[::-1])


def test_api_embedder_batches_orders_retries_and_caches(tmp_path, monkeypatch):
    import litellm
    import tenacity

    from retrievers import api_embed

    api = FakeEmbeddingAPI(fail_first=2)
    monkeypatch.setattr(litellm, "embedding", api)
    monkeypatch.setattr(tenacity.nap, "sleep", lambda s: None)  # no real backoff waits
    index = api_embed.build_api_dense(
        TINY, "openai/acme-embed", "Biology", tmp_path, False, batch_size=3
    )
    assert [len(b) for b in api.batches] == [3, 1]  # longest-first order, batches of 3
    expected = fake_vectors([])(list(TINY.values()))
    np.testing.assert_allclose(index.doc_embeddings, expected, atol=1e-6)
    assert index.instructions == PLAIN

    api.batches.clear()
    again = api_embed.build_api_dense(
        TINY, "openai/acme-embed", "Biology", tmp_path, False, batch_size=3
    )
    assert api.batches == []  # corpus from cache
    top = again.search(TINY["d2"], k=2)
    assert next(iter(top)) == "d2" and api.batches == [[TINY["d2"]]]


def test_api_embedder_gives_up_on_non_retryable_errors(monkeypatch):
    import litellm

    from retrievers import api_embed

    def bad_key(model, input, **kwargs):
        raise litellm.AuthenticationError("no key", llm_provider="openai", model=model)

    monkeypatch.setattr(litellm, "embedding", bad_key)
    with pytest.raises(litellm.AuthenticationError):
        api_embed.api_encoder("text-embedding-3-large")(["x"], "", "query")


def test_tied_scores_at_the_cut_keep_corpus_order():
    """Which of several docs tied at the k-th score make the top k is R2MED's stable sort."""
    from retrievers.dense import DenseIndex

    index = DenseIndex.__new__(DenseIndex)
    index.doc_ids = [f"d{i}" for i in range(8)]
    scores = np.array([0.5, 0.9, 0.5, 0.1, 0.5, 0.9, 0.2, 0.5], dtype=np.float32)
    for k in range(1, 9):
        expected = sorted(range(8), key=lambda i: -scores[i])[:k]  # stable: corpus order
        assert list(index._top_k(scores, k)) == [f"d{i}" for i in expected]


def test_api_base_params_and_batch_size_reach_every_litellm_call(tmp_path, monkeypatch):
    import litellm

    api = FakeEmbeddingAPI()
    monkeypatch.setattr(litellm, "embedding", api)
    params = {"dimensions": 8, "input_type": "search_document"}
    settings = ApiEmbedConfig(api_base="http://127.0.0.1:9/v1", batch_size=3, params=params)
    config = RetrieverConfig("api:text-embedding-3-large", api=settings)
    task = Task("Biology", TINY, {}, {}, tmp_path)
    retriever = build_retriever(config, task, tmp_path, progress=False)
    retriever.search(SearchRequest("aspirin"), k=2)
    assert [len(b) for b in api.batches] == [3, 1, 1]  # corpus in batches of 3, then the query
    # the default timeout travels with every call (no part of the cache identity)
    assert api.kwargs == [{"api_base": "http://127.0.0.1:9/v1", "timeout": 600.0, **params}] * 3
    # what changes the vectors is in the cache key; the URL itself is not written to disk
    encoder = retriever.index.encoder_id
    assert "dimensions=8" in encoder and "input_type=search_document" in encoder
    assert "api_base=sha256:" in encoder
    (meta,) = tmp_path.glob("dense/*/meta.json")
    assert "127.0.0.1" not in meta.read_text()

    def cached(api_settings: ApiEmbedConfig) -> bool:
        api.batches.clear()
        build_retriever(
            RetrieverConfig(config.spec, api=api_settings), task, tmp_path, progress=False
        )
        return api.batches == []

    timeout = {**params, "timeout": 30}
    assert cached(ApiEmbedConfig("http://127.0.0.1:9/v1", batch_size=2, params=timeout))
    assert not cached(ApiEmbedConfig("http://127.0.0.1:8/v1", params=params))
    assert not cached(ApiEmbedConfig("http://127.0.0.1:9/v1", params={"dimensions": 8}))


def test_api_cache_key_without_new_settings_is_unchanged():
    from retrievers import api_embed

    # caches written before api_base and params were settings are still found
    assert api_embed.encoder_id("m", None, {}) == "api:m"
    assert api_embed.encoder_id("m", None, {"dimensions": 1024}) == "api:m|dimensions=1024"


# --- device, batch size, max length, instructions -------------------------------------------


@pytest.fixture
def st_loads(monkeypatch):
    """Every SentenceTransformer made, with the device it was asked for, and every encode's
    keyword arguments. The model is really loaded (on the CPU: there is no GPU here)."""
    import sentence_transformers

    real = sentence_transformers.SentenceTransformer
    loads: list[tuple[str, object]] = []
    encodes: list[dict] = []

    class Recording(real):
        def __init__(self, path, device=None, **kwargs):
            loads.append((device, self))
            super().__init__(path, device="cpu", **kwargs)

    original_encode = real.encode

    def encode(self, sentences, **kwargs):
        encodes.append({"sentences": list(sentences), **kwargs})
        return original_encode(self, sentences, **kwargs)

    monkeypatch.setattr(sentence_transformers, "SentenceTransformer", Recording)
    monkeypatch.setattr(real, "encode", encode)
    dense.load_sentence_transformer.cache_clear()  # a model loaded before would not be seen
    yield loads, encodes
    dense.load_sentence_transformer.cache_clear()  # no recording model outlives the test


def test_device_auto_is_cuda_when_torch_sees_a_gpu_else_mps_else_cpu(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("auto") == "cuda"
    assert resolve_device("cuda:1") == "cuda:1"
    with pytest.raises(ValueError, match=r"dense\.device: 'cuda:2', but torch sees 2 CUDA"):
        resolve_device("cuda:2")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    assert resolve_device("auto") == "cpu"
    assert resolve_device("cpu") == "cpu"
    with pytest.raises(ValueError, match=r"dense\.device: 'cuda', but torch sees no CUDA GPU"):
        resolve_device("cuda")
    with pytest.raises(ValueError, match=r"dense\.device: 'mps', but torch has no usable MPS"):
        resolve_device("mps")
    with pytest.raises(ValueError, match=r"dense\.device: must be one of auto, cpu"):
        resolve_device("gpu")
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert resolve_device("auto") == "mps"


def test_resolved_device_batch_size_and_max_length_reach_the_model(tmp_path, st_loads):
    loads, encodes = st_loads
    settings = DenseConfig(device="cpu", batch_size=3, max_length=16)
    retriever = build_retriever(
        RetrieverConfig("dense", dense=settings), Task("t", TINY, {}, {}, tmp_path), tmp_path, False
    )
    ((device, model),) = loads
    assert device == "cpu" and model.device.type == "cpu"
    assert model.max_seq_length == 16 and "|max_length=16|" in retriever.index.encoder_id
    assert encodes and all(e["batch_size"] == 3 for e in encodes)
    # the bundled model is a folder: its files' revision names the embeddings
    assert "|revision=files:" in retriever.index.encoder_id


def test_auto_device_on_a_gpu_box_loads_on_cuda_and_reuses_the_cpu_cache(
    tmp_path, st_loads, monkeypatch
):
    import torch

    loads, _ = st_loads
    task = Task("t", TINY, {}, {}, tmp_path)
    on_cpu = build_retriever(
        RetrieverConfig("dense", dense=DenseConfig(device="cpu")), task, tmp_path, False
    )
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)

    def boom(*args, **kwargs):
        raise AssertionError("encoded again")

    monkeypatch.setattr(dense, "_encode_corpus", boom)
    on_gpu = build_retriever(RetrieverConfig("dense+bm25"), task, tmp_path, False).members[0]
    assert [device for device, _ in loads] == ["cpu", "cuda"]
    # the device is not part of the corpus cache: the CPU's embeddings are reused as they are
    assert on_gpu.index.encoder_id == on_cpu.index.encoder_id
    np.testing.assert_array_equal(on_gpu.index.doc_embeddings, on_cpu.index.doc_embeddings)
    # but dtype and max length are: each is a new cache entry
    for other in (DenseConfig(device="cpu", dtype="fp32"), DenseConfig(device="cpu", max_length=8)):
        with pytest.raises(AssertionError, match="encoded again"):
            build_retriever(RetrieverConfig("dense", dense=other), task, tmp_path, False)


def e5_named_copy(tmp_path):
    """The bundled MiniLM under a name R2MED's table gives e5's instructions ("query: ",
    "passage: "), so instruction handling is seen with a model that loads offline."""
    bundled = Path(dense.resolve_model("all-MiniLM-L6-v2")[1])
    copy = tmp_path / "e5-base-copy"
    copy.mkdir()
    for entry in bundled.iterdir():
        (copy / entry.name).symlink_to(entry)
    return str(copy)


def test_instructions_none_encodes_bare_texts(tmp_path, st_loads):
    _, encodes = st_loads
    model = e5_named_copy(tmp_path)
    task = Task("Biology", TINY, {}, {}, tmp_path)
    sent: dict[str, list[str]] = {}
    indexes = {}
    for instructions in ("r2med", "none"):
        encodes.clear()
        config = RetrieverConfig(
            f"dense:{model}", dense=DenseConfig(device="cpu", instructions=instructions)
        )
        indexes[instructions] = build_retriever(config, task, tmp_path, False).index
        indexes[instructions].encode_requests(["aspirin?"], ["an expansion"])
        sent[instructions] = [t for e in encodes for t in e["sentences"]]
    assert indexes["r2med"].instructions.family == "e5"
    assert sorted(sent["r2med"]) == sorted(
        ["passage: " + t for t in TINY.values()] + ["query: aspirin?", "an expansion"]
    )
    assert indexes["none"].instructions == dense.NO_INSTRUCTIONS
    assert sorted(sent["none"]) == sorted([*TINY.values(), "aspirin?", "an expansion"])
    # the document instruction is part of the corpus cache: two entries
    assert len(list(tmp_path.glob("dense/*/meta.json"))) == 2
