"""The run's flat settings: one table for the command line, sweep files and Python.

`SETTINGS` is the one table of flat settings: each key is a command-line flag
(``max_tokens`` is ``--max-tokens``), a sweep-file option, and a path into the config.
`from_settings` builds a config from such a mapping; `add_arguments` builds the argparse
flags from the same table. (`retrievers.flags` holds the retriever's part of the table,
`eval.plumbing.flags` the machinery every table's flags are made with.)
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agents.config.registry import AGENTS
from agents.config.run_config import ConfigError, EvalConfig, LLMConfig, RunConfig
from agents.config.serialise import flatten, to_dict
from agents.config.stages import STAGE_WIDE, option_pairs, stages_with
from agents.llm.cache import CACHE_MODES
from agents.llm.sampling import PRESETS
from agents.llm.serving import ROUTINGS, SERVERS
from agents.llm.text import REASONING_SETTINGS
from eval.evaluate import MISSING_POLICIES, TIE_ORDERS
from eval.plumbing.argtypes import (
    integer_from,
    non_negative_float,
    non_negative_int,
    on_off,
    positive_float,
    positive_int,
    unit_float,
)
from eval.plumbing.flags import Setting, add_flags
from retrievers.flags import TASK_SETTINGS, retriever_from_settings, retriever_settings


def _run_name_arg(text: str) -> str:
    from eval.plumbing.files import check_component

    try:
        return check_component(text, "--run-name")
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("--run-name ")) from None


SETTINGS: dict[str, Setting] = {
    "agent": Setting("agent", "the first stage", choices=tuple(AGENTS)),
    "dataset": TASK_SETTINGS["dataset"],
    **retriever_settings(),  # from retrievers.config's fields: one help text each
    "model": Setting("llm.model", "LLM: any litellm model, or local/<name> (embedded)"),
    "api_base": Setting(
        "llm.api_base",
        "LLM: base URL of an OpenAI-compatible server, or several joined by commas (replicas)",
    ),
    "server": Setting(
        "llm.server",
        "what serves --api-base: vllm and sglang continue turns on their chat endpoint, "
        "llamacpp on its completions endpoint, openai (generic) only chats; auto: vllm for "
        "hosted_vllm/ models, else openai",
        choices=SERVERS,
    ),
    "chat_template": Setting(
        "llm.chat_template",
        "--server llamacpp: how prompts are rendered: chatml, a Jinja file or a tokenizer folder",
    ),
    "routing": Setting(
        "llm.routing", "several --api-base URLs: litellm Router's strategy", choices=ROUTINGS
    ),
    "preset": Setting(
        "llm.preset",
        "sampling and length of every LLM call: default (temperature 0, 512 tokens; a budget "
        "reasoning fits for reasoning models) or paper (each method as its original ran it, "
        "per model family; see agents/llm/sampling.py)",
        choices=PRESETS,
    ),
    "temperature": Setting(
        "llm.temperature", "LLM sampling temperature (default: the preset's)", non_negative_float
    ),
    "max_tokens": Setting(
        "llm.max_tokens",
        "tokens per LLM call (max_completion_tokens for reasoning models; default: the preset's)",
        positive_int,
    ),
    "top_p": Setting("llm.top_p", "nucleus sampling (default: the preset's)", unit_float),
    "top_k_sampling": Setting(
        "llm.top_k_sampling",
        "sampling top_k, open-model servers only (default: the preset's)",
        integer_from(-1),
    ),
    "seed": Setting("llm.seed", "sampling seed (default: the preset's)", non_negative_int),
    "repetition_penalty": Setting(
        "llm.repetition_penalty", "open-model servers only (default: the preset's)", positive_float
    ),
    "reasoning": Setting(
        "reasoning",
        "how generated texts are read: auto (the model's family, R2MED's list of reasoning "
        "models), none, or a family whose response alone is searched",
        choices=REASONING_SETTINGS,
    ),
    "cache": Setting(
        "llm.cache", "LLM response cache: use, refresh (call again) or off", choices=CACHE_MODES
    ),  # fmt: skip
    "concurrency": Setting("llm.concurrency", "queries in flight", positive_int),
    "rate_limit": Setting(
        "llm.rate_limit", "cap on LLM requests per second", positive_float, metavar="PER_SECOND"
    ),
    "local_instances": Setting(
        "llm.local_instances",
        "embedded models: llama.cpp instances serving the calls (default: as many as the cores "
        "and --concurrency allow, within the available memory); outputs do not change",
        positive_int,
        metavar="N",
    ),
    "local_prefix_reuse": Setting(
        "llm.local_prefix_reuse",
        "embedded models: restore prompt prefixes already evaluated, in whole chunks, instead "
        "of evaluating them again; outputs do not change",
        on_off,
        metavar="{on,off}",
    ),
    "depth": Setting("eval.depth", "documents kept per query", positive_int),
    "missing": Setting(
        "eval.missing",
        "unanswered queries count 0 (zero) or are left out as R2MED's code does (present)",
        choices=MISSING_POLICIES,
    ),
    "ties": Setting(
        "eval.ties",
        "tied scores: trec (doc id descending, as trec_eval and R2MED's numbers) or ascending",
        choices=TIE_ORDERS,
    ),
    "pad": Setting(
        "eval.pad",
        "fill rankings shorter than --depth with zero-score documents in corpus order, as "
        "R2MED's BM25 script does",
        switch=True,
    ),
    "limit": Setting("limit", "only the first N queries per task", positive_int),
    "timeout": TASK_SETTINGS["timeout"],
    "generations": Setting(
        "generations",
        "hyde, query2doc, lamer: read each query's text instead of calling a model: "
        "r2med:<llm> (R2MED's released generations), r2med:<llm>@<folder> (the same layout "
        "on disk), a .jsonl file of id/hy_doc, or a run folder of ours (also for reason)",
        metavar="SOURCE",
    ),
    "prompt": Setting(
        "prompt_files",
        "use PATH for prompt NAME (hyde/exam=my.txt, or hyde=my.txt for every kind)",
        many=True,
        metavar="NAME=PATH",
    ),
    "option": Setting(
        "options", "an agent setting, e.g. max_turns=8", many=True, metavar="KEY=VALUE"
    ),
    "final_ranking": Setting(
        "options.final_ranking",
        "search-o1/r1: rank with the final answer, fuse every list, or the whole trace; "
        "tool-search: its submitted list then the fusion (submit), or the fusion (fuse)",
        choices=("answer", "fuse", "trace", "submit"),
        flag_only=True,
    ),
    "max_searches": Setting(
        "options.max_searches", "iterative agents", non_negative_int, flag_only=True
    ),
    "max_turns": Setting("options.max_turns", "iterative agents", positive_int, flag_only=True),
    "top_k": Setting(
        "options.top_k", "docs per search (iterative agents)", positive_int, flag_only=True
    ),  # fmt: skip
    "rerank": Setting(
        "rerank",
        "a rerank stage after the agent, in order: KIND[,key=value...]",
        many=True,
        metavar="STAGE",
    ),
    "rerank_model": Setting(
        "", "the LLM of every LLM rerank stage without its own (default: --model)"
    ),
    "rerank_api_base": Setting(
        "", "the server of the LLM rerank stages' model when it is not --model's"
    ),
    "rerank_depth": Setting(
        "", "documents every rerank stage reorders, unless its spec says", positive_int
    ),
    "rerank_window": Setting(
        "", "listwise stages: passages per window, unless the spec says", positive_int
    ),
    "rerank_step": Setting(
        "", "listwise stages: how far each window moves up, unless the spec says", positive_int
    ),
    "runs_dir": Setting("runs_dir", "where run folders go"),
    "run_name": Setting(
        "run_name", "run folder name inside --runs-dir (default: from the config)", _run_name_arg
    ),
    "cache_dir": TASK_SETTINGS["cache_dir"],
}


def from_settings(values: Mapping[str, Any]) -> RunConfig:
    """A config from flat settings (keys of `SETTINGS`); anything not given keeps its default.

    Values may be text (from flags) or values (from Python or TOML); both are checked by
    the dataclasses, so a bad value is refused the same way whoever gives it.
    """
    unknown = sorted(set(values) - set(SETTINGS))
    if unknown:
        raise ConfigError(f"{unknown[0]}: unknown setting; known: {', '.join(SETTINGS)}")
    groups: dict[str, dict[str, Any]] = {}
    retriever_values: dict[str, Any] = {}
    top: dict[str, Any] = {}
    options: dict[str, Any] = {}
    stage_wide = {STAGE_WIDE[k]: v for k, v in values.items() if k in STAGE_WIDE}
    for key, value in values.items():
        if key in STAGE_WIDE:
            continue
        path = SETTINGS[key].path
        if key == "option":
            options.update(option_pairs(value, "option"))
        elif path.startswith("options."):
            options[path.split(".", 1)[1]] = value
        elif key == "prompt":
            top["prompt_files"] = {k: str(v) for k, v in _prompt_files(value).items()}
        elif path.startswith("retriever."):
            retriever_values[key] = value
        elif key == "rerank":
            top["rerank"] = stages_with(value, stage_wide)
        elif "." in path:
            group, _, name = path.rpartition(".")
            groups.setdefault(group, {})[name] = value
        else:
            top[path] = value
    if stage_wide and "rerank" not in values:
        flag = next(k for k in STAGE_WIDE if k in values)
        raise ConfigError(f"{flag}: there is no rerank stage to apply it to (give --rerank)")
    for key in ("runs_dir", "cache_dir"):
        if key in top and top[key] is not None:
            top[key] = str(top[key])
    try:
        retriever = retriever_from_settings(retriever_values)
    except ValueError as e:  # its messages name the field ("retriever.dense.batch_size")
        raise ConfigError(str(e)) from None
    llm = LLMConfig(**groups["llm"]) if "llm" in groups else None
    return RunConfig(
        **top,
        options=options,
        retriever=retriever,
        llm=llm,
        eval=EvalConfig(**groups.get("eval", {})),
    )


def _prompt_files(items: Any) -> dict[str, Path]:
    from prompts import parse_prompt_overrides

    if isinstance(items, Mapping):
        items = [f"{k}={v}" for k, v in items.items()]
    return parse_prompt_overrides(list(items))


def add_arguments(parser: argparse.ArgumentParser, only: Sequence[str] | None = None) -> None:
    """One flag per setting (or per setting in `only`), each defaulting to "not given" so
    the config's default applies."""
    add_flags(parser, SETTINGS, _flat_defaults(), only)


def settings_from_args(args: argparse.Namespace) -> dict[str, Any]:
    return {k: v for k, v in vars(args).items() if k in SETTINGS and v is not None}


def _flat_defaults() -> dict[str, Any]:
    flat = flatten({**to_dict(RunConfig(agent="hyde")), "options": {}, "prompts": {}, "rerank": []})
    # decided by a run unless given (agents.config.run_config.RunConfig: the preset's, the families'
    # rule), as retrievers.serve shows them
    flat["retriever.dense.r2med_rules"] = None
    flat["retriever.dense.ignore_identical_ids"] = None
    return {key: flat.get(s.path) for key, s in SETTINGS.items()}
