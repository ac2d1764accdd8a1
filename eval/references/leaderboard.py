"""R2MED's leaderboard (the project page's table, r2med.github.io): a TSV copy of it read into
the shipped ``eval/references/r2med-leaderboard.json``, and that file's rows read back.

Per row the 8 tasks' nDCG@10 ×100 to 2 decimals and the page's Avg. `build_leaderboard` reads
a TSV (columns ``llm``, ``retriever``, ``avg`` and the 8 tasks) into 67 rows, labelled "R2MED
leaderboard". It holds 20 rows the repository lacks (o3-mini, text-embedding-3-large with an
LLM, Search-o1 and Search-R1 over BM25) and lacks query2doc, LameR and the rerankers.

**The leaderboard's names.** Its ``llm`` and ``retriever`` cells are mapped to R2MED's short
names by `LEADERBOARD_LLMS` and `LEADERBOARD_RETRIEVERS` (case-insensitive); ``-`` is no LLM
(a ``base/`` row), ``Search-O1 (QwQ-32b)`` is ``search-o1/qwq-32b``, ``Search-R1
(Qwen2.5-7b-it-em-ppo)`` is ``search-r1/qwen-7b-ins``, and an LLM alone is a HyDE row (the
page's HyDE rows are ``results/gar/hyde``'s: the 24 both sources hold agree to the rounding).
A name that maps to none is refused, naming the TSV's line and field.

The data file keeps the page's figures as printed (×100); they are read as fractions like
every metric here, with 4 decimals (`Reference.decimals`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from eval.datasets import R2MED_TASKS
from eval.references.datafile import dump, opening, tsv_rows
from eval.references.model import (
    AVERAGE_TOLERANCE,
    BASE_PREFIX,
    LEADERBOARD_KIND,
    LEADERBOARD_METRIC,
    LEADERBOARD_PAGE,
    LEADERBOARD_SOURCE,
    Reference,
    fraction,
    published_figure,
)

# The page's names (case-folded) -> R2MED's short names, its results/ folders'
# (agents.execution.published_row maps those to models). Only names the page uses: a new one must be
# mapped by hand.
LEADERBOARD_RETRIEVERS = {
    "bm25": "bm25",
    "nv-embed-v2": "nv",
    "text-embedding-3-large": "openai",
    "bge-large-en-v1.5": "bge",
    "gritlm-7b": "grit",
    "sfr-embedding-mistral": "sfr",
    "bmretriever-7b": "bmr-7b",
    "bmretriever-2b": "bmr-2b",
    "bmretriever-410m": "bmr-410m",
    "voyage-3": "voyage",
    "e5-mistral-7b-instruct": "e5",
    "instructor-xl": "inst-xl",
    "instructor-l": "inst-l",
    "contriever": "contriever",
    "medcpt": "medcpt",
}
LEADERBOARD_LLMS = {
    "o3-mini": "o3-mini",
    "gpt4o": "gpt4",
    "huatuogpt-o1-70b": "huatuo-o1-70b",
    "deepseek-r1-distill-llama-70b": "r1-llama-70b",
    "deepseek-r1-distill-qwen-32b": "r1-qwen-32b",
    "llama3.1-70b-ins": "llama-70b",
    "qwq-32b": "qwq-32b",
    "qwen3-32b": "qwen3-32b",
    "qwen2.5-32b-ins": "qwen-32b",
    "qwen2.5-7b-ins": "qwen-7b",
    # Search-R1's own checkpoints, as "Search-R1 (...)" names them
    "qwen2.5-7b-it-em-ppo": "qwen-7b-ins",
    "qwen2.5-3b-it-em-ppo": "qwen-3b-ins",
}
LEADERBOARD_AGENTS = {"search-o1": "search-o1", "search-r1": "search-r1"}  # "Search-O1 (...)"
LEADERBOARD_NO_LLM = "-"  # a retriever alone: a base/ row
LEADERBOARD_LLM_METHOD = "hyde"  # an LLM alone: the page's rows are R2MED's HyDE rows
LEADERBOARD_COLUMNS = ("llm", "retriever", "avg", *R2MED_TASKS)
_AGENT_CELL = re.compile(r"(?P<agent>[^()]+?)\s*\((?P<llm>[^()]+)\)")


def leaderboard_references(data: Mapping[str, Any], table: str) -> dict[str, Reference]:
    metric = data["source"]["metric"]
    return {
        row: Reference(
            row=row,
            tasks={t: {metric: fraction(v)} for t, v in entry["tasks"].items()},
            repository="",
            commit="",
            path=_page_row(entry["llm"], entry["retriever"]),
            table=table,
            kind=LEADERBOARD_KIND,
            published_average=fraction(entry["avg"]),
        )
        for row, entry in data["rows"].items()
    }


def _page_row(llm: str, retriever: str) -> str:
    """The page's names of a row, as a reader finds it there: "o3-mini / NV-Embed-v2"."""
    return retriever if llm == LEADERBOARD_NO_LLM else f"{llm} / {retriever}"


def _short(names: Mapping[str, str], text: str, where: str, field: str) -> str:
    short = names.get(text.strip().casefold())
    if short is None:
        raise ValueError(
            f"{where}: {field} {text!r}: no R2MED short name for it (known: "
            f"{', '.join(sorted(names))})"
        )
    return short


def leaderboard_row_id(llm: str, retriever: str, where: str = "") -> str:
    """The row id of the page's ``llm`` and ``retriever`` cells: ("-", "BM25") -> "base/bm25",
    ("o3-mini", "NV-Embed-v2") -> "hyde/o3-mini/nv", ("Search-O1 (QwQ-32b)", "BM25") ->
    "search-o1/qwq-32b/bm25"; ValueError naming ``where`` and the field otherwise."""
    short = _short(LEADERBOARD_RETRIEVERS, retriever, where, "retriever")
    cell = llm.strip()
    if cell == LEADERBOARD_NO_LLM:
        return f"{BASE_PREFIX}/{short}"
    match = _AGENT_CELL.fullmatch(cell)
    if match is None:
        return f"{LEADERBOARD_LLM_METHOD}/{_short(LEADERBOARD_LLMS, cell, where, 'llm')}/{short}"
    method = _short(LEADERBOARD_AGENTS, match["agent"], where, "llm")
    return f"{method}/{_short(LEADERBOARD_LLMS, match['llm'], where, 'llm')}/{short}"


def _leaderboard_line(fields: list[str], where: str) -> tuple[str, dict[str, Any]]:
    """(row id, its entry) of one line of the TSV."""
    if len(fields) != len(LEADERBOARD_COLUMNS):
        raise ValueError(
            f"{where}: {len(fields)} tab-separated fields, expected {len(LEADERBOARD_COLUMNS)} "
            f"({', '.join(LEADERBOARD_COLUMNS)})"
        )
    llm, retriever, avg_text, *task_texts = fields
    row = leaderboard_row_id(llm, retriever, where)
    avg = published_figure(avg_text, where, "avg")
    figures = {
        t: published_figure(v, where, t) for t, v in zip(R2MED_TASKS, task_texts, strict=True)
    }
    mean = sum(figures.values()) / len(figures)
    if abs(mean - avg) > AVERAGE_TOLERANCE:
        raise ValueError(f"{where}: avg {avg_text}: the 8 tasks' mean is {mean:.3f}")
    entry = {
        "llm": llm.strip(),
        "retriever": retriever.strip(),
        "avg": float(avg),
        "tasks": {t: float(v) for t, v in figures.items()},
    }
    return row, entry


def build_leaderboard(tsv: Path | str) -> dict[str, Any]:
    """The data of the leaderboard's table from a TSV copy of the page's table (a header
    ``llm retriever avg <the 8 tasks>``, then one row a line, in the page's order).

    Every name is mapped to R2MED's short names and every figure checked; a bad header,
    field, name, figure or a row given twice is refused in one line naming the line.
    """
    rows = tsv_rows(Path(tsv), LEADERBOARD_COLUMNS, _leaderboard_line)
    source = {"kind": LEADERBOARD_KIND, "name": LEADERBOARD_SOURCE, "page": LEADERBOARD_PAGE,
              "metric": LEADERBOARD_METRIC, "scale": 100}  # fmt: skip
    return {"source": source, "tasks": list(R2MED_TASKS), "rows": rows}


def leaderboard_text(table: Mapping[str, Any]) -> str:
    """The leaderboard's data file, or a paper's table's: one row a line, in the page's (the
    table's) order, so a diff shows it."""
    lines = opening(table)
    rows = list(table["rows"].items())
    for i, (row, entry) in enumerate(rows):
        lines.append(f"    {dump(row)}: {dump(entry)}" + ("," if i < len(rows) - 1 else ""))
    lines += ["  }", "}"]
    return "\n".join(lines) + "\n"


def leaderboard_tsv(table: Mapping[str, Any]) -> str:
    """The TSV `build_leaderboard` reads, written back from its data (for the round trip)."""
    lines = ["\t".join(LEADERBOARD_COLUMNS)]
    for entry in table["rows"].values():
        figures = [entry["tasks"][t] for t in R2MED_TASKS]
        cells = [entry["llm"], entry["retriever"], *(repr(v) for v in [entry["avg"], *figures])]
        lines.append("\t".join(cells))
    return "\n".join(lines) + "\n"
