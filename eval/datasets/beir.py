"""BEIR's layout: its qrels file, ``qrels/test.tsv`` (``query-id<TAB>corpus-id<TAB>score``,
after BEIR's header line if any). Its corpus and queries are read by `eval.datasets.layout`."""

from pathlib import Path

from eval.datasets.checks import (
    DataError,
    QrelsBuilder,
    as_grade,
    checked_id,
    first_line_hint,
    numbered_lines,
)

# BEIR's header (qrels/test.tsv), compared by name: a first line is a header because it says
# so, never because it fails to parse, which would silently drop the first judgement of a file
# written without one. "_" for "-" and any case are accepted.
_TSV_HEADER = ("query-id", "corpus-id", "score")
_TSV_HEADER_HINT = "the only header line recognised is BEIR's 'query-id corpus-id score'"


def _is_tsv_header(cols: list[str]) -> bool:
    return tuple(c.lower().replace("_", "-") for c in cols) == _TSV_HEADER


def read_qrels_tsv(path: Path) -> tuple[dict[str, dict[str, int]], list[str]]:
    """BEIR qrels: ``query-id<TAB>corpus-id<TAB>score``, after BEIR's header line if any."""
    builder = QrelsBuilder(path)
    for i, (number, line) in enumerate(numbered_lines(path)):
        where = f"{path} line {number}"
        cols = [c.strip() for c in line.split("\t")]
        if i == 0 and _is_tsv_header(cols):
            continue  # only the first line: a header further down is an error
        try:
            _add_tsv_row(builder, cols, where)
        except DataError as err:
            raise first_line_hint(err, i == 0, _TSV_HEADER_HINT) from None
    return builder.result()


def _add_tsv_row(builder: QrelsBuilder, cols: list[str], where: str) -> None:
    if len(cols) != 3:
        raise DataError(
            f"{where}: expected 3 tab-separated columns 'query-id corpus-id score', got {len(cols)}"
        )
    if not cols[0] or not cols[1]:
        key = "query-id" if not cols[0] else "corpus-id"
        raise DataError(f"{where}: field {key!r}: expected a non-empty id")
    builder.add(
        checked_id(cols[0], "query-id", where),
        checked_id(cols[1], "corpus-id", where),
        as_grade(cols[2], "score", where),
    )
