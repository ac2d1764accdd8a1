"""eval.compare on real BM25 runs: numbers, deltas, significance, costs, notes, files.

The runs are `--agent none` with bm25q and lucene over tests/synthetic.py's task (300
queries), a copy of the bm25q run, and a degraded copy (every top 10 reversed). The tests of
the numbers (means, wins/ties/losses, deltas, significance, ranx's scores and t-test) also run
on SciFact as an extra (`runs_each`), as they did before the synthetic task existed.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import ranx
from scipy import stats

from agents.commands.run import main as run_main
from eval.compare import CompareError, compare_runs, load_run
from eval.compare.__main__ import main as compare_main
from eval.datasets import load_tasks
from eval.evaluate import evaluate_run
from eval.report import write_per_query
from eval.significance import N_RESAMPLES, SEED, paired_p_value
from eval.trec import read_run, write_run


class Runs(dict):
    """Run folders by name ("bm25q", "lucene", "copy", "degraded"), and what they ran on."""

    def __init__(self, folders: dict[str, Path], dataset: Path, cache: Path, qrels: dict):
        super().__init__(folders)
        self.dataset, self.cache, self.qrels = dataset, cache, qrels
        self.task = dataset.name  # the task's name: its folder's
        self.n = len(qrels)


def _reverse_top10(folder: Path, task: str, qrels: dict) -> None:
    """Degrade a run folder in place: every query's top 10 in reverse order, all files redone."""
    run = read_run(folder / task / "run.trec")
    degraded = {}
    for qid, docs in run.items():
        ranked = sorted(docs, key=lambda d: -docs[d])
        order = ranked[:10][::-1] + ranked[10:]
        degraded[qid] = {d: float(len(order) - i) for i, d in enumerate(order)}
    write_run(degraded, folder / task / "run.trec")
    evaluation = evaluate_run({q: qrels[q] for q in run}, degraded)
    write_per_query(evaluation, folder / task / "per_query.jsonl")
    summary = json.loads((folder / task / "metrics.json").read_text())
    summary["metrics"] = evaluation.mean
    (folder / task / "metrics.json").write_text(json.dumps(summary))


def _make_runs(bm25_runs, dataset: Path, root: Path) -> Runs:
    # shared with tests/agents/commands/test_run_command.py: copied, never changed
    made, cache = bm25_runs(dataset)
    folders = {m: root / m for m in ("bm25q", "lucene", "copy", "degraded")}
    for name, source in (("bm25q", "bm25q"), ("lucene", "lucene"), ("copy", "bm25q"),
                         ("degraded", "bm25q")):  # fmt: skip
        shutil.copytree(made[source], folders[name])
    qrels = load_tasks(str(dataset), cache)[0].qrels
    _reverse_top10(folders["degraded"], dataset.name, qrels)
    return Runs(folders, dataset, cache, qrels)


@pytest.fixture(scope="module")
def runs(bm25_runs, synthetic_dir: Path, tmp_path_factory) -> Runs:
    """The runs on the synthetic task: what most tests here use."""
    return _make_runs(bm25_runs, synthetic_dir, tmp_path_factory.mktemp("compare"))


@pytest.fixture(scope="module")
def scifact_runs(bm25_runs, scifact_dir: Path, tmp_path_factory) -> Runs:
    return _make_runs(bm25_runs, scifact_dir, tmp_path_factory.mktemp("compare-scifact"))


@pytest.fixture(
    params=["synthetic", pytest.param("scifact", marks=[pytest.mark.scifact, pytest.mark.slow])]
)
def runs_each(request) -> Runs:
    """The runs on the synthetic task, then on SciFact (an extra): for the tests of numbers."""
    return request.getfixturevalue("runs" if request.param == "synthetic" else "scifact_runs")


def _per_query(folder: Path, task: str, metric: str = "NDCG@10") -> dict[str, float]:
    lines = (folder / task / "per_query.jsonl").read_text().splitlines()
    return {r["query_id"]: r[metric] for r in map(json.loads, lines)}


def _metrics_json(folder: Path, task: str) -> dict[str, float]:
    return json.loads((folder / task / "metrics.json").read_text())["metrics"]


def _by_folder(c, name: str) -> str:
    return next(label for label in c.labels if c.runs[label].path.name == name)


# ---- the numbers: on the synthetic task, and on SciFact as an extra ----------------------------


@pytest.mark.parametrize("metric", ["NDCG@10", "Recall@100", "MRR@10"])
def test_table_numbers_are_the_runs_own_metrics(runs_each, metric):
    runs, task = runs_each, runs_each.task
    folders = [runs[k] for k in ("bm25q", "lucene", "degraded")]
    c = compare_runs(folders, metric=metric)
    assert c.tasks == [task]
    assert not [n for n in c.notes if "MISMATCH" in n]
    for folder in folders:
        label = _by_folder(c, folder.name)
        assert c.means[label][task] == _metrics_json(folder, task)[metric]
        assert c.means[label][task] == pytest.approx(
            np.mean(list(_per_query(folder, task, metric).values())), abs=5e-6
        )  # metrics.json holds the mean rounded to 5 places
    if metric == "NDCG@10":  # the degraded copy is worse, or the significance tests prove nothing
        assert c.means[_by_folder(c, "degraded")][task] < c.means[c.baseline][task] - 0.1
        assert 0.3 < c.means[c.baseline][task] < 0.75  # neither trivial nor broken


def test_scores_recomputed_from_run_trec_equal_per_query_files(runs_each, tmp_path):
    runs, task = runs_each, runs_each.task
    bare = tmp_path / "bare"
    shutil.copytree(runs["lucene"], bare)
    (bare / task / "per_query.jsonl").unlink()
    c = compare_runs([runs["lucene"], bare], qrels_from=str(runs.dataset), cache_dir=runs.cache)
    a, b = (c.scores[label][task] for label in c.labels)
    assert a.keys() == b.keys() and len(a) == runs.n == 300
    assert max(abs(a[q] - b[q]) for q in a) < 1e-12
    assert c.deltas[c.labels[1]]["Overall"].ties == runs.n


def test_wins_ties_losses_agree_with_the_per_query_values(runs_each):
    runs, task = runs_each, runs_each.task
    c = compare_runs([runs["bm25q"], runs["lucene"], runs["degraded"]])
    base = _per_query(runs["bm25q"], task)
    for name in ("lucene", "degraded"):
        other = _per_query(runs[name], task)
        d = c.deltas[_by_folder(c, name)][task]
        assert d.wins == sum(other[q] > base[q] for q in base)
        assert d.losses == sum(other[q] < base[q] for q in base)
        assert d.ties == sum(other[q] == base[q] for q in base)
        assert d.wins + d.ties + d.losses == d.n == runs.n
        assert d.delta == pytest.approx(
            np.mean(list(other.values())) - np.mean(list(base.values()))
        )
        assert c.deltas[_by_folder(c, name)]["Overall"] == d  # one task: Overall is that task
        up, down = c.movers[_by_folder(c, name)]
        assert all(m.delta > 0 for m in up) and all(m.delta < 0 for m in down)
        assert [m.delta for m in down] == sorted(m.delta for m in down)[:5]
        biggest_drop = min(other[q] - base[q] for q in base)
        assert down[0].delta == pytest.approx(biggest_drop)
        assert down[0].text  # the query's text, read from queries.jsonl
    lucene = c.deltas[_by_folder(c, "lucene")][task]
    assert lucene.wins and lucene.losses and lucene.ties  # the two methods rank differently
    degraded = c.deltas[_by_folder(c, "degraded")][task]
    assert degraded.losses > 5 * degraded.wins  # reversing the top 10 mostly hurts


def test_significance_separates_a_degraded_copy_and_not_an_identical_one(runs_each):
    runs, task = runs_each, runs_each.task
    c = compare_runs([runs["bm25q"], runs["degraded"], runs["copy"], runs["lucene"]])
    assert c.deltas[_by_folder(c, "degraded")][task].p_value < 0.05
    assert c.deltas[_by_folder(c, "degraded")]["Overall"].p_value < 0.05
    assert c.deltas[_by_folder(c, "copy")][task].p_value == 1.0  # identical lists: exactly 1
    again = compare_runs([runs["bm25q"], runs["lucene"]])  # seeded: the same p-value again
    lucene = _by_folder(c, "lucene")
    assert again.deltas[lucene][task].p_value == c.deltas[lucene][task].p_value


def _fisher_by_hand(a: np.ndarray, b: np.ndarray, n: int, seed: int) -> tuple[float, float]:
    """Fisher's randomization test written out: each query's difference gets a random sign, n
    times; the two-sided p-value is twice the smaller tail's share, the observed flip counted
    (scipy's definition). Also returns that smaller tail's share, for the Monte Carlo error."""
    diff = b - a
    observed = diff.mean()
    signs = np.random.default_rng(seed).choice([-1.0, 1.0], size=(n, len(diff)))
    null = (signs * diff).mean(axis=1)
    tol = 1e-12
    tail = min(np.sum(null <= observed + tol) + 1, np.sum(null >= observed - tol) + 1) / (n + 1)
    return min(1.0, 2 * tail), tail


@pytest.mark.parametrize("test", ["fisher", "student"])
def test_p_values_equal_scipy_and_an_independent_randomization(runs, test):
    task = runs.task
    c = compare_runs([runs["bm25q"], runs["lucene"], runs["degraded"]], test=test)
    base = _per_query(runs["bm25q"], task)
    for name in ("lucene", "degraded"):
        other = _per_query(runs[name], task)
        a = np.array([base[q] for q in base])
        b = np.array([other[q] for q in base])
        p = c.deltas[_by_folder(c, name)][task].p_value
        if test == "student":
            assert p == pytest.approx(stats.ttest_rel(b, a).pvalue, rel=1e-9)
            continue
        scipy_p = stats.permutation_test(
            (b, a), lambda x, y, axis: np.mean(x - y, axis=axis), permutation_type="samples",
            vectorized=True, n_resamples=N_RESAMPLES, alternative="two-sided", rng=SEED,
        ).pvalue  # fmt: skip
        assert p == pytest.approx(scipy_p, rel=1e-12)
        # the same test with other random flips: equal within both estimates' Monte Carlo error
        by_hand, tail = _fisher_by_hand(a, b, 20_000, seed=7)
        error = 2 * np.sqrt(tail * (1 - tail) * (1 / N_RESAMPLES + 1 / 20_000))
        assert abs(p - by_hand) <= 4 * error + 1e-3, (name, p, by_hand)
    lucene = c.deltas[_by_folder(c, "lucene")][task].p_value
    degraded = c.deltas[_by_folder(c, "degraded")][task].p_value
    assert degraded < 1e-3 and lucene > degraded  # a real difference and a small one


@pytest.mark.slow
def test_ranx_scores_and_t_test_equal_ours(runs_each):
    runs, task = runs_each, runs_each.task
    qrels = ranx.Qrels(runs.qrels)
    ranx_runs = []
    for name in ("bm25q", "lucene", "degraded"):
        run = ranx.Run(read_run(runs[name] / task / "run.trec"), name=name)
        ranx_runs.append(run)
        ours = _per_query(runs[name], task)
        theirs = ranx.evaluate(qrels, run, "ndcg@10", return_mean=False, make_comparable=True)
        assert len(theirs) == len(ours) == runs.n
        order = run.get_query_ids()  # ranx sorts the queries
        assert np.allclose(theirs, [ours[q] for q in order], atol=1e-6)
        assert round(float(np.mean(theirs)), 5) == pytest.approx(
            _metrics_json(runs[name], task)["NDCG@10"], abs=1e-5
        )
    report = ranx.compare(qrels, ranx_runs[:2], ["ndcg@10"], stat_test="student")
    ranx_p = report.comparisons[("bm25q", "lucene")]["ndcg@10"]["p_value"]
    c = compare_runs([runs["bm25q"], runs["lucene"]], test="student")
    assert c.deltas[_by_folder(c, "lucene")][task].p_value == pytest.approx(ranx_p, rel=1e-6)
    base, other = _per_query(runs["bm25q"], task), _per_query(runs["lucene"], task)
    ours = paired_p_value([base[q] for q in base], [other[q] for q in base], test="student")
    assert ours == pytest.approx(ranx_p, rel=1e-6)


# ---- files, costs, notes: on the synthetic task ------------------------------------------------


@pytest.mark.slow
def test_cli_writes_tables_and_valid_pngs(runs, tmp_path, capsys):
    task = runs.task
    out = tmp_path / "out"
    argv = [str(runs["bm25q"]), str(runs["lucene"]), str(runs["degraded"]), "--out", str(out)]
    assert compare_main(argv) == 0
    printed = capsys.readouterr().out
    assert f"| NDCG@10 | {task} | Avg |" in printed and "Queries that moved most" in printed
    for name in ("report.md", "leaderboard.md", "leaderboard.csv", "deltas.csv", "comparison.json"):
        assert (out / name).is_file()
    assert f"HTML report (opens offline in a browser): {out / 'report.html'}" in printed
    # tests/eval/compare/test_html_report.py: more
    html = (out / "report.html").read_text(encoding="utf-8")
    assert html.count('<tr data-run="') == 3 and '<section id="queries">' in html
    rows = (out / "leaderboard.csv").read_text().splitlines()
    assert rows[0] == f"run,folder,{task},Avg" and len(rows) == 4
    mean = _metrics_json(runs["bm25q"], task)["NDCG@10"]
    assert rows[1].endswith(f",{mean:.5f},{mean:.5f}")
    import matplotlib.image

    for png in ("tasks.png", "cost.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert matplotlib.image.imread(out / png).shape[0] > 100


def test_cost_table_sums_the_query_records(runs, tmp_path):
    priced = tmp_path / "priced"
    shutil.copytree(runs["bm25q"], priced)
    path = priced / runs.task / "queries.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(records) == runs.n == 300
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


def test_runs_on_fewer_queries_or_other_tasks_are_compared_on_the_intersection(runs, tmp_path):
    task = runs.task
    argv = ["--agent", "none", "--dataset", str(runs.dataset), "--limit", "50",
            "--runs-dir", str(tmp_path), "--cache-dir", str(runs.cache),
            "--run-name", "limited", "--quiet"]  # fmt: skip
    assert run_main(argv) == 0
    extra = tmp_path / "limited" / "other-task"
    shutil.copytree(tmp_path / "limited" / task, extra)
    c = compare_runs([runs["bm25q"], tmp_path / "limited"])
    assert c.tasks == [task]
    assert len(c.scores[c.baseline][task]) == 50
    full = _per_query(runs["bm25q"], task)
    assert c.scores[c.baseline][task] == {q: full[q] for q in list(full)[:50]}
    assert c.deltas[c.labels[1]][task].ties == 50  # the same BM25 on the same 50 queries
    assert any("250 of its 300 queries left out" in n for n in c.notes)
    assert any("other-task left out" in n for n in c.notes)
    (tmp_path / "lone").mkdir()
    shutil.copy(tmp_path / "limited" / "config.json", tmp_path / "lone")  # the task's own
    shutil.copytree(extra, tmp_path / "lone" / "other-task")
    with pytest.raises(CompareError, match="share no task"):
        compare_runs([runs["bm25q"], tmp_path / "lone"])
    assert load_run(runs["bm25q"]).label == "none bm25q"


def test_cost_with_one_unpriced_call_is_unknown_as_usage_add_says(runs, tmp_path):
    from eval.usage import Usage

    run = tmp_path / "one-unpriced"
    shutil.copytree(runs["bm25q"], run)
    path = run / runs.task / "queries.jsonl"
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
    name = runs.task
    staged = tmp_path / "staged"
    shutil.copytree(runs["bm25q"], staged)
    task = staged / name
    stage = task / "rerank-1-reverse"
    stage.mkdir()
    for file in ("run.trec", "per_query.jsonl"):
        shutil.copy(runs["degraded"] / name / file, stage / file)
    records = [json.loads(line) for line in (task / "queries.jsonl").read_text().splitlines()]
    with open(stage / "queries.jsonl", "w") as f:
        for r in records:
            usage = {"calls": 1, "prompt_tokens": 5, "completion_tokens": 1, "cost": 0.01}
            f.write(json.dumps({"query_id": r["query_id"], "usage": usage, "error": None}) + "\n")
    summary = json.loads((task / "metrics.json").read_text())
    agent_metrics = summary["metrics"]
    final = _metrics_json(runs["degraded"], name)
    summary.update(
        metrics=final, stages={"agent": agent_metrics, stage.name: final}, final_stage=stage.name
    )
    (task / "metrics.json").write_text(json.dumps(summary))

    c = compare_runs([runs["bm25q"], staged])
    label = _by_folder(c, "staged")
    assert c.means[label][name] == final["NDCG@10"] < agent_metrics["NDCG@10"]
    assert not [n for n in c.notes if "MISMATCH" in n]
    assert c.scores[label][name] == _per_query(runs["degraded"], name)
    _, down = c.movers[label]
    assert down[0].text  # the query text, from the agent's records: the stage's lack it
    cost = c.costs[label]  # the agent made no call (cost 0), the stage one per query
    assert (cost.queries, cost.calls, cost.prompt_tokens) == (300, 300, 1500)
    assert cost.cost_known and cost.total_cost == pytest.approx(3.0)

    summary["final_stage"] = "agent"  # the stage left beside it no longer counts
    (task / "metrics.json").write_text(json.dumps({**summary, "metrics": agent_metrics}))
    c = compare_runs([runs["bm25q"], staged])
    assert c.scores[_by_folder(c, "staged")][name] == _per_query(runs["bm25q"], name)


def _unbind(task: Path) -> None:
    """Leave a task folder's task.json without the binding, as a folder written before it
    held one: its run's config.json may then be edited without the task being refused."""
    info = json.loads((task / "task.json").read_text())
    info.pop("binding", None)
    (task / "task.json").write_text(json.dumps(info))


def test_qrels_that_cannot_be_found_are_one_line_naming_the_run(runs, tmp_path):
    bare = tmp_path / "bare"
    shutil.copytree(runs["lucene"], bare)
    (bare / runs.task / "per_query.jsonl").unlink()  # so the scores need the qrels
    _unbind(bare / runs.task)  # its config.json is edited below, as an older folder's
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
    task = runs.task
    damaged = tmp_path / "damaged"
    shutil.copytree(runs["bm25q"], damaged)
    summary = damaged / task / "metrics.json"
    summary.write_bytes(summary.read_bytes()[:40])  # derived: noted, the scores still count
    c = compare_runs([runs["bm25q"], damaged])
    assert any("metrics.json is damaged" in n for n in c.notes)
    assert c.means[_by_folder(c, "damaged")][task] == _metrics_json(runs["bm25q"], task)["NDCG@10"]

    with open(damaged / task / "per_query.jsonl", "a") as f:
        f.write('{"query_id": "q"\n')  # the scores themselves: refused, naming file and line
    with pytest.raises(CompareError, match=r"per_query.jsonl line 301: not valid JSON"):
        compare_runs([runs["bm25q"], damaged])
    (damaged / "config.json").write_text("{")
    with pytest.raises(CompareError, match=r"config.json line 1: damaged, not valid JSON"):
        compare_runs([damaged])
