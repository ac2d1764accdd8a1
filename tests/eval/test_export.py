"""`eval.export`: a run folder's files, read by ir-measures and ranx, give its metrics.json.

Real run folders are exported: the `none` agent over the demo and over the synthetic task, and
hyde (scripted LLM) with a listwise rerank stage over a small task with the cases that
separate tools: two twin documents tied in score (one relevant), a query whose ranking is
empty, one whose generation fails and one without judgements, under ``--missing zero`` and
``present``. ir-measures (its own measure names, pytrec_eval and its msmarco provider behind
them) and ranx (``Qrels.from_file``, ``Run.from_file``, ``ranx.evaluate``) must give every
figure of metrics.json to its 5 decimals, and within 1e-12 unrounded.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import ir_measures
import litellm
import numpy as np
import pytest
import ranx

from agents.commands.run import main as run_main
from agents.llm import scripted
from eval.evaluate import strictly_decreasing
from eval.export import (
    MANIFEST_FILE,
    ExportedFile,
    explicit_order,
    export_run,
    ir_measures_figures,
    main,
    measure_names,
)
from eval.plumbing.extras import MissingExtra
from eval.runs import StageFolder
from tests.helpers import DOCS as TOY_DOCS

DOCS = {
    **TOY_DOCS,
    "d6": TOY_DOCS["d4"],  # d4's twin: the two always tie
    "d7": "Beta blockers slow the heart rate.",
    "d8": "Loop diuretics increase sodium excretion.",
}
QUERIES = {
    "q1": "Which drug lowers glucose production by the liver?",
    "q2": "How does aspirin act on platelets?",
    "q3": "What lowers cholesterol?",  # d4 and d6 tie; d6 is the relevant one
    "q4": "Which anticoagulant needs INR monitoring?",  # its passage matches nothing
    "q5": "What slows a racing heart?",  # its generation fails
    "q6": "A question about sodium.",  # judged, but with nothing relevant
}
QRELS = [("q1", "d2", 1), ("q2", "d3", 2), ("q2", "d1", 1), ("q3", "d6", 1), ("q4", "d5", 1),
         ("q5", "d7", 1), ("q6", "d1", 0)]  # fmt: skip
PASSAGES = {
    "glucose": "Metformin lowers glucose production in diabetes.",
    "aspirin": "Aspirin inhibits platelet cyclooxygenase; insulin too.",
    "cholesterol": "Statins lower cholesterol.",
    "anticoagulant": "xyzzy plugh frobozz",
    "sodium": "Loop diuretics and sodium.",
}


def _respond(messages: list[dict], params: dict) -> str:
    text = messages[-1]["content"]
    if re.search(r"^\[2\]", text, re.MULTILINE):  # the listwise stage: swap the first two
        return "[2] > [1]"
    if "racing heart" in text:  # refused, not retried: the query fails, the run goes on
        raise litellm.BadRequestError("scripted failure", "scripted/test", "scripted")
    return next(p for word, p in PASSAGES.items() if word in text)


def _quiet(call) -> int:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return call()


@pytest.fixture(scope="module")
def runs(tmp_path_factory, bm25_runs, synthetic_dir) -> dict[str, Path]:
    """The run folders exported here, by name."""
    root = tmp_path_factory.mktemp("export")
    common = ["--runs-dir", str(root / "runs"), "--cache-dir", str(root / "cache"), "--quiet"]
    assert run_main(["--agent", "none", "--dataset", "demo", "--run-name", "demo", *common]) == 0
    task = root / "toy"
    task.mkdir()
    for name, rows in {
        "corpus.jsonl": [{"id": i, "text": t} for i, t in DOCS.items()],
        "query.jsonl": [{"id": i, "text": t} for i, t in QUERIES.items()],
        "qrels.jsonl": [{"q_id": q, "p_id": d, "score": s} for q, d, s in QRELS],
    }.items():
        (task / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    scripted.install(_respond)
    # present: also ties by doc id ascending, and the first 5 queries only (q6 left out)
    for missing, more in (("zero", []), ("present", ["--ties", "ascending", "--limit", "5"])):
        argv = ["--agent", "hyde", "--dataset", str(task), "--model", "scripted/test",
                "--rerank", "llm-listwise,depth=3", "--missing", missing,
                "--run-name", f"toy-{missing}", *more, *common]  # fmt: skip
        assert _quiet(lambda argv=argv: run_main(argv)) == 1  # q5 failed
    return {
        "demo": root / "runs" / "demo",
        "synthetic": bm25_runs(synthetic_dir)[0]["bm25q"],
        "toy-zero": root / "runs" / "toy-zero",
        "toy-present": root / "runs" / "toy-present",
    }


@pytest.fixture(scope="module")
def exported(runs, tmp_path_factory) -> dict[str, tuple[Path, list[ExportedFile]]]:
    out = tmp_path_factory.mktemp("exported")
    return {name: (out / name, export_run(path, out / name)) for name, path in runs.items()}


def _unrounded(run_dir: Path, f: ExportedFile) -> dict[str, float]:
    """Our means before rounding: per_query.jsonl re-averaged as `eval.evaluate` averages."""
    stage = run_dir / f.task if f.stage == "agent" else run_dir / f.task / f.stage
    rows = StageFolder(stage).per_query()
    return {m: sum(r[m] for r in rows.values()) / len(rows) for m in f.figures}


NAMES = ["demo", "synthetic", "toy-zero", "toy-present"]


def test_the_export_holds_every_stage_and_what_was_scored(runs, exported):
    layout = {name: [(f.task, f.stage) for f in files] for name, (_, files) in exported.items()}
    assert layout["demo"] == [("demo", "agent")]
    assert layout["toy-zero"] == [("toy", "agent"), ("toy", "rerank-1-llm-listwise")]
    zero = {f.stage: f for f in exported["toy-zero"][1]}
    present = {f.stage: f for f in exported["toy-present"][1]}
    # zero: the 5 judged queries (the grade-0-only q6 included); failed q5 and empty q4 unranked
    assert (zero["agent"].queries, zero["agent"].unranked) == (6, 2)
    # present: only the queries the stage ranked are in its qrels file (of the first 5)
    assert (present["agent"].queries, present["agent"].unranked) == (3, 0)
    qrels = (exported["toy-present"][0] / present["agent"].qrels).read_text().split("\n")
    assert {line.split()[0] for line in qrels if line} == {"q1", "q2", "q3"}
    assert zero["agent"].moved > 0  # the twins' tie, made explicit
    assert present["agent"].moved == 0  # ties=ascending wrote scores strictly decreasing
    manifest = json.loads((exported["toy-zero"][0] / MANIFEST_FILE).read_text())
    first = manifest["files"][0]
    assert first["figures"][1] == {"ours": "NDCG@10", "value": zero["agent"].figures["NDCG@10"],
                                   "ir_measures": "nDCG@10", "ranx": "ndcg@10"}  # fmt: skip
    assert manifest["ties"] == "trec" and manifest["missing"] == "zero"


@pytest.mark.parametrize("name", NAMES)
def test_ir_measures_gives_our_figures(runs, exported, name):
    out, files = exported[name]
    for f in files:
        theirs = ir_measures_figures(out, f)
        assert len(theirs) == 26
        assert {m: round(v, 5) for m, v in theirs.items()} == f.figures, f.run
        ours = _unrounded(runs[name], f)
        assert max(abs(theirs[m] - ours[m]) for m in ours) < 1e-12, f.run


def _ranx(qrels: Path, run: Path, metrics: list[str]) -> dict[str, float]:
    names = {m: measure_names(m)[1] for m in metrics}
    qrels_read, run_read = ranx.Qrels.from_file(str(qrels)), ranx.Run.from_file(str(run))
    theirs = ranx.evaluate(qrels_read, run_read, list(names.values()), make_comparable=True)
    if not isinstance(theirs, dict):  # ranx returns one metric's mean bare
        theirs = {r: theirs for r in names.values()}
    return {m: float(theirs[r]) for m, r in names.items()}


# ranx compiles its numba functions in each process (about 25 s here, its on-disk cache helps
# little), so its checks are one test
@pytest.mark.slow
def test_ranx_gives_our_figures_and_its_tie_order_is_why_the_export_rewrites_ties(runs, exported):
    for name in NAMES:
        out, files = exported[name]
        for f in files:
            theirs = _ranx(out / f.qrels, out / f.run, list(f.figures))
            assert {m: round(v, 5) for m, v in theirs.items()} == f.figures, f.run
            ours = _unrounded(runs[name], f)
            assert max(abs(theirs[m] - ours[m]) for m in ours) < 1e-12, f.run
    # on the run folder's own file, where BM25 leaves 6,957 tied scores, ranx orders tied
    # documents as its sort leaves them (neither doc id order), and its MRR moves
    out, [f] = exported["synthetic"]
    raw = _ranx(out / f.qrels, runs["synthetic"] / "synthetic" / "run.trec", ["MRR"])
    assert f.moved == 6957 and (f.figures["MRR"], round(raw["MRR"], 5)) == (0.64625, 0.64626)


def test_the_run_folders_own_file_ranks_ties_otherwise_for_ir_measures_rr(runs, exported):
    """Why the export rewrites tied scores: ir-measures' RR@k (its msmarco provider) breaks
    ties by doc id ascending and puts d4 above the relevant d6 in q3, where we (trec_eval)
    put d6 first; on the exported file it gives our figure."""
    qrels = list(ir_measures.read_trec_qrels(str(exported["toy-zero"][0] / "toy/qrels.trec")))
    raw = list(ir_measures.read_trec_run(str(runs["toy-zero"] / "toy" / "run.trec")))
    out = exported["toy-zero"][0] / "toy" / "run.trec"
    fixed = list(ir_measures.read_trec_run(str(out)))
    rr = ir_measures.parse_measure("RR@10")
    by_query = {m.query_id: m.value for m in ir_measures.iter_calc([rr], qrels, raw)}
    assert by_query["q3"] == 0.5
    assert {m.query_id: m.value for m in ir_measures.iter_calc([rr], qrels, fixed)}["q3"] == 1.0
    ours = StageFolder(runs["toy-zero"] / "toy").per_query()
    assert ours["q3"]["MRR@10"] == 1.0


def test_on_the_run_folders_own_file_ir_measures_rr_breaks_ties_otherwise(runs, exported):
    """The same over a whole task: the synthetic BM25 run ties often, and ir-measures' RR@10
    on its run.trec is not our MRR@10; on the export it is."""
    out, [f] = exported["synthetic"]
    qrels = list(ir_measures.read_trec_qrels(str(out / f.qrels)))
    rr = ir_measures.parse_measure("RR@10")
    for run, expected in ((runs["synthetic"] / "synthetic" / "run.trec", 0.64628),
                          (out / f.run, 0.63978)):  # fmt: skip
        read = list(ir_measures.read_trec_run(str(run)))
        assert round(ir_measures.calc_aggregate([rr], qrels, read)[rr], 5) == expected
    assert f.figures["MRR@10"] == 0.63978


def test_explicit_order_keeps_our_ranking_with_strictly_decreasing_float32_scores():
    # c ties a and b in float32 only; d is below all
    run = {"q": {"a": 1.0, "b": 1.0, "c": 1.0 + 1e-12, "d": 0.5, "e": 0.5}}
    for ties in ("trec", "ascending"):
        fixed = explicit_order(run, ties)["q"]
        assert list(fixed) == list(strictly_decreasing(run, ties)["q"])
        seen = [np.float32(s) for s in fixed.values()]
        assert all(x > y for x, y in zip(seen, seen[1:], strict=False))
        assert sorted(fixed, key=lambda d: -fixed[d]) == list(fixed)  # in 64 bits too
    assert list(explicit_order(run, "trec")["q"]) == ["c", "b", "a", "e", "d"]


def test_measure_names():
    assert measure_names("NDCG@10") == ("nDCG@10", "ndcg@10")
    assert measure_names("MAP@100") == ("AP@100", "map@100")
    assert measure_names("Recall@25") == ("R@25", "recall@25")
    assert measure_names("P@1") == ("P@1", "precision@1")
    assert measure_names("MRR@10") == ("RR@10", "mrr@10")
    assert measure_names("MRR") == ("RR", "mrr")


def test_the_command_exports_and_checks(runs, tmp_path, capsys):
    assert main([str(runs["toy-zero"]), "--out", str(tmp_path / "x"), "--check"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1:] == ["toy/run.trec: 26 of 26 figures equal",
                       "toy/rerank-1-llm-listwise/run.trec: 26 of 26 figures equal"]  # fmt: skip
    assert (tmp_path / "x" / MANIFEST_FILE).is_file()


def test_without_ir_measures_the_check_is_one_line_naming_the_extra(
    runs, exported, tmp_path, monkeypatch, capsys
):
    monkeypatch.setitem(sys.modules, "ir_measures", None)
    out, files = exported["demo"]
    with pytest.raises(MissingExtra, match=re.escape("pip install 'r2med-agents[ir-measures]'")):
        ir_measures_figures(out, files[0])
    assert main([str(runs["demo"]), "--out", str(tmp_path / "x"), "--check"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "r2med-agents[ir-measures]" in err[0], err
    # the export itself needs no extra
    assert main([str(runs["demo"]), "--out", str(tmp_path / "y")]) == 0


def test_bad_input_is_one_line(runs, tmp_path, capsys):
    (tmp_path / "plain").mkdir()
    assert main([str(tmp_path / "plain"), "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"error: {tmp_path / 'plain'}: not a run folder (no config.json)"]
    inside = runs["demo"] / "exported"
    assert main([str(runs["demo"]), "--out", str(inside)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: --out {inside}: inside the run folder")
    assert not inside.exists()


def test_qrels_changed_since_the_run_are_refused(runs, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(runs["toy-zero"], run)
    info = json.loads((run / "toy" / "task.json").read_text())
    data = shutil.copytree(info["path"], tmp_path / "toy")
    with open(data / "qrels.jsonl", "a") as f:
        f.write(json.dumps({"q_id": "q1", "p_id": "d1", "score": 1}) + "\n")
    (run / "toy" / "task.json").write_text(json.dumps({**info, "path": str(data)}))
    assert main([str(run), "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "not the ones the task was scored with" in err[0], err


def test_importing_eval_and_the_module_loads_neither_library():
    code = "import eval, eval.export, sys; print('ir_measures' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
