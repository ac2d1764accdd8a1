"""Published figures to set beside our runs: R2MED's per-task figures from both its sources,
from methods' authors, and from another paper's table of R2MED (ReasonEmbed's Table 3).

R2MED publishes its figures twice, and the two are not the same table:

* **Its repository** (github.com/R2MED/R2MED, ``results/``): one results JSON per row and
  task, every metric: ``results/base retriever/<retriever>/<Task>.json``, ``results/gar/
  <method>/<llm>/<retriever>/<Task>.json`` and ``results/reranker/<reranker>/<retriever>/
  top_<k>/<Task>.json``. `build_table` reads that layout into ``eval/references/r2med.json``
  (71 rows at commit 62b7074); its rows are labelled "R2MED repository".
* **Its leaderboard** (the project page's table, r2med.github.io): per row the 8 tasks'
  nDCG@10 ×100 to 2 decimals and the page's Avg. `build_leaderboard` reads a copy of it, a
  TSV (columns ``llm``, ``retriever``, ``avg`` and the 8 tasks), into
  ``eval/references/r2med-leaderboard.json`` (67 rows); its rows are labelled "R2MED
  leaderboard". It holds 20 rows the repository lacks (o3-mini, text-embedding-3-large with
  an LLM, Search-o1 and Search-R1 over BM25) and lacks query2doc, LameR and the rerankers.
* **Methods' own authors** (``eval/references/r2med-authors.json``, written by hand): an
  R2MED figure a method's authors published in their own repository, each row with its
  repository, commit, file, line and the line's words (`AUTHORS_TABLE`); labelled by that
  source ("ReasonRank repository"). Such a source may give the 8-task average alone: the row
  then holds no per-task figure (`Reference.average_only`): ``show`` says "not published"
  where a task's figure would be, no output prints one, and only the 8-task nDCG@10 average
  is read from it. ReasonRank-32B's 42.85 is one (its README, line 30 at 06721fd).
* **Another paper's table** (``eval/references/reasonembed-table3.json``): Table 3 of
  *ReasonEmbed* (Chen et al., 2025, arXiv 2510.08252), nDCG@10 ×100 on R2MED's 8 tasks and its
  Avg for 19 retrievers alone, ``base/<short>`` rows; `build_reasonembed` reads a TSV of it
  (columns ``Model Group Size Mark Avg`` and the 8 tasks, transcribed from the image the
  authors' repository publishes it as: VectorSpaceLab/agentic-search at b2f2e40,
  ``ReasonEmbed/imgs/r2med-performance.png``). Each row keeps its cells as printed (its model
  name, section, size and mark) and is labelled "ReasonEmbed Table 3". Its four unmarked
  baselines (BM25, OpenAI-3-Large, GritLM-7B, NV-Embed-v2) are, by its caption, R2MED's own
  figures: they carry R2MED's row ids (``base/bm25``, ``base/openai``, ``base/grit``,
  ``base/nv``) and are compared figure by figure with R2MED's rows (`repeats_of`; the same to
  the rounding, all of them). The other 15 are rows R2MED has not.

**Row ids and specs.** A row id is the same in both sources: ``base/<retriever>``,
``<method>/<llm>/<retriever>`` (hyde, query2doc, lamer, search-o1, search-r1) and
``reranker/<reranker>/<retriever>/top_<k>``, in R2MED's short names (its folder names:
``nv``, ``bm25``, ``openai`` for text-embedding-3-large, ``gpt4``, ``qwq-32b``, ...). A spec
is ``<table>:<row id>`` and names one source, never a fallback to the other:

* ``r2med:<row>``: the repository's row (R2MED's path is accepted too:
  ``r2med:results/gar/hyde/qwen-7b/bm25``); every spec that worked before still does.
* ``r2med-leaderboard:<row>``: the leaderboard's row, e.g. ``r2med-leaderboard:hyde/o3-mini/nv``.
* ``r2med-authors:<row>``: a method's authors' row, e.g.
  ``r2med-authors:reranker/reasonrank-32b/e5/top_100``.
* ``reasonembed-table3:<row>``: ReasonEmbed's Table 3, e.g.
  ``reasonembed-table3:base/reason-embed-qwen3-8b``.

A spec naming a row its source lacks is refused in one line that names the other source's
spec when that one has the row. From the command line::

    python -m eval.references build RESULTS_DIR --commit SHA -o eval/references/r2med.json
    python -m eval.references build-leaderboard leaderboard.tsv \\
        -o eval/references/r2med-leaderboard.json
    python -m eval.references build-reasonembed table3.tsv \\
        -o eval/references/reasonembed-table3.json
    python -m eval.references list [--method hyde] [--metric NDCG@10] [--table r2med]
    python -m eval.references show hyde/qwen-7b/bm25     # both sources; r2med:... one

**The leaderboard's names.** Its ``llm`` and ``retriever`` cells are mapped to R2MED's short
names by `LEADERBOARD_LLMS` and `LEADERBOARD_RETRIEVERS` (case-insensitive); ``-`` is no LLM
(a ``base/`` row), ``Search-O1 (QwQ-32b)`` is ``search-o1/qwq-32b``, ``Search-R1
(Qwen2.5-7b-it-em-ppo)`` is ``search-r1/qwen-7b-ins``, and an LLM alone is a HyDE row (the
page's HyDE rows are ``results/gar/hyde``'s: the 24 both sources hold agree to the rounding).
A name that maps to none is refused, naming the TSV's line and field.

**Conflicts are shown, never resolved.** Where both of R2MED's sources hold a row, its nDCG@10 is
compared task by task on the leaderboard's scale: the repository's 5-decimal fraction ×100
against the page's 2-decimal figure. They agree when the one rounds to the other, i.e. they
are at most 0.005 apart; at an exact half either rounding is accepted, because the page
rounds halves both ways (52.815 as 52.81, 41.215 as 41.22). A row with any task beyond that
is a `Conflict` (``base/medcpt``: 7.87 in the repository, 9.02 on the leaderboard, 7 of 8
tasks differ), found by `find_conflicts` from the data, and ``list``, ``show``,
``eval.compare --reference`` and a run's printed paper figure show both figures with their
sources. The Avg is not compared: the page averages unrounded figures, so a row whose every
task agrees may still print an Avg 0.01 apart (hyde/huatuo-o1-70b/bm25: 33.42 and 33.43).

**A table at odds with itself is shown as printed.** A paper's row whose printed Avg is more
than rounding allows (0.01) from the mean of its 8 printed task figures, or whose printed Size
is not the size its model's name states, is an `Inconsistency`, found from the row by
`inconsistencies`: RaDeR-gte-Qwen2-7B prints Avg 35.19 where its tasks' mean is 35.215 (a
CONFLICT), Qwen3-4B-ms is printed with Size 8B (a NOTE). Both figures stay as printed (the
average beside a run is the printed one) and ``list``, ``show``, ``eval.compare --reference``
and a run's printed average give both.

Decisions worth knowing:

* R2MED's files spell metrics two ways, ``ndcg_at_10 ... mrr`` and ``NDCG@10 ... MRR``, and a
  row uses one of them throughout (which one is recorded as the row's ``spelling``, so that
  the table can be written back into R2MED's layout). Both become our names
  (`eval.metrics`); every cut-off a file holds is kept, and the values are R2MED's exactly,
  never rounded again. Rows spelled ``ndcg_at_k`` mostly hold cut-offs 1, 3, 5, 10, 100 and
  no MRR: a figure a file lacks is absent, not 0.
* The leaderboard's data file keeps the page's figures as printed (×100); they are read as
  fractions like every metric here, with 4 decimals (`Reference.decimals`).
* The paper's average is the mean of the 8 per-task values (×100 in its tables);
  `Reference.average` returns it as a fraction. Over all 8 tasks a leaderboard row's is the
  page's own Avg, which the data file keeps (it was averaged before rounding).
* Nothing here knows about agents or run configurations (`agents.execution.published_row` maps a run
  to its row); this module imports nothing heavy, so ``--help`` is instant.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import quote

from eval.datasets import R2MED_TASKS, r2med_task_name
from eval.metrics import FAMILIES, HEADLINE, metric_name, parse_metric, parse_metrics
from eval.plumbing.cli import command

DATA_DIR = Path(__file__).resolve().parent / "references"
DEFAULT_TABLE = "r2med"  # R2MED's repository, results/
LEADERBOARD_TABLE = "r2med-leaderboard"  # R2MED's project page
TABLES = (DEFAULT_TABLE, LEADERBOARD_TABLE)  # R2MED's own two sources, checked for conflicts
AUTHORS_TABLE = "r2med-authors"  # R2MED figures a method's authors published themselves
REASONEMBED_TABLE = "reasonembed-table3"  # ReasonEmbed's paper, its Table 3 (R2MED)
SHOWN_TABLES = (*TABLES, AUTHORS_TABLE, REASONEMBED_TABLE)  # the order the sources are shown in
REPOSITORY = "https://github.com/R2MED/R2MED"
LEADERBOARD_PAGE = "https://r2med.github.io"
LEADERBOARD_SOURCE = "R2MED leaderboard, r2med.github.io"
SHOWN_METRICS = (HEADLINE, "MAP@10", "Recall@10", "P@10", "MRR")
LEADERBOARD_METRIC = HEADLINE  # the one metric the page publishes

# what kind of source a table is, and how its rows are labelled
REPOSITORY_KIND, LEADERBOARD_KIND, AUTHORS_KIND = "repository", "leaderboard", "authors"
PAPER_KIND = "paper"  # a table printed in another paper, its figures transcribed
# an authors' or a paper's row names its own source ("ReasonRank repository", "ReasonEmbed
# Table 3"); this names the column of the authors' table
SOURCE_NAMES = {REPOSITORY_KIND: "R2MED repository", LEADERBOARD_KIND: "R2MED leaderboard",
                AUTHORS_KIND: "method's authors", PAPER_KIND: "paper's table"}  # fmt: skip
KIND_OF_TABLE = {DEFAULT_TABLE: REPOSITORY_KIND, LEADERBOARD_TABLE: LEADERBOARD_KIND,
                 AUTHORS_TABLE: AUTHORS_KIND, REASONEMBED_TABLE: PAPER_KIND}  # fmt: skip
# decimals of a fraction: R2MED's files write 5; the page, the authors and a paper's table
# 2 of the figure ×100
DECIMALS = {REPOSITORY_KIND: 5, LEADERBOARD_KIND: 4, AUTHORS_KIND: 4, PAPER_KIND: 4}
NOT_PUBLISHED = "not published"  # a task's cell of an average-only row

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
    repository: str  # a leaderboard row: "" (the page is in no repository)
    commit: str  # likewise
    # where the row is in its source: the repository's folder, "results/gar/hyde/qwen-7b/bm25",
    # or the page's names of its LLM and retriever, "o3-mini / NV-Embed-v2"
    path: str
    spelling: str = "NDCG@k"  # how R2MED's files of this row spell the metrics
    table: str = DEFAULT_TABLE
    kind: str = REPOSITORY_KIND
    published_average: float | None = None  # the source's own 8-task Avg (the leaderboard's)
    # an authors' row: its source's name, the line of ``path`` that states the figure, that
    # line's words, the setup the figure is of, and what the source leaves unsaid
    name: str = ""
    line: int | None = None
    quote: str = ""
    setup: str = ""
    note: str = ""
    # a paper's row: the paper and table it is printed in ("ReasonEmbed: ... (Chen et al.,
    # 2025, arXiv 2510.08252), Table 3"), and the row's other cells as printed (Model, Group,
    # Size, Mark), kept so that what the table says of a row is shown as it says it
    citation: str = ""
    printed: Mapping[str, str] = field(default_factory=dict)

    @property
    def spec(self) -> str:
        return f"{self.table}:{self.row}"

    @property
    def source_name(self) -> str:
        """The source in a few words: "R2MED repository", "R2MED leaderboard" or an authors'
        row's own ("ReasonRank repository")."""
        return self.name or SOURCE_NAMES[self.kind]

    @property
    def average_only(self) -> bool:
        """Whether the source published the 8-task average alone, no per-task figure."""
        return not self.tasks and self.published_average is not None

    @property
    def label(self) -> str:
        """How tables name the row beside runs: by the source its figures come from."""
        return f"{self.source_name}: {self.row}"

    @property
    def method(self) -> str:
        """The row's kind: base, reranker or the generation method (hyde, query2doc, ...)."""
        return self.row.split("/", 1)[0]

    @property
    def source(self) -> str:
        """Where the figures come from, in one line."""
        if self.kind == LEADERBOARD_KIND:
            return f"{LEADERBOARD_SOURCE} (its row {self.path})"
        if self.kind == AUTHORS_KIND:
            return f"{self.repository} at {self.commit}, {self.path} line {self.line}"
        if self.kind == PAPER_KIND:
            model = self.printed.get("Model", "")
            return (f"{self.citation}, its row {model}, read from {self.repository} at "
                    f"{self.commit}, {self.path}")  # fmt: skip
        return f"{self.repository} at {self.commit}, {self.path}"

    @property
    def location(self) -> str:
        """A browsable address of the figures: the row's folder at its commit, the page, the
        authors' line, or the image a paper's table was read from."""
        if self.kind == LEADERBOARD_KIND:
            return LEADERBOARD_PAGE
        if self.kind == AUTHORS_KIND:  # the file's line, as GitHub shows it
            return f"{self.repository}/blob/{self.commit}/{quote(self.path)}#L{self.line}"
        if self.kind == PAPER_KIND:  # the table's image at its commit
            return f"{self.repository}/blob/{self.commit}/{quote(self.path)}"
        return f"{self.repository}/tree/{self.commit}/{quote(self.path)}"  # "base retriever"

    @property
    def decimals(self) -> int:
        """How many decimals the source's fractions carry (5 in R2MED's files, 4 on the page)."""
        return DECIMALS[self.kind]

    def format(self, value: float) -> str:
        """A figure of this row as its source wrote it: 0.19188, or 0.3401 for the page's 34.01."""
        return f"{value:.{self.decimals}f}"

    def figure(self, task: str, metric: str = HEADLINE) -> float | None:
        """The row's ``metric`` on ``task`` (any spelling of an R2MED task name), else None."""
        canonical = r2med_task_name(task)
        if canonical is None:
            return None
        return self.tasks.get(canonical, {}).get(metric)

    def average(self, metric: str = HEADLINE, tasks: Iterable[str] | None = None) -> float:
        """Mean of ``metric`` over ``tasks`` (default: all the row's tasks), as a fraction:
        ×100 over the 8 tasks is the paper's Avg (a leaderboard row's: the page's own).
        ValueError when a task lacks the figure."""
        if self.average_only:
            return self._published_only_average(metric, tasks)
        names = list(self.tasks) if tasks is None else list(dict.fromkeys(tasks))
        values = []
        for task in names:
            value = self.figure(task, metric)
            if value is None:
                raise ValueError(f"{self.spec}: no {metric} for task {task!r}")
            values.append(value)
        if not values:
            raise ValueError(f"{self.spec}: no task to average over")
        every = {r2med_task_name(t) for t in names} == set(R2MED_TASKS)
        if every and metric == LEADERBOARD_METRIC and self.published_average is not None:
            return self.published_average
        return sum(values) / len(values)

    def _published_only_average(self, metric: str, tasks: Iterable[str] | None) -> float:
        """An average-only row's average: the source's own, over all 8 tasks and nDCG@10
        only; any other average would need figures the source never gave."""
        every = tasks is None or {r2med_task_name(t) for t in tasks} == set(R2MED_TASKS)
        if every and metric == LEADERBOARD_METRIC and self.published_average is not None:
            return self.published_average
        raise ValueError(
            f"{self.spec}: its source published only the {LEADERBOARD_METRIC} average over "
            f"R2MED's {len(R2MED_TASKS)} tasks, no per-task figures"
        )


# ---- the shipped tables --------------------------------------------------------------------


def table_names() -> list[str]:
    return sorted(p.stem for p in DATA_DIR.glob("*.json"))


@lru_cache(maxsize=8)
def _read_table(name: str) -> dict[str, Reference]:
    path = DATA_DIR / f"{name}.json"
    if not _TABLE_NAME.fullmatch(name) or not path.is_file():
        known = ", ".join(table_names()) or "none"
        raise UnknownReference(f"unknown reference table {name!r}; known: {known}")
    data = json.loads(path.read_text(encoding="utf-8"))
    return references_from(data, name)


def references_from(data: Mapping[str, Any], table: str | None = None) -> dict[str, Reference]:
    """The rows of a table as `build_table` or `build_leaderboard` returns it (and the data
    file holds); ``table`` names it in the rows' specs (default: the shipped name of its kind)."""
    source = data["source"]
    if source.get("kind") == LEADERBOARD_KIND:
        return _leaderboard_references(data, table or LEADERBOARD_TABLE)
    if source.get("kind") == AUTHORS_KIND:
        return _authors_references(data, table or AUTHORS_TABLE)
    if source.get("kind") == PAPER_KIND:
        return _paper_references(data, table or REASONEMBED_TABLE)
    return {
        row: Reference(
            row=row,
            tasks={t: dict(m) for t, m in entry["tasks"].items()},
            repository=source["repository"],
            commit=source["commit"],
            path=entry["path"],
            spelling=entry["spelling"],
            table=table or DEFAULT_TABLE,
        )
        for row, entry in data["rows"].items()
    }


def _fraction(published: float) -> float:
    """The page's figure ×100 (34.01) as a fraction, without float noise (0.3401)."""
    return float(Decimal(repr(published)) / 100)


def _leaderboard_references(data: Mapping[str, Any], table: str) -> dict[str, Reference]:
    metric = data["source"]["metric"]
    return {
        row: Reference(
            row=row,
            tasks={t: {metric: _fraction(v)} for t, v in entry["tasks"].items()},
            repository="",
            commit="",
            path=_page_row(entry["llm"], entry["retriever"]),
            table=table,
            kind=LEADERBOARD_KIND,
            published_average=_fraction(entry["avg"]),
        )
        for row, entry in data["rows"].items()
    }


_AUTHORS_FIELDS = ("name", "repository", "commit", "path", "line", "quote", "avg", "tasks")


def _authors_references(data: Mapping[str, Any], table: str) -> dict[str, Reference]:
    """The rows of a table of authors' figures, each checked: its source pinned to a commit
    and a line whose words hold the average, figures ×100 to 2 decimals, R2MED's tasks only,
    and all 8 tasks' mean agreeing with the average when every task is given."""
    metric = data["source"]["metric"]
    rows = {}
    for row, entry in data["rows"].items():
        where = f"{table}: {row}"
        if missing := [k for k in _AUTHORS_FIELDS if k not in entry]:
            raise ValueError(f"{where}: no {', '.join(missing)}")
        if not re.fullmatch(r"[0-9a-f]{40}", entry["commit"]):
            raise ValueError(f"{where}: commit {entry['commit']!r}: expected 40 hex digits")
        avg = _published_figure(repr(entry["avg"]), where, "avg")
        if str(avg) not in entry["quote"]:  # the line quoted must be the figure's source
            raise ValueError(f"{where}: avg {avg} is not in its quoted line")
        figures = {t: _published_figure(repr(v), where, t) for t, v in entry["tasks"].items()}
        if stray := [t for t in figures if t not in R2MED_TASKS]:
            raise ValueError(f"{where}: not R2MED's task(s): {', '.join(stray)}")
        if len(figures) == len(R2MED_TASKS):
            mean = sum(figures.values()) / len(figures)
            if abs(mean - avg) > AVERAGE_TOLERANCE:
                raise ValueError(f"{where}: avg {avg}: the 8 tasks' mean is {mean:.3f}")
        rows[row] = Reference(
            row=row,
            tasks={t: {metric: _fraction(float(v))} for t, v in figures.items()},
            repository=entry["repository"],
            commit=entry["commit"],
            path=entry["path"],
            table=table,
            kind=AUTHORS_KIND,
            published_average=_fraction(float(avg)),
            name=entry["name"],
            line=int(entry["line"]),
            quote=entry["quote"],
            setup=entry.get("setup", ""),
            note=entry.get("note", ""),
        )
    return rows


def load_references(name: str = DEFAULT_TABLE) -> dict[str, Reference]:
    """Every row of a shipped table (``eval/references/<name>.json``) by row id."""
    return dict(_read_table(name))


def references_of(row: str) -> list[Reference]:
    """The row ``row`` (an id or R2MED's path) in every shipped source that holds it,
    R2MED's repository first, its methods' authors last."""
    row = normalise_row(row)
    return [refs[row] for refs in (load_references(t) for t in SHOWN_TABLES) if row in refs]


def normalise_row(text: str) -> str:
    """A row id from its id or its R2MED path: "results/gar/hyde/qwen-7b/bm25" and
    "gar/hyde/qwen-7b/bm25" -> "hyde/qwen-7b/bm25", "base retriever/bm25" -> "base/bm25"."""
    row = text.strip().strip("/").removeprefix("results/")
    if row.startswith(f"{BASE_FOLDER}/"):
        return f"{BASE_PREFIX}/{row[len(BASE_FOLDER) + 1 :]}"
    return row.removeprefix(f"{GAR_FOLDER}/")


def reference(spec: str) -> Reference:
    """The row ``<table>:<row id>`` names, e.g. ``r2med:hyde/qwen-7b/bm25`` (R2MED's path of
    the row is accepted too) or ``r2med-leaderboard:hyde/o3-mini/nv``; `UnknownReference`
    naming the other source's spec, when it has the row, and close matches otherwise."""
    name, colon, row = spec.partition(":")
    if not colon or not row.strip():
        raise UnknownReference(
            f"reference {spec!r}: expected <table>:<row>, e.g. r2med:hyde/qwen-7b/bm25 or "
            f"{LEADERBOARD_TABLE}:hyde/o3-mini/nv"
        )
    name = name.strip().lower()
    rows = _read_table(name)
    row = normalise_row(row)
    if row in rows:
        return rows[row]
    other = next((t for t in SHOWN_TABLES if t != name and row in load_references(t)), None)
    if other is not None:  # the row is in another shipped source
        hint = f"the {load_references(other)[row].source_name} has it: {other}:{row}"
    else:
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


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _opening(table: Mapping[str, Any]) -> list[str]:
    """A data file's first lines, up to its rows: its source and its tasks."""
    return ["{", f'  "source": {_dump(table["source"])},', f'  "tasks": {_dump(table["tasks"])},',
            '  "rows": {']  # fmt: skip


def table_text(table: Mapping[str, Any]) -> str:
    """The data file's text: indented down to a task, whose metrics take one line each, so
    the file is small and a diff shows which row and task changed."""
    dump = _dump
    lines = _opening(table)
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


# ---- the leaderboard's importer ------------------------------------------------------------

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
# the page averages unrounded figures: its Avg is within 0.005 of their mean, which is within
# 0.005 of the mean of its rounded figures
AVERAGE_TOLERANCE = Decimal("0.01")
_AGENT_CELL = re.compile(r"(?P<agent>[^()]+?)\s*\((?P<llm>[^()]+)\)")


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


def _published_figure(text: str, where: str, field: str) -> Decimal:
    """One cell of the page's ×100 figures: a number from 0 to 100, at most 2 decimals."""
    try:
        value = Decimal(text.strip())
    except InvalidOperation:
        raise ValueError(f"{where}: {field} {text!r}: not a number") from None
    if not value.is_finite() or not 0 <= value <= 100 or value.as_tuple().exponent < -2:
        raise ValueError(f"{where}: {field} {text!r}: not a figure ×100 to 2 decimals")
    return value


def _leaderboard_line(fields: list[str], where: str) -> tuple[str, dict[str, Any]]:
    """(row id, its entry) of one line of the TSV."""
    if len(fields) != len(LEADERBOARD_COLUMNS):
        raise ValueError(
            f"{where}: {len(fields)} tab-separated fields, expected {len(LEADERBOARD_COLUMNS)} "
            f"({', '.join(LEADERBOARD_COLUMNS)})"
        )
    llm, retriever, avg_text, *task_texts = fields
    row = leaderboard_row_id(llm, retriever, where)
    avg = _published_figure(avg_text, where, "avg")
    figures = {
        t: _published_figure(v, where, t) for t, v in zip(R2MED_TASKS, task_texts, strict=True)
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


def _tsv_rows(
    path: Path,
    columns: Sequence[str],
    read_line: Callable[[list[str], str], tuple[str, dict[str, Any]]],
) -> dict[str, Any]:
    """A published table's rows from a TSV with ``columns``, each line read by ``read_line``;
    a bad header, an empty table or a row given twice refused in one line naming the line."""
    lines = path.read_text(encoding="utf-8").splitlines()
    header = lines[0].split("\t") if lines else []
    if [h.strip() for h in header] != list(columns):
        raise ValueError(
            f"{path.as_posix()}:1: header {header!r}: expected the columns "
            f"{', '.join(columns)} (tab-separated)"
        )
    rows: dict[str, Any] = {}
    first_line: dict[str, int] = {}
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        where = f"{path.as_posix()}:{number}"
        row, entry = read_line(line.split("\t"), where)
        if row in rows:
            raise ValueError(f"{where}: row {row} again (line {first_line[row]})")
        rows[row], first_line[row] = entry, number
    if not rows:
        raise ValueError(f"{path.as_posix()}: no rows below the header")
    return rows


def build_leaderboard(tsv: Path | str) -> dict[str, Any]:
    """The data of the leaderboard's table from a TSV copy of the page's table (a header
    ``llm retriever avg <the 8 tasks>``, then one row a line, in the page's order).

    Every name is mapped to R2MED's short names and every figure checked; a bad header,
    field, name, figure or a row given twice is refused in one line naming the line.
    """
    rows = _tsv_rows(Path(tsv), LEADERBOARD_COLUMNS, _leaderboard_line)
    source = {"kind": LEADERBOARD_KIND, "name": LEADERBOARD_SOURCE, "page": LEADERBOARD_PAGE,
              "metric": LEADERBOARD_METRIC, "scale": 100}  # fmt: skip
    return {"source": source, "tasks": list(R2MED_TASKS), "rows": rows}


def leaderboard_text(table: Mapping[str, Any]) -> str:
    """The leaderboard's data file, or a paper's table's: one row a line, in the page's (the
    table's) order, so a diff shows it."""
    dump = _dump
    lines = _opening(table)
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


# ---- a paper's table: ReasonEmbed's Table 3 ------------------------------------------------

# The paper, the table, and where its figures were read: the table is published as an image
# in the authors' repository, so the image at its commit is the figures' address.
REASONEMBED_SOURCE = {
    "kind": PAPER_KIND,
    "name": "ReasonEmbed Table 3",
    "title": "ReasonEmbed: Enhanced Text Embeddings for Reasoning-Intensive Document Retrieval",
    "authors": "Chen et al., 2025",
    "arxiv": "2510.08252",
    "table": 3,
    "caption": "Main evaluation results (nDCG@10) on the R2MED benchmark (using original queries)",
    "repository": "https://github.com/VectorSpaceLab/agentic-search",
    "commit": "b2f2e40050f47453848fa84beefee793dbdb88a5",
    "path": "ReasonEmbed/imgs/r2med-performance.png",
    "metric": LEADERBOARD_METRIC,
    "scale": 100,
}
REASONEMBED_SCRIPTS = "ReasonEmbed/evaluation_r2med/scripts"  # the authors' per-model settings
PAPER_COLUMNS = ("Model", "Group", "Size", "Mark", "Avg", *R2MED_TASKS)
# the table's sections, as the TSV's Group names them, with their headings as printed
PAPER_GROUPS = {
    "general": "General-purpose methods",
    "reasoning": "Tailored methods for reasoning-intensive retrieval",
    "reasonembed-basic": "ReasonEmbed from basic contrastive learning (using InfoNCE loss)",
    "reasonembed": "ReasonEmbed from Redapter (using the self-adaptive RI-InfoNCE loss)",
}
BASELINE_GROUPS = ("general", "reasoning")  # the caption's "baselines"; the rest are ReasonEmbed
# the caption's words for each mark of a baseline; an unmarked ReasonEmbed row is the authors'
R2MED_MARK = ""  # "Other results are directly taken from Li et al. (2025b)": R2MED's paper
PAPER_MARKS = {
    "*": '"well-trained models released by existing studies and evaluated by us"',
    "†": '"reproduced methods in this work"',
    R2MED_MARK: '"directly taken from Li et al. (2025b)": R2MED\'s paper',
}
OWN_MODEL = "the authors' own model"
_SIZE = re.compile(r"-|\d+(?:\.\d+)?B")
_SIZE_IN_NAME = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?B)\b")

# The table's model names (case-folded) -> the retriever's short name in the row id
# (``base/<short>``; R2MED's own short names for the rows it repeats) and the authors' script
# for it under REASONEMBED_SCRIPTS ("": none published). The image prints the six ReasonEmbed
# rows under two section headings with the same three names; the TSV adds the loss to each
# name, "(InfoNCE)" for the basic section and "(RI-InfoNCE)" for Redapter's. Their short names
# are their hub checkpoints' (hanhainebula/reason-embed-*-0928, the scripts' model_path).
REASONEMBED_MODELS: dict[str, tuple[str, str]] = {
    "bm25": ("bm25", ""),
    "openai-3-large": ("openai", ""),
    "gritlm-7b": ("grit", ""),
    "nv-embed-v2": ("nv", ""),
    "gte-qwen2-7b-instruct": ("gte-qwen2-7b-instruct", ""),
    "qwen3-embedding-4b": ("qwen3-embedding-4b", "baselines/eval_qwen3_embedding_4b.sh"),
    "qwen3-embedding-8b": ("qwen3-embedding-8b", "baselines/eval_qwen3_embedding_8b.sh"),
    "qwen3-4b-ms": ("qwen3-4b-ms", ""),
    "qwen3-8b-ms": ("qwen3-8b-ms", ""),
    "llama-3.1-8b-ms": ("llama-3.1-8b-ms", ""),
    "reasonir-8b": ("reasonir-8b", "baselines/eval_reasonir_8b.sh"),
    "rader-gte-qwen2-7b": ("rader-gte-qwen2-7b", "baselines/eval_rader_gte_qwen2_7b.sh"),
    "diver-retriever": ("diver-retriever-4b", "baselines/eval_diver_retriever_4b.sh"),
    "reasonembed-qwen3-4b (infonce)": (
        "reason-embed-basic-qwen3-4b", "ours/eval_reason_embed_basic_qwen3_4b.sh"),
    "reasonembed-qwen3-8b (infonce)": (
        "reason-embed-basic-qwen3-8b", "ours/eval_reason_embed_basic_qwen3_8b.sh"),
    "reasonembed-llama-3.1-8b (infonce)": (
        "reason-embed-basic-llama-3.1-8b", "ours/eval_reason_embed_basic_llama_3.1_8b.sh"),
    "reasonembed-qwen3-4b (ri-infonce)": (
        "reason-embed-qwen3-4b", "ours/eval_reason_embed_qwen3_4b.sh"),
    "reasonembed-qwen3-8b (ri-infonce)": (
        "reason-embed-qwen3-8b", "ours/eval_reason_embed_qwen3_8b.sh"),
    "reasonembed-llama-3.1-8b (ri-infonce)": (
        "reason-embed-llama-3.1-8b", "ours/eval_reason_embed_llama_3.1_8b.sh"),
}  # fmt: skip


def repeats_r2med(group: str, mark: str) -> bool:
    """Whether the table says a row is R2MED's own figure: an unmarked baseline."""
    return group in BASELINE_GROUPS and mark == R2MED_MARK


def _paper_line(fields: list[str], where: str) -> tuple[str, dict[str, Any]]:
    """(row id, its entry) of one line of the paper's TSV."""
    if len(fields) != len(PAPER_COLUMNS):
        raise ValueError(
            f"{where}: {len(fields)} tab-separated fields, expected {len(PAPER_COLUMNS)} "
            f"({', '.join(PAPER_COLUMNS)})"
        )
    model, group, size, mark, avg_text, *task_texts = (f.strip() for f in fields)
    found = REASONEMBED_MODELS.get(model.casefold())
    if found is None:
        raise ValueError(f"{where}: Model {model!r}: not one of Table 3's models (known: "
                         f"{', '.join(REASONEMBED_MODELS)})")  # fmt: skip
    short, script = found
    if group not in PAPER_GROUPS:
        raise ValueError(f"{where}: Group {group!r}: expected one of {', '.join(PAPER_GROUPS)}")
    if mark not in PAPER_MARKS:
        raise ValueError(f"{where}: Mark {mark!r}: expected *, † or nothing")
    if not _SIZE.fullmatch(size):
        raise ValueError(f"{where}: Size {size!r}: expected - or a size such as 7B")
    # The printed Avg is kept as printed, whatever the mean of the tasks: where the two
    # disagree (RaDeR's) that is what the paper published, shown by `inconsistencies`.
    avg = _published_figure(avg_text, where, "Avg")
    figures = {
        t: _published_figure(v, where, t) for t, v in zip(R2MED_TASKS, task_texts, strict=True)
    }
    entry = {
        "model": model, "group": group, "size": size, "mark": mark, "avg": float(avg),
        "tasks": {t: float(v) for t, v in figures.items()},
        "script": f"{REASONEMBED_SCRIPTS}/{script}" if script else "",
    }  # fmt: skip
    return f"{BASE_PREFIX}/{short}", entry


def build_reasonembed(tsv: Path | str) -> dict[str, Any]:
    """The data of ReasonEmbed's Table 3 from a TSV of it (``Model Group Size Mark Avg`` and
    the 8 tasks, ×100, one row a line in the table's order).

    Every cell is checked and every model mapped to its row id; a bad header, field, name,
    figure or a row given twice is refused in one line naming the line. The table's own
    inconsistencies are kept as printed (`inconsistencies` shows them).
    """
    rows = _tsv_rows(Path(tsv), PAPER_COLUMNS, _paper_line)
    return {"source": dict(REASONEMBED_SOURCE), "tasks": list(R2MED_TASKS), "rows": rows}


def paper_tsv(table: Mapping[str, Any]) -> str:
    """The TSV `build_reasonembed` reads, written back from its data (for the round trip)."""
    lines = ["\t".join(PAPER_COLUMNS)]
    for entry in table["rows"].values():
        figures = [repr(v) for v in [entry["avg"], *(entry["tasks"][t] for t in R2MED_TASKS)]]
        lines.append("\t".join([entry["model"], entry["group"], entry["size"], entry["mark"],
                                *figures]))  # fmt: skip
    return "\n".join(lines) + "\n"


def _paper_setup(source: Mapping[str, Any], entry: Mapping[str, Any]) -> str:
    """What the row's figures are of, as far as the paper and its repository say."""
    if repeats_r2med(entry["group"], entry["mark"]):
        return "R2MED's own figures, repeated (an unmarked baseline)"
    if entry["script"]:
        return (f"the authors' settings: {entry['script']} at {source['commit']} (model, "
                "pooling, instruction format, maximum lengths)")  # fmt: skip
    if entry["mark"] == "†":
        return "reproduced by the authors; no checkpoint or script of theirs is published"
    return "evaluated by the authors; no script of theirs is published for it"


def _paper_references(data: Mapping[str, Any], table: str) -> dict[str, Reference]:
    source = data["source"]
    metric = source["metric"]
    citation = (f"{source['title']} ({source['authors']}, arXiv {source['arxiv']}), "
                f"Table {source['table']}")  # fmt: skip
    return {
        row: Reference(
            row=row,
            tasks={t: {metric: _fraction(v)} for t, v in entry["tasks"].items()},
            repository=source["repository"],
            commit=source["commit"],
            path=source["path"],
            table=table,
            kind=PAPER_KIND,
            published_average=_fraction(entry["avg"]),
            name=source["name"],
            setup=_paper_setup(source, entry),
            citation=citation,
            printed={k.title(): entry[k] for k in ("model", "group", "size", "mark")},
        )
        for row, entry in data["rows"].items()
    }


def printed_text(ref: Reference) -> str:
    """A paper's row's cells as printed, with what its section and mark mean there."""
    cells = ref.printed
    group, mark = cells["Group"], cells["Mark"]
    meaning = PAPER_MARKS[mark] if group in BASELINE_GROUPS or mark else OWN_MODEL
    return (f"Model {cells['Model']}, Group {group} (\"{PAPER_GROUPS.get(group, group)}\"), "
            f"Size {cells['Size']}, Mark {mark or 'none'} ({meaning})")  # fmt: skip


# ---- where the two sources disagree --------------------------------------------------------

HALF_UNIT = Decimal("0.005")  # half of the page's last decimal, on its ×100 scale


def agrees(repository_value: float, leaderboard_value: float) -> bool:
    """Whether the page's figure is the repository's rounded to the page's 2 decimals ×100:
    at most half a unit apart, at an exact half either way (the page rounds halves both
    ways). Compared as the decimals they were written with, not as binary floats."""
    apart = abs(Decimal(repr(repository_value)) - Decimal(repr(leaderboard_value))) * 100
    return apart <= HALF_UNIT


@dataclass(frozen=True)
class Conflict:
    """A row both sources hold whose nDCG@10 differs beyond rounding on some task."""

    repository: Reference
    leaderboard: Reference
    tasks: tuple[str, ...]  # the tasks that differ, in R2MED's order

    @property
    def row(self) -> str:
        return self.repository.row

    def other(self, ref: Reference) -> Reference:
        """The source that is not ``ref``'s."""
        return self.leaderboard if ref.kind == REPOSITORY_KIND else self.repository

    def text(self) -> str:
        """Both sources' figures, one line: what every output says of a conflict."""
        pairs = ", ".join(f"{t} {task_pct(self.repository, t)} vs "
                          f"{task_pct(self.leaderboard, t)}" for t in self.tasks)  # fmt: skip
        repo_avg = self.repository.average(LEADERBOARD_METRIC) * 100
        board_avg = self.leaderboard.average(LEADERBOARD_METRIC) * 100
        return (
            f"{self.row}: R2MED's two sources conflict: nDCG@10 ×100 differs beyond rounding "
            f"on {len(self.tasks)} of {len(self.leaderboard.tasks)} tasks ({pairs}); Avg "
            f"{repo_avg:.2f} in the {SOURCE_NAMES[REPOSITORY_KIND]} ({self.repository.spec}) "
            f"vs {board_avg:.2f} on the {SOURCE_NAMES[LEADERBOARD_KIND]} "
            f"({self.leaderboard.spec})"
        )


def task_pct(ref: Reference, task: str) -> str:
    """The row's nDCG@10 ×100 on ``task`` with every decimal its source wrote (18.376, 17.57)."""
    value = ref.figure(task, LEADERBOARD_METRIC)
    return "-" if value is None else f"{value * 100:.{ref.decimals - 2}f}"


def find_conflicts(
    repository: Mapping[str, Reference], leaderboard: Mapping[str, Reference]
) -> dict[str, Conflict]:
    """Every row both tables hold whose nDCG@10 disagrees (`agrees`) on a task both report."""
    found = {}
    for row, board in leaderboard.items():
        repo = repository.get(row)
        if repo is not None and (differ := differing(repo, board)):
            found[row] = Conflict(repo, board, differ)
    return found


def conflicts() -> dict[str, Conflict]:
    """The conflicts between the shipped repository and leaderboard tables, by row id."""
    return find_conflicts(load_references(DEFAULT_TABLE), load_references(LEADERBOARD_TABLE))


def conflict_of(ref: Reference) -> Conflict | None:
    """The conflict a shipped row is part of, or None (a row of another table: None)."""
    if ref.table not in TABLES:
        return None
    return conflicts().get(ref.row)


# ---- a paper's table at odds with itself, and the rows it repeats from R2MED ---------------


@dataclass(frozen=True)
class Inconsistency:
    """A row whose printed cells disagree with each other: shown, never resolved."""

    ref: Reference
    cell: str  # the cell at odds: "Avg" or "Size"
    printed: str  # as printed: "35.19", "8B"
    other: str  # what the row's other cells say: "35.215" (its tasks' mean), "4B" (its name)

    @property
    def label(self) -> str:
        """A figure at odds with the row's own figures is a conflict; a size, a note."""
        return "CONFLICT" if self.cell == "Avg" else "NOTE"

    def brief(self) -> str:
        """The note column's words: "CONFLICT: Avg 35.19 printed, its tasks' mean 35.215"."""
        said = "its tasks' mean" if self.cell == "Avg" else "its name says"
        return f"{self.label}: {self.cell} {self.printed} printed, {said} {self.other}"

    def text(self) -> str:
        """Both figures and where each comes from, one line."""
        if self.cell == "Avg":
            apart = Decimal(self.other) - Decimal(self.printed)
            return (
                f"{self.ref.row}: {self.ref.source_name} prints Avg {self.printed}, the mean "
                f"of its {len(self.ref.tasks)} printed task figures is {self.other} "
                f"({abs(apart)} apart; rounding allows {AVERAGE_TOLERANCE})"
            )
        return (f"{self.ref.row}: {self.ref.source_name} prints Size {self.printed} for "
                f"{self.ref.printed['Model']}, whose name says {self.other}")  # fmt: skip


def _pct_text(fraction: float) -> str:
    """A fraction as the figure ×100 it was read from, every decimal kept (35.215)."""
    return format((Decimal(repr(fraction)) * 100).normalize(), "f")


def inconsistencies(ref: Reference) -> list[Inconsistency]:
    """Where a row's printed cells disagree, found from the row: a printed Avg more than
    rounding allows (AVERAGE_TOLERANCE) from the mean of its 8 printed task figures, and a
    printed Size other than the one the model's name states."""
    found = []
    figures = [ref.figure(t, LEADERBOARD_METRIC) for t in R2MED_TASKS]
    if ref.published_average is not None and None not in figures:
        mean = sum(Decimal(repr(v)) for v in figures) / len(figures)  # type: ignore[arg-type]
        printed = Decimal(repr(ref.published_average))
        if abs(mean - printed) * 100 > AVERAGE_TOLERANCE:
            found.append(Inconsistency(ref, "Avg", _pct_text(ref.published_average),
                                       format((mean * 100).normalize(), "f")))  # fmt: skip
    size, model = ref.printed.get("Size"), ref.printed.get("Model", "")
    named = _SIZE_IN_NAME.search(model)
    if size and named and named.group(1) != size:
        found.append(Inconsistency(ref, "Size", size, named.group(1)))
    return found


@dataclass(frozen=True)
class Repeat:
    """A row a paper prints as R2MED's own figures, beside R2MED's row in one of its sources,
    compared figure by figure (the Avg too) by `agrees`: to the rounding of the coarser."""

    ref: Reference  # the paper's row
    original: Reference  # R2MED's row of the same id
    differ: tuple[str, ...]  # the tasks (and "Avg", last) whose figures differ

    def text(self) -> str:
        """Same, or each differing figure of both, in one line."""
        head = (f"{self.ref.row}: {self.ref.source_name} repeats R2MED's figures; against the "
                f"{self.original.source_name} ({self.original.spec})")  # fmt: skip
        if not self.differ:
            return f"{head}: same on all {len(R2MED_TASKS)} tasks and the Avg, to 2 decimals"
        pairs = ", ".join(f"{t} {_repeat_pct(self.ref, t)} vs {_repeat_pct(self.original, t)}"
                          for t in self.differ)  # fmt: skip
        return f"{head}: CONFLICT: differs on {len(self.differ)} figure(s) ({pairs})"


def _repeat_pct(ref: Reference, task: str) -> str:
    """A figure of a repeat's comparison ×100: a task's with its source's decimals, or the Avg."""
    return _pct(ref.average(LEADERBOARD_METRIC)) if task == "Avg" else task_pct(ref, task)


def differing(a: Reference, b: Reference, with_average: bool = False) -> tuple[str, ...]:
    """The R2MED tasks (and "Avg", last, when ``with_average``) whose nDCG@10 both rows
    report and which disagree beyond rounding (`agrees`)."""
    differ = []
    for task in R2MED_TASKS:
        x, y = a.figure(task, LEADERBOARD_METRIC), b.figure(task, LEADERBOARD_METRIC)
        if x is not None and y is not None and not agrees(x, y):
            differ.append(task)
    if with_average and not agrees(a.average(LEADERBOARD_METRIC), b.average(LEADERBOARD_METRIC)):
        differ.append("Avg")
    return tuple(differ)


def repeats_of(ref: Reference) -> list[Repeat]:
    """A paper's row the paper marks as R2MED's own figures, compared with R2MED's row of the
    same id in each of R2MED's sources that holds it ([] for any other row)."""
    cells = ref.printed
    if ref.kind != PAPER_KIND or not repeats_r2med(cells["Group"], cells["Mark"]):
        return []
    originals = [rows[ref.row] for rows in map(load_references, TABLES) if ref.row in rows]
    return [Repeat(ref, o, differing(ref, o, with_average=True)) for o in originals]


# ---- command line --------------------------------------------------------------------------


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.2f}"


AVERAGE_ONLY_MARK = "(avg only)"


def _average_cell(ref: Reference | None, metric: str) -> str:
    """The row's average ×100 over all its tasks; "-" when a task lacks the metric (or there
    is no row), a "*" with the count when the row has fewer than R2MED's 8 tasks, and
    "(avg only)" when its source published the average alone."""
    if ref is None:
        return "-"
    try:
        text = _pct(ref.average(metric))
    except ValueError:
        return "-"
    if ref.average_only:
        return f"{text} {AVERAGE_ONLY_MARK}"
    return text if len(ref.tasks) == len(R2MED_TASKS) else f"{text}* ({len(ref.tasks)} tasks)"


def _row_order(row: str) -> tuple[int, list[str]]:
    """Base rows, the methods in R2MED's order, then the rerankers; by name within each."""
    method, *rest = row.split("/")
    order = [BASE_PREFIX, *GAR_METHODS, RERANKER_PREFIX]
    return (order.index(method) if method in order else len(order)), [method, *rest]


def merged_rows(tables: Mapping[str, Mapping[str, Reference]]) -> dict[str, dict[str, Reference]]:
    """Row id -> table -> its row, over ``tables`` (name -> rows), in `_row_order`."""
    merged: dict[str, dict[str, Reference]] = {}
    for name, rows in tables.items():
        for row, ref in rows.items():
            merged.setdefault(row, {})[name] = ref
    return {row: merged[row] for row in sorted(merged, key=_row_order)}


def _source_line(name: str, rows: Mapping[str, Reference]) -> str:
    first = next(iter(rows.values()), None)
    if first is None:
        return f"{name}: no rows"
    if first.kind == AUTHORS_KIND:
        sources = ", ".join(sorted({ref.source_name for ref in rows.values()}))
        return (f"{len(rows)} row(s) its methods' authors published ({sources}; specs "
                f"{name}:<row>; show <row> quotes the line)")  # fmt: skip
    if first.kind == PAPER_KIND:
        return (f"{len(rows)} rows of {first.citation} (read from {first.location}; specs "
                f"{name}:<row>; show <row> gives each as printed)")  # fmt: skip
    where = LEADERBOARD_PAGE if first.kind == LEADERBOARD_KIND else (
        f"{first.repository} at {first.commit}, results/")  # fmt: skip
    return f"{len(rows)} rows from the {first.source_name} ({where}; specs {name}:<row>)"


def list_text(
    tables: Mapping[str, Mapping[str, Reference]],
    method: str | None,
    metric: str,
    found: Mapping[str, Conflict],
) -> str:
    """Every row of ``tables`` (name -> rows), one line each, with each source's Avg side by
    side; the ``found`` conflicts among them marked and spelt out below. R2MED's own two
    sources always have a column; the authors' table only where it holds a shown row."""
    merged = {r: by for r, by in merged_rows(tables).items()
              if method is None or r.split("/", 1)[0] == method}  # fmt: skip
    names = [n for n in tables if n in TABLES or any(n in by for by in merged.values())]
    heads = [_column(n, tables[n]) for n in names]
    lines = [f"| row | {' | '.join(heads)} | note |", "|---|" + "---:|" * len(names) + "---|"]
    shown, spelt = [], []
    for row, by in merged.items():
        cells = [_average_cell(by.get(n), metric) for n in names]
        notes = []
        if (c := found.get(row)) is not None:
            notes.append(f"CONFLICT: {len(c.tasks)} of {len(c.leaderboard.tasks)} tasks differ")
            shown.append(c)
        for name in names:
            if (ref := by.get(name)) is not None:
                brief, lines_of = _paper_notes(ref)
                notes += brief
                spelt += lines_of
        lines.append(f"| {row} | {' | '.join(cells)} | {'; '.join(notes)} |")
    lines.append("")
    lines += [_source_line(n, tables[n]) + "." for n in names]
    lines.append(f"{len(merged)} rows shown, Avg {metric} ×100.")
    if any(ref.average_only for by in merged.values() for ref in by.values()):
        lines.append(
            f"{AVERAGE_ONLY_MARK}: its source published the 8-task {LEADERBOARD_METRIC} "
            "average alone, no per-task figure."
        )
    if set(TABLES) <= set(names):
        lines.append(
            "A leaderboard Avg is the page's own, averaged before rounding: it may be 0.01 "
            "from the repository's where every task agrees."
        )
    lines += [f"CONFLICT: {c.text()}" for c in shown]
    lines += spelt
    return "\n".join(lines) + "\n"


def _column(name: str, rows: Mapping[str, Reference]) -> str:
    """A source's column head: its kind's name, or a paper's table's own ("ReasonEmbed
    Table 3"), since each paper is a source of its own."""
    kind = KIND_OF_TABLE.get(name, REPOSITORY_KIND)
    first = next(iter(rows.values()), None)
    return first.source_name if kind == PAPER_KIND and first is not None else SOURCE_NAMES[kind]


def paper_notes(ref: Reference) -> list[str]:
    """What a row's own printed cells and the R2MED rows it repeats say of it, a line each
    (CONFLICT, NOTE or REPEAT first): [] for a row of R2MED's own sources."""
    return _paper_notes(ref)[1]


def _paper_notes(ref: Reference) -> tuple[list[str], list[str]]:
    """A row's notes from its own printed cells and the R2MED rows it repeats: (the words of
    ``list``'s note column, the lines that spell them out below the table)."""
    found = inconsistencies(ref)
    brief = [i.brief() for i in found]
    spelt = [f"{i.label}: {i.text()}" for i in found]
    repeats = repeats_of(ref)
    if repeats:
        differ = [r.original.source_name for r in repeats if r.differ]
        brief.append(
            f"{ref.source_name} repeats R2MED's: "
            + (f"CONFLICT with the {' and the '.join(differ)}" if differ else "same")
        )
        spelt += [f"REPEAT: {r.text()}" for r in repeats]  # fmt: skip
    return brief, spelt


def show_text(ref: Reference, metrics: Sequence[str]) -> str:
    """One source's row: per task, the asked metrics it publishes, and their Avg ×100."""
    if ref.average_only:
        return _average_only_text(ref, metrics)
    held = [m for m in metrics if any(m in values for values in ref.tasks.values())]
    lines = [f"{ref.label}", *_source_lines(ref)]
    if not held:
        published = sorted({m for v in ref.tasks.values() for m in v}, key=_metric_order)
        return "\n".join([*lines, f"it publishes none of {', '.join(metrics)}, only "
                          f"{', '.join(published)}"]) + "\n"  # fmt: skip
    lines += [
        "| task | " + " | ".join(held) + " |",
        "|---|" + "|".join(["---:"] * len(held)) + "|",
    ]
    for task, values in ref.tasks.items():
        cells = ["-" if values.get(m) is None else ref.format(values[m]) for m in held]
        lines.append(f"| {task} | " + " | ".join(cells) + " |")
    lines.append("| Avg ×100 | " + " | ".join(_average_cell(ref, m) for m in held) + " |")
    return "\n".join(lines) + "\n"


def _source_lines(ref: Reference) -> list[str]:
    """Where a row's figures come from; an authors' row adds the line quoted, the setup the
    figure is of and what its source leaves unsaid. The last line ends a paragraph."""
    lines = [f"from {ref.source}"]
    if ref.printed:
        lines.append(f"as printed: {printed_text(ref)}")
    if ref.quote:
        lines.append(f"which reads: {ref.quote}")
    lines += [f"{label}: {text}" for label, text in (("setup", ref.setup), ("note", ref.note))
              if text]  # fmt: skip
    lines[-1] += "\n"
    return lines


def _average_only_text(ref: Reference, metrics: Sequence[str]) -> str:
    """An average-only row: every R2MED task's cell says it is not published, and only the
    8-task nDCG@10 average is given; never a figure the source did not print."""
    lines = [ref.label, *_source_lines(ref)]
    if LEADERBOARD_METRIC not in metrics:
        return "\n".join([*lines, f"it publishes none of {', '.join(metrics)}, only its "
                          f"{LEADERBOARD_METRIC} average over R2MED's 8 tasks"]) + "\n"  # fmt: skip
    lines += [f"| task | {LEADERBOARD_METRIC} |", "|---|---:|"]
    lines += [f"| {task} | {NOT_PUBLISHED} |" for task in R2MED_TASKS]
    lines.append(f"| Avg ×100 | {_average_cell(ref, LEADERBOARD_METRIC)} |")
    return "\n".join(lines) + "\n"


def conflict_text(c: Conflict) -> str:
    """A conflict as a table: both sources' nDCG@10 ×100 on every task, the differing marked."""
    repo, board = c.repository, c.leaderboard
    lines = [
        f"CONFLICT: R2MED's two sources differ on {c.row}: nDCG@10 ×100 beyond rounding on "
        f"{len(c.tasks)} of {len(board.tasks)} tasks ({repo.spec} vs {board.spec})\n",
        f"| task | {repo.source_name} | {board.source_name} | |",
        "|---|---:|---:|---|",
    ]
    for task in R2MED_TASKS:
        mark = "differs" if task in c.tasks else ""
        lines.append(f"| {task} | {task_pct(repo, task)} | {task_pct(board, task)} | {mark} |")
    avgs = [_average_cell(r, LEADERBOARD_METRIC) for r in (repo, board)]
    lines.append(f"| Avg | {avgs[0]} | {avgs[1]} | |")
    return "\n".join(lines) + "\n"


def show_rows(spec: str, metrics: Sequence[str]) -> str:
    """``show``: a spec's one source, or a bare row id's every source, and its conflict."""
    if ":" in spec:
        refs = [reference(spec)]
    else:
        refs = references_of(spec)
        if not refs:
            reference(f"{DEFAULT_TABLE}:{spec}")  # refused, with the close matches
    blocks = [show_text(ref, metrics) for ref in refs]
    conflict = conflict_of(refs[0])
    if conflict is not None:
        blocks.append(conflict_text(conflict))
    for ref in refs:  # a paper's row: where it disagrees with itself, and what it repeats
        found = inconsistencies(ref)
        if found:
            blocks.append("".join(f"{i.label}: {i.text()}\n" for i in found))
        if repeats := repeats_of(ref):
            blocks.append(repeat_text(ref, repeats))
    return "\n".join(blocks)


def repeat_text(ref: Reference, repeats: Sequence[Repeat]) -> str:
    """A paper's row that repeats R2MED's, beside R2MED's row in each source that holds it:
    nDCG@10 ×100 figure by figure, each "same" or naming the sources it differs from."""
    originals = [r.original for r in repeats]
    lines = [
        f"REPEAT: {ref.source_name} prints {ref.row} as R2MED's own figures; figure by figure "
        "against R2MED's row (same: equal to the rounding of the coarser)\n",
        "| figure | " + " | ".join(o.source_name for o in originals)
        + f" | {ref.source_name} | |",
        "|---|" + "---:|" * (len(originals) + 1) + "---|",
    ]  # fmt: skip
    for figure in (*R2MED_TASKS, "Avg"):
        differ = [r.original.source_name for r in repeats if figure in r.differ]
        verdict = f"differs from the {' and the '.join(differ)}" if differ else "same"
        cells = [_repeat_pct(o, figure) for o in (*originals, ref)]
        lines.append(f"| {figure} | {' | '.join(cells)} | {verdict} |")
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m eval.references",
        description="R2MED's published per-task figures, from its repository's results/, "
        "its leaderboard (r2med.github.io), methods' authors and ReasonEmbed's Table 3 (arXiv "
        "2510.08252): build the shipped tables, list their rows, show one.",
    )
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="read R2MED's results/ folder into a table")
    b.add_argument("results_dir", type=Path, metavar="RESULTS_DIR", help="R2MED's results/")
    b.add_argument("--commit", required=True, help="the R2MED commit the folder is at")
    b.add_argument("-o", "--out", type=Path, default=None, help="default: print it")
    lb = sub.add_parser("build-leaderboard", help="read a TSV copy of the leaderboard")
    lb.add_argument("tsv", type=Path, metavar="TSV", help="llm, retriever, avg, the 8 tasks")
    lb.add_argument("-o", "--out", type=Path, default=None, help="default: print it")
    rb = sub.add_parser("build-reasonembed", help="read a TSV of ReasonEmbed's Table 3")
    rb.add_argument("tsv", type=Path, metavar="TSV", help="Model, Group, Size, Mark, Avg, tasks")
    rb.add_argument("-o", "--out", type=Path, default=None, help="default: print it")
    ls = sub.add_parser("list", help="every row with each source's average over the 8 tasks")
    ls.add_argument("--method", default=None, help="base, reranker, hyde, query2doc, ...")
    ls.add_argument("--metric", default=HEADLINE, help="default: %(default)s")
    ls.add_argument(
        "--table", default=None, help=f"one source, {', '.join(SHOWN_TABLES)}; default: all"
    )
    sh = sub.add_parser("show", help="one row's per-task figures")
    sh.add_argument(
        "row",
        metavar="ROW",
        help="a row id (hyde/qwen-7b/bm25: every source that has it) or a spec "
        f"(r2med:<row>, {LEADERBOARD_TABLE}:<row>, {AUTHORS_TABLE}:<row>, "
        f"{REASONEMBED_TABLE}:<row>)",
    )
    sh.add_argument(
        "--metrics", default=",".join(SHOWN_METRICS), help="comma-separated; default: %(default)s"
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return command(lambda: _main(args))


def _write(text: str, out: Path | None) -> None:
    from eval.plumbing.files import write_text

    if out is None:
        sys.stdout.write(text)
    else:
        write_text(out, text)
        print(f"written to {out}")


def _list(args: argparse.Namespace) -> None:
    try:
        args.metric = metric_name(args.metric)
    except ValueError as e:
        raise ValueError(f"--metric: {e}") from None
    names = list(SHOWN_TABLES) if args.table is None else [args.table]
    try:
        tables = {name: load_references(name) for name in names}
    except UnknownReference as e:
        raise ValueError(f"--table: {e}") from None
    methods = list(dict.fromkeys(r.split("/", 1)[0] for r in merged_rows(tables)))
    if args.method is not None and args.method not in methods:
        raise ValueError(f"--method {args.method!r}: known: {', '.join(methods)}")
    # a conflict is R2MED's two sources disagreeing: shown wherever one of them is listed
    found = {row: c for row, c in conflicts().items() if any(row in tables[n] for n in names)}
    sys.stdout.write(list_text(tables, args.method, args.metric, found))


def _main(args: argparse.Namespace) -> int:
    if args.command == "build":
        if not _COMMIT.fullmatch(args.commit):
            raise ValueError(f"--commit {args.commit!r}: expected 7 to 40 hex digits")
        if not args.results_dir.is_dir():
            raise ValueError(f"RESULTS_DIR {args.results_dir}: not a folder")
        _write(table_text(build_table(args.results_dir, args.commit)), args.out)
    elif args.command == "build-leaderboard":
        if not args.tsv.is_file():
            raise ValueError(f"TSV {args.tsv}: not a file")
        _write(leaderboard_text(build_leaderboard(args.tsv)), args.out)
    elif args.command == "build-reasonembed":
        if not args.tsv.is_file():
            raise ValueError(f"TSV {args.tsv}: not a file")
        _write(leaderboard_text(build_reasonembed(args.tsv)), args.out)
    elif args.command == "list":
        _list(args)
    else:
        try:
            metrics = parse_metrics(args.metrics)
        except ValueError as e:
            raise ValueError(f"--metrics: {e}") from None
        sys.stdout.write(show_rows(args.row, metrics))
    return 0


if __name__ == "__main__":
    sys.exit(main())
