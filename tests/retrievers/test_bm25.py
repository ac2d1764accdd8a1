import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from retrievers import bm25
from retrievers.bm25 import (
    BM25_DEFAULTS,
    BM25_METHODS,
    build_bm25,
    build_bm25_from_tokens,
    index_fingerprint,
    lucene_norm_length,
)

# Four documents, one of them empty: the empty one counts towards N and avgdl for bm25q and
# okapi (gensim and rank_bm25 count every document) but not for lucene (Lucene's docCount).
IDS = ["d1", "d2", "d3", "d4"]
TOKENS = [["a", "b", "b"], ["b", "c"], ["c", "c", "c", "d"], []]


def test_methods_and_defaults():
    assert BM25_METHODS == ("bm25q", "lucene", "okapi")
    assert BM25_DEFAULTS["bm25q"] == {"k1": 0.9, "b": 0.4}
    assert BM25_DEFAULTS["okapi"] == {"k1": 1.5, "b": 0.75, "epsilon": 0.25}
    with pytest.raises(ValueError):
        build_bm25_from_tokens(IDS, TOKENS, method="bm42")


def test_bm25q_by_hand():
    index = build_bm25_from_tokens(IDS, TOKENS, "bm25q")
    n, avgdl, k1, b = 4, 9 / 4, 0.9, 0.4
    idf_b = math.log(n + 1) - math.log(2 + 0.5)
    # The query is weighted like a document of length 1: the idf appears twice.
    query_w = idf_b * 1 / (1 + k1 * (1 - b + b * 1 / avgdl))
    d1 = idf_b * 2 / (2 + k1 * (1 - b + b * 3 / avgdl)) * query_w
    d2 = idf_b * 1 / (1 + k1 * (1 - b + b * 2 / avgdl)) * query_w
    hits = index.search_tokens(["b", "zzz"])
    assert list(hits) == ["d1", "d2"]  # d3 and d4 have no "b": never returned
    assert hits["d1"] == pytest.approx(d1, abs=1e-6)
    assert hits["d2"] == pytest.approx(d2, abs=1e-6)


def test_bm25q_query_term_frequency_saturates():
    index = build_bm25_from_tokens(IDS, TOKENS, "bm25q")
    avgdl, k1, b = 9 / 4, 0.9, 0.4
    idf_c = math.log(5) - math.log(2.5)
    idf_d = math.log(5) - math.log(1.5)
    q_norm = k1 * (1 - b + b * 3 / avgdl)  # query ["c", "c", "d"] has 3 known tokens
    d_norm = k1 * (1 - b + b * 4 / avgdl)
    expected = idf_c**2 * (3 / (3 + d_norm)) * (2 / (2 + q_norm)) + idf_d**2 * (
        1 / (1 + d_norm)
    ) * (1 / (1 + q_norm))
    hits = index.search_tokens(["c", "c", "d"])
    assert hits["d3"] == pytest.approx(expected, abs=1e-6)


def test_lucene_by_hand():
    index = build_bm25_from_tokens(IDS, TOKENS, "lucene")
    n, avgdl, k1, b = 3, 9 / 3, 0.9, 0.4  # the empty document does not count
    idf_b = math.log(1 + (n - 2 + 0.5) / (2 + 0.5))
    d1 = idf_b * 2 / (2 + k1 * (1 - b + b * 3 / avgdl))
    hits = index.search_tokens(["b", "b"])  # a repeated query term counts twice
    assert hits["d1"] == pytest.approx(2 * d1, abs=1e-6)


def test_lucene_uses_quantized_document_length():
    tokens = [["x"] + ["y"] * 46, ["x", "z"]]  # 47 tokens are stored as 46
    index = build_bm25_from_tokens(["long", "short"], tokens, "lucene")
    avgdl, k1, b = 49 / 2, 0.9, 0.4  # avgdl itself is exact (sumTotalTermFreq / docCount)
    idf_x = math.log(1 + (2 - 2 + 0.5) / (2 + 0.5))
    expected = idf_x * 1 / (1 + k1 * (1 - b + b * 46 / avgdl))
    assert index.search_tokens(["x"])["long"] == pytest.approx(expected, abs=1e-6)


def test_lucene_norm_quantization():
    # SmallFloat.intToByte4 then byte4ToInt: exact below 24, then 4 significant bits (floor).
    lengths = np.array([0, 1, 23, 24, 31, 32, 40, 47, 100, 150])
    assert lucene_norm_length(lengths).tolist() == [0, 1, 23, 24, 31, 32, 40, 46, 96, 144]
    assert np.all(np.diff(lucene_norm_length(np.arange(5000))) >= 0)


def test_okapi_by_hand_with_negative_idf_floor():
    tokens = [["a", "b"], ["b", "c"], ["b", "d"], ["e"]]
    index = build_bm25_from_tokens(IDS, tokens, "okapi")
    n, avgdl, k1, b = 4, 7 / 4, 1.5, 0.75
    rare = math.log(n - 1 + 0.5) - math.log(1 + 0.5)  # a, c, d, e
    common = math.log(n - 3 + 0.5) - math.log(3 + 0.5)  # b: negative, gets floored
    assert common < 0
    eps = 0.25 * (4 * rare + common) / 5
    d1 = eps * (1 * (k1 + 1)) / (1 + k1 * (1 - b + b * 2 / avgdl))
    d1 += rare * (1 * (k1 + 1)) / (1 + k1 * (1 - b + b * 2 / avgdl))
    hits = index.search_tokens(["a", "b"])
    assert list(hits)[0] == "d1"
    assert hits["d1"] == pytest.approx(d1, abs=1e-9)


def test_okapi_negative_scores_are_still_ranked():
    # Most terms are in most documents, so the mean idf (and the floor) is negative.
    tokens = [["a", "b"], ["a", "b"], ["a", "b"], ["c"]]
    index = build_bm25_from_tokens(IDS, tokens, "okapi")
    hits = index.search_tokens(["a"])
    assert list(hits) == ["d1", "d2", "d3"]  # every document holding "a", never d4
    assert all(v < 0 for v in hits.values())
    both = index.search_tokens(["a", "c"])
    assert list(both) == ["d4", "d1", "d2", "d3"] and both["d4"] > 0 > both["d1"]


@pytest.mark.parametrize("method", BM25_METHODS)
def test_unknown_or_empty_query_returns_nothing(method):
    index = build_bm25_from_tokens(IDS, TOKENS, method)
    assert index.search_tokens(["nope", "nada"]) == {}
    assert index.search_tokens([]) == {}
    assert index.search("") == {}


@pytest.mark.parametrize("method", BM25_METHODS)
def test_degenerate_corpora(method):
    index = build_bm25_from_tokens(["e1", "e2"], [[], []], method)  # nothing to match
    assert index.search_tokens(["a"]) == {}
    with pytest.raises(ValueError):
        build_bm25({}, method=method, progress=False)


def test_top_k_cut_and_ties_follow_document_order():
    tokens = [["x", "y"], ["x"], ["x"], ["x"], ["z"]]
    index = build_bm25_from_tokens([f"d{i}" for i in range(5)], tokens, "bm25q")
    hits = index.search_tokens(["x"], k=2)
    # d1..d3 tie; the lower document index wins, as in a stable sort
    assert list(hits) == ["d1", "d2"]
    assert index.search_tokens(["x"], k=0) == {}
    assert list(index.search_tokens(["x"], k=10)) == ["d1", "d2", "d3", "d0"]


# --- cache ---


@pytest.fixture
def count_analysis(monkeypatch):
    calls = []
    real = bm25.analyze_many

    def counting(texts):
        calls.append(len(texts))
        return real(texts)

    monkeypatch.setattr(bm25, "analyze_many", counting)
    return calls


CORPUS = {
    "p1": "Aspirin reduces the risk of myocardial infarction.",
    "p2": "Statins lower cholesterol; the patient's cholesterol fell.",
    "p3": "Myocardial infarction after surgery is rare.",
}


def test_cache_reuse_does_not_reanalyse(tmp_path, count_analysis):
    first = build_bm25(CORPUS, cache_dir=tmp_path, progress=False)
    assert sum(count_analysis) == 3
    second = build_bm25(CORPUS, cache_dir=tmp_path, progress=False)
    assert sum(count_analysis) == 3  # loaded from disk
    assert second.fingerprint == first.fingerprint
    assert second.doc_ids == first.doc_ids
    assert second.search("myocardial infarction") == first.search("myocardial infarction")
    assert first.search("myocardial infarction")  # not vacuous
    assert [p.name for p in tmp_path.iterdir()] == [f"bm25-{first.fingerprint[:24]}"]


def test_fingerprint_changes_with_text_method_and_params():
    ids, texts = list(CORPUS), list(CORPUS.values())
    base = index_fingerprint(ids, texts, "bm25q", {"k1": 0.9, "b": 0.4})
    assert base == index_fingerprint(ids, texts, "bm25q", {"k1": 0.9, "b": 0.4})
    changed_text = texts[:2] + [texts[2] + "!"]
    variants = [
        index_fingerprint(ids, changed_text, "bm25q", {"k1": 0.9, "b": 0.4}),
        index_fingerprint(ids, texts, "lucene", {"k1": 0.9, "b": 0.4}),
        index_fingerprint(ids, texts, "bm25q", {"k1": 1.2, "b": 0.4}),
        index_fingerprint(ids, texts, "bm25q", {"k1": 0.9, "b": 0.75}),
        index_fingerprint(ids[::-1], texts[::-1], "bm25q", {"k1": 0.9, "b": 0.4}),
        index_fingerprint(["p1", "p2", "p3x"], texts, "bm25q", {"k1": 0.9, "b": 0.4}),
    ]
    assert len({base, *variants}) == len(variants) + 1
    # build_bm25 keys on the same things
    fp = build_bm25(CORPUS, progress=False).fingerprint
    assert fp != build_bm25(CORPUS, b=0.5, progress=False).fingerprint
    assert fp != build_bm25(CORPUS, method="okapi", progress=False).fingerprint


@pytest.mark.parametrize("damage", ["garbage_npz", "truncated_npz", "bad_json", "missing_npz"])
def test_corrupt_cache_is_rebuilt(tmp_path, count_analysis, damage):
    good = build_bm25(CORPUS, cache_dir=tmp_path, progress=False)
    folder = tmp_path / f"bm25-{good.fingerprint[:24]}"
    npz = folder / "index.npz"
    if damage == "garbage_npz":
        npz.write_bytes(b"not a zip file at all")
    elif damage == "truncated_npz":
        npz.write_bytes(npz.read_bytes()[: npz.stat().st_size // 2])
    elif damage == "bad_json":
        (folder / "meta.json").write_text("{")
    else:
        npz.unlink()
    rebuilt = build_bm25(CORPUS, cache_dir=tmp_path, progress=False)
    assert sum(count_analysis) == 6  # analysed again
    assert rebuilt.search("cholesterol") == good.search("cholesterol")
    build_bm25(CORPUS, cache_dir=tmp_path, progress=False)
    assert sum(count_analysis) == 6  # and the repaired cache is used
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp leftovers


def _cache_entries(folder: Path) -> list[str]:
    return sorted(p.name.split(".corrupt-")[0] + (".corrupt" if ".corrupt-" in p.name else "")
                  for p in folder.iterdir())  # fmt: skip


@pytest.mark.parametrize("edit", ["avgdl", "params", "idf", "data"])
def test_an_edited_cache_is_moved_aside_and_rebuilt(tmp_path, count_analysis, caplog, edit):
    """Well-formed edits (meta.json's avgdl, say) once changed the scores silently."""
    fresh = build_bm25(CORPUS, progress=False)
    build_bm25(CORPUS, cache_dir=tmp_path, progress=False)
    folder = tmp_path / f"bm25-{fresh.fingerprint[:24]}"
    if edit in ("avgdl", "params"):
        meta = json.loads((folder / "meta.json").read_text())
        meta["avgdl"] *= 2
        meta["params"]["b"] = 0.9 if edit == "params" else meta["params"]["b"]
        (folder / "meta.json").write_text(json.dumps(meta))
    else:
        with np.load(folder / "index.npz") as npz:
            arrays = {name: npz[name] for name in npz.files}
        arrays[edit] = arrays[edit] * 2
        np.savez(folder / "index.npz", **arrays)
    caplog.clear()
    rebuilt = build_bm25(CORPUS, cache_dir=tmp_path, progress=False)
    assert sum(count_analysis) == 9  # analysed again (after the fresh build and the cached)
    [line] = [r for r in caplog.records if r.name == bm25.logger.name]
    assert "rebuilding BM25 index" in line.message and "checksum" in line.message
    assert line.exc_info is None  # one line, no traceback
    assert rebuilt.search("cholesterol infarction") == fresh.search("cholesterol infarction")
    assert _cache_entries(tmp_path) == [folder.name, f"{folder.name}.corrupt"]  # kept aside
    caplog.clear()
    again = build_bm25(CORPUS, cache_dir=tmp_path, progress=False)
    assert sum(count_analysis) == 9 and not caplog.records  # the new cache holds
    assert again.search("cholesterol infarction") == fresh.search("cholesterol infarction")
    assert again.avgdl == fresh.avgdl


@pytest.mark.parametrize("in_the_way", ["file", "dangling link"])
def test_a_cache_folder_replaced_by_a_file_is_recovered_once(tmp_path, caplog, in_the_way):
    """A file where the index folder was made every later run print a traceback and rebuild."""
    good = build_bm25(CORPUS, cache_dir=tmp_path, progress=False)
    folder = tmp_path / f"bm25-{good.fingerprint[:24]}"
    shutil.rmtree(folder)
    if in_the_way == "file":
        folder.write_text("not an index")
    else:
        folder.symlink_to(tmp_path / "nowhere")
    caplog.clear()
    rebuilt = build_bm25(CORPUS, cache_dir=tmp_path, progress=False)
    assert rebuilt.search("cholesterol") == good.search("cholesterol")
    [line] = caplog.records
    assert "rebuilding BM25 index" in line.message and line.exc_info is None
    assert folder.is_dir() and _cache_entries(tmp_path) == [folder.name, f"{folder.name}.corrupt"]
    caplog.clear()
    build_bm25(CORPUS, cache_dir=tmp_path, progress=False)
    assert not caplog.records  # recovered once: the next run is quiet


def test_search_many_is_a_run(tmp_path):
    index = build_bm25(CORPUS, method="lucene", progress=False)
    run = index.search_many({"q1": "infarction", "q2": "unknownword"}, k=1, progress=False)
    assert run == {"q1": {"p1": pytest.approx(index.search("infarction")["p1"])}, "q2": {}}


# --- parity with the reference implementations on text ---
# On `task_dir` (tests/conftest.py): the synthetic task, and SciFact as an extra.


def _beir_head(folder: Path, n_docs: int):
    """The first ``n_docs`` documents (title + " " + text) and every query of a BEIR folder."""
    docs = []
    with open(folder / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            docs.append((row["_id"], row["title"] + " " + row["text"]))
            if len(docs) == n_docs:
                break
    with open(folder / "queries.jsonl", encoding="utf-8") as f:
        queries = {row["_id"]: row["text"] for row in map(json.loads, f)}
    return dict(docs), queries


def _assert_same_ranking(ours: dict[str, float], reference: np.ndarray, doc_ids, k: int):
    order = sorted(range(len(reference)), key=lambda i: -reference[i])  # stable, as R2MED
    expected = [(doc_ids[i], float(reference[i])) for i in order[:k] if reference[i] > 0]
    assert len(ours) == len(expected)
    # Same score at every rank => same order up to ties; every returned doc really has its
    # score; and everything strictly above the cut is present.
    got_scores = np.array(list(ours.values()))
    np.testing.assert_allclose(got_scores, [s for _, s in expected], rtol=0, atol=1e-6)
    position = {d: i for i, d in enumerate(doc_ids)}
    for doc, score in ours.items():
        assert abs(reference[position[doc]] - score) <= 1e-6
    if expected:
        cut = expected[-1][1]
        assert {d for d, s in expected if s > cut + 1e-6} <= set(ours)


def test_bm25q_matches_gensim(task_dir):
    pytest.importorskip("gensim")
    from gensim.corpora import Dictionary
    from gensim.models import LuceneBM25Model
    from gensim.similarities import SparseMatrixSimilarity

    corpus, queries = _beir_head(task_dir, 600)
    doc_ids = list(corpus)
    index = build_bm25(corpus, progress=False)

    # R2MED's retrieval_bm25, with the same analyser.
    tokens = bm25.analyze_many(list(corpus.values()))
    dictionary = Dictionary(tokens)
    model = LuceneBM25Model(dictionary=dictionary, k1=0.9, b=0.4)
    sim = SparseMatrixSimilarity(
        model[list(map(dictionary.doc2bow, tokens))],
        num_docs=len(tokens),
        num_terms=len(dictionary),
        normalize_queries=False,
        normalize_documents=False,
    )
    matched = 0
    for text in queries.values():
        bow = dictionary.doc2bow(bm25.analyze(text))
        reference = sim[model[bow]] if bow else np.zeros(len(doc_ids))
        ours = index.search(text, k=100)
        _assert_same_ranking(ours, np.asarray(reference), doc_ids, k=100)
        matched += bool(ours)
    assert matched > 250  # the comparison is not vacuous


def test_okapi_matches_rank_bm25(task_dir):
    from rank_bm25 import BM25Okapi

    corpus, queries = _beir_head(task_dir, 300)
    doc_ids = list(corpus)
    tokens = bm25.analyze_many(list(corpus.values()))
    index = build_bm25_from_tokens(doc_ids, tokens, "okapi")
    reference = BM25Okapi(tokens)
    matched = 0
    for text in list(queries.values())[:60]:
        query = bm25.analyze(text)
        expected = reference.get_scores(query)
        ours = index.search_tokens(query, k=len(doc_ids))
        dense = np.zeros(len(doc_ids))
        dense[[doc_ids.index(d) for d in ours]] = list(ours.values())
        # rank_bm25 scores every document; ours lists exactly those holding a query term,
        # with rank_bm25's score whatever its sign
        terms = set(query)
        assert set(ours) == {d for d, t in zip(doc_ids, tokens, strict=True) if terms & set(t)}
        np.testing.assert_allclose(dense, expected, rtol=0, atol=1e-6)
        matched += bool(ours)
    assert matched > 50  # the comparison is not vacuous
