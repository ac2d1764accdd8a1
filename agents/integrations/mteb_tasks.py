"""A local task as an MTEB retrieval task, and MTEB's R2MED task names as ours.

`local_retrieval_task("path/to/folder")` is an ``mteb.AbsTaskRetrieval`` over a folder in
either layout `eval.datasets` reads (R2MED's or BEIR's), or ``demo``: no hub is asked. The
texts are the ones our loader makes (a BEIR document is its title, a space and its text,
as MTEB joins them: `mteb._create_dataloaders._corpus_to_dict`), the qrels the same, so
`mteb.evaluate` and `eval.evaluate_run` score the same data (docs/integrations.md, "MTEB").
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from eval.datasets import R2MED_TASKS, Task, default_cache_dir, load_task
from eval.plumbing.extras import import_extra

SPLIT = "test"
# MTEB's name of an R2MED task: "R2MED" + the name without hyphens + "Retrieval"
_MTEB_R2MED = re.compile(r"R2MED(?P<task>\w+?)Retrieval")


def r2med_task_of(mteb_name: str) -> str | None:
    """Our R2MED task name for MTEB's (``R2MEDMedQADiagRetrieval`` -> ``MedQA-Diag``), or
    None when the MTEB task is not one of R2MED's eight."""
    found = _MTEB_R2MED.fullmatch(mteb_name)
    if found is None:
        return None
    by_key = {name.replace("-", ""): name for name in R2MED_TASKS}
    return by_key.get(found["task"])


def local_retrieval_task(source: str | Path | Task, *, name: str | None = None) -> Any:
    """An MTEB retrieval task (an ``AbsTaskRetrieval``) over a local folder or a loaded `Task`;
    ``name`` is its MTEB name (default: ``Local<folder name>Retrieval``). It evaluates on
    split ``test`` with MTEB's own k values and main score (nDCG@10)."""
    mteb = import_extra("mteb", "mteb", "local_retrieval_task")
    from mteb.abstasks.retrieval import AbsTaskRetrieval
    from mteb.abstasks.task_metadata import TaskMetadata

    task = source if isinstance(source, Task) else load_task(str(source), default_cache_dir())
    title = re.sub(r"[^0-9A-Za-z]+", "", task.name.title()) or "Folder"
    metadata = TaskMetadata(
        name=name or f"Local{title}Retrieval",
        description=f"{task.name}: {len(task.queries)} queries over {len(task.corpus)} "
        f"documents, read from {task.path}",
        # a local folder has no hub repository; the revision is its data's fingerprint
        dataset={"path": str(task.path), "revision": _revision(task)},
        type="Retrieval",
        category="t2t",
        modalities=["text"],
        eval_splits=[SPLIT],
        eval_langs=["eng-Latn"],
        main_score="ndcg_at_10",
        is_public=False,
    )

    class LocalRetrieval(AbsTaskRetrieval):
        def load_data(self, num_proc: int | None = None, **kwargs: Any) -> None:
            if self.data_loaded:
                return
            # MTEB's own v1 form, converted by the task itself (convert_v1_dataset_format_to_v2)
            self.corpus = {SPLIT: {d: {"text": t, "title": ""} for d, t in task.corpus.items()}}
            self.queries = {SPLIT: dict(task.queries)}
            self.relevant_docs = {SPLIT: {q: dict(r) for q, r in task.qrels.items()}}
            self.data_loaded = True

    LocalRetrieval.metadata = metadata
    LocalRetrieval.__name__ = metadata.name
    del mteb
    return LocalRetrieval()


def _revision(task: Task) -> str:
    from eval.datasets import task_fingerprint

    digests = task_fingerprint(task)
    return "-".join(digests[k][:12] for k in ("corpus", "queries", "qrels"))
