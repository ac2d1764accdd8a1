"""Which of R2MED's published rows a run reproduces, from its configuration (config.json).

`paper_row` names the row (`eval.references`) whose setup the run's is: the same agent as
R2MED's method, the same generating LLM (R2MED's short name, from ``--generations
r2med:<llm>`` or from the live model's name) and the same first-stage retriever, and for a
reranker row the same cross-encoder at depth 10 over NV-Embed-v2. Anything else (another
BM25 than R2MED's, fused retrievers, other rerank stages, a model R2MED did not use) matches
no row: a figure beside a run must be the one its setup produced in R2MED's tables, or none.

R2MED publishes in two sources, and a row may be in either or both: its repository's
``results/`` (every metric; 71 rows) and its leaderboard on r2med.github.io (nDCG@10; 67
rows, 20 of them nowhere in ``results/``, such as ``hyde/o3-mini/bm25`` and
``search-o1/qwq-32b/bm25``). `paper_reference` gives the repository's row where it has one,
else the leaderboard's, and the row says which it is (``R2MED repository`` or ``R2MED
leaderboard``, in `figure_note` and `average_note`); where the two disagree (base/medcpt) the
notes give both figures, never one alone.

The names are R2MED's own (github.com/R2MED/R2MED, src/generate_hypothetical_doc.py
``model_dict``, src/eval_retrieval.py ``model_path_dict``, src/eval_reranker.py); a model
matches on the last component of its path, case-insensitively, so ``Qwen/Qwen2.5-7B-Instruct``,
``openai/Qwen/Qwen2.5-7B-Instruct`` (a vLLM server through litellm) and a local folder of that
name all name R2MED's ``qwen-7b``. The dataset plays no part in the row; `paper_figures` keeps
the tasks of the run that are R2MED's.

ReasonEmbed's Table 3 (arXiv 2510.08252; ``reasonembed-table3``) adds retrievers alone
(``base/<short>`` rows) R2MED did not run: ReasonEmbed's six checkpoints and the baselines the
authors evaluated, under the hub names of the authors' scripts (`REASONEMBED_RETRIEVERS`). A
run of one with ``--agent none`` is shown beside its Table 3 row; its four rows that repeat
R2MED's (bm25, openai, grit, nv) stay R2MED's, whose sources come first. A dense run
reproduces a row only as its model's own family encodes and searches: ``--dense-family``
naming another family than the one its name points to, ``--instructions none``, a
``--max-length`` or ``--ignore-identical-ids`` other than the family's is not the setup the
figure is of.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from eval.datasets import R2MED_TASKS, r2med_task_name
from eval.metrics import HEADLINE
from eval.references.conflicts import conflict_of, inconsistencies
from eval.references.model import SHOWN_TABLES, Reference
from eval.references.reading import load_references

GENERATE_METHODS = ("hyde", "query2doc", "lamer", "search-o1", "search-r1")

# R2MED's short name of each LLM it generated with -> the model it loaded
LLMS: dict[str, str] = {
    "qwen-7b": "Qwen/Qwen2.5-7B-Instruct",
    "qwen-32b": "Qwen/Qwen2.5-32B-Instruct",
    "qwen-72b": "Qwen/Qwen2.5-72B-Instruct",
    "llama-70b": "LLM-Research/Meta-Llama-3.1-70B-Instruct",
    "gpt4": "gpt-4o-2024-11-20",
    "o3-mini": "o3-mini",
    "r1-qwen-32b": "deepseek-ai/DeepSeek-R1-Distill-Qwen-32B",
    "r1-llama-70b": "deepseek-ai/DeepSeek-R1-Distill-Llama-70B",
    "huatuo-o1-70b": "FreedomIntelligence/HuatuoGPT-o1-70B",
    "qwq-32b": "Qwen/QwQ-32B",
    "qwen3-32b": "Qwen/Qwen3-32B",
    # Search-R1's own checkpoints (R2MED's search-r1 rows)
    "qwen-7b-ins": "PeterJinGo/SearchR1-nq_hotpotqa_train-qwen2.5-7b-it-em-ppo",
    "qwen-3b-ins": "PeterJinGo/SearchR1-nq_hotpotqa_train-qwen2.5-3b-it-em-ppo",
}

# R2MED's short name of each retriever -> our retriever spec (kind:model)
RETRIEVERS: dict[str, str] = {
    "bge": "dense:BAAI/bge-large-en-v1.5",
    "nv": "dense:nvidia/NV-Embed-v2",
    "e5": "dense:intfloat/e5-mistral-7b-instruct",
    "sfr": "dense:Salesforce/SFR-Embedding-Mistral",
    "grit": "dense:GritLM/GritLM-7B",
    "contriever": "dense:facebook/contriever-msmarco",
    "inst-l": "dense:hkunlp/instructor-large",
    "inst-xl": "dense:hkunlp/instructor-xl",
    "bmr-410m": "dense:BMRetriever/BMRetriever-410M",
    "bmr-2b": "dense:BMRetriever/BMRetriever-2B",
    "bmr-7b": "dense:BMRetriever/BMRetriever-7B",
    # R2MED encodes queries and documents alike with the Article encoder
    # (src/eval_retrieval.py L159-163: retrieral_model_path[1] for both)
    "medcpt": "dense:ncbi/MedCPT-Article-Encoder",
    "openai": "api:text-embedding-3-large",
    "voyage": "api:voyage-3",
}
# ReasonEmbed's Table 3's retrievers R2MED has no row of (eval/references/reasonembed-table3.json)
# -> our retriever spec: the model_path of the authors' script for the row
# (VectorSpaceLab/agentic-search at b2f2e40, ReasonEmbed/evaluation_r2med/scripts/<file>);
# gte-Qwen2-7B-instruct has no script there, so its name is the hub's for the model printed.
# The three "-ms" rows the authors reproduced have no published checkpoint: no spec.
REASONEMBED_RETRIEVERS: dict[str, str] = {
    "reason-embed-qwen3-8b": "dense:hanhainebula/reason-embed-qwen3-8b-0928",
    "reason-embed-qwen3-4b": "dense:hanhainebula/reason-embed-qwen3-4b-0928",
    "reason-embed-llama-3.1-8b": "dense:hanhainebula/reason-embed-llama-3.1-8b-0928",
    "reason-embed-basic-qwen3-8b": "dense:hanhainebula/reason-embed-basic-qwen3-8b-0928",
    "reason-embed-basic-qwen3-4b": "dense:hanhainebula/reason-embed-basic-qwen3-4b-0928",
    "reason-embed-basic-llama-3.1-8b": "dense:hanhainebula/reason-embed-basic-llama-3.1-8b-0928",
    "qwen3-embedding-8b": "dense:Qwen/Qwen3-Embedding-8B",  # baselines/eval_qwen3_embedding_8b.sh
    "qwen3-embedding-4b": "dense:Qwen/Qwen3-Embedding-4B",  # baselines/eval_qwen3_embedding_4b.sh
    "gte-qwen2-7b-instruct": "dense:Alibaba-NLP/gte-Qwen2-7B-instruct",  # no script
    # baselines/eval_rader_gte_qwen2_7b.sh (run with --trust_remote_code True)
    "rader-gte-qwen2-7b": "dense:Raderspace/RaDeR_gte_Qwen2-7B_MATH_LLMq_CoT_lexical",
    "diver-retriever-4b": "dense:AQ-MedAI/Diver-Retriever-4B",  # baselines/eval_diver_...4b.sh
    # baselines/eval_reasonir_8b.sh (run with --trust_remote_code True)
    "reasonir-8b": "dense:reasonir/ReasonIR-8B",
}
R2MED_BM25 = "bm25q"  # R2MED's BM25 (bm25s, "bm25q" here); lucene and okapi are other BM25s

# R2MED's rerankers (src/eval_reranker.py L126-130); rankllama is a LoRA over Llama-2-7b-hf
RERANKERS: dict[str, str] = {
    "bge-reranker": "BAAI/bge-reranker-v2-m3",
    "monobert": "castorini/monobert-large-msmarco",
    "rankllama": "castorini/rankllama-v1-7b-lora-passage",
}
RANKLLAMA_BASE = "Llama-2-7b-hf"
RERANK_MAX_LENGTH = 512  # src/eval_reranker.py L134 as written gives 512 to all three
RERANK_FIRST_STAGE = "nv"
RERANK_DEPTH = 10

# Rows a method's authors published (eval/references/r2med-authors.json): ReasonRank-32B over
# the first stage its repository publishes (runs/r2med_<Task>/<this file>), in run_rank_llm.sh's
# setting; matched on the run file's name, the stage and its options, the model's last name
REASONRANK_FILE = "e5-mistral-7b-instruct_top100.txt"
REASONRANK_OPTIONS = {"depth": 100, "window": 20, "step": 10, "passage_tokens": 512}
REASONRANK_MODELS = {"reasonrank-32b": "reranker/reasonrank-32b/e5/top_100"}


def _name(model: str) -> str:
    """A model's last path component, lower-cased: what R2MED's names are matched on."""
    return model.strip().rstrip("/").rsplit("/", 1)[-1].lower()


# Meta renamed the hub repo R2MED loaded: the same weights under their current name
_LLM_ALIASES = {"meta-llama/Llama-3.1-70B-Instruct": "llama-70b"}
_LLM_BY_NAME = {_name(model): short for short, model in LLMS.items()} | {
    _name(model): short for model, short in _LLM_ALIASES.items()
}
_RETRIEVER_BY_NAME = {
    (spec.split(":", 1)[0], _name(spec.split(":", 1)[1])): short
    for short, spec in (RETRIEVERS | REASONEMBED_RETRIEVERS).items()
}
_RERANKER_BY_NAME = {_name(model): short for short, model in RERANKERS.items()}


def r2med_llm(config: Mapping[str, Any]) -> str | None:
    """R2MED's short name of the LLM that wrote the run's texts, or None."""
    generations = config.get("generations")
    if generations:
        text = str(generations).strip()
        if not text.lower().startswith("r2med:"):
            return None  # a file or a run folder: whose texts is not said here
        return text[len("r2med:") :].partition("@")[0].strip() or None
    model = (config.get("llm") or {}).get("model")
    return _LLM_BY_NAME.get(_name(model)) if model else None


def r2med_retriever(retriever: Mapping[str, Any]) -> str | None:
    """The short name in the published rows' ids (R2MED's, or Table 3's for a retriever R2MED
    did not run) of the run's first-stage retriever, or None."""
    spec = str(retriever.get("spec") or "").strip()
    if spec == "bm25":
        method = (retriever.get("bm25") or {}).get("method")
        return "bm25" if method == R2MED_BM25 else None
    kind, colon, model = spec.partition(":")
    if not colon or "+" in spec:  # the default dense model, or a fusion
        return None
    if kind == "dense" and not _own_encoding(model, retriever.get("dense") or {}):
        return None
    return _RETRIEVER_BY_NAME.get((kind, _name(model)))


def _own_encoding(model: str, dense: Mapping[str, Any]) -> bool:
    """Whether a dense run encoded and searched as its model's own family does, as the
    published figures were: that family (auto, or naming the family the model's name points
    to), its instructions, its maximum length and its rule for a document whose id is the
    query's (which decides the figure on a task whose query ids are document ids). A setting
    a config does not record, or records as None, is the family's."""
    from retrievers.families import AUTO, family_for  # reads families.json: no heavy import

    own = family_for(model)
    if (dense.get("family") or AUTO) not in (AUTO, own.name):
        return False
    if dense.get("instructions", "r2med") == "none":
        return False
    length = dense.get("max_length")
    ignore = dense.get("ignore_identical_ids")
    return (length is None or length == own.max_length) and (
        ignore is None or ignore == own.ignore_identical_ids
    )


def _reranker_row(config: Mapping[str, Any], retriever: str | None) -> str | None:
    stages = config.get("rerank") or []
    if len(stages) != 1 or config.get("agent") != "none" or retriever != RERANK_FIRST_STAGE:
        return None
    stage = stages[0]
    options = stage.get("options") or {}
    if stage.get("kind") != "cross" or options.get("depth") != RERANK_DEPTH:
        return None
    model = str(options.get("model") or "")
    reranker = _RERANKER_BY_NAME.get(_name(model))
    if reranker is None or options.get("max_length", RERANK_MAX_LENGTH) != RERANK_MAX_LENGTH:
        return None
    from agents.rerank.r2med_rerankers import rule_by_name

    if options.get("scoring", "auto") not in ("auto", rule_by_name(model)):
        return None
    base = options.get("base") or RANKLLAMA_BASE
    if reranker == "rankllama" and _name(str(base)) != _name(RANKLLAMA_BASE):
        return None
    return f"reranker/{reranker}/{retriever}/top_{RERANK_DEPTH}"


def _authors_row(config: Mapping[str, Any]) -> str | None:
    """The authors' row a rerank of a published run file reproduces (ReasonRank's), or None."""
    stages = config.get("rerank") or []
    if _name(str(config.get("run_file") or "")) != REASONRANK_FILE or len(stages) != 1:
        return None
    if config.get("run_file_order") != "file":  # its loader keeps the file's line order
        return None
    stage = stages[0]
    options = stage.get("options") or {}
    if stage.get("kind") != "reasonrank":
        return None
    if any(options.get(k) != v for k, v in REASONRANK_OPTIONS.items()):
        return None
    llm = config.get("llm") or {}
    if llm.get("max_tokens") is not None or llm.get("temperature") is not None:
        return None  # the budget and the temperature are the original's (the sampling table)
    return REASONRANK_MODELS.get(_name(str(options.get("model") or "")))


def candidate_row(config: Mapping[str, Any]) -> str | None:
    """The row id the run's setup would have in R2MED's table, whether or not R2MED has it."""
    if config.get("run_file"):
        # which retriever made a run file's lists, its config cannot say; a method's authors
        # name the file they published
        return _authors_row(config)
    retriever = r2med_retriever(config.get("retriever") or {})
    if config.get("rerank"):
        return _reranker_row(config, retriever)
    if retriever is None:
        return None
    agent = config.get("agent")
    if agent == "none":
        return f"base/{retriever}"
    if agent in GENERATE_METHODS:
        llm = r2med_llm(config)
        return f"{agent}/{llm}/{retriever}" if llm else None
    return None


def paper_references(config: Mapping[str, Any]) -> list[Reference]:
    """The published row the run reproduces in each shipped source that holds it, in
    `SHOWN_TABLES`' order (R2MED's repository first, ReasonEmbed's Table 3 last); [] when the
    setup differs or no source has such a row."""
    row = candidate_row(config)
    if row is None:
        return []
    return [rows[row] for rows in map(load_references, SHOWN_TABLES) if row in rows]


def paper_row(config: Mapping[str, Any]) -> str | None:
    """The id of the published row the run reproduces (``hyde/qwen-7b/bm25``), in R2MED's
    repository or on its leaderboard (``hyde/o3-mini/bm25`` is only there), or in another
    shipped source (``base/reason-embed-qwen3-8b``, ReasonEmbed's Table 3), or None when the
    setup differs or no source published such a row (``search-o1/qwq-32b/contriever``)."""
    refs = paper_references(config)
    return refs[0].row if refs else None


def paper_reference(config: Mapping[str, Any]) -> Reference | None:
    """The published row of `paper_row`, with its figures: the repository's where it has the
    row (every metric, 5 decimals), else the leaderboard's, else the first other source's
    that has it (its label says which)."""
    refs = paper_references(config)
    return refs[0] if refs else None


def paper_spec(config: Mapping[str, Any]) -> str | None:
    """The spec of `paper_reference` (``r2med:...`` or ``r2med-leaderboard:...``), or None."""
    ref = paper_reference(config)
    return ref.spec if ref is not None else None


def paper_figures(
    config: Mapping[str, Any], task_names: Iterable[str], metric: str = HEADLINE
) -> dict[str, float] | None:
    """The published ``metric`` on each of ``task_names`` that is an R2MED task and in the
    row, keyed as given; None when the run matches no row ({} when none of its tasks is
    R2MED's). The figures are `paper_reference`'s: its label says which source they are."""
    ref = paper_reference(config)
    if ref is None:
        return None
    figures = {}
    for task in task_names:
        value = ref.figure(task, metric) if r2med_task_name(task) else None
        if value is not None:
            figures[task] = value
    return figures


def figure_note(ref: Reference, task: str, metric: str = HEADLINE) -> str | None:
    """The published figure on one task as a run's line shows it, with its source:
    "R2MED repository, base/bm25: 0.19188"; where R2MED's sources conflict on that task,
    both figures. None when the row has no figure there."""
    figure = ref.figure(task, metric)
    if figure is None:
        return None
    note = f"{ref.source_name}, {ref.row}: {ref.format(figure)}"
    conflict = conflict_of(ref)
    if conflict is not None and r2med_task_name(task) in conflict.tasks:
        other = conflict.other(ref)
        other_figure = other.figure(task, metric)
        if other_figure is not None:
            note += f"; {other.source_name}: {other.format(other_figure)}, a conflict"
    return note


def average_note(ref: Reference, tasks: Iterable[str], metric: str = HEADLINE) -> str | None:
    """The published average ×100 over the run's R2MED ``tasks`` (each once), as a line with
    its source, and the other source's where the two conflict; None without any such task."""
    names = list(dict.fromkeys(t for t in map(r2med_task_name, tasks) if t is not None))
    if ref.average_only and names and metric == HEADLINE:
        line = f"{ref.source_name} ({ref.row}): avg nDCG@10 {ref.published_average * 100:.2f}"
        if set(names) == set(R2MED_TASKS):
            return f"{line} over R2MED's 8 tasks, published alone (no per-task figures)"
        return f"{line}, published over R2MED's 8 tasks alone: not comparable with {len(names)}"
    held = [t for t in names if ref.figure(t, metric) is not None]
    if not held:
        return None
    line = f"{ref.source_name} ({ref.row}): avg {_metric_text(metric)} "
    line += f"{ref.average(metric, held) * 100:.2f} over the same tasks"
    if set(held) == set(R2MED_TASKS):  # the printed Avg is the figure: where it is at odds
        for found in inconsistencies(ref):  # with its own tasks' mean, both are given
            if found.cell == "Avg" and metric == HEADLINE:
                line += (f"; the mean of its printed task figures is {found.other}, a "
                         f"conflict (python -m eval.references show {ref.spec})")  # fmt: skip
    conflict = conflict_of(ref)
    if conflict is not None:
        other = conflict.other(ref)
        try:
            line += f"; {other.source_name}: {other.average(metric, held) * 100:.2f}"
        except ValueError:  # the other source lacks the metric (the leaderboard: nDCG@10 only)
            pass
        line += f", a conflict ({conflict.row}: python -m eval.references show {conflict.row})"
    return line


def _metric_text(metric: str) -> str:
    return "nDCG@10" if metric == HEADLINE else metric
