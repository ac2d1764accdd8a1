import hashlib
import json
import logging
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import huggingface_hub.constants
import pytest

from eval.datasets import (
    GRADE_MAX,
    GRADE_MIN,
    R2MED_FILES,
    R2MED_REVISIONS,
    R2MED_TASKS,
    DataError,
    Task,
    fetch_r2med,
    load_folder,
    load_task,
    load_tasks,
    task_fingerprint,
)
from eval.plumbing.fingerprint import corpus_fingerprint
from tests.synthetic import SEED as SYNTHETIC_SEED
from tests.synthetic import generate, write_task

REPO = Path(__file__).resolve().parents[2]

# --- helpers -----------------------------------------------------------------------------------


def write_lines(path: Path, rows: list) -> Path:
    """Write rows (dicts become JSON, str/bytes are written as-is) one per line."""
    path.parent.mkdir(parents=True, exist_ok=True)
    out = b""
    for row in rows:
        if isinstance(row, dict):
            row = json.dumps(row)
        out += (row if isinstance(row, bytes) else row.encode()) + b"\n"
    path.write_bytes(out)
    return path


def make_r2med(folder: Path, corpus=None, queries=None, qrels=None) -> Path:
    write_lines(
        folder / "corpus.jsonl",
        corpus
        if corpus is not None
        else [{"id": "d1", "text": "aspirin and bleeding"}, {"id": "d2", "text": "statins"}],
    )
    write_lines(
        folder / "query.jsonl",
        queries
        if queries is not None
        else [{"id": "q1", "text": "why do I bleed?", "answer": "aspirin", "body_system": "blood"}],
    )
    if qrels is not False:
        write_lines(
            folder / "qrels.jsonl",
            qrels if qrels is not None else [{"q_id": "q1", "p_id": "d1", "score": 1}],
        )
    return folder


def make_beir(folder: Path, corpus=None, queries=None, qrels_rows=None) -> Path:
    write_lines(
        folder / "corpus.jsonl",
        corpus
        if corpus is not None
        else [
            {"_id": "d1", "title": "Aspirin", "text": "causes bleeding. "},
            {"_id": "d2", "title": "", "text": " statins"},
            {"_id": "d3", "text": "no title at all"},
        ],
    )
    write_lines(
        folder / "queries.jsonl",
        queries if queries is not None else [{"_id": "q1", "text": "bleeding"}],
    )
    write_lines(
        folder / "qrels" / "test.tsv",
        ["query-id\tcorpus-id\tscore"] + (qrels_rows if qrels_rows is not None else ["q1\td1\t1"]),
    )
    return folder


def error_of(path: Path) -> str:
    with pytest.raises(DataError) as info:
        load_folder(path)
    message = str(info.value)
    assert "\n" not in message, "DataError messages must be one line"
    return message


# --- real data ---------------------------------------------------------------------------------


@pytest.mark.scifact
@pytest.mark.slow
def test_scifact_loads_complete(scifact_dir: Path) -> None:
    task = load_folder(scifact_dir)

    assert task.name == "scifact"
    assert len(task.corpus) == 5183
    assert len(task.queries) == 300
    assert sum(len(docs) for docs in task.qrels.values()) == 339
    assert task.notes == []
    # BEIR: title + " " + text
    assert task.corpus["4983"].startswith(
        "Microstructural development of human newborn cerebral white matter"
    )
    assert "imaging. Alterations of the architecture" in task.corpus["4983"]


# --- the synthetic task (tests/synthetic.py) ---------------------------------------------------


def test_synthetic_task_loads_complete_in_both_layouts(synthetic_dir: Path, tmp_path: Path) -> None:
    made = generate()
    task = load_folder(synthetic_dir)
    assert task.name == "synthetic" and task.notes == []
    assert (len(task.corpus), len(task.queries), len(task.qrels)) == (3000, 300, 300)
    assert task.corpus == made.texts()  # BEIR: title + " " + text, untitled ones just text
    assert task.queries == made.queries and task.qrels == made.qrels
    untitled = next(d for d, (title, _) in made.corpus.items() if not title)
    assert task.corpus[untitled] == made.corpus[untitled][1]
    r2med = load_folder(write_task(tmp_path / "synthetic", made, layout="r2med"))
    assert r2med.notes == []
    assert task_fingerprint(r2med) == task_fingerprint(task)  # the same task, in corpus order


def test_synthetic_task_is_the_same_on_every_machine(synthetic_dir: Path, tmp_path: Path) -> None:
    again = write_task(tmp_path / "again")
    for name in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv"):
        assert (again / name).read_bytes() == (synthetic_dir / name).read_bytes(), name
    # another interpreter with another hash seed: no set or hash order leaks into the data
    code = (
        "import hashlib, json; from tests.synthetic import generate; t = generate(); "
        "print(hashlib.sha256(json.dumps([t.corpus, t.queries, t.qrels]).encode()).hexdigest())"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True,
                          text=True, check=True)  # fmt: skip
    made = generate()
    here = hashlib.sha256(json.dumps([made.corpus, made.queries, made.qrels]).encode())
    assert done.stdout.strip() == here.hexdigest()
    other = generate(seed=SYNTHETIC_SEED + 1)
    assert other.queries != made.queries and other.corpus != made.corpus


def test_synthetic_task_has_what_the_tests_rely_on(synthetic_dir: Path) -> None:
    """Graded qrels, several relevant documents for many queries, duplicates (exact ties), a
    Zipfian vocabulary, and BM25 right only some of the time."""
    from eval.evaluate import evaluate_run
    from retrievers.bm25 import analyze_many, build_bm25

    task = load_folder(synthetic_dir)
    grades = [g for docs in task.qrels.values() for g in docs.values()]
    assert sorted(set(grades)) == [1, 2] and grades.count(1) > 50 and grades.count(2) > 200
    several = sum(len(docs) > 1 for docs in task.qrels.values())
    assert 80 < several < 250
    assert len(set(task.corpus.values())) < len(task.corpus) - 30  # exact duplicates
    counts = Counter(tok for toks in analyze_many(list(task.corpus.values())) for tok in toks)
    ranked = [n for _, n in counts.most_common()]
    assert len(ranked) > 2000 and ranked[0] > 4 * ranked[100] > 16 * ranked[1000]  # Zipf-like
    assert sum(n == 1 for n in ranked) > 100  # a long tail of words seen once

    index = build_bm25(task.corpus, method="bm25q", progress=False)
    run = index.search_many(task.queries, k=100, progress=False)
    ndcg = evaluate_run(task.qrels, run, k_values=(10,)).per_query
    mean = sum(v["NDCG@10"] for v in ndcg.values()) / len(ndcg)
    assert 0.3 < mean < 0.7
    assert sum(v["NDCG@10"] == 1 for v in ndcg.values()) > 30  # some queries solved ...
    assert sum(v["NDCG@10"] == 0 for v in ndcg.values()) > 30  # ... and some missed entirely
    tied = sum(len(set(list(docs.values())[:10])) < min(10, len(docs)) for docs in run.values())
    assert tied > 50  # top-10s that hold tied scores


# --- layouts -----------------------------------------------------------------------------------


def test_r2med_layout(tmp_path: Path) -> None:
    task = load_folder(make_r2med(tmp_path / "Biology"))
    assert isinstance(task, Task)
    assert task.name == "Biology"
    assert task.path == tmp_path / "Biology"
    assert task.corpus == {"d1": "aspirin and bleeding", "d2": "statins"}
    assert task.queries == {"q1": "why do I bleed?"}  # extra fields ignored
    assert task.qrels == {"q1": {"d1": 1}}
    assert task.notes == []


def test_name_override(tmp_path: Path) -> None:
    assert load_folder(make_r2med(tmp_path / "x"), name="Custom").name == "Custom"


def test_integer_ids_become_strings(tmp_path: Path) -> None:
    folder = make_r2med(
        tmp_path,
        corpus=[{"id": 7, "text": "a"}, {"id": "8", "text": "b"}],
        queries=[{"id": 1, "text": "q"}],
        qrels=[{"q_id": 1, "p_id": 7, "score": 2}, {"q_id": "1", "p_id": "8", "score": 1}],
    )
    task = load_folder(folder)
    assert list(task.corpus) == ["7", "8"]
    assert list(task.queries) == ["1"]
    assert task.qrels == {"1": {"7": 2, "8": 1}}


@pytest.mark.parametrize(
    "bad_id, shown", [(1.5, "float"), (True, "bool"), (None, "null"), ("", "")]
)
def test_bad_ids_rejected(tmp_path: Path, bad_id, shown: str) -> None:
    folder = make_r2med(tmp_path, corpus=[{"id": "d0", "text": "x"}, {"id": bad_id, "text": "y"}])
    message = error_of(folder)
    assert "corpus.jsonl line 2: field 'id'" in message
    assert shown in message


def test_trec_qrels_txt_when_no_jsonl(tmp_path: Path) -> None:
    folder = make_r2med(tmp_path, qrels=False)
    (folder / "qrels.txt").write_text("q1 0 d1 1\nq1\t0\td2\t0\n")
    task = load_folder(folder)
    assert task.qrels == {"q1": {"d1": 1, "d2": 0}}


def test_qrels_jsonl_preferred_over_txt(tmp_path: Path) -> None:
    folder = make_r2med(tmp_path)
    (folder / "qrels.txt").write_text("q1 0 d2 3\n")
    assert load_folder(folder).qrels == {"q1": {"d1": 1}}


def test_trec_qrels_bad_rows(tmp_path: Path) -> None:
    folder = make_r2med(tmp_path, qrels=False)
    (folder / "qrels.txt").write_text("q1 0 d1 1\nq1 d2 1\n")
    assert "qrels.txt line 2: expected 4 columns" in error_of(folder)
    (folder / "qrels.txt").write_text("q1 0 d1 high\n")
    assert "qrels.txt line 1: field 'grade': expected an integer grade, got 'high'" in error_of(
        folder
    )


def test_beir_layout_titles(tmp_path: Path) -> None:
    task = load_folder(make_beir(tmp_path / "mini"))
    assert task.corpus == {
        "d1": "Aspirin causes bleeding.",
        "d2": "statins",
        "d3": "no title at all",
    }
    assert task.qrels == {"q1": {"d1": 1}}


def test_beir_null_title_is_no_title(tmp_path: Path) -> None:
    folder = make_beir(tmp_path, corpus=[{"_id": "d1", "title": None, "text": "body"}])
    assert load_folder(folder).corpus == {"d1": "body"}


def test_beir_bad_title_type(tmp_path: Path) -> None:
    folder = make_beir(tmp_path, corpus=[{"_id": "d1", "title": 5, "text": "body"}])
    assert "corpus.jsonl line 1: field 'title': expected a string, got int" in error_of(folder)


def test_beir_tsv_errors(tmp_path: Path) -> None:
    folder = make_beir(tmp_path, qrels_rows=["q1\td1\t1", "q1\td1"])
    assert "test.tsv line 3: expected 3 tab-separated columns" in error_of(folder)
    folder = make_beir(tmp_path, qrels_rows=["q1\td1\t1", "q1\td3\tyes"])
    assert "test.tsv line 3: field 'score': expected an integer grade, got 'yes'" in error_of(
        folder
    )


def test_beir_keeps_queries_without_qrels(tmp_path: Path) -> None:
    folder = make_beir(
        tmp_path,
        queries=[
            {"_id": "q1", "text": "a"},
            {"_id": "q2", "text": "b"},
            {"_id": "q3", "text": "c"},
        ],
    )
    task = load_folder(folder)
    assert set(task.queries) == {"q1", "q2", "q3"}
    assert any(note.startswith("2 of 3 queries have no qrels") for note in task.notes)


# --- validation --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, shown", [(3, "int"), (None, "null"), (["a"], "list"), ({"a": 1}, "object")]
)
def test_wrong_text_type(tmp_path: Path, value, shown: str) -> None:
    corpus = [{"id": "d1", "text": "ok"}, "", {"id": "d2", "text": value}]
    message = error_of(make_r2med(tmp_path, corpus=corpus))
    assert message.endswith(f"corpus.jsonl line 3: field 'text': expected a string, got {shown}")
    assert str(tmp_path) in message


def test_wrong_query_text_type(tmp_path: Path) -> None:
    message = error_of(make_r2med(tmp_path, queries=[{"id": "q1", "text": 12}]))
    assert "query.jsonl line 1: field 'text': expected a string, got int" in message


def test_malformed_json(tmp_path: Path) -> None:
    corpus = [{"id": "d1", "text": "ok"}, '{"id": "d2", "text": "unterminated']
    message = error_of(make_r2med(tmp_path, corpus=corpus))
    assert "corpus.jsonl line 2: malformed JSON" in message


def test_json_line_not_an_object(tmp_path: Path) -> None:
    message = error_of(make_r2med(tmp_path, queries=['["q1", "text"]']))
    assert "query.jsonl line 1: expected a JSON object, got list" in message


def test_missing_field(tmp_path: Path) -> None:
    message = error_of(make_r2med(tmp_path, qrels=[{"q_id": "q1", "doc": "d1", "score": 1}]))
    assert "qrels.jsonl line 1: missing field 'p_id'" in message


def test_blank_lines_skipped(tmp_path: Path) -> None:
    corpus = ["", {"id": "d1", "text": "a"}, "   ", "", {"id": "d2", "text": "b"}, ""]
    task = load_folder(make_r2med(tmp_path, corpus=corpus))
    assert list(task.corpus) == ["d1", "d2"]


def test_crlf_and_bom_tolerated(tmp_path: Path) -> None:
    folder = make_r2med(tmp_path)
    (folder / "corpus.jsonl").write_bytes(
        b'\xef\xbb\xbf{"id": "d1", "text": "a"}\r\n{"id": "d2", "text": "b"}\r\n'
    )
    assert load_folder(folder).corpus == {"d1": "a", "d2": "b"}


def test_non_utf8(tmp_path: Path) -> None:
    corpus = [{"id": "d1", "text": "ok"}, b'{"id": "d2", "text": "caf\xe9"}']
    message = error_of(make_r2med(tmp_path, corpus=corpus))
    assert "corpus.jsonl line 2: not valid UTF-8" in message


def test_duplicate_doc_ids_keep_last(tmp_path: Path) -> None:
    corpus = [
        {"id": "a", "text": "first a"},
        {"id": "b", "text": "first b"},
        {"id": "a", "text": "second a"},
        {"id": "c", "text": "c"},
        {"id": "b", "text": "second b"},
        {"id": "d1", "text": "d1"},
        {"id": "c", "text": "last c"},
        {"id": "a", "text": "third a"},
    ]
    task = load_folder(make_r2med(tmp_path, corpus=corpus))
    assert task.corpus == {"a": "third a", "b": "second b", "c": "last c", "d1": "d1"}
    assert (
        "corpus.jsonl: 3 duplicate doc ids (e.g. 'a', 'b', 'c'); "
        "kept the last occurrence of each, as R2MED does"
    ) in task.notes


def test_duplicate_query_ids_and_qrels_pairs(tmp_path: Path) -> None:
    folder = make_r2med(
        tmp_path,
        queries=[{"id": "q1", "text": "old"}, {"id": "q1", "text": "new"}],
        qrels=[{"q_id": "q1", "p_id": "d1", "score": 1}, {"q_id": "q1", "p_id": "d1", "score": 2}],
    )
    task = load_folder(folder)
    assert task.queries == {"q1": "new"}
    assert task.qrels == {"q1": {"d1": 2}}
    assert any(n.startswith("query.jsonl: 1 duplicate query ids") for n in task.notes)
    assert any(n.startswith("qrels.jsonl: 1 repeated (query, doc) pairs") for n in task.notes)


def test_qrels_unknown_queries_and_docs(tmp_path: Path) -> None:
    qrels = [
        {"q_id": "q1", "p_id": "d1", "score": 1},
        {"q_id": "q1", "p_id": "gone1", "score": 1},
        {"q_id": "q1", "p_id": "gone2", "score": 1},
        {"q_id": "ghost", "p_id": "d1", "score": 1},
        {"q_id": "ghost", "p_id": "d2", "score": 1},
    ]
    task = load_folder(make_r2med(tmp_path, qrels=qrels))
    # unknown queries cannot be run, so their qrels go; unknown docs still count as relevant
    assert task.qrels == {"q1": {"d1": 1, "gone1": 1, "gone2": 1}}
    notes = "\n".join(task.notes)
    assert (
        "qrels.jsonl: 2 judgements name 1 queries missing from the query file (e.g. 'ghost')"
        in notes
    )
    assert (
        "qrels.jsonl: 2 judgements name 2 docs missing from corpus.jsonl (e.g. 'gone1', 'gone2')"
        in notes
    )


@pytest.mark.parametrize("score, shown", [(1.5, "float"), ("high", "'high'"), (None, "null")])
def test_qrels_score_not_int(tmp_path: Path, score, shown: str) -> None:
    message = error_of(make_r2med(tmp_path, qrels=[{"q_id": "q1", "p_id": "d1", "score": score}]))
    assert f"qrels.jsonl line 1: field 'score': expected an integer grade, got {shown}" in message


def test_qrels_score_as_digit_string_accepted(tmp_path: Path) -> None:
    task = load_folder(make_r2med(tmp_path, qrels=[{"q_id": "q1", "p_id": "d1", "score": "2"}]))
    assert task.qrels == {"q1": {"d1": 2}}


def test_empty_texts_are_notes(tmp_path: Path) -> None:
    folder = make_r2med(
        tmp_path,
        corpus=[{"id": "d1", "text": "x"}, {"id": "d2", "text": ""}, {"id": "d3", "text": "  "}],
        queries=[{"id": "q1", "text": "x"}, {"id": "q2", "text": ""}],
    )
    task = load_folder(folder)
    assert "corpus.jsonl: 2 documents have empty text" in task.notes
    assert "1 queries have empty text (e.g. 'q2')" in task.notes


def test_empty_corpus_queries_qrels_are_errors(tmp_path: Path) -> None:
    assert "corpus.jsonl holds no documents" in error_of(make_r2med(tmp_path / "a", corpus=[""]))
    assert "holds no queries" in error_of(make_r2med(tmp_path / "b", queries=[]))
    assert "qrels.jsonl holds no relevance judgements" in error_of(
        make_r2med(tmp_path / "c", qrels=[])
    )


def test_missing_files_r2med(tmp_path: Path) -> None:
    folder = make_r2med(tmp_path, qrels=False)
    (folder / "corpus.jsonl").unlink()
    message = error_of(folder)
    assert "R2MED layout" in message
    assert "missing corpus.jsonl, qrels.jsonl (or qrels.txt)" in message


def test_missing_files_beir(tmp_path: Path) -> None:
    folder = make_beir(tmp_path)
    (folder / "qrels" / "test.tsv").rename(folder / "qrels" / "dev.tsv")
    message = error_of(folder)
    assert "BEIR layout" in message
    assert "missing qrels/test.tsv (qrels/ has: dev.tsv" in message


def test_missing_everything(tmp_path: Path) -> None:
    message = error_of(tmp_path)
    assert "no dataset files found" in message
    assert "query.jsonl" in message and "queries.jsonl" in message and "qrels/test.tsv" in message


def test_not_a_folder(tmp_path: Path) -> None:
    (tmp_path / "file.txt").write_text("x")
    assert "not a folder" in error_of(tmp_path / "file.txt")


def test_notes_are_logged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    folder = make_r2med(
        tmp_path / "T", corpus=[{"id": "d1", "text": "a"}, {"id": "d1", "text": "b"}]
    )
    with caplog.at_level(logging.WARNING, logger="eval.datasets"):
        load_folder(folder)
    assert "T: corpus.jsonl: 1 duplicate doc ids" in caplog.text


# --- task specs and the hub --------------------------------------------------------------------


def test_r2med_constants() -> None:
    assert R2MED_TASKS == (
        "Biology",
        "Bioinformatics",
        "Medical-Sciences",
        "MedXpertQA-Exam",
        "MedQA-Diag",
        "PMC-Treatment",
        "PMC-Clinical",
        "IIYi-Clinical",
    )
    assert set(R2MED_REVISIONS) == set(R2MED_TASKS)
    assert all(len(rev) == 40 for rev in R2MED_REVISIONS.values())


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    # huggingface_hub reads HF_HUB_OFFLINE once at import, so the constant must be patched too.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


def seed_hub_cache(cache_dir: Path, task: str) -> None:
    """Lay out files the way hf_hub_download caches them: blobs, a snapshot of symlinks, a ref."""
    revision = R2MED_REVISIONS[task]
    repo = cache_dir / "hf" / f"datasets--R2MED--{task}"
    source = make_r2med(cache_dir / "src" / task)
    (repo / "blobs").mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True)
    for i, filename in enumerate(R2MED_FILES):
        blob = repo / "blobs" / f"{i:040x}"
        blob.write_bytes((source / filename).read_bytes())
        (snapshot / filename).symlink_to(Path("..", "..", "blobs", blob.name))


def test_hub_cache_offline(tmp_path: Path, offline: None) -> None:
    seed_hub_cache(tmp_path, "Biology")
    folder = fetch_r2med("BIOLOGY", tmp_path)
    assert (
        folder
        == tmp_path / "hf" / "datasets--R2MED--Biology" / "snapshots" / R2MED_REVISIONS["Biology"]
    )
    task = load_task("biology", tmp_path)
    assert task.name == "Biology"
    assert task.corpus == {"d1": "aspirin and bleeding", "d2": "statins"}
    assert task.qrels == {"q1": {"d1": 1}}


def test_hub_empty_cache_offline(tmp_path: Path, offline: None) -> None:
    with pytest.raises(DataError) as info:
        load_task("Biology", tmp_path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("cannot download R2MED/Biology")
    assert "offline?" in message
    assert "put corpus.jsonl, query.jsonl, qrels.jsonl in a folder and pass --dataset" in message


def test_unknown_task_lists_names(tmp_path: Path) -> None:
    with pytest.raises(DataError) as info:
        load_task("Cardiology", tmp_path)
    message = str(info.value)
    assert "'Cardiology' is neither a folder nor an R2MED task" in message
    assert ", ".join(R2MED_TASKS) in message


def test_load_task_prefers_folder(tmp_path: Path) -> None:
    folder = make_r2med(tmp_path / "mine")
    assert load_task(str(folder), tmp_path / "cache").corpus["d2"] == "statins"


def test_load_tasks_all_r2med_in_order(tmp_path: Path, offline: None) -> None:
    for name in R2MED_TASKS:
        seed_hub_cache(tmp_path, name)
    tasks = load_tasks("R2MED", tmp_path)
    assert [t.name for t in tasks] == list(R2MED_TASKS)


def test_load_tasks_comma_list(tmp_path: Path, offline: None) -> None:
    seed_hub_cache(tmp_path, "PMC-Clinical")
    folder = make_beir(tmp_path / "mini")
    tasks = load_tasks(f"pmc-clinical, {folder}", tmp_path)
    assert [t.name for t in tasks] == ["PMC-Clinical", "mini"]


# --- ids with whitespace or invisible characters, grade range, fingerprints -------------------

BAD_IDS = ["d 1", "d\t1", "d\n1", "d\u00a01", "d\u200b1", "d\ufeff1", "d\u20281", " d1"]


@pytest.mark.parametrize("bad", BAD_IDS, ids=repr)
def test_ids_with_whitespace_or_invisible_characters_rejected_at_load(
    tmp_path: Path, bad: str
) -> None:
    shown = repr(bad)
    corpus = [{"id": "d0", "text": "x"}, {"id": bad, "text": "y"}]
    message = error_of(make_r2med(tmp_path / "c", corpus=corpus))
    assert "corpus.jsonl line 2: field 'id': id " + shown in message
    queries = [{"id": bad, "text": "q"}]
    message = error_of(make_r2med(tmp_path / "q", queries=queries))
    assert "query.jsonl line 1: field 'id': id " + shown in message
    for key in ("q_id", "p_id"):
        row = {"q_id": "q1", "p_id": "d1", "score": 1, key: bad}
        message = error_of(make_r2med(tmp_path / key, qrels=[row]))
        assert f"qrels.jsonl line 1: field {key!r}: id {shown}" in message
    beir = make_beir(tmp_path / "beir", corpus=[{"_id": bad, "text": "y"}])
    assert "corpus.jsonl line 1: field '_id': id " + shown in error_of(beir)


def test_beir_tsv_and_trec_qrels_ids_checked(tmp_path: Path) -> None:
    folder = make_beir(tmp_path / "beir", qrels_rows=["q1\td1\t1", "q1\td 3\t1"])
    assert "test.tsv line 3: field 'corpus-id': id 'd 3' contains whitespace" in error_of(folder)
    folder = make_beir(tmp_path / "beir2", qrels_rows=["q\u200b1\td1\t1"])
    assert "test.tsv line 2: field 'query-id': id 'q\\u200b1'" in error_of(folder)
    folder = make_r2med(tmp_path / "trec", qrels=False)
    (folder / "qrels.txt").write_text("q1 0 d1 1\nq1 0 d\u200b2 1\n")
    assert "qrels.txt line 2: field 'docid': id 'd\\u200b2' contains non-printable" in error_of(
        folder
    )


def test_ids_with_non_ascii_printable_characters_accepted(tmp_path: Path) -> None:
    folder = make_r2med(
        tmp_path,
        corpus=[{"id": "café-1", "text": "x"}, {"id": "文書", "text": "y"}],
        qrels=[{"q_id": "q1", "p_id": "文書", "score": 1}],
    )
    assert list(load_folder(folder).corpus) == ["café-1", "文書"]


@pytest.mark.parametrize("grade", [GRADE_MAX + 1, 10**30, GRADE_MIN - 1])
def test_grade_outside_range_rejected(tmp_path: Path, grade: int) -> None:
    folder = make_r2med(tmp_path / "j", qrels=[{"q_id": "q1", "p_id": "d1", "score": grade}])
    message = error_of(folder)
    assert f"qrels.jsonl line 1: field 'score': grade {grade} is outside" in message
    folder = make_r2med(tmp_path / "t", qrels=False)
    (folder / "qrels.txt").write_text(f"q1 0 d1 {grade}\n")
    assert f"qrels.txt line 1: field 'grade': grade {grade} is outside" in error_of(folder)
    folder = make_beir(tmp_path / "b", qrels_rows=[f"q1\td1\t{grade}"])
    assert f"test.tsv line 2: field 'score': grade {grade} is outside" in error_of(folder)


def test_negative_grades_kept_and_counted(tmp_path: Path) -> None:
    qrels = [
        {"q_id": "q1", "p_id": "d1", "score": 1},
        {"q_id": "q1", "p_id": "d2", "score": -1},
        {"q_id": "q1", "p_id": "d3", "score": -2},
    ]
    corpus = [{"id": f"d{i}", "text": "x"} for i in (1, 2, 3)]
    task = load_folder(make_r2med(tmp_path, corpus=corpus, qrels=qrels))
    assert task.qrels == {"q1": {"d1": 1, "d2": -1, "d3": -2}}
    assert (
        "qrels.jsonl: 2 judgements have negative grades; they are scored as grade 0 "
        "(judged non-relevant)"
    ) in task.notes


def test_task_fingerprint(tmp_path: Path) -> None:
    task = load_folder(make_r2med(tmp_path / "a"))
    fp = task_fingerprint(task)
    assert set(fp) == {"corpus", "queries", "qrels"}
    assert all(len(v) == 64 and int(v, 16) >= 0 for v in fp.values())
    assert task_fingerprint(load_folder(make_r2med(tmp_path / "b"))) == fp
    # The corpus digest is the one the dense index cache is keyed by.
    assert fp["corpus"] == corpus_fingerprint(list(task.corpus), list(task.corpus.values()))

    def changed(**kwargs) -> dict[str, bool]:
        other = task_fingerprint(Task(**{**vars(task), **kwargs}))
        return {part: other[part] != fp[part] for part in fp}

    assert changed(corpus={**task.corpus, "d2": "statin"}) == {
        "corpus": True,
        "queries": False,
        "qrels": False,
    }
    # Corpus order decides ties and padding, so it is part of the data; query order is not.
    assert changed(corpus=dict(reversed(task.corpus.items())))["corpus"]
    two = {"q1": "a", "q2": "b"}
    assert changed(queries=two) == {"corpus": False, "queries": True, "qrels": False}
    swapped = task_fingerprint(Task(**{**vars(task), "queries": dict(reversed(two.items()))}))
    assert swapped["queries"] == task_fingerprint(Task(**{**vars(task), "queries": two}))["queries"]
    assert changed(qrels={"q1": {"d1": 2}})["qrels"]
    assert changed(name="other", notes=["x"]) == dict.fromkeys(fp, False)
