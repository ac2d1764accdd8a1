"""A prompt file: the folder the built-ins live in, how one is read, and the `Prompt` it becomes.

One escape rule holds for every file, main prompt, helper, system prompt, tool description or
few-shot examples alike: what is sent is what ``str.format`` makes of the file (`Prompt.render`;
a file without placeholders is rendered with no values). So ``{{`` and ``}}`` are a literal
``{`` and ``}`` everywhere, and a lone brace is refused. Only GroupRank's user prompt holds
doubled braces (its JSON example: its original is a ``str.format`` template too), so each file
renders to its own bytes, those braces single: no header, no added final newline, and the
trailing space after "Passage:" is R2MED's.

``Prompt.sha256`` is of the template, before rendering: the ``sha256sum`` of the file, with one
exception: a UTF-8 byte-order mark at the start (which some editors write) is stripped on read,
because it would otherwise reach the model as text. One hash per prompt thus names every text
the prompt renders to (a per-query text has no single hash), and a file can be checked against
a run's record with ``sha256sum``. Where each text comes from is recorded in
``prompts/SOURCES.md``.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from pathlib import Path

PROMPTS_DIR = Path(__file__).resolve().parent
DEFAULT = "default"


class PromptError(ValueError):
    """A prompt cannot be found, read or rendered; the message names the prompt."""


@dataclass(frozen=True)
class Prompt:
    name: str  # e.g. "hyde/exam"
    text: str  # the template, as in the file: send `render()`, never this
    sha256: str  # of the template (before rendering), recorded in every run
    path: Path

    @property
    def placeholders(self) -> tuple[str, ...]:
        """The ``str.format`` fields the text needs, in order of first use."""
        fields = (f for _, f, _, _ in string.Formatter().parse(self.text) if f is not None)
        return tuple(dict.fromkeys(fields))

    def render(self, **values: object) -> str:
        """The text to send: the placeholders filled and ``{{``/``}}`` made single braces.

        Values the text does not use are ignored; a file without placeholders takes none, and
        is rendered all the same, so that one escape rule holds for every file."""
        missing = [p for p in self.placeholders if field_root(p) not in values]
        if missing:
            raise PromptError(
                f"prompt {self.name} needs a value for placeholder(s) "
                f"{', '.join('{' + p + '}' for p in missing)} ({self.path})"
            )
        try:
            return self.text.format(**values)
        except (KeyError, IndexError, ValueError, AttributeError, TypeError) as exc:
            raise PromptError(f"cannot render prompt {self.name} ({self.path}): {exc}") from exc


def prompt_names() -> list[str]:
    """Every built-in prompt as "name/variant", e.g. "hyde/exam"."""
    return sorted(f"{p.parent.name}/{p.stem}" for p in PROMPTS_DIR.glob("*/*.txt"))


def builtin_path(name: str, variant: str | None = None) -> Path:
    """Where the built-in file of prompt ``name`` ("hyde/exam") would be; with ``variant``,
    of that variant of family ``name``. `PROMPTS_DIR` is read here and in `prompt_names` only."""
    if variant is None:
        return PROMPTS_DIR / f"{name}.txt"
    return PROMPTS_DIR / name / f"{variant}.txt"


def decode_prompt(name: str, path: Path) -> str:
    """The text of a prompt file, its byte-order mark stripped, or PromptError naming it."""
    # Bytes, not read_text(): universal-newline decoding would change the text and its hash.
    try:
        text = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PromptError(f"cannot read prompt {name} from {path}: {exc}") from exc
    return text.removeprefix("\ufeff")


def field_root(field: str) -> str:
    """The argument name of a format field: "query" for "query", "doc.title" or "docs[0]"."""
    return field.split(".")[0].split("[")[0]
