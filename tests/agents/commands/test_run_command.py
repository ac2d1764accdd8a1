import json
from pathlib import Path

import pytest

from agents.commands.run import main


@pytest.fixture
def env(tmp_path: Path, toy_dir: Path) -> dict:
    return {"data": toy_dir, "runs": tmp_path / "runs", "cache": tmp_path / "cache"}


def run(env: dict, *extra: str) -> int:
    return main(
        [
            "--agent",
            "none",
            "--dataset",
            str(env["data"]),
            "--runs-dir",
            str(env["runs"]),
            "--cache-dir",
            str(env["cache"]),
            "--run-name",
            "r",
            "--quiet",
            *extra,
        ]
    )


def test_none_agent_writes_a_scored_run_folder(env, capsys):
    assert run(env) == 0
    folder = env["runs"] / "r"
    summary = json.loads((folder / "toy" / "metrics.json").read_text())
    # every query's relevant doc is the only one sharing its distinctive terms: rank 1 each
    assert summary["metrics"]["NDCG@10"] == pytest.approx(1.0)
    r2med = json.loads((folder / "toy" / "results.json").read_text())
    assert r2med["test"]["ndcg_at_10"] == pytest.approx(1.0)
    lines = (folder / "toy" / "run.trec").read_text().splitlines()
    assert lines[0].split()[:4] == ["q1", "Q0", "d2", "1"]
    assert len((folder / "toy" / "per_query.jsonl").read_text().splitlines()) == 3
    assert "| r |" in (folder / "leaderboard.md").read_text()
    assert json.loads((folder / "config.json").read_text())["agent"] == "none"
    assert "NDCG@10 = 1.00000" in capsys.readouterr().out


def test_rerun_skips_finished_tasks(env, monkeypatch):
    assert run(env) == 0
    import agents.execution.whole_run as pipeline

    def boom(*a, **k):
        raise AssertionError("a finished task was retrieved again")

    monkeypatch.setattr(pipeline, "build_retriever", boom)
    assert run(env) == 0


def test_run_folder_of_another_config_is_refused(env, capsys):
    assert run(env) == 0
    assert run(env, "--bm25-method", "lucene") == 2
    assert "differs in: bm25_method" in capsys.readouterr().err
    assert run(env, "--bm25-method", "lucene", "--overwrite") == 0
    config = json.loads((env["runs"] / "r" / "config.json").read_text())
    assert config["retriever"]["bm25"]["method"] == "lucene"


def test_bad_dataset_is_one_line_error(env, capsys):
    bad = env["data"] / "corpus.jsonl"
    bad.write_text(bad.read_text() + "{not json\n")
    assert run(env) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "corpus.jsonl" in err[0] and "line 6" in err[0]


def test_every_bm25_method_runs(env):
    for method in ("bm25q", "lucene", "okapi"):
        assert (
            main(
                [
                    "--dataset",
                    str(env["data"]),
                    "--runs-dir",
                    str(env["runs"]),
                    "--cache-dir",
                    str(env["cache"]),
                    "--bm25-method",
                    method,
                    "--quiet",
                ]
            )
            == 0
        )
    names = sorted(p.name for p in env["runs"].iterdir())
    assert names == ["none-bm25q-toy", "none-lucene-toy", "none-okapi-toy"]


@pytest.mark.scifact  # a published figure: SciFact's alone, none is made up for the synthetic task
@pytest.mark.slow
def test_scifact_bm25_reaches_beir_published_figure(scifact_dir, bm25_runs):
    """BEIR publishes BM25 nDCG@10 0.665 on SciFact; standard Lucene BM25 must reach it."""
    import pytrec_eval

    from eval.trec import read_run

    # `--agent none` runs, shared with tests/eval/compare/test_compare.py
    runs, _ = bm25_runs(scifact_dir)
    scores = {}
    for method in ("lucene", "bm25q"):
        config = json.loads((runs[method] / "config.json").read_text())
        assert config["retriever"]["bm25"]["method"] == method
        folder = runs[method] / "scifact"
        scores[method] = json.loads((folder / "metrics.json").read_text())["metrics"]
        # the run file on disk, scored by pytrec_eval directly, gives the same figure
        qrels = {}
        for line in (scifact_dir / "qrels" / "test.tsv").read_text().splitlines()[1:]:
            q, d, s = line.split("\t")
            qrels.setdefault(q, {})[d] = int(s)
        direct = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(
            read_run(folder / "run.trec")
        )
        mean = sum(v["ndcg_cut_10"] for v in direct.values()) / len(qrels)
        assert scores[method]["NDCG@10"] == pytest.approx(round(mean, 5), abs=1e-12)
    assert scores["lucene"]["NDCG@10"] >= 0.665
    # R2MED's variant squares idf; on SciFact it lands within a point of standard BM25
    assert abs(scores["bm25q"]["NDCG@10"] - scores["lucene"]["NDCG@10"]) < 0.02


@pytest.mark.parametrize(
    "flag, value, expected",
    [
        ("--retriever", "bm26", "unknown retriever 'bm26'"),
        ("--model", "local/gpt-5", "unknown local model 'local/gpt-5'"),
        ("--model", "nosuchprovider/x", "unknown model 'nosuchprovider/x'"),
        ("--dataset", "no-such-task", "no-such-task"),
    ],
)
def test_unknown_names_are_one_line_errors(env, capsys, flag, value, expected):
    args = ["--agent", "hyde", "--dataset", str(env["data"]), "--runs-dir", str(env["runs"])]
    assert main([*args, "--cache-dir", str(env["cache"]), flag, value]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected in err[0]
    assert not env["runs"].exists()  # refused before anything was written


def test_run_names_tell_non_default_agent_settings_apart():
    from agents.config.run_config import LLMConfig, RunConfig
    from agents.execution.whole_run import default_run_name

    llm = LLMConfig(model="local/qwen2.5-coder-0.5b")
    default = default_run_name(RunConfig(agent="search-o1", llm=llm))
    fuse = default_run_name(
        RunConfig(agent="search-o1", llm=llm, options={"final_ranking": "fuse"})
    )
    assert default == "search-o1-bm25q-qwen2.5-coder-0.5b-demo"
    assert fuse == default + "-final_ranking=fuse"
