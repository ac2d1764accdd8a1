"""Published figures to set beside our runs: R2MED's per-task metrics for every row it reports.

R2MED's repository (github.com/R2MED/R2MED) publishes one results JSON per row and task:
``results/base retriever/<retriever>/<Task>.json``, ``results/gar/<method>/<llm>/<retriever>/
<Task>.json`` and ``results/reranker/<reranker>/<retriever>/top_<k>/<Task>.json``. `build_table`
reads that layout into one data file, shipped as ``eval/references/r2med.json``;
`load_references` reads it back as `Reference` rows and `reference` finds one by its spec,
``r2med:<row id>``. Row ids drop R2MED's folder prefixes: ``base/bm25``, ``hyde/qwen-7b/bm25``,
``reranker/bge-reranker/nv/top_10``. From the command line::

    python -m eval.references build RESULTS_DIR --commit SHA -o eval/references/r2med.json
    python -m eval.references list [--method hyde] [--metric NDCG@10]
    python -m eval.references show hyde/qwen-7b/bm25

Decisions worth knowing:

* R2MED's files spell metrics two ways, ``ndcg_at_10 ... mrr`` and ``NDCG@10 ... MRR``, and a
  row uses one of them throughout (which one is recorded as the row's ``spelling``, so that
  the table can be written back into R2MED's layout). Both become our names
  (`eval.metrics`); every cut-off a file holds is kept, and the values are R2MED's exactly,
  never rounded again. Rows spelled ``ndcg_at_k`` mostly hold cut-offs 1, 3, 5, 10, 100 and
  no MRR: a figure a file lacks is absent, not 0.
* The paper's average is the mean of the 8 per-task values (×100 in its tables);
  `Reference.average` returns the mean as a fraction, like every metric here.
* Nothing here knows about agents or run configurations (`agents.paper` maps a run to its
  row); this module imports nothing heavy, so ``--help`` is instant.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from eval.cli import command
from eval.datasets import R2MED_TASKS, r2med_task_name
from eval.metrics import FAMILIES, parse_metric, parse_metrics

DATA_DIR = Path(__file__).resolve().parent / "references"
DEFAULT_TABLE = "r2med"
REPOSITORY = "https://github.com/R2MED/R2MED"
SHOWN_METRICS = ("NDCG@10", "MAP@10", "Recall@10", "P@10", "MRR")

# R2MED's folders under results/, and the row-id prefix each gets
BASE_FOLDER, GAR_FOLDER, RERANKER_FOLDER = "base retriever", "gar", "reranker"
BASE_PREFIX = "base"
RERANKER_PREFIX = "reranker"
GAR_METHODS = ("hyde", "query2doc", "lamer", "search-o1", "search-r1")  # R2MED's order

SPELLINGS = ("ndcg_at_k", "NDCG@k")
_LOWER = re.compile(r"(ndcg|map|recall|precision)_at_(\d+)|mrr")
_LOWER_FAMILY = {"ndcg": "NDCG", "map": "MAP", "recall": "Recall", "precision": "P"}
_COMMIT = re.compile(r"[0-9a-f]{7,40}")
_TABLE_NAME = re.compile(r"[a-z0-9][a-z0-9_-]*")


class UnknownReference(ValueError):
    """A reference spec that names no row; the message is one line with the close matches."""


@dataclass(frozen=True)
class Reference:
    """One published row: per R2MED task, its metrics in our names (as fractions)."""

    row: str  # "hyde/qwen-7b/bm25"
    tasks: Mapping[str, Mapping[str, float]]  # R2MED task -> metric -> value
    repository: str
    commit: str
    path: str  # the row's folder in R2MED's repository: "results/gar/hyde/qwen-7b/bm25"
    spelling: str = "NDCG@k"  # how R2MED's files of this row spell the metrics

    @property
    def spec(self) -> str:
        return f"{DEFAULT_TABLE}:{self.row}"

    @property
    def label(self) -> str:
        """How tables name the row beside runs."""
        return f"R2MED paper: {self.row}"

    @property
    def method(self) -> str:
        """The row's kind: base, reranker or the generation method (hyde, query2doc, ...)."""
        return self.row.split("/", 1)[0]

    @property
    def source(self) -> str:
        """Where the figures come from, in one line."""
        return f"{self.repository} at {self.commit}, {self.path}"

    def figure(self, task: str, metric: str = "NDCG@10") -> float | None:
        """The row's ``metric`` on ``task`` (any spelling of an R2MED task name), else None."""
        canonical = r2med_task_name(task)
        if canonical is None:
            return None
        return self.tasks.get(canonical, {}).get(metric)

    def average(self, metric: str = "NDCG@10", tasks: Iterable[str] | None = None) -> float:
        """Mean of ``metric`` over ``tasks`` (default: all the row's tasks), as a fraction:
        ×100 over the 8 tasks is the paper's Avg. ValueError when a task lacks the figure."""
        names = list(self.tasks) if tasks is None else list(dict.fromkeys(tasks))
        values = []
        for task in names:
            value = self.figure(task, metric)
            if value is None:
                raise ValueError(f"{self.spec}: no {metric} for task {task!r}")
            values.append(value)
        if not values:
            raise ValueError(f"{self.spec}: no task to average over")
        return sum(values) / len(values)


# ---- the shipped tables --------------------------------------------------------------------


def table_names() -> list[str]:
    return sorted(p.stem for p in DATA_DIR.glob("*.json"))


@lru_cache(maxsize=4)
def _read_table(name: str) -> dict[str, Reference]:
    path = DATA_DIR / f"{name}.json"
    if not _TABLE_NAME.fullmatch(name) or not path.is_file():
        known = ", ".join(table_names()) or "none"
        raise UnknownReference(f"unknown reference table {name!r}; known: {known}")
    data = json.loads(path.read_text(encoding="utf-8"))
    return references_from(data)


def references_from(data: Mapping[str, Any]) -> dict[str, Reference]:
    """The rows of a table as `build_table` returns it (and the data file holds)."""
    source = data["source"]
    return {
        row: Reference(
            row=row,
            tasks={t: dict(m) for t, m in entry["tasks"].items()},
            repository=source["repository"],
            commit=source["commit"],
            path=entry["path"],
            spelling=entry["spelling"],
        )
        for row, entry in data["rows"].items()
    }


def load_references(name: str = DEFAULT_TABLE) -> dict[str, Reference]:
    """Every row of a shipped table (``eval/references/<name>.json``) by row id."""
    return dict(_read_table(name))


def normalise_row(text: str) -> str:
    """A row id from its id or its R2MED path: "results/gar/hyde/qwen-7b/bm25" and
    "gar/hyde/qwen-7b/bm25" -> "hyde/qwen-7b/bm25", "base retriever/bm25" -> "base/bm25"."""
    row = text.strip().strip("/").removeprefix("results/")
    if row.startswith(f"{BASE_FOLDER}/"):
        return f"{BASE_PREFIX}/{row[len(BASE_FOLDER) + 1 :]}"
    return row.removeprefix(f"{GAR_FOLDER}/")


def reference(spec: str) -> Reference:
    """The row ``<table>:<row id>`` names, e.g. ``r2med:hyde/qwen-7b/bm25`` (R2MED's path of
    the row is accepted too); `UnknownReference` naming close matches otherwise."""
    name, colon, row = spec.partition(":")
    if not colon or not row.strip():
        raise UnknownReference(
            f"reference {spec!r}: expected <table>:<row>, e.g. r2med:hyde/qwen-7b/bm25"
        )
    rows = _read_table(name.strip().lower())
    row = normalise_row(row)
    if row in rows:
        return rows[row]
    close = difflib.get_close_matches(row, list(rows), n=5, cutoff=0.6)
    hint = f"close matches: {', '.join(close)}" if close else "no close match"
    raise UnknownReference(
        f"reference {spec!r}: no such row in {name}; {hint} "
        f"(python -m eval.references list shows them all)"
    )


# ---- the importer --------------------------------------------------------------------------


def our_metric(key: str, where: str = "") -> tuple[str, str]:
    """R2MED's key as our metric name and the spelling it came in: "ndcg_at_10" ->
    ("NDCG@10", "ndcg_at_k"), "MRR" -> ("MRR", "NDCG@k"); ValueError for any other key."""
    match = _LOWER.fullmatch(key)
    if match:
        if match.group(1) is None:
            return "MRR", SPELLINGS[0]
        return f"{_LOWER_FAMILY[match.group(1)]}@{int(match.group(2))}", SPELLINGS[0]
    try:
        family, k = parse_metric(key)
    except ValueError:
        raise ValueError(f"{where}: unknown metric key {key!r}") from None
    if key != (family if k is None else f"{family}@{k}"):  # "NDCG@010": not R2MED's
        raise ValueError(f"{where}: unknown metric key {key!r}")
    return key, SPELLINGS[1]


def r2med_key(metric: str, spelling: str) -> str:
    """Our metric name as R2MED's files of ``spelling`` write it (the inverse of `our_metric`)."""
    if spelling == SPELLINGS[1]:
        return metric
    family, k = parse_metric(metric)
    lower = {v: key for key, v in _LOWER_FAMILY.items()}
    return "mrr" if family == "MRR" else f"{lower[family]}_at_{k}"


def _metric_order(metric: str) -> tuple[int, int]:
    family, k = parse_metric(metric)
    return FAMILIES.index(family), k or 0


def _read_task(path: Path) -> tuple[dict[str, float], str]:
    where = path.as_posix()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{where}: not JSON ({e})") from None
    test = data.get("test") if isinstance(data, dict) else None
    if not isinstance(test, dict) or not test:
        raise ValueError(f"{where}: no 'test' object of metrics")
    metrics: dict[str, float] = {}
    spellings = set()
    for key, value in test.items():
        name, spelling = our_metric(key, where)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{where}: {key} is {value!r}, not a number")
        metrics[name] = value  # as R2MED wrote it: no rounding, no conversion
        spellings.add(spelling)
    if len(spellings) > 1:
        raise ValueError(f"{where}: mixes the spellings {' and '.join(SPELLINGS)}")
    return dict(sorted(metrics.items(), key=lambda kv: _metric_order(kv[0]))), spellings.pop()


def _row_folders(results: Path) -> list[tuple[str, Path]]:
    """(row id, folder) of every row in R2MED's results/ layout, in the table's order."""
    found: list[tuple[str, Path]] = []

    def below(folder: Path, depth: int) -> list[Path]:
        level = [folder]
        for _ in range(depth):
            level = sorted(p for f in level for p in f.iterdir() if p.is_dir())
        return level

    base = results / BASE_FOLDER
    if base.is_dir():
        found += [(f"{BASE_PREFIX}/{f.name}", f) for f in below(base, 1)]
    gar = results / GAR_FOLDER
    if gar.is_dir():
        methods = sorted(
            (p for p in gar.iterdir() if p.is_dir()),
            key=lambda p: (GAR_METHODS.index(p.name) if p.name in GAR_METHODS else 99, p.name),
        )
        for method in methods:
            found += [(f.relative_to(gar).as_posix(), f) for f in below(method, 2)]
    reranker = results / RERANKER_FOLDER
    if reranker.is_dir():
        found += [
            (f"{RERANKER_PREFIX}/{f.relative_to(reranker).as_posix()}", f)
            for f in below(reranker, 3)
        ]
    return found


def build_table(results_dir: Path | str, commit: str) -> dict[str, Any]:
    """The data of a reference table from R2MED's ``results/`` folder at ``commit``.

    Every ``<Task>.json`` of a row's folder becomes that task's metrics in our names; a
    file of another name, a folder that holds none, or a key that is no metric is refused
    (ValueError naming the file), so a change of R2MED's layout cannot slip in unread.
    """
    results = Path(results_dir)
    if not _COMMIT.fullmatch(commit or ""):
        raise ValueError(f"commit {commit!r}: expected a git commit (7 to 40 hex digits)")
    if not results.is_dir():
        raise ValueError(f"{results}: not a folder (give R2MED's results/ folder)")
    folders = _row_folders(results)
    if not folders:
        raise ValueError(
            f"{results}: no {BASE_FOLDER!r}, {GAR_FOLDER!r} or {RERANKER_FOLDER!r} rows "
            "(give R2MED's results/ folder)"
        )
    in_rows = {folder for _, folder in folders}
    stray = sorted(p for p in results.rglob("*.json") if p.parent not in in_rows)
    if stray:
        raise ValueError(f"{stray[0].as_posix()}: outside R2MED's layout of row folders")
    rows: dict[str, Any] = {}
    for row, folder in folders:
        where = folder.as_posix()
        files = sorted(folder.glob("*.json"))
        if not files:
            raise ValueError(f"{where}: no <Task>.json in a row's folder")
        tasks: dict[str, dict[str, float]] = {}
        spellings = set()
        for path in files:
            task = r2med_task_name(path.stem)
            if task != path.stem:
                raise ValueError(f"{path.as_posix()}: not an R2MED task ({', '.join(R2MED_TASKS)})")
            tasks[task], spelling = _read_task(path)
            spellings.add(spelling)
        if len(spellings) > 1:
            raise ValueError(f"{where}: its tasks mix the spellings {' and '.join(SPELLINGS)}")
        rows[row] = {
            "path": f"results/{folder.relative_to(results).as_posix()}",
            "spelling": spellings.pop(),
            "tasks": {t: tasks[t] for t in R2MED_TASKS if t in tasks},
        }
    return {
        "source": {"repository": REPOSITORY, "commit": commit, "folder": "results"},
        "tasks": list(R2MED_TASKS),
        "rows": rows,
    }


def table_text(table: Mapping[str, Any]) -> str:
    """The data file's text: indented down to a task, whose metrics take one line each, so
    the file is small and a diff shows which row and task changed."""

    def dump(value: Any) -> str:
        return json.dumps(value, ensure_ascii=False)

    lines = ["{", f'  "source": {dump(table["source"])},', f'  "tasks": {dump(table["tasks"])},']
    lines.append('  "rows": {')
    rows = list(table["rows"].items())
    for i, (row, entry) in enumerate(rows):
        lines.append(f"    {dump(row)}: {{")
        lines.append(f'      "path": {dump(entry["path"])},')
        lines.append(f'      "spelling": {dump(entry["spelling"])},')
        lines.append('      "tasks": {')
        tasks = list(entry["tasks"].items())
        for j, (task, metrics) in enumerate(tasks):
            comma = "," if j < len(tasks) - 1 else ""
            lines.append(f"        {dump(task)}: {dump(metrics)}{comma}")
        lines.append("      }")
        lines.append("    }" + ("," if i < len(rows) - 1 else ""))
    lines += ["  }", "}"]
    return "\n".join(lines) + "\n"


# ---- command line --------------------------------------------------------------------------


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.2f}"


def _average_cell(ref: Reference, metric: str) -> str:
    """The row's average ×100 over all its tasks; "-" when a task lacks the metric, and a
    "*" with the count when the row has fewer than R2MED's 8 tasks."""
    try:
        text = _pct(ref.average(metric))
    except ValueError:
        return "-"
    return text if len(ref.tasks) == len(R2MED_TASKS) else f"{text}* ({len(ref.tasks)} tasks)"


def list_text(rows: Mapping[str, Reference], method: str | None, metric: str) -> str:
    chosen = [r for r in rows.values() if method is None or r.method == method]
    lines = [f"| row | Avg {metric} ×100 | R2MED path |", "|---|---:|---|"]
    lines += [f"| {r.row} | {_average_cell(r, metric)} | {r.path} |" for r in chosen]
    first = next(iter(rows.values()), None)
    if first is not None:
        lines.append(f"\n{len(chosen)} rows of {first.repository} at {first.commit}.")
    return "\n".join(lines) + "\n"


def show_text(ref: Reference, metrics: Sequence[str]) -> str:
    lines = [
        f"{ref.label}",
        f"from {ref.source}\n",
        "| task | " + " | ".join(metrics) + " |",
        "|---|" + "|".join(["---:"] * len(metrics)) + "|",
    ]
    for task, values in ref.tasks.items():
        cells = ["-" if values.get(m) is None else f"{values[m]:.5f}" for m in metrics]
        lines.append(f"| {task} | " + " | ".join(cells) + " |")
    lines.append("| Avg ×100 | " + " | ".join(_average_cell(ref, m) for m in metrics) + " |")
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m eval.references",
        description="R2MED's published per-task figures: build the shipped table from R2MED's "
        "results/ folder, list its rows, show one.",
    )
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="read R2MED's results/ folder into a table")
    b.add_argument("results_dir", type=Path, metavar="RESULTS_DIR", help="R2MED's results/")
    b.add_argument("--commit", required=True, help="the R2MED commit the folder is at")
    b.add_argument("-o", "--out", type=Path, default=None, help="default: print it")
    ls = sub.add_parser("list", help="every row with its average over the 8 tasks")
    ls.add_argument("--method", default=None, help="base, reranker, hyde, query2doc, ...")
    ls.add_argument("--metric", default="NDCG@10", help="default: %(default)s")
    ls.add_argument("--table", default=DEFAULT_TABLE, help="default: %(default)s")
    sh = sub.add_parser("show", help="one row's per-task figures")
    sh.add_argument("row", metavar="ROW", help="a row id (hyde/qwen-7b/bm25) or r2med:<row>")
    sh.add_argument(
        "--metrics", default=",".join(SHOWN_METRICS), help="comma-separated; default: %(default)s"
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return command(lambda: _main(args))


def _main(args: argparse.Namespace) -> int:
    if args.command == "build":
        from eval.files import write_text

        if not _COMMIT.fullmatch(args.commit):
            raise ValueError(f"--commit {args.commit!r}: expected 7 to 40 hex digits")
        if not args.results_dir.is_dir():
            raise ValueError(f"RESULTS_DIR {args.results_dir}: not a folder")
        text = table_text(build_table(args.results_dir, args.commit))
        if args.out is None:
            sys.stdout.write(text)
        else:
            write_text(args.out, text)
            print(f"written to {args.out}")
    elif args.command == "list":
        try:
            parse_metric(args.metric)
        except ValueError as e:
            raise ValueError(f"--metric: {e}") from None
        rows = load_references(args.table)
        methods = list(dict.fromkeys(r.method for r in rows.values()))
        if args.method is not None and args.method not in methods:
            raise ValueError(f"--method {args.method!r}: known: {', '.join(methods)}")
        sys.stdout.write(list_text(rows, args.method, args.metric))
    else:
        try:
            metrics = parse_metrics(args.metrics)
        except ValueError as e:
            raise ValueError(f"--metrics: {e}") from None
        spec = args.row if ":" in args.row else f"{DEFAULT_TABLE}:{args.row}"
        sys.stdout.write(show_text(reference(spec), metrics))
    return 0


if __name__ == "__main__":
    sys.exit(main())
