"""Print one query's trajectory from a run folder: `python -m agents.trace RUN_FOLDER QUERY_ID`.

Reads the query's last record in `<run folder>/<task>/queries.jsonl` (all tasks are searched
unless `--task` is given) and prints every step: LLM calls with their output, searches with
the doc ids they returned, canned messages and limits, then the final ranking.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path
from typing import Any

from agents.records import read_records
from eval.argtypes import positive_int

WIDTH = 100


def find_record(run_dir: Path, query_id: str, task: str | None = None) -> tuple[str, dict]:
    """The (task, record) of `query_id`; ValueError naming what was looked at otherwise."""
    files = sorted(run_dir.glob(f"{task or '*'}/queries.jsonl"))
    if not files:
        raise ValueError(f"{run_dir}: no <task>/queries.jsonl here; is it a run folder?")
    for path in files:
        record = read_records(path).get(query_id)
        if record is not None:
            return path.parent.name, record
    tasks = ", ".join(p.parent.name for p in files)
    raise ValueError(f"query {query_id!r} is in no queries.jsonl of {run_dir} (tasks: {tasks})")


def _block(text: str, limit: int) -> str:
    text = text if len(text) <= limit else text[:limit] + f" … [{len(text) - limit} more chars]"
    return textwrap.indent(text.strip() or "(empty)", "    │ ", lambda line: True)


def format_step(number: int, step: dict[str, Any], limit: int) -> str:
    node = step.get("node", "?")
    lines = [f"[{number}] {node}"]
    if "messages" in step:
        usage = step.get("usage", {})
        cached = " (cached)" if step.get("cached") else ""
        lines[0] += (
            f"  tokens {usage.get('prompt_tokens', 0)} in / {usage.get('completion_tokens', 0)}"
            f" out, {usage.get('latency_s', 0):.2f} s{cached}, finish {step.get('finish_reason')}"
        )
        lines.append("  input (last message, " + step["messages"][-1]["role"] + "):")
        lines.append(_block(str(step["messages"][-1]["content"]), limit))
        lines.append("  output:")
        lines.append(_block(step.get("output", ""), limit))
    if "request" in step:
        req = step["request"]
        lines[0] += f"  retriever {step.get('retriever')}"
        lines.append(f"  query: {req.get('sparse_text') or req.get('query')}"[: WIDTH * 3])
        top = ", ".join(
            f"{d} ({s:.3f})"
            for d, s in zip(step["doc_ids"][:10], step["scores"][:10], strict=False)
        )
        lines.append(f"  top docs: {top or '(none)'}")
    for key in ("reason", "message", "note"):
        if key in step:
            lines.append(f"  {key}: {step[key]}")
    return "\n".join(lines)


def format_record(task: str, record: dict[str, Any], limit: int = 1500) -> str:
    head = [
        f"task {task}, query {record['query_id']}: {record['query']}",
        f"{record['seconds']:.2f} s; usage {record['usage']}",
    ]
    if record.get("error"):
        head.append(f"FAILED: {record['error']}")
    steps = [format_step(i, s, limit) for i, s in enumerate(record["steps"], 1)]
    ranking = ", ".join(f"{d} ({s:.3f})" for d, s in record["ranking"][:10])
    tail = [f"final ranking (top 10 of {len(record['ranking'])}): {ranking or '(none)'}"]
    return "\n\n".join(["\n".join(head), *steps, "\n".join(tail)])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m agents.trace", description=__doc__.split("\n")[0])
    p.add_argument("run_dir", type=Path, help="a run folder written by agents.run")
    p.add_argument("query_id")
    p.add_argument("--task", default=None, help="only look in this task's folder")
    p.add_argument(
        "--chars", type=positive_int, default=1500, help="cut texts longer than this"
    )
    args = p.parse_args(argv)
    try:
        task, record = find_record(args.run_dir, args.query_id, args.task)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(format_record(task, record, args.chars))
    return 0


if __name__ == "__main__":
    sys.exit(main())
