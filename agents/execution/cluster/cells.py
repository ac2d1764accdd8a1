"""A sweep's cells as Ray tasks: each on a worker, with the resources it declares.

The driver sends each cell its configuration and the inputs it reads from the driver's disk
(`Inputs`: dataset folders, prompt files, a run file, a generations file, and the cell's run
folder when it resumes), the worker runs it as `agents.sweep` runs a cell locally, in a
folder of its own, with the driver's LLM cache (agents.execution.cluster.cache), and sends the run
folder back; the driver writes it where the local sweep would. A worker that fails or dies fails its
cell alone, in one line; Ctrl-C on the driver cancels every task still running.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.config.run_config import RunConfig
from agents.execution.cluster.cache import RemoteCache, start_owner
from agents.execution.cluster.folders import pack, relocate, unpack
from eval.runs import RunFolder


@dataclass(frozen=True)
class Inputs:
    """What a cell reads from the driver's disk: each path with its files' bytes."""

    folders: Mapping[str, bytes]  # driver path -> packed folder
    files: Mapping[str, bytes]  # driver path -> contents
    run_folder: bytes | None  # the cell's run folder, when it exists (a resume)

    def place(self, root: Path) -> dict[str, str]:
        """Write the folders and files below ``root``; each driver path's place here."""
        paths: dict[str, str] = {}
        for n, (path, data) in enumerate(self.folders.items()):
            paths[path] = str(unpack(data, root / "in" / str(n) / Path(path).name))
        for n, (path, data) in enumerate(self.files.items()):
            target = root / "files" / str(n) / Path(path).name
            target.parent.mkdir(parents=True)
            target.write_bytes(data)
            paths[path] = str(target)
        return paths


@dataclass(frozen=True)
class Outcome:
    status: int  # as agents.run would exit: 0 done, 1 some queries failed, 2 refused
    printed: str  # what the cell printed on stdout
    errors: str  # and on stderr (a refusal's line, a failed query's warning)
    run_folder: bytes | None
    node: str  # the Ray node that ran it (its id's first 8 hex digits)


def inputs(config: RunConfig, run_folder: Path | None) -> Inputs:
    """The driver-side inputs of a cell whose run folder is ``run_folder`` (None: a run's
    query workers, whose run folder stays with the driver)."""
    folders, files = {}, {}
    for part in config.dataset.split(","):
        if Path(part).is_dir():
            folders[part] = pack(Path(part))
    for value in (*config.prompt_files.values(), config.run_file, config.generations):
        if value and Path(value).is_file():
            files[value] = Path(value).read_bytes()
    resumed = run_folder is not None and RunFolder(run_folder).config_path.is_file()
    existing = pack(run_folder) if resumed else None
    return Inputs(folders, files, existing)


def run_on_worker(
    config: RunConfig,
    shipped: Inputs,
    driver_run_folder: str,
    overwrite: bool,
    owner: Any,
    run_cell: Callable[[RunConfig, bool, bool], int],
) -> Outcome:
    """A cell on a worker (the body of its Ray task): ``run_cell`` (agents.execution.sweep's)
    runs it."""
    from agents.llm.cache import use_opener
    from eval.datasets import default_cache_dir

    with tempfile.TemporaryDirectory(prefix="r2med-cell-") as tmp:
        root = Path(tmp)
        paths = shipped.place(root)  # driver path -> worker path
        runs = root / "runs"
        paths[str(Path(driver_run_folder).parent)] = str(runs)
        paths[config.runs_dir] = str(runs)
        # the worker's own cache, for indexes and models; LLM answers are the driver's
        cache = str(default_cache_dir())
        if config.cache_dir:
            paths[config.cache_dir] = cache
        name = Path(driver_run_folder).name
        local = moved_config(config, paths, str(runs), name, cache)
        folder = runs / name
        if shipped.run_folder is not None:
            unpack(shipped.run_folder, folder)
            relocate(folder, paths)
        use_opener(lambda directory: RemoteCache(owner))
        printed, errors = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(errors):
                status = run_cell(local, overwrite, quiet=True)
        finally:
            use_opener(None)
        back = None
        if RunFolder(folder).config_path.is_file():
            relocate(folder, {worker: driver for driver, worker in paths.items()})
            back = pack(folder)
        import ray

        node = ray.get_runtime_context().get_node_id()[:8]
        return Outcome(status, printed.getvalue(), errors.getvalue(), back, node)


def moved_config(
    config: RunConfig, paths: Mapping[str, str], runs: str, name: str | None, cache: str
) -> RunConfig:
    """``config`` with the driver's paths replaced by their places on this worker."""

    def at(value: str | None) -> str | None:
        return paths.get(value, value) if value else value

    return dataclasses.replace(
        config,
        dataset=",".join(paths.get(p, p) for p in config.dataset.split(",")),
        prompt_files={k: at(v) for k, v in config.prompt_files.items()},
        run_file=at(config.run_file),
        generations=at(config.generations),
        runs_dir=runs,
        run_name=name,
        cache_dir=cache,
    )


def run_cells(
    ray: Any,
    run_cell: Callable[[RunConfig, bool, bool], int],
    cells: list[tuple[str, RunConfig]],
    runs_dir: Path,
    llm_cache: Path,
    overwrite: bool,
    resources: Callable[[str], dict[str, Any]],
    report: Callable[[str, Outcome | None, str | None], None],
) -> dict[str, int]:
    """Run ``cells`` (name, config) on the cluster with ``run_cell`` (config, overwrite,
    quiet -> exit status), in parallel as far as it allows; each
    finished cell's run folder written to ``runs_dir/<name>`` and ``report``ed (outcome, or a
    failure's one line). Returns each cell's exit status."""
    owner = start_owner(ray, llm_cache)
    task = ray.remote(run_on_worker)
    pending: dict[Any, str] = {}
    for name, config in cells:
        folder = runs_dir / name
        # spread over the nodes: by default Ray queues a task on the driver's node while it
        # is busy rather than on an idle one (measured: a 4-cell sweep left a node idle)
        ref = task.options(max_retries=0, scheduling_strategy="SPREAD", **resources(name)).remote(
            config, inputs(config, folder), str(folder), overwrite, owner, run_cell
        )
        pending[ref] = name
    status: dict[str, int] = {}
    try:
        while pending:
            done, _ = ray.wait(list(pending), num_returns=1, timeout=0.5)
            for ref in done:
                name = pending.pop(ref)
                try:
                    outcome = ray.get(ref)
                except Exception as e:  # the worker died or raised: this cell alone fails
                    line = _failure_line(e)
                    status[name] = 2
                    report(name, None, line)
                    continue
                if outcome.run_folder is not None:
                    _replace(runs_dir / name, outcome.run_folder)
                status[name] = outcome.status
                report(name, outcome, None)
    except BaseException:  # Ctrl-C on the driver: the cluster stops too
        for ref in pending:
            ray.cancel(ref, force=True)
        raise
    finally:
        ray.kill(owner)
    return status


def _failure_line(e: Exception) -> str:
    text = str(e).strip().splitlines()
    cause = getattr(e, "cause", None)
    if cause is not None:
        text = [f"{type(cause).__name__}: {cause}".splitlines()[0]]
    return f"failed on the cluster: {text[0] if text else type(e).__name__}"


def _replace(folder: Path, data: bytes) -> None:
    """Put the worker's run folder where the local sweep would have written it."""
    staging = folder.with_name(f".{folder.name}.incoming-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    unpack(data, staging)
    if folder.exists():
        shutil.rmtree(folder)
    os.replace(staging, folder)


def print_outcome(name: str, outcome: Outcome | None, failure: str | None) -> None:
    if failure is not None:
        print(f"{name}: {failure}", file=sys.stderr, flush=True)
        return
    assert outcome is not None
    sys.stdout.write(outcome.printed)
    sys.stdout.flush()
    sys.stderr.write(outcome.errors)
    sys.stderr.flush()
