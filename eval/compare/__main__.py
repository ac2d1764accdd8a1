"""The command line: `python -m eval.compare runs/a runs/b ... [--baseline runs/a]`.

Every refusal (a run folder that cannot be compared, a bad --out, --metric or --reference)
is one ``error:`` line and exit status 2, through `eval.plumbing.cli.command`.
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from pathlib import Path

from eval.compare.comparison import DEFAULT_METRIC, TOP_MOVERS, compare_runs
from eval.compare.markdown import comparison_markdown
from eval.compare.output import write_comparison
from eval.compare.published import resolve_references
from eval.metrics import metric_name
from eval.plumbing.argtypes import non_negative_int
from eval.plumbing.cli import command
from eval.plumbing.files import writable_folder
from eval.significance import TESTS


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m eval.compare",
        description="Compare run folders of agents.commands.run: leaderboard, per-query deltas "
        "with paired significance, cost, plots.",
    )
    p.add_argument("runs", nargs="+", type=Path, help="run folders (agents.run --runs-dir/...)")
    p.add_argument("--baseline", type=Path, default=None, help="default: the first run")
    p.add_argument("--metric", default=DEFAULT_METRIC, help="default: %(default)s")
    p.add_argument("--test", default="fisher", choices=TESTS, help="default: %(default)s")
    p.add_argument(
        "--top", type=non_negative_int, default=TOP_MOVERS, help="movers listed each way"
    )
    p.add_argument("--out", type=Path, default=None, help="default: comparisons/<timestamp>")
    p.add_argument(
        "--qrels-from",
        default=None,
        metavar="DATASET",
        help="dataset whose qrels to use (default: each run's own, loaded only if needed)",
    )
    p.add_argument("--cache-dir", type=Path, default=None, help="as agents.run's")
    p.add_argument(
        "--reference",
        action="append",
        default=[],
        metavar="r2med:ROW",
        help="a published row to set beside the runs (repeatable; python -m eval.references "
        "list shows them), e.g. r2med:hyde/qwen-7b/bm25 (R2MED's repository), "
        "r2med-leaderboard:hyde/o3-mini/nv (its leaderboard) or "
        "reasonembed-table3:base/reason-embed-qwen3-8b (ReasonEmbed's Table 3)",
    )
    p.add_argument("--no-plots", action="store_true", help="no tasks.png and cost.png")
    p.add_argument(
        "--html",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="write report.html: tables, charts, every query's trajectory (default: on)",
    )
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Compare, write, print; 2 with one ``error:`` line when refused."""
    args = parse_args(argv)
    return command(lambda: _compare(args))


def _compare(args: argparse.Namespace) -> int:
    out = args.out or Path("comparisons") / datetime.now().strftime("%Y%m%d-%H%M%S")
    try:  # refused before a run folder is read or --out is made
        args.metric = metric_name(args.metric)
    except ValueError as e:
        raise ValueError(f"--metric: {e}") from None
    references = resolve_references(args.reference)
    writable_folder(out, "--out")
    comparison = compare_runs(
        args.runs,
        baseline=args.baseline,
        metric=args.metric,
        qrels_from=args.qrels_from,
        cache_dir=args.cache_dir,
        test=args.test,
        top=args.top,
        references=references,
    )
    write_comparison(comparison, out, plots=not args.no_plots, html=args.html)
    print(comparison_markdown(comparison))
    print(f"written to {out}")
    if args.html:
        print(f"HTML report (opens offline in a browser): {out / 'report.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
