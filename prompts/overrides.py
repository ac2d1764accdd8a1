"""Prompt overrides: ``--prompt NAME=path`` values parsed, checked and read before any work."""

from __future__ import annotations

from pathlib import Path

from eval.datasets.vocabulary import TASK_KINDS
from prompts.files import PromptError, prompt_names
from prompts.loader import canonical_task, read_prompt
from prompts.placeholders import MAIN_VARIANTS, prompt_family


def parse_prompt_overrides(specs: list[str]) -> dict[str, Path]:
    """Parse ``--prompt NAME=path`` values, e.g. "hyde/exam=my.txt" or "hyde=my.txt"."""
    names = prompt_names()
    families = {n.split("/")[0] for n in names}
    overrides: dict[str, Path] = {}
    for spec in specs:
        key, sep, raw_path = spec.partition("=")
        key, raw_path = key.strip(), raw_path.strip()
        if not sep or not key or not raw_path:
            raise PromptError(f"bad prompt override {spec!r}: expected NAME=path, e.g. hyde=my.txt")
        family, _, variant = key.partition("/")
        if family not in families:
            raise PromptError(
                f"bad prompt override {spec!r}: unknown prompt {family!r}; "
                f"known: {', '.join(sorted(families))}"
            )
        if "/" in key:
            variant = canonical_task(variant)
            # A helper variant of another family ("hyde/chat") would never be loaded.
            if variant not in MAIN_VARIANTS and f"{family}/{variant}" not in names:
                own = [n for n in names if n.startswith(f"{family}/") and n == prompt_family(n)]
                raise PromptError(
                    f"bad prompt override {spec!r}: {variant!r} is not a kind "
                    f"({', '.join(TASK_KINDS)}), an R2MED task, 'default' or a helper prompt "
                    f"of {family} ({', '.join(own) if own else 'it has none'})"
                )
            key = f"{family}/{variant}"
        if key in overrides:
            raise PromptError(f"prompt override {key!r} is given twice")
        path = Path(raw_path).expanduser()
        if not path.is_file():
            raise PromptError(f"prompt override {key!r}: no such file {str(path)!r}")
        # Read and check it now, the first time the file is seen: a bad override is refused
        # before any dataset or model work. "hyde" (every variant) takes the family's rule.
        read_prompt(key, path)
        overrides[key] = path
    return overrides
