"""The data model of the published rows: the shipped tables' names and the kinds of source
they are, a row (`Reference`), and the published figures ×100 their data files hold.

* The paper's average is the mean of the 8 per-task values (×100 in its tables);
  `Reference.average` returns it as a fraction. Over all 8 tasks a leaderboard row's is the
  page's own Avg, which the data file keeps (it was averaged before rounding).
* An average-only row (`Reference.average_only`) holds no per-task figure: only the 8-task
  nDCG@10 average is read from it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from urllib.parse import quote

from eval.datasets import R2MED_TASKS, r2med_task_name
from eval.metrics import FAMILIES, HEADLINE, parse_metric

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

# R2MED's folders under results/, and the row-id prefix each gets
BASE_FOLDER, GAR_FOLDER, RERANKER_FOLDER = "base retriever", "gar", "reranker"
BASE_PREFIX = "base"
RERANKER_PREFIX = "reranker"
GAR_METHODS = ("hyde", "query2doc", "lamer", "search-o1", "search-r1")  # R2MED's order

# the page averages unrounded figures: its Avg is within 0.005 of their mean, which is within
# 0.005 of the mean of its rounded figures
AVERAGE_TOLERANCE = Decimal("0.01")


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


# ---- published figures ---------------------------------------------------------------------


def fraction(published: float) -> float:
    """The page's figure ×100 (34.01) as a fraction, without float noise (0.3401)."""
    return float(Decimal(repr(published)) / 100)


def published_figure(text: str, where: str, field: str) -> Decimal:
    """One cell of the page's ×100 figures: a number from 0 to 100, at most 2 decimals."""
    try:
        value = Decimal(text.strip())
    except InvalidOperation:
        raise ValueError(f"{where}: {field} {text!r}: not a number") from None
    if not value.is_finite() or not 0 <= value <= 100 or value.as_tuple().exponent < -2:
        raise ValueError(f"{where}: {field} {text!r}: not a figure ×100 to 2 decimals")
    return value


def metric_order(metric: str) -> tuple[int, int]:
    """Where a metric sorts among a row's: by its family (`eval.metrics`), then cut-off."""
    family, k = parse_metric(metric)
    return FAMILIES.index(family), k or 0


def pct(value: float | None) -> str:
    """A fraction as its figure ×100 to 2 decimals; "-" for none."""
    return "-" if value is None else f"{value * 100:.2f}"
