"""The command line, ``python -m eval.references``: build the shipped tables from their sources,
list their rows, show one.

    python -m eval.references build RESULTS_DIR --commit SHA -o eval/references/r2med.json
    python -m eval.references build-leaderboard leaderboard.tsv \\
        -o eval/references/r2med-leaderboard.json
    python -m eval.references build-reasonembed table3.tsv \\
        -o eval/references/reasonembed-table3.json
    python -m eval.references list [--method hyde] [--metric NDCG@10] [--table r2med]
    python -m eval.references show hyde/qwen-7b/bm25     # every source; r2med:... one

It imports nothing heavy, so ``--help`` is instant.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from eval.metrics import HEADLINE, metric_name, parse_metrics
from eval.plumbing.cli import command
from eval.references.conflicts import conflicts
from eval.references.leaderboard import build_leaderboard, leaderboard_text
from eval.references.model import (
    AUTHORS_TABLE,
    LEADERBOARD_TABLE,
    REASONEMBED_TABLE,
    SHOWN_METRICS,
    SHOWN_TABLES,
    UnknownReference,
)
from eval.references.reading import load_references
from eval.references.reasonembed import build_reasonembed
from eval.references.repository import COMMIT_PATTERN, build_table, table_text
from eval.references.text import list_text, merged_rows, show_rows


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
        if not COMMIT_PATTERN.fullmatch(args.commit):
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
