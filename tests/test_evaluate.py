import math
import random

import numpy as np
import pytest
import pytrec_eval

from eval.datasets import DataError, read_qrels
from eval.evaluate import evaluate, metric_names, strictly_decreasing
from eval.report import leaderboard_markdown, order_tasks, results_json, write_per_query
from eval.score import main
from eval.trec import TrecFormatError, read_run, write_run

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
    result = evaluate(TOY_QRELS, TOY_RUN, k_values=(1, 10))
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
    result = evaluate(qrels, run, k_values=ks, missing="present")

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


def test_missing_zero_lowers_mean_by_the_right_amount():
    qrels = {**TOY_QRELS, "q3": {"d7": 1}, "q4": {"d8": 1}}
    run = {**TOY_RUN, "q4": {}}  # q3 absent, q4 answered with nothing
    zero = evaluate(qrels, run, k_values=(10,), missing="zero")
    present = evaluate(qrels, run, k_values=(10,), missing="present")
    toy = evaluate(TOY_QRELS, TOY_RUN, k_values=(10,))
    q1, q2 = toy.per_query["q1"]["NDCG@10"], toy.per_query["q2"]["NDCG@10"]

    assert zero.mean["NDCG@10"] == round((q1 + q2) / 4, 5)
    assert zero.per_query["q3"] == dict.fromkeys(zero.metrics, 0.0)
    assert (zero.n_qrels_queries, zero.n_evaluated, zero.n_missing) == (4, 4, 2)
    assert "missing=zero" in zero.describe() and "4 of 4" in zero.describe()

    # "present" is pytrec_eval's own average: an empty run dict still counts (as 0),
    # an absent query does not.
    direct = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(run)
    assert set(present.per_query) == set(direct) == {"q1", "q2", "q4"}
    assert present.mean["NDCG@10"] == round(
        sum(v["ndcg_cut_10"] for v in direct.values()) / len(direct), 5
    )
    assert present.n_evaluated == 3 and "missing=present" in present.describe()


def test_queries_without_relevant_docs_count_as_zero_and_extra_run_queries_are_ignored():
    qrels = {"q1": {"d1": 1}, "q2": {"d2": 0}}
    run = {"q1": {"d1": 1.0}, "q2": {"d2": 1.0}, "qx": {"d1": 1.0}}
    result = evaluate(qrels, run, k_values=(10,))
    assert result.per_query["q2"]["NDCG@10"] == 0.0
    assert result.mean["NDCG@10"] == 0.5
    assert result.n_extra == 1 and "qx" not in result.per_query


def test_bad_missing_policy():
    with pytest.raises(ValueError, match="missing"):
        evaluate(TOY_QRELS, TOY_RUN, missing="skip")


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
    fixed = strictly_decreasing(run)
    _check_strict(run, fixed)
    # Each tie is broken by doc id ascending: d002 is the first of the score-2 group.
    assert next(iter(fixed["q"])) == "d002" and fixed["q"]["d002"] == 2.0
    assert fixed["q"]["d005"] == _below(2.0) and fixed["q"]["d299"] == _below(2.0, 99)
    assert fixed["q"]["d001"] == 1.0
    assert fixed["e"] == {}
    assert strictly_decreasing(run) == fixed  # deterministic
    # Same result whatever order the dict came in.
    shuffled = dict(random.Random(3).sample(list(run["q"].items()), 300))
    assert strictly_decreasing({"q": shuffled})["q"] == fixed["q"]


def test_strictly_decreasing_keeps_untied_scores_and_moves_ties_minimally():
    run = {"q": {"a": 1.0, "b": 1.0, "c": 0.5, "d": 0.25, "e": 0.25, "f": 0.1}}
    fixed = strictly_decreasing(run)["q"]
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
    fixed = strictly_decreasing(run)["q"]
    _check_strict(run, {"q": fixed})
    assert [fixed[k] for k in "abcde"] == [x, _below(x), _below(x, 2), _below(x, 3), x - 1.0]
    assert fixed["y"] == -5.0 and fixed["z"] == _below(-5.0)


def test_tie_free_run_unchanged_and_nan_rejected():
    run = random_run(random_qrels(3))
    assert strictly_decreasing(run) == run
    for bad in (float("nan"), float("inf"), 1e39):
        with pytest.raises(ValueError, match="not finite"):
            strictly_decreasing({"q": {"a": bad}})


def test_evaluate_breaks_ties_by_doc_id_not_trec_eval_order():
    # trec_eval would put "b" first (doc id descending); we rank "a" first.
    qrels = {"q": {"a": 1}}
    run = {"q": {"a": 1.0, "b": 1.0}}
    assert evaluate(qrels, run, k_values=(1,)).per_query["q"]["P@1"] == 1.0
    # pytrec_eval compares scores as float32, so a 1e-12 lead is a tie it breaks the other
    # way; we keep the run's own order.
    run = {"q": {"a": 1.0 + 1e-12, "b": 1.0}}
    direct = pytrec_eval.RelevanceEvaluator(qrels, {"P.1"}).evaluate(run)
    assert direct["q"]["P_1"] == 0.0
    assert evaluate(qrels, run, k_values=(1,)).per_query["q"]["P@1"] == 1.0


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
    assert evaluate({"q2": {"b": 1}}, back) == evaluate({"q2": {"b": 1}}, run)
    write_run(run, path, depth=1)
    assert read_run(path) == {"q1": {"x": 2.0}, "q2": {"a": 0.5}}


def test_bad_run_line_message(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    good = "q1 Q0 d1 1 1.5 t\n"
    # Line 2 is blank, so the bad score is on line 4.
    (tmp_path / "run.trec").write_text(good + "\nq1 Q0 d2 2 1.0 t\nq1 Q0 d3 3 abc t\n")
    with pytest.raises(TrecFormatError) as err:
        read_run("run.trec")
    assert str(err.value) == "run.trec line 4: field 'score': not a number: 'abc'"
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
    result = evaluate(TOY_QRELS, TOY_RUN, k_values=(10,))
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
    q1 = evaluate(TOY_QRELS, TOY_RUN).per_query["q1"]["NDCG@10"]
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
    assert evaluate(qrels, run, k_values=(1,)).mean["P@1"] == 0.0
    assert evaluate(qrels, run, k_values=(1,), ignore_identical_ids=True).mean["P@1"] == 1.0
