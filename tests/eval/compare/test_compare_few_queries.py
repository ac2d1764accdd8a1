"""Comparisons over 0, 1 or 2 paired queries, and over differences that are all the same: every
statistic has a p-value or says n/a with the reason, and eval.compare writes every file."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from agents.commands.run import main as run_main
from eval.compare import compare_runs
from eval.compare.__main__ import main as compare_main
from eval.significance import TESTS, NoTest, paired_p_value, paired_test


@pytest.mark.parametrize("test", TESTS)
@pytest.mark.parametrize(("a", "b"), [([], []), ([0.1], [0.2]), ([0.5], [0.5])])
def test_fewer_than_two_queries_have_no_p_value_and_say_why(test, a, b):
    tested = paired_test(a, b, test)
    assert tested.p_value is None
    assert f"{len(a)} paired quer" in tested.reason and "at least 2" in tested.reason
    assert tested.text().startswith("n/a (") and not tested.significant
    with pytest.raises(NoTest):
        paired_p_value(a, b, test)


@pytest.mark.parametrize("test", TESTS)
def test_two_queries_have_a_p_value(test):
    tested = paired_test([0.1, 0.5], [0.3, 0.4], test)
    assert tested.p_value is not None and 0 < tested.p_value <= 1


def test_all_equal_differences():
    # no variance for the t-test: no p-value, the reason said (not 0.0 or 1e-17)
    for a, b in (([0.0, 0.0], [1.0, 1.0]), ([0.1, 0.2, 0.3], [0.2, 0.3, 0.4])):
        tested = paired_test(a, b, "student")
        assert tested.p_value is None and "the same" in tested.reason
        # the randomization test is defined: each sign flip of n equal differences
        fisher = paired_test(a, b, "fisher")
        assert fisher.p_value == pytest.approx(2 / 2 ** len(a))
    for test in TESTS:  # no difference at all: p = 1 under both
        assert paired_test([0.2, 0.4], [0.2, 0.4], test).p_value == 1.0


@pytest.fixture(scope="module")
def one_query_runs(tmp_path_factory) -> tuple[Path, Path, Path]:
    root = tmp_path_factory.mktemp("one-query")
    for method in ("bm25q", "lucene"):
        argv = ["--agent", "none", "--dataset", "demo", "--bm25-method", method, "--limit", "1",
                "--runs-dir", str(root / "runs"), "--cache-dir", str(root / "cache"),
                "--run-name", method, "--quiet"]  # fmt: skip
        assert run_main(argv) == 0
    return root / "runs" / "bm25q", root / "runs" / "lucene", root


@pytest.mark.parametrize("test", TESTS)
def test_a_one_query_comparison_ends_with_every_file_and_says_n_a(one_query_runs, test, capsys):
    base, other, root = one_query_runs
    c = compare_runs([base, other], test=test)
    (d,) = [by_task["demo"] for by_task in c.deltas.values()]
    assert d.n == 1 and d.p_value is None and "1 paired query" in d.p_reason
    out = root / f"cmp-{test}"
    assert compare_main([str(base), str(other), "--test", test, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "p=n/a (1 paired query; a paired test needs at least 2)" in printed
    rows = list(csv.DictReader((out / "deltas.csv").open()))
    assert rows and all(r["p_value"].startswith("n/a (1 paired query") for r in rows)
    summary = json.loads((out / "comparison.json").read_text())
    assert "n/a" in json.dumps(summary) or "1 paired query" in json.dumps(summary)
    assert "n/a (1 paired query" in (out / "report.html").read_text()
    assert (out / "tasks.png").is_file()
