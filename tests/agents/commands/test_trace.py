import json
from pathlib import Path

from agents.commands.run import main
from agents.commands.trace import main as trace_main
from agents.llm import scripted


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

    # the qrels of the run's dataset mark relevant documents (toy: q2's d3, grade 2)
    assert "relevant (qrels): d3 [R2]" in out and "top docs: d3 [R2] (" in out
    assert "relevant 1 of" in out.split("final ranking")[1]
    assert trace_main([str(run_dir), "q2", "--no-qrels"]) == 0
    unmarked = capsys.readouterr().out
    assert "[R2]" not in unmarked and "top docs: d3 (" in unmarked

    assert trace_main([str(run_dir), "nope"]) == 2
    assert "query 'nope' is in no queries.jsonl" in capsys.readouterr().err


def _write_jsonl(path: Path, *rows: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_trace_follows_the_stages_to_the_final_ranking(tmp_path: Path, capsys):
    run_dir = tmp_path / "run"
    usage = {"calls": 0, "cached_calls": 0, "prompt_tokens": 0, "completion_tokens": 0,
             "cost": 0.0, "latency_s": 0.0}  # fmt: skip
    agent = {"query_id": "q1", "query": "What lowers cholesterol?", "seconds": 0.5,
             "usage": usage, "error": None, "ranking": [["d1", 2.0], ["d4", 1.0]],
             "steps": [{"node": "retrieve", "note": "first pass"}]}  # fmt: skip
    reranked = {"query_id": "q1", "seconds": 0.25, "usage": usage, "error": None,
                "ranking": [["d4", 9.0], ["d1", 3.0]],
                "steps": [{"node": "rerank", "note": "statins first"}]}  # fmt: skip
    run_dir.mkdir()
    (run_dir / "config.json").write_text("{}")
    _write_jsonl(run_dir / "toy" / "queries.jsonl", agent)
    _write_jsonl(run_dir / "toy" / "rerank-1-llm" / "queries.jsonl", reranked)
    summary = run_dir / "toy" / "metrics.json"
    summary.write_text(json.dumps({"metrics": {}, "final_stage": "rerank-1-llm"}))

    assert trace_main([str(run_dir), "q1"]) == 0
    out, err = capsys.readouterr()
    assert "note: relevant documents not marked" in err and "names no dataset" in err
    assert out.index("note: first pass") < out.index("stage rerank-1-llm: 0.25 s")
    assert out.index("stage rerank-1-llm") < out.index("note: statins first")
    assert "final ranking (top 10 of 2): d4 (9.000), d1 (3.000)" in out

    summary.write_text(json.dumps({"metrics": {}, "final_stage": "agent"}))
    assert trace_main([str(run_dir), "q1", "--task", "toy"]) == 0
    out = capsys.readouterr().out
    assert "rerank-1-llm" not in out and "final ranking (top 10 of 2): d1 (2.000)" in out

    summary.write_text(json.dumps({"metrics": {}, "final_stage": "../elsewhere"}))
    assert trace_main([str(run_dir), "q1"]) == 2
    assert "is not a stage folder" in capsys.readouterr().err
