"""A run folder's rankings and judgements as ranx and ir-measures read them.

    python -m eval.export RUN_DIR --out DIR [--cache-dir DIR] [--check]

For every finished task and every stage of it, ``DIR/<task>/run.trec`` (the agent's stage) and
``DIR/<task>/<stage>/run.trec`` (``rerank-<i>-<kind>``), each with ``qrels.trec`` beside it
(``qid 0 docid grade``), and ``DIR/manifest.json`` naming per file our metrics.json figures
and each measure in ir-measures' spelling (``nDCG@10``) and ranx's (``ndcg@10``).

What the files hold is what our evaluator scored, so that any tool gets our figures:

* the run: the stage's run.trec, which holds exactly the scored lists (the runner pads and
  cuts to ``--depth`` before it scores and writes), queries without judgements left out, in
  our evaluator's order (``ties`` of the run's config), with any score that is not strictly
  below the one before it in float32 set to the next float32 below (`explicit_order`). ranx
  reads scores as 64-bit floats and keeps tied documents in an order of its own, ir-measures'
  ``RR@k`` (its msmarco provider) breaks ties by doc id ascending, trec_eval by doc id
  descending in float32: with no ties left, all of them rank as we did.
* the qrels: the judgements of the queries the task was run on (``limit``), negative grades as
  0 as `eval.evaluate` scores them; under ``missing="present"`` only those of the queries the
  stage ranked, which are the ones its means are over. Under ``missing="zero"`` a query the
  stage did not rank stays in the qrels and counts 0: ir-measures does that by itself, ranx
  with ``make_comparable=True``.

`ir_measures_figures` computes our figures with ir-measures from the exported files (the extra
``[ir-measures]``; ``--check`` prints them beside ours). Refusals are one ``error:`` line.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eval.evaluate import (
    MISSING_POLICIES,
    TIE_ORDERS,
    Run,
    TieOrder,
    made_explicit,
    strictly_decreasing,
)
from eval.metrics import parse_metric
from eval.plumbing.cli import command
from eval.plumbing.extras import MissingExtra, import_extra
from eval.plumbing.files import write_json, write_text
from eval.runs import NotARunFolder, RunFolder, StageFolder, TaskFolder
from eval.task_summary import AGENT_STAGE
from eval.trec import read_run, write_run

MANIFEST_FILE = "manifest.json"
QRELS_FILE = "qrels.trec"
RUN_FILE = "run.trec"
TAG = "r2med-agents"

# our metric family -> its name in ir-measures and in ranx (same definitions: tested against
# pytrec_eval in tests/eval/test_export.py)
IR_MEASURES_NAMES = {"NDCG": "nDCG", "MAP": "AP", "Recall": "R", "P": "P", "MRR": "RR"}
RANX_NAMES = {"NDCG": "ndcg", "MAP": "map", "Recall": "recall", "P": "precision", "MRR": "mrr"}


def measure_names(metric: str) -> tuple[str, str]:
    """Our metric name (``NDCG@10``, ``MRR``) in ir-measures' and ranx's spelling:
    ``("nDCG@10", "ndcg@10")``, ``("RR", "mrr")``. ValueError for a name we do not produce."""
    family, k = parse_metric(metric)
    cut = f"@{k}" if k is not None else ""
    return IR_MEASURES_NAMES[family] + cut, RANX_NAMES[family] + cut


def explicit_order(run: Mapping[str, Mapping[str, float]], ties: TieOrder = "trec") -> Run:
    """``run`` in our evaluator's rank order (`eval.evaluate.strictly_decreasing`), its scores
    strictly decreasing in float32 (`eval.evaluate.made_explicit`). The ranking is unchanged;
    only tied scores (in float32, what trec_eval compares) move, by the smallest step trec_eval
    sees, so every tool that ranks by score ranks as we did."""
    return {q: made_explicit(q, docs.items()) for q, docs in strictly_decreasing(run, ties).items()}


@dataclass(frozen=True)
class ExportedFile:
    """One stage of one task, exported: paths relative to the export folder."""

    task: str  # the task folder's name
    stage: str  # "agent" or its stage folder's name
    run: str
    qrels: str
    figures: dict[str, float]  # our metrics.json figures for this stage
    queries: int  # qrels queries its means are over
    unranked: int  # of them, those the run ranks nothing for (each tool counts them 0)
    moved: int  # tied scores set just below the one before them (`explicit_order`)

    def to_dict(self) -> dict[str, Any]:
        names = {m: measure_names(m) for m in self.figures}
        return {
            "task": self.task,
            "stage": self.stage,
            "run": self.run,
            "qrels": self.qrels,
            "queries": self.queries,
            "unranked": self.unranked,
            "tied_scores_moved": self.moved,
            "figures": [
                {"ours": m, "value": v, "ir_measures": names[m][0], "ranx": names[m][1]}
                for m, v in self.figures.items()
            ],
        }


def export_run(
    run_dir: Path | str, out_dir: Path | str, cache_dir: Path | None = None
) -> list[ExportedFile]:
    """Export every finished task of the run folder ``run_dir`` (module docstring) into
    ``out_dir`` and write its manifest.json; the files written, in run and stage order.

    A task's judgements are loaded from the data its task.json names (``cache_dir``: where an
    R2MED task is, as agents.run's) and must be the ones it was scored with (their
    fingerprint). A task without metrics.json (unfinished) is left out and listed in the
    manifest's ``unfinished``. One-line ValueError (NotARunFolder, a FileNotFoundError, when
    the folder is not a run folder) when its data cannot be loaded or has changed, or when
    ``out_dir`` is inside it.
    """
    folder = RunFolder(run_dir)
    config = folder.config()
    out = Path(out_dir).expanduser()
    if out.resolve().is_relative_to(folder.path.resolve()):
        raise ValueError(f"--out {out}: inside the run folder {folder.path}; choose one outside")
    settings = config.get("eval") if isinstance(config.get("eval"), dict) else {}
    ties = settings.get("ties", "trec")
    missing = settings.get("missing", "zero")
    for key, value, allowed in (("ties", ties, TIE_ORDERS), ("missing", missing, MISSING_POLICIES)):
        if value not in allowed:
            raise ValueError(f"{folder.config_path}: eval.{key} {value!r} is not one of {allowed}")
    exported: list[ExportedFile] = []
    unfinished: list[str] = []
    for task in folder.tasks():
        summary = task.summary()
        if summary is None:  # no metrics.json: no figures to compare with
            unfinished.append(task.name)
            continue
        qrels = _task_qrels(task, config, cache_dir)
        chain = task.stage_chain()
        for stage in chain:
            name = AGENT_STAGE if stage.path == task.path else stage.name
            # a summary written before "stages" existed holds only the final stage's
            figures = summary.stages.get(name) or (summary.metrics if stage is chain[-1] else {})
            where = Path(task.name) if name == AGENT_STAGE else Path(task.name, name)
            exported.append(_export_stage(stage, qrels, out, where, ties, missing, name, figures))
    manifest = {
        "run": str(folder.path.resolve()),
        "ties": ties,
        "missing": missing,
        "ranx": "ranx.evaluate(Qrels.from_file(qrels), Run.from_file(run), names, "
        "make_comparable=True): unranked queries count 0, as in our means",
        "files": [f.to_dict() for f in exported],
        "unfinished": unfinished,
    }
    write_json(out / MANIFEST_FILE, manifest)
    return exported


def _export_stage(
    stage: StageFolder,
    qrels: Mapping[str, Mapping[str, int]],
    out: Path,
    where: Path,
    ties: TieOrder,
    missing: str,
    name: str,
    figures: Mapping[str, float],
) -> ExportedFile:
    ranked = {q: docs for q, docs in read_run(stage.run_trec_path).items() if docs}
    if missing == "present":  # the means are over the queries the stage ranked
        qrels = {q: docs for q, docs in qrels.items() if q in ranked}
    run = explicit_order({q: docs for q, docs in ranked.items() if q in qrels}, ties)
    moved = sum(1 for q, docs in run.items() for d, s in docs.items() if s != ranked[q][d])
    write_run(run, out / where / RUN_FILE, tag=TAG, depth=None)
    write_text(
        out / where / QRELS_FILE,
        "".join(f"{q} 0 {d} {g}\n" for q in sorted(qrels) for d, g in qrels[q].items()),
    )
    return ExportedFile(
        task=where.parts[0],
        stage=name,
        run=(where / RUN_FILE).as_posix(),
        qrels=(where / QRELS_FILE).as_posix(),
        figures=dict(figures),
        queries=len(qrels),
        unranked=sum(1 for q in qrels if q not in run),
        moved=moved,
    )


def _task_qrels(
    task: TaskFolder, config: Mapping[str, Any], cache_dir: Path | None
) -> dict[str, dict[str, int]]:
    """The judgements the task was scored with: those of the queries it ran (the first
    ``limit`` of its data), negative grades as 0."""
    # Imported here: loading data is heavy and the rest of this module never needs it.
    from eval.datasets import default_cache_dir, load_task, task_fingerprint

    info = task.info()
    if info is None or not isinstance(info.get("task"), str):
        raise ValueError(f"{task.info_path}: missing or names no task; cannot find its qrels")
    path = info.get("path")
    source = path if isinstance(path, str) and Path(path).is_dir() else info["task"]
    data = load_task(source, cache_dir if cache_dir is not None else default_cache_dir())
    recorded = (info.get("fingerprint") or {}).get("qrels")
    if recorded is not None and task_fingerprint(data)["qrels"] != recorded:
        raise ValueError(
            f"{task.info_path}: the qrels of {data.path} are not the ones the task was scored "
            "with (their fingerprint differs)"
        )
    limit = config.get("limit")
    queries = list(data.queries)[:limit] if limit else list(data.queries)
    return {
        q: {d: max(int(g), 0) for d, g in data.qrels[q].items()} for q in queries if q in data.qrels
    }


def ir_measures_figures(
    export_dir: Path | str, file: ExportedFile | Mapping[str, Any]
) -> dict[str, float]:
    """Our figures of one exported file (an `ExportedFile` or its manifest entry) computed by
    ir-measures from the files alone, ``{our name: unrounded mean}``; MissingExtra (one line
    naming ``r2med-agents[ir-measures]``) without it."""
    ir_measures = import_extra("ir_measures", "ir-measures", "eval.export's ir-measures check")
    entry = file.to_dict() if isinstance(file, ExportedFile) else file
    base = Path(export_dir)
    names = {f["ours"]: f["ir_measures"] for f in entry["figures"]}
    measures = {ours: ir_measures.parse_measure(theirs) for ours, theirs in names.items()}
    qrels = list(ir_measures.read_trec_qrels(str(base / entry["qrels"])))
    run = list(ir_measures.read_trec_run(str(base / entry["run"])))
    means = ir_measures.calc_aggregate(list(measures.values()), qrels, run)
    return {ours: float(means[measure]) for ours, measure in measures.items()}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m eval.export", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a run folder of agents.run")
    parser.add_argument("--out", type=Path, required=True, help="the folder to write into")
    parser.add_argument(
        "--cache-dir", type=Path, default=None, help="an R2MED task's files (as agents.run's)"
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="score every exported file with ir-measures and print its figures beside ours "
        "(exit status 1 if one differs at 5 decimals); needs r2med-agents[ir-measures]",
    )
    args = parser.parse_args(argv)
    return command(lambda: _export(args), refusals=(MissingExtra, NotARunFolder))


def _export(args: argparse.Namespace) -> int:
    files = export_run(args.run_dir, args.out, args.cache_dir)
    print(f"{len(files)} run files with their qrels in {args.out}, see {MANIFEST_FILE}")
    if not args.check:
        return 0
    differ = 0
    for f in files:
        theirs = ir_measures_figures(args.out, f)
        off = [m for m, v in f.figures.items() if round(theirs[m], 5) != v]
        differ += len(off)
        shown = ", ".join(f"{m} ours {f.figures[m]} ir-measures {theirs[m]:.5f}" for m in off)
        print(f"{f.run}: {len(f.figures) - len(off)} of {len(f.figures)} figures equal"
              + (f"; differ: {shown}" if off else ""))  # fmt: skip
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
