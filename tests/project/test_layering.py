"""The house's layering rule, read from the code's own imports (docs/architecture.md).

Floors, lowest first, one per folder; a module imports only from its own floor or lower, never
in a circle, and never another module's private name (``from m import _x`` or ``m._x``):

0. eval/plumbing/ - files, retries, checked numbers, flags, the error ladder, lazy faces, secrets
1. eval/ - benchmark data, scoring and results; knows no agent, stage or config shape
2. retrievers/, prompts/ - indexes and search; the prompt files and their loader
3. agents/llm/ (the client; llm/embedded/ the llama.cpp models), agents/shared/ (specs, replayed
   generations, Ctrl-C)
4. agents/graphs/, agents/rerank/ - one module per agent or stage
5. agents/config/ - the typed run configuration, its flags, config.json, naming, the registry
6. agents/execution/ - plan, the whole run, a task's queries, one query, a pipeline, dry run,
   Ray; agents/integrations/ (MTEB, LangChain, LlamaIndex over a pipeline); and the package
   face agents/__init__
7. agents/commands/ - every command line; agents/run.py, sweep.py, trace.py and
   rerank/__main__.py are the two-line shims that keep ``python -m agents.run`` & co.

A command line of a lower package is on its package's floor: retrievers.serve.__main__ builds
its flags from retrievers.flags, not agents.config.settings.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("eval", "retrievers", "prompts", "agents")
FLOORS = {  # the longest matching prefix decides; a folder is on one floor
    "eval.plumbing": 0,
    "eval": 1,
    "retrievers": 2,
    "prompts": 2,
    "agents.llm": 3,
    "agents.shared": 3,
    "agents.graphs": 4,
    "agents.rerank": 4,
    "agents.config": 5,
    "agents.execution": 6,
    "agents.integrations": 6,
    "agents": 6,
    "agents.commands": 7,
    "agents.run": 7,
    "agents.sweep": 7,
    "agents.trace": 7,
    "agents.rerank.__main__": 7,
}


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            name = ".".join(path.relative_to(REPO).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


def floor(module: str) -> int:
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in FLOORS:
            return FLOORS[".".join(parts[:n])]
    raise AssertionError(f"{module}: on no floor; add it to FLOORS")


def imports(mods: dict[str, Path]) -> tuple[dict[str, set[str]], list[str]]:
    """module -> the project modules it imports (TYPE_CHECKING ones too); private names."""
    edges: dict[str, set[str]] = defaultdict(set)
    private: list[str] = []
    for name, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        aliases: dict[str, str] = {}  # local name -> the project module it stands for
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, *([base] if base else [])])
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    target = full if full in mods else base
                    if target not in mods or target == name:
                        continue
                    edges[name].add(target)
                    if full in mods:
                        aliases[alias.asname or alias.name] = full
                    elif alias.name.startswith("_") and not alias.name.startswith("__"):
                        private.append(f"{name} imports {full}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in mods and alias.name != name:
                        edges[name].add(alias.name)
                        if alias.asname:
                            aliases[alias.asname] = alias.name
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in aliases
                and node.attr.startswith("_")
                and not node.attr.startswith("__")
            ):
                private.append(f"{name} uses {aliases[node.value.id]}.{node.attr}")
    return edges, private


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


MODS = modules()
EDGES, PRIVATE = imports(MODS)


def test_every_module_is_on_a_floor() -> None:
    for name in MODS:
        floor(name)


def test_no_import_runs_upward() -> None:
    upward = [
        f"{a} (floor {floor(a)}) imports {b} (floor {floor(b)})"
        for a in sorted(EDGES)
        for b in sorted(EDGES[a])
        if floor(b) > floor(a)
    ]
    assert upward == []


def test_no_import_circles() -> None:
    assert circles(EDGES) == []


def test_no_private_name_crosses_a_module() -> None:
    assert PRIVATE == []


def test_the_checks_catch_what_they_are_for() -> None:
    """The rule's own test: a planted circle, upward import and private name are found."""
    planted = {"eval.a": {"eval.b"}, "eval.b": {"eval.a"}, "eval.c": {"agents.run"}}
    assert circles(planted) == [["eval.a", "eval.b"]]
    assert floor("eval.c") < floor("agents.run")
    assert floor("agents.rerank.__main__") == 7 and floor("agents.rerank.cross") == 4
    assert floor("eval.plumbing.files") < floor("eval.runs") < floor("retrievers.bm25")
    assert (
        floor("agents.config.naming")
        < floor("agents.execution.plan")
        < floor("agents.commands.run")
    )
