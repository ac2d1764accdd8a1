"""A package's public names loaded on first use (PEP 562), so that importing the package
loads none of the modules they live in."""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping, Sequence
from importlib import import_module
from typing import Any


def lazy_exports(
    namespace: MutableMapping[str, Any],
    exports: Mapping[str, tuple[str, str]],
    names: Sequence[str],
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of a package whose globals are ``namespace``:
    ``exports`` maps each public name to (module, its name there); a name is imported on its
    first lookup and kept in ``namespace``, so later lookups do not come back here."""
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, attr = exports[name]
        value = getattr(import_module(module), attr)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *names})

    return __getattr__, __dir__
