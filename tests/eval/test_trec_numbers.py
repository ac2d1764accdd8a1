"""Numbers in users' files read as trec_eval's C reads them (ASCII decimals, as strtod takes
them), non-finite ones refused; and every error line that quotes a value from a file stays
short, its file/line prefix whole."""

from __future__ import annotations

import json

import pytest

from eval.datasets import DataError, load_folder, read_qrels
from eval.plumbing.cli import MAX_LINE, error
from eval.plumbing.decimal_text import parse_float, parse_int
from eval.score import main as score_main
from eval.trec import TrecFormatError, read_run

ACCEPTED = {"1": 1.0, "-2.5": -2.5, "+.5": 0.5, "3.": 3.0, "1e3": 1000.0, "1.5E-2": 0.015,
            "0001.0": 1.0, "-0": -0.0}  # fmt: skip
# what Python's float() takes and strtod on ASCII does not (or is not finite)
REFUSED = ["1_000", "١٢", "１２", " 1", "1 ", "\u20071", "0x1p3", "nan", "NaN", "inf",
           "-Infinity", "1e400", "", ".", "e5", "1e", "1.5.2", "--1"]  # fmt: skip


@pytest.mark.parametrize(("text", "value"), ACCEPTED.items())
def test_the_decimal_forms_strtod_reads_are_read(text, value):
    assert parse_float(text) == value


@pytest.mark.parametrize("text", REFUSED)
def test_other_forms_are_refused(text):
    with pytest.raises(ValueError):
        parse_float(text)


@pytest.mark.parametrize("text", ["1_0", "١", "+", "1.0", " 2", "0x2"])
def test_integers_are_ascii_digits(text):
    with pytest.raises(ValueError):
        parse_int(text)
    assert parse_int("-12") == -12 and parse_int("007") == 7


@pytest.mark.parametrize("reader", [parse_float, parse_int])
def test_a_megabyte_of_digits_is_read_or_refused_in_linear_time(reader):
    """A pattern that backtracks (digits, an optional point, digits) took 41 s on 40,000
    digits and never ended on a megabyte; and an integer longer than Python converts is a
    reader's refusal, not Python's message about sys.set_int_max_str_digits."""
    import time

    started = time.monotonic()
    for text in ("9" * 1_000_000 + "x", "9" * 1_000_000):
        try:
            reader(text)
        except ValueError as e:
            assert "set_int_max_str_digits" not in str(e) and len(str(e)) < 80
    assert time.monotonic() - started < 2


@pytest.mark.parametrize("score", ["1_000", "١٢", "nan", "inf", "-inf", "1e400", "0x10"])
def test_a_run_file_score_python_would_take_is_refused_naming_line_and_field(tmp_path, score):
    path = tmp_path / "run.trec"
    path.write_text(f"q1 Q0 d1 1 1.0 t\nq1 Q0 d2 2 {score} t\n")
    with pytest.raises(TrecFormatError) as err:
        read_run(path)
    assert str(err.value).startswith(f"{path} line 2: field 'score': ")
    assert "finite" in str(err.value) or "ASCII" in str(err.value)


@pytest.mark.parametrize("rank", ["1_0", "١", "1.0"])
def test_a_run_file_rank_is_ascii_digits(tmp_path, rank):
    path = tmp_path / "run.trec"
    path.write_text(f"q1 Q0 d1 {rank} 1.0 t\n")
    with pytest.raises(TrecFormatError, match="line 1: field 'rank': not an integer"):
        read_run(path)


@pytest.mark.parametrize("grade", ["1_0", "١", "1.0"])
def test_a_qrels_grade_is_ascii_digits(tmp_path, grade):
    path = tmp_path / "qrels.txt"
    path.write_text(f"q1 0 d1 1\nq1 0 d2 {grade}\n")
    with pytest.raises(DataError, match="line 2: field 'grade': expected an integer grade"):
        read_qrels(path)


BIG = "d" * 1_000_000


def _bounded(message: str, prefix: str) -> None:
    assert message.startswith(prefix), message[:200]
    assert len(message) < 400, len(message)
    assert "1,000,00" in message  # says how long the value was


def test_a_megabyte_id_is_clipped_in_a_run_file_error(tmp_path):
    path = tmp_path / "run.trec"
    path.write_text(f"q1 Q0 d1 1 1.0 t\nq1 Q0 {BIG}\u200b 2 1.0 t\n")
    with pytest.raises(TrecFormatError) as err:
        read_run(path)
    _bounded(str(err.value), f"{path} line 2: field 'docid': ")


def test_a_megabyte_id_is_clipped_in_a_qrels_error(tmp_path):
    path = tmp_path / "qrels.txt"
    path.write_text(f"q1 0 d1 1\nq1 0 {BIG}\u200b 1\n")
    with pytest.raises(DataError) as err:
        read_qrels(path)
    _bounded(str(err.value), f"{path} line 2: field ")


def test_a_megabyte_id_is_clipped_in_a_queries_file_error(tmp_path):
    (tmp_path / "corpus.jsonl").write_text(json.dumps({"id": "d1", "text": "t"}) + "\n")
    (tmp_path / "query.jsonl").write_text(json.dumps({"id": BIG + "\u200b", "text": "q"}) + "\n")
    (tmp_path / "qrels.jsonl").write_text(json.dumps({"q_id": "q1", "p_id": "d1", "score": 1}))
    with pytest.raises(DataError) as err:
        load_folder(tmp_path)
    _bounded(str(err.value), str(tmp_path / "query.jsonl"))


def test_the_error_line_is_bounded_and_keeps_its_prefix(capsys):
    assert error("runs/x/demo/run.trec line 7: field 'docid': " + "y" * 1_000_000 + "\nz") == 2
    line = capsys.readouterr().err
    assert line.count("\n") == 1 and len(line) <= MAX_LINE + 10
    assert line.startswith("error: runs/x/demo/run.trec line 7: field 'docid': yyy")


def test_eval_score_takes_a_task_name_and_names_a_truncated_run_file(tmp_path, capsys):
    run = tmp_path / "run.trec"
    run.write_text("q01 Q0 d001 1 2.0 t\nq01 Q0 d002 2 1.0 t\nq02 Q0 d0")  # cut short
    assert score_main(["--qrels", "demo", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"{run} line 3: field 'docid': expected 6 columns" in err or f"{run} line 3" in err
    assert score_main(["--qrels", "no-such-task", str(run)]) == 2
    err = capsys.readouterr().err
    assert "--qrels no-such-task: no such file or folder, and not a task name (demo" in err


def test_eval_score_qrels_demo_scores_as_the_demo_task(tmp_path, capsys):
    from eval.datasets import load_task

    qrels = load_task("demo", tmp_path).qrels
    qid, docs = next(iter(qrels.items()))
    run = tmp_path / "run.trec"
    run.write_text("".join(f"{qid} Q0 {d} {i} {10 - i}.0 t\n" for i, d in enumerate(docs, 1)))
    assert score_main(["--qrels", "demo", str(run), "--metrics", "P@1"]) == 0
    assert "P@1" in capsys.readouterr().out


def test_eval_score_on_a_megabyte_id_prints_one_short_line(tmp_path, capsys):
    qrels = tmp_path / "qrels.txt"
    qrels.write_text("q1 0 d1 1\n")
    run = tmp_path / "run.trec"
    run.write_text(f"q1 Q0 d1 1 1.0 t\nq1 Q0 {BIG}\x07 2 0.5 t\n")
    assert score_main(["--qrels", str(qrels), str(run)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and len(err) < 400
    assert err.startswith(f"error: {run} line 2: field 'docid': ")
