"""Rerank a finished run or a TREC run file: `python -m agents.rerank SOURCE --rerank KIND ...`.

``SOURCE`` is a run folder of `agents.run`, or a TREC run file (``qid Q0 docid rank score
tag``, any tool's) with ``--task`` naming the one task it ranks (as `agents.run`'s
``--dataset``: an R2MED task name, a folder, or demo).

A run folder: the new run folder (beside the source, named ``<source>-reranked-<stages>``
unless ``--run-name`` says) reuses the source's saved first-stage lists: no retriever is built
and no agent runs. Its config is the source's, with these stages and ``source_run`` naming the
folder they came from. Stages the new chain shares with the source's, from the first on,
are reused as well: ``--rerank cross:m --rerank llm-listwise`` after a run that ended in
``cross:m`` pays only for the listwise stage.

A run file: its lists, checked against the task and ordered as trec_eval orders them
(`agents.execution.run_file_stage`), are the first stage; the run folder (in ``--runs-dir``, named
``<file stem>-<task>-reranked-...``) records the file's path and sha256 in ``run_file`` and
``run_file_sha256``, so a resume over a changed file is refused. ``--depth``, ``--ties``,
``--missing`` and ``--limit`` are this first stage's, as `agents.run`'s are an agent's;
``--duplicates max`` reads a file that lists a (qid, docid) pair twice, which is refused
otherwise, keeping each pair's highest score.

The stages call ``--rerank-model`` (default: the source run's model, or the embedded model
when the source called none). Temperature and max tokens are the source's LLM settings when
its agent called a model, so that its config stays true for both stages; ``--max-tokens`` is
then the budget of the stages that have one (option ``max_tokens``: reasonrank, rank1, ...),
as their specs' ``max_tokens=`` is.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from agents.commands import cli
from agents.commands.cli import command, setup_logging
from agents.config.registry import STAGES
from agents.config.run_config import ConfigError, LLMConfig, RunConfig
from agents.config.serialise import from_dict
from agents.config.settings import add_arguments, from_settings, settings_from_args
from agents.config.stages import STAGE_WIDE, stage_kind, stages_with, takes_wide
from agents.execution.report import paper_for, print_summary, task_printer
from agents.llm.sampling import SETTINGS as SAMPLING_SETTINGS
from eval.runs import NotARunFolder, RunFolder
from eval.trec import DUPLICATE_RULES, RUN_FILE_ORDERS

# the flags of agents.run that a rerank of a finished run may set
# the sampling settings (agents.llm.sampling): the source run's agent was sent its own
WHAT_THE_SOURCE_DECIDES = ("preset", *SAMPLING_SETTINGS)
LLM_FLAGS = (*WHAT_THE_SOURCE_DECIDES, "cache", "concurrency", "rate_limit")
FLAGS = (
    "rerank", *STAGE_WIDE, *LLM_FLAGS, "prompt", "runs_dir", "run_name", "cache_dir",
    "timeout",  # agents.run's own flag (agents.config.settings): each attempt's wait for an answer
)  # fmt: skip
# a run file's first stage: what a run folder's config says for its own (--task is the dataset)
FILE_FLAGS = ("depth", "ties", "missing", "limit")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m agents.rerank",
        allow_abbrev=False,
        description="Rerank the saved ranked lists of a finished agents.run run, or of a TREC "
        "run file over one task.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="rerank stages:\n"
        + "".join(f"  {n:<16} {s.description}\n" for n, s in STAGES.items()),
    )
    p.add_argument(
        "source",
        type=Path,
        help="a finished run folder (written by agents.run), or a TREC run file with --task",
    )
    p.add_argument(
        "--task",
        "--dataset",
        dest="dataset",
        metavar="TASK",
        help="the one task a run file ranks: an R2MED task name, a folder or demo, as "
        "agents.run's --dataset (a run folder's task is its own)",
    )
    add_arguments(p, only=(*FLAGS, *FILE_FLAGS))
    p.add_argument(
        "--duplicates",
        choices=DUPLICATE_RULES,
        default=None,
        help="a run file listing a (qid, docid) pair twice: refuse it, as trec_eval does, or "
        "keep each pair's highest score (max) (default: refuse)",
    )
    p.add_argument(
        "--order",
        choices=RUN_FILE_ORDERS,
        default=None,
        help="a run file's documents in trec_eval's order (score: score descending, ties by "
        "doc id) or as the file lists them (file: ReasonRank's loader) (default: score)",
    )
    p.add_argument(
        "--overwrite", action="store_true", help="replace a run folder of another config"
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    args = p.parse_args(argv)
    if not args.rerank:
        p.error("give at least one --rerank stage")
    return args


def rerank_config(source_dir: Path, settings: dict) -> RunConfig:
    """The config of a rerank of the run in `source_dir`, from this command's settings."""
    if given := [k for k in FILE_FLAGS if k in settings]:
        raise ConfigError(
            f"--{given[0]}: a run folder's first stage keeps its own settings; --depth, --ties, "
            f"--missing and --limit are for a run file (with --task)"
        )
    try:
        source = from_dict(RunFolder(source_dir).config())
    except NotARunFolder as e:
        raise ConfigError(str(e)) from None
    except (ValueError, TypeError) as e:
        raise ConfigError(f"{RunFolder(source_dir).config_path}: {e}") from None
    wide = {STAGE_WIDE[k]: v for k, v in settings.items() if k in STAGE_WIDE}
    llm_given = {k: settings[k] for k in LLM_FLAGS if k in settings}
    if source.llm is not None and source.agent_calls_llm and _budgets(settings, source):
        # the agent keeps its budget; the stages that have one of their own take this one
        wide["max_tokens"] = llm_given.pop("max_tokens")
    stages = stages_with(settings["rerank"], wide)
    if source.llm is not None and source.agent_calls_llm:
        for key in WHAT_THE_SOURCE_DECIDES:
            if key in llm_given and llm_given[key] != getattr(source.llm, key):
                raise ConfigError(
                    f"--{key.replace('_', '-')} {llm_given[key]}: the source run's agent used "
                    f"{_used(source, key)}; its LLM settings are this run's too"
                )
        llm = dataclasses.replace(source.llm, **llm_given)
    else:
        model = settings.get("rerank_model")
        llm = LLMConfig(**({"model": model} if model else {}), **llm_given)
    prompt_files = dict(source.prompt_files)
    if "prompt" in settings:
        prompt_files.update(from_settings({"prompt": settings["prompt"]}).prompt_files)
    return dataclasses.replace(
        source,
        rerank=stages,
        llm=llm,
        prompt_files=prompt_files,
        recorded=dataclasses.replace(source.recorded, prompts={}),
        source_run=str(source_dir.resolve()),
        runs_dir=str(settings.get("runs_dir") or source_dir.resolve().parent),
        run_name=settings.get("run_name"),
        cache_dir=settings.get("cache_dir") or source.cache_dir,
        timeout=settings.get("timeout", source.timeout),
    )


def _budgets(settings: dict, source: RunConfig) -> bool:
    """Whether ``--max-tokens`` differs from the source agent's and some stage has a budget
    option (``max_tokens``) for it."""
    assert source.llm is not None
    given = settings.get("max_tokens")
    if given is None or given == source.llm.max_tokens:
        return False
    return any(takes_wide(stage_kind(text), "max_tokens") for text in settings["rerank"])


def run_file_config(
    path: Path, settings: dict, duplicates: str | None = None, order: str | None = None
) -> RunConfig:
    """The config of a rerank of the TREC run file at ``path`` over the task ``--task``
    names, from this command's settings: agent "none", the file's lists as its first stage;
    ``duplicates`` says how a pair the file lists twice is read (default: refused)."""
    if path.is_dir():
        raise ConfigError(f"{path}: a run folder, whose task is its own; drop --task")
    if "dataset" not in settings:
        raise ConfigError(f"{path}: a TREC run file; name the task it ranks with --task")
    if not path.is_file():
        raise ConfigError(f"{path}: no such run file")
    config = from_settings({**settings, "agent": "none"})
    model = settings.get("rerank_model")
    if model and config.llm is not None:  # the run's model is the stages': no agent calls one
        config = dataclasses.replace(config, llm=dataclasses.replace(config.llm, model=model))
    return dataclasses.replace(
        config,
        run_file=str(path.resolve()),
        run_file_duplicates=duplicates or "refuse",
        run_file_order=order or "score",
    )


def _used(source: RunConfig, key: str) -> str:
    """What the source run's agent had for sampling setting ``key``: as given, else what its
    preset sent its first node."""
    given = getattr(source.llm, key)
    if given is not None or key == "preset":
        return str(given)
    sent = next(iter(source.recorded.sampling.values()), {}).get("params", {})
    name = SAMPLING_SETTINGS[key]
    value = sent.get(name, sent.get("max_completion_tokens") if name == "max_tokens" else None)
    return f"{value} (its preset's)" if value is not None else "none (not sent)"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    setup_logging()
    return command(lambda: _rerank(args))


def _rerank(args: argparse.Namespace) -> int:
    settings = settings_from_args(args)
    if "dataset" in settings or args.source.is_file():
        config = run_file_config(args.source, settings, args.duplicates, args.order)
    else:
        for flag, value in (("--duplicates", args.duplicates), ("--order", args.order)):
            if value is not None:
                raise ConfigError(f"{flag}: a run folder has no run file to read")
        config = rerank_config(args.source, settings)
    # after parsing: --help loads no retriever or LLM stack
    from agents.execution.whole_run import run_dataset

    paper = paper_for(config)  # a cross-encoder over R2MED's NV-Embed-v2 lists is a row
    result = run_dataset(
        config, overwrite=args.overwrite, progress=not args.quiet, on_task=task_printer(paper)
    )
    return print_summary(result, paper)


if __name__ == "__main__":
    cli.exit_with(main())
