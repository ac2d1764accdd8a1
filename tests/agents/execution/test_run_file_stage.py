"""`python -m agents.rerank RUN.txt --task TASK`: a TREC run file's lists as the first stage.

The round trip: a run folder's own run.trec, reranked as a file, gives what reranking the run
folder gives (the same prompts, lists, figures and files). Then each bad input is refused
with its one line before any model call, the queries a file lacks are scored as the
evaluator scores a missing query, ties are ordered as trec_eval orders them, a resume over a
changed file is refused, and a sweep takes a run file as a first stage.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import agents.execution.whole_run
from agents.commands.rerank import main as rerank_main
from agents.commands.run import main as run_main
from agents.commands.sweep import main as sweep_main
from agents.commands.trace import main as trace_main
from agents.config.sweep_config import SweepError
from agents.config.sweep_file import load_sweep
from agents.config.sweep_grid import cells
from agents.llm import scripted
from eval.compare import compare_runs
from eval.datasets import load_folder
from eval.evaluate import evaluate_run
from eval.records import read_records
from eval.runs import RunFolder
from eval.trec import read_run

# A task whose BM25 lists have no tied scores: a run folder hands its stages the agent's
# order, a run file trec_eval's, and the two agree only where no scores tie.
DOCS = {
    "d1": "Insulin resistance drives type 2 diabetes mellitus and raises hepatic glucose output.",
    "d2": "Metformin lowers hepatic glucose production in diabetes.",
    "d3": "Aspirin irreversibly inhibits platelet cyclooxygenase.",
    "d4": "Statins inhibit HMG-CoA reductase and lower cholesterol in the liver.",
    "d5": "Warfarin antagonises vitamin K dependent clotting factors made by the liver.",
    "d6": "Glucose production by the liver rises in fasting; glucagon drives it.",
    "d7": "Platelets aggregate when thromboxane is made; aspirin blocks platelet thromboxane.",
    "d8": "Ezetimibe lowers cholesterol absorption; cholesterol falls further with statins.",
}
QUERIES = {
    "q1": "Which drug lowers glucose production by the liver in diabetes?",
    "q2": "How does aspirin act on platelets?",
    "q3": "What lowers cholesterol?",
}
QRELS = [("q1", "d2", 1), ("q2", "d3", 2), ("q2", "d7", 1), ("q3", "d4", 1), ("q3", "d8", 2)]

# the listwise stage over every window of two, moving up one at a time: order-sensitive
STAGES = ("--rerank", "llm-listwise", "--rerank-window", "2", "--rerank-step", "1",
          "--rerank-model", "scripted/x", "--cache", "off")  # fmt: skip
STAGE_FOLDER = "rerank-1-llm-listwise"
RERANKED = "reranked-x-llm-listwise,window=2,step=1"

GOOD = """q1 Q0 d2 1 1.5 run
q1 Q0 d6 2 1.0 run
q2 Q0 d7 1 1.2 run
q2 Q0 d3 2 1.1 run
q3 Q0 d8 1 0.9 run
q3 Q0 d4 2 0.8 run
"""


class Prompts:
    """The scripted model: every window reversed; the prompts it was sent, kept."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    def __call__(self, messages: list[dict], params: dict) -> str:
        self.sent.append(json.dumps(messages))
        k = sum(1 for m in messages if m["role"] == "user" and m["content"][:1] == "[")
        return " > ".join(f"[{i}]" for i in range(k, 0, -1))


@pytest.fixture
def task_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "cases"
    folder.mkdir()
    for name, rows in (
        ("corpus.jsonl", [{"id": i, "text": t} for i, t in DOCS.items()]),
        ("query.jsonl", [{"id": i, "text": t} for i, t in QUERIES.items()]),
        ("qrels.jsonl", [{"q_id": q, "p_id": d, "score": s} for q, d, s in QRELS]),
    ):
        (folder / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


@pytest.fixture
def no_retriever(monkeypatch):
    """Any retriever build is a failure: a run file's lists are the first stage."""

    def refuse(*args, **kwargs):
        raise AssertionError("a retriever was built")

    monkeypatch.setattr(agents.execution.whole_run, "build_retriever", refuse)


def rerank_file(path: Path, task_dir: Path, tmp_path: Path, *flags: str) -> int:
    return rerank_main([str(path), "--task", str(task_dir), *STAGES, "--runs-dir",
                        str(tmp_path / "runs"), "--cache-dir", str(tmp_path / "cache"),
                        "--quiet", *flags])  # fmt: skip


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def summary(run: Path) -> dict:
    return json.loads((run / "cases" / "metrics.json").read_text())


def test_a_run_file_reranks_as_the_run_folder_it_was_written_from(
    tmp_path, task_dir, capsys, monkeypatch
):
    runs, cache = tmp_path / "runs", str(tmp_path / "cache")
    assert run_main(["--agent", "none", "--dataset", str(task_dir), "--runs-dir", str(runs),
                     "--cache-dir", cache, "--run-name", "bm25", "--quiet"]) == 0  # fmt: skip
    source = runs / "bm25"
    trec = tmp_path / "published" / "bm25_top100.txt"
    trec.parent.mkdir()
    shutil.copyfile(source / "cases" / "run.trec", trec)
    lists = read_run(trec)
    assert all(len({np.float32(s) for s in d.values()}) == len(d) for d in lists.values())
    assert all(len(d) > 1 for d in lists.values())  # every query has a window to reverse

    def refuse(*args, **kwargs):
        raise AssertionError("a retriever was built")

    monkeypatch.setattr(agents.execution.whole_run, "build_retriever", refuse)

    by_folder = Prompts()
    provider = scripted.install(by_folder)
    assert rerank_main([str(source), *STAGES, "--cache-dir", cache, "--quiet"]) == 0
    folder_run = runs / "bm25-reranked-llm-listwise,window=2,step=1"
    assert provider.calls == len(by_folder.sent) > 0
    by_file = Prompts()
    provider = scripted.install(by_file)
    capsys.readouterr()
    assert rerank_file(trec, task_dir, tmp_path) == 0
    file_run = runs / f"bm25_top100-cases-{RERANKED}"
    assert file_run.is_dir()
    assert sorted(by_file.sent) == sorted(by_folder.sent)  # the same windows, the same prompts

    mine, theirs = summary(file_run), summary(folder_run)
    assert mine["stages"] == theirs["stages"] and mine["metrics"] == theirs["metrics"]
    assert mine["stages"]["agent"]["NDCG@10"] != mine["metrics"]["NDCG@10"]  # it reranked
    for part in ("run.trec", "per_query.jsonl", f"{STAGE_FOLDER}/run.trec",
                 f"{STAGE_FOLDER}/per_query.jsonl"):  # fmt: skip
        assert (file_run / "cases" / part).read_bytes() == (
            folder_run / "cases" / part
        ).read_bytes(), part
    assert (file_run / "cases" / "run.trec").read_bytes() == trec.read_bytes()
    stage = read_records(file_run / "cases" / STAGE_FOLDER / "queries.jsonl")
    expected = read_records(folder_run / "cases" / STAGE_FOLDER / "queries.jsonl")
    assert {q: r["ranking"] for q, r in stage.items()} == {
        q: r["ranking"] for q, r in expected.items()
    }

    config = json.loads((file_run / "config.json").read_text())
    assert config["run_file"] == str(trec.resolve()) and config["agent"] == "none"
    assert config["run_file_sha256"] == hashlib.sha256(trec.read_bytes()).hexdigest()
    assert config["source_run"] is None and config["dataset"] == str(task_dir)
    assert mine["run_file"]["sha256"] == config["run_file_sha256"]
    first = read_records(file_run / "cases" / "queries.jsonl")
    assert [s["node"] for s in first["q1"]["steps"]] == ["run-file"]
    assert first["q1"]["ranking"] == [[d, s] for d, s in lists["q1"].items()]

    out = capsys.readouterr().out
    assert (
        f"cases: NDCG@10 = {mine['metrics']['NDCG@10']:.5f} (first stage, bm25_top100.txt: "
        f"{mine['stages']['agent']['NDCG@10']:.5f}); LLM calls {provider.calls}"
    ) in out
    assert trace_main([str(file_run), "q1"]) == 0
    shown = capsys.readouterr().out
    assert "run-file" in shown and f"stage {STAGE_FOLDER}" in shown and "window positions" in shown
    comparison = compare_runs([folder_run, file_run], cache_dir=Path(cache))
    (base, other) = comparison.labels
    assert other.startswith("run:bm25_top100 ") and other.endswith("rerank:llm-listwise")
    assert comparison.scores[other] == comparison.scores[base]


@pytest.mark.parametrize(
    "line_no, text, field, problem",
    [
        (3, "q2 Q0 d7 1 1.2", "tag", "expected 6 columns (qid Q0 docid rank score tag), got 5"),
        (3, "q2 Q0 d7 1 high run", "score", "expected a number (ASCII digits, '.', an "
         "exponent), got 'high'"),
        (3, "q2 Q0 d99 1 1.2 run", "docid", "'d99' is not in the corpus of task cases"),
        (3, "q9 Q0 d7 1 1.2 run", "qid", "'q9' is not a query of task cases"),
        (4, "q2 Q0 d7 2 1.1 run", "docid",
         "'d7' listed twice for query 'q2'; duplicates max keeps each pair's highest score"),
    ],
    ids=["columns", "score", "unknown doc", "unknown query", "duplicate pair"],
)  # fmt: skip
def test_each_bad_line_is_refused_in_one_line_naming_file_line_and_field(
    tmp_path, task_dir, capsys, line_no, text, field, problem
):
    provider = scripted.install(Prompts())
    lines = GOOD.splitlines()
    lines[line_no - 1] = text
    trec = write(tmp_path / "bad.trec", "\n".join(lines) + "\n")
    assert rerank_file(trec, task_dir, tmp_path) == 2
    assert capsys.readouterr().err == (
        f"error: {trec} line {line_no}: field '{field}': {problem}\n"
    )
    assert provider.calls == 0 and not (tmp_path / "runs").exists()


def test_duplicates_max_keeps_each_repeated_pair_at_its_highest_score(
    tmp_path, task_dir, caplog, capsys, no_retriever
):
    """ReasonRank's runs of tasks whose corpus repeats a doc id list that id twice."""
    scripted.install(Prompts())
    trec = write(tmp_path / "repeats.trec", GOOD + "q1 Q0 d6 3 1.7 run\nq2 Q0 d3 3 0.2 run\n")
    assert rerank_file(trec, task_dir, tmp_path) == 2  # as trec_eval refuses it
    assert "line 7: field 'docid': 'd6' listed twice for query 'q1'" in capsys.readouterr().err
    caplog.clear()
    assert rerank_file(trec, task_dir, tmp_path, "--duplicates", "max") == 0
    said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert said == [f"{trec}: 2 lines repeat a (qid, docid) pair listed before (the first: "
                    "line 7); each pair keeps its highest score (duplicates max)"]  # fmt: skip
    run = tmp_path / "runs" / f"repeats-cases-duplicates=max-{RERANKED}"
    first = read_records(run / "cases" / "queries.jsonl")
    assert first["q1"]["ranking"] == [["d6", 1.7], ["d2", 1.5]]
    assert first["q2"]["ranking"] == [["d7", 1.2], ["d3", 1.1]]
    assert json.loads((run / "config.json").read_text())["run_file_duplicates"] == "max"
    assert summary(run)["run_file"]["repeated_lines"] == 2
    folder = tmp_path / "runs" / "bm25"
    folder.mkdir()
    assert rerank_main([str(folder), *STAGES, "--duplicates", "max"]) == 2
    assert capsys.readouterr().err == "error: --duplicates: a run folder has no run file to read\n"


def test_a_wrong_source_or_task_is_refused_in_one_line(tmp_path, task_dir, capsys):
    provider = scripted.install(Prompts())
    trec = write(tmp_path / "good.trec", GOOD)
    folder = tmp_path / "runs" / "somewhere"
    folder.mkdir(parents=True)
    cases = [
        ([str(trec), *STAGES], f"{trec}: a TREC run file; name the task it ranks with --task"),
        ([str(folder), "--task", str(task_dir), *STAGES],
         f"{folder}: a run folder, whose task is its own; drop --task"),
        ([str(folder), "--depth", "5", *STAGES],
         "--depth: a run folder's first stage keeps its own settings"),
        ([str(tmp_path / "none.trec"), "--task", str(task_dir), *STAGES],
         f"{tmp_path / 'none.trec'}: no such run file"),
        ([str(trec), "--task", f"{task_dir},demo", *STAGES],
         f"run file {trec}: a run file ranks one task; --task {task_dir},demo names 2"),
        ([str(write(tmp_path / "empty.trec", "")), "--task", str(task_dir), *STAGES],
         "empty.trec: ranks none of the 3 queries of task cases this run answers (an empty "
         "run file)"),
    ]  # fmt: skip
    for argv, expected in cases:
        assert rerank_main([*argv, "--cache-dir", str(tmp_path / "cache"), "--quiet"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and err.count("\n") == 1 and expected in err, err
    assert provider.calls == 0


def test_queries_the_file_lacks_are_scored_as_missing_and_said_once(
    tmp_path, task_dir, caplog, no_retriever
):
    provider = scripted.install(Prompts())
    trec = write(tmp_path / "two.trec", "".join(x + "\n" for x in GOOD.splitlines()[:4]))
    qrels = load_folder(task_dir).qrels
    worth = {"zero": "score 0", "present": "are left out of the means"}
    for missing in ("zero", "present"):
        caplog.clear()
        name = f"missing-{missing}"
        flags = ("--missing", missing, "--run-name", name)
        assert rerank_file(trec, task_dir, tmp_path, *flags) == 0
        said = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert said == [
            f"{trec}: no line for 1 of the 3 queries of task cases (q3); as in trec_eval they "
            f"are missing from the run, and with --missing {missing} they {worth[missing]}"
        ]
        run = tmp_path / "runs" / name
        first = summary(run)["stages"]["agent"]
        # what eval.score says of the same file under the same rule
        assert first == evaluate_run(qrels, read_run(trec), missing=missing).mean
        assert summary(run)["run_file"]["missing"] == ["q3"]
        assert set(read_records(run / "cases" / "queries.jsonl")) == {"q1", "q2"}
        assert set(read_records(run / "cases" / STAGE_FOLDER / "queries.jsonl")) == {"q1", "q2"}
        per_query = [json.loads(x) for x in (run / "cases" / "per_query.jsonl").open()]
        scored = {row.get("query_id") or row.get("qid") for row in per_query}
        assert ("q3" in scored) == (missing == "zero")
    assert provider.calls > 0


def test_ties_are_ordered_as_trec_eval_orders_them_and_cut_at_depth(
    tmp_path, task_dir, no_retriever
):
    scripted.install(Prompts())
    # the rank column says d1, d2, d6; trec_eval ignores it and breaks the tie by doc id
    # descending (trec_eval's form_res_rels.c, comp_sim_docno); q2's lines are out of order
    trec = write(tmp_path / "ties.trec", "q1 Q0 d1 1 1.0 r\nq1 Q0 d2 2 1.0 r\nq1 Q0 d6 3 1.0 r\n"
                 "q2 Q0 d3 1 0.5 r\nq2 Q0 d7 2 2.5 r\nq2 Q0 d5 3 1.5 r\n")  # fmt: skip
    orders = {"trec": ["d6", "d2", "d1"], "ascending": ["d1", "d2", "d6"]}
    for ties, order in orders.items():
        name = f"ties-{ties}"
        assert rerank_file(trec, task_dir, tmp_path, "--ties", ties, "--run-name", name) == 0
        task = tmp_path / "runs" / name / "cases"
        first = read_records(task / "queries.jsonl")
        assert [d for d, _ in first["q1"]["ranking"]] == order
        assert [d for d, _ in first["q2"]["ranking"]] == ["d7", "d5", "d3"]
        # the stage was handed that order: its last window (it starts at the bottom) is 1-2
        windows = read_records(task / STAGE_FOLDER / "queries.jsonl")["q1"]["steps"]
        assert windows[-1]["window"] == [0, 2] and windows[-1]["doc_ids"] == [order[0], order[2]]
    assert rerank_file(trec, task_dir, tmp_path, "--depth", "2", "--run-name", "depth2") == 0
    first = read_records(tmp_path / "runs" / "depth2" / "cases" / "queries.jsonl")
    assert {q: [d for d, _ in r["ranking"]] for q, r in first.items()} == {
        "q1": ["d6", "d2"], "q2": ["d7", "d5"],
    }  # fmt: skip


def test_order_file_keeps_the_files_lines_as_reasonranks_loader_does(
    tmp_path, task_dir, no_retriever, capsys
):
    # ReasonRank's run_rank_llm.py L213-232 appends each line's candidate in file order
    scripted.install(Prompts())
    trec = write(tmp_path / "ties.trec", "q1 Q0 d1 1 1.0 r\nq1 Q0 d2 2 1.0 r\nq1 Q0 d6 3 1.0 r\n"
                 "q2 Q0 d3 1 0.5 r\nq2 Q0 d7 2 2.5 r\nq2 Q0 d5 3 1.5 r\n")  # fmt: skip
    assert rerank_file(trec, task_dir, tmp_path, "--order", "file", "--run-name", "lines") == 0
    assert rerank_file(trec, task_dir, tmp_path, "--run-name", "scores") == 0
    task = tmp_path / "runs" / "lines" / "cases"
    first = read_records(task / "queries.jsonl")
    assert {q: [d for d, _ in r["ranking"]] for q, r in first.items()} == {
        "q1": ["d1", "d2", "d6"], "q2": ["d3", "d7", "d5"],
    }  # fmt: skip
    windows = read_records(task / STAGE_FOLDER / "queries.jsonl")["q2"]["steps"]
    assert windows[0]["doc_ids"] == ["d7", "d5"]  # the bottom two lines, as listed
    # the first stage is scored in the order the rerank read: the file's lines (the tied
    # and the out-of-order scores set just below the one before them), not trec_eval's
    lines, scores = summary(tmp_path / "runs" / "lines"), summary(tmp_path / "runs" / "scores")
    qrels = load_folder(task_dir).qrels
    as_listed = {"q1": {"d1": 3.0, "d2": 2.0, "d6": 1.0}, "q2": {"d3": 3.0, "d7": 2.0, "d5": 1.0}}
    assert lines["stages"]["agent"] == evaluate_run(qrels, as_listed).mean
    assert scores["stages"]["agent"] == evaluate_run(qrels, read_run(trec)).mean
    assert lines["stages"]["agent"]["NDCG@10"] != scores["stages"]["agent"]["NDCG@10"]
    assert "as the file lists them (4 scores of the task set just below" in json.dumps(first)
    config = json.loads((tmp_path / "runs" / "lines" / "config.json").read_text())
    assert config["run_file_order"] == "file"
    capsys.readouterr()
    folder = tmp_path / "runs" / "scores"
    assert rerank_main([str(folder), *STAGES, "--order", "file", "--quiet"]) == 2
    assert "--order: a run folder has no run file to read" in capsys.readouterr().err


def test_a_resume_over_a_changed_file_is_refused(tmp_path, task_dir, capsys, no_retriever):
    provider = scripted.install(Prompts())
    trec = write(tmp_path / "good.trec", GOOD)
    assert rerank_file(trec, task_dir, tmp_path) == 0
    calls = provider.calls
    run = tmp_path / "runs" / f"good-cases-{RERANKED}"
    assert rerank_file(trec, task_dir, tmp_path) == 0  # the same file: finished, read back
    assert provider.calls == calls
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file() and p.name != ".lock"}
    trec.write_text(GOOD.replace("1.5", "0.1"))  # q1's top document falls to the bottom
    capsys.readouterr()
    assert rerank_file(trec, task_dir, tmp_path) == 2
    assert capsys.readouterr().err == (
        f"error: {run} holds a run with another configuration (differs in: run_file_sha256); "
        "pass --overwrite to replace it or --run-name for a new one\n"
    )
    assert provider.calls == calls
    assert before == {p: p.read_bytes() for p in before}


@pytest.mark.slow
def test_a_sweep_takes_a_run_file_as_a_first_stage(tmp_path, task_dir, no_retriever):
    provider = scripted.install(Prompts())
    trec = write(tmp_path / "published" / "e5_top100.txt", GOOD)
    config = write(tmp_path / "sweep.toml", f"""
output = "out"
cache_dir = "cache"
models = ["scripted/x"]
reranks = [[], ["llm-listwise,window=2,step=1"]]
run_files = [{{ file = "published/e5_top100.txt", dataset = "{task_dir}" }}]

[options]
quiet = true
cache = "off"
""")  # fmt: skip
    grid, notes = cells(load_sweep(config))
    names = ["e5_top100-cases", "e5_top100-cases-reranked-x-base-llm-listwise,window=2,step=1"]
    assert [c.name for c in grid] == names and notes == []
    assert all(c.config.run_file == str(trec.resolve()) for c in grid)
    assert sweep_main([str(config)]) == 0
    runs = tmp_path / "out" / "runs"
    alone, reranked = (summary(runs / n) for n in names)
    qrels = load_folder(task_dir).qrels
    assert alone["metrics"] == evaluate_run(qrels, read_run(trec)).mean
    assert reranked["stages"]["agent"] == alone["metrics"]
    # no LLM was called, yet a file's lists come from a system unseen here (e5-mistral is one)
    assert RunFolder(runs / names[0]).info() == {"label": "run:e5_top100", "llm_free": False}
    swept_calls = provider.calls
    # the sweep's cell is the command line's rerank of the same file
    assert rerank_file(trec, task_dir, tmp_path, "--run-name", "cli") == 0
    assert provider.calls == 2 * swept_calls
    assert summary(tmp_path / "runs" / "cli")["stages"] == reranked["stages"]
    assert (tmp_path / "out" / "comparison" / "report.html").is_file()

    # the file alone names the sweep's one dataset; with two, it must say which
    text = config.read_text().replace(
        f'{{ file = "published/e5_top100.txt", dataset = "{task_dir}" }}',
        '"published/e5_top100.txt"',
    )
    config.write_text(text.replace("models =", f'datasets = ["{task_dir}"]\nmodels ='))
    assert [c.name for c in cells(load_sweep(config))[0]] == names
    # a file that repeats pairs is read as --duplicates max reads it
    entry = f'{{ file = "published/e5_top100.txt", dataset = "{task_dir}", duplicates = "max" }}'
    text = config.read_text()
    config.write_text(text.replace('"published/e5_top100.txt"', entry))
    swept = cells(load_sweep(config))[0]
    assert [c.config.run_file_duplicates for c in swept] == ["max", "max"]
    assert swept[0].name == "e5_top100-cases-duplicates=max"
    config.write_text(text)
    config.write_text(config.read_text().replace(f'["{task_dir}"]', f'["{task_dir}", "demo"]'))
    with pytest.raises(SweepError, match=r"key 'run_files': 'published/e5_top100.txt': a run file "
                                         r"ranks one task and datasets lists 2"):  # fmt: skip
        load_sweep(config)


@pytest.mark.parametrize(
    "entry, problem",
    [
        ('{ file = "e5.txt", dataset = "r2med" }',
         "'r2med' names several tasks; a run file ranks one"),
        ('{ file = "absent.txt", dataset = "demo" }', "absent.txt: no such run file"),
        ('{ file = "e5.txt", task = "demo" }',
         "expected a file or {file = '...', dataset = '...'}"),
        ('{ file = "e5.txt", dataset = "demo" }, { file = "e5.txt", dataset = "demo" }',
         "lists two run files named e5.txt for demo"),
        ('{ file = "e5.txt", dataset = "demo", duplicates = "first" }',
         "duplicates 'first': one of refuse, max"),
        ('{ file = "e5.txt", dataset = "demo", order = "rank" }',
         "order 'rank': one of score, file"),
    ],
    ids=["several tasks", "no file", "unknown key", "twice", "duplicates", "order"],
)  # fmt: skip
def test_a_bad_run_files_entry_is_one_line_naming_the_key(tmp_path, capsys, entry, problem):
    write(tmp_path / "e5.txt", GOOD)
    config = write(tmp_path / "sweep.toml", f"run_files = [{entry}]\n")
    assert sweep_main([str(config)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {config}: key 'run_files': ") and err.count("\n") == 1
    assert problem in err, err
