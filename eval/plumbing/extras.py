"""The optional libraries behind each integration's extra, imported only when called.

`import_extra("langchain_core", "langchain", "as_langchain_retriever")` imports the module or
raises `MissingExtra`, one line naming the extra to install. The extras are pyproject.toml's
``[project.optional-dependencies]``; `EXTRAS` says which module each one brings, so a test
can check the two agree.
"""

from __future__ import annotations

import importlib
from types import ModuleType

# extra -> the modules it makes importable (pyproject.toml pins their distributions)
EXTRAS: dict[str, tuple[str, ...]] = {
    "mteb": ("mteb",),
    "langchain": ("langchain_core",),
    "llamaindex": ("llama_index.core",),
    "ir-measures": ("ir_measures",),
}


class MissingExtra(ImportError):
    """An integration called without its extra installed."""


def import_extra(module: str, extra: str, feature: str) -> ModuleType:
    """``module``, or one line: ``feature`` needs it, ``pip install 'r2med-agents[extra]'``."""
    if module not in EXTRAS.get(extra, ()):
        raise ValueError(f"{module} is not in the extra {extra!r} ({EXTRAS})")
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name is None or not module.startswith(e.name.split(".")[0]):
            raise  # the library is there but broken: its own error says more
        raise MissingExtra(
            f"{feature} needs {module.split('.')[0]}, which is not installed: "
            f"pip install 'r2med-agents[{extra}]'"
        ) from None
