"""Where generated texts come from when no model writes them (``--generations``).

An agent that ends in one generated text per query (``hyde``, ``query2doc``, ``lamer``,
``reason``, and the trajectories of ``search-o1`` and ``search-r1``) normally asks an LLM for
it. With a generation source it reads that text instead, and everything after generation (the
combination rule of each retriever, how a reasoning model's response is read, ranking,
evaluation) is unchanged. Sources, parsed and checked once with the config:

* ``r2med:<llm>``: R2MED's released generations on the Hugging Face hub, repo ``R2MED/<Task>``,
  file ``<method>/<llm>/query_with_hydoc.jsonl`` (method = the agent: hyde, query2doc, lamer,
  search-o1, search-r1; R2MED stored its Search-o1 and Search-R1 outputs in the same layout);
* ``r2med:<llm>@<folder>``: the same files in a local folder, ``<folder>/<Task>/<method>/<llm>/
  query_with_hydoc.jsonl`` (or ``<folder>/<method>/<llm>/...`` for a single-task folder);
* ``<file>.jsonl``: one file of ``{"id", "hy_doc"}`` lines, used for every task;
* ``<run folder>``: a run of ours by one of those agents; each task's ``queries.jsonl`` gives
  ``generated["passage"]`` per query.

Which model wrote the texts decides how they are read (`agents.llm.text`): R2MED's short name
for ``r2med:<llm>`` (so its reasoning models are read as R2MED reads them), the source run's
model for a run folder, and none for a plain file (``--reasoning`` names the family).

Leak guard: R2MED's files also carry ``doc_id`` (the gold documents) and ``answer``. Each line
is parsed and only ``id -> hy_doc`` is kept; nothing else of a file outlives its parsing, so
nothing but the generated text can reach an agent.

Edges, said before any query runs: an id given twice keeps its last text, as a corpus's
duplicate ids do, and is warned about (file, line, id); queries without a text and queries
whose text is blank are counted on one line (`missing_line`) and in the task's summary
(`describe`), since both are searched as something other than a generated text.
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eval import runs
from eval.datasets import R2MED_REVISIONS, DataError, r2med_task_name, read_id_texts

R2MED_PREFIX = "r2med:"
# the methods R2MED released generations for (its results/gar/<method> rows)
R2MED_METHODS = ("hyde", "query2doc", "lamer", "search-o1", "search-r1")
GENERATE_AGENTS = (*R2MED_METHODS, "reason")  # agents that can replay a source
R2MED_FILE = "query_with_hydoc.jsonl"
OFFLINE_HINT = "set HF_HUB_OFFLINE=1 to fail at once instead of retrying"
SOURCE_FORMS = 'a .jsonl file of {"id", "hy_doc"} lines, a run folder, or r2med:<llm>[@<folder>]'

log = logging.getLogger("agents.shared.generations")
# files already warned about (path, sha256): a .jsonl source is read once per task
_warned: set[tuple[str, str]] = set()


@dataclass(frozen=True)
class SourceSpec:
    """A parsed ``--generations`` value."""

    kind: str  # "r2med" (hub), "r2med-folder", "file" or "run"
    text: str  # as given
    llm: str = ""  # r2med kinds: the generating model's name in R2MED's layout
    path: Path | None = None  # r2med-folder, file, run

    @property
    def label(self) -> str:
        """How runs name the source: ``r2med:o3-mini``, ``r2med:o3-mini@<folder name>``,
        ``file:<file stem>`` or ``run:<run folder name>``."""
        if self.kind in ("r2med", "r2med-folder"):
            folder = self.path.name if self.path is not None else ""
            return f"{R2MED_PREFIX}{self.llm}" + (f"@{folder}" if folder else "")
        assert self.path is not None
        if self.kind == "file":
            return f"file:{self.path.stem}"
        return f"run:{self.path.resolve().name or self.path}"


@dataclass(frozen=True)
class Generations:
    """One task's generated texts: query id -> the text as written (``<think>`` part kept)."""

    label: str  # how runs name the source ("r2med:o3-mini")
    path: Path  # the file read
    sha256: str  # of that file's bytes: binds the run folder
    texts: dict[str, str]
    model: str | None = None  # who wrote them (R2MED's short name, or a run's model), if known

    @property
    def r2med(self) -> bool:
        """Whether these are R2MED's own released texts (``r2med:`` sources), which are searched
        as R2MED searched them, an empty one included (`agents.graphs.combine.falls_back`)."""
        return self.label.startswith(R2MED_PREFIX)


def parse_source(text: str, agent: str) -> SourceSpec:
    """``text`` as a source for ``agent``; ValueError (one line, no prefix) when unusable."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(
            "expected r2med:<llm>, r2med:<llm>@<folder>, a .jsonl file or a run folder"
        )
    text = text.strip()
    if agent not in GENERATE_AGENTS:
        raise ValueError(
            f"agent {agent!r} generates no single text per query; a generation source is for "
            f"{', '.join(GENERATE_AGENTS)}"
        )
    if text.lower().startswith(R2MED_PREFIX):
        llm, at, folder = text[len(R2MED_PREFIX) :].partition("@")
        llm = llm.strip()
        if not llm or "/" in llm or "\\" in llm or llm in (".", ".."):
            raise ValueError("expected r2med:<llm> with <llm> one folder name (e.g. o3-mini)")
        if agent not in R2MED_METHODS:
            raise ValueError(
                f"R2MED released generations for {', '.join(R2MED_METHODS)}, not {agent!r}; "
                "give a .jsonl file or a run folder instead"
            )
        if at:
            if not folder.strip():
                raise ValueError("expected r2med:<llm>@<folder>, got no folder")
            return SourceSpec("r2med-folder", text, llm, Path(folder.strip()).expanduser())
        return SourceSpec("r2med", text, llm)
    path = Path(text).expanduser()
    return SourceSpec("file" if path.suffix == ".jsonl" else "run", text, path=path)


# --- reading -------------------------------------------------------------------------------


def read_generation_file(path: Path, label: str, model: str | None = None) -> Generations:
    """``id -> hy_doc`` of a JSONL file, and the file's sha256; nothing else is kept."""
    if path.is_dir():
        raise DataError(f"{path}: a folder, not a .jsonl file (generations {label})")
    if not path.is_file():
        raise DataError(f"{path}: no such file (generations {label})")
    texts = read_id_texts(path, "id", "hy_doc")  # every line checked; the last text of an id kept
    sha256 = _sha256(path)
    if (str(path), sha256) not in _warned:
        _warned.add((str(path), sha256))
        line = duplicate_line(path)
        if line:
            log.warning("%s", line)
    return Generations(label, path, sha256, texts, model)


def duplicate_line(path: Path) -> str:
    """One line on the ids ``path`` gives more than once (its first repeat named by line), or
    "". Read after `read_id_texts` has checked every line, so each line parses."""
    data = path.read_bytes().removeprefix(b"\xef\xbb\xbf")
    first: dict[str, int] = {}
    repeats: list[tuple[int, str]] = []
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        query_id = str(json.loads(raw)["id"])
        if query_id in first:
            repeats.append((number, query_id))
        else:
            first[query_id] = number
    if not repeats:
        return ""
    number, query_id = repeats[0]
    more = len({q for _, q in repeats}) - 1
    others = f"; {more} more ids repeat" if more else ""
    return (
        f"{path} line {number}: duplicate id {query_id!r} (first on line {first[query_id]}); "
        f"the last text of each id is kept{others}"
    )


def read_run_generations(run_dir: Path, folder: str, label: str) -> Generations:
    """The texts a run of ours generated for one task folder (as written: R2MED's rules read
    them again, for the model the source run recorded)."""
    run = runs.RunFolder(run_dir)
    task = run.task(folder)
    path = task.records_path
    if not path.is_file():
        raise DataError(f"{path}: no such file (the source run has no finished task {folder!r})")
    texts = {}
    for query_id, record in task.records(fields=("generated", "error")).items():
        passage = (record.get("generated") or {}).get("passage")
        if not record.get("error") and isinstance(passage, str):
            texts[query_id] = passage
    llm = run.config().get("llm") or {}
    return Generations(label, path, _sha256(path), texts, llm.get("model"))


def check_run_source(run_dir: Path) -> None:
    """Refuse a folder that is not a run of an agent that writes one text per query."""
    if run_dir.is_file():  # not named .jsonl, so not read as lines: say what it is taken for
        raise DataError(
            f"{run_dir}: a file not named .jsonl, so no generation source; give {SOURCE_FORMS}"
        )
    if not run_dir.exists():
        raise DataError(f"{run_dir}: no such file or folder; give {SOURCE_FORMS}")
    try:
        config = runs.RunFolder(run_dir).config()
    except FileNotFoundError:
        raise DataError(
            f"{run_dir}: neither a .jsonl file nor a run folder (no {runs.CONFIG_FILE}); for "
            "R2MED's layout give r2med:<llm>@<folder>"
        ) from None
    agent = config.get("agent")
    if agent not in GENERATE_AGENTS:
        raise DataError(
            f"{runs.RunFolder(run_dir).config_path}: agent {agent!r} writes no text to replay "
            f"(a source run must be one of {', '.join(GENERATE_AGENTS)})"
        )


def load_generations(
    spec: SourceSpec, method: str, task: str, folder: str, cache_dir: Path
) -> Generations:
    """One task's generations from ``spec``: ``task`` is its name, ``folder`` its run folder."""
    if spec.kind == "file":
        assert spec.path is not None
        return read_generation_file(spec.path, spec.label)
    if spec.kind == "run":
        assert spec.path is not None
        check_run_source(spec.path)
        return read_run_generations(spec.path, folder, spec.label)
    if spec.kind == "r2med-folder":
        assert spec.path is not None
        path = local_r2med_file(spec.path, task, method, spec.llm)
    else:
        path = fetch_r2med_generations(task, method, spec.llm, cache_dir)
    return read_generation_file(path, spec.label, spec.llm)


def local_r2med_file(folder: Path, task: str, method: str, llm: str) -> Path:
    """``<folder>/<Task>/<method>/<llm>/query_with_hydoc.jsonl``, else the single-task form."""
    if not folder.is_dir():
        raise DataError(f"{folder}: not a folder (generations r2med:{llm}@<folder>)")
    name = r2med_task_name(task) or task
    inner = Path(method, llm, R2MED_FILE)
    for candidate in (folder / name / inner, folder / inner):
        if candidate.is_file():
            return candidate
    raise DataError(
        f"{folder}: no {name}/{inner.as_posix()} (or {inner.as_posix()} for a single-task folder)"
    )


def fetch_r2med_generations(task: str, method: str, llm: str, cache_dir: Path) -> Path:
    """R2MED's released generation file for one task, from the hub cache or the hub."""
    canonical = r2med_task_name(task)
    filename = f"{method}/{llm}/{R2MED_FILE}"
    if canonical is None:
        raise DataError(
            f"task {task!r} is not an R2MED task, so R2MED released no generations for it; give "
            f"r2med:{llm}@<folder> with {task}/{filename} in it"
        )
    from huggingface_hub import hf_hub_download  # here: only a hub source pays for it

    repo_id = f"R2MED/{canonical}"
    # The task data's pinned revision first, then main: the generation files may have been
    # added to the repos after the commits mteb pins, and which commit holds them is not known
    # here. What binds a run is the sha256 of the file actually read, not the revision.
    revisions = (R2MED_REVISIONS[canonical], "main")
    last: Exception | None = None
    for local_only in (True, False):  # offline first: a cached file costs no request
        for revision in revisions:
            try:
                return Path(
                    hf_hub_download(
                        repo_id, filename, repo_type="dataset", revision=revision,
                        cache_dir=Path(cache_dir) / "hf", local_files_only=local_only,
                    )
                )  # fmt: skip
            except Exception as err:  # not cached, offline, missing file: try the next
                last = err
    raise DataError(
        f"cannot download {repo_id} {filename} ({type(last).__name__}; offline?): put the file "
        f"at <folder>/{canonical}/{filename} and pass --generations r2med:{llm}@<folder> "
        f"({OFFLINE_HINT})"
    )


def blank_ids(gens: Generations, query_ids: list[str]) -> list[str]:
    """The queries whose text is empty or only whitespace: nothing generated to search."""
    return [q for q in query_ids if q in gens.texts and not gens.texts[q].strip()]


def missing_line(gens: Generations, task: str, query_ids: list[str], examples: int = 5) -> str:
    """One line on the queries ``gens`` has no text for or a blank one, or "" when every
    query has a text."""
    missing = [q for q in query_ids if q not in gens.texts]
    blank = blank_ids(gens, query_ids)
    if not missing and not blank:
        return ""
    total = len(query_ids)
    if missing:
        counts = f"{len(missing)} of {total} queries have no generation in {gens.label}"
        counts += f" ({_shown(missing, examples)})"
        if blank:
            counts += f" and {len(blank)} a blank one ({_shown(blank, examples)})"
    else:
        counts = f"{len(blank)} of {total} queries have a blank generation in {gens.label}"
        counts += f" ({_shown(blank, examples)})"
    return f"{task}: {counts}; {_how_searched(bool(missing), bool(blank), gens.r2med)}"


def _how_searched(missing: bool, blank: bool, r2med: bool) -> str:
    # R2MED searched its own blank texts as they are (Generations.r2med); ours fall back to
    # the raw query unless an agent's query_fallback is off
    if not blank:
        return "they are searched with the raw query"
    if not r2med:
        return "they are searched with the raw query (as they are under query_fallback=false)"
    as_is = "searched as they are, as R2MED searched them"
    if missing:
        return f"the missing ones are searched with the raw query, the blank ones {as_is}"
    return f"they are {as_is}"


def _shown(ids: list[str], examples: int) -> str:
    return ", ".join(ids[:examples]) + (", ..." if len(ids) > examples else "")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def describe(gens: Generations, query_ids: list[str]) -> dict[str, Any]:
    """What a task's summary records of its source."""
    missing = [q for q in query_ids if q not in gens.texts]
    blank = blank_ids(gens, query_ids)
    return {"source": gens.label, "file": str(gens.path), "sha256": gens.sha256,
            "model": gens.model, "missing": len(missing), "missing_ids": missing,
            "blank": len(blank), "blank_ids": blank}  # fmt: skip
