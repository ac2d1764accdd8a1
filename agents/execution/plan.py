"""A run prepared: `prepare(config) -> Plan`, used by the run (agents.execution.whole_run) and the
dry run.

Preparing reads and checks everything a run needs before its first call, and writes nothing:
the models named and their keys, the tasks and their folders in the run, every prompt the run
will send (recorded by name and sha256 as the graphs load them), what every LLM call is sent
(agents.llm.sampling), the source of a rerank or of replayed generations, and one LLM client
per (model, server). Bad input is refused here with one line (a ValueError), so neither a run
nor a dry run starts on it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.config.registry import AGENTS, STAGES, AgentSpec
from agents.config.run_config import RunConfig, StageConfig, default_run_name
from agents.config.serialise import from_dict
from agents.execution.run_file_stage import RunFileLists, missing_line, read_run_file, repeated_line
from agents.graphs.context import AgentContext
from agents.llm.embedded.names import is_local
from agents.llm.embedded.prefix_cache import evaluation_settings
from agents.rerank import StageContext
from agents.shared.generations import Generations
from eval import runs
from eval.datasets import Task, check_tasks, default_cache_dir, load_tasks
from eval.plumbing.files import safe_name, writable_folder
from eval.plumbing.secrets.provider_keys import known_missing_keys, missing_key_line
from prompts import PromptBook, PromptError

log = logging.getLogger("agents.execution.plan")


class RunError(ValueError):
    """A run that cannot start as asked; the message is one line saying why and what to do."""


@dataclass
class TaskPlan:
    task: Task
    folder: str  # its folder in the run (unique even when two tasks share a name)
    prompts: PromptBook  # the task's prompts, as recorded in the run's config
    queries: dict[str, str]  # the queries the run answers (--limit)
    generations: Generations | None = None  # the texts replayed (--generations)
    source_dir: Path | None = None  # this task's folder in the run a rerank starts from
    run_file: RunFileLists | None = None  # the first stage's lists, read from a run file


@dataclass
class Plan:
    config: RunConfig  # completed: prompts, sampling, and what the clients reported
    spec: AgentSpec
    cache_dir: Path
    run_dir: Path  # where the run goes (not created here)
    tasks: list[TaskPlan]
    llms: dict[tuple[str, str | None], Any]  # (model, api_base) -> agents.llm.LLM
    source: RunConfig | None = None  # the finished run a rerank starts from
    cluster: Any = None  # agents.execution.cluster.queries.Cluster: where the agent answers (--ray)

    def agent_llm(self) -> Any:
        llm = self.config.llm
        return self.llms.get((llm.model, llm.api_base)) if llm is not None else None

    def stage_llm(self, stage: Any) -> Any:
        return self.llms[self.config.stage_llm(stage)] if STAGES[stage.kind].uses_llm else None

    def agent_context(self, tp: TaskPlan, retriever: Any, first_stage: Any) -> AgentContext:
        config = self.config
        return AgentContext(
            retriever=retriever, first_stage=first_stage, corpus=tp.task.corpus,
            task=tp.task.name, llm=self.agent_llm(), depth=config.eval.depth,
            prompts=tp.prompts, options=config.options, generations=tp.generations,
            parser=text_parser(config, tp.generations),
            sampling=node_sampling(config, config.agent),
        )  # fmt: skip

    def stage_context(
        self, tp: TaskPlan, index: int, stage: Any, rankings: dict[str, Any] | None = None
    ) -> StageContext:
        """Stage ``index``'s context for task ``tp``; ``rankings``, the input lists of the
        queries it runs over, give it their lengths in the task's order (``list_lengths``)."""
        ctx = stage_context(self.config, tp.task, tp.prompts, stage, self.stage_llm(stage),
                            self.cache_dir, runs.stage_dir_name(index, stage.kind))  # fmt: skip
        if rankings is not None:
            ctx.list_lengths = {q: len(rankings[q]) for q in tp.queries if q in rankings}
        return ctx


def prepare(config: RunConfig, *, dry: Any = None, tasks: Sequence[Task] | None = None) -> Plan:
    """Everything the run of ``config`` needs, checked. With ``dry`` (an
    `agents.llm.dry.DryModel`) the clients answer from it and nothing is contacted or
    created: no cache folder, no server asked for its template, no generations read.
    ``tasks``: tasks held in memory, run instead of ``config.dataset``'s (a corpus another
    tool hands over: `agents.execution.pipeline`)."""
    check_first(config)
    if config.llm is not None:
        if dry is None:  # before the model checks, which import litellm (seconds)
            check_servers(config)
        from agents.llm.model_checks import check_credentials, check_model

        for model, api_base in config.llm_targets():
            check_model(model)
            check_credentials(model, api_base)
    if dry is None:
        cache_dir = writable_folder(config.cache_dir or default_cache_dir(), "--cache-dir")
    else:
        cache_dir = Path(config.cache_dir or default_cache_dir()).expanduser()
    spec = AGENTS[config.agent]
    source = read_source_run(config) if config.source_run else None
    overrides = {name: Path(path) for name, path in config.prompt_files.items()}
    tasks = list(tasks) if tasks is not None else load_tasks(config.dataset, cache_dir)
    folders = task_folders(tasks)
    plans = [
        TaskPlan(task, folder, PromptBook(overrides, task.name), limited(task, config.limit),
                 source_dir=Path(config.source_run) / folder if source else None)
        for task, folder in zip(tasks, folders, strict=True)
    ]  # fmt: skip
    if config.run_file:
        config = read_first_stage(config, plans)
    if dry is None:  # the retrieval servers' indexes, checked to be over these corpora
        config = config.with_recorded(retriever_index=remote_indexes(config, plans))
    prompts = record_prompts(spec, config, plans, source)
    config = config.with_recorded(prompts=prompts, sampling=record_sampling(config, source))
    embedded = {m: evaluation_settings(m) for m, _ in config.llm_targets()}
    config = config.with_recorded(embedded={m: s for m, s in embedded.items() if s})
    if config.generations and source is None and dry is None:  # a rerank reads its source's
        read_generations(config, plans, cache_dir)
        sha256 = {p.folder: p.generations.sha256 for p in plans}
        config = config.with_recorded(generation_sha256=sha256)
    # the clients last, once every input is checked: sizing the embedded model's pool reads
    # (and first joins) its file, and a llama.cpp server is asked for its chat template
    pools = {} if dry is not None else local_pools(config, cache_dir)
    llms = make_llms(config, None if dry else cache_dir, dry, pools)
    if dry is None:
        # a llama.cpp server that reports no chat template is refused before any run folder
        for client in llms.values():
            client.prepare()
        templates = [c.template.sha256 for c in llms.values() if c.template is not None]
        if templates:
            config = config.with_recorded(chat_template_sha256=templates[0])
        from agents.execution import machine

        embedded = any(is_local(model) for model, _ in config.llm_targets())
        described = machine.describe(embedded)
        if pools:  # how many llama.cpp instances serve each embedded model, and why
            described = {**described, "local_pool": {m: p.to_dict() for m, p in pools.items()}}
        config = config.with_recorded(machine=described)
    run_dir = Path(config.runs_dir).expanduser() / (config.run_name or default_run_name(config))
    return Plan(config, spec, cache_dir, run_dir, plans, llms, source)


def check_servers(config: RunConfig) -> None:
    """Every server a run's --api-base or a stage's api_base= names accepts a connection:
    a run whose server is not there is refused in one line before any work (in-process
    providers, local/ and scripted/, have no server)."""
    import sys

    from agents.llm.serving import require_servers
    from eval.plumbing.secrets.api_keys import EMBEDDED_PROVIDER, is_custom_provider

    def in_process(model: str) -> bool:  # a provider can be registered only once litellm is in
        prefix = model.split("/", 1)[0]
        return prefix == EMBEDDED_PROVIDER or (
            "litellm" in sys.modules and is_custom_provider(prefix)
        )

    named = {}  # api_base -> the flag that names it
    for stage in config.rerank:
        if STAGES[stage.kind].uses_llm and stage.options.get("api_base"):
            named.setdefault(stage.options["api_base"], f"--rerank {stage.kind} api_base=")
    if config.llm is not None and config.llm.api_base:
        named[config.llm.api_base] = "--api-base"
    for model, api_base in config.llm_targets():
        if api_base and not in_process(model):
            require_servers(api_base, named.get(api_base, "--api-base"))


def check_first(config: RunConfig) -> None:
    """The refusals decided from flags, files and the environment alone, before the checks
    that import litellm (seconds): a common provider's key unset, a dataset no folder, no name
    and no hub copy answers, offline, and a model that is not there or not whole."""
    for model, api_base in config.llm_targets() if config.llm is not None else ():
        if missing := known_missing_keys(model, api_base):
            raise ValueError(missing_key_line(model, missing))
    check_tasks(config.dataset, Path(config.cache_dir or default_cache_dir()).expanduser())
    check_models(config)


def check_models(config: RunConfig) -> None:
    """Every model the run loads from a folder or the hub (dense retrievers, cross-encoders,
    tokenizers) is there and whole, or reachable: else one line naming it, before any work."""
    from retrievers.model_source import NEEDS, check_model_source
    from retrievers.search import check_models as check_retriever_models

    check_retriever_models(config.retriever)
    for stage in config.rerank:
        for option, kind in STAGES[stage.kind].models.items():
            name = str(stage.options.get(option) or "").strip()
            if name:
                what = f"--rerank {stage.kind} option {option}{_preset_note(config, stage)}"
                check_model_source(name, what, NEEDS[kind])


def _preset_note(config: RunConfig, stage: Any) -> str:
    """Why a ReasonRank stage under ``--preset paper`` loads the served model's tokenizer,
    for the refusal when it cannot (`agents.rerank.reasonrank.paper_tokenizer`)."""
    from agents.llm.serving import resolve_server
    from agents.rerank.reasonrank import paper_tokenizer

    if stage.kind != "reasonrank" or config.llm is None or config.llm.preset != "paper":
        return ""
    model, api_base = config.stage_llm(stage)
    server = resolve_server(config.llm.server if api_base == config.llm.api_base else "auto",
                            model)  # fmt: skip
    if stage.options["tokenizer"] != paper_tokenizer(model, server):
        return ""
    return (
        " (--preset paper: the served checkpoint's own, which ReasonRank cuts passages with; "
        "tokenizer= names another)"
    )


def read_first_stage(config: RunConfig, plans: list[TaskPlan]) -> RunConfig:
    """The run file's lists, checked against the one task it ranks, into that task's plan;
    ``config`` with the file's sha256 recorded. Queries the file lacks are said now."""
    if len(plans) != 1:
        raise RunError(
            f"run file {config.run_file}: a run file ranks one task; --task {config.dataset} "
            f"names {len(plans)}"
        )
    (tp,) = plans
    tp.run_file = read_run_file(str(config.run_file), tp.task, tp.queries, config.eval.depth,
                                config.eval.ties, config.run_file_duplicates,
                                config.run_file_order)  # fmt: skip
    for line in (
        repeated_line(tp.run_file),
        missing_line(tp.run_file, tp.task.name, len(tp.queries), config.eval.missing),
    ):
        if line:
            log.warning("%s", line)
    return config.with_recorded(run_file_sha256=tp.run_file.sha256)


def remote_indexes(config: RunConfig, plans: list[TaskPlan]) -> dict[str, dict[str, Any]]:
    """Task folder -> what each ``remote:`` retriever serves for it (its /health fingerprint);
    a server without the task, or holding another corpus for it, is refused in one line."""
    from eval.datasets import task_fingerprint
    from retrievers.remote import check_index

    parts = [part for part in config.retriever.parts if part.kind == "remote"]
    if not parts:
        return {}
    return {
        tp.folder: {
            part.text: check_index(part.arg, tp.task.name,
                                   task_fingerprint(tp.task)["corpus"], config.timeout)
            for part in parts
        }
        for tp in plans
    }  # fmt: skip


def limited(task: Task, limit: int | None) -> dict[str, str]:
    return dict(list(task.queries.items())[:limit]) if limit else dict(task.queries)


def record_prompts(
    spec: AgentSpec, config: RunConfig, plans: list[TaskPlan], source: RunConfig | None = None
) -> dict[str, str]:
    """Every prompt the run will send, by name and sha256, recorded as the graphs load them.

    The graphs (and the LLM stages) are built once per task without retrievers or a model:
    building only loads prompts. The same books then serve the real graphs, which get each
    prompt from the book's memory, so the recorded text is the text sent. A rerank of a
    finished run records its agent's prompts as that run did (they are not sent again).
    """
    used: dict[str, str] = {}
    if source is not None:
        stage_families = {f for s in STAGES.values() for f in s.prompts}
        used.update(
            (n, h)
            for n, h in source.recorded.prompts.items()
            if n.split("/")[0] not in stage_families
        )
    for tp in plans:
        # a rerank of a finished run sends no agent prompt, nor does a replay of generations
        if source is None and not config.generations:
            spec.build_graph(AgentContext(retriever=None, first_stage=None, corpus={},
                                          task=tp.task.name, prompts=tp.prompts,
                                          options=config.options))  # fmt: skip
        for stage in config.rerank:
            if STAGES[stage.kind].uses_llm:  # the others read no prompt (and may load models)
                STAGES[stage.kind].build(
                    stage_context(config, tp.task, tp.prompts, stage, None, None)
                )
        used.update(tp.prompts.used)
    # an override no prompt of the run reads would change nothing, silently (a prompt of
    # another agent, a task kind the dataset lacks, a replay that sends no prompt); a rerank
    # keeps its source run's, which its agent read
    inherited = set(source.prompt_files) if source is not None else set()
    read = set().union(*(tp.prompts.overrides_read for tp in plans))
    unread = sorted(set(config.prompt_files) - read - inherited)
    if unread:
        raise PromptError(
            f"--prompt {unread[0]}={config.prompt_files[unread[0]]}: no prompt this run sends "
            f"reads it (it sends: {', '.join(sorted(used)) or 'none'})"
        )
    return dict(sorted(used.items()))


def record_sampling(config: RunConfig, source: RunConfig | None = None) -> dict[str, Any]:
    """What every LLM call of the run is sent, by "<agent or stage folder>/<node>": the
    preset's values for its method, node and model family, the settings given over them, and
    what is not sent (agents.llm.sampling). A rerank of a finished run keeps its agent's."""
    if config.llm is None:
        return {}
    from agents.llm.sampling import resolve
    from agents.llm.serving import resolve_server

    llm = config.llm
    explicit = llm.explicit_sampling()
    out: dict[str, Any] = {}

    def put(name: str, method: str, node: str, model: str, server: str, options: Any) -> None:
        sampling = resolve(llm.preset, method, node, model, server, explicit, options)
        budget = stage_budget(method, options, explicit, sampling.params)
        if budget is not None:
            given = {**explicit, "max_tokens": budget}
            sampling = resolve(llm.preset, method, node, model, server, given, options)
        out[f"{name}/{node}"] = {"model": model, "preset": llm.preset, **sampling.to_dict()}

    if source is not None:
        recorded = source.recorded.sampling.items()
        out.update((k, v) for k, v in recorded if k.split("/")[0] == config.agent)
    elif config.agent_calls_llm:
        server = resolve_server(llm.server, llm.model)
        for node in AGENTS[config.agent].llm_nodes:
            put(config.agent, config.agent, node, llm.model, server, config.options)
    for i, stage in enumerate(config.rerank, 1):
        if not STAGES[stage.kind].uses_llm:
            continue
        model, api_base = config.stage_llm(stage)
        server = resolve_server(llm.server if api_base == llm.api_base else "auto", model)
        spec = STAGES[stage.kind]
        for node in spec.llm_nodes:
            # a stage of stages (point-list) sends each call what the stage making it would
            kind, options = stage.kind, stage.options
            if spec.sampled_as is not None:
                kind, given = spec.sampled_as(node, stage.options)
                options = StageConfig(kind, given).options
            put(runs.stage_dir_name(i, stage.kind), kind, node, model, server, options)
    return out


def stage_budget(
    kind: str, options: Any, explicit: dict[str, Any], params: dict[str, Any]
) -> int | None:
    """The ``max_tokens`` option of a stage that has one, where it must be sent as given
    because the table did not send it: over a run-wide ``--max-tokens`` it differs from (a
    stage's own budget, given in its spec, wins; `RunConfig` filled the others with it), or
    a value other than its default that the model family's rule does not read (a reasoning API
    model's completion budget). None where the resolved parameters are right as they are."""
    defaults = STAGES[kind].defaults if kind in STAGES else {}
    if "max_tokens" not in defaults or "max_tokens" not in options:
        return None
    budget = options["max_tokens"]
    run_wide = explicit.get("max_tokens")
    sent = params.get("max_tokens", params.get("max_completion_tokens"))
    if run_wide is not None:
        return budget if budget != run_wide else None
    return budget if budget != defaults["max_tokens"] and sent != budget else None


def describe_sampling(entry: dict[str, Any]) -> str:
    """One line on what a node's calls are sent, and what not."""
    sent = ", ".join(f"{k} {v}" for k, v in entry["params"].items()) or "nothing"
    line = f"sends {sent}"
    if entry["not_sent"]:
        line += "; not sent: " + "; ".join(f"{k} ({w})" for k, w in entry["not_sent"].items())
    return line


def node_sampling(config: RunConfig, name: str) -> dict[str, dict[str, Any]]:
    """node -> the parameters sent, for the agent or stage folder ``name`` of the run."""
    prefix = f"{name}/"
    return {
        k.removeprefix(prefix): dict(v["params"])
        for k, v in config.recorded.sampling.items()
        if k.startswith(prefix)
    }


def text_parser(config: RunConfig, generations: Generations | None = None) -> str:
    """How the run's generated texts are read (agents.llm.text): the setting, else the
    agent's own protocol, else the writing model's family (a replay's source model)."""
    from agents.llm.text import reasoning_parser

    if config.reasoning != "auto":
        return config.reasoning
    own = AGENTS[config.agent].parser
    if own is not None:
        return own
    if generations is not None:
        model = generations.model
    else:
        model = config.llm.model if config.llm is not None and config.agent_calls_llm else None
    return reasoning_parser(model) if model else "none"


def read_generations(config: RunConfig, plans: list[TaskPlan], cache_dir: Path) -> None:
    """Each task's generated texts from the run's source, into its plan; the queries a source
    has no text for are reported now, before any query runs (one line per task)."""
    from agents.shared.generations import load_generations, missing_line, parse_source

    assert config.generations is not None
    spec = parse_source(config.generations, config.agent)
    for tp in plans:
        tp.generations = load_generations(spec, config.agent, tp.task.name, tp.folder, cache_dir)
        line = missing_line(tp.generations, tp.folder, list(tp.queries))
        if line:
            log.warning("%s", line)


def local_pools(config: RunConfig, cache_dir: Path) -> dict[str, Any]:
    """model -> the llama.cpp instances that serve each local/ model the run calls."""
    if config.llm is None:
        return {}
    from agents.llm.embedded.pool import pool_plan

    llm = config.llm
    models = dict.fromkeys(m for m, _ in config.llm_targets() if is_local(m))
    return {m: pool_plan(m, cache_dir, llm.local_instances, llm.concurrency) for m in models}


def make_llms(
    config: RunConfig, cache_dir: Path | None, dry: Any = None, pools: dict | None = None
) -> dict[tuple[str, str | None], Any]:
    """One client per (model, api_base) the run calls, so each has its own rate limit."""
    if config.llm is None:
        return {}
    from agents.llm import LLM

    llm = config.llm
    return {
        (model, api_base): LLM(
            model=model,
            api_base=api_base,
            cache_dir=cache_dir,
            cache_mode=llm.cache,
            rate_limit=None if dry else llm.rate_limit,
            # the server kind is the run's server's; a stage's own server is a generic API
            server=llm.server if api_base == llm.api_base else "auto",
            chat_template=llm.chat_template if api_base == llm.api_base else None,
            routing=llm.routing,
            timeout=config.timeout,
            dry=dry,
            local_pool=(pools or {}).get(model),
            local_prefix_reuse=llm.local_prefix_reuse,
        )
        for model, api_base in config.llm_targets()
    }


def stage_context(
    config: RunConfig, task: Task, prompts: PromptBook, stage: Any, llm: Any,
    cache_dir: Path | None, folder: str = "",
) -> StageContext:  # fmt: skip
    ctx = StageContext(
        corpus=task.corpus, task=task.name, options=stage.options, llm=llm,
        depth=config.eval.depth, prompts=prompts, cache_dir=cache_dir,
        sampling=node_sampling(config, folder) if folder else {},
    )  # fmt: skip

    def build_stage(kind: str, given: Any) -> tuple[dict[str, Any], Any]:
        """A stage of ``kind`` in this context (a stage of stages' part: its calls share the
        context's model, sampling and lists), its options typed as a ``--rerank`` stage's."""
        options = dict(StageConfig(kind, dict(given)).options)
        return options, STAGES[kind].build(dataclasses.replace(ctx, options=options))

    ctx.build_stage = build_stage
    return ctx


def task_folders(tasks: list[Task]) -> list[str]:
    """One folder name per task; tasks of the same name (``a/toy,b/toy``) never share one.

    A task given twice is refused: it would be run and counted twice.
    """
    seen: dict[Path, str] = {}
    for task in tasks:
        where = task.path.resolve()
        if where in seen:
            raise RunError(f"--dataset names {task.name} ({task.path}) twice")
        seen[where] = task.name
    names = [t.name for t in tasks]
    folders = []
    for task in tasks:
        if names.count(task.name) == 1:
            folders.append(safe_name(task.name))
            continue
        # readable where the parent folders differ, a hash of the path where they do not
        parent = task.path.resolve().parent.name
        label = f"{parent}-{task.name}"
        if sum(f"{t.path.resolve().parent.name}-{t.name}" == label for t in tasks) > 1:
            label += "-" + hashlib.sha256(str(task.path.resolve()).encode()).hexdigest()[:8]
        folders.append(safe_name(label))
    return folders


FIRST_STAGE_FIELDS = ("agent", "dataset", "options", "retriever", "limit", "eval", "generations")


def read_source_run(config: RunConfig) -> RunConfig:
    """The finished run `config` reranks, checked to have made the same first stage."""
    path = Path(config.source_run or "")
    try:
        source = from_dict(runs.RunFolder(path).config())
    except runs.NotARunFolder as e:
        raise RunError(str(e)) from None
    except (ValueError, TypeError) as e:
        raise RunError(f"{runs.RunFolder(path).config_path}: {e}") from None
    differ = [f for f in FIRST_STAGE_FIELDS if getattr(source, f) != getattr(config, f)]
    if source.recorded.generation_sha256 != config.recorded.generation_sha256:
        differ.append("generation_sha256")  # the generations it read
    if source.llm is not None and source.agent_calls_llm:
        mine = dataclasses.replace(
            config.llm,
            **{k: getattr(source.llm, k) for k in ("cache", "concurrency", "rate_limit")},
        )
        if mine != source.llm:
            differ.append("llm")
    if differ:
        raise RunError(
            f"{path} made its first stage with other settings ({', '.join(differ)}); a rerank "
            "reuses that run's settings for everything before its stages"
        )
    return source
