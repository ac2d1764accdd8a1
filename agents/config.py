"""The run configuration: one typed object for a whole run, whoever builds it.

A `RunConfig` holds the dataset, the first stage (an agent with its options and a
`retrievers.config.RetrieverConfig`), the rerank stages, the LLM and evaluation settings and
where the run goes. Defaults and checks live on the dataclasses (``__post_init__``), so the
command line, a sweep file and Python code all get the same object and the same refusals.

`SETTINGS` is the one table of flat settings: each key is a command-line flag
(``max_tokens`` is ``--max-tokens``), a sweep-file option, and a path into the config.
`from_settings` builds a config from such a mapping; `add_arguments` builds the argparse
flags from the same table. ``config.json`` is `to_dict`; `from_dict` reads it back into an
equal object (passwords in URLs are masked on the way out, so those two differ there).
`binding` is the part of a config that decides a run's output: a run folder is bound to it,
and settings outside it (concurrency, rate limit, cache mode, where things go) may change
between a run and its resumption.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agents.llm.cache import CACHE_MODES
from agents.llm.sampling import PRESETS
from agents.llm.sampling import SETTINGS as SAMPLING_SETTINGS
from agents.llm.serving import ROUTINGS, SERVERS, load_template
from agents.llm.text import REASONING_SETTINGS
from agents.naming import run_folder_name
from agents.registry import AGENTS, STAGES, OptionSpec
from agents.secrets import public_url, redact
from eval.argtypes import (
    check_field,
    integer_from,
    non_negative_float,
    non_negative_int,
    on_off,
    one_of,
    optional,
    positive_float,
    positive_int,
    unit_float,
)
from eval.evaluate import MISSING_POLICIES, TIE_ORDERS
from eval.flags import Setting, add_flags, key_values
from eval.retry import DEFAULT_TIMEOUT_S
from eval.trec import DUPLICATE_RULES, RUN_FILE_ORDERS
from retrievers.config import RetrieverConfig
from retrievers.flags import TASK_SETTINGS, retriever_from_settings, retriever_settings

DEFAULT_MODEL = "local/qwen2.5-coder-0.5b"


class ConfigError(ValueError):
    """A setting no run can use; the message names the setting."""


@dataclass(frozen=True)
class LLMConfig:
    model: str = DEFAULT_MODEL
    api_base: str | None = None
    # agents.llm.sampling: the preset gives every call's sampling and length per method, node
    # and model family; a setting given here (not None) wins over it for every call
    preset: str = "default"
    temperature: float | None = None
    max_tokens: int | None = None
    top_p: float | None = None
    top_k_sampling: int | None = None  # sent as top_k; named as Search-o1 names its flag
    seed: int | None = None
    repetition_penalty: float | None = None
    cache: str = "use"  # use | refresh (call again, overwrite) | off
    concurrency: int = 4  # queries in flight
    rate_limit: float | None = None  # requests per second to the provider
    server: str = "auto"  # what serves api_base (agents.llm.serving): how a turn is continued
    chat_template: str | None = None  # llamacpp: chatml, a Jinja file or a tokenizer folder
    routing: str = "simple-shuffle"  # several api_base URLs: how requests are spread
    # local/ models: llama.cpp instances serving the calls (None: as many as the cores and the
    # concurrency allow, within the available memory); outputs do not depend on it
    local_instances: int | None = None
    # local/ models: restore prompt prefixes already evaluated (whole chunks of
    # agents.llm.prefix_cache.CHUNK tokens) instead of evaluating them again; outputs do not
    # change
    local_prefix_reuse: bool = True

    def __post_init__(self) -> None:
        for name, checker in (
            ("preset", one_of(PRESETS)),
            ("temperature", optional(non_negative_float)),
            ("max_tokens", optional(positive_int)),
            ("top_p", optional(unit_float)),
            ("top_k_sampling", optional(integer_from(-1))),
            ("seed", optional(non_negative_int)),
            ("repetition_penalty", optional(positive_float)),
            ("concurrency", optional(positive_int)),
            ("rate_limit", optional(positive_float)),
            ("local_instances", optional(positive_int)),
            ("local_prefix_reuse", on_off),
            ("cache", one_of(CACHE_MODES)),
            ("server", one_of(SERVERS)),
            ("routing", one_of(ROUTINGS)),
        ):
            check_field(self, name, "llm", checker, ConfigError)
        if not isinstance(self.model, str) or not self.model:
            raise ConfigError(f"llm.model: expected a model name, got {self.model!r}")
        if self.chat_template is not None:
            if self.server != "llamacpp":
                raise ConfigError(
                    f"llm.chat_template {self.chat_template}: only --server llamacpp has "
                    "prompts rendered here (vLLM and SGLang render the model's own template)"
                )
            try:  # read now, so that a bad template is refused before any run folder exists
                load_template(self.chat_template)
            except ValueError as e:
                raise ConfigError(f"llm.{str(e).lstrip('-').replace('-', '_', 1)}") from None

    def explicit_sampling(self) -> dict[str, Any]:
        """The sampling settings given (not None): each wins over the preset's value."""
        given = {k: getattr(self, k) for k in SAMPLING_SETTINGS}
        return {SAMPLING_SETTINGS[k]: v for k, v in given.items() if v is not None}


@dataclass(frozen=True)
class EvalConfig:
    depth: int = 100  # documents kept per query
    missing: str = "zero"  # unanswered qrels queries count 0, or are left out ("present")
    ties: str = "trec"  # tied scores as trec_eval orders them, or doc id ascending
    pad: bool = False  # fill short rankings with zero-score docs in corpus order (R2MED)

    def __post_init__(self) -> None:
        check_field(self, "depth", "eval", optional(positive_int), ConfigError)
        check_field(self, "missing", "eval", one_of(MISSING_POLICIES), ConfigError)
        check_field(self, "ties", "eval", one_of(TIE_ORDERS), ConfigError)
        if not isinstance(self.pad, bool):
            raise ConfigError(f"eval.pad: expected true or false, got {self.pad!r}")


@dataclass(frozen=True)
class StageConfig:
    """One rerank stage: a kind from `agents.registry.STAGES` and its typed options."""

    kind: str
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in STAGES:
            known = ", ".join(STAGES) or "none yet"
            raise ConfigError(f"rerank: unknown stage {self.kind!r}; known: {known}")
        spec = STAGES[self.kind]
        object.__setattr__(self, "options", typed_options(spec, self.options, "rerank"))


@dataclass(frozen=True)
class RunConfig:
    agent: str = "none"
    dataset: str = "demo"  # 'demo', a folder, an R2MED task, 'r2med', or a comma list
    options: Mapping[str, Any] = field(default_factory=dict)  # the agent's, completed here
    retriever: RetrieverConfig = field(default_factory=RetrieverConfig)
    rerank: tuple[StageConfig, ...] = ()
    llm: LLMConfig | None = None  # None when no stage calls a model
    eval: EvalConfig = field(default_factory=EvalConfig)
    limit: int | None = None  # only the first N queries per task
    prompt_files: Mapping[str, str] = field(default_factory=dict)  # override name -> file
    prompts: Mapping[str, str] = field(default_factory=dict)  # recorded: name -> sha256
    runs_dir: str = "runs"
    run_name: str | None = None  # default: from the settings that tell runs apart
    cache_dir: str | None = None  # default: eval.datasets.default_cache_dir()
    # a finished run whose saved first-stage lists (and any leading stages this run shares with
    # it) are reused instead of computed: `python -m agents.rerank RUN_FOLDER`
    source_run: str | None = None
    # a TREC run file whose lists are the first stage instead of an agent's (agent "none", one
    # task): `python -m agents.rerank RUN.txt --task TASK`; the retriever settings go unused
    run_file: str | None = None
    # recorded: sha256 of the run file's bytes as read, so a changed file is refused on resume
    run_file_sha256: str | None = None
    # a (qid, docid) pair the run file lists twice: refused, as trec_eval refuses it, or kept
    # at its highest score ("max"; ReasonRank's runs of tasks whose corpus repeats ids)
    run_file_duplicates: str = "refuse"
    # a query's documents in trec_eval's order ("score") or as the file lists them ("file",
    # as ReasonRank's loader reads its runs)
    run_file_order: str = "score"
    # where a generate-then-retrieve agent's texts come from instead of an LLM
    # (agents.generations): r2med:<llm>[@<folder>], a .jsonl file or a run folder
    generations: str | None = None
    # recorded: task folder -> sha256 of the generation file read for it
    generation_sha256: Mapping[str, str] = field(default_factory=dict)
    # how generated texts are read (agents.llm.text): auto (the writing model's family, as
    # R2MED's list names them), none, or a reasoning family whose response alone is searched
    reasoning: str = "auto"
    # recorded: "<agent or stage>/<node>" -> what its calls are sent (agents.llm.sampling)
    sampling: Mapping[str, Any] = field(default_factory=dict)
    # recorded: sha256 of the chat template prompts are rendered with here (--server llamacpp:
    # the file given, or the one the server reports), as a prompt file's text is recorded
    chat_template_sha256: str | None = None
    # recorded: local/ model -> what decides its floats besides the request (the chunk its
    # prompts are evaluated in, agents.llm.prefix_cache), as the chat template is recorded
    embedded: Mapping[str, Any] = field(default_factory=dict)
    # recorded: task folder -> the index each remote:URL retriever serves it (the server's
    # /health fingerprint: corpus, retriever settings, version), as a prompt's text is recorded
    retriever_index: Mapping[str, Any] = field(default_factory=dict)
    # seconds an LLM or embedding call waits for the server's answer, per attempt
    timeout: float = DEFAULT_TIMEOUT_S
    # recorded: what decides a fresh run's outputs on this machine (llama.cpp's build and the
    # CPU, for embedded models); not part of the binding: a cached rerun is the same anywhere
    machine: Mapping[str, Any] = field(default_factory=dict)

    def _given_options(self) -> dict[str, Any]:
        """The options given, over those the preset gives the agent for its model
        (agents.llm.sampling.OPTION_RULES): a given option wins, as a given sampling setting
        wins over the preset's."""
        from agents.llm.sampling import preset_options

        llm = self.llm if self.llm is not None else LLMConfig()
        preset = preset_options(llm.preset, self.agent, llm.model).values
        defaults = AGENTS[self.agent].defaults
        return {**{k: v for k, v in preset.items() if k in defaults}, **self.options}

    def __post_init__(self) -> None:
        if self.agent not in AGENTS:
            raise ConfigError(f"agent: unknown agent {self.agent!r}; known: {', '.join(AGENTS)}")
        spec = AGENTS[self.agent]
        object.__setattr__(self, "options", typed_options(spec, self._given_options(), "option"))
        if self.generations is not None:
            from agents.generations import parse_source

            try:
                parse_source(self.generations, self.agent)
            except ValueError as e:
                raise ConfigError(f"generations {self.generations!r}: {e}") from None
        object.__setattr__(self, "generation_sha256", dict(self.generation_sha256))
        self._check_run_file()
        object.__setattr__(self, "retriever_index", dict(self.retriever_index))
        check_field(self, "limit", "", optional(positive_int), ConfigError)
        stages = tuple(s if isinstance(s, StageConfig) else StageConfig(**s) for s in self.rerank)
        object.__setattr__(self, "rerank", stages)
        needs_llm = self.agent_calls_llm or any(STAGES[s.kind].uses_llm for s in stages)
        if not needs_llm:
            object.__setattr__(self, "llm", None)  # so --model cannot tell such runs apart
        elif self.llm is None:
            object.__setattr__(self, "llm", LLMConfig())
        if self.llm is not None:
            # an LLM stage without a model of its own reranks with the run's, named in full
            # so that config.json says which model reranked
            stages = tuple(
                dataclasses.replace(s, options={**s.options, "model": self.llm.model})
                if STAGES[s.kind].uses_llm and s.options.get("model") == ""
                else s
                for s in stages
            )
            object.__setattr__(self, "rerank", stages)
        if self.run_name is not None:
            from eval.files import check_component

            check_component(self.run_name, "run_name")
        object.__setattr__(self, "prompt_files", dict(self.prompt_files))
        object.__setattr__(self, "prompts", dict(self.prompts))
        object.__setattr__(self, "sampling", dict(self.sampling))
        object.__setattr__(self, "embedded", dict(self.embedded))
        check_field(self, "reasoning", "", one_of(REASONING_SETTINGS), ConfigError)
        check_field(self, "timeout", "", positive_float, ConfigError)
        object.__setattr__(self, "machine", dict(self.machine))

    def _check_run_file(self) -> None:
        """A run file is the whole first stage: no agent, replay or source run beside it."""
        check_field(self, "run_file_duplicates", "", one_of(DUPLICATE_RULES), ConfigError)
        check_field(self, "run_file_order", "", one_of(RUN_FILE_ORDERS), ConfigError)
        if self.run_file is None:
            for name, default in (("run_file_duplicates", "refuse"), ("run_file_order", "score")):
                if getattr(self, name) != default:
                    raise ConfigError(f"{name} {getattr(self, name)!r}: there is no run file")
            return
        if not isinstance(self.run_file, str) or not self.run_file:
            raise ConfigError(f"run_file: expected a file path, got {self.run_file!r}")
        for name, value, alone in (
            ("agent", self.agent, "none"),
            ("generations", self.generations, None),
            ("source_run", self.source_run, None),
        ):
            if value != alone:
                raise ConfigError(
                    f"{name} {value!r}: the first stage is run_file {self.run_file}'s lists; "
                    f"{name} must be {alone!r} beside it"
                )

    @property
    def uses_llm(self) -> bool:
        return self.llm is not None

    @property
    def agent_calls_llm(self) -> bool:
        """Whether the first stage calls a model: not when its texts come from a source."""
        return AGENTS[self.agent].uses_llm and self.generations is None

    def llm_targets(self) -> list[tuple[str, str | None]]:
        """Every (model, api_base) the run calls: the agent's, then each LLM stage's."""
        targets = []
        if self.llm is not None and self.agent_calls_llm:
            targets.append((self.llm.model, self.llm.api_base))
        targets += [self.stage_llm(s) for s in self.rerank if STAGES[s.kind].uses_llm]
        return list(dict.fromkeys(targets))

    def stage_llm(self, stage: StageConfig) -> tuple[str, str | None]:
        """The (model, api_base) an LLM stage calls: a stage on the run's model uses the
        run's server unless it names its own; a stage on another model uses its own
        api_base or its provider's endpoint (never the run's server, which serves another
        model)."""
        assert self.llm is not None
        model = stage.options["model"]
        api_base = stage.options.get("api_base") or None
        if api_base is None and model == self.llm.model:
            api_base = self.llm.api_base
        return model, api_base


def typed_options(spec: OptionSpec, given: Mapping[str, Any], what: str) -> dict[str, Any]:
    """``spec``'s defaults with ``given`` over them, each typed like its default, then
    checked by the spec: the one place an agent's or a stage's options are defaulted."""
    options = dict(spec.defaults)
    for key, value in given.items():
        if key not in options:
            known = ", ".join(options) or "none"
            raise ConfigError(f"{what} {key}={value!r}: {spec.name!r} has options: {known}")
        options[key] = _typed_like(options[key], value, f"{what} {key}={value}")
    if spec.check_options:
        try:
            spec.check_options(options)
        except ValueError as e:
            raise ConfigError(f"{spec.name}: {e}") from None
    return options


_BOOLS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}


def _typed_like(default: Any, value: Any, where: str) -> Any:
    """``value`` (text from a flag, or a value from Python or TOML) as the default's type."""
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        if str(value).strip().lower() not in _BOOLS:
            raise ConfigError(f"{where}: expected true or false")
        return _BOOLS[str(value).strip().lower()]
    if default is None or isinstance(default, str):
        return value if default is None else str(value)
    kind = type(default)
    noun = {int: "an integer", float: "a number"}.get(kind, kind.__name__)
    if isinstance(value, bool):
        raise ConfigError(f"{where}: expected {noun}")
    try:
        typed = kind(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: expected {noun}") from None
    if kind is int and not isinstance(value, str) and typed != value:
        raise ConfigError(f"{where}: expected {noun}")
    if isinstance(typed, float) and not math.isfinite(typed):
        raise ConfigError(f"{where}: expected a finite number")
    return typed


def default_run_name(config: RunConfig, variant: str | None = None) -> str:
    """The run folder's name when none is given: the settings that tell runs apart
    (`agents.naming.run_folder_name`; a rerank of a finished run is named after it)."""
    return run_folder_name(config, variant)


# --- serialising ---------------------------------------------------------------------------

RUNTIME = ("runs_dir", "run_name", "cache_dir", "prompt_files", "timeout", "machine")  # not what
LLM_RUNTIME = (  # how fast
    "cache",
    "concurrency",
    "rate_limit",
    "routing",
    "local_instances",
    "local_prefix_reuse",
)


def to_dict(cfg: RunConfig) -> dict[str, Any]:
    """The config as plain JSON data (``config.json``), passwords in URLs and keys in
    embedding options masked."""
    data = dataclasses.asdict(cfg)
    data["rerank"] = [dict(s) for s in data["rerank"]]
    for stage in data["rerank"]:
        if stage["options"].get("api_base"):
            masked = public_url(stage["options"]["api_base"])
            stage["options"] = {**stage["options"], "api_base": masked}
    if data["llm"] is not None:
        data["llm"]["api_base"] = public_url(data["llm"]["api_base"])
    data["retriever"]["api"]["api_base"] = public_url(data["retriever"]["api"]["api_base"])
    # an embedding option's value may hold a key (an environment secret, a `Bearer` token)
    data["retriever"]["api"]["params"] = _redacted(data["retriever"]["api"]["params"])
    return data


def _redacted(value: Any) -> Any:
    """``value`` (JSON data) with every string in it passed through `redact`."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, Mapping):
        return {k: _redacted(v) for k, v in value.items()}
    return [_redacted(v) for v in value] if isinstance(value, list) else value


def from_dict(data: Mapping[str, Any]) -> RunConfig:
    """The config `to_dict` wrote; unknown keys are refused, naming them."""
    _known(data, RunConfig, "")
    values = dict(data)
    if values.get("llm") is not None:
        _known(values["llm"], LLMConfig, "llm.")
        values["llm"] = LLMConfig(**values["llm"])
    if "eval" in values:
        _known(values["eval"], EvalConfig, "eval.")
        values["eval"] = EvalConfig(**values["eval"])
    if "retriever" in values:
        values["retriever"] = RetrieverConfig.from_dict(values["retriever"])
    values["rerank"] = tuple(StageConfig(**s) for s in values.get("rerank", ()))
    return RunConfig(**values)


def _known(data: Mapping[str, Any], cls: type, prefix: str) -> None:
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ConfigError(
            f"{prefix}{unknown[0]}: unknown setting; known: {', '.join(sorted(names))}"
        )


def binding(cfg: RunConfig) -> dict[str, Any]:
    """What a run folder is bound to: everything that decides the output."""
    data = to_dict(cfg)
    for key in RUNTIME:
        data.pop(key)
    if data["llm"] is not None:
        for key in LLM_RUNTIME:
            data["llm"].pop(key)
    return data


def differences(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """The settings (by their flat names where they have one) in which two bindings differ."""
    flat_old, flat_new = _flatten(old), _flatten(new)
    paths = sorted(p for p in set(flat_old) | set(flat_new) if flat_old.get(p) != flat_new.get(p))
    by_path = {s.path: key for key, s in SETTINGS.items()}
    names = []
    for path in paths:
        top = path.split(".")[0]
        grouped = ("options", "prompts", "rerank", "sampling", "machine", "generation_sha256",
                   "retriever_index", "embedded")  # fmt: skip
        name = by_path.get(path) or (top if top in grouped else path)
        if top == "options":
            name = path.split(".", 1)[1]
        names.append(name)
    return list(dict.fromkeys(names))


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, Mapping) and not prefix.startswith(("prompts", "rerank")):
        out: dict[str, Any] = {}
        for key, value in data.items():
            out.update(_flatten(value, f"{prefix}{key}."))
        return out if data else {prefix.rstrip("."): data}
    return {prefix.rstrip("."): data}


# --- flat settings: flags, sweep options, Python keyword arguments --------------------------


def _run_name_arg(text: str) -> str:
    from eval.files import check_component

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
            options.update(_pairs(value, "option"))
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


# settings that fill one option of every rerank stage having it, where its spec does not
STAGE_WIDE = {
    "rerank_model": "model",
    "rerank_api_base": "api_base",
    "rerank_depth": "depth",
    "rerank_window": "window",
    "rerank_step": "step",
}


def parse_stage(text: str, wide: Mapping[str, Any] | None = None) -> StageConfig:
    """``"kind[:model],key=value,..."`` -> a StageConfig (options typed by the stage's
    defaults); ``cross:BAAI/bge-reranker-v2-m3`` is ``cross`` with option model=....

    ``wide`` holds options for every stage (``--rerank-depth``, ...); a stage takes those it
    has and its text does not set. A model is only ever an LLM stage's to take this way: a
    cross-encoder is always named by its spec.
    """
    if isinstance(text, StageConfig):
        return text
    head, *pairs = [p.strip() for p in str(text).split(",")]
    kind, colon, model = head.partition(":")
    options = _pairs(pairs, f"rerank {kind}")
    if colon:
        if "model" in options:
            raise ConfigError(f"rerank {text!r}: the model is given twice")
        options["model"] = model
    for name, value in (wide or {}).items():
        if name not in options and takes_wide(kind, name):
            options[name] = value
    return StageConfig(kind, options)


def takes_wide(kind: str, name: str) -> bool:
    """Whether a stage of ``kind`` takes the stage-wide option ``name`` (a `STAGE_WIDE`
    value): it has that option, and a model only if it calls an LLM."""
    spec = STAGES.get(kind)
    return spec is not None and name in spec.defaults and (name != "model" or spec.uses_llm)


def stage_kind(text: str) -> str:
    """The kind a ``--rerank`` spec names (``cross:m,depth=5`` -> ``cross``), unchecked."""
    return str(text).split(",", 1)[0].partition(":")[0].strip()


def stages_with(texts: Sequence[Any], wide: Mapping[str, Any]) -> tuple[StageConfig, ...]:
    """The stages of ``texts``, each given the ``wide`` options it has; a wide option that
    no stage has is refused, naming its flag."""
    stages = tuple(parse_stage(t, wide) for t in texts)
    for key, name in STAGE_WIDE.items():
        if name not in wide:
            continue
        if not any(takes_wide(s.kind, name) for s in stages):
            kinds = ", ".join(s.kind for s in stages)
            raise ConfigError(f"{key} {wide[name]}: no rerank stage has option {name} ({kinds})")
    return stages


def _pairs(items: Any, what: str) -> dict[str, Any]:
    try:
        return key_values(items, what)
    except ValueError as e:
        raise ConfigError(str(e)) from None


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
    flat = _flatten(
        {**to_dict(RunConfig(agent="hyde")), "options": {}, "prompts": {}, "rerank": []}
    )
    return {key: flat.get(s.path) for key, s in SETTINGS.items()}
