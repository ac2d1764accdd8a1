"""The run configuration: one typed object for a whole run, whoever builds it.

A `RunConfig` holds the dataset, the first stage (an agent with its options and a
`retrievers.config.RetrieverConfig`), the rerank stages, the LLM and evaluation settings and
where the run goes: the user's inputs. What the run records about itself as it is planned (the
prompt texts' hashes, what each call is sent, the machine, ...) is apart, in `Recorded`
(``RunConfig.recorded``). Defaults and checks live on the dataclasses (``__post_init__``), so
the command line, a sweep file and Python code all get the same object and the same refusals.

The jobs around it have modules of their own: `agents.config.settings` (the flat settings: flags,
sweep options, `from_settings`), `agents.config.stages` (``--rerank`` specs),
`agents.config.serialise` (``config.json``: `to_dict`, `from_dict`) and `agents.config.binding`
(what a run folder is bound to, and how two bindings differ).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agents.config.naming import run_folder_name
from agents.config.registry import AGENTS, STAGES, OptionSpec
from agents.llm.cache import CACHE_MODES
from agents.llm.sampling import PRESETS
from agents.llm.sampling import SETTINGS as SAMPLING_SETTINGS
from agents.llm.serving import ROUTINGS, SERVERS, load_template, resolve_server
from agents.llm.text import REASONING_SETTINGS
from eval.evaluate import MISSING_POLICIES, TIE_ORDERS
from eval.plumbing.argtypes import (
    check_fields,
    integer_from,
    non_negative_float,
    non_negative_int,
    one_of,
    optional,
    positive_float,
    positive_int,
    server_urls,
    unit_float,
)
from eval.plumbing.decimal_text import parse_float, parse_int
from eval.plumbing.quoting import quoted
from eval.plumbing.retry import DEFAULT_TIMEOUT_S
from eval.trec import DUPLICATE_RULES, RUN_FILE_ORDERS
from retrievers.config import RetrieverConfig

DEFAULT_MODEL = "local/qwen2.5-coder-0.5b"


class ConfigError(ValueError):
    """A setting no run can use; the message names the setting."""


# each field's rule, the one its flag applies to its text too (agents.config.settings.SETTINGS);
# every field is also checked against its annotation (eval.plumbing.argtypes.check_fields)
_LLM_RULES = {
    "api_base": optional(server_urls),
    "preset": one_of(PRESETS),
    "temperature": optional(non_negative_float),
    "max_tokens": optional(positive_int),
    "top_p": optional(unit_float),
    "top_k_sampling": optional(integer_from(-1)),
    "seed": optional(non_negative_int),
    "repetition_penalty": optional(positive_float),
    "concurrency": positive_int,
    "rate_limit": optional(positive_float),
    "local_instances": optional(positive_int),
    "cache": one_of(CACHE_MODES),
    "server": one_of(SERVERS),
    "routing": one_of(ROUTINGS),
}


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
    # agents.llm.embedded.prefix_cache.CHUNK tokens) instead of evaluating them again; outputs do
    # not change
    local_prefix_reuse: bool = True

    def __post_init__(self) -> None:
        check_fields(self, "llm", _LLM_RULES, ConfigError)
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
        rules = {
            "depth": positive_int,
            "missing": one_of(MISSING_POLICIES),
            "ties": one_of(TIE_ORDERS),
        }
        check_fields(self, "eval", rules, ConfigError)


@dataclass(frozen=True)
class StageConfig:
    """One rerank stage: a kind from `agents.config.registry.STAGES` and its typed options."""

    kind: str
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_fields(self, "rerank", {}, ConfigError)
        if self.kind not in STAGES:
            known = ", ".join(STAGES) or "none yet"
            raise ConfigError(f"rerank: unknown stage {self.kind!r}; known: {known}")
        spec = STAGES[self.kind]
        # the options given, before their defaults: the run fills the others from its preset
        # and its run-wide settings (`RunConfig`); not a field, so neither config.json nor
        # equality sees it
        object.__setattr__(self, "_given", frozenset(self.options))
        object.__setattr__(self, "options", typed_options(spec, self.options, "rerank"))
        if self.options.get("api_base"):
            try:
                server_urls(self.options["api_base"])
            except ValueError as e:
                raise ConfigError(f"rerank {self.kind} api_base: {e}") from None

    @property
    def given(self) -> frozenset[str]:
        """The options given to this stage (the rest are its defaults)."""
        return getattr(self, "_given", frozenset(self.options))


@dataclass(frozen=True)
class Recorded:
    """What a run records about itself as it is planned, beside the settings it was given:
    what it read and what it sends, so that a run folder is bound to them too (but `machine`)
    and a resumed run that would read or send other things is refused."""

    prompts: Mapping[str, str] = field(default_factory=dict)
    """Prompt name -> sha256 of the text sent."""
    run_file_sha256: str | None = None
    """sha256 of the run file's bytes as read, so a changed file is refused on resume."""
    generation_sha256: Mapping[str, str] = field(default_factory=dict)
    """Task folder -> sha256 of the generation file read for it."""
    sampling: Mapping[str, Any] = field(default_factory=dict)
    """``"<agent or stage>/<node>"`` -> what its calls are sent (agents.llm.sampling)."""
    chat_template_sha256: str | None = None
    """sha256 of the chat template prompts are rendered with here (--server llamacpp: the
    file given, or the one the server reports), as a prompt file's text is recorded."""
    embedded: Mapping[str, Any] = field(default_factory=dict)
    """local/ model -> what decides its floats besides the request (the chunk its prompts are
    evaluated in, agents.llm.embedded.prefix_cache), as the chat template is recorded."""
    retriever_index: Mapping[str, Any] = field(default_factory=dict)
    """Task folder -> the index each remote:URL retriever serves it (the server's /health
    fingerprint: corpus, retriever settings, version), as a prompt's text is recorded."""
    machine: Mapping[str, Any] = field(default_factory=dict)
    """What decides a fresh run's outputs on this machine (llama.cpp's build and the CPU, for
    embedded models); not part of the binding: a cached rerun is the same anywhere."""

    def __post_init__(self) -> None:
        check_fields(self, "", {}, ConfigError)
        for name in ("prompts", "generation_sha256", "sampling", "embedded", "retriever_index",
                     "machine"):  # fmt: skip
            object.__setattr__(self, name, dict(getattr(self, name)))


_RUN_RULES = {
    "limit": optional(positive_int),
    "run_file_duplicates": one_of(DUPLICATE_RULES),
    "run_file_order": one_of(RUN_FILE_ORDERS),
    "reasoning": one_of(REASONING_SETTINGS),
    "timeout": positive_float,
}


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
    runs_dir: str = "runs"
    run_name: str | None = None  # default: from the settings that tell runs apart
    cache_dir: str | None = None  # default: eval.datasets.default_cache_dir()
    # a finished run whose saved first-stage lists (and any leading stages this run shares with
    # it) are reused instead of computed: `python -m agents.rerank RUN_FOLDER`
    source_run: str | None = None
    # a TREC run file whose lists are the first stage instead of an agent's (agent "none", one
    # task): `python -m agents.rerank RUN.txt --task TASK`; the retriever settings go unused
    run_file: str | None = None
    # a (qid, docid) pair the run file lists twice: refused, as trec_eval refuses it, or kept
    # at its highest score ("max"; ReasonRank's runs of tasks whose corpus repeats ids)
    run_file_duplicates: str = "refuse"
    # a query's documents in trec_eval's order ("score") or as the file lists them ("file",
    # as ReasonRank's loader reads its runs)
    run_file_order: str = "score"
    # where a generate-then-retrieve agent's texts come from instead of an LLM
    # (agents.shared.generations): r2med:<llm>[@<folder>], a .jsonl file or a run folder
    generations: str | None = None
    # how generated texts are read (agents.llm.text): auto (the writing model's family, as
    # R2MED's list names them), none, or a reasoning family whose response alone is searched
    reasoning: str = "auto"
    # seconds an LLM or embedding call waits for the server's answer, per attempt
    timeout: float = DEFAULT_TIMEOUT_S
    # what the run records about itself as it is planned (config.json holds it among the
    # settings above, at the top level)
    recorded: Recorded = field(default_factory=Recorded)

    def _given_options(self) -> dict[str, Any]:
        """The options given, over those the preset gives the agent for its model
        (agents.llm.sampling.OPTION_RULES): a given option wins, as a given sampling setting
        wins over the preset's."""
        from agents.llm.sampling import preset_options

        llm = self.llm if self.llm is not None else LLMConfig()
        preset = preset_options(llm.preset, self.agent, llm.model).values
        defaults = AGENTS[self.agent].defaults
        return {**{k: v for k, v in preset.items() if k in defaults}, **self.options}

    def _retriever_rules(self) -> RetrieverConfig:
        """The retriever with ``dense.r2med_rules`` decided, as the preset decides an option:
        as given, else on under ``--preset paper`` for a spec with a dense or api member (R2MED's
        dense evaluation is theirs to follow) and off otherwise. config.json records the value
        (`agents.config.serialise` reads a file written before it existed as off, as it ran)."""
        dense = self.retriever.dense
        if dense.r2med_rules is None:
            llm = self.llm if self.llm is not None else LLMConfig()
            embeds = any(part.kind in ("dense", "api") for part in self.retriever.parts)
            dense = dataclasses.replace(dense, r2med_rules=llm.preset == "paper" and embeds)
        if dense.ignore_identical_ids is None:
            dense = dataclasses.replace(dense, ignore_identical_ids=self._identical_ids_rule())
        return dataclasses.replace(self.retriever, dense=dense)

    def _identical_ids_rule(self) -> bool | None:
        """``dense.ignore_identical_ids`` as the members' families decide it, recorded so:
        their one rule; true for a spec with no dense or api member (what every config.json
        recorded before families had rules, so such runs resume); None where members' families
        differ (each member then follows its own)."""
        from retrievers.families import AUTO, family_for

        family = self.retriever.dense.family
        rules = {
            family_for(part.arg, family if part.kind == "dense" else AUTO).drops_identical_ids()
            for part in self.retriever.parts
            if part.kind in ("dense", "api")
        }
        return rules.pop() if len(rules) == 1 else (True if not rules else None)

    def __post_init__(self) -> None:
        check_fields(self, "", _RUN_RULES, ConfigError)
        if self.agent not in AGENTS:
            raise ConfigError(f"agent: unknown agent {self.agent!r}; known: {', '.join(AGENTS)}")
        spec = AGENTS[self.agent]
        object.__setattr__(self, "options", typed_options(spec, self._given_options(), "option"))
        object.__setattr__(self, "retriever", self._retriever_rules())
        if self.generations is not None:
            from agents.shared.generations import parse_source

            try:
                parse_source(self.generations, self.agent)
            except ValueError as e:
                raise ConfigError(f"generations {self.generations!r}: {e}") from None
        self._check_run_file()
        stages = tuple(s if isinstance(s, StageConfig) else StageConfig(**s) for s in self.rerank)
        stages = tuple(self._stage_filled(s) for s in stages)
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
            from eval.plumbing.files import check_component

            check_component(self.run_name, "run_name")
        object.__setattr__(self, "prompt_files", dict(self.prompt_files))

    def _stage_filled(self, stage: StageConfig) -> StageConfig:
        """``stage`` with the options its spec did not give filled by the run, as the preset
        fills an agent's: the preset's values (agents.llm.sampling.OPTION_RULES, and the stage
        spec's own ``preset_options``: R2MED's rerankers keep only their top k under ``--preset
        paper``, ReasonRank cuts with the served checkpoint's tokenizer), and ``--max-tokens``
        as the budget of a stage that has one (as ``--rerank-depth`` fills ``depth``). A given
        option wins; config.json records the values."""
        from agents.llm.sampling import preset_options

        llm = self.llm if self.llm is not None else LLMConfig()
        spec = STAGES[stage.kind]
        defaults = spec.defaults
        model = str(stage.options.get("model") or llm.model)
        values = dict(preset_options(llm.preset, stage.kind, model).values)
        if spec.preset_options is not None:
            values.update(spec.preset_options(llm.preset, model, self._stage_server(stage, llm)))
        if llm.max_tokens is not None:
            values["max_tokens"] = llm.max_tokens
        fill = {k: v for k, v in values.items() if k in defaults and k not in stage.given}
        if all(stage.options[k] == v for k, v in fill.items()):
            return stage
        return dataclasses.replace(stage, options={**stage.options, **fill})

    @staticmethod
    def _stage_server(stage: StageConfig, llm: LLMConfig) -> str:
        """The server kind a stage's calls go to, as `stage_llm` and the plan decide it."""
        model = str(stage.options.get("model") or llm.model)
        api_base = stage.options.get("api_base") or None
        if api_base is None and model == llm.model:
            api_base = llm.api_base
        return resolve_server(llm.server if api_base == llm.api_base else "auto", model)

    def _check_run_file(self) -> None:
        """A run file is the whole first stage: no agent, replay or source run beside it."""
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

    def with_recorded(self, **values: Any) -> RunConfig:
        """This config with ``values`` (fields of `Recorded`) recorded, the rest as it is."""
        return dataclasses.replace(self, recorded=dataclasses.replace(self.recorded, **values))

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
        options[key] = _typed_like(options[key], value, f"{what} {key}={quoted(value)}")
    if spec.check_options:
        try:
            spec.check_options(options)
        except ValueError as e:
            raise ConfigError(f"{spec.name}: {e}") from None
    return options


_BOOLS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}


def _typed_like(default: Any, value: Any, where: str) -> Any:
    """``value`` (text from a flag or a spec, or a value from Python or TOML) as the default's
    type: text is read as a flag's is (eval.plumbing.decimal_text), a value must be of the type."""
    if isinstance(default, bool):
        if isinstance(value, bool):
            return value
        if not isinstance(value, str) or value.strip().lower() not in _BOOLS:
            raise ConfigError(f"{where}: expected true or false")
        return _BOOLS[value.strip().lower()]
    if default is None:
        return value
    if isinstance(default, str):
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected text, got {type(value).__name__}")
        return value
    kind = type(default)
    noun = {int: "an integer", float: "a number"}.get(kind, kind.__name__)
    if isinstance(value, str):
        try:
            return parse_int(value) if kind is int else parse_float(value)
        except ValueError as e:
            raise ConfigError(f"{where}: {e}") from None
    wanted = numbers.Integral if kind is int else numbers.Real
    if isinstance(value, bool) or not isinstance(value, wanted):
        raise ConfigError(f"{where}: expected {noun}, got {type(value).__name__}")
    typed = kind(value)
    if isinstance(typed, float) and not math.isfinite(typed):
        raise ConfigError(f"{where}: expected a finite number")
    return typed


def default_run_name(config: RunConfig, variant: str | None = None) -> str:
    """The run folder's name when none is given: the settings that tell runs apart
    (`agents.config.naming.run_folder_name`; a rerank of a finished run is named after it)."""
    return run_folder_name(config, variant)
