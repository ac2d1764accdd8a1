"""R2MED's repository (github.com/R2MED/R2MED, ``results/``): its layout read into the shipped
``eval/references/r2med.json``, and that file's rows read back.

One results JSON per row and task, every metric: ``results/base retriever/<retriever>/
<Task>.json``, ``results/gar/<method>/<llm>/<retriever>/<Task>.json`` and ``results/reranker/
<reranker>/<retriever>/top_<k>/<Task>.json``. `build_table` reads that layout (71 rows at
commit 62b7074); its rows are labelled "R2MED repository".

Decisions worth knowing:

* R2MED's files spell metrics two ways, ``ndcg_at_10 ... mrr`` and ``NDCG@10 ... MRR``, and a
  row uses one of them throughout (which one is recorded as the row's ``spelling``, so that
  the table can be written back into R2MED's layout). Both become our names
  (`eval.metrics`); every cut-off a file holds is kept, and the values are R2MED's exactly,
  never rounded again. Rows spelled ``ndcg_at_k`` mostly hold cut-offs 1, 3, 5, 10, 100 and
  no MRR: a figure a file lacks is absent, not 0.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from eval.datasets import R2MED_TASKS, r2med_task_name
from eval.metrics import parse_metric
from eval.references.datafile import dump, opening
from eval.references.model import (
    BASE_FOLDER,
    BASE_PREFIX,
    GAR_FOLDER,
    GAR_METHODS,
    REPOSITORY,
    RERANKER_FOLDER,
    RERANKER_PREFIX,
    Reference,
    metric_order,
)

SPELLINGS = ("ndcg_at_k", "NDCG@k")
_LOWER = re.compile(r"(ndcg|map|recall|precision)_at_(\d+)|mrr")
_LOWER_FAMILY = {"ndcg": "NDCG", "map": "MAP", "recall": "Recall", "precision": "P"}
COMMIT_PATTERN = re.compile(r"[0-9a-f]{7,40}")


def repository_references(data: Mapping[str, Any], table: str) -> dict[str, Reference]:
    """The rows of a table `build_table` returns (and ``r2med.json`` holds)."""
    source = data["source"]
    return {
        row: Reference(
            row=row,
            tasks={t: dict(m) for t, m in entry["tasks"].items()},
            repository=source["repository"],
            commit=source["commit"],
            path=entry["path"],
            spelling=entry["spelling"],
            table=table,
        )
        for row, entry in data["rows"].items()
    }


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
    return dict(sorted(metrics.items(), key=lambda kv: metric_order(kv[0]))), spellings.pop()


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
    if not COMMIT_PATTERN.fullmatch(commit or ""):
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
    lines = opening(table)
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
