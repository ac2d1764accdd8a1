"""The synthetic demo task that ships in eval/demo: it loads cleanly and is neither trivial
nor hopeless for BM25."""

import re

import pytest

from eval.datasets import DEMO_DIR, DataError, load_folder, load_task, load_tasks
from eval.evaluate import evaluate_run
from retrievers.bm25 import build_bm25

# Query-style markers. Exam questions list options A. to E.; clinical cases open with the
# patient's age ("A 45-year-old man ...", "An 18-month-old infant ..."); posts do neither.
EXAM = re.compile(r"\bA\. .+\bB\. .+\bC\. .+\bD\. .+\bE\. \S")
CASE = re.compile(r"^An? \d+-(year|month)-old\b")


def style(text: str) -> str:
    if EXAM.search(text):
        return "exam"
    if CASE.match(text):
        return "case"
    return "post"


@pytest.fixture(scope="module")
def task():
    return load_folder(DEMO_DIR, name="demo")


def test_demo_files_ship_with_the_package():
    for name in ("corpus.jsonl", "query.jsonl", "qrels.jsonl", "README.md"):
        assert (DEMO_DIR / name).is_file(), name


@pytest.mark.parametrize("spec", ["demo", "DEMO", " Demo "])
def test_load_task_by_name_matches_load_folder(tmp_path, task, spec):
    loaded = load_task(spec, tmp_path)
    assert loaded.name == "demo"
    assert loaded.path == DEMO_DIR
    assert (loaded.corpus, loaded.queries, loaded.qrels) == (task.corpus, task.queries, task.qrels)
    assert loaded.notes == []
    assert [t.name for t in load_tasks(spec, tmp_path)] == ["demo"]
    assert not any(tmp_path.iterdir())  # nothing downloaded or cached


def test_unknown_name_lists_demo(tmp_path):
    with pytest.raises(DataError, match="'demo'"):
        load_task("no-such-task", tmp_path)


def test_demo_is_clean(task):
    # No duplicates, empty texts, dangling qrels or unjudged queries: any of them is a note.
    assert task.notes == []
    assert 12 <= len(task.queries) <= 20
    assert len(task.corpus) >= 300
    assert all(text.strip() for text in task.corpus.values())
    assert all(text.strip() for text in task.queries.values())
    assert set(task.qrels) == set(task.queries)
    for qid, docs in task.qrels.items():
        assert set(docs) <= set(task.corpus), qid
        assert set(docs.values()) <= {1, 2}, qid
        assert 2 <= len(docs) <= 4, qid
        assert 2 in docs.values(), f"{qid} has no grade-2 document"


def test_doc_ids_do_not_reveal_relevance(task):
    # Relevant docs are spread over the corpus, not grouped by query.
    order = {doc_id: i for i, doc_id in enumerate(task.corpus)}
    for qid, docs in task.qrels.items():
        positions = sorted(order[d] for d in docs)
        assert positions[-1] - positions[0] > len(docs), qid


def test_all_query_styles_are_present(task):
    styles = {qid: style(text) for qid, text in task.queries.items()}
    counts = {s: list(styles.values()).count(s) for s in ("post", "exam", "case")}
    assert all(n >= 2 for n in counts.values()), counts
    for qid, text in task.queries.items():
        if styles[qid] == "post":
            assert "?" in text, qid
    # Some clinical cases are answered by similar cases (PMC-Clinical / IIYi-Clinical style),
    # others by reference passages (PMC-Treatment style).
    cases = [qid for qid, s in styles.items() if s == "case"]
    similar = [
        qid
        for qid in cases
        if all(CASE.match(task.corpus[d]) for d, g in task.qrels[qid].items() if g == 2)
    ]
    assert len(similar) >= 2, similar
    assert len(similar) < len(cases)


def test_bm25_is_neither_trivial_nor_hopeless(task):
    index = build_bm25(task.corpus, progress=False)
    run = index.search_many(task.queries, progress=False)
    ndcg = evaluate_run(task.qrels, run).mean["NDCG@10"]
    assert 0.15 < ndcg < 0.85, ndcg
