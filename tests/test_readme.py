"""The README is a front page, and every page of docs/ is reachable from it.

What the README shows is checked as written: the quick start's three commands (the install
line is also compared with .ci/llama-build-flags, tests/test_local_llm.py), the Python call
(run on the demo with a scripted model in place of the embedded one), and R2MED's figures in
its rebuild table (the agents table is checked in tests/test_r2med_settings.py).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agents.llm import scripted

REPO = Path(__file__).resolve().parents[1]
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
    from eval.references import load_references

    table = load_references()
    body = section(README.read_text(), "Rebuilding R2MED's rows")
    rows = re.findall(r"^\| `([\w./-]+)` \| (\d+\.\d\d) \|", body, re.MULTILINE)
    assert len(rows) == 3
    commands = " ".join(code_blocks(body, "bash"))
    for row, figure in rows:
        assert float(figure) == round(table[row].average() * 100, 2), row
        method, llm, _ = row.split("/")
        assert f"--agent {method} --dataset r2med --generations r2med:{llm}" in commands, row


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
