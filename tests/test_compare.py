"""eval.compare on real BM25 runs over SciFact: numbers, deltas, significance, files."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from agents.run import main as run_main
from eval.compare import CompareError, compare_runs, load_run
from eval.compare import main as compare_main
from eval.datasets import load_tasks
from eval.evaluate import evaluate
from eval.report import write_per_query
from eval.significance import paired_p_value
from eval.trec import read_run, write_run

TASK = "scifact"


def _reverse_top10(folder: Path, qrels: dict) -> None:
    """Degrade a run folder in place: every query's top 10 in reverse order, all files redone."""
    task = folder / TASK
    run = read_run(task / "run.trec")
    degraded = {}
    for qid, docs in run.items():
        ranked = sorted(docs, key=lambda d: -docs[d])
        order = ranked[:10][::-1] + ranked[10:]
        degraded[qid] = {d: float(len(order) - i) for i, d in enumerate(order)}
    write_run(degraded, task / "run.trec")
    evaluation = evaluate({q: qrels[q] for q in run}, degraded)
    write_per_query(evaluation, task / "per_query.jsonl")
    summary = json.loads((task / "metrics.json").read_text())
    summary["metrics"] = evaluation.mean
    (task / "metrics.json").write_text(json.dumps(summary))


@pytest.fixture(scope="module")
def runs(scifact_dir: Path, tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("compare")
    cache = root / "cache"
    for method in ("bm25q", "lucene"):
        argv = ["--agent", "none", "--dataset", str(scifact_dir), "--bm25-method", method,
                "--runs-dir", str(root / "runs"), "--cache-dir", str(cache),
                "--run-name", method, "--quiet"]  # fmt: skip
        assert run_main(argv) == 0
    folders = {m: root / "runs" / m for m in ("bm25q", "lucene")}
    folders["copy"] = root / "runs" / "copy"
    shutil.copytree(folders["bm25q"], folders["copy"])
    folders["degraded"] = root / "runs" / "degraded"
    shutil.copytree(folders["bm25q"], folders["degraded"])
    qrels = load_tasks(str(scifact_dir), cache)[0].qrels
    _reverse_top10(folders["degraded"], qrels)
    folders["cache"] = cache
    return folders


def _per_query(folder: Path, metric: str = "NDCG@10") -> dict[str, float]:
    lines = (folder / TASK / "per_query.jsonl").read_text().splitlines()
    return {r["query_id"]: r[metric] for r in map(json.loads, lines)}


def _metrics_json(folder: Path) -> dict[str, float]:
    return json.loads((folder / TASK / "metrics.json").read_text())["metrics"]


def _by_folder(c, name: str) -> str:
    return next(label for label in c.labels if c.runs[label].path.name == name)


@pytest.mark.parametrize("metric", ["NDCG@10", "Recall@100", "MRR@10"])
def test_table_numbers_are_the_runs_own_metrics(runs, metric):
    folders = [runs[k] for k in ("bm25q", "lucene", "degraded")]
    c = compare_runs(folders, metric=metric)
    assert c.tasks == [TASK]
    assert not [n for n in c.notes if "MISMATCH" in n]
    for folder in folders:
        label = _by_folder(c, folder.name)
        assert c.means[label][TASK] == _metrics_json(folder)[metric]
    if metric == "NDCG@10":  # the degraded copy is worse, or the significance tests prove nothing
        assert c.means[_by_folder(c, "degraded")][TASK] < c.means[c.baseline][TASK] - 0.1


def test_scores_recomputed_from_run_trec_equal_per_query_files(runs, scifact_dir, tmp_path):
    bare = tmp_path / "bare"
    shutil.copytree(runs["lucene"], bare)
    (bare / TASK / "per_query.jsonl").unlink()
    c = compare_runs([runs["lucene"], bare], qrels_from=str(scifact_dir), cache_dir=runs["cache"])
    a, b = (c.scores[label][TASK] for label in c.labels)
    assert a.keys() == b.keys() and len(a) == 300
    assert max(abs(a[q] - b[q]) for q in a) < 1e-12
    assert c.deltas[c.labels[1]]["Overall"].ties == 300


def test_wins_ties_losses_agree_with_the_per_query_values(runs):
    c = compare_runs([runs["bm25q"], runs["lucene"], runs["degraded"]])
    base = _per_query(runs["bm25q"])
    for name in ("lucene", "degraded"):
        other = _per_query(runs[name])
        d = c.deltas[_by_folder(c, name)][TASK]
        assert d.wins == sum(other[q] > base[q] for q in base)
        assert d.losses == sum(other[q] < base[q] for q in base)
        assert d.wins + d.ties + d.losses == d.n == 300
        assert d.delta == pytest.approx(
            np.mean(list(other.values())) - np.mean(list(base.values()))
        )
        up, down = c.movers[_by_folder(c, name)]
        assert all(m.delta > 0 for m in up) and all(m.delta < 0 for m in down)
        assert [m.delta for m in down] == sorted(m.delta for m in down)[:5]
        biggest_drop = min(other[q] - base[q] for q in base)
        assert down[0].delta == pytest.approx(biggest_drop)
        assert down[0].text  # the query's text, read from queries.jsonl


def test_significance_separates_a_degraded_copy_and_not_an_identical_one(runs):
    c = compare_runs([runs["bm25q"], runs["degraded"], runs["copy"], runs["lucene"]])
    assert c.deltas[_by_folder(c, "degraded")][TASK].p_value < 0.05
    assert c.deltas[_by_folder(c, "degraded")]["Overall"].p_value < 0.05
    assert c.deltas[_by_folder(c, "copy")][TASK].p_value > 0.5
    again = compare_runs([runs["bm25q"], runs["lucene"]])  # seeded: the same p-value again
    lucene = _by_folder(c, "lucene")
    assert again.deltas[lucene][TASK].p_value == c.deltas[lucene][TASK].p_value


def test_ranx_scores_and_t_test_equal_ours(runs, scifact_dir):
    ranx = pytest.importorskip("ranx")
    qrels = load_tasks(str(scifact_dir), runs["cache"])[0].qrels
    ranx_runs = []
    for name in ("bm25q", "lucene", "degraded"):
        run = ranx.Run(read_run(runs[name] / TASK / "run.trec"), name=name)
        ranx_runs.append(run)
        ours = _per_query(runs[name])
        theirs = ranx.evaluate(
            ranx.Qrels(qrels), run, "ndcg@10", return_mean=False, make_comparable=True
        )
        assert len(theirs) == len(ours) == 300
        order = run.get_query_ids()  # ranx sorts the queries
        assert np.allclose(theirs, [ours[q] for q in order], atol=1e-6)
        assert round(float(np.mean(theirs)), 5) == pytest.approx(
            _metrics_json(runs[name])["NDCG@10"], abs=1e-5
        )
    report = ranx.compare(ranx.Qrels(qrels), ranx_runs[:2], ["ndcg@10"], stat_test="student")
    ranx_p = report.comparisons[("bm25q", "lucene")]["ndcg@10"]["p_value"]
    base, other = _per_query(runs["bm25q"]), _per_query(runs["lucene"])
    ours = paired_p_value([base[q] for q in base], [other[q] for q in base], test="student")
    assert ours == pytest.approx(ranx_p, rel=1e-6)


def test_cli_writes_tables_and_valid_pngs(runs, tmp_path, capsys):
    out = tmp_path / "out"
    argv = [str(runs["bm25q"]), str(runs["lucene"]), str(runs["degraded"]), "--out", str(out)]
    assert compare_main(argv) == 0
    printed = capsys.readouterr().out
    assert "| NDCG@10 | scifact | Avg |" in printed and "Queries that moved most" in printed
    for name in ("report.md", "leaderboard.md", "leaderboard.csv", "deltas.csv", "comparison.json"):
        assert (out / name).is_file()
    assert f"HTML report (opens offline in a browser): {out / 'report.html'}" in printed
    html = (out / "report.html").read_text(encoding="utf-8")  # tests/test_html_report.py: more
    assert html.count('<tr data-run="') == 3 and '<section id="queries">' in html
    rows = (out / "leaderboard.csv").read_text().splitlines()
    assert rows[0] == "run,folder,scifact,Avg" and len(rows) == 4
    assert rows[1].endswith(
        f",{_metrics_json(runs['bm25q'])['NDCG@10']:.5f},"
        + f"{_metrics_json(runs['bm25q'])['NDCG@10']:.5f}"
    )
    import matplotlib.image

    for png in ("tasks.png", "cost.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert matplotlib.image.imread(out / png).shape[0] > 100


def test_cost_table_sums_the_query_records(runs, tmp_path):
    priced = tmp_path / "priced"
    shutil.copytree(runs["bm25q"], priced)
    path = priced / TASK / "queries.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for i, r in enumerate(records):
        r["usage"] = {"calls": 2, "cached_calls": 1, "prompt_tokens": 100, "completion_tokens": 10,
                      "cost": None if i < 10 else 0.001, "latency_s": 0.5}  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    c = compare_runs([runs["bm25q"], priced])
    cost = c.costs[_by_folder(c, "priced")]
    assert (cost.queries, cost.calls, cost.cached_calls) == (300, 600, 300)
    assert (cost.prompt_tokens, cost.completion_tokens, cost.priced) == (30000, 3000, 290)
    assert cost.cost == pytest.approx(0.29) and not cost.cost_known
    assert cost.cost_text() == ">= $0.2900 (290/300 queries priced)"
    assert c.costs[c.baseline].cost_text() == "$0"


def test_runs_on_fewer_queries_or_other_tasks_are_compared_on_the_intersection(
    runs, scifact_dir, tmp_path
):
    argv = ["--agent", "none", "--dataset", str(scifact_dir), "--limit", "50",
            "--runs-dir", str(tmp_path), "--cache-dir", str(runs["cache"]),
            "--run-name", "limited", "--quiet"]  # fmt: skip
    assert run_main(argv) == 0
    extra = tmp_path / "limited" / "other-task"
    shutil.copytree(tmp_path / "limited" / TASK, extra)
    c = compare_runs([runs["bm25q"], tmp_path / "limited"])
    assert c.tasks == [TASK]
    assert len(c.scores[c.baseline][TASK]) == 50
    assert any("250 of its 300 queries left out" in n for n in c.notes)
    assert any("other-task left out" in n for n in c.notes)
    (tmp_path / "lone").mkdir()
    shutil.copy(runs["bm25q"] / "config.json", tmp_path / "lone")
    shutil.copytree(extra, tmp_path / "lone" / "other-task")
    with pytest.raises(CompareError, match="share no task"):
        compare_runs([runs["bm25q"], tmp_path / "lone"])
    assert load_run(runs["bm25q"]).label == "none bm25q"


def test_cost_with_one_unpriced_call_is_unknown_as_usage_add_says(runs, tmp_path):
    from eval.usage import Usage

    run = tmp_path / "one-unpriced"
    shutil.copytree(runs["bm25q"], run)
    path = run / TASK / "queries.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    for i, r in enumerate(records):
        r["usage"] = {"calls": 1, "cached_calls": 0, "prompt_tokens": 10, "completion_tokens": 2,
                      "cost": None if i == 7 else 0.002, "latency_s": 0.1}  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    by_rule = Usage.total(Usage.from_dict(r["usage"]) for r in records)
    assert by_rule.cost is None

    cost = compare_runs([run]).costs["none bm25q"]
    assert cost.total_cost is by_rule.cost is None and not cost.cost_known
    assert (cost.calls, cost.prompt_tokens, cost.llm_s) == (
        by_rule.calls, by_rule.prompt_tokens, pytest.approx(by_rule.latency_s)
    )  # fmt: skip
    assert cost.cost == pytest.approx(0.002 * 299) and cost.priced == 299
    assert cost.cost_text() == ">= $0.5980 (299/300 queries priced)"

    records[7]["usage"]["cost"] = 0.002  # every call priced: known, and the same sum
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    cost = compare_runs([run]).costs["none bm25q"]
    assert cost.cost_known and cost.total_cost == pytest.approx(0.002 * 300) == cost.cost


def test_a_task_is_compared_on_its_final_stage_and_costs_every_stage(runs, tmp_path):
    """A rerank stage in <task>/rerank-1-<kind>/, named final in metrics.json, is what counts."""
    staged = tmp_path / "staged"
    shutil.copytree(runs["bm25q"], staged)
    task = staged / TASK
    stage = task / "rerank-1-reverse"
    stage.mkdir()
    for name in ("run.trec", "per_query.jsonl"):
        shutil.copy(runs["degraded"] / TASK / name, stage / name)
    records = [json.loads(line) for line in (task / "queries.jsonl").read_text().splitlines()]
    with open(stage / "queries.jsonl", "w") as f:
        for r in records:
            usage = {"calls": 1, "prompt_tokens": 5, "completion_tokens": 1, "cost": 0.01}
            f.write(json.dumps({"query_id": r["query_id"], "usage": usage, "error": None}) + "\n")
    summary = json.loads((task / "metrics.json").read_text())
    agent_metrics = summary["metrics"]
    final = _metrics_json(runs["degraded"])
    summary.update(
        metrics=final, stages={"agent": agent_metrics, stage.name: final}, final_stage=stage.name
    )
    (task / "metrics.json").write_text(json.dumps(summary))

    c = compare_runs([runs["bm25q"], staged])
    label = _by_folder(c, "staged")
    assert c.means[label][TASK] == final["NDCG@10"] < agent_metrics["NDCG@10"]
    assert not [n for n in c.notes if "MISMATCH" in n]
    assert c.scores[label][TASK] == _per_query(runs["degraded"])
    _, down = c.movers[label]
    assert down[0].text  # the query text, from the agent's records: the stage's lack it
    cost = c.costs[label]  # the agent made no call (cost 0), the stage one per query
    assert (cost.queries, cost.calls, cost.prompt_tokens) == (300, 300, 1500)
    assert cost.cost_known and cost.total_cost == pytest.approx(3.0)

    summary["final_stage"] = "agent"  # the stage left beside it no longer counts
    (task / "metrics.json").write_text(json.dumps({**summary, "metrics": agent_metrics}))
    c = compare_runs([runs["bm25q"], staged])
    assert c.scores[_by_folder(c, "staged")][TASK] == _per_query(runs["bm25q"])


def test_qrels_that_cannot_be_found_are_one_line_naming_the_run(runs, tmp_path):
    bare = tmp_path / "bare"
    shutil.copytree(runs["lucene"], bare)
    (bare / TASK / "per_query.jsonl").unlink()  # so the scores need the qrels
    config = json.loads((bare / "config.json").read_text())
    del config["dataset"]
    (bare / "config.json").write_text(json.dumps(config))
    with pytest.raises(CompareError, match=r"bare: config.json names no dataset; pass --qrels-f"):
        compare_runs([runs["lucene"], bare])
    config["dataset"] = str(tmp_path / "gone")
    (bare / "config.json").write_text(json.dumps(config))
    with pytest.raises(CompareError, match=r"cannot load qrels of dataset .*gone.*--qrels-from"):
        compare_runs([runs["lucene"], bare])


def test_damaged_files_are_named_or_noted(runs, tmp_path):
    damaged = tmp_path / "damaged"
    shutil.copytree(runs["bm25q"], damaged)
    summary = damaged / TASK / "metrics.json"
    summary.write_bytes(summary.read_bytes()[:40])  # derived: noted, the scores still count
    c = compare_runs([runs["bm25q"], damaged])
    assert any("metrics.json is damaged" in n for n in c.notes)
    assert c.means[_by_folder(c, "damaged")][TASK] == _metrics_json(runs["bm25q"])["NDCG@10"]

    with open(damaged / TASK / "per_query.jsonl", "a") as f:
        f.write('{"query_id": "q"\n')  # the scores themselves: refused, naming file and line
    with pytest.raises(CompareError, match=r"per_query.jsonl, line 301: not a per-query row"):
        compare_runs([runs["bm25q"], damaged])
    (damaged / "config.json").write_text("{")
    with pytest.raises(CompareError, match=r"config.json: damaged, cannot be read"):
        compare_runs([damaged])
