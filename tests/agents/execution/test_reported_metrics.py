"""One run, one number: every path that reports a metric agrees, under every setting.

A small task in R2MED layout holds queries answered normally (one with two tied relevant
candidates), one whose ranking comes back empty (its generated passage shares no term with the
corpus), one whose generation fails, one without qrels and a judged query missing from the
query file. It is run with hyde (scripted LLM) under every combination of ``--missing``,
``--pad`` and ``--ties``; the printed figure, metrics.json (task and run), leaderboard.md,
``eval.score`` on run.trec, and ``eval.compare`` (its tables, comparison.json, leaderboard.csv
and report.html's data) must all give the same nDCG@10 and MRR, equal to pytrec_eval called
here on the raw rankings under the one definition of "present" (``eval.evaluate``): a query is
present iff its ranking holds a document; a failed query is absent.

Also: BM25 rankings keep negatively scored matches, qrels headers are recognised by name and
never guessed, and empty inputs are errors naming the file.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import re
import shutil
from pathlib import Path

import litellm
import pytest
import pytrec_eval

from agents.commands.run import main as run_main
from agents.llm import scripted
from eval.compare import compare_runs, comparison_markdown, write_comparison
from eval.datasets import DataError, load_folder, read_qrels
from eval.records import unpack_record
from eval.score import main as score_main
from retrievers.bm25 import build_bm25, build_bm25_from_tokens
from tests.helpers import DOCS as TOY_DOCS

DEPTH = 5  # below the corpus size, so padding and the depth cut both matter
METRICS = ("NDCG@10", "MRR")
_PYTREC = {"NDCG@10": "ndcg_cut_10", "MRR": "recip_rank"}

DOCS = {
    **TOY_DOCS,
    "d6": "Statins inhibit HMG-CoA reductase and lower cholesterol.",  # d4's twin: a tie
    "d7": "Beta blockers slow the heart rate.",
    "d8": "Loop diuretics increase sodium excretion.",
}
QUERIES = {
    "q1": "Which drug lowers glucose production by the liver?",
    "q2": "How does aspirin act on platelets?",
    "q3": "What lowers cholesterol?",
    "q4": "Which anticoagulant needs INR monitoring?",  # its passage matches nothing
    "q5": "What slows a racing heart?",  # its generation fails
    "q6": "An unjudged question about sodium.",  # no qrels: never scored
}
QRELS = [
    ("q1", "d2", 1),
    ("q2", "d3", 2),
    ("q2", "d1", 1),
    ("q3", "d6", 1),  # tied with d4: the tie order decides its rank
    ("q4", "d5", 1),  # only a pad can find it
    ("q5", "d7", 1),
    ("ghost", "d8", 1),  # not in the query file: the loader drops it, with a note
]
PASSAGES = {
    "glucose": "Metformin lowers glucose production in diabetes.",
    "aspirin": "Aspirin inhibits platelet cyclooxygenase; insulin too.",
    "cholesterol": "Statins lower cholesterol.",
    "anticoagulant": "xyzzy plugh frobozz",  # no term in common with the corpus
    "sodium": "Loop diuretics and sodium.",
}
SETTINGS = list(itertools.product(("zero", "present"), (False, True), ("trec", "ascending")))


def _respond(messages: list[dict], params: dict) -> str:
    text = messages[-1]["content"]
    if "racing heart" in text:
        # a request the provider refuses: not retried, so the query fails and the run goes on
        raise litellm.BadRequestError("scripted failure", "scripted/test", "scripted")
    return next(p for word, p in PASSAGES.items() if word in text)


def _write_task(folder: Path) -> Path:
    folder.mkdir(parents=True)
    lines = {
        "corpus.jsonl": [{"id": i, "text": t} for i, t in DOCS.items()],
        "query.jsonl": [{"id": i, "text": t} for i, t in QUERIES.items()],
        "qrels.jsonl": [{"q_id": q, "p_id": d, "score": s} for q, d, s in QRELS],
    }
    for name, rows in lines.items():
        (folder / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def _name(missing: str, pad: bool, ties: str) -> str:
    return f"{missing}-{'pad' if pad else 'nopad'}-{ties}"


@pytest.fixture(scope="module")
def matrix(tmp_path_factory) -> dict:
    """Every setting run once; what each printed, by run name."""
    root = tmp_path_factory.mktemp("one-number")
    task = _write_task(root / "toy")
    scripted.install(_respond)
    printed = {}
    for missing, pad, ties in SETTINGS:
        name = _name(missing, pad, ties)
        argv = [
            "--agent", "hyde", "--dataset", str(task), "--model", "scripted/test",
            "--runs-dir", str(root / "runs"), "--cache-dir", str(root / "cache"),
            "--run-name", name, "--quiet", "--depth", str(DEPTH),
            "--missing", missing, "--ties", ties, *(["--pad"] if pad else []),
        ]  # fmt: skip
        out = _stdout_of(lambda argv=argv: run_main(argv), expect=1)  # q5 failed
        printed[name] = out
    return {"root": root, "task": task, "runs": root / "runs", "printed": printed}


def _stdout_of(call, expect: int) -> str:
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert call() == expect
    return buffer.getvalue()


def _records(run_dir: Path) -> dict[str, dict]:
    lines = (run_dir / "toy" / "queries.jsonl").read_text().splitlines()
    return {r["query_id"]: r for r in map(unpack_record, map(json.loads, lines))}


def _direct(
    records: dict[str, dict], missing: str, pad: bool, ties: str, ghost: bool = False
) -> dict[str, float]:
    """pytrec_eval on the raw rankings, written here from the definition, not the code.

    ``ghost`` keeps the judgement of the query the query file lacks, as a bare qrels file does.
    """
    qrels = {}
    for q, d, s in QRELS:
        if ghost or q in QUERIES:  # the loader drops judgements of queries it has no text for
            qrels.setdefault(q, {})[d] = s
    run = {}
    for qid, record in records.items():
        if record["error"]:
            continue  # failed: absent
        ranking = {d: float(s) for d, s in record["ranking"]}
        if pad:  # R2MED's script: zero-score documents in corpus order up to the depth
            for doc in DOCS:
                if len(ranking) >= DEPTH:
                    break
                ranking.setdefault(doc, 0.0)
        if ties == "ascending":  # ties by doc id ascending, made explicit as rank scores
            order = sorted(ranking, key=lambda d: (-ranking[d], d))
            ranking = {d: float(len(order) - i) for i, d in enumerate(order)}
        if ranking:  # present iff it ranks a document
            run[qid] = ranking
    scored = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recip_rank"}).evaluate(
        {q: r for q, r in run.items() if q in qrels}
    )
    over = list(qrels) if missing == "zero" else list(scored)
    return {
        m: round(sum(scored.get(q, {}).get(_PYTREC[m], 0.0) for q in over) / len(over), 5)
        for m in METRICS
    }


def _score_cli(qrels: Path, run_trec: Path, missing: str, ties: str) -> dict[str, float]:
    argv = ["--qrels", str(qrels), str(run_trec), "--missing", missing, "--ties", ties,
            "--metrics", ",".join(METRICS)]  # fmt: skip
    out = _stdout_of(lambda: score_main(argv), expect=0)
    row = out.splitlines()[1].split()
    assert row[0] == str(run_trec)
    return dict(zip(METRICS, map(float, row[1:]), strict=True))


def _report_data(html: str) -> dict:
    found = re.search(
        r'<script id="report-data" type="application/json">(.*?)</script>', html, re.S
    )
    assert found, "report.html holds no data element"
    return json.loads(found.group(1))


@pytest.mark.parametrize(("missing", "pad", "ties"), SETTINGS, ids=lambda v: str(v))
def test_every_path_gives_the_same_number(matrix, tmp_path, missing, pad, ties):
    name = _name(missing, pad, ties)
    run_dir = matrix["runs"] / name
    direct = _direct(_records(run_dir), missing, pad, ties)

    task_summary = json.loads((run_dir / "toy" / "metrics.json").read_text())
    run_summary = json.loads((run_dir / "metrics.json").read_text())["toy"]
    assert task_summary["failed"] == 1
    for metric in METRICS:
        assert task_summary["metrics"][metric] == direct[metric], metric
        assert run_summary["metrics"][metric] == direct[metric], metric

    headline = direct["NDCG@10"]
    printed = re.search(r"^toy: NDCG@10 = ([0-9.]+)", matrix["printed"][name], re.M)
    assert printed and printed.group(1) == f"{headline:.5f}"
    assert f"| {name} | {headline * 100:.2f} |" in matrix["printed"][name]  # its leaderboard
    board = (run_dir / "leaderboard.md").read_text()
    assert f"| {name} | {headline * 100:.2f} | {headline * 100:.2f} |" in board

    # eval.score on run.trec, against the task as the run read it (the folder) ...
    run_trec = run_dir / "toy" / "run.trec"
    assert _score_cli(matrix["task"], run_trec, missing, ties) == direct
    # ... and against the bare qrels file, which still holds the ghost query: left out under
    # present, as any query the run does not rank; under zero it is one more query worth 0.
    from_file = _score_cli(matrix["task"] / "qrels.jsonl", run_trec, missing, ties)
    assert from_file == _direct(_records(run_dir), missing, pad, ties, ghost=True)
    assert (from_file == direct) == (missing == "present")

    for metric in METRICS:
        c = compare_runs([run_dir], metric=metric)
        label = c.labels[0]
        assert c.means[label]["toy"] == direct[metric]
        assert not [n for n in c.notes if "MISMATCH" in n or "not checked" in n], c.notes
        assert f"| {label} | {direct[metric] * 100:.2f} |" in comparison_markdown(c)
        out = tmp_path / metric
        write_comparison(c, out, plots=False, html=True)
        assert (
            json.loads((out / "comparison.json").read_text())["means"][label]["toy"]
            == (direct[metric])
        )
        csv_row = (out / "leaderboard.csv").read_text().splitlines()[1].split(",")
        assert float(csv_row[2]) == direct[metric]
        html = (out / "report.html").read_text()
        data = _report_data(html)
        scores = [row[3][0] for row in data["rows"] if row[0] == "toy"]
        assert abs(sum(scores) / len(scores) - direct[metric]) <= 1e-5
        assert f"{direct[metric] * 100:.2f}" in html


def test_the_matrix_is_not_vacuous(matrix):
    """Each setting changes the number somewhere, so agreement above means something."""
    values = {}
    for missing, pad, ties in SETTINGS:
        records = _records(matrix["runs"] / _name(missing, pad, ties))
        values[(missing, pad, ties)] = _direct(records, missing, pad, ties)["NDCG@10"]
    assert values[("zero", False, "trec")] != values[("present", False, "trec")]
    assert values[("zero", False, "trec")] != values[("zero", True, "trec")]
    assert values[("zero", False, "trec")] != values[("zero", False, "ascending")]
    assert values[("present", True, "trec")] != values[("present", True, "ascending")]
    records = _records(matrix["runs"] / _name("zero", False, "trec"))
    assert records["q4"]["ranking"] == [] and records["q4"]["error"] is None
    assert records["q5"]["error"] and "scripted failure" in records["q5"]["error"]


def test_present_leaves_out_empty_and_failed_queries(matrix):
    summary = json.loads(
        (matrix["runs"] / "present-nopad-trec" / "toy" / "metrics.json").read_text()
    )
    assert "averaged over 3 of 5 qrels queries" in summary["averaging"]  # q4 empty, q5 failed
    per_query = (matrix["runs"] / "present-nopad-trec" / "toy" / "per_query.jsonl").read_text()
    assert [json.loads(line)["query_id"] for line in per_query.splitlines()] == ["q1", "q2", "q3"]
    padded = json.loads((matrix["runs"] / "present-pad-trec" / "toy" / "metrics.json").read_text())
    assert "averaged over 4 of 5 qrels queries" in padded["averaging"]  # q4 padded: present


def test_compare_checks_a_run_with_failed_queries_against_its_metrics_json(matrix, tmp_path):
    """The check runs even though the failed query is in neither per_query nor the mean."""
    run_dir = tmp_path / "tampered"
    shutil.copytree(matrix["runs"] / "present-nopad-trec", run_dir)
    c = compare_runs([run_dir])
    assert any("1 queries failed (left out" in n for n in c.notes)
    summary_path = run_dir / "toy" / "metrics.json"
    summary = json.loads(summary_path.read_text())
    summary["metrics"]["NDCG@10"] += 0.01
    summary_path.write_text(json.dumps(summary))
    notes = compare_runs([run_dir]).notes
    assert [n for n in notes if "MISMATCH" in n and "averaged over 3 of 5" in n], notes

    (run_dir / "toy" / "per_query.jsonl").unlink()  # scored again from run.trec, as the run was
    c = compare_runs([run_dir, matrix["runs"] / "present-nopad-trec"], metric="MRR")
    assert c.means[c.labels[0]]["toy"] == c.means[c.labels[1]]["toy"]
    summary_path.unlink()  # no metrics.json: said, not skipped
    notes = compare_runs([run_dir], metric="MRR").notes
    assert any("no metrics.json" in n and "not checked" in n for n in notes), notes


def test_compare_says_when_metrics_json_lacks_the_metric(matrix):
    notes = compare_runs([matrix["runs"] / "zero-nopad-trec"], metric="NDCG@3").notes
    assert any("holds no NDCG@3; the table is not checked" in n for n in notes), notes


@pytest.mark.parametrize("ties", ["trec", "ascending"])
def test_a_ranking_longer_than_the_depth_is_scored_as_run_trec_holds_it(tmp_path, ties):
    """metrics.json is computed on the ranking cut to --depth, the lines run.trec keeps."""
    from agents.config.run_config import EvalConfig, RunConfig
    from agents.execution.whole_run import final_run
    from eval.datasets import Task
    from eval.evaluate import evaluate_run
    from eval.trec import read_run, write_run

    task = Task(
        "t", dict.fromkeys(["a", "b", "c", "d"], "x"), {"q": "x"}, {"q": {"d": 1}}, tmp_path
    )
    config = RunConfig(eval=EvalConfig(depth=2, ties=ties))
    run = final_run({"q": {"a": 3.0, "b": 2.0, "c": 2.0, "d": 1.0}}, task, config)
    assert len(run["q"]) == 2
    write_run(run, tmp_path / "run.trec", depth=2, ties=ties)
    from_file = evaluate_run(task.qrels, read_run(tmp_path / "run.trec"), ties=ties)
    assert evaluate_run(task.qrels, run, ties=ties).mean == from_file.mean
    assert from_file.mean["MRR"] == 0.0  # d, ranked 4th, is beyond the depth


# --- (a) negative scores -------------------------------------------------------------------

# "fever" is in three of four documents and "patient" in all: both idfs are negative, and so
# is the mean idf that floors them, so every match of either scores below 0.
NEGATIVE_DOCS = {
    "n1": "patient fever",
    "n2": "patient fever fever",
    "n3": "patient fever",
    "n4": "patient cough",
}


def test_okapi_keeps_negatively_scored_matches():
    index = build_bm25(NEGATIVE_DOCS, method="okapi", progress=False)
    hits = index.search("fever")
    assert set(hits) == {"n1", "n2", "n3"}  # every document holding the term, n4 never
    assert all(score < 0 for score in hits.values())
    assert index.search("cough") and all(s > 0 for s in index.search("cough").values())
    assert index.search("unrelated words") == {}


@pytest.mark.parametrize("method", ["bm25q", "lucene", "okapi"])
def test_matching_does_not_depend_on_the_sign(method):
    tokens = [["a", "b"], ["a", "b"], ["a", "b"], ["c"]]
    index = build_bm25_from_tokens(["x1", "x2", "x3", "x4"], tokens, method)
    assert set(index.search_tokens(["a"])) == {"x1", "x2", "x3"}
    assert set(index.search_tokens(["a", "c"])) == {"x1", "x2", "x3", "x4"}
    assert index.search_tokens(["zzz"]) == {}


def test_a_negatively_scored_ranking_is_scored_not_missing(tmp_path, capsys):
    folder = tmp_path / "neg"
    folder.mkdir()
    (folder / "corpus.jsonl").write_text(
        "".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in NEGATIVE_DOCS.items())
    )
    (folder / "query.jsonl").write_text(json.dumps({"id": "q1", "text": "fever"}) + "\n")
    (folder / "qrels.jsonl").write_text(json.dumps({"q_id": "q1", "p_id": "n2", "score": 1}) + "\n")
    argv = ["--agent", "none", "--dataset", str(folder), "--bm25-method", "okapi",
            "--runs-dir", str(tmp_path / "runs"), "--cache-dir", str(tmp_path / "cache"),
            "--run-name", "neg", "--quiet", "--missing", "present"]  # fmt: skip
    assert run_main(argv) == 0
    summary = json.loads((tmp_path / "runs" / "neg" / "neg" / "metrics.json").read_text())
    assert "0 missing" in summary["averaging"]
    assert summary["metrics"]["NDCG@10"] > 0 and summary["metrics"]["MRR"] > 0
    lines = (tmp_path / "runs" / "neg" / "neg" / "run.trec").read_text().splitlines()
    assert len(lines) == 3 and all(float(line.split()[4]) < 0 for line in lines)


# --- (b) qrels with and without a header -----------------------------------------------------

JUDGEMENTS = {"q1": {"d1": 1, "d2": 0}, "q2": {"d3": 2}}
ROWS = [("q1", "d1", 1), ("q1", "d2", 0), ("q2", "d3", 2)]


def _tsv(path: Path, header: str | None) -> Path:
    lines = ([header] if header is not None else []) + [f"{q}\t{d}\t{g}" for q, d, g in ROWS]
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(
    "header", [None, "query-id\tcorpus-id\tscore", "Query_ID\tCorpus_ID\tScore"]
)
def test_tsv_header_is_optional_and_recognised_by_name(tmp_path, header):
    qrels, _ = read_qrels(_tsv(tmp_path / "test.tsv", header))
    assert qrels == JUDGEMENTS  # the first judgement is never taken for a header


@pytest.mark.parametrize(
    ("first", "field"),
    [
        ("qid\tdocid\trelevance", "score"),  # an unknown header: named, not guessed
        ("q0\td0\t1.0", "score"),  # a data line with a bad grade: not a header either
        ("q0\td0", None),
    ],
)
def test_tsv_first_line_that_is_neither_header_nor_data_is_an_error(tmp_path, first, field):
    path = _tsv(tmp_path / "test.tsv", first)
    with pytest.raises(DataError) as err:
        read_qrels(path)
    message = str(err.value)
    assert message.startswith(f"{path} line 1: ") and "\n" not in message
    assert field is None or f"field {field!r}" in message
    assert "query-id corpus-id score" in message


def test_tsv_header_only_on_the_first_line(tmp_path):
    path = tmp_path / "test.tsv"
    path.write_text("q1\td1\t1\nquery-id\tcorpus-id\tscore\n")
    with pytest.raises(DataError, match=r"test.tsv line 2: field 'score'"):
        read_qrels(path)


def test_trec_qrels_have_no_header(tmp_path):
    path = tmp_path / "qrels.txt"
    path.write_text("".join(f"{q} 0 {d} {g}\n" for q, d, g in ROWS))
    assert read_qrels(path)[0] == JUDGEMENTS
    path.write_text("qid iter docid rel\n" + path.read_text())
    with pytest.raises(DataError) as err:
        read_qrels(path)
    assert str(err.value).startswith(f"{path} line 1: field 'grade'")
    assert "TREC qrels have no header line" in str(err.value)


def test_jsonl_qrels_with_and_without_a_header_line(tmp_path):
    path = tmp_path / "qrels.jsonl"
    body = "".join(json.dumps({"q_id": q, "p_id": d, "score": g}) + "\n" for q, d, g in ROWS)
    path.write_text(body)
    assert read_qrels(path)[0] == JUDGEMENTS
    path.write_text("q_id\tp_id\tscore\n" + body)
    with pytest.raises(DataError, match=r"qrels.jsonl line 1: malformed JSON"):
        read_qrels(path)


def test_beir_folder_without_header_keeps_its_first_judgement(tmp_path):
    folder = tmp_path / "beir"
    (folder / "qrels").mkdir(parents=True)
    (folder / "corpus.jsonl").write_text(
        "".join(
            json.dumps({"_id": d, "title": "", "text": f"text {d}"}) + "\n"
            for d in "d1 d2 d3".split()
        )
    )
    (folder / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": q, "text": f"query {q}"}) + "\n" for q in ("q1", "q2"))
    )
    _tsv(folder / "qrels" / "test.tsv", None)
    assert load_folder(folder).qrels == JUDGEMENTS


# --- (c) empty inputs ------------------------------------------------------------------------


def _error_line(capsys) -> str:
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err
    return err[0]


@pytest.mark.parametrize("content", ["", "\n\n  \n"])
def test_empty_run_file_is_an_error(tmp_path, capsys, content):
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("q1 0 d1 1\n")
    run = tmp_path / "run.trec"
    run.write_text(content)
    assert score_main(["--qrels", str(qrels), str(run)]) == 2
    line = _error_line(capsys)
    assert str(run) in line and "empty run file" in line


@pytest.mark.parametrize(
    ("name", "content"),
    [("qrels.txt", ""), ("qrels.jsonl", "\n"), ("test.tsv", "query-id\tcorpus-id\tscore\n")],
)
def test_empty_qrels_is_an_error(tmp_path, capsys, name, content):
    qrels = tmp_path / name
    qrels.write_text(content)
    run = tmp_path / "run.trec"
    run.write_text("q1 Q0 d1 1 1.0 t\n")
    assert score_main(["--qrels", str(qrels), str(run)]) == 2
    line = _error_line(capsys)
    assert str(qrels) in line and "holds no relevance judgements" in line
