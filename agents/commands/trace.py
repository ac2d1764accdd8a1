"""Print one query's trajectory from a run folder: `python -m agents.trace RUN_FOLDER QUERY_ID`.

Reads the query's last record in `<run folder>/<task>/queries.jsonl` (all tasks are searched
unless `--task` is given) and prints every step: LLM calls with their output and tool calls,
searches with the doc ids they returned, tool results, canned messages and limits; then the
steps of each later (rerank) stage up to the task's final one, and the final ranking, which is
that stage's. Documents the qrels judge relevant are marked ``[R<grade>]`` (from the dataset
the run's config names), as the HTML report of `eval.compare` marks them.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agents.commands.cli import command
from eval.plumbing.argtypes import positive_int
from eval.runs import QrelsError, RunFolder, TaskFolder

WIDTH = 100


def find_record(run_dir: Path, query_id: str, task: str | None = None) -> tuple[str, dict]:
    """The (task, record) of `query_id`; ValueError naming what was looked at otherwise."""
    folders = [
        p
        for p in RunFolder(run_dir).tasks()
        if (task is None or p.name == task) and p.records_path.is_file()
    ]
    if not folders:
        raise ValueError(f"{run_dir}: no <task>/queries.jsonl here; is it a run folder?")
    for folder in folders:
        record = folder.records().get(query_id)
        if record is not None:
            return folder.name, record
    tasks = ", ".join(p.name for p in folders)
    raise ValueError(f"query {query_id!r} is in no queries.jsonl of {run_dir} (tasks: {tasks})")


def stage_records(task_dir: Path, query_id: str) -> list[tuple[str, dict]]:
    """(stage folder, record) of `query_id` in each stage after the agent's, up to the final."""
    found = []
    for stage in TaskFolder(task_dir).stage_chain()[1:]:
        record = stage.records().get(query_id)
        if record is not None:
            found.append((stage.name, record))
    return found


def _block(text: str, limit: int) -> str:
    text = text if len(text) <= limit else text[:limit] + f" … [{len(text) - limit} more chars]"
    return textwrap.indent(text.strip() or "(empty)", "    │ ", lambda line: True)


def mark(doc: str, grades: Mapping[str, int] | None) -> str:
    """``doc`` with its relevance from the qrels, as the HTML report marks it: ``[R2]`` for a
    relevant document of grade 2, nothing for one judged not relevant or not judged."""
    grade = (grades or {}).get(doc, 0)
    return f"{doc} [R{grade}]" if grade > 0 else doc


def _found(ids: Sequence[str], grades: Mapping[str, int] | None) -> str:
    if grades is None:
        return ""
    hits = sum((grades.get(d, 0) > 0) for d in ids)
    return f"; relevant {hits} of {len(ids)} shown"


def format_step(
    number: int, step: dict[str, Any], limit: int, grades: Mapping[str, int] | None = None
) -> str:
    """One step as text; ``grades`` (the query's qrels) mark the relevant documents."""
    node = step.get("node", "?")
    lines = [f"[{number}] {node}"]
    if "messages" in step or "prompt" in step:
        usage = step.get("usage", {})
        cached = " (cached)" if step.get("cached") else ""
        lines[0] += (
            f"  tokens {usage.get('prompt_tokens', 0)} in / {usage.get('completion_tokens', 0)}"
            f" out, {usage.get('latency_s', 0):.2f} s{cached}, finish {step.get('finish_reason')}"
        )
        if "messages" in step:
            lines.append("  input (last message, " + step["messages"][-1]["role"] + "):")
            lines.append(_block(str(step["messages"][-1].get("content") or ""), limit))
        else:  # a raw prompt (Rank1's), sent without a chat template
            lines.append("  input (raw prompt):")
            lines.append(_block(step["prompt"], limit))
        lines.append("  output:")
        lines.append(_block(step.get("output", ""), limit))
        for call in step.get("tool_calls", ()):
            lines.append(f"  calls {call['name']}({call['arguments']})"[: WIDTH * 3])
    if "request" in step:
        req = step["request"]
        lines[0] += f"  retriever {step.get('retriever')}"
        lines.append(f"  query: {req.get('sparse_text') or req.get('query')}"[: WIDTH * 3])
        top = ", ".join(
            f"{mark(d, grades)} ({s:.3f})"
            for d, s in zip(step["doc_ids"][:10], step["scores"][:10], strict=False)
        )
        lines.append(f"  top docs: {top or '(none)'}{_found(step['doc_ids'][:10], grades)}")
    if "source" in step and "messages" not in step:  # a text replayed from --generations
        parser = step.get("reasoning", "none")
        how = f", read as a {parser} reasoning model" if parser != "none" else ""
        lines.append(f"  replayed from {step['source']}{how}:")
        lines.append(_block(step.get("output") or "", limit))
    if step.get("node") == "tool":  # one tool call the agent ran, and what went back
        lines[0] += f"  {step['tool']}({step['arguments']})"[: WIDTH * 3]
        lines.append("  error:" if step.get("error") else "  result:")
        lines.append(_block(step.get("result", ""), limit))
    if "window" in step:  # a listwise stage's window: which documents, in, then out
        lo, hi = step["window"]
        shown = " ".join(mark(d, grades) for d in step["doc_ids"])
        lines.append(f"  window positions {lo + 1}-{hi}: {shown}")
        lines.append(f"  reordered: {' '.join(mark(d, grades) for d in step['order'])}")
    if step.get("node") == "group" and "pass" in step:  # a GroupRank group, the scores read
        shown = " ".join(mark(d, grades) for d in step["doc_ids"])
        lines.append(f"  pass {step['pass']}, group {step['group']}: {shown}")
        scores = ", ".join(f"{mark(d, grades)} {s:g}" for d, s in step["scores"])
        lines.append(f"  scores: {scores or '(none)'}")
    if step.get("node") == "shuffle" and "stream_position" in step:  # GroupRank's stream
        lines.append(f"  seed {step['seed']}: query {step['stream_position']} of "
                     f"{step['stream_queries']} in the stream")  # fmt: skip
    if "judged_by" in step:  # a pointwise judgement
        lines.append(
            f"  document {mark(step['doc_id'], grades)} (was rank {step['rank']}): "
            f"score {step['score']}"
            f" from {step['judged_by']}"
        )
    if "outcome" in step:  # how a reasoning reranker's reply was read (reasonrank, rank1)
        judged = (
            f"document {mark(step['doc_id'], grades)} (was rank {step['rank']}): "
            f"score {step['score']}, "
            if "doc_id" in step
            else ""
        )
        lines.append(f"  {judged}read: {step['outcome']}")
    if "forced" in step:  # Rank1's forced token after an unclosed reply
        forced = step["forced"]
        lines.append(f"  forced ({step.get('forced_by')}): {forced.get('output')!r}")
    for key in ("reason", "message", "note"):
        if key in step:
            lines.append(f"  {key}: {step[key]}")
    return "\n".join(lines)


def format_record(
    task: str,
    record: dict[str, Any],
    limit: int = 1500,
    stages: Sequence[tuple[str, dict[str, Any]]] = (),
    grades: Mapping[str, int] | None = None,
) -> str:
    """The agent's record, then each later stage's (`stage_records`); the final ranking is
    the last stage's. ``grades``, the query's qrels, mark relevant documents (`mark`)."""
    head = [
        f"task {task}, query {record['query_id']}: {record['query']}",
        f"{record['seconds']:.2f} s; usage {record['usage']}",
    ]
    if record.get("error"):
        head.append(f"FAILED: {record['error']}")
    if grades is not None:
        judged = ", ".join(f"{d} [R{g}]" for d, g in grades.items() if g > 0)
        head.append(f"relevant (qrels): {judged or 'none'}")
    blocks = ["\n".join(head)]
    blocks += [format_step(i, s, limit, grades) for i, s in enumerate(record["steps"], 1)]
    for name, stage in stages:
        seconds = stage.get("seconds") or 0.0
        stage_head = [f"stage {name}: {seconds:.2f} s; usage {stage.get('usage')}"]
        if stage.get("error"):
            stage_head.append(f"FAILED: {stage['error']}")
        blocks.append("\n".join(stage_head))
        steps = stage.get("steps") or []
        blocks += [format_step(i, s, limit, grades) for i, s in enumerate(steps, 1)]
    final = stages[-1][1] if stages else record
    ranked = final.get("ranking") or []
    ranking = ", ".join(f"{mark(d, grades)} ({s:.3f})" for d, s in ranked[:10])
    found = _found([d for d, _ in ranked[:10]], grades)
    blocks.append(f"final ranking (top 10 of {len(ranked)}): {ranking or '(none)'}{found}")
    return "\n\n".join(blocks)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m agents.trace", description=__doc__.split("\n")[0])
    p.add_argument("run_dir", type=Path, help="a run folder written by agents.run")
    p.add_argument("query_id")
    p.add_argument("--task", default=None, help="only look in this task's folder")
    p.add_argument("--chars", type=positive_int, default=1500, help="cut texts longer than this")
    p.add_argument("--cache-dir", type=Path, default=None, help="as agents.run's (for qrels)")
    p.add_argument("--no-qrels", action="store_true", help="do not mark relevant documents")
    args = p.parse_args(argv)
    return command(lambda: _trace(args), resumable=False)


def _trace(args: argparse.Namespace) -> int:
    task, record = find_record(args.run_dir, args.query_id, args.task)
    stages = stage_records(args.run_dir / task, args.query_id)
    grades = None
    if not args.no_qrels:
        try:
            grades = RunFolder(args.run_dir).qrels(task, args.cache_dir).get(args.query_id, {})
        except QrelsError as e:  # the trajectory is still worth reading
            print(f"note: relevant documents not marked: {e}", file=sys.stderr)
    print(format_record(task, record, args.chars, stages, grades))
    return 0


if __name__ == "__main__":
    sys.exit(main())
