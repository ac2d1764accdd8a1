"""Replaying released generations (`--generations`, agents.shared.generations): no model is called.

R2MED's files are laid out by the test the way the hub holds them (`<Task>/<method>/<llm>/
query_with_hydoc.jsonl`, with the gold `doc_id` and `answer` beside `hy_doc`), in a folder and
in a Hugging Face cache, so the real hf_hub_download code runs offline.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from pathlib import Path

import huggingface_hub
import pytest

from agents.commands.run import main
from agents.graphs.combine import generated_request
from agents.llm import scripted
from agents.shared.generations import (
    Generations,
    fetch_r2med_generations,
    parse_source,
    read_generation_file,
)
from eval.datasets import R2MED_REVISIONS, DataError, load_folder
from eval.records import unpack_record
from eval.runs import RunFolder
from retrievers.base import SearchRequest
from retrievers.config import RetrieverConfig
from retrievers.search import build_retriever
from tests.helpers import DOCS, QRELS, QUERIES

LLM = "o3-mini"
# each text points at another document than its query would find alone
HY_DOCS = {
    "q1": "Aspirin irreversibly inhibits platelet cyclooxygenase.",  # d3, not d2
    "q2": "Statins inhibit HMG-CoA reductase and lower cholesterol.",  # d4, not d3
    "q3": "Warfarin antagonises vitamin K dependent clotting factors.",  # d5, not d4
}


def gen_rows(texts: dict[str, str] = HY_DOCS, extra: bool = True) -> list[dict]:
    """Lines as R2MED releases them: the query, the generation, and the gold ids and answer."""
    rows = []
    for query_id, text in texts.items():
        row = {"id": query_id, "text": QUERIES[query_id], "hy_doc": text}
        if extra:
            row |= {"doc_id": ["d1", f"LEAKED-GOLD-{query_id}"], "answer": "LEAKED-ANSWER"}
        rows.append(row)
    return rows


def write_jsonl(path: Path, rows: list) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def hub_layout(root: Path, method: str, rows: list, task: str = "toy") -> Path:
    """``root/<task>/<method>/<llm>/query_with_hydoc.jsonl``; returns the file."""
    return write_jsonl(root / task / method / LLM / "query_with_hydoc.jsonl", rows)


@pytest.fixture
def toy(tmp_path: Path, toy_dir: Path) -> dict:
    return {
        "data": toy_dir, "runs": tmp_path / "runs", "cache": tmp_path / "cache",
        "gens": tmp_path / "gens",
    }  # fmt: skip


@pytest.fixture
def no_llm():
    """A scripted model that fails the test if called; its count must stay 0."""
    return scripted.install(lambda messages, params: AssertionError("an LLM was called"))


def run(toy: dict, agent: str, *extra: str, name: str | None = "run") -> int:
    args = [
        "--agent", agent, "--dataset", str(toy["data"]), "--model", "scripted/test",
        "--runs-dir", str(toy["runs"]), "--cache-dir", str(toy["cache"]),
        "--quiet", "--concurrency", "1", *extra,
    ]  # fmt: skip
    return main(args + (["--run-name", name] if name else []))


def records(run_dir: Path, task: str = "toy") -> dict[str, dict]:
    lines = (run_dir / task / "queries.jsonl").read_text().splitlines()
    return {r["query_id"]: r for r in map(unpack_record, map(json.loads, lines))}


def config_of(run_dir: Path) -> dict:
    return json.loads((run_dir / "config.json").read_text())


def step(record: dict, node: str) -> dict:
    return next(s for s in record["steps"] if s["node"] == node)


def search(toy: dict, retriever: str, request: SearchRequest) -> list[str]:
    task = load_folder(toy["data"])
    built = build_retriever(RetrieverConfig(spec=retriever), task, toy["cache"], False)
    return list(built.search(request, 100))


# --- replay through agents.run ---------------------------------------------------------------


@pytest.mark.parametrize("retriever", ["bm25", "dense"])
@pytest.mark.parametrize("agent", ["hyde", "query2doc", "lamer"])
def test_replay_applies_each_agents_combination_rule(toy, no_llm, agent, retriever):
    hub_layout(toy["gens"], agent, gen_rows())
    source = f"r2med:{LLM}@{toy['gens']}"
    assert run(toy, agent, "--generations", source, "--retriever", retriever) == 0
    assert no_llm.calls == 0
    config = config_of(toy["runs"] / "run")
    assert config["llm"] is None and config["prompts"] == {}  # no model, no prompt sent
    for query_id, record in records(toy["runs"] / "run").items():
        query, text = QUERIES[query_id], HY_DOCS[query_id]
        assert [s["node"] for s in record["steps"]] == ["generate", "retrieve"]  # no first pass
        generate = step(record, "generate")
        assert generate["output"] == text and generate["reasoning"] == "none"  # o3-mini
        assert generate["source"] == f"r2med:{LLM}@gens"
        assert record["generated"] == {"passage": text}
        expected = generated_request(agent, query, text)
        shown = step(record, "retrieve")["request"]
        assert shown == {
            "query": expected.query,
            "expansion": expected.expansion,
            "sparse_text": expected.sparse_text,
            **({"dense_text": expected.dense_text} if expected.dense_text is not None else {}),
        }
        assert [d for d, _ in record["ranking"]] == search(toy, retriever, expected)
    # the texts decide the ranking: each query's top document is its text's, not its own
    top = {q: r["ranking"][0][0] for q, r in records(toy["runs"] / "run").items()}
    if agent == "hyde" and retriever == "bm25":
        assert top == {"q1": "d3", "q2": "d4", "q3": "d5"}


def test_a_reasoning_models_response_is_read_by_its_r2med_name(toy, no_llm, capsys):
    think = "<think>\nMetformin? statins cholesterol reductase.\n</think>\n\n"
    rows = gen_rows({q: think + t for q, t in HY_DOCS.items()})
    write_jsonl(toy["gens"] / "toy" / "hyde" / "qwq-32b" / "query_with_hydoc.jsonl", rows)
    assert run(toy, "hyde", "--generations", f"r2med:qwq-32b@{toy['gens']}") == 0
    record = records(toy["runs"] / "run")["q3"]
    generate = step(record, "generate")
    # qwq-32b is in R2MED's r1_model_list (src/base.py L5-6): the response after </think>
    assert generate["reasoning"] == "think" and generate["output"].startswith("<think>")
    assert record["generated"]["passage"] == think + HY_DOCS["q3"]
    assert step(record, "retrieve")["request"]["sparse_text"] == HY_DOCS["q3"]
    assert record["ranking"][0][0] == "d5"  # the think part's "statins cholesterol" is not searched
    assert no_llm.calls == 0
    from agents.commands.trace import main as trace_main

    assert trace_main([str(toy["runs"] / "run"), "q3", "--no-qrels"]) == 0
    shown = capsys.readouterr().out
    assert "replayed from r2med:qwq-32b@" in shown and "read as a think reasoning model" in shown
    assert "Warfarin antagonises" in shown
    # the same texts under a name R2MED does not list as reasoning: searched as written
    write_jsonl(toy["gens"] / "toy" / "hyde" / "gpt4" / "query_with_hydoc.jsonl", rows)
    assert run(toy, "hyde", "--generations", f"r2med:gpt4@{toy['gens']}", name="plain") == 0
    plain = records(toy["runs"] / "plain")["q3"]
    assert step(plain, "retrieve")["request"]["sparse_text"] == think + HY_DOCS["q3"]


def test_a_query_without_a_generation_is_searched_raw_and_reported(toy, no_llm, caplog):
    hub_layout(toy["gens"], "query2doc", gen_rows({q: HY_DOCS[q] for q in ("q1", "q2")}))
    with caplog.at_level(logging.WARNING, logger="agents.execution.whole_run"):
        assert run(toy, "query2doc", "--generations", f"r2med:{LLM}@{toy['gens']}") == 0
    assert (
        f"toy: 1 of 3 queries have no generation in r2med:{LLM}@gens (q3); they are searched "
        "with the raw query" in caplog.messages
    )
    recs = records(toy["runs"] / "run")
    missing = recs["q3"]
    assert missing["generated"] == {}
    assert step(missing, "generate")["note"] == (
        f"no generation in r2med:{LLM}@gens; searched with the raw query"
    )
    retrieve = step(missing, "retrieve")
    raw = SearchRequest(query=QUERIES["q3"])
    assert retrieve["request"] == {
        "query": raw.query, "expansion": raw.expansion, "sparse_text": raw.sparse_text,
    }  # fmt: skip
    assert "no generation" in retrieve["note"]
    assert missing["ranking"][0][0] == "d4"  # its own document, found by the raw query
    assert "note" not in step(recs["q1"], "retrieve")
    summary = json.loads((toy["runs"] / "run" / "toy" / "metrics.json").read_text())
    assert summary["generations"]["missing"] == 1
    assert summary["generations"]["missing_ids"] == ["q3"]


def test_leak_guard_only_hy_doc_reaches_the_agent(toy, no_llm, tmp_path):
    leaky = hub_layout(toy["gens"], "hyde", gen_rows(extra=True))
    clean = hub_layout(tmp_path / "clean", "hyde", gen_rows(extra=False))
    gens = read_generation_file(leaky, "x")
    assert isinstance(gens, Generations)
    assert gens.texts == HY_DOCS  # the reader keeps id -> hy_doc and nothing else
    assert set(vars(gens)) == {"label", "path", "sha256", "texts", "model"}
    assert run(toy, "hyde", "--generations", f"r2med:{LLM}@{toy['gens']}", name="leaky") == 0
    assert run(toy, "hyde", "--generations", f"r2med:{LLM}@{tmp_path / 'clean'}", name="c") == 0
    leaky_recs, clean_recs = records(toy["runs"] / "leaky"), records(toy["runs"] / "c")
    assert {q: r["ranking"] for q, r in leaky_recs.items()} == {
        q: r["ranking"] for q, r in clean_recs.items()
    }
    written = [p for p in (toy["runs"] / "leaky").rglob("*") if p.is_file()]
    assert written
    assert not [p for p in written if b"LEAKED" in p.read_bytes()]
    assert clean.read_bytes() != leaky.read_bytes()


# --- the run-config binding and labels --------------------------------------------------------


def test_the_source_and_its_sha256_bind_the_run_folder(toy, no_llm, capsys):
    path = hub_layout(toy["gens"], "hyde", gen_rows())
    source = f"r2med:{LLM}@{toy['gens']}"
    assert run(toy, "hyde", "--generations", source, name=None) == 0
    (run_dir,) = toy["runs"].iterdir()
    assert run_dir.name == "hyde-bm25q-r2med_o3-mini@gens-toy"
    config = config_of(run_dir)
    assert config["generations"] == source
    assert config["generation_sha256"] == {"toy": hashlib.sha256(path.read_bytes()).hexdigest()}
    assert RunFolder(run_dir).info()["label"] == f"hyde bm25q r2med:{LLM}@gens"
    # a live run of the same agent never shares that folder
    live = scripted.install(lambda messages, params: HY_DOCS["q1"])
    assert run(toy, "hyde", name=None) == 0
    assert live.calls == 3
    assert sorted(p.name for p in toy["runs"].iterdir()) == [
        "hyde-bm25q-r2med_o3-mini@gens-toy",
        "hyde-bm25q-test-toy",
    ]
    # the same command resumes; a changed file is refused, in one line
    assert run(toy, "hyde", "--generations", source, name=None) == 0
    capsys.readouterr()
    hub_layout(toy["gens"], "hyde", gen_rows({**HY_DOCS, "q1": "changed"}))
    assert run(toy, "hyde", "--generations", source, name=None) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    assert "holds a run with another configuration (differs in: generation_sha256" in err


def test_replaying_a_run_folder_with_another_retriever_calls_no_model(toy):
    live = scripted.install(lambda messages, params: HY_DOCS["q2"] + " (live)")
    assert run(toy, "hyde", name="live") == 0
    assert live.calls == 3
    replay = scripted.install(lambda messages, params: AssertionError("an LLM was called"))
    source = str(toy["runs"] / "live")
    assert run(toy, "hyde", "--generations", source, "--retriever", "dense", name="r") == 0
    assert replay.calls == 0
    live_recs, replayed = records(toy["runs"] / "live"), records(toy["runs"] / "r")
    for query_id, record in replayed.items():
        passage = live_recs[query_id]["generated"]["passage"]
        assert record["generated"] == {"passage": passage}
        assert step(record, "generate")["source"] == "run:live"
        expected = generated_request("hyde", QUERIES[query_id], passage)
        assert [d for d, _ in record["ranking"]] == search(toy, "dense", expected)
    config = config_of(toy["runs"] / "r")
    queries_file = toy["runs"] / "live" / "toy" / "queries.jsonl"
    sha = hashlib.sha256(queries_file.read_bytes()).hexdigest()
    assert config["generation_sha256"] == {"toy": sha}
    assert RunFolder(toy["runs"] / "r").info()["label"] == "hyde dense run:live"


def test_reason_replays_a_jsonl_file(toy, no_llm):
    path = write_jsonl(toy["gens"] / "mine.jsonl", gen_rows())
    assert run(toy, "reason", "--generations", str(path)) == 0
    assert no_llm.calls == 0
    record = records(toy["runs"] / "run")["q1"]
    # BRIGHT's rewrite replaces the query: both retrievers search the text alone
    request = step(record, "retrieve")["request"]
    assert request["sparse_text"] == request["dense_text"] == HY_DOCS["q1"]
    assert record["ranking"][0][0] == "d3"
    assert RunFolder(toy["runs"] / "run").info()["label"] == "reason bm25q file:mine"


# --- the hub, offline ------------------------------------------------------------------------


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


def seed_hub(cache: Path, task: str, files: dict[str, bytes], revision: str, main: bool) -> Path:
    """Files cached as hf_hub_download caches them: blobs, a snapshot of symlinks, a ref."""
    repo = cache / "hf" / f"datasets--R2MED--{task}"
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    if main:
        (repo / "refs" / "main").write_text(revision)
    snapshot = repo / "snapshots" / revision
    for name, data in files.items():
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        target = snapshot / name
        target.parent.mkdir(parents=True, exist_ok=True)
        depth = len(Path(name).parts) + 1
        target.symlink_to(Path(*[".."] * depth, "blobs", blob.name))
    return snapshot


def task_files() -> dict[str, bytes]:
    def lines(rows: list[dict]) -> bytes:
        return "".join(json.dumps(r) + "\n" for r in rows).encode()

    return {
        "corpus.jsonl": lines([{"id": i, "text": t} for i, t in DOCS.items()]),
        "query.jsonl": lines([{"id": i, "text": t} for i, t in QUERIES.items()]),
        "qrels.jsonl": lines([{"q_id": q, "p_id": d, "score": s} for q, d, s in QRELS]),
    }


def gen_file(rows: list[dict]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def test_hub_generations_replay_offline_from_the_cache(tmp_path, offline, no_llm):
    revision = R2MED_REVISIONS["Biology"]
    name = f"lamer/{LLM}/query_with_hydoc.jsonl"
    files = {**task_files(), name: gen_file(gen_rows())}
    seed_hub(tmp_path / "cache", "Biology", files, revision, main=True)
    args = [
        "--agent", "lamer", "--dataset", "Biology", "--generations", f"r2med:{LLM}",
        "--runs-dir", str(tmp_path / "runs"), "--cache-dir", str(tmp_path / "cache"), "--quiet",
    ]  # fmt: skip
    assert main(args) == 0
    assert no_llm.calls == 0
    run_dir = tmp_path / "runs" / "lamer-bm25q-r2med_o3-mini-Biology"
    config = config_of(run_dir)
    sha = hashlib.sha256(files[name]).hexdigest()
    assert config["generation_sha256"] == {"Biology": sha}
    assert RunFolder(run_dir).info()["label"] == f"lamer bm25q r2med:{LLM}"
    record = records(run_dir, "Biology")["q1"]
    q = QUERIES["q1"]
    assert step(record, "retrieve")["request"]["sparse_text"] == f"{q} {HY_DOCS['q1']}"


def test_hub_falls_back_to_main_when_the_pinned_revision_lacks_the_file(tmp_path, offline):
    pinned, newer = R2MED_REVISIONS["MedQA-Diag"], "f" * 40
    seed_hub(tmp_path, "MedQA-Diag", task_files(), pinned, main=False)
    files = {f"hyde/{LLM}/query_with_hydoc.jsonl": gen_file(gen_rows())}
    snapshot = seed_hub(tmp_path, "MedQA-Diag", files, newer, main=True)
    path = fetch_r2med_generations("medqa-diag", "hyde", LLM, tmp_path)
    assert path == snapshot / "hyde" / LLM / "query_with_hydoc.jsonl"


def test_hub_offline_and_not_cached_says_where_to_put_the_file(tmp_path, offline):
    with pytest.raises(DataError) as info:
        fetch_r2med_generations("Biology", "hyde", LLM, tmp_path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"cannot download R2MED/Biology hyde/{LLM}/query_with_hydoc.jsonl")
    assert f"put the file at <folder>/Biology/hyde/{LLM}/query_with_hydoc.jsonl" in message
    assert f"--generations r2med:{LLM}@<folder>" in message
    assert "HF_HUB_OFFLINE=1" in message


# --- refusals, one line, before any query runs -----------------------------------------------


@pytest.mark.parametrize(
    ("agent", "source", "expected"),
    [
        ("none", "r2med:o3-mini", "agent 'none' generates no single text per query"),
        ("tool-search", "r2med:o3-mini", "a generation source is for hyde, query2doc, lamer"),
        (
            "reason",
            "r2med:o3-mini",
            "R2MED released generations for hyde, query2doc, lamer, search-o1, search-r1",
        ),
        ("hyde", "r2med:", "expected r2med:<llm> with <llm> one folder name"),
        ("hyde", "r2med:a/b", "expected r2med:<llm> with <llm> one folder name"),
        ("hyde", "r2med:o3-mini@", "expected r2med:<llm>@<folder>, got no folder"),
        ("hyde", " ", "expected r2med:<llm>, r2med:<llm>@<folder>, a .jsonl file"),
    ],
)
def test_bad_source_specs_are_refused(toy, no_llm, capsys, agent, source, expected):
    assert run(toy, agent, "--generations", source) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("error: generations ")
    assert expected in err
    assert not toy["runs"].exists()
    with pytest.raises(ValueError, match=re.escape(expected)):
        parse_source(source, agent)


def mkdir(path: Path) -> Path:
    path.mkdir()
    return path


def bad_file_cases(tmp_path: Path) -> list[tuple[str, str]]:
    run_none = tmp_path / "runs-none"
    (run_none).mkdir()
    (run_none / "config.json").write_text(json.dumps({"agent": "none"}))
    (tmp_path / "plain").mkdir()
    lines = [json.dumps({"id": "q1", "hy_doc": "x"}), json.dumps({"id": "q2"})]
    nulls = [json.dumps({"id": "q1", "hy_doc": None})]
    broken = [json.dumps({"id": "q1", "hy_doc": "x"}), '{"id": "q2", "hy_doc": ']
    return [
        (str(tmp_path / "nope.jsonl"), "nope.jsonl: no such file (generations file:nope)"),
        (str(write_jsonl(tmp_path / "a.jsonl", lines)), "a.jsonl line 2: missing field 'hy_doc'"),
        (
            str(write_jsonl(tmp_path / "b.jsonl", nulls)),
            "b.jsonl line 1: field 'hy_doc': expected a string, got null",
        ),
        (str(write_jsonl(tmp_path / "c.jsonl", broken)), "c.jsonl line 2: malformed JSON"),
        (str(tmp_path / "plain"), "neither a .jsonl file nor a run folder (no config.json)"),
        (
            str(write_jsonl(tmp_path / "gens.json", [{"id": "q1", "hy_doc": "x"}])),
            "gens.json: a file not named .jsonl, so no generation source; give a .jsonl file of "
            '{"id", "hy_doc"} lines, a run folder, or r2med:<llm>[@<folder>]',
        ),
        (str(tmp_path / "nowhere"), "nowhere: no such file or folder; give a .jsonl file"),
        (str(mkdir(tmp_path / "dir.jsonl")), "dir.jsonl: a folder, not a .jsonl file"),
        (str(run_none), "agent 'none' writes no text to replay"),
        (
            f"r2med:{LLM}@{tmp_path / 'plain'}",
            f"no toy/hyde/{LLM}/query_with_hydoc.jsonl (or hyde/{LLM}/query_with_hydoc.jsonl",
        ),
    ]


def test_missing_files_and_bad_lines_are_one_line_before_any_query(toy, no_llm, capsys, tmp_path):
    for source, expected in bad_file_cases(tmp_path):
        assert run(toy, "hyde", "--generations", source) == 2, source
        err = capsys.readouterr().err.strip()
        assert "\n" not in err, err
        assert expected in err, err
        if not Path(source).is_dir():  # a file or nothing is never taken for a run folder
            assert "config.json" not in err, err
        assert not toy["runs"].exists()  # refused before a run folder exists
    assert no_llm.calls == 0


def test_single_task_folder_layout(toy, no_llm):
    write_jsonl(toy["gens"] / "hyde" / LLM / "query_with_hydoc.jsonl", gen_rows())
    assert run(toy, "hyde", "--generations", f"r2med:{LLM}@{toy['gens']}") == 0
    assert records(toy["runs"] / "run")["q1"]["ranking"][0][0] == "d3"


def test_dry_run_of_a_replay_counts_no_call(toy, no_llm, capsys):
    hub_layout(toy["gens"], "hyde", gen_rows())
    assert run(toy, "hyde", "--generations", f"r2med:{LLM}@{toy['gens']}", "--dry-run") == 0
    out = capsys.readouterr().out
    assert no_llm.calls == 0
    assert not toy["runs"].exists()
    assert "total: 0 LLM calls, 0 prompt + 0 completion tokens" in out, out


# --- edges of a source: duplicated ids, blank texts ------------------------------------------


def test_a_duplicated_id_is_warned_naming_file_line_and_id(toy, no_llm, caplog, tmp_path):
    rows = gen_rows(extra=False)
    rows.insert(2, {"id": "q1", "hy_doc": HY_DOCS["q3"]})  # line 3: q1 again, another text
    rows.append({"id": "q2", "hy_doc": HY_DOCS["q2"]})
    path = write_jsonl(tmp_path / "dupes.jsonl", rows)
    with caplog.at_level(logging.WARNING):
        assert run(toy, "hyde", "--generations", str(path)) == 0
    said = [m for m in caplog.messages if "duplicate" in m]
    assert said == [
        f"{path} line 3: duplicate id 'q1' (first on line 1); the last text of each id is kept; "
        "1 more ids repeat"
    ]
    assert records(toy["runs"] / "run")["q1"]["generated"] == {"passage": HY_DOCS["q3"]}


def test_blank_texts_are_counted_and_reported_with_the_missing_ones(toy, no_llm, caplog, tmp_path):
    texts = {"q1": "  \n", "q2": HY_DOCS["q2"]}  # q1 blank, q3 missing
    path = write_jsonl(tmp_path / "blank.jsonl", gen_rows(texts, extra=False))
    with caplog.at_level(logging.WARNING):
        assert run(toy, "hyde", "--generations", str(path)) == 0
    assert (
        "toy: 1 of 3 queries have no generation in file:blank (q3) and 1 a blank one (q1); they "
        "are searched with the raw query (as they are under query_fallback=false)"
    ) in caplog.messages
    summary = json.loads((toy["runs"] / "run" / "toy" / "metrics.json").read_text())
    assert summary["generations"]["missing_ids"] == ["q3"]
    assert summary["generations"]["blank"] == 1 and summary["generations"]["blank_ids"] == ["q1"]
    retrieve = step(records(toy["runs"] / "run")["q1"], "retrieve")
    assert retrieve["request"]["sparse_text"] is None  # the raw query, said in its trace


def test_r2med_blank_texts_are_reported_and_searched_as_they_are(toy, no_llm, caplog):
    hub_layout(toy["gens"], "hyde", gen_rows({"q1": "", "q2": HY_DOCS["q2"], "q3": HY_DOCS["q3"]}))
    with caplog.at_level(logging.WARNING):
        assert run(toy, "hyde", "--generations", f"r2med:{LLM}@{toy['gens']}") == 0
    assert (
        f"toy: 1 of 3 queries have a blank generation in r2med:{LLM}@gens (q1); they are "
        "searched as they are, as R2MED searched them"
    ) in caplog.messages
    record = records(toy["runs"] / "run")["q1"]
    assert step(record, "retrieve")["request"]["sparse_text"] == " "  # R2MED's rule: no term
    summary = json.loads((toy["runs"] / "run" / "toy" / "metrics.json").read_text())
    assert summary["generations"]["missing"] == 0 and summary["generations"]["blank_ids"] == ["q1"]
