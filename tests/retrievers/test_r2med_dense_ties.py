"""R2MED's own dense rows, to the tie: where its dense evaluation decides what ours would not.

Originals: R2MED/R2MED at 62b7074 (src/eval_retrieval.py, src/utils.py) and the BEIR library its
``retrieval_by_dense`` calls, at v2.0.0 (beir/retrieval/search/dense/exact_search.py and
util.py). Each test computes the original's rule itself, transcribed line by line with the
lines cited, on a case where that rule gives another ranking than ours did before.

* Equal scores (exact_search.py L47, L73-91): `beir_search` below.
* NV-Embed's vectors are float32 (its own pooling), so its scores are not rounded to fp16.
* BMR mode under ``torch.cuda.amp.autocast()`` (utils.py L147, L504): tested without a GPU only
  as far as the context being entered around the forward pass on a cuda device; what fp16
  matmuls do to the vectors on a GPU is not measured here.
* An empty generated text averaged in (utils.py L79-90) and text-embedding-3-large's shorter
  cuts after a failed request (utils.py L777-804), under R2MED's rules (``--preset paper``).
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from retrievers.base import DenseRetriever, SearchRequest
from retrievers.dense import DenseIndex, build_dense, build_index
from retrievers.families import NO_INSTRUCTIONS, families, family_for, family_instructions
from tests import tiny_models

# --- BEIR 2.0.0's exact search, transcribed --------------------------------------------------


def cos_sim(a: np.ndarray, b: np.ndarray):
    """beir/retrieval/search/dense/util.py L5-24 (numpy arrays become CPU tensors)."""
    import torch

    a, b = torch.tensor(a), torch.tensor(b)
    a_norm = torch.nn.functional.normalize(a, p=2, dim=1)
    b_norm = torch.nn.functional.normalize(b, p=2, dim=1)
    return torch.mm(a_norm, b_norm.transpose(0, 1))


def beir_search(
    corpus: dict[str, str],
    doc_vectors: dict[str, np.ndarray],
    queries: dict[str, np.ndarray],
    top_k: int,
    corpus_chunk_size: int = 100_000,
    length_sort: bool = True,
    score_function: Callable[[list[str], list[str]], Any] | None = None,
) -> dict[str, dict[str, float]]:
    """DenseRetrievalExactSearch.search (exact_search.py L25-93) as R2MED calls it
    (src/eval_retrieval.py L94-106: corpus_chunk_size 100,000, cos_sim, top_k 100 from
    k_values L102-103). ``length_sort=False`` skips L47, to show that it matters.
    ``score_function`` (query ids, doc ids) -> scores replaces cos_sim where a test compares
    the cut on the very floats ours computed (cosines of a real model differ from torch's in
    the last bits, and a tiny random model's cosines are that close)."""
    import torch

    query_ids = list(queries)  # L39
    results: dict[str, dict[str, float]] = {qid: {} for qid in query_ids}  # L40
    query_embeddings = np.stack([queries[qid] for qid in query_ids])  # L41-43
    corpus_ids = list(corpus)
    if length_sort:  # L47 (R2MED's documents have no title)
        corpus_ids = sorted(corpus, key=lambda k: len(corpus[k]), reverse=True)
    result_heaps: dict[str, list] = {qid: [] for qid in query_ids}  # L55
    for corpus_start_idx in range(0, len(corpus_ids), corpus_chunk_size):  # L53-56
        corpus_end_idx = min(corpus_start_idx + corpus_chunk_size, len(corpus_ids))  # L58
        chunk = corpus_ids[corpus_start_idx:corpus_end_idx]
        sub_corpus_embeddings = np.stack([doc_vectors[cid] for cid in chunk])  # L61-66
        cos_scores = cos_sim(query_embeddings, sub_corpus_embeddings)  # L69
        if score_function is not None:
            cos_scores = score_function(query_ids, chunk)
        cos_scores[torch.isnan(cos_scores)] = -1  # L70
        values, idx = torch.topk(  # L73
            cos_scores, min(top_k + 1, len(cos_scores[1])), dim=1, largest=True, sorted=False
        )
        values, idx = values.cpu().tolist(), idx.cpu().tolist()  # L74-75
        for query_itr in range(len(query_embeddings)):  # L77-87
            query_id = query_ids[query_itr]
            for sub_corpus_id, score in zip(idx[query_itr], values[query_itr], strict=True):
                corpus_id = corpus_ids[corpus_start_idx + sub_corpus_id]
                if corpus_id != query_id:
                    if len(result_heaps[query_id]) < top_k:
                        heapq.heappush(result_heaps[query_id], (score, corpus_id))
                    else:
                        heapq.heappushpop(result_heaps[query_id], (score, corpus_id))
    for qid in result_heaps:  # L89-91
        for score, corpus_id in result_heaps[qid]:
            results[qid][corpus_id] = score
    return results


def trec_order(ranking: dict[str, float]) -> list[str]:
    """How trec_eval (pytrec_eval, R2MED's metrics) ranks a result: score, then doc id, both
    descending (eval/evaluate.py)."""
    return [d for d, _ in sorted(ranking.items(), key=lambda x: (x[1], x[0]), reverse=True)]


def corpus_order(index: DenseIndex, vector: np.ndarray, k: int) -> list[str]:
    """Our rule before: decreasing cosine, equal ones in corpus order (a stable sort)."""
    scores = index.doc_embeddings @ (vector / np.linalg.norm(vector))
    return [index.doc_ids[i] for i in np.argsort(-scores, kind="stable")[:k]]


def beir_list(index: DenseIndex, corpus: dict[str, str], vector: np.ndarray, k: int) -> list:
    """BEIR's list for one query vector in trec order, cut on the cosines ``index`` computes
    for it (its float32 arithmetic, not torch's: see `beir_search`), a second query beside
    it as L73 needs two rows (``len(cos_scores[1])``; R2MED searches a task's queries
    together)."""
    import torch

    ours = index.search_vectors(vector[None], len(index.doc_ids))[0]  # every cosine, as ours

    def score_function(query_ids: list[str], doc_ids: list[str]):
        row = [ours[d] for d in doc_ids]
        return torch.tensor([row, [-x for x in row]], dtype=torch.float32)

    doc_vectors = dict(zip(index.doc_ids, index.doc_embeddings, strict=True))
    queries = {"q": vector, "other": -vector}
    return trec_order(
        beir_search(corpus, doc_vectors, queries, k, score_function=score_function)["q"]
    )


# a corpus whose texts differ in length, where one direction scores higher than a tied group
TOP, TIE, LOW = (1.0, 0.0, 0.0), (0.6, 0.8, 0.0), (0.0, 0.0, 1.0)
KINDS = ["low", "tie", "top", "tie", "low", "tie", "tie", "low", "tie", "tie", "low", "tie"]
LENGTHS = [34, 27, 22, 14, 15, 6, 7, 5, 11, 33, 27, 36]  # d01, d10: equal, kept in order
IDS = [f"d{i:02d}" for i in range(len(KINDS))]
TEXTS = {d: d + "x" * (n - len(d)) for d, n in zip(IDS, LENGTHS, strict=True)}
VECTORS = {
    d: np.array({"top": TOP, "tie": TIE, "low": LOW}[kind], dtype=np.float32)
    for d, kind in zip(IDS, KINDS, strict=True)
}
QUERIES = {
    "q1": np.array([1.0, 0.2, 0.0], dtype=np.float32),
    "q2": np.array([0.2, 0.3, 1.0], dtype=np.float32),
}


def fixed_index(ties: str, texts=TEXTS, vectors=VECTORS, tmp: Path | None = None) -> DenseIndex:
    def encode(batch, instruction, role):
        return np.stack([vectors[by_text[t]] for t in batch])

    by_text = {t: d for d, t in texts.items()}
    return build_index(dict(texts), "fixed", encode, NO_INSTRUCTIONS, tmp, False, ties=ties)


def ours(index: DenseIndex, queries: dict[str, np.ndarray], k: int, **kw) -> dict[str, list]:
    ids = list(queries)
    rankings = index.search_vectors(np.stack([queries[q] for q in ids]), k, **kw)
    return {q: list(r) for q, r in zip(ids, rankings, strict=True)}


def test_equal_scores_at_the_cut_are_cut_as_beirs_exact_search_cuts_them():
    """Seven documents tie below the first: BEIR sorts the corpus by length (L47), takes
    torch's top k + 1 of that row (L73) and keeps the k largest (score, doc id) (L82-87).
    Our old rule (corpus order) and BEIR without its length sort both keep other ones."""
    index = fixed_index("beir")
    for k in range(1, len(IDS) + 1):
        reference = beir_search(TEXTS, VECTORS, QUERIES, k)
        got = ours(index, QUERIES, k, query_ids=list(QUERIES))
        for q in QUERIES:
            assert got[q] == trec_order(reference[q]), (k, q)
    got = ours(index, QUERIES, 3)["q1"]
    assert got == ["d02", "d11", "d06"]  # d06 (7 characters) is among torch's pick, d09 not
    assert corpus_order(index, QUERIES["q1"], 3) == ["d02", "d01", "d03"]
    assert trec_order(beir_search(TEXTS, VECTORS, QUERIES, 3, length_sort=False)["q1"]) == [
        "d02", "d09", "d08",
    ]  # fmt: skip
    # the same index with the corpus-order rule: what every other family keeps
    assert ours(fixed_index("corpus"), QUERIES, 3)["q1"] == ["d02", "d01", "d03"]


def test_each_chunk_of_the_corpus_is_cut_on_its_own(monkeypatch):
    """L53-87: torch.topk(k + 1) per chunk of corpus_chunk_size, one heap over the chunks.
    Chunks of 4 keep d09 where one chunk keeps d06."""
    from retrievers import dense

    monkeypatch.setattr(dense, "BEIR_CORPUS_CHUNK", 4)
    chunked = beir_search(TEXTS, VECTORS, QUERIES, 3, corpus_chunk_size=4)
    assert ours(fixed_index("beir"), QUERIES, 3)["q1"] == trec_order(chunked["q1"])
    assert trec_order(chunked["q1"]) == ["d02", "d11", "d09"]
    assert trec_order(beir_search(TEXTS, VECTORS, QUERIES, 3)["q1"]) == ["d02", "d11", "d06"]


def test_many_ties_and_the_querys_own_document_as_beir_cuts_them():
    """2,000 documents on 40 directions (torch's partial-sort path: (k + 1) x 64 <= n), the
    queries' ids among the documents: skipped (L81), k others kept."""
    rng = np.random.default_rng(1)
    ids = [f"p{i:04d}" for i in range(2000)]
    texts = {d: f"{d} " + "y" * int(rng.integers(1, 300)) for d in ids}
    directions = rng.normal(size=(40, 8)).astype(np.float32)
    vectors = {d: directions[int(rng.integers(0, 40))] for d in ids}
    queries = {q: rng.normal(size=8).astype(np.float32) for q in ("p0007", "p1234", "x")}
    for k in (10, 25):
        reference = beir_search(texts, vectors, queries, k)
        got = ours(fixed_index("beir", texts, vectors), queries, k, query_ids=list(queries))
        for q in queries:
            assert got[q] == trec_order(reference[q]) and q not in got[q] and len(got[q]) == k


def test_the_families_r2med_runs_are_cut_as_beir_cuts_and_the_cache_serves_both(tmp_path):
    """Every family R2MED runs (its own and the API ones) is searched by BEIR's rule; the rest
    keep corpus order. The rule lives in the index, not in the cached embeddings."""
    for family in families():
        assert family.ties == ("beir" if family.r2med else "corpus"), family.name
    r2meds = (
        "nvidia/NV-Embed-v2",
        "BMRetriever/BMRetriever-2B",
        "text-embedding-3-large",
        "voyage/voyage-3",
        "ncbi/MedCPT-Article-Encoder",
        "BAAI/bge-large-en-v1.5",
    )
    for model in r2meds:
        assert family_for(model).ties == "beir", model
    assert family_for("sentence-transformers/all-MiniLM-L6-v2").ties == "corpus"
    calls: list[int] = []
    by_text = {t: d for d, t in TEXTS.items()}

    def encode(batch, instruction, role):
        calls.append(len(batch))
        return np.stack([VECTORS[by_text[t]] for t in batch])

    first = build_index(TEXTS, "fixed", encode, NO_INSTRUCTIONS, tmp_path, False, ties="corpus")
    again = build_index(TEXTS, "fixed", encode, NO_INSTRUCTIONS, tmp_path, False, ties="beir")
    assert calls == [len(TEXTS)]  # the second build read the first one's cache
    np.testing.assert_array_equal(first.doc_embeddings, again.doc_embeddings)
    assert ours(again, QUERIES, 3)["q1"] == ["d02", "d11", "d06"]


def test_a_tiny_bge_model_with_repeated_documents_is_cut_as_beir_cuts_it(tmp_path):
    """A real (tiny) model of an R2MED family: repeated texts give equal vectors, so equal
    scores; on our cosines, BEIR's cut gives our list, and not the corpus-order one."""
    folder = tiny_models.bert(tmp_path / "bge-large-tiny")
    texts = list(tiny_models.TEXTS)
    corpus = {f"doc{i:02d}": texts[i % 3 if i % 2 else i % len(texts)] for i in range(20)}
    index = build_dense(corpus, str(folder), "Biology", None, False, device="cpu")
    assert index.ties == "beir"
    queries = {"q1": "aspirin and platelets", "q2": "glucose uptake"}
    vectors = index.encode_requests(list(queries.values()), ["", ""])
    as_dict = dict(zip(queries, vectors, strict=True))
    doc_vectors = dict(zip(index.doc_ids, index.doc_embeddings, strict=True))
    position = {d: i for i, d in enumerate(index.doc_ids)}
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    cosines = index.doc_embeddings @ unit.T  # docs x queries: ours, as search_vectors has them

    def our_cosines(query_ids: list[str], doc_ids: list[str]):
        import torch

        rows = [list(queries).index(q) for q in query_ids]
        return torch.from_numpy(cosines[[position[d] for d in doc_ids]][:, rows].T.copy())

    changed = False
    for k in range(1, 12):
        reference = beir_search(corpus, doc_vectors, as_dict, k, score_function=our_cosines)
        got = ours(index, as_dict, k)
        for q, vector in as_dict.items():
            assert got[q] == trec_order(reference[q]), (k, q)
            changed |= got[q] != corpus_order(index, vector, k)
    assert changed


# --- NV-Embed: float32 vectors, float32 scores ------------------------------------------------

NV_FLOAT_MASK_MODEL = '''import torch
from transformers import PreTrainedModel

from .configuration_tiny_nv import TinyNVConfig


class TinyNVModel(PreTrainedModel):
    """tests/tiny_models.py's NV-Embed stand-in, pooled as NV-Embed-v2's own
    LatentAttentionModel.forward pools: the mean of hiddens * attention_mask.float() over the
    pool mask, which torch promotes to float32 whatever the weights' dtype."""

    config_class = TinyNVConfig

    def __init__(self, config):
        super().__init__(config)
        self.embed = torch.nn.Embedding(config.vocab_size, config.hidden_size)
        self.mix = torch.nn.Linear(config.hidden_size, config.hidden_size)
        self.latent = torch.nn.Parameter(torch.randn(config.hidden_size))
        self.post_init()

    def _init_weights(self, module):
        pass

    def _ids(self, text, max_length):
        return torch.tensor(list(text.encode("utf-8"))[:max_length] or [0])

    def encode(self, prompts, instruction="", max_length=4096, **kwargs):
        rows = []
        for text in prompts:
            head = self._ids(instruction, max_length) if instruction else self._ids("", 0)[:0]
            body = self._ids(text, max_length - len(head))
            hidden = torch.tanh(self.mix(self.embed(torch.cat([head, body]))))
            mask = torch.zeros(len(hidden), dtype=torch.long)
            mask[len(head):] = 1
            s = torch.sum(hidden * mask.unsqueeze(-1).float(), dim=0)
            rows.append(s / mask.sum().float())
        return torch.stack(rows)
'''


def test_nv_embed_vectors_and_scores_are_float32_as_r2med_computed_them(tmp_path):
    """NVEmbedModel loads the weights in fp16 (utils.py L623), but NV-Embed-v2's pooling
    multiplies by a float mask, so model.encode returns float32; R2MED normalises and saves
    that (L674-678) and BEIR's cos_sim (util.py L22-24) computes float32 scores. Ours are the
    same vectors, not rounded to fp16 (which would tie documents R2MED does not tie)."""
    import torch
    from transformers import AutoModel

    folder = tiny_models.nv_embed(tmp_path / "NV-Embed-f32-tiny")
    (folder / "modeling_tiny_nv.py").write_text(NV_FLOAT_MASK_MODEL, encoding="utf-8")
    model = AutoModel.from_pretrained(folder, trust_remote_code=True, dtype=torch.float16)
    corpus = {f"d{i}": t for i, t in enumerate(tiny_models.TEXTS)}
    with torch.no_grad():
        out = model.encode(list(corpus.values()), instruction="", max_length=4096)
    saved = torch.nn.functional.normalize(out, dim=-1).cpu().numpy()  # L675-678
    assert next(model.parameters()).dtype == torch.float16 and saved.dtype == np.float32
    assert cos_sim(saved[:1], saved).dtype == torch.float32
    index = build_dense(corpus, str(folder), None, None, False, device="cpu",
                        trust_remote_code=True)  # fmt: skip
    assert "dtype=fp16" in index.encoder_id
    np.testing.assert_allclose(index.doc_embeddings, saved, atol=1e-6)
    as_fp16 = index.doc_embeddings.astype(np.float16).astype(np.float32)
    assert not np.array_equal(as_fp16, index.doc_embeddings)  # float32, not fp16 values


# --- BMRetriever: R2MED's autocast on a CUDA device ------------------------------------------


def test_bmr_autocast_is_torch_cuda_amp_autocast_on_cuda_and_nothing_elsewhere():
    """utils.py L147, L504: torch.cuda.amp.autocast() is torch.autocast("cuda", float16); it
    casts CUDA operations only, so on the CPU R2MED's BMR mode ran fp32. The CUDA key marks
    it; the CPU's key is unchanged, so CPU caches stay valid."""
    import contextlib
    import warnings

    import torch

    from retrievers.encoders import bmr_autocast, device_recipe

    with warnings.catch_warnings():  # no GPU here: torch says it disables the context
        warnings.simplefilter("ignore")
        for device in ("cuda", "cuda:1"):
            context = bmr_autocast(device)
            assert isinstance(context, torch.autocast)
            assert (context.device, context.fast_dtype) == ("cuda", torch.float16)
    for device in ("cpu", "mps"):
        assert isinstance(bmr_autocast(device), contextlib.nullcontext)
    bmr = family_for("BMRetriever/BMRetriever-410M")
    assert device_recipe(bmr, "cuda:0") == "|autocast=cuda-fp16"
    assert device_recipe(bmr, "cpu") == ""
    assert device_recipe(family_for("BAAI/bge-large-en-v1.5"), "cuda") == ""


def test_bmr_forward_pass_runs_inside_the_autocast_on_a_cuda_device(tmp_path, monkeypatch):
    """Without a GPU: the model stays on the CPU and the batch is not moved, and the context
    `bmr_autocast` gives for the device is recorded; the forward pass must run inside it for
    a cuda device and outside any for the CPU. Not measured: the fp16 arithmetic itself."""
    import contextlib

    from retrievers import encoders

    folder = tiny_models.mistral(tmp_path / "BMRetriever-tiny", 3, add_eos_token=False, pad=None)
    tokenizer, model = encoders._bmr_model(str(folder), "fp32", "cpu")
    entered: list[str] = []
    inside: list[bool] = []
    depth = [0]

    @contextlib.contextmanager
    def recording(device: str):
        entered.append(device)
        depth[0] += device.startswith("cuda")
        try:
            yield
        finally:
            depth[0] -= device.startswith("cuda")

    monkeypatch.setattr(encoders, "bmr_autocast", recording)
    monkeypatch.setattr(encoders, "_bmr_model", lambda path, dtype, device: (tokenizer, model))
    padded = encoders._padded
    monkeypatch.setattr(encoders, "_padded", lambda tok, rows, device: padded(tok, rows, "cpu"))
    hook = model.register_forward_hook(lambda module, args, output: inside.append(depth[0] > 0))
    try:
        family = family_for("BMRetriever/BMRetriever-410M")
        for device in ("cuda", "cpu"):
            load = encoders.Load(str(folder), family, "fp32", device, None, 2)
            encoders.bmr_encoder(load)(["aspirin", "insulin", "ATP"], "", "doc")
    finally:
        hook.remove()
    assert entered == ["cuda", "cuda", "cpu", "cpu"]  # one context per batch of 2
    assert inside == [True, True, False, False]


# --- an empty generated text, under R2MED's rules --------------------------------------------

CORPUS = {f"d{i}": text for i, text in enumerate(tiny_models.TEXTS)} | {
    "d7": "Metformin reduces hepatic glucose production in type 2 diabetes.",
    "d8": "Beta blockers slow the heart rate and lower blood pressure.",
    "d9": "A child with fever, cough and a rash after measles exposure.",
}
QUERY = "Why does aspirin stop platelets from clumping?"


def flag_dres(folder: Path, texts: list[str]) -> np.ndarray:
    """FlagDRESModel.encode, Base mode (utils.py L113-133): bge's CLS, normalised."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer, model = AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder)
    inputs = tokenizer(texts, padding=True, truncation=True, return_tensors="pt", max_length=512)
    with torch.no_grad():
        hidden = model.eval()(**inputs, return_dict=True).last_hidden_state
    return torch.nn.functional.normalize(hidden[:, 0], dim=-1).numpy()


def r2med_pair(folder: Path, query: str, hy_doc: str) -> np.ndarray:
    """encode_queries of a [query, hy_doc] pair (utils.py L79-90): the query behind bge's
    instruction, the text bare, averaged, whatever the text (an empty one included)."""
    instruction = family_instructions(family_for("bge-large"), "Biology").query
    base = flag_dres(folder, [instruction + query])
    rewrite = flag_dres(folder, [hy_doc])
    return (base + rewrite) / 2


@pytest.fixture(scope="module")
def bge(tmp_path_factory) -> Path:
    return tiny_models.bert(tmp_path_factory.mktemp("empty") / "bge-large-tiny")


def test_an_empty_generated_text_is_averaged_in_under_r2meds_rules_only(bge):
    index = build_dense(CORPUS, str(bge), "Biology", None, False, device="cpu")
    paired = SearchRequest(QUERY, expansion="", paired=True)
    k = len(CORPUS)
    with_rules = DenseRetriever(index, r2med_rules=True).search(paired, k)
    pair = index.encode_requests([QUERY], [""], [True])[0]
    np.testing.assert_allclose(pair, r2med_pair(bge, QUERY, "")[0], atol=1e-5)
    assert list(with_rules) == beir_list(index, CORPUS, pair, k)
    reference = r2med_pair(bge, QUERY, "")[0]
    cosines = index.doc_embeddings @ (reference / np.linalg.norm(reference))
    expected = dict(zip(index.doc_ids, cosines.tolist(), strict=True))
    assert list(with_rules.values()) == pytest.approx([expected[d] for d in with_rules], abs=1e-5)
    # ours otherwise: the query alone, as a request that is no pair is under the rules too
    alone = DenseRetriever(index).search(paired, k)
    assert alone == DenseRetriever(index, r2med_rules=True).search(SearchRequest(QUERY), k)
    assert list(alone) != list(with_rules)  # the empty text moves documents
    query_only = flag_dres(bge, [family_instructions(family_for("bge-"), "Biology").query + QUERY])
    np.testing.assert_allclose(index.encode_requests([QUERY], [""]), query_only, atol=1e-5)


def test_generated_texts_are_paired_as_r2med_pairs_them():
    """src/eval_retrieval.py L37-44: [query, hy_doc] for every method but query2doc, whose
    query[SEP]hy_doc is one string; reason's rewrite replaces the query."""
    from agents.graphs.combine import r2med_request

    for method in ("hyde", "lamer", "search-o1", "search-r1"):
        assert r2med_request(method, "q", "").paired, method
    assert r2med_request("hyde", "q", "", parser="think").paired
    assert not r2med_request("query2doc", "q", "").paired
    assert not r2med_request("reason", "q", "").paired


def test_the_paper_preset_turns_r2meds_rules_on_and_an_old_config_reads_them_off():
    """A run records the decision (config.json), so an old --preset paper run (written before
    the setting, without R2MED's rules) is refused naming it rather than resumed under rules
    it did not run, and resumes as it ran with --r2med-rules false; a default run resumes."""
    from agents.config.binding import binding, differences
    from agents.config.serialise import from_dict, to_dict
    from agents.config.settings import from_settings

    def rules(**settings) -> bool | None:
        return from_settings(settings).retriever.dense.r2med_rules

    assert rules(agent="hyde", retriever="dense", preset="paper") is True
    assert rules(agent="none", retriever="api:text-embedding-3-large", preset="paper") is True
    assert rules(agent="hyde", retriever="bm25+dense", preset="paper") is True
    assert rules(agent="hyde", retriever="bm25", preset="paper") is False
    assert rules(agent="hyde", retriever="dense") is False
    assert rules(agent="hyde", retriever="dense", preset="paper", r2med_rules=False) is False
    assert rules(agent="hyde", retriever="dense", r2med_rules=True) is True
    for preset, resumes in (("paper", False), ("default", True)):
        new = from_settings({"agent": "hyde", "retriever": "dense", "preset": preset})
        old = to_dict(new)
        del old["retriever"]["dense"]["r2med_rules"]  # as config.json was written before it
        assert from_dict(old).retriever.dense.r2med_rules is False
        assert (binding(from_dict(old)) == binding(new)) is resumes, preset
        if not resumes:
            assert differences(binding(from_dict(old)), binding(new)) == ["r2med_rules"]
            off = {"agent": "hyde", "retriever": "dense", "preset": preset, "r2med_rules": False}
            assert binding(from_dict(old)) == binding(from_settings(off))
    assert binding(from_dict(to_dict(new))) == binding(new)


def test_a_paper_replay_of_an_empty_r2med_text_searches_its_averaged_pair(bge, tmp_path):
    """agents.run, hyde replaying R2MED's released texts (r2med:<llm>@<folder>) where one is
    empty: R2MED searches it as the pair averaged (utils.py L79-90); --preset paper does too,
    the default preset searches the query alone (as it did)."""
    from agents.commands.run import main

    task = tmp_path / "toy"
    task.mkdir()
    queries = {"q1": QUERY, "q2": "What lowers blood glucose?"}
    with open(task / "corpus.jsonl", "w") as f:
        f.writelines(json.dumps({"id": i, "text": t}) + "\n" for i, t in CORPUS.items())
    with open(task / "query.jsonl", "w") as f:
        f.writelines(json.dumps({"id": q, "text": t}) + "\n" for q, t in queries.items())
    with open(task / "qrels.jsonl", "w") as f:
        f.write(json.dumps({"q_id": "q1", "p_id": "d0", "score": 1}) + "\n")
    gens = tmp_path / "gens" / "hyde" / "gpt4" / "query_with_hydoc.jsonl"
    gens.parent.mkdir(parents=True)
    rows = [{"id": "q1", "text": QUERY, "hy_doc": ""},
            {"id": "q2", "text": queries["q2"], "hy_doc": "Insulin lowers glucose."}]  # fmt: skip
    gens.write_text("".join(json.dumps(r) + "\n" for r in rows))

    def run(name: str, *extra: str) -> list[str]:
        argv = ["--agent", "hyde", "--dataset", str(task), "--generations",
                f"r2med:gpt4@{tmp_path / 'gens'}", "--retriever", f"dense:{bge}", "--device",
                "cpu", "--runs-dir", str(tmp_path / "runs"), "--cache-dir",
                str(tmp_path / "cache"), "--run-name", name, "--quiet", *extra]  # fmt: skip
        assert main(argv) == 0
        lines = (tmp_path / "runs" / name / "toy" / "run.trec").read_text().splitlines()
        return [row.split()[2] for row in lines if row.split()[0] == "q1"]

    paper = run("paper", "--preset", "paper")
    config = json.loads((tmp_path / "runs" / "paper" / "config.json").read_text())
    assert config["retriever"]["dense"]["r2med_rules"] is True
    default = run("default")
    index = build_dense(CORPUS, str(bge), "toy", None, False, device="cpu")
    pair = index.encode_requests([QUERY], [""], [True])[0]
    np.testing.assert_allclose(pair, r2med_pair(bge, QUERY, "")[0], atol=1e-5)
    assert paper == beir_list(index, CORPUS, pair, 100)
    assert default == beir_list(index, CORPUS, index.encode_requests([QUERY], [""])[0], 100)
    assert paper != default


# --- text-embedding-3-large: a failed request sent again, cut shorter --------------------------


class FailingEmbeddings:
    """An OpenAI-compatible embeddings endpoint (litellm.embedding's test seam) that refuses a
    request holding a text of more than ``limit`` cl100k_base tokens, as an input-length
    limit does, and records every request."""

    def __init__(self, limit: int) -> None:
        import tiktoken

        from retrievers import api_embed

        api_embed._cutter(family_for("text-embedding-3-large"), "text-embedding-3-large")
        self.cl100k = tiktoken.get_encoding("cl100k_base")  # after litellm set its cache up
        self.limit = limit
        self.requests: list[list[str]] = []

    def __call__(self, model, input, **kwargs):
        import litellm

        self.requests.append(list(input))
        if max(len(self.cl100k.encode(t)) for t in input) > self.limit:
            raise litellm.BadRequestError("input too long", model=model, llm_provider="openai")
        data = [{"embedding": [1.0, float(len(t))], "index": i} for i, t in enumerate(input)]
        return litellm.EmbeddingResponse(model=model, data=data)


def r2med_openai_encode(sentences: list[str], create, tokenizer) -> list[list[str]]:
    """RetrievalOPENAI.encode for text-embedding-3-large (utils.py L767-809), one batch, with
    ``create`` for ``self.model.embeddings.create``; returns the inputs of every request."""
    sent: list[list[str]] = []

    def cut_text_openai(text, threshold=6000):  # L761-765
        token_ids = tokenizer.encode(text)
        if len(token_ids) > threshold:
            text = tokenizer.decode(token_ids[:threshold])
        return text

    sentences = [cut_text_openai(s) for s in sentences]  # L770
    texts = [json.dumps(text.replace("\n", " ")) for text in sentences]  # L776
    success, threshold, count, exec_count = False, 6000, 0, 0  # L777-781
    while not success:  # L782
        exec_count += 1
        if exec_count > 5:
            raise SystemExit(0)  # L784-786: exit(0)
        try:
            sent.append(list(texts))
            create(input=texts)
            success = True
        except Exception:  # L794-804
            count += 1
            threshold -= 500
            if count > 4:
                raise SystemExit(0) from None  # L798-800: exit(0)
            texts = [cut_text_openai(text=t, threshold=threshold) for t in texts]
    return sent


def test_text_embedding_3_large_sends_a_failed_request_again_as_r2med_does(monkeypatch):
    import litellm

    from retrievers import api_embed

    long = "aspirin é " * 4000  # escaped by json.dumps: more tokens once quoted
    texts = ["two\nlines", long]
    api = FailingEmbeddings(limit=4700)
    reference = r2med_openai_encode(
        texts, lambda input: api(model="text-embedding-3-large", input=input), api.cl100k
    )
    # json.dumps escapes each é, so the 6,000-token cut grows past the limit once quoted; R2MED
    # cuts the quoted texts at 5,500, 5,000, then 4,500 tokens, which passes
    assert len(reference) == 4 and len(api.cl100k.encode(reference[0][1])) > 6000
    assert reference[3][1] == api.cl100k.decode(api.cl100k.encode(reference[2][1])[:4500])
    api.requests.clear()
    monkeypatch.setattr(litellm, "embedding", api)
    family = family_for("text-embedding-3-large")
    encode = api_embed.api_encoder("text-embedding-3-large", family=family,
                                   retry_cuts=family.retry_cuts)  # fmt: skip
    rows = encode(texts, "", "doc")
    assert api.requests == reference  # the same four requests, the last one answered
    assert rows.shape == (2, 2)
    # ours otherwise: the first failure fails the query
    api.requests.clear()
    plain = api_embed.api_encoder("text-embedding-3-large", family=family)
    with pytest.raises(litellm.BadRequestError):
        plain(texts, "", "doc")
    assert len(api.requests) == 1


def test_r2med_gives_up_after_its_fifth_request_and_an_absent_server_is_not_cut(monkeypatch):
    import litellm

    from retrievers import api_embed

    api = FailingEmbeddings(limit=10)
    with pytest.raises(SystemExit):  # exit(0) after the fifth failure (L798-800)
        r2med_openai_encode(["word " * 50], lambda input: api(model="m", input=input), api.cl100k)
    reference = list(api.requests)
    assert len(reference) == 5 and all(r == reference[0] for r in reference)  # too short to cut
    api.requests.clear()
    monkeypatch.setattr(litellm, "embedding", api)
    family = family_for("text-embedding-3-large")
    encode = api_embed.api_encoder("text-embedding-3-large", family=family,
                                   retry_cuts=family.retry_cuts)  # fmt: skip
    with pytest.raises(litellm.BadRequestError) as failed:
        encode(["word " * 50], "", "doc")
    assert api.requests == reference  # five requests, as R2MED's loop sends before exit(0)
    assert "5500, 5000, 4500, 4000" in "".join(getattr(failed.value, "__notes__", []))
    calls: list[int] = []

    def refused(model, input, **kwargs):
        calls.append(1)
        raise litellm.APIConnectionError("Connection refused", llm_provider="openai", model=model)

    monkeypatch.setattr(litellm, "embedding", refused)
    quick = api_embed.api_encoder("text-embedding-3-large", max_attempts=1, family=family,
                                  retry_cuts=family.retry_cuts)  # fmt: skip
    with pytest.raises(api_embed.EmbeddingUnavailable):
        quick(["x"], "", "query")
    assert calls == [1]  # a shorter text cannot make a server answer: not sent again


def test_r2meds_rules_have_their_own_cache_key_and_reuse_a_plain_corpus(tmp_path, monkeypatch):
    """dense.r2med_rules reaches the API member; its corpus embeddings are keyed apart (a
    batch cut shorter would differ) but read from a plain run's cache, every request of which
    succeeded at its first cut, as it would have here."""
    import litellm

    from eval.datasets import Task
    from retrievers.config import RetrieverConfig
    from retrievers.search import build_retriever
    from retrievers.settings import DenseConfig

    api = FailingEmbeddings(limit=10_000)
    monkeypatch.setattr(litellm, "embedding", api)
    task = Task("Biology", dict(CORPUS), {}, {}, tmp_path)
    spec = "api:text-embedding-3-large"
    plain = build_retriever(RetrieverConfig(spec), task, tmp_path, progress=False)
    assert len(api.requests) == 1 and "retry_cuts" not in plain.index.encoder_id
    rules = RetrieverConfig(spec, dense=DenseConfig(r2med_rules=True))
    built = build_retriever(rules, task, tmp_path, progress=False)
    assert len(api.requests) == 1  # the plain run's corpus, read back
    assert built.index.encoder_id.endswith("retry_cuts=5500/5000/4500/4000")
    assert built.r2med_rules and built.index.ties == "beir"
    fresh = build_retriever(rules, task, tmp_path / "other", progress=False)
    assert len(api.requests) == 2
    np.testing.assert_array_equal(fresh.index.doc_embeddings, built.index.doc_embeddings)
