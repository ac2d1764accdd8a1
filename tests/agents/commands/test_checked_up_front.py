"""Checked up front means checked: every file a run or a sweep reads is validated before the
first model call, by the rules its use will apply, and a refusal is exit code 2 with ONE
stderr line naming the file and the field (or the sweep key). Each case goes through the real
entry points (`agents.commands.run.main`, `agents.commands.sweep.main`) with the scripted provider,
whose call counter must stay 0 when the input is refused.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from agents.commands.run import main as run_main
from agents.commands.sweep import main as sweep_main
from agents.config.sweep_file import load_sweep
from agents.config.sweep_grid import baselines, cells
from agents.llm import scripted
from agents.llm.scripted import Reply
from tests.helpers import one_line_error

PASSAGE = "Metformin lowers hepatic glucose production."


@pytest.fixture
def provider():
    """A scripted model that records every request; a refused input must leave it at 0 calls."""
    sent: list[dict] = []

    def respond(messages: list[dict], params: dict) -> str:
        sent.append({"messages": messages, "params": params})
        return PASSAGE

    model = scripted.install(respond)
    model.sent = sent
    return model


def run(tmp_path: Path, toy_dir: Path, agent: str, *extra: str) -> int:
    return run_main([
        "--agent", agent, "--dataset", str(toy_dir), "--model", "scripted/test",
        "--runs-dir", str(tmp_path / "runs"), "--cache-dir", str(tmp_path / "cache"),
        "--run-name", "r", "--quiet", *extra,
    ])  # fmt: skip


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# --- prompt files: refused when read, naming the file and the field ---------------------------

# (agent, override key, file text, the field as the error must name it)
UNRENDERABLE = {
    "format spec": ("hyde", "hyde", "Answer: {query:d}", "{query:d}"),
    "bad conversion": ("hyde", "hyde", "Answer: {query!x}", "{query!x}"),
    "repr conversion": ("hyde", "hyde", "Answer: {query!r}", "{query!r}"),
    "nested field": ("hyde", "hyde", "Answer: {query:>{width}}", "{query:>{width}}"),
    "attribute": ("hyde", "hyde", "Answer: {query.upper}", "{query.upper}"),
    "index": ("lamer", "lamer", "Q: {query}\nDocs: {docs[0]}", "{docs[0]}"),
    # renders with the int the agent passes, but only plain {name} fields are filled
    "int with spec": ("search-o1", "search-o1", "{query} ({max_searches:d})", "{max_searches:d}"),
    "system placeholder": ("hyde", "system", "You help with {query}.", "{query}"),
    "system lone brace": ("hyde", "system", "You answer in JSON {like this.", "malformed"),
    "tool description": ("tool-search", "tool-search/search", "Search {corpus}.", "{corpus}"),
    "nudge": ("tool-search", "tool-search/nudge", "Call a tool {now}.", "{now}"),
    "few-shot examples": ("query2doc", "query2doc-examples", "Q: {query}\nA: x", "{query}"),
    "final nudge": ("search-r1", "search-r1/final", "Answer now: {query}", "{query}"),
    "listwise ready": ("none", "rerank-listwise/ready", "Ready {x}", "{x}"),
}


@pytest.mark.parametrize("case", list(UNRENDERABLE))
def test_prompt_that_would_fail_when_rendered_is_refused_at_start(
    tmp_path, toy_dir, capsys, provider, case
):
    agent, key, text, field = UNRENDERABLE[case]
    bad = write(tmp_path / "bad.txt", text)
    extra = ["--rerank", "llm-listwise"] if key.startswith("rerank-") else []
    assert run(tmp_path, toy_dir, agent, "--prompt", f"{key}={bad}", *extra) == 2
    message = one_line_error(capsys)
    assert message.startswith("error: ") and str(bad) in message and field in message, message
    assert provider.calls == 0
    assert not (tmp_path / "runs").exists()  # refused before anything was written


def test_override_for_a_kind_the_dataset_lacks_is_still_checked(
    tmp_path, toy_dir, capsys, provider
):
    # The toy task is not an exam: the exam prompt would be rendered by no query of this run,
    # but a later run on MedQA-Diag would fail on every query. Every override file is read
    # and rendered when the flags are parsed, whatever the tasks.
    bad = write(tmp_path / "exam.txt", "Exam: {query:d}")
    assert run(tmp_path, toy_dir, "hyde", "--prompt", f"hyde/exam={bad}") == 2
    message = one_line_error(capsys)
    assert str(bad) in message and "{query:d}" in message
    assert provider.calls == 0


@pytest.mark.parametrize(
    "agent, override, text, extra",
    [
        ("hyde", "lamer", "{query} {docs}", ()),  # another agent's prompt
        ("hyde", "hyde/exam", "{query}", ()),  # a kind the toy task is not
        ("reason", "system", "Be brief.", ()),  # reason sends BRIGHT's, system/reason
        ("hyde", "hyde", "{query}", ("--generations", "REPLAY")),  # a replay sends no prompt
    ],
)
def test_an_override_no_prompt_of_the_run_reads_is_refused(
    tmp_path, toy_dir, capsys, provider, agent, override, text, extra
):
    good = write(tmp_path / "p.txt", text)
    if extra:  # a replay: a file of texts
        rows = "".join(json.dumps({"id": q, "hy_doc": "statins"}) + "\n" for q in ("q1", "q2"))
        extra = ("--generations", str(write(tmp_path / "g.jsonl", rows)))
    assert run(tmp_path, toy_dir, agent, "--prompt", f"{override}={good}", *extra) == 2
    message = one_line_error(capsys)
    assert message.startswith(f"error: --prompt {override}={good}: no prompt this run sends reads")
    assert provider.calls == 0 and not (tmp_path / "runs").exists()


# --- one escape rule: {{ }} is a literal brace in every file, as sent --------------------------


def test_doubled_brace_in_a_system_prompt_reaches_the_model_as_one_brace(
    tmp_path, toy_dir, provider
):
    system = write(tmp_path / "system.txt", 'You answer in JSON such as {{"passage": "..."}}.')
    examples = write(tmp_path / "examples.txt", "Query: a set {{1, 2}}\nPassage: sets.")
    prompt = write(tmp_path / "q2d.txt", "{examples}\n\nQuery: {query} {{verbatim}}\nPassage:")
    argv = ["--prompt", f"system={system}", "--prompt", f"query2doc-examples={examples}"]
    assert run(tmp_path, toy_dir, "query2doc", *argv, "--prompt", f"query2doc={prompt}") == 0
    assert provider.calls == 3
    for request in provider.sent:
        sys_msg, user = request["messages"]
        assert sys_msg["content"] == 'You answer in JSON such as {"passage": "..."}.'
        assert user["content"].startswith("Query: a set {1, 2}\nPassage: sets.\n\nQuery: ")
        assert user["content"].endswith(" {verbatim}\nPassage:")
    # the recorded hash is of the file as written (before rendering): sha256sum of the file
    recorded = json.loads((tmp_path / "runs" / "r" / "config.json").read_text())["prompts"]
    assert recorded["system/toy"] == hashlib.sha256(system.read_bytes()).hexdigest()


def test_doubled_brace_in_tool_descriptions_and_nudge_reaches_the_model_as_one_brace(
    tmp_path, toy_dir
):
    sent: list[dict] = []

    def respond(messages: list[dict], params: dict):
        sent.append({"messages": messages, "params": params})
        if len(sent) % 2:  # the first turn answers without a tool: the nudge follows
            return "I think d1."
        return Reply(tool_calls=[("submit", {"doc_ids": ["d1"]})])

    scripted.install(respond)
    search = write(tmp_path / "search.txt", "Search the corpus {{BM25}}.")
    nudge = write(tmp_path / "nudge.txt", "Use a tool {{search, read or submit}}.")
    argv = ["--prompt", f"tool-search/search={search}", "--prompt", f"tool-search/nudge={nudge}"]
    assert run(tmp_path, toy_dir, "tool-search", *argv, "--limit", "1") == 0
    tools = {t["function"]["name"]: t["function"] for t in sent[0]["params"]["tools"]}
    assert tools["search"]["description"] == "Search the corpus {BM25}."
    assert sent[1]["messages"][-1] == {
        "role": "user",
        "content": "Use a tool {search, read or submit}.",
    }


def test_doubled_brace_in_search_r1_final_nudge_reaches_the_model_as_one_brace(tmp_path, toy_dir):
    sent: list[list[dict]] = []

    def respond(messages: list[dict], params: dict) -> str:
        sent.append(messages)
        return "<think>look</think><search> aspirin platelets "

    scripted.install(respond)
    final = write(tmp_path / "final.txt", "No more searches {{0 left}}: answer now.")
    argv = ["--prompt", f"search-r1/final={final}", "--option", "final_nudge=true"]
    assert run(tmp_path, toy_dir, "search-r1", *argv, "--max-turns", "1", "--limit", "1") == 0
    last_turn = sent[-1][-1]["content"]
    assert "No more searches {0 left}: answer now." in last_turn and "{{" not in last_turn


# --- sweeps: [compare] and [prompts] checked with the rest, before any cell runs --------------


def sweep_file(folder: Path, datasets: list[Path], extra: str = "", agents: str = '"hyde"') -> Path:
    write(folder / "short.txt", "Answer: {query}\nPassage: ")
    return write(
        folder / "sweep.toml",
        f"""
output = "out"
cache_dir = "cache"
agents = [{agents}]
models = ["scripted/test"]
datasets = [{", ".join(json.dumps(str(d)) for d in datasets)}]

[prompts]
base = {{}}
short = {{ hyde = "short.txt" }}

[options]
quiet = true
{extra}
""",
    )


# (what the file holds, the key the error must name, words it must hold)
BAD_SWEEPS = {
    "metric name": ("[compare]\nmetric = 'NDCG@ten'", "compare.metric", "unknown metric"),
    "metric type": ("[compare]\nmetric = 10", "compare.metric", "expected a string"),
    "test": ("[compare]\ntest = 'wilcoxon'", "compare.test", "unknown test 'wilcoxon'"),
    "baseline type": ("[compare]\nbaseline = ['a']", "compare.baseline", "expected a string"),
    "unknown baseline": (
        "[compare]\nbaseline = 'hyde-bm25q-test-bsae-toy'",
        "compare.baseline",
        "no cell is named 'hyde-bm25q-test-bsae-toy'; cells: hyde-bm25q-test-base-toy,",
    ),
}


@pytest.mark.parametrize("case", list(BAD_SWEEPS))
def test_bad_compare_table_is_refused_before_any_cell(tmp_path, toy_dir, capsys, provider, case):
    extra, key, words = BAD_SWEEPS[case]
    config = sweep_file(tmp_path, [toy_dir], extra)
    assert sweep_main([str(config)]) == 2
    message = one_line_error(capsys)
    assert message.startswith(f"error: {config}: key '{key}': ") and words in message, message
    assert provider.calls == 0
    assert not (tmp_path / "out").exists()


def test_sweep_prompt_file_that_would_fail_when_rendered_is_refused(
    tmp_path, toy_dir, capsys, provider
):
    config = sweep_file(tmp_path, [toy_dir])
    write(tmp_path / "short.txt", "Answer: {query:.20}")
    assert sweep_main([str(config)]) == 2
    message = one_line_error(capsys)
    assert "key 'prompts.short'" in message and "short.txt" in message and "{query:.20}" in message
    assert provider.calls == 0


def test_sweep_override_no_agent_reads_is_refused(tmp_path, toy_dir, capsys, provider):
    config = sweep_file(tmp_path, [toy_dir])
    text = config.read_text().replace('{ hyde = "short.txt" }', '{ lamer = "short.txt" }')
    config.write_text(text.replace("short.txt", "lamer.txt"))
    write(tmp_path / "lamer.txt", "{query} {docs}")
    assert sweep_main([str(config)]) == 2
    message = one_line_error(capsys)
    assert message.startswith(f"error: {config}: key 'prompts.short': overrides prompt 'lamer'")
    assert "no agent or rerank stage of this sweep reads" in message
    assert provider.calls == 0


def test_system_override_is_not_read_by_the_reason_agent(tmp_path, toy_dir, capsys, provider):
    # reason sends system/reason: a "system" override changes hyde's run only; for reason it is
    # the base run, and a sweep of reason alone would override nothing.
    write(tmp_path / "system.txt", "Be brief.")
    config = sweep_file(tmp_path, [toy_dir], agents='"hyde", "reason"')
    text = config.read_text().replace('{ hyde = "short.txt" }', '{ system = "system.txt" }')
    config.write_text(text)
    grid, notes = cells(load_sweep(config))
    assert [c.name for c in grid] == [
        "hyde-bm25q-test-base-toy",
        "hyde-bm25q-test-short-toy",
        "reason-bm25q-test-base-toy",
    ]
    assert notes == ["reason-bm25q-test-short-toy is the same run as reason-bm25q-test-base-toy; "
                     "run once"]  # fmt: skip
    # a duplicate's name, given as the baseline, names the cell that runs it
    config.write_text(text + "\n[compare]\nbaseline = 'reason-bm25q-test-short-toy'\n")
    assert baselines(load_sweep(config)) == {str(toy_dir): "reason-bm25q-test-base-toy"}
    config.write_text(text)
    config.write_text(config.read_text().replace('"hyde", "reason"', '"reason"'))
    assert sweep_main([str(config)]) == 2
    assert "key 'prompts.short': overrides prompt 'system'" in one_line_error(capsys)
    assert provider.calls == 0


@pytest.mark.slow
def test_baseline_is_the_same_setup_on_every_dataset(tmp_path, toy_dir, capsys, provider):
    # A baseline is one cell name, which holds one dataset; on the others the cell of the same
    # setup is the baseline, not silently the first cell.
    other = tmp_path / "toy2"
    shutil.copytree(toy_dir, other)
    extra = "[compare]\nbaseline = 'hyde-bm25q-test-short-toy'"
    config = sweep_file(tmp_path, [toy_dir, other], extra, agents='"none", "hyde"')
    assert sweep_main([str(config)]) == 0
    comparisons = tmp_path / "out" / "comparison"
    for dataset in ("toy", "toy2"):
        summary = json.loads((comparisons / dataset / "comparison.json").read_text())
        baseline = Path(summary["runs"][summary["baseline"]]).name
        assert baseline == f"hyde-bm25q-test-short-{dataset}"
    assert baselines(load_sweep(config)) == {
        str(toy_dir): "hyde-bm25q-test-short-toy",
        str(other): "hyde-bm25q-test-short-toy2",
    }
