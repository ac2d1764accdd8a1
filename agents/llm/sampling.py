"""Sampling and length settings: what each LLM call is sent, per method, node and model family.

Two presets (``--preset``):

* ``default``: temperature 0 and 512 tokens a call, the settings the embedded demo is fast
  with; models that reason get a budget their reasoning fits (open reasoning models 10,240
  tokens, R2MED's budget for open models; OpenAI's reasoning models 25,000 completion tokens,
  OpenAI's advice) and OpenAI's reasoning models get no temperature, which they refuse.
* ``paper``: each method as its original ran it, per model family; `RULES` below gives every
  value with its source (repository, file, line).

Model families (`model_family`): ``open`` (an open model on a vLLM, SGLang or llama.cpp server,
``hosted_vllm/`` models, or an embedded ``local/`` model), ``reasoning-api`` (OpenAI's
reasoning models, o1, o3, o4-mini, GPT-5 and kin, as litellm's model map marks them: no
temperature or top_p, reasoning counted in ``max_completion_tokens``) and ``api`` (any other
provider's model).

An explicit setting (``--temperature``, ``--top-p``, ``--top-k-sampling``, ``--seed``,
``--repetition-penalty``, ``--max-tokens``) wins over the preset for every call. A parameter the
family does not take is not sent, and `Sampling.not_sent` says why; the run records both. A
rule may take a value from the stage's options (`Rule.from_options`: the reasoning stages'
budget is their option ``max_tokens``, the original's by default), which an explicit setting
passed here still beats (`agents.execution.plan.record_sampling` passes a stage's own budget as
one).

What an original does beyond sampling is an agent option (recorded with the run's options, and
given by ``--option`` like any other): `OPTION_RULES` lists the values a preset gives them, per
method and model, each with its source, and `preset_options` reads it. As with sampling, an
option given explicitly wins over the preset's value.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agents.llm.embedded.names import LOCAL_PREFIX

PRESETS = ("default", "paper")
FAMILIES = ("api", "open", "reasoning-api")
# the settings a user may give (LLMConfig's names) -> the parameter each overrides
SETTINGS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k_sampling": "top_k",
    "seed": "seed",
    "repetition_penalty": "repetition_penalty",
    "max_tokens": "max_tokens",
}
OPEN_ONLY = ("top_k", "repetition_penalty")  # vLLM's, SGLang's and llama.cpp's, not OpenAI's
OPEN_SERVERS = ("vllm", "sglang", "llamacpp")
REASONING_BUDGET = 25_000  # OpenAI, "Reasoning models": reserve at least 25,000 tokens
OPEN_REASONING_BUDGET = 10_240  # R2MED src/generate_hypothetical_doc.py L247
REASONRANK_MAXLEN = 3072  # 8421BCD/ReasonRank run_rank_llm.sh --reasoning_maxlen
RANK1_MAX_OUTPUT = 8192  # orionw/rank1 rank1.py L35 max_output_tokens

GENERATE = ("hyde", "query2doc", "lamer")
R2MED_GEN = "R2MED/R2MED src/generate_hypothetical_doc.py"
SEARCH_O1 = "sunnynexus/Search-o1 scripts/run_search_o1.py"
SEARCH_R1 = "PeterGriffinJin/Search-R1"
REASONRANK = "8421BCD/ReasonRank rerank/rank_listwise_os_llm.py"
GROUPRANK = "AQ-MedAI/Diver Reranker/rerank_groupwise.py"
DIVER_POINTWISE = "AQ-MedAI/Diver Reranker/rerank_pointwise.py"


@dataclass(frozen=True)
class Rule:
    """One row of the table: what ``preset`` sends ``methods`` (at ``nodes``) on ``family``."""

    preset: str
    methods: tuple[str, ...]  # agent or stage names; ("*",) for every one
    family: str
    params: Mapping[str, Any]
    source: str
    nodes: tuple[str, ...] = ("*",)
    # a condition on (model, stage or agent options), e.g. Search-o1's settings for QwQ
    when: Callable[[str, Mapping[str, Any]], bool] | None = None
    # parameter -> the option whose value is sent for it (``params`` holds its default)
    from_options: Mapping[str, str] = field(default_factory=dict)

    def matches(self, preset: str, method: str, node: str, family: str, model: str,
                options: Mapping[str, Any]) -> bool:  # fmt: skip
        return (
            self.preset == preset
            and self.family == family
            and (self.methods == ("*",) or method in self.methods)
            and (self.nodes == ("*",) or node in self.nodes)
            and (self.when is None or self.when(model, options))
        )


def _qwq(model: str, options: Mapping[str, Any]) -> bool:
    return "qwq" in model.lower()  # run_search_o1.py L212, L388: 'qwq' in model_path.lower()


def _thinks(model: str, options: Mapping[str, Any]) -> bool:
    from agents.llm.text import reasoning_parser

    return reasoning_parser(model) != "none"


def _reasons(model: str, options: Mapping[str, Any]) -> bool:
    return bool(options.get("reason"))


_O1_OPEN = {"temperature": 0.7, "top_p": 0.8, "top_k": 20}  # run_search_o1.py L124-143
# what vLLM's SamplingParams defaults to, sent where an original left them at that
_VLLM_NEUTRAL = {"top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0}


def _protocol(
    method: str, params: dict[str, Any], source: str, families: tuple[str, ...]
) -> tuple[Rule, ...]:
    """The rules of a stage whose sampling is part of its protocol: ``params`` under both
    presets, the budget the stage's option ``max_tokens`` (the original's by default); under
    ``paper`` open models are also sent what vLLM's SamplingParams defaulted where the original
    set nothing (`_VLLM_NEUTRAL`), which a vLLM server would otherwise take from the
    checkpoint's generation_config.json (Qwen2.5: repetition_penalty 1.05)."""
    budget = {"max_tokens": "max_tokens"}
    neutral = {k: v for k, v in _VLLM_NEUTRAL.items() if k not in params}
    defaults = ", ".join(f"{k} {v}" for k, v in neutral.items())
    return (
        Rule("paper", (method,), "open", {**params, **neutral},
             f"{source}, and vLLM's defaults it left: {defaults}", from_options=budget),
        *(Rule(preset, (method,), family, params, source, from_options=budget)
          for preset in PRESETS for family in families),
    )  # fmt: skip


RULES: tuple[Rule, ...] = (
    # --- paper: R2MED's generation-augmented baselines --------------------------------------
    Rule(
        "paper",
        GENERATE,
        "open",
        {"temperature": 0.7, "seed": 42, "max_tokens": 10240},
        f"{R2MED_GEN} L230, L247: vLLM SamplingParams(temperature=0.7, seed=42, max_tokens=10240)",
    ),
    Rule(
        "paper",
        GENERATE,
        "api",
        {"temperature": 0.8, "top_p": 0.8},
        f"{R2MED_GEN} L14, L90-98: temperature=0.8, top_p=0.8, no max_tokens",
    ),
    Rule(
        "paper",
        GENERATE,
        "reasoning-api",
        {},
        f"{R2MED_GEN} L259-261, L90-98 (o3-mini goes through the API path, which sets no "
        "max_tokens; "
        "its temperature and top_p are refused by the model)",
    ),
    # --- paper: BRIGHT's reasoning rewrite ------------------------------------------------
    Rule(
        "paper",
        ("reason",),
        "api",
        {"temperature": 0.8, "top_p": 0.8, "max_tokens": 2048},
        "xlang-ai/BRIGHT reason.py L75-98: temperature=0.8, top_p=0.8, max_tokens=2048",
    ),
    Rule(
        "paper",
        ("reason",),
        "open",
        {"temperature": 0.8, "top_p": 0.8, "max_tokens": 2048},
        "xlang-ai/BRIGHT reason.py L75-98 (its HFModel, L107-128, is built without the "
        "temperature and top_p it needs, L153, and caps prompt and output at 1024 tokens, L122: "
        "the OpenAI path's values)",
    ),
    Rule(
        "paper",
        ("reason",),
        "reasoning-api",
        {"max_completion_tokens": REASONING_BUDGET},
        "xlang-ai/BRIGHT reason.py L75-98, with a budget reasoning fits",
    ),
    # --- paper: Search-o1 -------------------------------------------------------------------
    Rule(
        "paper",
        ("search-o1",),
        "open",
        {**_O1_OPEN, "repetition_penalty": 1.05, "max_tokens": 20480},
        f"{SEARCH_O1} L124-150, L210-212, L387-394 (QwQ: repetition_penalty 1.05, 20480 tokens)",
        nodes=("reason",),
        when=_qwq,
    ),
    Rule(
        "paper",
        ("search-o1",),
        "open",
        {**_O1_OPEN, "repetition_penalty": 1.0, "max_tokens": 8192},
        f"{SEARCH_O1} L124-150, L210-212, L387-394 (other models: repetition_penalty 1.0, "
        "8192 tokens)",
        nodes=("reason",),
    ),
    Rule(
        "paper",
        ("search-o1",),
        "open",
        {**_O1_OPEN, "repetition_penalty": 1.05, "max_tokens": 20480},
        f"{SEARCH_O1} L304-313, L662 (Reason-in-Documents: fixed sampling, the run's budget)",
        nodes=("documents",),
        when=_qwq,
    ),
    Rule(
        "paper",
        ("search-o1",),
        "open",
        {**_O1_OPEN, "repetition_penalty": 1.05, "max_tokens": 8192},
        f"{SEARCH_O1} L304-313, L662 (Reason-in-Documents: fixed sampling, the run's budget)",
        nodes=("documents",),
    ),
    Rule(
        "paper",
        ("search-o1",),
        "api",
        {"temperature": 0.7, "top_p": 0.8, "max_tokens": 8192},
        f"{SEARCH_O1} L124-136, L387-394 (top_k and repetition_penalty are vLLM's only)",
    ),
    Rule(
        "paper",
        ("search-o1",),
        "reasoning-api",
        {"max_completion_tokens": 20480},
        f"{SEARCH_O1} L388-392: the budget it gives its reasoning model",
    ),
    # --- paper: Search-R1 -------------------------------------------------------------------
    Rule(
        "paper",
        ("search-r1",),
        "open",
        {"temperature": 0.0, **_VLLM_NEUTRAL, "max_tokens": 500},
        f"{SEARCH_R1} scripts/nq_hotpotqa/evaluate.sh L21 (max_response_length 500 a turn), "
        "verl/trainer/ppo/ray_trainer.py L508 + verl/workers/rollout/vllm_rollout/"
        "vllm_rollout.py L162-171 (validation is greedy: top_p 1.0, top_k -1, temperature 0; "
        "its min_p 0.0 is not sent, greedy decoding ignores it), L105-121 (no "
        "repetition_penalty: vLLM's SamplingParams default 1.0, sent so that a server does "
        "not take the checkpoint's generation_config.json)",
    ),
    Rule(
        "paper",
        ("search-r1",),
        "api",
        {"temperature": 0.0, "max_tokens": 500},
        f"{SEARCH_R1} scripts/nq_hotpotqa/evaluate.sh L21, greedy validation",
    ),
    Rule(
        "paper",
        ("search-r1",),
        "reasoning-api",
        {"max_completion_tokens": REASONING_BUDGET},
        "Search-R1's turn budget (500) cannot hold a reasoning model's thinking",
    ),
    # --- paper: rerank stages ---------------------------------------------------------------
    *(
        Rule(
            "paper",
            ("llm-listwise", "insertrank"),
            family,
            {"temperature": 0.0},
            "sunnweiwei/RankGPT rank_gpt.py L186: temperature=0, no max_tokens",
        )
        for family in ("api", "open")
    ),
    *(
        Rule(
            "paper",
            ("llm-pointwise",),
            family,
            {"temperature": 0.0, "max_tokens": 8192},
            "orionw/rank1 rank1.py L35, L86-92: temperature=0, max_output_tokens=8192",
            when=_reasons,
        )
        for family in ("api", "open")
    ),
    # ReasonRank's, Rank1's, GroupRank's and DIVER's pointwise budgets are part of their
    # protocols: both presets send them (`_protocol`)
    *_protocol(
        "reasonrank",
        {"temperature": 0.0, "max_tokens": REASONRANK_MAXLEN + 100},
        f"{REASONRANK} L118-122: SamplingParams(temperature=0, max_tokens=reasoning_maxlen + "
        "100) (run_rank_llm.sh: --reasoning_maxlen 3072)",
        ("api", "open"),
    ),
    *_protocol(
        "rank1",
        {"temperature": 0.0, "max_tokens": RANK1_MAX_OUTPUT},
        "orionw/rank1 rank1.py L35, L86-92: SamplingParams(temperature=0, max_tokens="
        "max_output_tokens=8192)",
        ("api", "open"),
    ),
    # logprobs=10 is not sent by either DIVER stage: only the text is read (L159; L60-78)
    *_protocol(
        "grouprank",
        {"temperature": 0.3, "top_p": 0.8, "max_tokens": 8000},
        f"{GROUPRANK} L40: SamplingParams(temperature=0.3, top_p=0.8, max_tokens=8000)",
        FAMILIES,
    ),
    *_protocol(
        "diver-pointwise",
        {"temperature": 0.6, "top_p": 0.9, "max_tokens": 128},
        f"{DIVER_POINTWISE} L24: SamplingParams(temperature=0.6, top_p=0.9, max_tokens=128)",
        FAMILIES,
    ),
    # --- default: every call, and the paper preset's fallback for what no original ran -------
    Rule(
        "default",
        ("*",),
        "reasoning-api",
        {"max_completion_tokens": REASONING_BUDGET},
        "default: no temperature (refused), a completion budget reasoning fits",
    ),
    Rule(
        "default",
        ("*",),
        "open",
        {"temperature": 0.0, "max_tokens": OPEN_REASONING_BUDGET},
        "default: temperature 0; a reasoning model's budget (R2MED's for open models)",
        when=_thinks,
    ),
    *(
        Rule(
            "default",
            ("*",),
            family,
            {"temperature": 0.0, "max_tokens": 512},
            "default: temperature 0, 512 tokens",
        )
        for family in ("api", "open")
    ),
)


@dataclass(frozen=True)
class Sampling:
    """What one kind of call is sent: ``params`` (each key's value as sent), where each came
    from, and the parameters that were asked for but are not sent, with the reason."""

    params: dict[str, Any]
    sources: dict[str, str] = field(default_factory=dict)
    not_sent: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"params": self.params, "sources": self.sources, "not_sent": self.not_sent}


def model_family(model: str, server: str) -> str:
    """``open``, ``reasoning-api`` or ``api`` (see the module docstring); ``server`` is the
    resolved server kind (agents.llm.serving.resolve_server)."""
    if model.startswith((LOCAL_PREFIX, "hosted_vllm/", "scripted/")) or server in OPEN_SERVERS:
        return "open"
    provider, _, name = model.partition("/")
    if provider in ("openai", "azure") and name and _litellm_reasoning(model):
        return "reasoning-api"
    return "api"


def _litellm_reasoning(model: str) -> bool:
    try:
        from eval.plumbing.litellm_setup import litellm

        return bool(litellm.supports_reasoning(model))
    except Exception:  # a model litellm's map does not know
        return False


def resolve(
    preset: str,
    method: str,
    node: str,
    model: str,
    server: str,
    explicit: Mapping[str, Any] | None = None,
    options: Mapping[str, Any] | None = None,
) -> Sampling:
    """The parameters ``method``'s ``node`` calls send ``model`` under ``preset``.

    The first matching rule of ``preset`` gives the values, else the first of ``default``; the
    ``explicit`` settings (those not None) replace them key by key; then what the family does
    not take is dropped, and said so.
    """
    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {', '.join(PRESETS)}, got {preset!r}")
    family = model_family(model, server)
    options = options or {}
    rule = next(
        (r for p in dict.fromkeys((preset, "default")) for r in RULES
         if r.matches(p, method, node, family, model, options)),
    )  # fmt: skip
    params = dict(rule.params)
    sources = dict.fromkeys(params, rule.source)
    for key, option in rule.from_options.items():
        if option in options and options[option] != params.get(key):
            params[key] = options[option]
            sources[key] = f"option {option}"
    for key, value in (explicit or {}).items():
        if value is None:
            continue
        if key not in SETTINGS.values():
            raise ValueError(f"unknown sampling parameter {key!r}; known: {', '.join(SETTINGS)}")
        if key == "max_tokens" and family == "reasoning-api":
            params.pop("max_tokens", None)
            key = "max_completion_tokens"
        params[key] = value
        sources[key] = "given"
    return _sendable(params, sources, family, model)


def _sendable(params: dict[str, Any], sources: dict[str, str], family: str, model: str) -> Sampling:
    not_sent: dict[str, str] = {}

    def drop(key: str, why: str) -> None:
        if key in params:
            params.pop(key)
            sources.pop(key, None)
            not_sent[key] = why

    if family == "reasoning-api":
        for key in ("temperature", "top_p"):
            drop(key, f"{model} is a reasoning model: it refuses {key}")
        if "max_tokens" in params:
            params["max_completion_tokens"] = params.pop("max_tokens")
            sources["max_completion_tokens"] = sources.pop("max_tokens")
    if family != "open":
        for key in OPEN_ONLY:
            drop(key, f"{model} is an API model: only open-model servers take {key}")
    if family == "api":
        supported = _supported(model)
        for key in ("temperature", "top_p", "seed"):
            if supported is not None and key not in supported:
                drop(key, f"litellm's map says {model}'s provider takes no {key}")
    return Sampling(params, sources, not_sent)


def _supported(model: str) -> list[str] | None:
    try:
        from eval.plumbing.litellm_setup import litellm

        _, provider, _, _ = litellm.get_llm_provider(model)
        return litellm.get_supported_openai_params(model=model, custom_llm_provider=provider)
    except Exception:  # unknown to litellm: send what was asked
        return None


def describe(sampling: Sampling) -> str:
    """One line for the console: what is sent, and what is not."""
    sent = ", ".join(f"{k} {v}" for k, v in sampling.params.items()) or "nothing"
    line = f"sends {sent}"
    if sampling.not_sent:
        line += "; not sent: " + "; ".join(f"{k} ({why})" for k, why in sampling.not_sent.items())
    return line


# --- what a preset sets beyond sampling: agent options ----------------------------------------


@dataclass(frozen=True)
class OptionRule:
    """Agent or rerank stage options ``preset`` ("*": every preset) gives ``methods``, where
    ``when`` holds on the model's name (a stage's own model: a cross-encoder's, an LLM's)."""

    preset: str
    methods: tuple[str, ...]
    values: Mapping[str, Any]
    source: str
    when: Callable[[str], bool] | None = None


def _qwq_model(model: str) -> bool:
    return _qwq(model, {})


# Search-R1's rollout and data (PeterGriffinJin/Search-R1 at a14dc3a).
_R1_CONTEXT = (
    f"{SEARCH_R1} search_r1/llm_agent/generation.py L107-115: the rolling context is cut to its "
    "last max_prompt_length tokens, scripts/nq_hotpotqa/evaluate.sh L20: 4096"
)
_R1_QUESTION = f"{SEARCH_R1} scripts/data_process/nq_search.py L61-63 (and infer.py L13-15)"
# R2MED (R2MED/R2MED at 62b7074) searches every generated text as it is, empty or not.
_R2MED_NO_FALLBACK = (
    "R2MED src/eval_BM25.py L124-133 (no fallback to the query), L74-83 (an empty query scores "
    "every document 0; the stable sort keeps the first 100 in corpus order)"
)

OPTION_RULES: tuple[OptionRule, ...] = (
    # the original's own choice, so under every preset
    OptionRule(
        "*",
        ("search-o1",),
        {"qwq_prompt": True},
        f"{SEARCH_O1} L337-338, scripts/prompts.py L358-363: QwQ gets its own task prompt",
        when=_qwq_model,
    ),
    OptionRule("paper", ("search-r1",), {"context_tokens": 4096}, _R1_CONTEXT),
    OptionRule("paper", ("search-r1",), {"question_mark": True}, _R1_QUESTION),
    OptionRule("paper", ("search-o1", "search-r1"), {"query_fallback": False}, _R2MED_NO_FALLBACK),
    # a rerank stage's too (agents.config.run_config.RunConfig), ``model`` the stage's own; a
    # condition only a stage knows is its spec's ``preset_options`` (agents.shared.specs.StageSpec)
)


@dataclass(frozen=True)
class PresetOptions:
    """The agent options a preset gives one method and model, and where each comes from."""

    values: dict[str, Any]
    sources: dict[str, str] = field(default_factory=dict)


def preset_options(preset: str, method: str, model: str | None) -> PresetOptions:
    """The options ``preset`` sets for ``method`` run with ``model`` (None: no model); the
    options given to the run win over them, key by key."""
    if preset not in PRESETS:
        raise ValueError(f"preset must be one of {', '.join(PRESETS)}, got {preset!r}")
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for rule in OPTION_RULES:
        if rule.preset not in ("*", preset) or method not in rule.methods:
            continue
        if rule.when is not None and (model is None or not rule.when(model)):
            continue
        values.update(rule.values)
        sources.update(dict.fromkeys(rule.values, rule.source))
    return PresetOptions(values, sources)
