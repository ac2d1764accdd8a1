import hashlib
import os

import numpy as np
import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

from retrievers import dense  # noqa: E402
from retrievers.dense import (  # noqa: E402
    DenseIndex,
    build_dense,
    build_index,
    corpus_fingerprint,
    instructions_for,
)

TINY = {
    "d1": "Aspirin irreversibly inhibits cyclooxygenase and platelet aggregation.",
    "d2": "Insulin lowers blood glucose by promoting uptake into muscle and fat.",
    "d3": "The mitochondrion produces ATP through oxidative phosphorylation.",
    "d4": "Penicillin blocks bacterial cell wall synthesis.",
}


def fake_encoder(calls: list[list[str]], dim: int = 8):
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


PLAIN = instructions_for("all-MiniLM-L6-v2")


# --- instructions --------------------------------------------------------------------------


def test_e5_on_pmc_clinical_gets_the_similar_cases_instruction():
    inst = instructions_for("intfloat/e5-mistral-7b-instruct", "PMC-Clinical")
    assert inst.family == "e5-instruct"
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

    def dies_on_third_chunk(texts):
        if len(calls) == 2:
            raise KeyboardInterrupt
        return encode(texts)

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
        self.fail_first = fail_first

    def __call__(self, model, input, **kwargs):
        import litellm

        if self.fail_first:
            self.fail_first -= 1
            raise litellm.RateLimitError("slow down", llm_provider="openai", model=model)
        self.batches.append(list(input))
        vecs = fake_encoder([])(list(input))
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
        TINY, "text-embedding-3-large", "Biology", tmp_path, False, batch_size=3
    )
    assert [len(b) for b in api.batches] == [3, 1]  # longest-first order, batches of 3
    expected = fake_encoder([])(list(TINY.values()))
    np.testing.assert_allclose(index.doc_embeddings, expected, atol=1e-6)
    assert index.instructions == PLAIN

    api.batches.clear()
    again = api_embed.build_api_dense(
        TINY, "text-embedding-3-large", "Biology", tmp_path, False, batch_size=3
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
        api_embed.api_encoder("text-embedding-3-large")(["x"])


def test_tied_scores_at_the_cut_keep_corpus_order():
    """Which of several docs tied at the k-th score make the top k is R2MED's stable sort."""
    from retrievers.dense import DenseIndex

    index = DenseIndex.__new__(DenseIndex)
    index.doc_ids = [f"d{i}" for i in range(8)]
    scores = np.array([0.5, 0.9, 0.5, 0.1, 0.5, 0.9, 0.2, 0.5], dtype=np.float32)
    for k in range(1, 9):
        expected = sorted(range(8), key=lambda i: -scores[i])[:k]  # stable: corpus order
        assert list(index._top_k(scores, k)) == [f"d{i}" for i in expected]
