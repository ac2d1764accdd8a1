"""Each of R2MED's dense retrievers encodes as R2MED's code encodes it.

R2MED/R2MED at 62b7074: src/eval_retrieval.py ``init_model`` (L121-180) builds each
retriever's encoder from src/utils.py with its own pooling, length, normalisation and
instructions (src/instrcution.py). Every test builds a tiny model in the family's hub layout
(tests/tiny_models.py) and computes the reference vectors in the test itself, step by step from
R2MED's lines (cited), with transformers directly; our index (`retrievers.dense.build_dense`)
must give the same vectors and the same top-10 lists.

R2MED ran transformers 4.x, whose Llama-style tokenizers appended the ``</s>`` that
``tokenizer_config.json`` asks for (``add_eos_token``); transformers 5 does not. The
references below add it as 4.x did, so a test fails if our encoder loses it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from retrievers.dense import build_dense  # noqa: E402
from retrievers.families import family_for, family_instructions  # noqa: E402
from tests import tiny_models  # noqa: E402

CORPUS = {f"d{i}": text for i, text in enumerate(tiny_models.TEXTS)} | {
    "d7": "Metformin reduces hepatic glucose production in type 2 diabetes.",
    "d8": "Beta blockers slow the heart rate and lower blood pressure.",
    "d9": "A child with fever, cough and a rash after measles exposure.",
    "d10": "Statins inhibit HMG-CoA reductase and lower LDL cholesterol.",
    "d11": "Warfarin antagonises vitamin K and prolongs the INR.",
}
QUERIES = [
    "Why does aspirin stop platelets from clumping?",
    "What lowers blood glucose after a meal?",
    "How is ATP made in the cell?",
]
EXPANSIONS = [
    "Aspirin acetylates cyclooxygenase so platelets make less thromboxane.",
    "",
    "Oxidative phosphorylation in mitochondria produces most ATP.",
]
TASK = "Biology"


def unit(rows) -> np.ndarray:
    rows = np.asarray(rows, dtype=np.float64)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def ours(folder: Path, **options):
    return build_dense(
        CORPUS, str(folder), TASK, cache_dir=None, progress=False, device="cpu", **options
    )


def check_same(index, docs: np.ndarray, queries: np.ndarray, atol: float = 1e-5) -> None:
    """Our vectors (normalised) equal the reference's, and so do the top-10 lists: the same
    documents in the same order, but where the reference's own scores tie within float noise
    (random tiny models put many documents within 1e-6 of each other)."""
    np.testing.assert_allclose(index.doc_embeddings, unit(docs), atol=atol)
    got = index.encode_requests(QUERIES, EXPANSIONS)
    np.testing.assert_allclose(unit(got), unit(queries), atol=atol)
    reference = unit(queries) @ unit(docs).T
    ids = list(CORPUS)
    for row, vector in zip(reference, got, strict=True):
        ranked = [ids.index(d) for d in index.search_vectors(vector[None], 10)[0]]
        expected = list(np.argsort(-row, kind="stable")[:10])
        noise = 4 * atol
        pairs = zip(ranked, ranked[1:], strict=False)
        assert all(row[a] >= row[b] - noise for a, b in pairs), ranked
        outside = [i for i in range(len(ids)) if i not in ranked]
        assert row[ranked[-1]] >= max(row[outside], default=-1) - noise
        # beyond ties, the very same list
        assert [row[i] for i in ranked] == pytest.approx([row[i] for i in expected], abs=noise)


def average(base: np.ndarray, expansion: np.ndarray) -> np.ndarray:
    """R2MED's GAR queries: (emb(query) + emb(hy_doc)) / 2 of the family's own vectors
    (src/utils.py L79-90); a query without an expansion keeps its own vector."""
    out = base.copy()
    for i, text in enumerate(EXPANSIONS):
        if text:
            out[i] = (base[i] + expansion[i]) / 2
    return out


# --- the table ------------------------------------------------------------------------------


def test_each_r2med_retriever_name_gets_its_family_and_settings():
    """R2MED's model paths (src/eval_retrieval.py L187-203) and init_model's arguments
    (L122-176): pooling, max length, normalisation."""
    expected = {
        "facebook/contriever-msmarco": ("contriever", "hf", "mean", 512, False),  # L122-125
        "hkunlp/instructor-large": ("instructor", "instructor", None, None, True),  # L126-130
        "hkunlp/instructor-xl": ("instructor", "instructor", None, None, True),
        "intfloat/e5-mistral-7b-instruct": ("e5-mistral", "hf", "last", 2048, True),  # L131-136
        "Salesforce/SFR-Embedding-Mistral": ("e5-mistral", "hf", "last", 2048, True),
        "BAAI/bge-large-en-v1.5": ("bge", "hf", "cls", 512, True),  # L137-141
        "BMRetriever/BMRetriever-410M": ("bmretriever", "bmr", "last-bmr", 512, False),  # L142
        "BMRetriever/BMRetriever-2B": ("bmretriever-2b", "bmr", "last-bmr", 1024, False),
        "BMRetriever/BMRetriever-7B": ("bmretriever-7b", "bmr", "last-bmr", 2048, False),  # L151
        "ncbi/MedCPT-Article-Encoder": ("medcpt", "medcpt", "cls", 512, False),  # L159-163
        "GritLM/GritLM-7B": ("gritlm", "grit", None, 512, True),  # L164-168
        "nvidia/NV-Embed-v2": ("nv-embed", "nv", None, 4096, True),  # L169-174
        "text-embedding-3-large": ("openai", "openai", None, None, True),  # L175-176
        "voyage/voyage-3": ("voyage", "voyage", None, None, True),
    }
    for model, (name, loader, pooling, length, normalize) in expected.items():
        family = family_for(model)
        got = (family.name, family.loader, family.pooling, family.max_length, family.normalize)
        assert got == (name, loader, pooling, length, normalize), model
    assert family_for("GritLM/GritLM-7B").length_for("doc") == 2048  # utils.py L550
    assert family_for("nvidia/NV-Embed-v2").dtype == "fp16"  # utils.py L623
    assert family_for("GritLM/GritLM-7B").dtype == "auto"  # utils.py L553
    assert {f.name for f in (family_for("nvidia/NV-Embed-v2"), family_for("GritLM/GritLM-7B"))}
    assert family_for("nvidia/NV-Embed-v2").remote_code and family_for("gritlm-7b").remote_code
    # a folder whose name says nothing is plain sentence-transformers unless told otherwise
    assert family_for("/models/checkpoint-42").name == "plain"
    assert family_for("/models/checkpoint-42", "medcpt").name == "medcpt"
    with pytest.raises(ValueError, match="dense.family: must be auto or one of"):
        family_for("x", "medcpt-v9")


def test_instructions_per_family_and_task_follow_instrcution_py():
    """src/instrcution.py L34-79 and src/eval_retrieval.py L229-232."""
    grit = family_instructions(family_for("GritLM/GritLM-7B"), "PMC-Clinical")
    assert grit.query == (  # L53
        "<|user|>\nGiven a Clinical Case, retrieve similar cases that help diagnose the case\n"
        "<|embed|>\n"
    )
    assert grit.doc == "<|embed|>\n" and grit.expansion == grit.query  # L77; utils.py L580
    nv = family_instructions(family_for("nvidia/NV-Embed-v2"), "MedQA-Diag")
    assert nv.query.startswith("Instruct: Given a Medical Exam") and nv.doc == ""  # L39, L78
    bmr = family_instructions(family_for("BMRetriever/BMRetriever-2B"), "Biology")
    assert bmr.query.startswith("Given a Biology post") and bmr.expansion == ""  # L44
    assert bmr.doc == "Represent this passage\npassage: "  # L74-76
    bge = family_instructions(family_for("BAAI/bge-large-en-v1.5"), "IIYi-Clinical")
    assert bge.query == "Represent this sentence for searching relevant passages: "  # L61
    for model in ("facebook/contriever-msmarco", "ncbi/MedCPT-Article-Encoder"):
        none = family_instructions(family_for(model), "Biology")
        assert none.query == none.doc == ""  # init_model gives none (L122-125, L159-163)


# --- BERT families ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("families")
    return {
        "bge": tiny_models.bert(root / "bge-large-tiny"),
        "contriever": tiny_models.bert(root / "contriever-tiny", seed=1),
        "medcpt": tiny_models.bert(root / "MedCPT-Article-Encoder-tiny", seed=2),
        "e5": tiny_models.mistral(root / "e5-mistral-tiny"),
        "bmr": tiny_models.mistral(root / "BMRetriever-tiny", 3, add_eos_token=False, pad=None),
        "instructor": tiny_models.instructor(root / "instructor-tiny"),
        "nv": tiny_models.nv_embed(root / "NV-Embed-tiny"),
        "grit": tiny_models.mistral(root / "GritLM-tiny", 4, add_eos_token=False, pad=None),
    }


def _auto(folder: Path):
    from transformers import AutoModel, AutoTokenizer

    return AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder).eval()


def flag_dres_base(folder: Path, texts: list[str], pooling: str, normalize: bool) -> np.ndarray:
    """FlagDRESModel.encode, Base mode (src/utils.py L113-133) with its pooling (L158-166)."""
    import torch

    tokenizer, model = _auto(folder)
    with torch.no_grad():
        inputs = tokenizer(
            texts, padding=True, truncation=True, return_tensors="pt", max_length=512
        )
        hidden = model(**inputs, return_dict=True).last_hidden_state
        if pooling == "cls":
            emb = hidden[:, 0]
        else:
            mask = inputs["attention_mask"]
            emb = (hidden * mask.unsqueeze(-1).float()).sum(1) / mask.sum(1, keepdim=True)
        if normalize:
            emb = torch.nn.functional.normalize(emb, dim=-1)
    return emb.numpy()


def test_bge_is_cls_pooled_with_its_query_instruction(models):
    """init_model's bge (L137-141): CLS, 512 tokens, normalised, the instruction prefixed to
    queries only, an expansion encoded bare (utils.py L79-90)."""
    instruction = "Represent this sentence for searching relevant passages: "
    docs = flag_dres_base(models["bge"], list(CORPUS.values()), "cls", True)
    base = flag_dres_base(models["bge"], [instruction + q for q in QUERIES], "cls", True)
    expansion = flag_dres_base(models["bge"], [e or "-" for e in EXPANSIONS], "cls", True)
    check_same(ours(models["bge"]), docs, average(base, expansion))


def test_contriever_averages_unnormalised_mean_pooled_vectors(models):
    """init_model's contriever (L122-125): mean pooling and normalize_embeddings=False, so a
    GAR query averages raw vectors (utils.py L89) — not what averaging unit vectors gives."""
    folder = models["contriever"]
    docs = flag_dres_base(folder, list(CORPUS.values()), "mean", False)
    base = flag_dres_base(folder, QUERIES, "mean", False)
    expansion = flag_dres_base(folder, [e or "-" for e in EXPANSIONS], "mean", False)
    index = ours(folder)
    check_same(index, docs, average(base, expansion))
    unit_average = average(unit(base), unit(expansion))
    assert not np.allclose(unit(unit_average), unit(average(base, expansion)), atol=1e-4)


def test_medcpt_encodes_documents_as_an_empty_title_pair(models):
    """BiEncoderModel (utils.py L346-384): CLS of the Article encoder for both roles, 512
    tokens, documents as tokenizer(["", ...], texts, truncation='longest_first'), unnormalised."""
    import torch

    tokenizer, model = _auto(models["medcpt"])
    texts = list(CORPUS.values())
    with torch.no_grad():
        pair = tokenizer(
            [""] * len(texts), texts, padding=True, truncation="longest_first",
            return_tensors="pt", max_length=512,
        )  # fmt: skip
        docs = model(**pair).last_hidden_state[:, 0, :].numpy()
        single = tokenizer(texts, padding=True, truncation=True, return_tensors="pt")
        alone = model(**single).last_hidden_state[:, 0, :].numpy()

        def query(batch):
            inputs = tokenizer(batch, padding=True, truncation=True, return_tensors="pt")
            return model(**inputs).last_hidden_state[:, 0, :].numpy()

        queries = average(query(QUERIES), query([e or "-" for e in EXPANSIONS]))
    index = ours(models["medcpt"])
    check_same(index, docs, queries)
    # the pair is what R2MED ran: other token ids and segment ids (BertTokenizer returns them,
    # as transformers 4.x's did), so other vectors (by far more than the tolerance above)
    assert pair["input_ids"][0].tolist() != single["input_ids"][0].tolist()
    assert 1 in pair["token_type_ids"][0].tolist()
    assert np.abs(unit(docs) - unit(alone)).max() > 1e-4


# --- causal-LM families -------------------------------------------------------------------


def with_eos_as_4x(tokenizer, texts: list[str], max_length: int) -> list[list[int]]:
    """What transformers 4.x's Llama tokenizer gave for add_eos_token: true: <s> text </s>,
    the text truncated so that the whole fits max_length."""
    ids = tokenizer(texts, add_special_tokens=False, truncation=True, max_length=max_length - 2)
    return [[tokenizer.bos_token_id, *row, tokenizer.eos_token_id] for row in ids["input_ids"]]


def high_scale_last(folder: Path, texts: list[str], max_length: int = 2048) -> np.ndarray:
    """HighScaleModel Base mode with 'last' pooling (utils.py L470-490, L524-531), normalised,
    on the ids 4.x's tokenizer produced."""
    import torch

    tokenizer, model = _auto(folder)
    rows = with_eos_as_4x(tokenizer, texts, max_length)
    with torch.no_grad():
        inputs = tokenizer.pad({"input_ids": rows}, padding=True, return_tensors="pt")
        hidden = model(**inputs, return_dict=True).last_hidden_state
        mask = inputs["attention_mask"]
        if mask[:, -1].sum() == mask.shape[0]:
            emb = hidden[:, -1]
        else:
            emb = hidden[torch.arange(len(rows)), mask.sum(1) - 1]
        return torch.nn.functional.normalize(emb, dim=-1).numpy()


def test_e5_mistral_pools_the_eos_that_transformers_4_appended(models):
    """init_model's e5/sfr (L131-136): last-token pooling over 2,048 tokens. The tokenizer's
    configuration asks for </s> (add_eos_token); transformers 5 no longer adds it, so without
    our fix the last token pooled would be the text's last word."""
    from transformers import AutoTokenizer

    folder = models["e5"]
    instruction = family_instructions(family_for("e5-mistral"), TASK).query
    assert instruction.startswith("Instruct: Given a Biology post")  # instrcution.py L35
    docs = high_scale_last(folder, list(CORPUS.values()))
    base = high_scale_last(folder, [instruction + q for q in QUERIES])
    expansion = high_scale_last(folder, [e or "-" for e in EXPANSIONS])
    index = ours(folder)
    check_same(index, docs, average(base, expansion))

    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert tokenizer("a")["input_ids"][-1] != tokenizer.eos_token_id  # what 5.x does
    without_eos = tokenizer(list(CORPUS.values()), padding=True, return_tensors="pt")
    import torch

    with torch.no_grad():
        _, model = _auto(folder)
        hidden = model(**without_eos).last_hidden_state
        mask = without_eos["attention_mask"]
        last_word = hidden[torch.arange(len(CORPUS)), mask.sum(1) - 1]
    cosine = np.sum(unit(last_word.numpy()) * unit(docs), axis=1)
    assert cosine.min() < 0.99  # the vectors R2MED's code did not compute


def test_e5_mistral_truncates_so_that_the_eos_fits(models):
    """4.x truncated the text, not the </s>: with a 12-token limit every sequence is at most
    12 tokens and ends with </s>."""
    from retrievers import encoders

    tokenizer, _ = encoders._auto_model(str(models["e5"]), "fp32", "cpu")
    specials = encoders.special_tokens_to_add(tokenizer, str(models["e5"]))
    assert specials.eos == tokenizer.eos_token_id and specials.bos is None
    long = " ".join(tiny_models.TEXTS)
    rows = encoders.token_ids(tokenizer, [long, "aspirin"], 12, specials)
    assert rows == with_eos_as_4x(tokenizer, [long, "aspirin"], 12)
    assert len(rows[0]) == 12 and rows[0][-1] == tokenizer.eos_token_id
    docs = high_scale_last(models["e5"], list(CORPUS.values()), max_length=12)
    index = ours(models["e5"], max_length=12)
    np.testing.assert_allclose(index.doc_embeddings, unit(docs), atol=1e-5)


def bmr_mode(folder: Path, texts: list[str], max_length: int = 512) -> np.ndarray:
    """FlagDRESModel BMR mode (utils.py L41-44, L134-156) with last-bmr pooling (L175-183):
    EOS as the pad token, padded on the left, max_length - 1 then an EOS, not normalised."""
    import torch

    tokenizer, model = _auto(folder)
    tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    batch = tokenizer(
        texts, max_length=max_length - 1, return_attention_mask=False,
        return_token_type_ids=False, padding=False, truncation=True,
    )  # fmt: skip
    batch["input_ids"] = [row + [tokenizer.eos_token_id] for row in batch["input_ids"]]
    with torch.no_grad():
        inputs = tokenizer.pad(batch, padding=True, return_attention_mask=True, return_tensors="pt")
        hidden = model(**inputs).last_hidden_state
        mask = inputs["attention_mask"]
        hidden = hidden.masked_fill(~mask[..., None].bool(), 0.0)
        assert mask[:, -1].sum() == mask.shape[0]  # left padding: every row ends with EOS
        return hidden[:, -1].numpy()


def test_bmretriever_is_left_padded_with_eos_and_pools_the_appended_eos(models):
    """init_model's bmr-410m (L142-150): BMR mode, 512 tokens, the query instruction per task
    (L230), the document instruction (instrcution.py L74), expansions bare."""
    folder = models["bmr"]
    inst = family_instructions(family_for("bmretriever-410m"), TASK)
    docs = bmr_mode(folder, [inst.doc + t for t in CORPUS.values()])
    base = bmr_mode(folder, [inst.query + q for q in QUERIES])
    expansion = bmr_mode(folder, [e or "-" for e in EXPANSIONS])
    check_same(ours(folder), docs, average(base, expansion))


# --- INSTRUCTOR, GritLM, NV-Embed ------------------------------------------------------------


def instructor_reference(folder: Path, instruction: str, texts: list[str]) -> np.ndarray:
    """InstructorModel (utils.py L197-198, L259-268) as sentence-transformers 3.0 ran it for
    R2MED (R2MED's README pins transformers 4.44.2 and mteb 1.1.1, of sentence-transformers 3.0):
    encode() puts the prompt before each text, Transformer.tokenize strips every text, the
    prompt's length is its stripped tokens less the final </s>, and Pooling leaves those out of
    the mean; then the model's Dense and Normalize modules. Computed module by module."""
    import torch
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(folder), device="cpu")
    transformer, _, dense, _ = list(st)
    tokenizer = transformer.tokenizer
    prompt = len(tokenizer(instruction.strip())["input_ids"]) - 1 if instruction else 0
    rows = []
    with torch.no_grad():
        for text in texts:
            inputs = tokenizer([(instruction + text).strip()], return_tensors="pt")
            hidden = transformer.auto_model(**inputs).last_hidden_state[0]
            pooled = hidden[prompt:].mean(dim=0)
            out = dense({"sentence_embedding": pooled[None]})["sentence_embedding"][0]
            rows.append(torch.nn.functional.normalize(out, dim=-1).numpy())
    return np.stack(rows)


def test_instructor_keeps_the_instruction_out_of_the_pooled_tokens(models):
    """init_model's inst-l/inst-xl (L126-130) with per-task instructions for queries and
    documents (L231-232); expansions behind the query instruction (utils.py L235)."""
    from sentence_transformers import SentenceTransformer

    folder = models["instructor"]
    inst = family_instructions(family_for("instructor-large"), TASK)
    assert inst.doc == "Represent the Biology paragraph for retrieval: "  # instrcution.py L25
    docs = instructor_reference(folder, inst.doc, list(CORPUS.values()))
    base = instructor_reference(folder, inst.query, QUERIES)
    expansion = instructor_reference(folder, inst.query, [e or "-" for e in EXPANSIONS])
    check_same(ours(folder), docs, average(base, expansion), atol=2e-5)
    st = SentenceTransformer(str(folder), device="cpu")
    # pooling the instruction as a plain prefix (sentence-transformers' default) differs...
    prefixed = st.encode([inst.doc + t for t in CORPUS.values()], normalize_embeddings=True)
    assert not np.allclose(prefixed, docs, atol=1e-3)
    # ...and so does sentence-transformers 6's own prompt handling on this tokenizer, which
    # keeps the prompt's trailing space as a token and counts it as prompt (3.0 stripped it)
    st.set_pooling_include_prompt(False)
    assert st.tokenizer(inst.doc)["input_ids"] != st.tokenizer(inst.doc.strip())["input_ids"]
    six = st.encode(list(CORPUS.values()), prompt=inst.doc, normalize_embeddings=True)
    assert not np.allclose(six, docs, atol=1e-3)


def test_models_running_their_own_code_load_only_when_allowed(models):
    for name in ("nv", "grit"):
        with pytest.raises(ValueError, match="--trust-remote-code") as refused:
            ours(models[name])
        assert "\n" not in str(refused.value)


def test_nv_embed_uses_the_models_own_encode_in_fp16(models):
    """NVEmbedModel (utils.py L622-623, L667-679): AutoModel with trust_remote_code in
    float16, model.encode(texts, instruction=, max_length=4096), normalised; queries and
    expansions behind the query instruction (L641-648), documents with "" (instrcution.py L78)."""
    import torch
    from transformers import AutoModel

    folder = models["nv"]
    model = AutoModel.from_pretrained(folder, trust_remote_code=True, dtype=torch.float16)
    inst = family_instructions(family_for("nv-embed-v2"), TASK)

    def encode(instruction, texts):
        with torch.no_grad():
            out = model.encode(texts, instruction=instruction, max_length=4096)
        return torch.nn.functional.normalize(out, dim=-1).float().numpy()

    docs = encode("", list(CORPUS.values()))
    queries = average(encode(inst.query, QUERIES), encode(inst.query, EXPANSIONS))
    index = ours(folder, trust_remote_code=True)
    assert "dtype=fp16" in index.encoder_id
    check_same(index, docs, queries, atol=2e-3)  # fp16 arithmetic, batch by batch


def test_gritlm_encodes_through_the_gritlm_package_as_r2med_calls_it(models):
    """GritModel (utils.py L553, L601-609): GritLM(torch_dtype="auto", mode="embedding"),
    encode(texts, instruction=, batch_size=, max_length=) with 512 tokens for queries and 2,048
    for documents; the grit instructions (instrcution.py L47, L77)."""
    GritLM = pytest.importorskip(
        "gritlm", reason="gritlm: pip install --no-deps gritlm==1.0.2 (.ci/run does)"
    ).GritLM
    folder = models["grit"]
    inst = family_instructions(family_for("GritLM-7B"), TASK)
    grit = GritLM(str(folder), torch_dtype="auto", mode="embedding", device="cpu")
    docs = grit.encode(list(CORPUS.values()), instruction=inst.doc, batch_size=64, max_length=2048)
    base = grit.encode(QUERIES, instruction=inst.query, batch_size=64, max_length=512)
    expansion = grit.encode(EXPANSIONS, instruction=inst.query, batch_size=64, max_length=512)
    index = ours(folder, trust_remote_code=True)
    assert "max_length=512/2048" in index.encoder_id
    check_same(index, docs, average(base, expansion))


# --- identical ids, API embedders -------------------------------------------------------------


def test_a_document_with_the_query_id_is_never_returned_and_k_others_are():
    """BEIR's DenseRetrievalExactSearch (R2MED src/eval_retrieval.py L94-110,
    ignore_identical_ids=True): top_k + 1 candidates, the query's own id skipped."""
    from retrievers.base import DenseRetriever, SearchRequest
    from retrievers.dense import DenseIndex, Instructions

    ids = ["q1", "a", "b", "c"]
    docs = unit(np.eye(4, dtype=np.float32) + 0.1)
    vectors = {"q1": docs[0]}

    def encode(texts, instruction, role):
        return np.stack([vectors.get(t, docs[1]) for t in texts])

    index = DenseIndex("fake", encode, Instructions("none", "", "", ""), ids, docs, "fp")
    retriever = DenseRetriever(index)
    kept = retriever.search(SearchRequest("q1"), k=2)
    assert next(iter(kept)) == "q1"  # no query id: nothing is dropped
    dropped = retriever.search(SearchRequest("q1", query_id="q1"), k=2)
    assert "q1" not in dropped and len(dropped) == 2
    index.ignore_identical_ids = False
    assert next(iter(retriever.search(SearchRequest("q1", query_id="q1"), k=2))) == "q1"


def test_text_embedding_3_large_gets_r2meds_cut_flattened_json_quoted_texts(monkeypatch):
    """RetrievalOPENAI (utils.py L761-776): each text cut to 6,000 cl100k_base tokens, newlines
    replaced by spaces, json.dumps'd; no instruction (L175-176 sets none)."""
    import litellm

    from retrievers import api_embed

    sent: list[list[str]] = []

    def fake(model, input, **kwargs):
        sent.append(list(input))
        data = [{"embedding": [1.0, float(i)], "index": i} for i in range(len(input))]
        return litellm.EmbeddingResponse(model=model, data=data)

    monkeypatch.setattr(litellm, "embedding", fake)
    long = "word " * 7000
    encode = api_embed.api_encoder("text-embedding-3-large", family=family_for("text-embedding-3"))
    encode(["two\nlines", long], "", "doc")
    import tiktoken

    cl100k = tiktoken.get_encoding("cl100k_base")
    assert sent[0][0] == json.dumps("two lines")
    assert sent[0][1] == json.dumps(cl100k.decode(cl100k.encode(long)[:6000]))
    assert len(cl100k.encode(json.loads(sent[0][1]))) == 6000


def test_voyage_is_told_the_role_and_cuts_with_its_hub_tokenizer(tmp_path, monkeypatch):
    """RetrievalOPENAI for voyage (utils.py L697-701, L756-760, L772, L792): its own tokenizer
    (R2MED's local copy of the hub's voyageai/<model>), 16,000 tokens, input_type query or
    document. The tokenizer loads from the hub cache, laid out here as the hub lays it out."""
    import litellm

    from retrievers import api_embed

    snapshot = tmp_path / "hub" / "models--voyageai--voyage-3" / "snapshots" / ("a" * 40)
    tiny_models.bert(snapshot)
    (tmp_path / "hub" / "models--voyageai--voyage-3" / "refs").mkdir()
    (tmp_path / "hub" / "models--voyageai--voyage-3" / "refs" / "main").write_text("a" * 40)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants as hub_constants

    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    calls: list[tuple[list[str], dict]] = []

    def fake(model, input, **kwargs):
        calls.append((list(input), kwargs))
        return litellm.EmbeddingResponse(
            model=model, data=[{"embedding": [1.0, 0.5], "index": i} for i in range(len(input))]
        )

    monkeypatch.setattr(litellm, "embedding", fake)
    family = family_for("voyage/voyage-3")
    encode = api_embed.api_encoder("voyage/voyage-3", family=family)
    long = "aspirin " * 16005
    encode(["a\nb", long], "", "doc")
    encode(["query"], "", "query")
    assert [c[1]["input_type"] for c in calls] == ["document", "query"]
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(snapshot)
    cut = tokenizer.decode(tokenizer(long)["input_ids"][:16000])  # cut_text, L756-760
    assert calls[0][0] == [json.dumps("a b"), json.dumps(cut)]


# --- end to end ---------------------------------------------------------------------------


def test_a_run_drops_the_querys_own_document_and_records_the_family(models, tmp_path):
    """A task whose query ids are also document ids (as in R2MED's patient-to-patient tasks):
    the dense run never ranks the query's own document, keeps 100 - 1 others, records the
    family's settings in config.json, and the same run with --ignore-identical-ids false does
    rank it."""
    from agents.commands.run import main

    folder = tmp_path / "task"
    folder.mkdir()
    corpus = {**CORPUS, "p1": QUERIES[0], "p2": QUERIES[1]}
    with open(folder / "corpus.jsonl", "w") as f:
        f.writelines(json.dumps({"id": i, "text": t}) + "\n" for i, t in corpus.items())
    with open(folder / "query.jsonl", "w") as f:
        f.writelines(json.dumps({"id": f"p{n}", "text": QUERIES[n - 1]}) + "\n" for n in (1, 2))
    with open(folder / "qrels.jsonl", "w") as f:
        f.write(json.dumps({"q_id": "p1", "p_id": "d0", "score": 1}) + "\n")
        f.write(json.dumps({"q_id": "p2", "p_id": "d1", "score": 1}) + "\n")

    def run(name: str, *extra: str) -> list[list[str]]:
        argv = ["--agent", "none", "--dataset", str(folder), "--retriever",
                f"dense:{models['bge']}", "--device", "cpu", "--runs-dir",
                str(tmp_path / "runs"), "--cache-dir", str(tmp_path / "cache"), "--run-name",
                name, "--quiet", *extra]  # fmt: skip
        assert main(argv) == 0
        lines = (tmp_path / "runs" / name / "task" / "run.trec").read_text().splitlines()
        return [line.split() for line in lines]

    dropped = run("dropped")
    assert all(row[0] != row[2] for row in dropped)
    assert sum(row[0] == "p1" for row in dropped) == len(corpus) - 1
    config = json.loads((tmp_path / "runs" / "dropped" / "config.json").read_text())
    dense = config["retriever"]["dense"]
    # the family's rule, recorded: bge's (R2MED's) drops the query's own document, as every
    # config.json recorded before families had rules
    assert (dense["family"], dense["ignore_identical_ids"], dense["trust_remote_code"]) == (
        "auto", True, False,
    )  # fmt: skip
    kept = run("kept", "--ignore-identical-ids", "false")
    assert {(row[0], row[2]) for row in kept} - {(row[0], row[2]) for row in dropped} == {
        ("p1", "p1"), ("p2", "p2"),
    }  # fmt: skip
    assert sum(row[0] == "p1" for row in kept) == len(corpus)


def test_a_remote_code_model_is_refused_before_anything_runs(tmp_path, capsys):
    from agents.commands.run import main

    code = main(["--agent", "hyde", "--dataset", "demo", "--model", "local/smollm2-135m",
                 "--retriever", "dense:nvidia/NV-Embed-v2",
                 "--runs-dir", str(tmp_path)])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and len(err) == 1 and "--trust-remote-code" in err[0]
    assert not list(tmp_path.iterdir())
