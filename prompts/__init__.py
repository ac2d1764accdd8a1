"""Prompt files used by the agents; each prompt lives in a file under this folder.

A prompt is ``prompts/<name>/<variant>.txt``, where the variant is an R2MED task name, a query
kind (post, exam, case, similar-case) or ``default``. Lookup goes task -> kind -> default, so a
file exists only where the wording really differs. R2MED words its post prompts per domain
("Biology post", "Medical Science post", ...), so those exist per task and need ``task=``.

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

Placeholders are plain ``str.format`` fields, ``{name}``: ``{query}`` everywhere, ``{docs}`` for
LameR (see `format_docs`) and ``{examples}`` for query2doc (its few-shot examples, which R2MED's
public code does not include). Every file, built-in or override, is checked when it is read
(`check_placeholders`): its fields must be plain names (no conversion, format spec, attribute or
index), the placeholders a prompt may use and must use are derived from the built-in files of
its family (see `placeholder_rules`), and it is rendered once with stand-in values of the types
the agents pass. So an override that drops ``{query}``, names a placeholder no agent fills or
cannot be rendered is refused at start-up instead of sending one text for every query, or
failing each query mid-run.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import string
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from eval.datasets import R2MED_TASKS, TASK_KINDS, r2med_task_name, task_kind

PROMPTS_DIR = Path(__file__).resolve().parent
DEFAULT = "default"
LAMER_TOP_K = 10  # R2MED's LameR shows the BM25 top-10
# Variants that select a family's main prompt by task or query kind; any other built-in variant
# (search-o1/documents, search-r1/chat, ...) is a helper prompt, a family of its own.
MAIN_VARIANTS = frozenset({DEFAULT, *TASK_KINDS, *R2MED_TASKS})
# Values that are one constant for a whole run may be left out of a prompt: every query still
# gets its own text (docs/sweep-scifact.toml's zero-shot "textbook" query2doc prompt drops
# {examples}; the agent enforces max_searches whether or not the model is told). A per-query
# input ({query}, {docs}, {documents}, {observation}, ...) may not: what the agent computed
# would silently never reach the model.
RUN_CONSTANTS = frozenset({"examples", "max_searches"})
# What the agents fill placeholders with (every `render(` call under agents/): these are ints
# (counts and 1-based ranks); every other value is text, already formatted (InsertRank's
# {score} is "0.8123", not a float). A file is rendered once with such stand-ins when read.
INT_PLACEHOLDERS = frozenset({"max_searches", "num", "rank"})


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
        missing = [p for p in self.placeholders if _field_root(p) not in values]
        if missing:
            raise PromptError(
                f"prompt {self.name} needs a value for placeholder(s) "
                f"{', '.join('{' + p + '}' for p in missing)} ({self.path})"
            )
        try:
            return self.text.format(**values)
        except (KeyError, IndexError, ValueError, AttributeError, TypeError) as exc:
            raise PromptError(f"cannot render prompt {self.name} ({self.path}): {exc}") from exc


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
    task = _canonical_task(task) if task else None
    if task and kind == DEFAULT:
        kind = task_kind(task)
    variants = list(dict.fromkeys(v for v in (task, kind, DEFAULT) if v))

    key = override_key(name, kind, overrides, task=task)
    if key is not None:
        resolved = key if "/" in key else f"{name}/{variants[0]}"
        return _read(resolved, Path(overrides[key]))
    for variant in variants:
        path = PROMPTS_DIR / name / f"{variant}.txt"
        if path.is_file():
            return _read(f"{name}/{variant}", path)

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
    task = _canonical_task(task) if task else None
    if task and kind == DEFAULT:
        kind = task_kind(task)
    variants = [v for v in dict.fromkeys((task, kind)) if v and v != DEFAULT]
    keys = [f"{name}/{v}" for v in variants] + [name, f"{name}/{DEFAULT}"]
    return next((k for k in keys if k in overrides), None)


def prompt_names() -> list[str]:
    """Every built-in prompt as "name/variant", e.g. "hyde/exam"."""
    return sorted(f"{p.parent.name}/{p.stem}" for p in PROMPTS_DIR.glob("*/*.txt"))


@dataclass(frozen=True)
class PlaceholderRule:
    """What the prompts of one family may and must use, derived from its built-in files."""

    family: str
    allowed: frozenset[str]  # the union of the built-ins' placeholders
    required: frozenset[str]  # their intersection, less `RUN_CONSTANTS`
    builtins: tuple[str, ...]  # the files it was derived from, as "name/variant"


def prompt_family(name: str) -> str:
    """The family whose rule applies to prompt ``name`` ("hyde", "hyde/exam", "hyde/scifact").

    A helper prompt such as "search-o1/documents" is its own family; any other variant, built-in
    or not (an override resolved for a task outside R2MED), belongs to the main prompt.
    """
    family, _, variant = name.partition("/")
    if variant and variant not in MAIN_VARIANTS and name in _builtin_names():
        return name
    return family


@functools.cache
def placeholder_rules() -> dict[str, PlaceholderRule]:
    """The placeholder rule of every prompt family, from the built-in files (read once)."""
    groups: dict[str, dict[str, frozenset[str]]] = {}
    for name in prompt_names():
        path = PROMPTS_DIR / f"{name}.txt"
        fields = frozenset(_checked_fields(name, path, _decode(name, path)))
        groups.setdefault(prompt_family(name), {})[name] = fields
    return {
        family: PlaceholderRule(
            family,
            frozenset().union(*members.values()),
            frozenset.intersection(*members.values()) - RUN_CONSTANTS,
            tuple(members),
        )
        for family, members in groups.items()
    }


def check_placeholders(prompt: Prompt) -> None:
    """Raise PromptError (one line naming the file and the field) unless ``prompt`` renders as
    the agents will render it: plain ``{name}`` fields only, none its family does not fill,
    none missing that it needs, and a render with stand-in values that succeeds. A family
    without built-ins has no rule: any plain field passes, and the render is still tried."""
    _checked_fields(prompt.name, prompt.path, prompt.text)
    rule = placeholder_rules().get(prompt_family(prompt.name))
    if rule is not None:
        _check_rule(prompt, rule)
    fields = rule.allowed if rule is not None else prompt.placeholders
    prompt.render(**stand_in_values(fields))  # what every query will do, done once now


def stand_in_values(fields: Iterable[str]) -> dict[str, object]:
    """A value of the type the agents pass for each placeholder (see `INT_PLACEHOLDERS`)."""
    return {f: 1 if f in INT_PLACEHOLDERS else "x" for f in fields}


def _check_rule(prompt: Prompt, rule: PlaceholderRule) -> None:
    unknown = [f for f in prompt.placeholders if f not in rule.allowed]
    if unknown:
        takes = _braced(sorted(rule.allowed)) if rule.allowed else "none"
        raise PromptError(
            f"prompt {prompt.name} ({prompt.path}) has unknown placeholder(s) {_braced(unknown)}; "
            f"{rule.family} prompts take: {takes} ({_ESCAPE_HINT})"
        )
    missing = sorted(rule.required - set(prompt.placeholders))
    if missing:
        raise PromptError(
            f"prompt {prompt.name} ({prompt.path}) lacks placeholder(s) {_braced(missing)}, "
            f"which every built-in {rule.family} prompt uses: without it the value the agent "
            "passes never reaches the model"
        )


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
            variant = _canonical_task(variant)
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
        _read(key, path)
        overrides[key] = path
    return overrides


LAMER_DOC_TEMPLATE = "\n[{i}]. {text}"


def format_docs(texts: list[str], max_words: int = 512, template: str = LAMER_DOC_TEMPLATE) -> str:
    """Number documents for a prompt: each text has its whitespace collapsed to single spaces
    and is cut to ``max_words`` words, then fills ``template`` ({i} 1-based, {text}).

    The default template is LameR's ``{docs}`` exactly as R2MED builds it: ``"\\n[i]. text"``,
    so the prompt's "Possible Relevant Passages: {docs}" puts the list on the next line. Pass
    the first-stage top-10 (`LAMER_TOP_K`); this function does not cut the list.
    """
    if max_words < 1:
        raise ValueError(f"max_words must be positive, got {max_words}")
    return "".join(
        template.format(i=i, text=" ".join(text.split()[:max_words]))
        for i, text in enumerate(texts, 1)
    )


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


def _read(name: str, path: Path) -> Prompt:
    text = _decode(name, path)
    prompt = Prompt(name, text, hashlib.sha256(text.encode("utf-8")).hexdigest(), path)
    # Check it now, so a broken override fails at startup rather than on every query.
    check_placeholders(prompt)
    return prompt


def _decode(name: str, path: Path) -> str:
    # Bytes, not read_text(): universal-newline decoding would change the text and its hash.
    try:
        text = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PromptError(f"cannot read prompt {name} from {path}: {exc}") from exc
    return text.removeprefix("\ufeff")


_ESCAPE_HINT = "write {{ and }} for literal braces"


def _checked_fields(name: str, path: Path, text: str) -> list[str]:
    """The text's format fields, or PromptError for a field that is not a plain ``{name}``."""
    try:
        parsed = [(f, c, s) for _, f, s, c in string.Formatter().parse(text) if f is not None]
    except ValueError as exc:  # a lone "{" or "}"
        raise PromptError(f"prompt {name} ({path}) is malformed: {exc} ({_ESCAPE_HINT})") from exc
    for field, conversion, spec in parsed:
        if not field or _field_root(field).isdigit():
            raise PromptError(
                f"prompt {name} ({path}) has a positional placeholder; use named ones such as "
                "{query}"
            )
        if conversion is not None or spec or not field.isidentifier():
            written = _as_written(field, conversion, spec)
            raise PromptError(
                f"prompt {name} ({path}) has placeholder {written}{_render_failure(written)}: "
                "only plain {name} fields are filled (no conversion, format spec, attribute or "
                f"index; {_ESCAPE_HINT})"
            )
    return list(dict.fromkeys(f for f, _, _ in parsed))


def _as_written(field: str, conversion: str | None, spec: str) -> str:
    """A format field as the file spells it: "{query!r:>5}"."""
    converted = f"{field}!{conversion}" if conversion else field
    return "{" + (f"{converted}:{spec}" if spec else converted) + "}"


def _render_failure(field: str) -> str:
    """Why ``field`` (as written, e.g. "{query:d}") fails on a stand-in value, or ""."""
    (_, name, _, _), *_ = string.Formatter().parse(field)
    try:
        field.format(**stand_in_values([_field_root(name or "")]))
    except (KeyError, IndexError, ValueError, AttributeError, TypeError) as exc:
        return f", which fails to render ({type(exc).__name__}: {exc})"
    return ""


def _braced(fields: list[str]) -> str:
    return ", ".join("{" + f + "}" for f in fields)


@functools.cache
def _builtin_names() -> frozenset[str]:
    return frozenset(prompt_names())


def _field_root(field: str) -> str:
    """The argument name of a format field: "query" for "query", "doc.title" or "docs[0]"."""
    return field.split(".")[0].split("[")[0]


def _canonical_task(task: str) -> str:
    """R2MED's spelling of an R2MED task name; other names are returned unchanged."""
    return r2med_task_name(task) or task
