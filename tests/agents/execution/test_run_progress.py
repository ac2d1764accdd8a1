"""Progress is display only: a run with its bars and a ``--quiet`` run write the same files, byte
for byte, and the dry run says what it is doing on stderr, or nothing with ``--quiet``."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.commands.run import main
from agents.llm import scripted

OUTPUTS = ("run.trec", "per_query.jsonl", "metrics.json")


def respond(messages: list[dict], params: dict) -> str:
    return "Metformin lowers hepatic glucose production; aspirin inhibits platelets."


def run(toy_dir: Path, root: Path, *extra: str) -> int:
    return main([
        "--dataset", str(toy_dir), "--runs-dir", str(root / "runs"),
        "--cache-dir", str(root / "cache"), "--run-name", "same", "--concurrency", "2", *extra,
    ])  # fmt: skip


def comparable(path: Path) -> bytes:
    """The file's bytes, with the wall-clock figures a second run cannot repeat set to 0."""
    import json

    if path.name != "metrics.json":
        return path.read_bytes()
    data = json.loads(path.read_text())
    data["seconds"] = 0
    if "usage" in data:  # the LLM calls' wall time
        data["usage"]["latency_s"] = 0
    return json.dumps(data, sort_keys=True).encode()


@pytest.mark.parametrize(
    "agent", [["--agent", "none"], ["--agent", "hyde", "--model", "scripted/test"]]
)
def test_progress_on_and_off_write_the_same_files(agent, toy_dir, tmp_path, capsys) -> None:
    scripted.install(respond)
    assert run(toy_dir, tmp_path / "on", *agent) == 0
    shown = capsys.readouterr().err
    assert run(toy_dir, tmp_path / "off", *agent, "--quiet") == 0
    quiet = capsys.readouterr().err
    assert "it/s" in shown or "q/s" in shown  # the bars were drawn ...
    assert "q/s" not in quiet and "%|" not in quiet  # ... and not with --quiet
    for name in OUTPUTS:
        on, off = (tmp_path / side / "runs" / "same" / "toy" / name for side in ("on", "off"))
        assert comparable(on) == comparable(off), name
    on_trec = (tmp_path / "on" / "runs" / "same" / "toy" / "run.trec").read_bytes()
    assert on_trec.count(b"\n") > 3  # a real ranking was compared


def test_the_dry_run_says_what_it_does_unless_quiet(toy_dir, tmp_path, capsys, monkeypatch) -> None:
    import agents.execution.dry_run
    from eval.plumbing.progress import progress_bar

    # every update drawn (tqdm waits 0.1 s between draws, longer than these queries take)
    monkeypatch.setattr(agents.execution.dry_run, "progress_bar",
                        lambda *a, **k: progress_bar(*a, mininterval=0, **k))  # fmt: skip
    scripted.install(respond)
    argv = ["--agent", "hyde", "--model", "scripted/test", "--dry-run"]
    assert run(toy_dir, tmp_path, *argv) == 0
    shown = capsys.readouterr()
    assert "dry run toy [hyde]" in shown.err and "3/3" in shown.err
    assert "calls, " in shown.err and "prompt tok counted" in shown.err
    assert run(toy_dir, tmp_path, *argv, "--quiet") == 0
    quiet = capsys.readouterr()
    assert quiet.err == ""
    assert quiet.out == shown.out  # the estimate itself is the same
    assert "prompt tok counted" not in shown.out  # progress never reaches the table ...
    assert shown.out.startswith("dry run (no model called)")  # ... which starts as before
