"""The bad-input catalogue of docs/reliability.md, each case driven through
`agents.commands.run.main`.

Fatal inputs end with exit code 2 and ONE line on stderr naming file, line and field, before
anything is written; survivable ones are reported (logged warnings) and the run goes on.
The loader's own cases are tested in more detail in test_datasets.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import diskcache
import pytest

from agents.commands.run import main
from agents.execution.task_queries import read_records
from agents.graphs.search_o1 import BEGIN_QUERY
from agents.llm import scripted
from tests.helpers import one_line_error

PASSAGE = "Statins inhibit HMG-CoA reductase."


@pytest.fixture
def env(tmp_path: Path, toy_dir: Path) -> dict:
    scripted.install(lambda m, p: PASSAGE)  # so that "scripted/x" names a known model
    return {"data": toy_dir, "runs": tmp_path / "runs", "cache": tmp_path / "cache"}


def run(env: dict, *extra: str, agent: str = "none", name: str = "r") -> int:
    return main([
        "--agent", agent, "--dataset", str(env["data"]), "--model", "scripted/x",
        "--runs-dir", str(env["runs"]), "--cache-dir", str(env["cache"]),
        "--run-name", name, "--quiet", *extra,
    ])  # fmt: skip


def records(env: dict, name: str = "r", task: str = "toy") -> dict:
    return read_records(env["runs"] / name / task / "queries.jsonl")


def append(path: Path, raw: bytes) -> None:
    path.write_bytes(path.read_bytes() + raw + b"\n")


# --- fatal: exit 2, one line, nothing written --------------------------------------------------

# (file, bytes appended as its line 4 (queries, qrels) or 6 (corpus), words the message must hold)
FATAL_LINES = {
    "malformed JSON": ("corpus.jsonl", b'{"id": "d6", "text": ', ["line 6", "malformed JSON"]),
    "not an object": ("query.jsonl", b'["q4", "text"]', ["line 4", "expected a JSON object"]),
    "missing field": ("query.jsonl", b'{"id": "q4"}', ["line 4", "missing field 'text'"]),
    "wrong text type": ("corpus.jsonl", b'{"id": "d6", "text": 7}', ["line 6", "'text'", "int"]),
    "wrong id type": ("corpus.jsonl", b'{"id": 1.5, "text": "x"}', ["line 6", "'id'", "float"]),
    "bad grade": (
        "qrels.jsonl",
        b'{"q_id": "q1", "p_id": "d1", "score": "high"}',
        ["line 4", "'score'", "'high'"],
    ),
    "non-UTF-8": ("query.jsonl", b'{"id": "q4", "text": "caf\xe9"}', ["line 4", "UTF-8"]),
}


@pytest.mark.parametrize("case", list(FATAL_LINES))
def test_bad_line_is_one_line_error_naming_file_line_field(env, capsys, case):
    name, raw, words = FATAL_LINES[case]
    append(env["data"] / name, raw)
    assert run(env) == 2
    message = one_line_error(capsys)
    assert message.startswith("error: ") and name in message
    assert all(w in message for w in words), message
    assert not env["runs"].exists()  # refused before anything was written


def test_empty_corpus_is_an_error(env, capsys):
    (env["data"] / "corpus.jsonl").write_text("\n")
    assert run(env) == 2
    assert "corpus.jsonl holds no documents" in one_line_error(capsys)


def test_missing_qrels_file_is_an_error(env, capsys):
    (env["data"] / "qrels.jsonl").unlink()
    assert run(env) == 2
    assert "missing qrels.jsonl" in one_line_error(capsys)


@pytest.mark.parametrize(
    "flag, value, expected",
    [
        ("--retriever", "bm26", "unknown retriever 'bm26'"),
        ("--model", "nosuchprovider/x", "unknown model 'nosuchprovider/x'"),
        ("--dataset", "no-such-task", "'no-such-task' is neither a folder nor an R2MED task"),
        ("--option", "max_turn=3", "has options: "),
    ],
)
def test_unknown_name_is_one_line_error(env, capsys, flag, value, expected):
    assert run(env, flag, value, agent="search-o1") == 2
    assert expected in one_line_error(capsys)
    assert not env["runs"].exists()


def test_unknown_agent_is_refused_by_the_argument_parser(env, capsys):
    with pytest.raises(SystemExit) as info:
        run(env, agent="hide")
    assert info.value.code == 2
    err = capsys.readouterr().err
    # argparse prints its usage first; the error itself is one line listing the agents
    [error] = [line for line in err.splitlines() if line.startswith("python -m agents.run: ")]
    assert "invalid choice: 'hide'" in error and "hyde" in error
    assert "Traceback" not in err


# --- survivable: reported, the run goes on -----------------------------------------------------


def test_empty_query_text_is_a_warning_and_the_query_still_runs(env, caplog):
    append(env["data"] / "query.jsonl", b'{"id": "q4", "text": "   "}')
    assert run(env) == 0
    assert "1 queries have empty text (e.g. 'q4')" in caplog.text
    assert records(env)["q4"]["error"] is None  # answered (with nothing), not a crash


def test_duplicate_doc_ids_are_reported_and_the_last_is_kept(env, caplog):
    append(env["data"] / "corpus.jsonl", b'{"id": "d1", "text": "zanzibarium poisoning"}')
    append(env["data"] / "query.jsonl", b'{"id": "q4", "text": "zanzibarium"}')
    assert run(env) == 0
    assert "1 duplicate doc ids" in caplog.text and "kept the last" in caplog.text
    assert records(env)["q4"]["ranking"][0][0] == "d1"  # found by its second text only


def test_qrels_naming_unknown_queries_or_docs_are_reported(env, caplog):
    append(env["data"] / "qrels.jsonl", b'{"q_id": "q9", "p_id": "d1", "score": 1}')
    append(env["data"] / "qrels.jsonl", b'{"q_id": "q1", "p_id": "d99", "score": 1}')
    assert run(env) == 0
    assert "name 1 queries missing from the query file" in caplog.text
    assert "name 1 docs missing from corpus.jsonl" in caplog.text
    assert "q9" not in records(env)


def test_a_one_megabyte_document_is_indexed_and_retrievable(env):
    big = " ".join(f"filler{i % 5000}" for i in range(120_000)) + " zanzibarium"
    assert len(big) > 1_000_000
    append(env["data"] / "corpus.jsonl", json.dumps({"id": "big", "text": big}).encode())
    append(env["data"] / "query.jsonl", b'{"id": "q4", "text": "zanzibarium"}')
    assert run(env) == 0
    assert records(env)["q4"]["ranking"][0][0] == "big"


def test_corrupted_llm_cache_entries_are_recomputed(env, caplog):
    provider = scripted.install(lambda m, p: PASSAGE)
    assert run(env, agent="hyde") == 0
    # one entry no longer JSON, one whose stored pickle cannot be loaded at all
    with diskcache.Cache(str(env["cache"] / "llm")) as cache:
        first, second, *_ = list(cache.iterkeys())
        cache.set(first, "{not json")
        cache._sql("UPDATE Cache SET mode = 4, value = ? WHERE key = ?", (b"garbage", second))
    assert run(env, agent="hyde", name="again") == 0
    assert provider.calls == 3 + 2  # just the two damaged entries asked again
    assert "corrupted; recomputing" in caplog.text and "unreadable" in caplog.text
    again = records(env, "again")
    assert {q: r["ranking"] for q, r in again.items()} == {
        q: r["ranking"] for q, r in records(env).items()
    }


def test_corrupted_bm25_index_is_rebuilt(env, caplog):
    assert run(env) == 0
    [npz] = env["cache"].glob("bm25-*/index.npz")
    npz.write_bytes(b"PK\x03\x04 this is not a zip archive")
    assert run(env, name="again") == 0
    assert "rebuilding BM25 index" in caplog.text
    assert records(env, "again")["q2"]["ranking"] == records(env)["q2"]["ranking"]


def test_search_o1_reply_without_tags_is_a_plain_answer(env):
    scripted.install(lambda m, p: "No tags here at all, just statins and cholesterol.")
    assert run(env, agent="search-o1") == 0
    rec = records(env)["q3"]
    assert [s["node"] for s in rec["steps"]] == ["reason", "final"]
    assert rec["generated"]["answer"].startswith("No tags here")
    assert rec["ranking"][0][0] == "d4"


class Runaway(scripted.ScriptedProvider):
    """A model cut off at max_tokens: every reply ends with finish_reason "length"."""

    async def acompletion(self, *args, **kwargs):
        response = await super().acompletion(*args, **kwargs)
        response.choices[0].finish_reason = "length"
        return response


def test_runaway_reply_with_an_unclosed_search_tag_ends_the_trajectory(env):
    import litellm

    provider = Runaway(lambda m, p: f"I should search. {BEGIN_QUERY}statins and cholesterol and")
    others = [e for e in litellm.custom_provider_map if e["provider"] != "scripted"]
    litellm.custom_provider_map = [*others, {"provider": "scripted", "custom_handler": provider}]
    assert run(env, agent="search-o1") == 0
    rec = records(env)["q3"]
    assert rec["error"] is None
    assert [s["node"] for s in rec["steps"]] == ["reason", "limit", "final"]
    assert rec["steps"][0]["finish_reason"] == "length"
    assert "inside an unclosed search query" in rec["steps"][1]["reason"]
    assert provider.calls == 3  # one reasoning call per query, no search made from half a tag


# --- nothing already computed is lost ----------------------------------------------------------


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_a_run_folder_of_another_config_is_refused_and_kept(env, capsys):
    assert run(env) == 0
    before = snapshot(env["runs"] / "r")
    capsys.readouterr()
    assert run(env, "--depth", "50") == 2
    message = one_line_error(capsys)
    assert "differs in: depth" in message and "--overwrite" in message
    assert snapshot(env["runs"] / "r") == before


def test_a_bad_task_in_a_multi_task_run_keeps_the_finished_ones(env, tmp_path, capsys):
    second = tmp_path / "toy2"
    second.mkdir()
    for name in ("corpus.jsonl", "query.jsonl", "qrels.jsonl"):
        (second / name).write_bytes((env["data"] / name).read_bytes())
    env["data"] = f"{env['data']},{second}"
    assert run(env) == 0
    before = snapshot(env["runs"] / "r")
    append(second / "corpus.jsonl", b"{broken")
    assert run(env) == 2
    message = one_line_error(capsys)
    assert "toy2/corpus.jsonl line 6: malformed JSON" in message
    assert snapshot(env["runs"] / "r") == before  # the first task's results are all there
