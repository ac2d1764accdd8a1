"""The benchmark's names: R2MED's tasks, their pinned hub revisions, query kinds and files, the
cache folder, and the demo task that ships with the package. Every part (loader, prompts,
retrievers' instructions) spells a task through `r2med_task_name`."""

import os
from pathlib import Path

CACHE_ENV = "R2MED_AGENTS_CACHE"


def default_cache_dir() -> Path:
    """Where downloads, indexes, embeddings, models and LLM answers are cached by default."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "r2med-agents")


R2MED_TASKS: tuple[str, ...] = (
    "Biology",
    "Bioinformatics",
    "Medical-Sciences",
    "MedXpertQA-Exam",
    "MedQA-Diag",
    "PMC-Treatment",
    "PMC-Clinical",
    "IIYi-Clinical",
)

# Pinned to the commits mteb evaluates, so scores stay comparable if the hub repos change.
R2MED_REVISIONS: dict[str, str] = {
    "Biology": "8b9fec2db9eda4b5742d03732213fbaee8169556",
    "Bioinformatics": "6021fce366892cbfd7837fa85a4128ea93315e18",
    "Medical-Sciences": "1b48911514c80bf9182222d99752ad75e23b4b47",
    "MedXpertQA-Exam": "b457ea43db9ae5db74c3a3e5be0a213d0f85ac3a",
    "MedQA-Diag": "78b585990279cc01a493f876c1b0cf09557fba57",
    "PMC-Treatment": "53c489a44a3664ba352c07550b72b4525a5968d5",
    "PMC-Clinical": "812829522f7eaa407ef82b96717be85788a50f7e",
    "IIYi-Clinical": "974abbc9bc281c3169180a6aa5d7586cfd2f5877",
}

# The query style of each task, which picks the agents' prompts and the retrievers'
# instructions: a StackExchange-like post, a board-exam question, a clinical case, or a case
# whose answer is a similar case.
R2MED_KINDS: dict[str, str] = {
    "Biology": "post",
    "Bioinformatics": "post",
    "Medical-Sciences": "post",
    "MedXpertQA-Exam": "exam",
    "MedQA-Diag": "exam",
    "PMC-Treatment": "case",
    "PMC-Clinical": "similar-case",
    "IIYi-Clinical": "similar-case",
}
TASK_KINDS: tuple[str, ...] = ("post", "exam", "case", "similar-case")


def task_kind(name: str) -> str:
    """The query style of a task by name; tasks outside R2MED (e.g. SciFact) count as posts."""
    canonical = r2med_task_name(name)
    return R2MED_KINDS[canonical] if canonical else "post"


R2MED_FILES: tuple[str, ...] = ("corpus.jsonl", "query.jsonl", "qrels.jsonl")

# A small synthetic task in R2MED layout that ships with the package, so that everything runs
# offline; load it with the name "demo". Its scores say nothing about R2MED (see its README).
DEMO_DIR = Path(__file__).resolve().parents[1] / "demo"


def r2med_task_name(spec: str) -> str | None:
    """R2MED's spelling of a task name given in any case (``R2MED/`` prefix allowed), or None
    for a name outside R2MED. The one rule every part (loader, prompts, instructions) uses."""
    key = spec.strip().lower().removeprefix("r2med/")
    return next((t for t in R2MED_TASKS if t.lower() == key), None)
