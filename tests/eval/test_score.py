"""python -m eval.score: bad input ends in one line and exit 2, never a traceback."""

import subprocess
import sys
from pathlib import Path

import pytest

from eval.score import main, parse_metrics

REPO = Path(__file__).resolve().parents[2]
RUN = "q1 Q0 d1 1 2.0 t\nq1 Q0 d2 2 1.0 t\nq2 Q0 d5 1 1.0 t\n"


@pytest.fixture
def qrels(tmp_path: Path) -> Path:
    path = tmp_path / "qrels.txt"
    path.write_text("q1 0 d2 1\nq2 0 d5 1\n")
    return path


def score(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "eval.score", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )


def one_line_error(done: subprocess.CompletedProcess, *expected: str) -> str:
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    for text in expected:
        assert text in lines[0]
    return lines[0]


def test_bom_run_scores_as_without(tmp_path: Path, qrels: Path, capsys) -> None:
    plain = tmp_path / "plain.trec"
    plain.write_text(RUN)
    bom = tmp_path / "bom.trec"
    bom.write_bytes(b"\xef\xbb\xbf" + RUN.encode())
    assert main(["--qrels", str(qrels), str(plain), "--metrics", "NDCG@10,MRR"]) == 0
    plain_out = capsys.readouterr().out
    assert main(["--qrels", str(qrels), str(bom), "--metrics", "NDCG@10,MRR"]) == 0
    bom_out = capsys.readouterr().out
    row = bom_out.splitlines()[1].split()
    assert row[1:] == plain_out.splitlines()[1].split()[1:]
    assert row[1] != "0.00000"  # q1 must match its qrels despite the BOM
    assert "ties=trec" in bom_out


def test_non_utf8_run(tmp_path: Path, qrels: Path) -> None:
    bad = tmp_path / "bad.trec"
    bad.write_bytes(RUN.encode() + b"q2 Q0 d\xff 2 0.5 t\n")
    one_line_error(score("--qrels", str(qrels), str(bad)), str(bad), "line 4", "'docid'", "UTF-8")


def test_score_overflowing_float32(tmp_path: Path, qrels: Path) -> None:
    bad = tmp_path / "big.trec"
    bad.write_text("q1 Q0 d1 1 1e39 t\n")
    one_line_error(score("--qrels", str(qrels), str(bad)), str(bad), "line 1", "'score'", "1e39")


def test_metric_with_k_below_one(tmp_path: Path, qrels: Path) -> None:
    run = tmp_path / "run.trec"
    run.write_text(RUN)
    one_line_error(score("--qrels", str(qrels), str(run), "--metrics", "NDCG@0"), "NDCG@0")
    with pytest.raises(ValueError, match="at least 1"):
        parse_metrics("P@10,MRR@0")
    assert parse_metrics("NDCG@1, MRR") == ["NDCG@1", "MRR"]


@pytest.mark.parametrize("bad", ["ndgc@10", "NDCG@0", "NDCG@", "F1@10", "MRR@0", "MRR@10x", ""])
def test_every_command_refuses_the_same_metric_names(tmp_path: Path, qrels: Path, capsys, bad):
    """eval.score, eval.compare and R2MED's results keys parse names with eval.metrics."""
    from eval.compare.__main__ import main as compare_main
    from eval.metrics import parse_metric
    from eval.report import r2med_metric_key

    with pytest.raises(ValueError) as info:
        parse_metric(bad)
    message = str(info.value)
    assert message.startswith((f"unknown metric {bad!r}: use NDCG@k", f"metric {bad!r}: k must"))
    with pytest.raises(ValueError) as info:
        r2med_metric_key(bad)
    assert str(info.value) == message

    run = tmp_path / "run.trec"
    run.write_text(RUN)
    assert main(["--qrels", str(qrels), str(run), "--metrics", f"MRR,{bad}" if bad else ","]) == 2
    expected = message if bad else "no metrics in ','"
    assert capsys.readouterr().err == f"error: --metrics: {expected}\n"
    assert compare_main([str(tmp_path), "--metric", bad, "--out", str(tmp_path / "c")]) == 2
    assert capsys.readouterr().err == f"error: --metric: {message}\n"
    assert not (tmp_path / "c").exists()  # refused before anything is read or made


def test_unreadable_inputs_name_the_path(tmp_path: Path, qrels: Path, capsys) -> None:
    run = tmp_path / "run.trec"
    run.write_text(RUN)
    for args, path in (
        ([str(qrels), str(tmp_path / "absent.trec")], tmp_path / "absent.trec"),
        ([str(tmp_path / "absent.txt"), str(run)], tmp_path / "absent.txt"),
        ([str(qrels), str(tmp_path)], tmp_path),
    ):
        assert main(["--qrels", *args]) == 2
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and err[0].startswith("error: ") and str(path) in err[0]


def test_ties_option(tmp_path: Path, capsys) -> None:
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("q 0 a 1\n")
    run = tmp_path / "run.trec"
    run.write_text("q Q0 a 1 1.0 t\nq Q0 b 2 1.0 t\n")
    base = ["--qrels", str(qrels), str(run), "--metrics", "P@1"]
    assert main(base) == 0
    assert "0.00000" in capsys.readouterr().out  # trec_eval ranks "b" first
    assert main([*base, "--ties", "ascending"]) == 0
    out = capsys.readouterr().out
    assert "1.00000" in out and "ties=ascending" in out
