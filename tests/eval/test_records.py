"""Each text of a record is stored once, and every reader gets it back whole."""

from __future__ import annotations

import json
import random
from pathlib import Path

from agents.commands.run import main
from agents.llm import scripted
from eval.records import SHARED_MIN, pack_record, read_records, record_line, unpack_record


def run(toy_dir: Path, tmp_path: Path, agent: str, *extra: str) -> Path:
    assert main([
        "--agent", agent, "--dataset", str(toy_dir), "--model", "scripted/test",
        "--runs-dir", str(tmp_path / "runs"), "--cache-dir", str(tmp_path / "cache"),
        "--run-name", agent, "--quiet", "--limit", "1", *extra,
    ]) == 0  # fmt: skip
    return tmp_path / "runs" / agent / "toy" / "queries.jsonl"


def test_a_1_mb_reply_is_stored_once(toy_dir, tmp_path):
    reply = "Metformin lowers hepatic glucose output. " * 25_000  # ~1 MB
    scripted.install(lambda messages, params: reply)
    path = run(toy_dir, tmp_path, "hyde")
    # the reply, the passage it became and the texts BM25 and the dense side searched
    assert len(reply) < path.stat().st_size < 1.05 * len(reply)
    (record,) = read_records(path).values()
    generate, retrieve = record["steps"]
    assert generate["output"] == record["generated"]["passage"] == reply
    assert retrieve["request"]["sparse_text"] == retrieve["request"]["expansion"] == reply


def test_a_growing_trajectory_stores_what_each_turn_adds(toy_dir, tmp_path):
    turn = "I should look this up, thinking at length about platelets. " * 40

    def respond(messages, params):
        if messages[0]["content"].startswith("**Task Instruction:**"):
            return "\n**Final Information**\n\nAspirin blocks platelet cyclooxygenase." * 20
        done = messages[-1]["content"].count("<|end_search_result|>")
        return turn + (f"<|begin_search_query|>aspirin {done}" if done < 4 else "Aspirin.")

    scripted.install(respond)
    path = run(toy_dir, tmp_path, "search-o1", "--option", "llm_mode=continue")
    (record,) = read_records(path).values()
    whole = len(json.dumps(record, ensure_ascii=False))  # every text in full
    assert path.stat().st_size < 0.6 * whole
    raw = json.loads(path.read_text())
    continued = [s["messages"][-1]["content"] for s in raw["steps"] if s["node"] == "reason"][1:]
    assert all(isinstance(c, dict) and set(c) == {"$ext", "add"} for c in continued)
    reasons = [s for s in record["steps"] if s["node"] == "reason"]
    assert len(reasons) == 5
    # each call's messages come back whole: the continued turn holds every earlier output
    last = reasons[-1]["messages"][-1]["content"]
    assert last.count(turn) == 4 and record["generated"]["passage"].startswith(last)


def test_packing_round_trips_any_record():
    rng = random.Random(7)
    words = ["alpha", "beta", "{$dup: 0}", "$ext", "ünïcode", "x" * SHARED_MIN]

    def text() -> str:
        return " ".join(rng.choice(words) for _ in range(rng.randint(0, 80)))

    def value(depth: int):
        kind = rng.random()
        if depth > 3 or kind < 0.4:
            return rng.choice([text(), text(), 3, 2.5, None, True])
        if kind < 0.7:
            return [value(depth + 1) for _ in range(rng.randint(0, 4))]
        return {f"k{i}": value(depth + 1) for i in range(rng.randint(0, 4))}

    for _ in range(300):
        base = text()
        record = {"query_id": "q", "a": base, "b": [base, base + text()], "c": value(0)}
        line = record_line(record)
        assert unpack_record(json.loads(line)) == record
    packed = pack_record({"a": "y" * 300, "b": "y" * 300, "c": "y" * 310})
    assert packed == {"a": "y" * 300, "b": {"$dup": 0}, "c": {"$ext": 0, "add": "y" * 10}}
