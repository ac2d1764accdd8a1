"""docs/extending.md's worked examples, run as the doc writes them: the `keywords` agent, the
`query-terms` rerank stage and the `overlap` retriever kind.

The doc's three blocks (the graph module with its spec, its prompt file, its registry line) are
read from the doc and put where they say they live, without writing into the repo: the module
into a temporary folder added to the `agents.graphs` package's path, the prompt into a temporary
prompt folder that also links every built-in family, and the spec its registry line lists into
`AGENTS`. Then
`agents.run` runs the agent on the demo with a scripted model, and again with --dry-run; the
doc's own --dry-run command, with the embedded model, prints what the doc shows.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

import agents.config.settings
import agents.graphs
import prompts
from agents.commands.run import main
from agents.config.registry import AGENTS, AgentSpec
from agents.llm import scripted
from eval.datasets import DEMO_DIR
from eval.runs import TaskFolder

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "extending.md"
MODULE = "agents.graphs.keywords"
KEYWORDS = "wrinkling, vasoconstriction, sympathetic nerve, digital nerve injury"


def block(info: str) -> str:
    """The body of the doc's one fenced block whose info string is ``info``."""
    fences = re.findall(r"^```([^\n]*)\n(.*?)^```$", DOC.read_text(), re.DOTALL | re.MULTILINE)
    bodies = [body for head, body in fences if head.strip() == info]
    assert len(bodies) == 1, f"{DOC.name}: {len(bodies)} blocks with info string {info!r}"
    return bodies[0]


@pytest.fixture
def keywords_agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The doc's agent, installed as the doc says: module, prompt file, registry line."""
    graphs = tmp_path / "graphs"
    graphs.mkdir()
    (graphs / "keywords.py").write_text(block("python title=agents/graphs/keywords.py"))
    # agents/graphs/keywords.py, as far as `import agents.graphs.keywords` can tell
    monkeypatch.setattr(agents.graphs, "__path__", [*agents.graphs.__path__, str(graphs)])

    # A prompt folder holding the built-in families and the new one: the loader reads files
    # from prompts.PROMPTS_DIR only (an override needs a built-in family to replace).
    folder = tmp_path / "prompts"
    folder.mkdir()
    for family in prompts.PROMPTS_DIR.iterdir():
        if family.is_dir() and any(family.glob("*.txt")):
            (folder / family.name).symlink_to(family, target_is_directory=True)
    (folder / "keywords").mkdir()
    prompt = block("text title=prompts/keywords/default.txt").removesuffix("\n")
    (folder / "keywords" / "default.txt").write_text(prompt)  # no final newline, as the doc says
    monkeypatch.setattr("prompts.files.PROMPTS_DIR", folder)
    prompts.placeholder_rules.cache_clear()  # derived from the built-in files: now with ours

    # the registry's line, run as written: its import, then its line in the list AGENTS is
    # built from ({spec.name: spec for spec in (...)})
    imported, listed = block("python title=agents/config/registry.py").splitlines()
    names: dict = {"AgentSpec": AgentSpec}
    exec(imported, names)
    entry = {spec.name: spec for spec in eval(f"({listed}\n)", names)}
    assert list(entry) == ["keywords"] and entry["keywords"].builder is (
        sys.modules[MODULE].build_graph
    )
    monkeypatch.setitem(AGENTS, "keywords", entry["keywords"])
    # --agent's choices were listed when agents.config.settings was imported, before this entry was
    # added; in the repo the line is in agents/config/registry.py before that import
    agent = agents.config.settings.SETTINGS["agent"]
    monkeypatch.setitem(
        agents.config.settings.SETTINGS, "agent", dataclasses.replace(agent, choices=tuple(AGENTS))
    )
    yield prompt
    prompts.placeholder_rules.cache_clear()  # the real folder's rules again, once restored
    sys.modules.pop(MODULE, None)
    if hasattr(agents.graphs, "keywords"):
        delattr(agents.graphs, "keywords")


def demo_queries(n: int) -> dict[str, str]:
    lines = (DEMO_DIR / "query.jsonl").read_text().splitlines()[:n]
    return {q["id"]: q["text"] for q in map(json.loads, lines)}


def run_keywords(tmp_path: Path, *extra: str) -> int:
    return main([
        "--agent", "keywords", "--dataset", "demo", "--limit", "2", "--model", "scripted/kw",
        "--runs-dir", str(tmp_path / "runs"), "--cache-dir", str(tmp_path / "cache"), "--quiet",
        *extra,
    ])  # fmt: skip


def test_the_keywords_agent_runs_and_its_keywords_reach_the_retriever(
    keywords_agent: str, tmp_path: Path
):
    sent: list[list[dict]] = []

    def respond(messages, params):
        sent.append(messages)
        return KEYWORDS

    scripted.install(respond)
    assert run_keywords(tmp_path) == 0

    queries = demo_queries(2)
    first_line = keywords_agent.splitlines()[0]
    assert len(sent) == 2  # one call per query
    for messages in sent:
        [message] = messages
        assert message["role"] == "user" and message["content"].startswith(first_line)
    assert {m[0]["content"].split("Query: ")[1].split("\nKeywords:")[0] for m in sent} == set(
        queries.values()
    )

    (run_dir,) = (tmp_path / "runs").iterdir()
    assert run_dir.name.startswith("keywords-")
    config = json.loads((run_dir / "config.json").read_text())
    # the run records the prompt file it sent, by the hash of its bytes
    sha = hashlib.sha256(keywords_agent.encode()).hexdigest()
    assert config["prompts"] == {"keywords/default": sha}
    records = TaskFolder(run_dir / "demo").records()
    assert set(records) == set(queries)
    for query_id, record in records.items():
        assert record["error"] is None
        assert record["generated"]["keywords"] == KEYWORDS
        retrieve = next(s for s in record["steps"] if s["node"] == "retrieve")
        # the keywords reached the retriever: BM25 scored the query followed by them
        assert retrieve["request"]["sparse_text"] == f"{queries[query_id]} {KEYWORDS}"
        assert retrieve["request"]["expansion"] == KEYWORDS
        assert record["ranking"] and [doc for doc, _ in record["ranking"]] == retrieve["doc_ids"]
    metrics = json.loads((run_dir / "demo" / "metrics.json").read_text())
    assert "NDCG@10" in json.dumps(metrics)


def test_the_keywords_agents_dry_run_bounds_its_calls(keywords_agent: str, tmp_path, capsys):
    sent: list[list[dict]] = []
    scripted.install(lambda messages, params: sent.append(messages) or KEYWORDS)
    assert run_keywords(tmp_path, "--dry-run") == 0
    out = capsys.readouterr().out
    # task, stage, queries, calls/q, prompt tok/q, completion tok/q, source
    [row] = [line.split() for line in out.splitlines() if line.split()[1:2] == ["keywords"]]
    assert row[:3] == ["demo", "keywords", "2"], out
    assert row[3] != "?", f"no bound for the keywords agent:\n{out}"
    assert float(row[3]) > 0 and float(row[4].replace(",", "")) > 0, out
    total = next(line for line in out.splitlines() if line.startswith("total"))
    assert total.startswith("total: ") and int(total.split()[1].replace(",", "")) > 0, out
    assert sent == []  # the model named was never called
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


@pytest.mark.slow
def test_the_docs_dry_run_prints_what_the_doc_shows(
    keywords_agent: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys, models_cache
):
    command, *shown = block("console title=dry-run output").splitlines()
    argv = command.removeprefix("$ python -m agents.run ").split()
    assert argv == ["--agent", "keywords", "--dry-run"]
    # the command as written: the default dataset, model and runs folder (./runs, here)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("R2MED_AGENTS_CACHE", str(models_cache))
    assert main(argv) == 0
    assert capsys.readouterr().out.splitlines() == shown
    assert not (tmp_path / "runs").exists()  # a dry run writes no run folder


# --- the rerank stage and the retriever kind ---------------------------------------------------


@pytest.fixture
def install_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Puts the doc's module block ``info`` in as ``<package>.<name>``, from a folder on the
    package's path; gone again after the test."""
    installed: list[tuple[Any, str]] = []

    def install(package: Any, info: str, name: str) -> None:
        folder = tmp_path / package.__name__.replace(".", "_")
        folder.mkdir(exist_ok=True)
        (folder / f"{name}.py").write_text(block(info))
        monkeypatch.setattr(package, "__path__", [*package.__path__, str(folder)])
        installed.append((package, name))

    yield install
    for package, name in installed:
        sys.modules.pop(f"{package.__name__}.{name}", None)
        if hasattr(package, name):
            delattr(package, name)


def listed(info: str, names: dict) -> list:
    """The doc's listing block ``info`` run as written: its import, then its entry."""
    imported, entry = block(info).splitlines()
    exec(imported, names)
    return list(eval(f"({entry}\n)", names))


def run_demo(tmp_path: Path, *extra: str) -> Path:
    assert main([
        "--agent", "none", "--dataset", "demo", "--runs-dir", str(tmp_path / "runs"),
        "--cache-dir", str(tmp_path / "cache"), "--quiet", *extra,
    ]) == 0  # fmt: skip
    (run_dir,) = (tmp_path / "runs").iterdir()
    return run_dir


def demo_corpus() -> dict[str, str]:
    lines = (DEMO_DIR / "corpus.jsonl").read_text().splitlines()
    return {d["id"]: d["text"] for d in map(json.loads, lines)}


def test_the_query_terms_stage_runs_as_the_doc_writes_it(tmp_path, monkeypatch, install_module):
    import agents.rerank
    from agents.config.registry import STAGES

    install_module(agents.rerank, "python title=agents/rerank/query_terms.py", "query_terms")
    [spec] = listed("python title=agents/config/registry.py (stage)", {})
    assert spec.name == "query-terms"
    assert spec.builder is sys.modules["agents.rerank.query_terms"].build_stage
    monkeypatch.setitem(STAGES, "query-terms", spec)

    run_dir = run_demo(tmp_path, "--rerank", "query-terms,depth=20", "--limit", "3")
    words = sys.modules["agents.rerank.query_terms"].words
    corpus, queries = demo_corpus(), demo_queries(3)
    (stage_dir,) = (run_dir / "demo").glob("rerank-1-*")
    bm25 = TaskFolder(run_dir / "demo").records()
    for query_id, record in TaskFolder(stage_dir).records().items():
        first = [d for d, _ in bm25[query_id]["ranking"]][:20]
        held = {d: len(words(queries[query_id]) & words(corpus[d])) for d in first}
        # the doc's rule, computed here from the first stage's list: most words held first
        expected = sorted(first, key=lambda d: -held[d])
        assert [d for d, _ in record["ranking"]] == expected != first
        assert record["steps"][0]["held"] == [held[d] for d in expected]
    assert "query-terms" in json.dumps(json.loads((run_dir / "config.json").read_text()))


def test_the_overlap_retriever_kind_runs_as_the_doc_writes_it(
    tmp_path, monkeypatch, install_module
):
    import retrievers
    from retrievers.kinds import RETRIEVER_KINDS, RetrieverKind

    install_module(retrievers, "python title=retrievers/overlap.py", "overlap")
    [row] = listed("python title=retrievers/kinds.py", {"RetrieverKind": RetrieverKind})
    assert row.name == "overlap" and row.build is sys.modules["retrievers.overlap"].build_overlap
    monkeypatch.setitem(RETRIEVER_KINDS, "overlap", row)

    run_dir = run_demo(tmp_path, "--retriever", "overlap", "--limit", "3")
    words = sys.modules["retrievers.overlap"].words
    corpus, queries = demo_corpus(), demo_queries(3)
    for query_id, record in TaskFolder(run_dir / "demo").records().items():
        held = {d: len(words(queries[query_id]) & words(text)) for d, text in corpus.items()}
        best = sorted((d for d in held if held[d]), key=lambda d: (-held[d], d))[:10]
        assert [d for d, _ in record["ranking"]][:10] == best
    assert json.loads((run_dir / "config.json").read_text())["retriever"]["spec"] == "overlap"
