"""Another paper's table of R2MED: Table 3 of *ReasonEmbed* (Chen et al., 2025, arXiv
2510.08252), read from a TSV into the shipped ``eval/references/reasonembed-table3.json``, and
that file's rows read back.

nDCG@10 ×100 on R2MED's 8 tasks and its Avg for 19 retrievers alone, ``base/<short>`` rows;
`build_reasonembed` reads a TSV of it (columns ``Model Group Size Mark Avg`` and the 8 tasks,
transcribed from the image the authors' repository publishes it as: VectorSpaceLab/agentic-search
at b2f2e40, ``ReasonEmbed/imgs/r2med-performance.png``). Each row keeps its cells as printed
(its model name, section, size and mark) and is labelled "ReasonEmbed Table 3". Its four
unmarked baselines (BM25, OpenAI-3-Large, GritLM-7B, NV-Embed-v2) are, by its caption, R2MED's
own figures: they carry R2MED's row ids (``base/bm25``, ``base/openai``, ``base/grit``,
``base/nv``) and are compared figure by figure with R2MED's rows (`eval.references.conflicts`;
the same to the rounding, all of them). The other 15 are rows R2MED has not.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from eval.datasets import R2MED_TASKS
from eval.references.datafile import tsv_rows
from eval.references.model import (
    BASE_PREFIX,
    LEADERBOARD_METRIC,
    PAPER_KIND,
    Reference,
    fraction,
    published_figure,
)

# The paper, the table, and where its figures were read: the table is published as an image
# in the authors' repository, so the image at its commit is the figures' address.
REASONEMBED_SOURCE = {
    "kind": PAPER_KIND,
    "name": "ReasonEmbed Table 3",
    "title": "ReasonEmbed: Enhanced Text Embeddings for Reasoning-Intensive Document Retrieval",
    "authors": "Chen et al., 2025",
    "arxiv": "2510.08252",
    "table": 3,
    "caption": "Main evaluation results (nDCG@10) on the R2MED benchmark (using original queries)",
    "repository": "https://github.com/VectorSpaceLab/agentic-search",
    "commit": "b2f2e40050f47453848fa84beefee793dbdb88a5",
    "path": "ReasonEmbed/imgs/r2med-performance.png",
    "metric": LEADERBOARD_METRIC,
    "scale": 100,
}
REASONEMBED_SCRIPTS = "ReasonEmbed/evaluation_r2med/scripts"  # the authors' per-model settings
PAPER_COLUMNS = ("Model", "Group", "Size", "Mark", "Avg", *R2MED_TASKS)
# the table's sections, as the TSV's Group names them, with their headings as printed
PAPER_GROUPS = {
    "general": "General-purpose methods",
    "reasoning": "Tailored methods for reasoning-intensive retrieval",
    "reasonembed-basic": "ReasonEmbed from basic contrastive learning (using InfoNCE loss)",
    "reasonembed": "ReasonEmbed from Redapter (using the self-adaptive RI-InfoNCE loss)",
}
BASELINE_GROUPS = ("general", "reasoning")  # the caption's "baselines"; the rest are ReasonEmbed
# the caption's words for each mark of a baseline; an unmarked ReasonEmbed row is the authors'
R2MED_MARK = ""  # "Other results are directly taken from Li et al. (2025b)": R2MED's paper
PAPER_MARKS = {
    "*": '"well-trained models released by existing studies and evaluated by us"',
    "†": '"reproduced methods in this work"',
    R2MED_MARK: '"directly taken from Li et al. (2025b)": R2MED\'s paper',
}
OWN_MODEL = "the authors' own model"
_SIZE = re.compile(r"-|\d+(?:\.\d+)?B")


# The table's model names (case-folded) -> the retriever's short name in the row id
# (``base/<short>``; R2MED's own short names for the rows it repeats) and the authors' script
# for it under REASONEMBED_SCRIPTS ("": none published). The image prints the six ReasonEmbed
# rows under two section headings with the same three names; the TSV adds the loss to each
# name, "(InfoNCE)" for the basic section and "(RI-InfoNCE)" for Redapter's. Their short names
# are their hub checkpoints' (hanhainebula/reason-embed-*-0928, the scripts' model_path).
REASONEMBED_MODELS: dict[str, tuple[str, str]] = {
    "bm25": ("bm25", ""),
    "openai-3-large": ("openai", ""),
    "gritlm-7b": ("grit", ""),
    "nv-embed-v2": ("nv", ""),
    "gte-qwen2-7b-instruct": ("gte-qwen2-7b-instruct", ""),
    "qwen3-embedding-4b": ("qwen3-embedding-4b", "baselines/eval_qwen3_embedding_4b.sh"),
    "qwen3-embedding-8b": ("qwen3-embedding-8b", "baselines/eval_qwen3_embedding_8b.sh"),
    "qwen3-4b-ms": ("qwen3-4b-ms", ""),
    "qwen3-8b-ms": ("qwen3-8b-ms", ""),
    "llama-3.1-8b-ms": ("llama-3.1-8b-ms", ""),
    "reasonir-8b": ("reasonir-8b", "baselines/eval_reasonir_8b.sh"),
    "rader-gte-qwen2-7b": ("rader-gte-qwen2-7b", "baselines/eval_rader_gte_qwen2_7b.sh"),
    "diver-retriever": ("diver-retriever-4b", "baselines/eval_diver_retriever_4b.sh"),
    "reasonembed-qwen3-4b (infonce)": (
        "reason-embed-basic-qwen3-4b", "ours/eval_reason_embed_basic_qwen3_4b.sh"),
    "reasonembed-qwen3-8b (infonce)": (
        "reason-embed-basic-qwen3-8b", "ours/eval_reason_embed_basic_qwen3_8b.sh"),
    "reasonembed-llama-3.1-8b (infonce)": (
        "reason-embed-basic-llama-3.1-8b", "ours/eval_reason_embed_basic_llama_3.1_8b.sh"),
    "reasonembed-qwen3-4b (ri-infonce)": (
        "reason-embed-qwen3-4b", "ours/eval_reason_embed_qwen3_4b.sh"),
    "reasonembed-qwen3-8b (ri-infonce)": (
        "reason-embed-qwen3-8b", "ours/eval_reason_embed_qwen3_8b.sh"),
    "reasonembed-llama-3.1-8b (ri-infonce)": (
        "reason-embed-llama-3.1-8b", "ours/eval_reason_embed_llama_3.1_8b.sh"),
}  # fmt: skip


def repeats_r2med(group: str, mark: str) -> bool:
    """Whether the table says a row is R2MED's own figure: an unmarked baseline."""
    return group in BASELINE_GROUPS and mark == R2MED_MARK


def _paper_line(fields: list[str], where: str) -> tuple[str, dict[str, Any]]:
    """(row id, its entry) of one line of the paper's TSV."""
    if len(fields) != len(PAPER_COLUMNS):
        raise ValueError(
            f"{where}: {len(fields)} tab-separated fields, expected {len(PAPER_COLUMNS)} "
            f"({', '.join(PAPER_COLUMNS)})"
        )
    model, group, size, mark, avg_text, *task_texts = (f.strip() for f in fields)
    found = REASONEMBED_MODELS.get(model.casefold())
    if found is None:
        raise ValueError(f"{where}: Model {model!r}: not one of Table 3's models (known: "
                         f"{', '.join(REASONEMBED_MODELS)})")  # fmt: skip
    short, script = found
    if group not in PAPER_GROUPS:
        raise ValueError(f"{where}: Group {group!r}: expected one of {', '.join(PAPER_GROUPS)}")
    if mark not in PAPER_MARKS:
        raise ValueError(f"{where}: Mark {mark!r}: expected *, † or nothing")
    if not _SIZE.fullmatch(size):
        raise ValueError(f"{where}: Size {size!r}: expected - or a size such as 7B")
    # The printed Avg is kept as printed, whatever the mean of the tasks: where the two
    # disagree (RaDeR's) that is what the paper published, shown by `inconsistencies`.
    avg = published_figure(avg_text, where, "Avg")
    figures = {
        t: published_figure(v, where, t) for t, v in zip(R2MED_TASKS, task_texts, strict=True)
    }
    entry = {
        "model": model, "group": group, "size": size, "mark": mark, "avg": float(avg),
        "tasks": {t: float(v) for t, v in figures.items()},
        "script": f"{REASONEMBED_SCRIPTS}/{script}" if script else "",
    }  # fmt: skip
    return f"{BASE_PREFIX}/{short}", entry


def build_reasonembed(tsv: Path | str) -> dict[str, Any]:
    """The data of ReasonEmbed's Table 3 from a TSV of it (``Model Group Size Mark Avg`` and
    the 8 tasks, ×100, one row a line in the table's order).

    Every cell is checked and every model mapped to its row id; a bad header, field, name,
    figure or a row given twice is refused in one line naming the line. The table's own
    inconsistencies are kept as printed (`inconsistencies` shows them).
    """
    rows = tsv_rows(Path(tsv), PAPER_COLUMNS, _paper_line)
    return {"source": dict(REASONEMBED_SOURCE), "tasks": list(R2MED_TASKS), "rows": rows}


def paper_tsv(table: Mapping[str, Any]) -> str:
    """The TSV `build_reasonembed` reads, written back from its data (for the round trip)."""
    lines = ["\t".join(PAPER_COLUMNS)]
    for entry in table["rows"].values():
        figures = [repr(v) for v in [entry["avg"], *(entry["tasks"][t] for t in R2MED_TASKS)]]
        lines.append("\t".join([entry["model"], entry["group"], entry["size"], entry["mark"],
                                *figures]))  # fmt: skip
    return "\n".join(lines) + "\n"


def _paper_setup(source: Mapping[str, Any], entry: Mapping[str, Any]) -> str:
    """What the row's figures are of, as far as the paper and its repository say."""
    if repeats_r2med(entry["group"], entry["mark"]):
        return "R2MED's own figures, repeated (an unmarked baseline)"
    if entry["script"]:
        return (f"the authors' settings: {entry['script']} at {source['commit']} (model, "
                "pooling, instruction format, maximum lengths)")  # fmt: skip
    if entry["mark"] == "†":
        return "reproduced by the authors; no checkpoint or script of theirs is published"
    return "evaluated by the authors; no script of theirs is published for it"


def paper_references(data: Mapping[str, Any], table: str) -> dict[str, Reference]:
    source = data["source"]
    metric = source["metric"]
    citation = (f"{source['title']} ({source['authors']}, arXiv {source['arxiv']}), "
                f"Table {source['table']}")  # fmt: skip
    return {
        row: Reference(
            row=row,
            tasks={t: {metric: fraction(v)} for t, v in entry["tasks"].items()},
            repository=source["repository"],
            commit=source["commit"],
            path=source["path"],
            table=table,
            kind=PAPER_KIND,
            published_average=fraction(entry["avg"]),
            name=source["name"],
            setup=_paper_setup(source, entry),
            citation=citation,
            printed={k.title(): entry[k] for k in ("model", "group", "size", "mark")},
        )
        for row, entry in data["rows"].items()
    }
