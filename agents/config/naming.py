"""Names and labels of runs, computed from the typed run configuration.

Two strings tell runs apart. `run_folder_name` names a run's folder: every setting that
changes the output, as one safe path component. `run_label` is what a table shows: agent,
retriever, model (or the generation source a replay reads), prompt version and rerank stages.
Both start from the same parts, so a folder is named before a run and labelled after it by one
rule. The pipeline writes the label into the run folder when the run ends
(`eval.runs.RunFolder.write_summary`), so `eval.compare` shows it without reading a config.

They read an `agents.config.run_config.RunConfig`; it is typed here by the fields read (`NamedRun`),
because the config imports this module to name its folders.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from agents.config.registry import AGENTS, STAGES
from agents.shared.generations import parse_source
from eval.plumbing.files import safe_name
from eval.plumbing.secrets.credentials import mask_urls
from retrievers.config import RetrieverConfig


class NamedStage(Protocol):
    @property
    def kind(self) -> str: ...

    @property
    def options(self) -> Mapping[str, Any]: ...


class NamedLLM(Protocol):
    @property
    def model(self) -> str: ...


class NamedEval(Protocol):
    @property
    def pad(self) -> bool: ...

    @property
    def ties(self) -> str: ...


class NamedRecorded(Protocol):
    @property
    def prompts(self) -> Mapping[str, str]: ...


class NamedRun(Protocol):
    """The fields of a `RunConfig` that names and labels are made of."""

    @property
    def agent(self) -> str: ...

    @property
    def dataset(self) -> str: ...

    @property
    def options(self) -> Mapping[str, Any]: ...

    @property
    def retriever(self) -> RetrieverConfig: ...

    @property
    def rerank(self) -> Sequence[NamedStage]: ...

    @property
    def llm(self) -> NamedLLM | None: ...

    @property
    def eval(self) -> NamedEval: ...

    @property
    def limit(self) -> int | None: ...

    @property
    def recorded(self) -> NamedRecorded: ...

    @property
    def generations(self) -> str | None: ...

    @property
    def source_run(self) -> str | None: ...

    @property
    def run_file(self) -> str | None: ...

    @property
    def run_file_duplicates(self) -> str: ...
    @property
    def run_file_order(self) -> str: ...


def prompt_version(prompts: Mapping[str, str]) -> str:
    """A short hash naming the exact prompt texts of a run ("-" when it uses none)."""
    if not prompts:
        return "-"
    return hashlib.sha256(json.dumps(dict(prompts), sort_keys=True).encode()).hexdigest()[:7]


def run_label(config: NamedRun) -> str:
    """agent, retriever, model and prompt version, e.g. "hyde bm25q qwen2.5-coder-0.5b p:3fa2c1e";
    a run replaying released generations names its source instead: "hyde bm25q r2med:o3-mini".

    Runs without an LLM have no model or prompt part ("none lucene"); each rerank stage adds
    "rerank:<kind>".
    """
    parts = _name_parts(config)
    if config.recorded.prompts:
        parts.append(f"p:{prompt_version(config.recorded.prompts)}")
    parts += [f"rerank:{stage.kind}" for stage in config.rerank]
    return " ".join(parts)


def run_folder_name(config: NamedRun, variant: str | None = None) -> str:
    """The default run folder name: the settings that tell runs apart, as one safe name.

    agent, retriever, model, ``variant`` (a sweep's name for its prompt set), dataset, then
    the settings that change the output: limit, padding, tie order, every agent option that
    differs from the agent's default and each rerank stage with its non-default options
    (`stage_labels`), so that e.g. the three final-ranking modes of one agent, or two rerank
    depths, sit side by side instead of refusing each other's folder. A rerank of a finished
    run is named after it: ``<source folder>-reranked-<its stages>``. A rerank of a TREC run
    file is named after the file and its task (published runs of several tasks share a file
    name), then the stages' model and ``variant``:
    ``<file stem>-<task>[-limit<N>][-ties=...][-duplicates=max]-reranked[-<model>]
    [-<variant>]-<its stages>``.
    """
    if config.source_run:
        stages = "-".join(stage_labels(config))
        return safe_name(f"{Path(config.source_run).name}-reranked-{stages}")
    if config.run_file:
        return _run_file_name(config, variant)
    parts = _name_parts(config)
    if variant:
        parts.append(variant)
    parts += _data_parts(config)
    defaults = AGENTS[config.agent].defaults
    parts += [f"{k}={v}" for k, v in config.options.items() if v != defaults.get(k)]
    parts += [f"rerank={label}" for label in stage_labels(config)]
    return safe_name("-".join(parts))


def _run_file_name(config: NamedRun, variant: str | None) -> str:
    parts = [Path(str(config.run_file)).stem, *_data_parts(config)]
    if config.run_file_duplicates != "refuse":
        parts.append(f"duplicates={config.run_file_duplicates}")
    if config.run_file_order != "score":
        parts.append(f"order={config.run_file_order}")
    if config.rerank:
        parts.append("reranked")
        # the model of the stages that call the run's: the file's name says nothing of it
        # (a stage with a model of its own says it in its label)
        run_model = config.llm.model if config.llm is not None else None
        if run_model and any(s.options.get("model") == run_model for s in config.rerank):
            parts.append(_short_model(run_model))
        if variant:
            parts.append(variant)
        parts += stage_labels(config)
    return safe_name("-".join(parts))


def _data_parts(config: NamedRun) -> list[str]:
    """The dataset and the evaluation settings that change a run's lists."""
    parts = [Path(config.dataset).name or config.dataset]
    if config.limit:
        parts.append(f"limit{config.limit}")
    if config.eval.pad:
        parts.append("pad")
    if config.eval.ties != "trec":
        parts.append(f"ties={config.eval.ties}")
    return parts


def stage_labels(config: NamedRun) -> list[str]:
    """Each stage as ``kind`` plus its options that differ from its kind's defaults:
    ``llm-listwise,depth=20``; a stage's model by its last part, and only when it is not the
    run's (an LLM stage without a model of its own is given the run's); a server by its URL
    with password and keys masked, as config.json records it: names are printed and shared."""
    run_model = config.llm.model if config.llm is not None else None
    labels = []
    for stage in config.rerank:
        defaults = STAGES[stage.kind].defaults
        changed = [
            f"{k}={_shown(k, v)}"
            for k, v in stage.options.items()
            if v != defaults.get(k) and not (k == "model" and v == run_model)
        ]
        labels.append(",".join([stage.kind, *changed]))
    return labels


def llm_free(config: NamedRun) -> bool:
    """Whether no LLM had a part in the run's ranking: none called, no generation replayed.
    Such a run is what a comparison's charts mark as the no-LLM baseline. A run file's lists
    came from a system this project cannot see (e5-mistral is an LLM), so it is never one."""
    return config.llm is None and not config.generations and not config.run_file


def _name_parts(config: NamedRun) -> list[str]:
    """agent, retriever, model, and the generation source of a replayed run
    (``--generations``), which stands for the model that wrote the texts; a run file stands
    for agent and retriever (``run:<file stem>``)."""
    if config.run_file:
        parts = [f"run:{Path(config.run_file).stem}"]
    else:
        parts = [config.agent, _retriever_name(config.retriever)]
    if config.llm is not None:
        parts.append(_short_model(config.llm.model))
    if config.generations:
        parts.append(mask_urls(parse_source(config.generations, config.agent).label))
    return parts


def _retriever_name(retriever: RetrieverConfig) -> str:
    """The spec, and BM25 by its method: that is what tells BM25 runs apart. A remote:<url>
    holding a credential is refused by the config; masked here all the same, as a name is
    printed and shared."""
    if retriever.spec == "bm25" and retriever.bm25.method:
        return retriever.bm25.method
    return mask_urls(retriever.spec)


def _short_model(model: Any) -> str:
    return str(model).split("/")[-1]


def _shown(key: str, value: Any) -> Any:
    if key == "model":
        return _short_model(value)
    if isinstance(value, str):
        return mask_urls(value)  # a server's URL (api_base, ...) with its credentials masked
    return value
