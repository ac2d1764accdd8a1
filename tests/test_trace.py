from pathlib import Path

from agents import scripted
from agents.run import main
from agents.trace import main as trace_main


def test_trace_prints_every_step_of_one_query(tmp_path: Path, toy_dir: Path, capsys):
    scripted.install(lambda messages, params: "Aspirin blocks platelet cyclooxygenase.")
    runs = tmp_path / "runs"
    args = ["--agent", "lamer", "--dataset", str(toy_dir), "--model", "scripted/t", "--quiet"]
    assert main([*args, "--runs-dir", str(runs), "--cache-dir", str(tmp_path / "c")]) == 0
    run_dir = next(runs.iterdir())
    capsys.readouterr()

    assert trace_main([str(run_dir), "q2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("task toy, query q2: How does aspirin act on platelets?")
    for expected in ("[1] first_pass", "[2] generate", "[3] retrieve", "top docs: d3"):
        assert expected in out
    assert "Aspirin blocks platelet cyclooxygenase." in out
    assert "final ranking (top 10 of" in out

    assert trace_main([str(run_dir), "nope"]) == 2
    assert "query 'nope' is in no queries.jsonl" in capsys.readouterr().err
