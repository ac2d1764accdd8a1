"""eval.compare on damaged or mismatched run folders: every JSON/JSONL file it reads names the
file, the line and what is wrong in one line, and a task folder swapped in from another run
is refused, naming the setting it was made under."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from agents.commands.run import main as run_main
from eval.compare import CompareError, compare_runs
from eval.compare.__main__ import main as compare_main
from eval.records import read_records, record_line


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("reading")
    for method in ("bm25q", "lucene"):
        argv = ["--agent", "none", "--dataset", "demo", "--bm25-method", method, "--limit", "3",
                "--runs-dir", str(root / "runs"), "--cache-dir", str(root / "cache"),
                "--run-name", method, "--quiet"]  # fmt: skip
        assert run_main(argv) == 0
    return {m: root / "runs" / m for m in ("bm25q", "lucene")}


@pytest.fixture
def runs(made, tmp_path) -> dict[str, Path]:
    return {m: Path(shutil.copytree(p, tmp_path / m)) for m, p in made.items()}


def _refused(runs: dict[str, Path], *expected: str, capsys) -> None:
    with pytest.raises(CompareError) as info:
        compare_runs([runs["bm25q"], runs["lucene"]])
    message = str(info.value)
    assert "\n" not in message and all(e in message for e in expected), message
    argv = [str(runs["bm25q"]), str(runs["lucene"]), "--out", str(runs["bm25q"].parent / "c")]
    assert compare_main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and all(e in err for e in expected), err


def test_the_runs_compare(runs):
    c = compare_runs([runs["bm25q"], runs["lucene"]])
    assert c.tasks == ["demo"]


def test_a_per_query_file_not_utf8_is_named_with_its_line(runs, capsys):
    path = runs["lucene"] / "demo" / "per_query.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(lines[0] + b'{"query_id": "q\xff"}\n' + b"".join(lines[1:]))
    _refused(runs, f"{path} line 2: not valid UTF-8 (bad byte at column 16)", capsys=capsys)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('{"query_id": "q01", "NDCG@10": "0.5"}', "field 'NDCG@10': expected a finite number"),
        ('{"query_id": "q01", "NDCG@10": true}', "field 'NDCG@10': expected a finite number"),
        ('{"query_id": "q01", "NDCG@10": NaN}', "field 'NDCG@10': expected a finite number"),
        ('{"query_id": 7, "NDCG@10": 0.5}', "field 'query_id': expected a query id, got 7"),
        ("[1, 2]", "not a per-query row (a JSON object)"),
        ('{"query_id": "q01", ', "not valid JSON"),
    ],
)
def test_a_per_query_row_of_the_wrong_shape_names_its_field(runs, capsys, line, expected):
    path = runs["lucene"] / "demo" / "per_query.jsonl"
    with open(path, "a") as f:
        f.write(line + "\n")
    n = len(path.read_text().splitlines())
    _refused(runs, f"{path} line {n}: {expected}", capsys=capsys)


def test_a_query_record_not_utf8_or_of_the_wrong_shape_is_named(runs, capsys):
    path = runs["lucene"] / "demo" / "queries.jsonl"
    original = path.read_bytes()
    n = len(original.splitlines())
    path.write_bytes(original + b'{"query_id": "q\xff\xfe", "ranking": []}\n')
    _refused(runs, f"{path} line {n + 1}: not valid UTF-8", capsys=capsys)
    bad = {"query_id": "q01", "ranking": [["d1", "high"]]}
    path.write_bytes(original + record_line(bad).encode())
    _refused(runs, f"{path} line {n + 1}: field 'ranking': entry 1", capsys=capsys)
    path.write_bytes(original + record_line({"query_id": "q01", "usage": "lots"}).encode())
    _refused(runs, f"{path} line {n + 1}: field 'usage': expected an object", capsys=capsys)
    usage = {"calls": "2", "cost": None}
    path.write_bytes(original + record_line({"query_id": "q01", "usage": usage}).encode())
    _refused(runs, f"{path} line {n + 1}: field 'usage.calls': expected a number", capsys=capsys)


def test_a_torn_record_is_still_skipped_even_inside_a_character(runs):
    path = runs["lucene"] / "demo" / "queries.jsonl"
    before = read_records(path)
    torn = record_line({"query_id": "q99", "query": "é" * 3}).encode()
    path.write_bytes(path.read_bytes() + torn[: torn.index(b"\xc3") + 1] + b"\n")
    assert read_records(path) == before
    compare_runs([runs["bm25q"], runs["lucene"]])


def test_a_task_json_or_config_not_utf8_is_named(runs, capsys):
    info = runs["lucene"] / "demo" / "task.json"
    info.write_bytes(info.read_bytes().replace(b'"task"', b'"t\xffsk"', 1))
    _refused(runs, f"{info} line 2: damaged, not valid UTF-8", capsys=capsys)
    config = runs["lucene"] / "config.json"
    config.write_bytes(b'{\n  "agent": "none",\n  "x": "\xc3("\n}')
    _refused(
        runs, f"{config} line 3: damaged, not valid UTF-8 (bad byte at column 9)", capsys=capsys
    )


def test_a_task_folder_swapped_in_from_another_run_is_refused(runs, capsys):
    target = runs["lucene"] / "demo"
    shutil.rmtree(target)
    shutil.copytree(runs["bm25q"] / "demo", target)
    _refused(
        runs,
        f"{target / 'task.json'}: this task folder was made under another config than "
        f"{runs['lucene'] / 'config.json'}",
        "retriever.bm25.method 'bm25q' here, 'lucene' there",
        capsys=capsys,
    )


def test_task_json_records_the_binding_and_an_older_folder_without_it_compares(runs):
    info = runs["lucene"] / "demo" / "task.json"
    data = json.loads(info.read_text())
    assert data["binding"]["retriever"]["bm25"]["method"] == "lucene"
    assert "runs_dir" not in data["binding"]  # where things go is not what they are
    info.write_text(json.dumps({k: v for k, v in data.items() if k != "binding"}))
    compare_runs([runs["bm25q"], runs["lucene"]])


def test_a_resumed_run_refuses_a_task_folder_from_another_run(made, tmp_path, capsys):
    runs = tmp_path / "runs"
    shutil.copytree(made["lucene"], runs / "lucene")
    shutil.rmtree(runs / "lucene" / "demo")
    shutil.copytree(made["bm25q"] / "demo", runs / "lucene" / "demo")
    argv = ["--agent", "none", "--dataset", "demo", "--bm25-method", "lucene", "--limit", "3",
            "--runs-dir", str(runs), "--cache-dir", str(made["bm25q"].parent.parent / "cache"),
            "--run-name", "lucene", "--quiet"]  # fmt: skip
    assert run_main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "made under another config" in err
    assert "retriever.bm25.method 'bm25q' here, 'lucene' there" in err and "--overwrite" in err
    assert run_main([*argv, "--overwrite"]) == 0  # redone under its own config
    assert (
        json.loads((runs / "lucene" / "demo" / "task.json").read_text())["binding"]["retriever"][
            "bm25"
        ]["method"]
        == "lucene"
    )


def test_a_run_without_a_scored_task_says_which_folder_lacks_what(runs, capsys):
    for name in ("per_query.jsonl", "run.trec"):
        (runs["bm25q"] / "demo" / name).unlink()
    _refused(runs, f"no scored task in {runs['bm25q']}: demo/ holds neither per_query.jsonl "
             "nor run.trec (a run that has not finished a pass?", capsys=capsys)  # fmt: skip
    shutil.rmtree(runs["bm25q"] / "demo")
    _refused(runs, f"no scored task in {runs['bm25q']}: it holds no task folder", capsys=capsys)
