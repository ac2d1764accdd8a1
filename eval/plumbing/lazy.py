"""A package's public names loaded on first use (PEP 562), so that importing the package
loads none of the modules they live in."""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping, Sequence
from importlib import import_module
from typing import Any


def lazy_face(
    namespace: MutableMapping[str, Any], homes: Mapping[str, Sequence[str]]
) -> tuple[list[str], Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__all__``, ``__getattr__`` and ``__dir__`` of a package whose globals are
    ``namespace``, from its one table: ``homes`` maps each module to the public names defined
    there, each exported under the name it has where it is defined. A name is imported on its
    first lookup and kept in ``namespace``, so later lookups do not come back here."""
    package = namespace["__name__"]
    home = {name: module for module, names in homes.items() for name in names}
    if len(home) != sum(len(names) for names in homes.values()):
        raise ValueError(f"{package}: a public name is listed twice")

    def __getattr__(name: str) -> Any:
        if name not in home:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(home[name]), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *home})

    return list(home), __getattr__, __dir__


def load_litellm() -> Any:
    """litellm, set up as `eval.plumbing.litellm_setup` sets it up, imported on the first call:
    importing it takes seconds, and a check or a run that needs no provider never pays for it."""
    from eval.plumbing.litellm_setup import litellm

    return litellm
