"""The reasoning embedders that lead R2MED, encoded as the ReasonEmbed authors' evaluation does.

VectorSpaceLab/agentic-search at b2f2e40, ReasonEmbed/evaluation_r2med ("the authors' code"):
code/runner.py builds every model but ReasonIR with FlagEmbedding's
``FlagAutoModel.from_finetuned`` (L46-63) and model class ``decoder-only-base``, which is
FlagEmbedding 1.3.5's ``BaseLLMEmbedder`` (inference/embedder/decoder_only/base.py), and
ReasonIR-8B with their own ``ReasonIREncoder`` (L35-45; code/reasonir_models.py). Every test
builds a tiny model in the family's hub layout (tests/tiny_models.py) and compares our index's
vectors and top-10 lists with what the authors' classes compute: FlagEmbedding's own module,
loaded as it is on disk (its package ``__init__`` imports the training stack, ``datasets``
among it, so the parent packages are stood in for and only the embedder's modules run), and
sentence-transformers called exactly as ``ReasonIREncoder`` calls it.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from retrievers.dense import build_dense
from retrievers.families import AUTO, families, family_for, family_instructions, family_names
from tests import flag_reference, tiny_models
from tests.synthetic import generate

# code/prompts.py L1-10: R2MEDInstructions, which runner.py L139-142 sets per task
# (--use_special_instructions True in every script, L10)
PROMPTS = {
    "Biology": "Given a Biology post, retrieve relevant passages that help answer the post.",
    "Medical-Sciences": "Given a Medical Science post, retrieve relevant passages that help "
    "answer the post.",
    "Bioinformatics": "Given a Bioinformatics post, retrieve relevant passages that help answer "
    "the post.",
    "MedXpertQA-Exam": "Given a Medical Exam, retrieve relevant passages that help answer the "
    "exam.",
    "MedQA-Diag": "Given a Medical Exam, retrieve relevant passages that help answer the exam.",
    "PMC-Treatment": "Given a Clinical Case, retrieve relevant passages that help answer the case.",
    "PMC-Clinical": "Given a Clinical Case, retrieve similar cases that help diagnose the case.",
    "IIYi-Clinical": "Given a Clinical Case, retrieve similar cases that help diagnose the case.",
}
TASK = "Biology"
SYNTHETIC = generate(n_queries=6, n_docs=60, n_topics=6)
# the synthetic corpus, one document longer than 512 tokens (truncation), texts as the
# authors' searcher passes them (FlagEmbedding abc/evaluation/searcher.py L109-114)
CORPUS = SYNTHETIC.texts() | {"long": " ".join(tiny_models.TEXTS * 12)}
QUERIES = list(SYNTHETIC.queries.values())


# --- FlagEmbedding's own BaseLLMEmbedder ----------------------------------------------------------


@pytest.fixture(scope="module")
def base_llm_embedder() -> type:
    cls = flag_reference.base_llm_embedder_class()
    if cls is None:
        pytest.skip(f"FlagEmbedding: {flag_reference.FLAG_INSTALL}")
    return cls


def flag_embedder(cls: type, folder: Path, remote_code: bool = False):
    return flag_reference.flag_embedder(cls, folder, PROMPTS[TASK], remote_code)


def as_transformers_4(tokenizer) -> None:
    """The tokenizer as transformers 4.x built it for the authors: LlamaTokenizerFast's
    update_post_processor turned tokenizer_config.json's add_bos_token/add_eos_token into the
    template "<s> $A </s>"; transformers 5 reads only tokenizer.json's ("<s> $A")."""
    from tokenizers import processors

    bos, eos = tokenizer.bos_token, tokenizer.eos_token
    tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos}:0 $A:0 {eos}:0",
        pair=f"{bos}:0 $A:0 {eos}:0 {bos}:1 $B:1 {eos}:1",
        special_tokens=[(bos, tokenizer.bos_token_id), (eos, tokenizer.eos_token_id)],
    )


# --- comparing ------------------------------------------------------------------------------


def ours(folder: Path, **options):
    return build_dense(
        CORPUS, str(folder), TASK, cache_dir=None, progress=False, device="cpu", **options
    )


def assert_same(index, docs: np.ndarray, queries: np.ndarray, atol: float = 1e-5) -> None:
    """Our vectors equal the reference's, and so do the top-10 lists: the same documents in
    the same order, except where the reference's own scores tie within float noise (then
    the same scores)."""
    np.testing.assert_allclose(index.doc_embeddings, docs, atol=atol)
    got = index.encode_queries(QUERIES)
    np.testing.assert_allclose(got, queries, atol=atol)
    ids = list(CORPUS)
    for row, vector in zip(queries @ docs.T, got, strict=True):
        ranked = [ids.index(d) for d in index.search_vectors(vector[None], 10)[0]]
        expected = list(np.argsort(-row, kind="stable")[:10])
        if ranked != expected:
            assert row[ranked] == pytest.approx(row[expected], abs=4 * atol)


# --- the table ------------------------------------------------------------------------------

README_RADER = "Raderspace/RaDeR-gte-Qwen2-7B"  # scripts/README.md L3's text, not a hub name
# Each model as its authors spell it, and its family.
AUTHORS_NAMES = {
    # scripts/ours/eval_reason_embed_*.sh L6 (model_path)
    "hanhainebula/reason-embed-qwen3-8b-0928": "reasonembed",
    "hanhainebula/reason-embed-qwen3-4b-0928": "reasonembed",
    "hanhainebula/reason-embed-llama-3.1-8b-0928": "reasonembed",
    "hanhainebula/reason-embed-basic-qwen3-8b-0928": "reasonembed",
    "hanhainebula/reason-embed-basic-qwen3-4b-0928": "reasonembed",
    "hanhainebula/reason-embed-basic-llama-3.1-8b-0928": "reasonembed",
    # scripts/baselines/*.sh L6
    "AQ-MedAI/Diver-Retriever-4B": "diver-retriever",
    "Qwen/Qwen3-Embedding-4B": "qwen3-embedding",
    "Qwen/Qwen3-Embedding-8B": "qwen3-embedding",
    "Raderspace/RaDeR_gte_Qwen2-7B_MATH_LLMq_CoT_lexical": "rader",
    "reasonir/ReasonIR-8B": "reasonir",
    # eval_e5_mistral_7b_instruct.sh L6: R2MED runs it too, and its name keeps R2MED's family
    "intfloat/e5-mistral-7b-instruct": "e5-mistral",
    # DIVER's other checkpoints, gte-Qwen2, and RaDeR as scripts/README.md L3 spells it
    "AQ-MedAI/Diver-Retriever-0.6B": "diver-retriever",
    "AQ-MedAI/Diver-Retriever-1.7B": "diver-retriever",
    "AQ-MedAI/Diver-Retriever-4B-1020": "diver-retriever",
    "Alibaba-NLP/gte-Qwen2-7B-instruct": "gte-qwen2-instruct",
    README_RADER: "rader",
    # what stays where it was
    "intfloat/multilingual-e5-large-instruct": "e5-instruct",
    "nvidia/NV-Embed-v2": "nv-embed",
}


def test_every_model_as_its_authors_spell_it_gets_its_family():
    for model, name in AUTHORS_NAMES.items():
        assert family_for(model).name == name, model
    # a folder whose name says nothing takes the family --dense-family names
    assert family_for("/models/checkpoint-500").name == "plain"
    for name in ("reasonembed", "e5-mistral-reasonembed", "reasonir", "qwen3-embedding"):
        assert family_for("/models/checkpoint-500", name).name == name
    # the authors' setup of e5-mistral is reached by name only
    assert family_for("intfloat/e5-mistral-7b-instruct", "e5-mistral-reasonembed").setup == (
        "reasonembed"
    )
    assert "e5-mistral-reasonembed" in family_names()
    # ReasonEmbed's annotator (README.md L55) is a generative model, not one of the embedders
    assert family_for("hanhainebula/reason-embed-annotator-qwen3-8b-0928").name == "plain"
    for model, name in AUTHORS_NAMES.items():
        family = family_for(model)
        if family.setup == "reasonembed":
            # runner.py L35: ReasonIR-8B by its own encoder, the rest by FlagEmbedding's at
            # the scripts' 512 tokens; ReasonIR at its own (test_reasonir_encodes_as_...)
            own = name == "reasonir"
            expected = ("reasonir", None) if own else ("flag-decoder", 512)
            assert (family.loader, family.max_length) == expected
            assert family.normalize
            # searcher.py L101-157 filters identical ids only when asked; nothing asks
            assert family.ignore_identical_ids is False
    # the scripts' --trust_remote_code True: RaDeR's (L23) and ReasonIR's (L23); gte-Qwen2 as
    # FlagEmbedding's own mapping loads it (model_mapping.py L153-155)
    remote = {f.name for f in families() if f.setup == "reasonembed" and f.remote_code}
    assert remote == {"rader", "gte-qwen2-instruct", "reasonir"}


def test_the_instructions_are_the_authors_per_task_ones():
    """prompts.py L1-10 in 'Instruct: {}\\nQuery: {}' (AbsEmbedder.py L144-157: the format's
    first {} the instruction, the second the query) or ReasonIR's prompts
    (reasonir_models.py L52, L65); documents bare (AbsEmbedder.py L213-226: no passage
    instruction); an expansion encoded as a document is."""
    for task, text in PROMPTS.items():
        flag = family_instructions(family_for("Qwen/Qwen3-Embedding-8B"), task)
        query = "Why does aspirin stop platelets?"
        assert flag.query + query == flag_reference.FORMAT.replace("\\n", "\n").format(text, query)
        assert flag.doc == flag.expansion == ""
        reasonir = family_instructions(family_for("reasonir/ReasonIR-8B"), task)
        assert reasonir.query == f"<|user|>\n{text}\n<|embed|>\n"
        assert reasonir.doc == reasonir.expansion == "<|embed|>\n"
    # outside R2MED: R2MED's generic instruction with the authors' final period
    other = family_instructions(family_for("reason-embed-qwen3-8b-0928"), "scifact").query
    generic = "Given a question, retrieve relevant documents that answer the question."
    assert other == f"Instruct: {generic}\nQuery: "


def test_the_authors_dtype_batch_and_computed_weight_memory():
    """The scripts' --embedder_batch_size (256; ReasonIR's 8, eval_reasonir_8b.sh L25), the
    dtype (FlagEmbedding's use_fp16 default, arguments.py L98-100; ReasonIR's torch_dtype
    "auto", runner.py L44), and the GPU memory of the weights, computed: the parameter count
    the model's name publishes times the bytes per parameter."""
    import re

    seen = set()
    for family in families():
        if family.setup != "reasonembed":
            assert family.authors_run is None
            continue
        run = family.authors_run
        assert run is not None and run.bytes_per_param == 2
        expected = ("auto", 8) if family.name == "reasonir" else ("fp16", 256)
        assert (run.dtype, run.batch_size) == expected
        assert family.dtype == run.dtype
        # fp16 on a GPU, fp32 on the CPU, as FlagEmbedding runs (decoder_only/base.py L214)
        on_cpu = "auto" if family.name == "reasonir" else "fp32"
        assert (family.dtype_on("cuda"), family.dtype_on("cpu")) == (run.dtype, on_cpu)
        for weights in run.weights:
            size = re.findall(r"(\d+(?:\.\d+)?)b(?![a-z0-9])", weights.model.lower())[-1]
            assert weights.params_b == float(size), weights.model
            assert weights.gpu_gb == pytest.approx(weights.params_b * run.bytes_per_param)
            detected = family_for(weights.model).name
            if family.name != "e5-mistral-reasonembed":  # by name only
                assert detected == family.name, weights.model
            seen.add(weights.model)
    named = {m for m in AUTHORS_NAMES if family_for(m).setup == "reasonembed"} - {README_RADER}
    assert named <= seen


# --- FlagEmbedding's decoder-only families --------------------------------------------------------

# case: (builder, the folder's name as the hub spells the model, --dense-family, remote code)
CASES = {
    "qwen3-embedding": (tiny_models.qwen3, "Qwen3-Embedding-8B", AUTO, False),
    # a base Qwen3's tokenizer appends no EOS; FlagEmbedding's fine-tuning (finetune/embedder/
    # decoder_only/base/runner.py L42-48) leaves add_eos_token in tokenizer_config.json, which
    # Qwen's tokenizer classes ignore (4.x as 5.x): nothing is appended
    "reasonembed-qwen3": (
        lambda p: tiny_models.qwen3(p, eos_template=False, seed=1, add_eos_token=True),
        "reason-embed-basic-qwen3-4b-0928",
        AUTO,
        False,
    ),
    "reasonembed-llama": (tiny_models.llama3, "reason-embed-llama-3.1-8b-0928", AUTO, False),
    "diver": (lambda p: tiny_models.qwen3(p, seed=2), "Diver-Retriever-4B-1020", AUTO, False),
    "gte-qwen2": (tiny_models.qwen2, "gte-Qwen2-7B-instruct", AUTO, True),
    "rader": (
        lambda p: tiny_models.qwen2(p, seed=3),
        "RaDeR_gte_Qwen2-7B_MATH_LLMq_CoT_lexical",
        AUTO,
        True,
    ),
    # e5-mistral's tokenizer asks for </s> (add_eos_token), which transformers 4 appended
    "e5-mistral-reasonembed": (
        lambda p: tiny_models.mistral(p, seed=4),
        "e5-mistral-7b-instruct",
        "e5-mistral-reasonembed",
        False,
    ),
}


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("reasoning")
    built = {case: build(root / case / name) for case, (build, name, *_) in CASES.items()}
    built["reasonir"] = tiny_models.reasonir(root / "reasonir" / "ReasonIR-8B", max_seq_length=64)
    return built


@pytest.mark.parametrize("case", list(CASES))
def test_each_family_encodes_as_flagembeddings_base_llm_embedder(case, models, base_llm_embedder):
    """Our vectors are FlagEmbedding's (BaseLLMEmbedder.encode_queries / encode_corpus, the
    query behind the task's instruction, documents bare) to float tolerance, and the top-10
    lists agree, on the synthetic corpus."""
    _, name, family, remote_code = CASES[case]
    folder = models[case]
    assert family_for(str(folder), family).setup == "reasonembed"
    if remote_code:  # RaDeR's script: --trust_remote_code True (eval_rader_gte_qwen2_7b.sh L23)
        with pytest.raises(ValueError, match="--trust-remote-code") as refused:
            ours(folder, family=family)
        assert "\n" not in str(refused.value)
    reference = flag_embedder(base_llm_embedder, folder, remote_code)
    if case == "e5-mistral-reasonembed":
        plain = reference.encode_corpus(list(CORPUS.values()))
        as_transformers_4(reference.tokenizer)
    docs = reference.encode_corpus(list(CORPUS.values()))
    queries = reference.encode_queries(QUERIES)
    index = ours(folder, family=family, trust_remote_code=remote_code)
    assert "dtype=fp32" in index.encoder_id  # use_fp16 off on the CPU (base.py L214)
    assert "loader=flag-decoder" in index.encoder_id
    assert_same(index, docs, queries)

    # both padding sides are covered: each tokenizer's own, as FlagEmbedding pads (L268-273)
    tokenizer = reference.tokenizer
    right = case in ("gte-qwen2", "rader", "e5-mistral-reasonembed")
    assert tokenizer.padding_side == ("right" if right else "left")
    last = tokenizer(["aspirin"])["input_ids"][0][-1]
    if case in ("qwen3-embedding", "diver", "gte-qwen2", "rader"):
        assert last == tokenizer.convert_tokens_to_ids("<|endoftext|>")  # tokenizer.json's
    if case == "reasonembed-qwen3":
        assert last != tokenizer.convert_tokens_to_ids("<|endoftext|>")
    if case == "e5-mistral-reasonembed":
        assert last == tokenizer.eos_token_id  # the 4.x template, as the authors ran it
        # what FlagEmbedding computes on transformers 5 (no </s>) is not what they computed
        assert np.abs(plain - docs).max() > 1e-3


def test_the_gpu_dtype_is_fp16_and_an_explicit_dtype_wins(models):
    """FlagEmbedding halves the model unless on the CPU (base.py L214-215): fp16 is the
    family's dtype on a GPU; --dtype given explicitly is used as given."""
    family = family_for("Qwen/Qwen3-Embedding-8B")
    assert (family.dtype_on("cuda"), family.dtype_on("mps"), family.dtype_on("cpu")) == (
        "fp16", "fp16", "fp32",
    )  # fmt: skip
    index = ours(models["qwen3-embedding"], dtype="bf16")
    assert "dtype=bf16" in index.encoder_id


def test_a_tokenizer_without_a_pad_token_is_refused_in_one_line(models, tmp_path):
    folder = tmp_path / "reason-embed-llama-3.1-8b-0928"
    shutil.copytree(models["reasonembed-llama"], folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    del config["pad_token"]
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="no pad token") as refused:
        ours(folder)
    assert "\n" not in str(refused.value)


# --- identical ids --------------------------------------------------------------------------


def test_the_authors_families_keep_the_document_whose_id_is_the_querys(models, tmp_path):
    """FlagEmbedding's searcher drops a document whose id is the query's only when
    ignore_identical_ids is set (abc/evaluation/searcher.py L153), which defaults to false
    (arguments.py L60-62) and no script sets; R2MED's (BEIR's) drops it. A run follows the
    family's rule (config.json records it); --ignore-identical-ids true/false overrides it,
    and a config.json that recorded true (before the rule) still drops it."""
    from agents.commands.run import main
    from retrievers.config import RetrieverConfig
    from retrievers.settings import DenseConfig

    folder = tmp_path / "task"
    folder.mkdir()
    corpus = {**dict(list(SYNTHETIC.texts().items())[:20]), "p1": QUERIES[0], "p2": QUERIES[1]}
    with open(folder / "corpus.jsonl", "w") as f:
        f.writelines(json.dumps({"id": i, "text": t}) + "\n" for i, t in corpus.items())
    with open(folder / "query.jsonl", "w") as f:
        f.writelines(json.dumps({"id": f"p{n}", "text": QUERIES[n - 1]}) + "\n" for n in (1, 2))
    with open(folder / "qrels.jsonl", "w") as f:
        f.write(json.dumps({"q_id": "p1", "p_id": "p2", "score": 1}) + "\n")
        f.write(json.dumps({"q_id": "p2", "p_id": "p1", "score": 1}) + "\n")

    def run(name: str, *extra: str) -> set[tuple[str, str]]:
        argv = ["--agent", "none", "--dataset", str(folder), "--retriever",
                f"dense:{models['qwen3-embedding']}", "--device", "cpu", "--runs-dir",
                str(tmp_path / "runs"), "--cache-dir", str(tmp_path / "cache"), "--run-name",
                name, "--quiet", *extra]  # fmt: skip
        assert main(argv) == 0
        lines = (tmp_path / "runs" / name / "task" / "run.trec").read_text().splitlines()
        return {(row[0], row[2]) for row in (line.split() for line in lines)}

    kept = run("kept")
    assert {("p1", "p1"), ("p2", "p2")} <= kept
    config = json.loads((tmp_path / "runs" / "kept" / "config.json").read_text())
    assert config["retriever"]["dense"]["ignore_identical_ids"] is False  # the rule, recorded
    dropped = run("dropped", "--ignore-identical-ids", "true")
    assert kept - dropped == {("p1", "p1"), ("p2", "p2")}

    assert DenseConfig().ignore_identical_ids is None
    old = RetrieverConfig.from_dict({"spec": "dense", "dense": {"ignore_identical_ids": True}})
    assert old.dense.ignore_identical_ids is True
    for model in ("BAAI/bge-large-en-v1.5", "text-embedding-3-large", "all-MiniLM-L6-v2"):
        assert family_for(model).drops_identical_ids() is True  # as before the rule
    reasonembed = family_for("hanhainebula/reason-embed-qwen3-8b-0928")
    assert reasonembed.drops_identical_ids() is False
    assert reasonembed.drops_identical_ids(True) is True


def test_a_run_records_the_rule_its_members_families_agree_on():
    """config.json records one bool where the members agree (true for a spec with no dense or
    api member, as every config.json did before families had rules) and null where they
    differ, each member then following its own family."""
    from agents.config.run_config import RunConfig
    from retrievers.config import RetrieverConfig

    def recorded(spec: str, **dense) -> bool | None:
        retriever = RetrieverConfig.from_dict({"spec": spec, "dense": dense})
        return RunConfig(agent="none", retriever=retriever).retriever.dense.ignore_identical_ids

    reasonembed = "dense:hanhainebula/reason-embed-qwen3-8b-0928"
    assert recorded("bm25") is True
    assert recorded("dense:BAAI/bge-large-en-v1.5+api:text-embedding-3-large") is True
    assert recorded(reasonembed + "+bm25") is False
    assert recorded(reasonembed + "+dense:BAAI/bge-large-en-v1.5") is None
    assert recorded(reasonembed, ignore_identical_ids=True) is True
    assert recorded("dense:/models/my-folder", family="qwen3-embedding") is False


# --- ReasonIR ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def reasonir_encoder(models):
    """The authors' ReasonIREncoder's model as it encodes (code/reasonir_models.py):
    SentenceTransformer(model, trust_remote_code=True, model_kwargs={"torch_dtype": "auto"})
    (L31; runner.py L36-45, the script's --trust_remote_code True), wrapped in MultiGPUModel,
    which starts sentence-transformers' multi-process pool at once (L7-10; here one CPU
    worker, where they had their GPUs). Yields the model and its pool."""
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(models["reasonir"]), trust_remote_code=True, device="cpu",
                                model_kwargs={"torch_dtype": "auto"})  # fmt: skip
    pool = model.start_multi_process_pool(["cpu"])
    yield model, pool
    model.stop_multi_process_pool(pool)


def encode_as_reasonir_encoder(reasonir_encoder, texts: list[str], prompt: str) -> np.ndarray:
    """ReasonIREncoder.encode_corpus / encode_queries (L42-69): max_seq_length 512 set on the
    model (L49, L62), after the pool's workers got their copy, then MultiGPUModel.encode
    (L12-13): encode_multi_process(texts, pool, prompt=, batch_size=8 (eval_reasonir_8b.sh
    L25), normalize_embeddings=True)."""
    import warnings

    model, pool = reasonir_encoder
    model.max_seq_length = 512
    with warnings.catch_warnings():  # deprecated in sentence-transformers 6; their call
        warnings.simplefilter("ignore", DeprecationWarning)
        return model.encode_multi_process(
            texts, pool, prompt=prompt, batch_size=8, normalize_embeddings=True
        )


def test_reasonir_encodes_as_the_authors_reasonir_encoder(models, reasonir_encoder):
    """The vectors the authors' code computes: the prompts (L52, L65), normalised, at the
    checkpoint's own max_seq_length (this folder's: 64 tokens), since the 512 set after the
    pool started never reaches its workers."""
    folder = models["reasonir"]
    docs = encode_as_reasonir_encoder(reasonir_encoder, list(CORPUS.values()), "<|embed|>\n")
    prompt = f"<|user|>\n{PROMPTS[TASK]}\n<|embed|>\n"
    queries = encode_as_reasonir_encoder(reasonir_encoder, QUERIES, prompt)
    index = ours(folder, trust_remote_code=True)
    assert "loader=reasonir" in index.encoder_id and "dtype=auto" in index.encoder_id
    assert "max_length=model" in index.encoder_id
    assert_same(index, docs, queries)
    # what 512 tokens would have given: not what ran (the long document is cut at 64 above)
    model, _ = reasonir_encoder
    model.max_seq_length = 512
    at_512 = model.encode(list(CORPUS.values()), prompt="<|embed|>\n", normalize_embeddings=True)
    assert np.abs(at_512 - docs).max() > 1e-3
    # --max-length 512 gives it
    np.testing.assert_allclose(ours(folder, trust_remote_code=True, max_length=512)
                               .doc_embeddings, at_512, atol=1e-5)  # fmt: skip
    from retrievers import encoders

    # the class the folder's own code defines, not transformers' LlamaModel
    loaded, own_length = encoders._reasonir_model(str(folder), "auto", "cpu")
    assert type(loaded[0].auto_model).__name__ == "TinyReasonIRModel" and own_length == 64


def test_reasonir_strips_each_text_as_the_authors_sentence_transformers_did(
    models, reasonir_encoder
):
    """Sentence-transformers before 6 (the authors' stack: transformers 4.x) stripped every
    prompt + text before tokenizing (its Transformer.tokenize); 6 strips nothing. Our vector
    of a document ending in white space is that of the stripped text."""
    folder = models["reasonir"]
    text = "Penicillin blocks bacterial cell wall synthesis. \n"
    corpus = {"d0": text, "d1": tiny_models.TEXTS[0]}
    index = build_dense(corpus, str(folder), TASK, cache_dir=None, progress=False,
                        device="cpu", trust_remote_code=True)  # fmt: skip
    stripped, as_six = encode_as_reasonir_encoder(
        reasonir_encoder, [text.strip(), text], "<|embed|>\n"
    )
    np.testing.assert_allclose(index.doc_embeddings[0], stripped, atol=1e-5)
    assert np.abs(as_six - stripped).max() > 1e-4


def test_reasonir_needs_its_own_code_and_the_users_leave(models, tmp_path, capsys):
    """ReasonIR runs its repository's own code (the script's --trust_remote_code True, L23):
    refused in one line without --trust-remote-code, before any work; a folder whose
    config.json names no code of its own is refused before any work too."""
    from agents.commands.run import main
    from retrievers.config import RetrieverConfig
    from retrievers.model_source import ModelSourceError
    from retrievers.search import check_models
    from retrievers.settings import DenseConfig

    folder = models["reasonir"]
    with pytest.raises(ValueError, match="--trust-remote-code") as refused:
        ours(folder)
    assert "\n" not in str(refused.value)
    with pytest.raises(ValueError, match="reasonir models run code from their own repository"):
        RetrieverConfig(spec=f"dense:{folder}")
    code = main(["--agent", "none", "--dataset", "demo", "--retriever",
                 "dense:reasonir/ReasonIR-8B", "--runs-dir", str(tmp_path / "runs")])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and len(err) == 1 and "--trust-remote-code" in err[0]
    assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").iterdir())

    plain = tmp_path / "ReasonIR-8B"
    shutil.copytree(folder, plain)
    config = json.loads((plain / "config.json").read_text())
    del config["auto_map"]
    (plain / "config.json").write_text(json.dumps(config))
    allowed = RetrieverConfig(spec=f"dense:{plain}", dense=DenseConfig(trust_remote_code=True))
    with pytest.raises(ModelSourceError, match="auto_map"):
        check_models(allowed)
    check_models(RetrieverConfig(spec=f"dense:{folder}", dense=DenseConfig(trust_remote_code=True)))
