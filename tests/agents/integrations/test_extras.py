"""Each integration behind its own extra: pinned in pyproject.toml, in the test extra, never
imported until its adapter is called, and one line naming the extra when it is missing."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from eval.plumbing.extras import EXTRAS, MissingExtra, import_extra

REPO = Path(__file__).resolve().parents[3]
LIBRARIES = ("mteb", "langchain_core", "llama_index", "ir_measures", "langgraph", "datasets")
# every module an integration lives in: importing them all imports none of the libraries
MODULES = (
    "agents",
    "retrievers",
    "eval",
    "agents.integrations",
    "agents.integrations.mteb_tasks",
    "agents.integrations.mteb_search",
    "agents.integrations.mteb_encoder",
    "agents.integrations.langchain",
    "agents.integrations.llamaindex",
    "agents.execution.pipeline",
    "eval.export",
)
# extra -> the distribution each module of EXTRAS comes from
DISTRIBUTIONS = {"mteb": "mteb", "langchain_core": "langchain-core",
                 "llama_index.core": "llama-index-core", "ir_measures": "ir-measures"}  # fmt: skip


def optional_dependencies() -> dict[str, list[str]]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return project["optional-dependencies"]


def test_each_extra_pins_the_library_its_adapters_import_and_the_tests_install_all():
    extras = optional_dependencies()
    for extra, modules in EXTRAS.items():
        pins = {re.split("==", p)[0]: p for p in extras[extra]}
        assert sorted(pins) == sorted(DISTRIBUTIONS[m] for m in modules), extra
        assert all("==" in p for p in pins.values()), extras[extra]
    [test_self] = [p for p in extras["test"] if p.startswith("r2med-agents[")]
    assert set(EXTRAS) <= set(test_self.removeprefix("r2med-agents[").rstrip("]").split(","))


def test_importing_every_integration_module_imports_none_of_the_libraries():
    code = (
        f"import sys, {', '.join(MODULES)}\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {LIBRARIES!r}))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("extra", sorted(EXTRAS))
def test_a_missing_extra_is_one_line_naming_it(extra, monkeypatch):
    module = EXTRAS[extra][0]
    for name in {module, module.split(".")[0]}:  # imported before, by another test, or not
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(MissingExtra) as e:
        import_extra(module, extra, "the adapter")
    message = str(e.value)
    assert message == (f"the adapter needs {module.split('.')[0]}, which is not installed: "
                       f"pip install 'r2med-agents[{extra}]'")  # fmt: skip


def test_a_broken_library_is_its_own_error_not_a_missing_extra(tmp_path, monkeypatch):
    """Only the library itself missing means the extra is missing: a dependency of it that
    fails to import is the library's own error, shown as it is."""
    import eval.plumbing.extras as extras

    (tmp_path / "brokenlib").mkdir()
    (tmp_path / "brokenlib" / "__init__.py").write_text("import no_such_dependency_of_it\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(extras.EXTRAS, "broken", ("brokenlib",))
    with pytest.raises(ImportError) as e:
        import_extra("brokenlib", "broken", "the adapter")
    assert not isinstance(e.value, MissingExtra)
    assert e.value.name == "no_such_dependency_of_it"
