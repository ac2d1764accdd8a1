"""The README is a front page, and every page of docs/ is reachable from it.

What the README shows is checked as written: the quick start's three commands (the install line is
also compared with .ci/llama-build-flags, tests/agents/llm/embedded/test_embedded_provider.py), the
Python call (run on the demo with a scripted model in place of the embedded one), and R2MED's
figures in its agents table (the best rows of both R2MED's sources, each marked with its source) and
in its rebuild table.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agents.llm import scripted

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
DOCS = sorted((REPO / "docs").glob("*.md"))
QUICK_START = [
    'CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON '
    "-DGGML_BMI2=ON\" pip install --no-cache-dir -e '.[test]'  # install (Python 3.11; compiles "
    "llama-cpp-python, 4-6 min)",
    "python -m agents.run --agent search-o1    # Search-o1 on the bundled demo, embedded model, "
    "offline",
    "python -m pytest -q                       # the tests",
]


def prose(text: str) -> str:
    """``text`` without its fenced code blocks (a "# ..." line there is a comment)."""
    return re.sub(r"^```.*?^```$", "", text, flags=re.DOTALL | re.MULTILINE)


def code_blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", text, re.DOTALL | re.MULTILINE)


def section(text: str, heading: str) -> str:
    """The body of the README's ``## heading`` section."""
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.DOTALL | re.M)
    assert match, f"README has no section {heading!r}"
    return match.group(1)


def test_the_readme_is_a_front_page():
    lines = README.read_text().splitlines()
    assert len(lines) <= 150, f"README.md has {len(lines)} lines; details belong in docs/"
    headings = [line for line in lines if line.startswith("## ")]
    order = ["Install", "Quick start", "Agents", "Rerank stages", "Rebuilding R2MED's rows",
             "Comparing runs", "Python", "Documentation", "Citation", "Licence"]  # fmt: skip
    assert [h.removeprefix("## ") for h in headings] == order


def test_the_quick_start_is_the_three_commands():
    [block] = code_blocks(section(README.read_text(), "Quick start"), "bash")
    assert block.splitlines() == QUICK_START


def test_no_heading_names_an_issue():
    for path in [README, *DOCS]:
        for line in prose(path.read_text()).splitlines():
            assert not re.match(r"^#+ .*([Ii]ssue|#[0-9])", line), f"{path.name}: {line}"


def test_every_doc_is_on_the_readmes_map_and_every_link_resolves():
    text = README.read_text()
    mapped = re.findall(r"^- \[docs/([\w-]+\.md)\]\(docs/\1\): \S", section(text, "Documentation"),
                        re.MULTILINE)  # fmt: skip
    assert sorted(mapped) == [p.name for p in DOCS]
    for path in [README, *DOCS]:
        for target in re.findall(r"\]\(([^)\s]+)\)", prose(path.read_text())):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            file = target.split("#")[0]
            assert not file or (path.parent / file).exists(), f"{path.name}: broken link {target}"


def test_the_rebuild_tables_figures_are_r2meds():
    from eval.references.reading import load_references

    table = load_references()
    body = section(README.read_text(), "Rebuilding R2MED's rows")
    rows = re.findall(r"^\| `([\w./-]+)` \| (\d+\.\d\d) \|", body, re.MULTILINE)
    assert len(rows) == 3
    commands = " ".join(code_blocks(body, "bash"))
    for row, figure in rows:
        assert float(figure) == round(table[row].average() * 100, 2), row
        method, llm, _ = row.split("/")
        assert f"--agent {method} --dataset r2med --generations r2med:{llm}" in commands, row


# The agents table's names of R2MED's short names (its row ids)
DISPLAY = {"o3-mini": "o3-mini", "gpt4": "GPT-4o", "qwen-72b": "Qwen2.5-72B", "qwq-32b": "QwQ-32B",
           "qwen-7b-ins": "Search-R1 7B instruct", "nv": "NV-Embed-v2"}  # fmt: skip
MARKS = {"R": "r2med", "L": "r2med-leaderboard"}
AGENT_FIGURE = re.compile(r"(\d+\.\d\d)(?: \(([^)]*)\))? \[(R|L|R, L)\]")


def _published_averages(method: str) -> dict[tuple[str, str], str]:
    """(row id, table) -> its Avg nDCG@10 ×100 as printed, over both of R2MED's sources."""
    from eval.references.model import TABLES
    from eval.references.reading import load_references

    return {(row, table): f"{ref.average() * 100:.2f}"
            for table in TABLES for row, ref in load_references(table).items()
            if row.split("/")[0] == method}  # fmt: skip


def _expected_cell(averages: dict[tuple[str, str], str], bm25: bool) -> tuple[str, str, str]:
    """(figure, names, marks) of the best row, over BM25 rows only when ``bm25``."""
    chosen = {k: v for k, v in averages.items() if not bm25 or k[0].endswith("/bm25")}
    best = max(chosen.values(), key=float)
    rows = {row for (row, _), v in chosen.items() if v == best}
    assert len(rows) == 1, f"two rows tie at {best}: {rows}"  # else the names are ambiguous
    (row,) = rows
    marks = ", ".join(m for m, table in MARKS.items() if chosen.get((row, table)) == best)
    parts = row.split("/")[1:]
    names = ", ".join(DISPLAY[p] for p in (parts[:-1] if bm25 else parts) if p in DISPLAY)
    return best, names, marks


def test_the_agents_tables_figures_are_the_best_of_both_sources():
    """Each figure is a row's Avg in the source(s) its mark names, [R, L] only where both
    sources print it alike; the BM25 figure is the best BM25 row of the method over both
    sources, the other the best row; the names in brackets are that row's."""
    body = section(README.read_text(), "Agents")
    checked = []
    for agent, method in [("none", "base"), ("hyde", "hyde"), ("query2doc", "query2doc"),
                          ("lamer", "lamer"), ("search-o1", "search-o1"),
                          ("search-r1", "search-r1")]:  # fmt: skip
        row = next(line for line in body.splitlines() if line.startswith(f"| `{agent}` |"))
        cells = AGENT_FIGURE.findall(row.rsplit("|", 2)[-2])
        assert len(cells) == 2, (agent, row)
        averages = _published_averages(method)
        for (figure, names, marks), bm25 in zip(cells, (True, False), strict=True):
            assert (figure, names, marks) == _expected_cell(averages, bm25), (agent, bm25)
        checked.append(agent)
    assert len(checked) == 6
    assert "— (BRIGHT's method)" in body and "| `tool-search` |" in body
    # the one conflict the paragraph names, with both figures and their sources
    from eval.references.conflicts import conflicts

    medcpt = conflicts()["base/medcpt"]
    repo, board = (f"{r.average() * 100:.2f}" for r in (medcpt.repository, medcpt.leaderboard))
    assert f"MedCPT: {repo} [R], {board} [L]" in " ".join(body.split())


def test_the_python_call_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys):
    [code] = code_blocks(section(README.read_text(), "Python"), "python")
    assert "local/smollm2-135m" in code
    monkeypatch.chdir(tmp_path)  # the run goes to ./runs, as it would for the reader
    monkeypatch.setenv("R2MED_AGENTS_CACHE", str(tmp_path / "cache"))
    scripted.install(lambda messages, params: "Fingertip wrinkling is controlled by nerves.")
    exec(code.replace("local/smollm2-135m", "scripted/readme"), {})  # the one change
    printed = capsys.readouterr().out.split()
    assert Path(printed[0]).parent.name == "runs" and (tmp_path / printed[0]).is_dir()
    assert 0 <= float(printed[1]) <= 1
