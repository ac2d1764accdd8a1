import json
import math
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import pytrec_eval

from eval.datasets import GRADE_MAX, GRADE_MIN, DataError, read_qrels
from eval.evaluate import (
    TIE_ORDERS,
    evaluate_run,
    metric_names,
    pad_run,
    strictly_decreasing,
    top_k,
)
from eval.report import leaderboard_markdown, order_tasks, results_json, write_per_query
from eval.score import main
from eval.trec import TrecFormatError, read_run, write_run

REPO = Path(__file__).resolve().parents[2]

# Two queries: graded q1 with the relevant docs at ranks 2 and 3, q2 perfect at rank 1.
TOY_QRELS = {"q1": {"d1": 2, "d2": 1, "d9": 0}, "q2": {"d5": 1}}
TOY_RUN = {
    "q1": {"d3": 0.9, "d1": 0.8, "d2": 0.7, "d4": 0.1},
    "q2": {"d5": 3.0, "d6": 2.0},
}


def random_run(qrels, n_docs=60, depth=40, seed=0):
    rng = random.Random(seed)
    docs = [f"d{i}" for i in range(n_docs)]
    # Distinct scores: a permutation of well-separated values, so the run is tie-free.
    return {
        qid: {
            d: float(s)
            for d, s in zip(rng.sample(docs, depth), rng.sample(range(10**6), depth), strict=True)
        }
        for qid in qrels
    }


def random_qrels(n_queries=30, n_docs=60, seed=1):
    rng = random.Random(seed)
    return {
        f"q{i}": {f"d{j}": rng.choice([0, 1, 1, 2]) for j in rng.sample(range(n_docs), 5)}
        for i in range(n_queries)
    }


# --- evaluate -------------------------------------------------------------------------------


def test_ndcg10_hand_computed():
    # trec_eval's nDCG uses the grade itself as gain and log2(rank + 1) as discount.
    dcg = 0 / math.log2(2) + 2 / math.log2(3) + 1 / math.log2(4)
    idcg = 2 / math.log2(2) + 1 / math.log2(3)
    q1 = dcg / idcg
    assert q1 == pytest.approx(0.669672, abs=1e-6)
    result = evaluate_run(TOY_QRELS, TOY_RUN, k_values=(1, 10))
    assert result.per_query["q1"]["NDCG@10"] == pytest.approx(q1)
    assert result.per_query["q2"]["NDCG@10"] == pytest.approx(1.0)
    assert result.mean["NDCG@10"] == round((q1 + 1.0) / 2, 5)
    assert result.per_query["q1"]["MRR"] == pytest.approx(0.5)
    assert result.per_query["q1"]["MRR@1"] == 0.0
    assert result.per_query["q1"]["P@1"] == 0.0
    assert result.mean["Recall@10"] == 1.0


def test_matches_direct_pytrec_eval_on_tie_free_run():
    qrels = random_qrels()
    run = random_run(qrels)
    ks = (1, 10, 25, 50, 100)
    result = evaluate_run(qrels, run, k_values=ks, missing="present")

    kk = ",".join(map(str, ks))
    direct = pytrec_eval.RelevanceEvaluator(
        qrels, {f"ndcg_cut.{kk}", f"map_cut.{kk}", f"recall.{kk}", f"P.{kk}", "recip_rank"}
    ).evaluate(run)
    names = {"NDCG": "ndcg_cut_", "MAP": "map_cut_", "Recall": "recall_", "P": "P_"}
    assert set(result.per_query) == set(direct)
    for qid, values in direct.items():
        for fam, prefix in names.items():
            for k in ks:
                assert result.per_query[qid][f"{fam}@{k}"] == values[f"{prefix}{k}"]
        assert result.per_query[qid]["MRR"] == values["recip_rank"]
    for fam, prefix in names.items():
        for k in ks:
            expected = round(sum(v[f"{prefix}{k}"] for v in direct.values()) / len(direct), 5)
            assert result.mean[f"{fam}@{k}"] == expected
    # MRR@k is recip_rank on the run cut at k.
    for k in ks:
        cut = {q: dict(sorted(d.items(), key=lambda t: -t[1])[:k]) for q, d in run.items()}
        rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"}).evaluate(cut)
        for qid in rr:
            assert result.per_query[qid][f"MRR@{k}"] == rr[qid]["recip_rank"]
    assert result.metrics == metric_names(ks)


def test_every_metric_evaluate_produces_parses_back():
    from eval.metrics import k_values_of, parse_metric
    from eval.report import r2med_metric_key

    names = evaluate_run({"q": {"d": 1}}, {"q": {"d": 1.0}}, k_values=[3, 1]).metrics
    assert names == metric_names([1, 3])
    for name in names:
        family, k = parse_metric(name)
        assert name == (family if k is None else f"{family}@{k}")
    assert k_values_of(names) == [1, 3] and k_values_of(["MRR"]) == [10]
    keys = [r2med_metric_key(n) for n in ("NDCG@10", "P@10", "Recall@100", "MRR@10", "MRR")]
    assert keys == ["ndcg_at_10", "precision_at_10", "recall_at_100", "mrr_at_10", "mrr"]


def test_missing_zero_lowers_mean_by_the_right_amount():
    qrels = {**TOY_QRELS, "q3": {"d7": 1}, "q4": {"d8": 1}}
    run = {**TOY_RUN, "q4": {}}  # q3 absent, q4 answered with nothing
    zero = evaluate_run(qrels, run, k_values=(10,), missing="zero")
    present = evaluate_run(qrels, run, k_values=(10,), missing="present")
    toy = evaluate_run(TOY_QRELS, TOY_RUN, k_values=(10,))
    q1, q2 = toy.per_query["q1"]["NDCG@10"], toy.per_query["q2"]["NDCG@10"]

    assert zero.mean["NDCG@10"] == round((q1 + q2) / 4, 5)
    assert zero.per_query["q3"] == dict.fromkeys(zero.metrics, 0.0)
    assert (zero.n_qrels_queries, zero.n_evaluated, zero.n_missing) == (4, 4, 2)
    assert "missing=zero" in zero.describe() and "4 of 4" in zero.describe()

    # "present" is pytrec_eval's average over what a run file can hold: a query is present
    # iff it ranks a document, so the empty q4 is left out like the absent q3.
    as_file = {q: docs for q, docs in run.items() if docs}
    direct = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(as_file)
    assert set(present.per_query) == set(direct) == {"q1", "q2"}
    assert present.mean["NDCG@10"] == round(
        sum(v["ndcg_cut_10"] for v in direct.values()) / len(direct), 5
    )
    assert present.n_evaluated == 2 and present.n_missing == 2
    assert "missing=present" in present.describe()


def test_queries_without_relevant_docs_count_as_zero_and_extra_run_queries_are_ignored():
    qrels = {"q1": {"d1": 1}, "q2": {"d2": 0}}
    run = {"q1": {"d1": 1.0}, "q2": {"d2": 1.0}, "qx": {"d1": 1.0}}
    result = evaluate_run(qrels, run, k_values=(10,))
    assert result.per_query["q2"]["NDCG@10"] == 0.0
    assert result.mean["NDCG@10"] == 0.5
    assert result.n_extra == 1 and "qx" not in result.per_query


def test_bad_missing_policy():
    with pytest.raises(ValueError, match="missing"):
        evaluate_run(TOY_QRELS, TOY_RUN, missing="skip")


# --- strictly_decreasing ------------------------------------------------------------------


def _check_strict(original, fixed):
    for qid, docs in original.items():
        expected_order = [d for d, _ in sorted(docs.items(), key=lambda t: (-t[1], t[0]))]
        assert list(fixed[qid]) == expected_order
        # Strict as trec_eval sees them, i.e. as 32-bit floats.
        scores = np.array(list(fixed[qid].values()), dtype=np.float32)
        assert np.all(scores[:-1] > scores[1:])


def _below(x, steps=1):
    x = np.float32(x)
    for _ in range(steps):
        x = np.nextafter(x, np.float32(-np.inf))
    return float(x)


def test_strictly_decreasing_heavy_ties():
    run = {"q": {f"d{i:03d}": float(i % 3) for i in range(300)}, "e": {}}
    fixed = strictly_decreasing(run, ties="ascending")
    _check_strict(run, fixed)
    # Each tie is broken by doc id ascending: d002 is the first of the score-2 group.
    assert next(iter(fixed["q"])) == "d002" and fixed["q"]["d002"] == 2.0
    assert fixed["q"]["d005"] == _below(2.0) and fixed["q"]["d299"] == _below(2.0, 99)
    assert fixed["q"]["d001"] == 1.0
    assert fixed["e"] == {}
    assert strictly_decreasing(run, ties="ascending") == fixed  # deterministic
    # Same result whatever order the dict came in.
    shuffled = dict(random.Random(3).sample(list(run["q"].items()), 300))
    assert strictly_decreasing({"q": shuffled}, ties="ascending")["q"] == fixed["q"]


def test_strictly_decreasing_keeps_untied_scores_and_moves_ties_minimally():
    run = {"q": {"a": 1.0, "b": 1.0, "c": 0.5, "d": 0.25, "e": 0.25, "f": 0.1}}
    fixed = strictly_decreasing(run, ties="ascending")["q"]
    assert fixed["a"] == 1.0 and fixed["c"] == 0.5 and fixed["d"] == 0.25
    assert fixed["f"] == 0.1  # untied scores keep their exact float64 value
    assert fixed["b"] == _below(1.0) and fixed["e"] == _below(0.25)


def test_strictly_decreasing_near_scores_and_large_magnitudes():
    x = 1e6  # float32 steps are 0.0625 here
    run = {
        "q": {
            "a": x,
            "b": x,
            "c": x - 1e-9,  # distinct in float64, a tie in float32: trec_eval can't see it
            "d": _below(x),  # one float32 step below: reached by the tie chain
            "e": x - 1.0,  # far enough to stay put
            "y": -5.0,
            "z": -5.0,
        }
    }
    fixed = strictly_decreasing(run, ties="ascending")["q"]
    _check_strict(run, {"q": fixed})
    assert [fixed[k] for k in "abcde"] == [x, _below(x), _below(x, 2), _below(x, 3), x - 1.0]
    assert fixed["y"] == -5.0 and fixed["z"] == _below(-5.0)


def test_tie_free_run_unchanged_and_nan_rejected():
    run = random_run(random_qrels(3))
    for ties in TIE_ORDERS:
        assert strictly_decreasing(run, ties=ties) == run
        for bad in (float("nan"), float("inf"), -float("inf"), 1e39, -1e39):
            with pytest.raises(ValueError, match="query 'q', doc 'b': score is not finite"):
                strictly_decreasing({"q": {"a": 1.0, "b": bad}}, ties=ties)
            with pytest.raises(ValueError, match="query 'q', doc 'b'"):
                evaluate_run({"q": {"a": 1}}, {"q": {"a": 1.0, "b": bad}}, ties=ties)
    with pytest.raises(ValueError, match="ties must be one of"):
        strictly_decreasing(run, ties="descending")


def test_ascending_breaks_ties_by_doc_id_not_trec_eval_order():
    # trec_eval puts "b" first (doc id descending); ties="ascending" ranks "a" first.
    qrels = {"q": {"a": 1}}
    run = {"q": {"a": 1.0, "b": 1.0}}
    assert evaluate_run(qrels, run, k_values=(1,), ties="ascending").per_query["q"]["P@1"] == 1.0
    assert evaluate_run(qrels, run, k_values=(1,)).per_query["q"]["P@1"] == 0.0
    # pytrec_eval compares scores as float32, so a 1e-12 lead is a tie it breaks the other
    # way; "ascending" keeps the run's own order, the default does what pytrec_eval does.
    run = {"q": {"a": 1.0 + 1e-12, "b": 1.0}}
    direct = pytrec_eval.RelevanceEvaluator(qrels, {"P.1"}).evaluate(run)
    assert direct["q"]["P_1"] == 0.0
    assert evaluate_run(qrels, run, k_values=(1,), ties="ascending").per_query["q"]["P@1"] == 1.0
    assert evaluate_run(qrels, run, k_values=(1,)).per_query["q"]["P@1"] == 0.0


# --- TREC files ---------------------------------------------------------------------------


def test_write_read_run_round_trip(tmp_path):
    run = {"q2": {"a": 0.5, "b": 0.5, "c": 1 / 3}, "q1": {"x": 2.0, "y": -1.0}}
    path = tmp_path / "sub" / "run.trec"
    write_run(run, path, tag="mytag", depth=100)
    lines = path.read_text().splitlines()
    assert lines[0] == "q1 Q0 x 1 2.0 mytag"
    assert [line.split()[3] for line in lines if line.startswith("q2")] == ["1", "2", "3"]
    back = read_run(path)
    assert back == strictly_decreasing(run)
    assert evaluate_run({"q2": {"b": 1}}, back) == evaluate_run({"q2": {"b": 1}}, run)
    # The default tie order is trec_eval's: "b" before "a" at 0.5.
    write_run(run, path, depth=1)
    assert read_run(path) == {"q1": {"x": 2.0}, "q2": {"b": 0.5}}
    write_run(run, path, depth=1, ties="ascending")
    assert read_run(path) == {"q1": {"x": 2.0}, "q2": {"a": 0.5}}


def test_bad_run_line_message(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    good = "q1 Q0 d1 1 1.5 t\n"
    # Line 2 is blank, so the bad score is on line 4.
    (tmp_path / "run.trec").write_text(good + "\nq1 Q0 d2 2 1.0 t\nq1 Q0 d3 3 abc t\n")
    with pytest.raises(TrecFormatError) as err:
        read_run("run.trec")
    assert str(err.value) == (
        "run.trec line 4: field 'score': expected a number (ASCII digits, '.', an exponent), "
        "got 'abc'"
    )
    assert isinstance(err.value, ValueError) and err.value.line_no == 4

    (tmp_path / "short.trec").write_text("q1 Q0 d1 1 1.5\n")
    with pytest.raises(TrecFormatError, match="short.trec line 1: field 'tag'"):
        read_run("short.trec")
    (tmp_path / "dup.trec").write_text(good + "q1 Q0 d1 2 1.0 t\n")
    with pytest.raises(TrecFormatError, match="line 2: field 'docid'"):
        read_run("dup.trec")


def test_read_qrels(tmp_path):
    path = tmp_path / "qrels.txt"
    path.write_text("q1 0 d1 2\nq1 0 d2 0\nq2 0 d3 1\n")
    assert read_qrels(path)[0] == {"q1": {"d1": 2, "d2": 0}, "q2": {"d3": 1}}
    path.write_text("q1 0 d1 x\n")
    with pytest.raises(DataError, match="line 1: field 'grade'"):
        read_qrels(path)


# --- reports ------------------------------------------------------------------------------


def test_leaderboard_markdown():
    tasks = ["MedQA-Diag", "Biology", "My-Task", "IIYi-Clinical"]
    rows = {
        "bm25": {"Biology": 0.19188, "MedQA-Diag": 0.5, "IIYi-Clinical": 0.123456, "My-Task": 0.0},
        "agent": {"Biology": 0.25},
    }
    table = leaderboard_markdown(rows, tasks)
    lines = table.splitlines()
    assert lines[0] == "| NDCG@10 | Biology | MedQA-Diag | IIYi-Clinical | My-Task | Avg |"
    assert lines[1] == "|---|---:|---:|---:|---:|---:|"
    avg = (0.19188 + 0.5 + 0.123456 + 0.0) / 4 * 100
    assert lines[2] == f"| bm25 | 19.19 | 50.00 | 12.35 | 0.00 | {avg:.2f} |"
    assert lines[3] == "| agent | 25.00 | - | - | - | 25.00* |"
    assert "Avg over the tasks" in table


def test_order_tasks_accepts_r2med_folder_names():
    assert order_tasks(["PMCPatients", "x", "Stack-Biology", "PMC-Treat"]) == [
        "Stack-Biology",
        "PMC-Treat",
        "PMCPatients",
        "x",
    ]


def test_results_json_and_per_query(tmp_path):
    result = evaluate_run(TOY_QRELS, TOY_RUN, k_values=(10,))
    out = results_json(result, "Stack-Biology", "bm25", evaluation_time="0.21 minutes")
    assert out["dataset_name"] == "Stack-Biology" and out["model_name"] == "bm25"
    assert set(out["test"]) == {
        "ndcg_at_10",
        "map_at_10",
        "recall_at_10",
        "precision_at_10",
        "mrr_at_10",
        "mrr",
    }
    assert out["test"]["ndcg_at_10"] == result.mean["NDCG@10"]

    write_per_query(result, tmp_path / "pq.tsv")
    rows = (tmp_path / "pq.tsv").read_text().splitlines()
    assert rows[0].split("\t")[:2] == ["query_id", "NDCG@10"] and len(rows) == 3
    write_per_query(result, tmp_path / "pq.jsonl")
    first = (tmp_path / "pq.jsonl").read_text().splitlines()[0]
    assert first.startswith('{"query_id": "q1", "NDCG@10": 0.6696')


# --- CLI ----------------------------------------------------------------------------------


def test_score_cli(tmp_path, capsys):
    qrels_jsonl = tmp_path / "qrels.jsonl"
    qrels_jsonl.write_text(
        '{"q_id": "q1", "p_id": "d1", "score": 2}\n{"q_id": "q1", "p_id": "d2", "score": 1}\n'
        '{"q_id": "q2", "p_id": "d5", "score": 1}\n{"q_id": "q3", "p_id": "d7", "score": 1}\n'
    )
    tsv = tmp_path / "test.tsv"
    tsv.write_text("query-id\tcorpus-id\tscore\nq1\td1\t2\nq1\td2\t1\nq2\td5\t1\nq3\td7\t1\n")
    assert read_qrels(qrels_jsonl)[0] == read_qrels(tsv)[0]
    run_path = tmp_path / "run.trec"
    write_run(TOY_RUN, run_path)

    assert main(["--qrels", str(qrels_jsonl), str(run_path), "--metrics", "NDCG@10,MRR"]) == 0
    out = capsys.readouterr().out
    q1 = evaluate_run(TOY_QRELS, TOY_RUN).per_query["q1"]["NDCG@10"]
    assert f"{round((q1 + 1) / 3, 5):.5f}" in out
    assert "missing=zero" in out and "2 of 3" not in out

    assert (
        main(["--qrels", str(tsv), str(run_path), "--missing", "present", "--metrics", "NDCG@10"])
        == 0
    )
    out = capsys.readouterr().out
    assert f"{round((q1 + 1) / 2, 5):.5f}" in out and "2 of 3" in out

    bad = tmp_path / "bad.trec"
    bad.write_text("q1 Q0 d1 1 abc t\n")
    assert main(["--qrels", str(tsv), str(bad)]) == 2
    assert "line 1: field 'score'" in capsys.readouterr().err


def test_ignore_identical_ids_drops_the_query_itself():
    qrels = {"q1": {"d1": 1}}
    run = {"q1": {"q1": 2.0, "d1": 1.0}}
    assert evaluate_run(qrels, run, k_values=(1,)).mean["P@1"] == 0.0
    assert evaluate_run(qrels, run, k_values=(1,), ignore_identical_ids=True).mean["P@1"] == 1.0


# --- trec_eval's tie order, measured on pytrec_eval itself -------------------------------------


def _first(run_docs, relevant):
    """Whether pytrec_eval ranks ``relevant`` first among ``run_docs``."""
    scores = pytrec_eval.RelevanceEvaluator({"q": {relevant: 1}}, {"P.1"}).evaluate({"q": run_docs})
    return scores["q"]["P_1"] == 1.0


def test_pytrec_eval_ties_are_judged_in_float32():
    one_below = _below(1.0)
    # Distinct in float32: the higher score wins, whatever the ids.
    assert _first({"a": 1.0, "b": one_below}, "a")
    # Distinct in float64, equal in float32: a tie, which "b" wins (doc id descending).
    for lead in (1e-12, 2.0**-25):
        assert np.float32(1.0 + lead) == np.float32(1.0) and 1.0 + lead != 1.0
        assert _first({"a": 1.0 + lead, "b": 1.0}, "b")
        assert not _first({"a": 1.0 + lead, "b": 1.0}, "a")
    x = 1e6  # float32 steps are 0.0625 here
    assert _first({"a": x + 0.01, "b": x}, "b")


def test_pytrec_eval_breaks_ties_by_doc_id_descending_in_utf8_order():
    docs = {"a": 0.5, "c": 0.5, "b": 0.5, "B": 0.5}
    assert _first(docs, "c")
    rr = pytrec_eval.RelevanceEvaluator({"q": {"a": 1}}, {"recip_rank"}).evaluate({"q": docs})
    assert rr["q"]["recip_rank"] == 1 / 3  # c, b, a, B: "B" < "a" in byte order
    # U+1F600 is above U+FF5E in code points and in UTF-8 bytes but below it in UTF-16 code
    # units: pytrec_eval follows UTF-8, i.e. Python's str order.
    astral, bmp = "\U0001f600", "\uff5e"
    assert astral > bmp and astral.encode() > bmp.encode()
    assert astral.encode("utf-16-be") < bmp.encode("utf-16-be")
    assert _first({bmp: 1.0, astral: 1.0}, astral)
    assert _first({"z": 1.0, "é": 1.0}, "é")


def _direct(qrels, run, ks):
    """Every metric we report, computed straight by pytrec_eval on the raw run."""
    kk = ",".join(map(str, ks))
    measures = {f"ndcg_cut.{kk}", f"map_cut.{kk}", f"recall.{kk}", f"P.{kk}", "recip_rank"}
    direct = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)
    rr = pytrec_eval.RelevanceEvaluator(qrels, {"recip_rank"})
    for k in ks:
        # MRR@k: the run cut at k in trec_eval's order, written out independently here.
        cut = {
            q: dict(sorted(d.items(), key=lambda t: (np.float32(t[1]), t[0]), reverse=True)[:k])
            for q, d in run.items()
        }
        for qid, values in rr.evaluate(cut).items():
            direct[qid][f"mrr_{k}"] = values["recip_rank"]
    return direct


def tied_run(qrels, seed=5):
    """Scores from a handful of values, some of them ties only in float32."""
    rng = random.Random(seed)
    values = [1.0, 1.0 + 1e-9, 0.5, 0.5 - 1e-10, 0.25, 0.0, -0.5, 3e5 + 0.01, 3e5]
    return {
        qid: {f"d{j}": rng.choice(values) for j in rng.sample(range(60), rng.randint(0, 45))}
        for qid in qrels
    }


def test_default_evaluate_equals_direct_pytrec_eval_on_heavily_tied_run():
    qrels = random_qrels()
    run = tied_run(qrels)
    ks = (1, 3, 10, 25, 50, 100)
    result = evaluate_run(qrels, run, k_values=ks, missing="present")
    direct = _direct(qrels, run, ks)
    names = {"NDCG": "ndcg_cut_", "MAP": "map_cut_", "Recall": "recall_", "P": "P_"}
    assert set(result.per_query) == set(direct)
    for qid, values in direct.items():
        for k in ks:
            for fam, prefix in names.items():
                assert result.per_query[qid][f"{fam}@{k}"] == values[f"{prefix}{k}"], (qid, fam)
            assert result.per_query[qid][f"MRR@{k}"] == values[f"mrr_{k}"], (qid, k)
        assert result.per_query[qid]["MRR"] == values["recip_rank"]
    for name in result.metrics:
        per_query = [v[name] for v in result.per_query.values()]
        assert result.mean[name] == round(sum(per_query) / len(per_query), 5)
    # The ties matter: the other order scores differently.
    ascending = evaluate_run(qrels, run, k_values=ks, missing="present", ties="ascending")
    assert ascending.per_query != result.per_query


def test_trec_order_keeps_raw_scores():
    run = {"q": {"a": 1.0 + 1e-9, "b": 1.0, "c": 2.0, "d": 0.5, "e": 0.5}}
    ranked = strictly_decreasing(run)["q"]
    assert list(ranked) == ["c", "b", "a", "e", "d"]
    assert ranked == run["q"]  # values untouched
    assert list(top_k(run, 2)["q"]) == ["c", "b"]
    assert list(top_k(run, 2, ties="ascending")["q"]) == ["c", "a"]


def test_evaluation_records_tie_order():
    trec = evaluate_run(TOY_QRELS, TOY_RUN)
    ascending = evaluate_run(TOY_QRELS, TOY_RUN, ties="ascending")
    assert trec.ties == "trec" and "ties=trec" in trec.describe()
    assert ascending.ties == "ascending" and "ties=ascending" in ascending.describe()
    with pytest.raises(ValueError, match="ties"):
        evaluate_run(TOY_QRELS, TOY_RUN, ties="desc")


# --- pad_run -----------------------------------------------------------------------------------


def test_pad_run_appends_corpus_order_documents():
    corpus_order = ["z", "b", "x", "a", "y"]
    run = {"q1": {"x": 2.0, "a": 1.5}, "q2": {}, "q3": {d: 1.0 for d in "zbxa"}}
    padded = pad_run(run, corpus_order, 4)
    assert padded["q1"] == {"x": 2.0, "a": 1.5, "z": 0.0, "b": 0.0}
    assert list(padded["q1"]) == ["x", "a", "z", "b"]
    assert padded["q2"] == {"z": 0.0, "b": 0.0, "x": 0.0, "a": 0.0}
    assert padded["q3"] == run["q3"]  # already at depth
    assert pad_run(run, corpus_order, 0) == run
    assert run["q1"] == {"x": 2.0, "a": 1.5}  # not modified in place
    assert "q4" not in pad_run(run, corpus_order, 4)
    with pytest.raises(ValueError, match="depth"):
        pad_run(run, corpus_order, -1)


def test_pad_run_pads_rank_last_below_non_positive_scores():
    run = {"q": {"a": 0.5, "b": 0.0}, "n": {"a": -2.0, "b": 1.0}}
    padded = pad_run(run, ["a", "b", "c", "d"], 4)
    assert padded["q"]["c"] == padded["q"]["d"] == _below(0.0)
    assert padded["n"]["c"] == _below(-2.0)
    for qid in padded:
        assert list(strictly_decreasing(padded)[qid])[-2:] == ["d", "c"]
    # A positive score that float32 rounds to 0 would tie a 0.0 pad.
    tiny = pad_run({"q": {"a": 1e-50}}, ["a", "b"], 2)
    assert np.float32(tiny["q"]["b"]) < np.float32(1e-50)


def test_pad_run_matches_r2med_zero_score_padding():
    # R2MED: scores over the whole corpus in corpus order, stable sort, top `depth`.
    corpus_order = [f"d{i}" for i in (5, 1, 9, 3, 7, 2, 8)]
    matched = {"d9": 1.2, "d2": 0.4}
    full = {d: matched.get(d, 0.0) for d in corpus_order}
    r2med = dict(sorted(full.items(), key=lambda x: x[1], reverse=True)[:5])
    assert pad_run({"q": matched}, corpus_order, 5) == {"q": r2med}
    qrels = {"q": {"d3": 1, "d7": 2}}
    direct = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate({"q": r2med})
    ours = evaluate_run(qrels, pad_run({"q": matched}, corpus_order, 5), k_values=(10,))
    assert ours.per_query["q"]["NDCG@10"] == direct["q"]["ndcg_cut_10"] > 0


# --- grades -------------------------------------------------------------------------------------

_NEGATIVE = """
import json, sys
from eval.evaluate import evaluate_run
qrels = {"a": {"d1": 1, "d2": -1}, "neg": {"d3": -2, "d4": -5}, "b": {"d2": 2}}
run = {"a": {"d1": 1.0, "d2": 2.0}, "neg": {"d3": 1.0}, "b": {"d2": 1.0, "d1": 0.5}}
print(json.dumps(evaluate_run(qrels, run, k_values=(1, 10)).per_query))
"""


def test_query_judged_only_by_negative_grades_does_not_crash():
    # pytrec_eval segfaults on such a query after a normal one; a subprocess turns a
    # regression into a failed test instead of a dead pytest.
    done = subprocess.run(
        [sys.executable, "-c", _NEGATIVE], capture_output=True, text=True, cwd=REPO, timeout=60
    )
    assert done.returncode == 0, (done.returncode, done.stderr)
    per_query = json.loads(done.stdout)
    assert set(per_query["neg"].values()) == {0.0}
    assert per_query["a"]["P@1"] == 0.0 and per_query["a"]["MRR"] == 0.5
    assert per_query["b"]["NDCG@10"] == 1.0


_NEGATIVE_EQUIVALENCE = """
import json, random
import pytrec_eval
from eval.evaluate import evaluate_run
rng = random.Random(11)
qrels = {}
for i in range(40):
    docs = {f"d{j}": rng.choice([-9, -2, -1, 0, 1, 2, 3]) for j in rng.sample(range(60), 8)}
    docs["d99"] = rng.choice([0, 1])  # at least one grade >= 0: pytrec_eval survives
    qrels[f"q{i}"] = docs
run = {
    q: {f"d{j}": rng.choice([rng.random(), 0.5]) for j in rng.sample(range(100), 40)}
    for q in qrels
}
ks = "1,10,25,100"
measures = {f"ndcg_cut.{ks}", f"map_cut.{ks}", f"recall.{ks}", f"P.{ks}", "recip_rank"}
direct = pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate(run)
ours = evaluate_run(qrels, run, k_values=(1, 10, 25, 100)).per_query
n_negative = sum(g < 0 for docs in qrels.values() for g in docs.values())
print(json.dumps({"direct": direct, "ours": ours, "n_negative": n_negative}))
"""


def test_negative_grades_as_zero_change_no_metric():
    done = subprocess.run(
        [sys.executable, "-c", _NEGATIVE_EQUIVALENCE],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )
    assert done.returncode == 0, (done.returncode, done.stderr)
    out = json.loads(done.stdout)
    assert out["n_negative"] > 50
    names = {"NDCG": "ndcg_cut_", "MAP": "map_cut_", "Recall": "recall_", "P": "P_"}
    for qid, values in out["direct"].items():
        for fam, prefix in names.items():
            for k in (1, 10, 25, 100):
                assert out["ours"][qid][f"{fam}@{k}"] == values[f"{prefix}{k}"]
        assert out["ours"][qid]["MRR"] == values["recip_rank"]


def test_grade_outside_the_range_is_a_value_error():
    # pytrec_eval raises SystemError beyond a C int and allocates memory per relevance level
    # below it (2**31 - 1 took minutes and gigabytes), so the range stops at GRADE_MAX.
    for grade in (GRADE_MAX + 1, 2**31, GRADE_MIN - 1, 10**30):
        with pytest.raises(ValueError, match="query 'q', doc 'a': grade"):
            evaluate_run({"q": {"a": grade}}, {"q": {"a": 1.0}})
    with pytest.raises(ValueError, match="not an integer"):
        evaluate_run({"q": {"a": 1.5}}, {"q": {"a": 1.0}})
    assert evaluate_run({"q": {"a": GRADE_MAX}}, {"q": {"a": 1.0}}).mean["NDCG@10"] == 1.0
    assert evaluate_run({"q": {"a": GRADE_MIN, "b": 1}}, {"q": {"b": 1.0}}).mean["NDCG@10"] == 1.0


# --- TREC files: encodings, overflow, ids -------------------------------------------------------


def test_read_run_strips_bom(tmp_path):
    body = "q1 Q0 d1 1 2.0 t\nq1 Q0 d2 2 1.0 t\n"
    (tmp_path / "bom.trec").write_bytes(b"\xef\xbb\xbf" + body.encode())
    (tmp_path / "plain.trec").write_text(body)
    assert read_run(tmp_path / "bom.trec") == read_run(tmp_path / "plain.trec")
    assert list(read_run(tmp_path / "bom.trec")) == ["q1"]


def test_read_run_non_utf8_names_file_line_and_field(tmp_path):
    path = tmp_path / "latin1.trec"
    path.write_bytes(b"q1 Q0 d1 1 2.0 t\nq1 Q0 caf\xe9 2 1.0 t\n")
    with pytest.raises(TrecFormatError) as err:
        read_run(path)
    assert str(err.value) == (
        f"{path} line 2: field 'docid': not valid UTF-8 (bad byte at column 10)"
    )


def test_read_run_score_overflowing_float32(tmp_path):
    path = tmp_path / "big.trec"
    path.write_text("q1 Q0 d1 1 1e39 t\n")
    with pytest.raises(TrecFormatError, match=r"big.trec line 1: field 'score': '1e39' overflows"):
        read_run(path)
    path.write_text("q1 Q0 d1 1 3.4e38 t\n")  # the largest float32 is about 3.40282e38
    assert read_run(path) == {"q1": {"d1": 3.4e38}}


@pytest.mark.parametrize(
    "bad_id", ["d\u00a0x", "d\u200bx", "d\u3000x", "\ufeffd", "d\x7f"], ids=repr
)
def test_trec_ids_reject_invisible_characters(tmp_path, bad_id):
    with pytest.raises(ValueError, match="cannot be written to a TREC file"):
        write_run({"q": {bad_id: 1.0}}, tmp_path / "run.trec")
    with pytest.raises(ValueError, match="cannot be written to a TREC file"):
        write_run({bad_id: {"d": 1.0}}, tmp_path / "run.trec")
    for bad in ("a b", "a\tb", "a\nb", ""):
        with pytest.raises(ValueError, match="cannot be written"):
            write_run({"q": {bad: 1.0}}, tmp_path / "run.trec")
    path = tmp_path / "in.trec"
    path.write_text(f"q1 Q0 {bad_id} 1 1.0 t\n")
    if bad_id.split() == [bad_id]:  # NBSP and U+3000 split the line into 7 columns instead
        with pytest.raises(TrecFormatError, match="line 1: field 'docid': id"):
            read_run(path)
    else:
        with pytest.raises(TrecFormatError, match="line 1"):
            read_run(path)


def test_write_run_orders_and_scores_by_tie_order(tmp_path):
    run = {"q": {"a": 1.0, "b": 1.0, "c": 1.0 + 1e-12, "d": 0.5}}
    path = tmp_path / "run.trec"
    write_run(run, path)
    assert [line.split()[2] for line in path.read_text().splitlines()] == ["c", "b", "a", "d"]
    assert read_run(path) == run  # raw scores
    direct = pytrec_eval.RelevanceEvaluator({"q": {"a": 1}}, {"recip_rank"})
    assert direct.evaluate(read_run(path)) == direct.evaluate(run)
    write_run(run, path, ties="ascending")
    back = read_run(path)
    assert list(back["q"]) == ["c", "a", "b", "d"]
    # Nudged strictly decreasing in float32, so trec_eval keeps exactly this order.
    assert direct.evaluate(back)["q"]["recip_rank"] == 0.5


@pytest.mark.parametrize(
    ("spelt", "name"),
    [("nDCG@10", "NDCG@10"), ("ndcg@10", "NDCG@10"), ("recall@100", "Recall@100"),
     ("mrr", "MRR"), ("Mrr@10", "MRR@10"), ("p@5", "P@5"), ("MAP@10", "MAP@10")],
)  # fmt: skip
def test_a_metric_as_users_spell_it_is_the_name_evaluations_produce(spelt, name):
    from eval.metrics import metric_name, parse_metrics

    assert metric_name(spelt) == name
    assert parse_metrics(f"{spelt}, MRR") == [name, "MRR"]
    with pytest.raises(ValueError, match="unknown metric"):
        metric_name("ndgc@10")
