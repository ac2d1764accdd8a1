"""The prompt loader: a prompt by name for a task or query kind, overrides first, and the
`PromptBook` that hands an agent its prompts and records each one's hash.

Lookup goes task -> kind -> default (``prompts/<name>/<variant>.txt``), so a file exists only
where the wording really differs; an override given for the same name wins. Every file read is
checked against its family's placeholder rule (`prompts.placeholders`).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

from eval.datasets.vocabulary import r2med_task_name, task_kind
from prompts.files import DEFAULT, Prompt, PromptError, builtin_path, decode_prompt, prompt_names
from prompts.placeholders import check_placeholders


def load_prompt(
    name: str,
    kind: str = DEFAULT,
    overrides: Mapping[str, Path] | None = None,
    *,
    task: str | None = None,
) -> Prompt:
    """The prompt ``name`` for a task and/or query kind.

    Lookup order: overrides for "name/task", "name/kind", "name"; then the files
    ``name/<task>.txt``, ``name/<kind>.txt``, ``name/default.txt``. With ``task`` given and
    ``kind`` left at "default", the kind is the task's (e.g. "exam" for MedQA-Diag).
    """
    overrides = overrides or {}
    task = canonical_task(task) if task else None
    if task and kind == DEFAULT:
        kind = task_kind(task)
    variants = list(dict.fromkeys(v for v in (task, kind, DEFAULT) if v))

    key = override_key(name, kind, overrides, task=task)
    if key is not None:
        resolved = key if "/" in key else f"{name}/{variants[0]}"
        return read_prompt(resolved, Path(overrides[key]))
    for variant in variants:
        path = builtin_path(name, variant)
        if path.is_file():
            return read_prompt(f"{name}/{variant}", path)

    looked = ", ".join(f"{name}/{v}.txt" for v in variants)
    have = [n for n in prompt_names() if n.split("/")[0] == name]
    hint = (
        f"; available: {', '.join(have)} (pass task= for per-task prompts)"
        if have
        else f"; known prompts: {', '.join(sorted({n.split('/')[0] for n in prompt_names()}))}"
    )
    raise PromptError(f"no prompt {name!r} for {task or kind!r}: looked for {looked}{hint}")


def override_key(
    name: str, kind: str = DEFAULT, overrides: Collection[str] = (), *, task: str | None = None
) -> str | None:
    """The key of ``overrides`` that `load_prompt` would read for these arguments, or None."""
    task = canonical_task(task) if task else None
    if task and kind == DEFAULT:
        kind = task_kind(task)
    variants = [v for v in dict.fromkeys((task, kind)) if v and v != DEFAULT]
    keys = [f"{name}/{v}" for v in variants] + [name, f"{name}/{DEFAULT}"]
    return next((k for k in keys if k in overrides), None)


@dataclass
class PromptBook:
    """Hands an agent its prompts for one task, and records each one it hands out.

    ``get("hyde")`` resolves a family for the task (task -> kind -> default, overrides
    first); ``get("search-o1", "documents")`` is a fixed file of a family, which only its own
    override ("search-o1/documents=...") replaces, since a family-wide override is meant for
    the agent's main prompt. ``used`` maps every prompt handed out to the sha256 of its
    template, which is what a run records: there is no second copy of these rules.
    ``overrides_read`` holds the override keys those prompts came from: an override outside
    it was given for a prompt nothing asked this book for.
    """

    overrides: Mapping[str, Path] = dataclasses.field(default_factory=dict)
    task: str | None = None
    used: dict[str, str] = dataclasses.field(default_factory=dict)
    overrides_read: set[str] = dataclasses.field(default_factory=set)
    # each prompt is read once: whoever asks again gets the very text that was hashed
    _loaded: dict[tuple[str, str | None], Prompt] = dataclasses.field(default_factory=dict)

    def get(self, family: str, variant: str | None = None) -> Prompt:
        prompt = self._loaded.get((family, variant))
        if prompt is None:
            if variant is None:
                key = override_key(family, overrides=self.overrides, task=self.task)
                prompt = load_prompt(family, overrides=self.overrides, task=self.task)
            else:
                key = f"{family}/{variant}"
                own = {k: v for k, v in self.overrides.items() if k == key}
                prompt = load_prompt(family, variant, own)
                key = key if own else None
            self._loaded[(family, variant)] = prompt
            if key is not None:
                self.overrides_read.add(key)
        self.used[prompt.name] = prompt.sha256
        return prompt


def read_prompt(name: str, path: Path) -> Prompt:
    """The prompt in ``path``, named ``name``, hashed and checked against its family's rule."""
    text = decode_prompt(name, path)
    prompt = Prompt(name, text, hashlib.sha256(text.encode("utf-8")).hexdigest(), path)
    # Check it now, so a broken override fails at startup rather than on every query.
    check_placeholders(prompt)
    return prompt


def canonical_task(task: str) -> str:
    """R2MED's spelling of an R2MED task name; other names are returned unchanged."""
    return r2med_task_name(task) or task
