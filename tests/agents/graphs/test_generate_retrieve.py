"""Generate-then-retrieve agents end to end through `agents.run`, with a scripted LLM."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agents.commands.run import main
from agents.llm import scripted
from eval.records import unpack_record

PASSAGE = "Metformin reduces hepatic glucose production in type 2 diabetes."


def records(folder: Path) -> dict[str, dict]:
    lines = (folder / "toy" / "queries.jsonl").read_text().splitlines()
    return {r["query_id"]: r for r in map(unpack_record, map(json.loads, lines))}


@pytest.fixture
def toy(tmp_path: Path, toy_dir: Path) -> dict:
    return {
        "data": toy_dir,
        "runs": tmp_path / "runs",
        "cache": tmp_path / "cache",
    }


def run(toy: dict, agent: str, *extra: str) -> int:
    return main([
        "--agent", agent, "--dataset", str(toy["data"]), "--model", "scripted/test",
        "--runs-dir", str(toy["runs"]), "--cache-dir", str(toy["cache"]),
        "--run-name", agent, "--quiet", *extra,
    ])  # fmt: skip


@pytest.mark.slow
def test_hyde_searches_bm25_with_the_passage_alone(toy):
    provider = scripted.install(lambda messages, params: PASSAGE)
    assert run(toy, "hyde") == 0
    recs = records(toy["runs"] / "hyde")
    assert provider.calls == 3
    step = recs["q2"]["steps"][-1]
    assert step["request"]["sparse_text"] == PASSAGE
    # whatever the query, the passage about metformin ranks d2 first
    assert all(r["ranking"][0][0] == "d2" for r in recs.values())
    gen = recs["q1"]["steps"][0]
    assert gen["messages"][0] == {"role": "system", "content": "You are a helpful assistant."}
    assert "Query: Which drug lowers glucose" in gen["messages"][1]["content"]
    assert recs["q1"]["generated"]["passage"] == PASSAGE
    assert recs["q1"]["usage"]["calls"] == 1 and recs["q1"]["usage"]["completion_tokens"] > 0


def test_query2doc_repeats_the_query_and_uses_few_shot_examples(toy):
    scripted.install(lambda messages, params: PASSAGE)
    assert run(toy, "query2doc") == 0
    rec = records(toy["runs"] / "query2doc")["q3"]
    q = "What lowers cholesterol?"
    # R2MED src/eval_BM25.py L129: e["text"]*2+" "+e["hy_doc"], the copies joined without a
    # space; src/eval_retrieval.py L42: dense retrievers embed query + "[SEP]" + passage
    assert rec["steps"][-1]["request"]["sparse_text"] == f"{q}{q} {PASSAGE}"
    assert rec["steps"][-1]["request"]["dense_text"] == f"{q}[SEP]{PASSAGE}"
    assert "###Examples:###\nQuery: Why does metformin" in rec["steps"][0]["messages"][1]["content"]


def test_lamer_shows_the_bm25_top_docs_and_searches_query_plus_answer(toy):
    scripted.install(lambda messages, params: "Aspirin blocks cyclooxygenase in platelets.")
    assert run(toy, "lamer") == 0
    rec = records(toy["runs"] / "lamer")["q2"]
    first, gen, last = rec["steps"]
    assert first["node"] == "first_pass" and first["doc_ids"][0] == "d3"
    assert (
        "Possible Relevant Passages: \n[1]. Aspirin irreversibly" in gen["messages"][1]["content"]
    )
    assert last["request"]["sparse_text"].startswith("How does aspirin act on platelets? Aspirin")


def test_reason_searches_with_the_text_after_think_for_a_reasoning_model(toy):
    text = "<think>hmm, statins?</think>Statins lower cholesterol."
    scripted.install(lambda m, p: text)
    assert run(toy, "reason", "--reasoning", "think") == 0
    rec = records(toy["runs"] / "reason")["q3"]
    assert rec["generated"]["passage"] == text  # kept as written; read by the rule
    assert rec["steps"][-1]["request"]["sparse_text"] == "Statins lower cholesterol."
    assert rec["steps"][-1]["request"]["dense_text"] == "Statins lower cholesterol."
    assert rec["steps"][-1]["request"]["query"] == "What lowers cholesterol?"
    assert rec["ranking"][0][0] == "d4"
    # a model R2MED does not list as reasoning: its text as written
    assert run(toy, "reason", "--run-name", "plain") == 0
    assert records(toy["runs"] / "plain")["q3"]["steps"][-1]["request"]["sparse_text"] == text


def test_empty_generation_falls_back_to_the_query_and_says_so(toy):
    scripted.install(lambda messages, params: "")
    assert run(toy, "hyde") == 0
    rec = records(toy["runs"] / "hyde")["q2"]
    assert rec["steps"][-1]["note"].startswith("empty generation")
    assert rec["ranking"][0][0] == "d3"


def test_second_identical_run_makes_no_llm_call_and_gives_identical_metrics(toy):
    provider = scripted.install(lambda messages, params: PASSAGE)
    assert run(toy, "hyde") == 0
    first = json.loads((toy["runs"] / "hyde" / "toy" / "metrics.json").read_text())
    # a fresh run folder, same cache: every answer comes from the cache
    assert run(toy, "hyde", "--run-name", "again") == 0
    assert provider.calls == 3
    second = json.loads((toy["runs"] / "again" / "toy" / "metrics.json").read_text())
    assert second["metrics"] == first["metrics"]
    assert second["usage"]["cached_calls"] == 3


@pytest.mark.slow
def test_agents_work_with_every_retriever_kind(toy):
    scripted.install(lambda messages, params: PASSAGE)
    for retriever in ("dense", "bm25+dense"):
        assert run(toy, "hyde", "--retriever", retriever, "--run-name", retriever) == 0
        rec = records(toy["runs"] / retriever)["q1"]
        assert rec["ranking"][0][0] == "d2"


def test_failed_queries_are_recorded_and_the_run_goes_on(toy, capsys):
    def respond(messages, params):
        if "aspirin" in messages[-1]["content"]:
            raise ValueError("scripted failure")
        return PASSAGE

    scripted.install(respond)
    assert run(toy, "hyde") == 1
    recs = records(toy["runs"] / "hyde")
    assert "scripted failure" in recs["q2"]["error"]
    assert recs["q1"]["error"] is None
    assert "1 queries failed" in capsys.readouterr().err


def test_api_key_reaches_no_written_file(toy, monkeypatch):
    secret = "sk-test-SECRET-abcdef123456"
    monkeypatch.setenv("OPENAI_API_KEY", secret)

    def respond(messages, params):
        if "aspirin" in messages[-1]["content"]:
            raise RuntimeError(f"invalid key {secret}")  # an error that quotes the key back
        return PASSAGE

    scripted.install(respond)
    run(toy, "hyde")
    written = [p for root in (toy["runs"], toy["cache"]) for p in root.rglob("*") if p.is_file()]
    assert written
    assert not [p for p in written if secret.encode() in p.read_bytes()]
