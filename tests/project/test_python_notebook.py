"""docs/python.md as a reader runs it: a Jupyter notebook, cell by cell, in a real kernel.

A kernel runs an event loop in its main thread (where ``asyncio.run`` cannot be called) and
renders tqdm's notebook bars; an ``exec`` of the blocks in a plain process sees neither. The
doc's blocks become the cells of a notebook (nbformat), which nbclient runs in an ipykernel
kernel of this Python; a last cell, not the doc's, prints what the session produced as JSON.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "python.md"

# Run in the kernel after the doc's cells: what the test checks, read from the session.
CHECK_CELL = """
import json as _json
import sys as _sys
from eval import evaluate_run as _evaluate
_direct = _evaluate({"q01": task.qrels["q01"]}, {"q01": dict(result.ranking)}).per_query["q01"]
_record = run.tasks["demo"].records["q01"]
print(_json.dumps({
    "python": _sys.executable,
    "loop_running": __import__("asyncio").get_event_loop().is_running(),
    "model": result.config.llm.model,
    "error": result.error,
    "prompts_differ": set(result.prompts.values()) != set(other.prompts.values()),
    "other_prompt": other.calls[0]["messages"][-1]["content"].splitlines()[0],
    "again": [again.usage.calls, again.usage.cached_calls, again.usage.cost],
    "same_reply": again.calls[0]["output"] == result.calls[0]["output"],
    "metrics_are_the_evaluator's": result.metrics == _direct == scores.per_query["q01"],
    "run_ranking_is_the_query's": [(d, s) for d, s in _record["ranking"]] == result.ranking,
    "summary_is_the_run's": summary == run.tasks["demo"].summary,
    "summary_queries": summary.queries,
}))
"""


# A run with progress on, in the kernel: its bars must be tqdm's notebook widgets.
BARS_CELL = """
from agents import from_settings as _settings, run_dataset as _run
_run(_settings({"agent": "none", "dataset": "demo", "limit": 3, "run_name": "bars"}))
"""
WIDGET = "application/vnd.jupyter.widget-view+json"


def doc_blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", DOC.read_text(), re.DOTALL | re.MULTILINE)


def notebook(cells: list[str]):
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    return nb


def stdout_of(cell) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.get("name") == "stdout")


@pytest.mark.slow
def test_the_python_doc_runs_as_a_notebook_in_a_real_kernel(
    tmp_path: Path, models_cache: Path, monkeypatch: pytest.MonkeyPatch
):
    from jupyter_client import KernelManager
    from nbclient import NotebookClient

    monkeypatch.chdir(tmp_path)  # the override file and the run go where the reader is
    monkeypatch.setenv("R2MED_AGENTS_CACHE", str(models_cache))  # the kernel inherits it
    blocks = doc_blocks()
    assert len(blocks) == 8
    nb = notebook([*blocks, CHECK_CELL, BARS_CELL])
    # the kernel of this Python (jupyter_client starts "python" as sys.executable), over local
    # sockets rather than TCP
    kernel = KernelManager(kernel_name="python3", transport="ipc",
                           connection_file=str(tmp_path / "kernel.json"))  # fmt: skip
    client = NotebookClient(nb, km=kernel, timeout=600, resources={
        "metadata": {"path": str(tmp_path)}})  # fmt: skip
    client.execute()  # raises CellExecutionError, with the cell and its traceback, on any error

    for i, cell in enumerate(nb.cells):
        errors = [o for o in cell.outputs if o.get("output_type") == "error"]
        assert not errors, f"cell {i + 1}: {errors}"
    facts = json.loads(stdout_of(nb.cells[-2]))
    # the kernel is this Python (jupyter_client starts "python" as sys.executable), and a loop
    # ran in it all along: what asyncio.run cannot nest in
    assert Path(facts.pop("python")).resolve() == Path(sys.executable).resolve()
    assert facts.pop("loop_running") is True
    assert facts == {
        "model": "local/smollm2-135m",
        "error": None,
        "prompts_differ": True,
        "other_prompt": "Write a textbook paragraph that answers the question.",
        "again": [1, 1, 0.0],
        "same_reply": True,
        "metrics_are_the_evaluator's": True,
        "run_ranking_is_the_query's": True,
        "summary_is_the_run's": True,
        "summary_queries": 1,
    }
    # the cells print what the doc says they print: the cache cell's and the run cell's True
    assert stdout_of(nb.cells[4]).split()[-1] == "True"
    assert stdout_of(nb.cells[6]).strip() == "True"
    summary = stdout_of(nb.cells[7]).split()
    assert summary[1:] == ["1", summary[2], "agent"] and float(summary[0]) >= 0
    # run_dataset ran inside the kernel's loop, so its folder is there
    assert (tmp_path / "runs").is_dir()
    # progress in a kernel: widgets, not bars drawn as text lines on stderr
    bars = nb.cells[-1].outputs
    assert any(WIDGET in o.get("data", {}) for o in bars), bars
    assert not any("\r" in o.get("text", "") or "it/s]" in o.get("text", "") for o in bars)
