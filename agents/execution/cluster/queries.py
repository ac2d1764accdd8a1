"""One run's queries spread over a Ray cluster (``agents.run --ray ADDRESS``).

The driver runs the run as it always does, and writes every record, in its folder, as queries
finish; only the agent's graph is elsewhere: `ClusterGraph` stands where the local graph
stands, and sends each query to the least busy of a pool of `QueryWorker` actors. The driver
builds the task's retriever first, a dense corpus encoded by the cluster's workers
(retrievers.cluster.encode) into the driver's cache; each worker receives the cached corpus
vectors, builds the task's retriever and the agent's graph once (its own cache folder, where
the vectors are placed), with the driver's inputs sent as bytes
(agents.execution.cluster.cells.Inputs) and the driver's LLM cache (agents.execution.cluster.cache),
and answers queries with it. A query's failure comes back as the exception the graph raised, so its
record is the local run's; a worker that is gone (its node, or the whole cluster) stops the run in
one line naming ``--ray``, every finished query kept for the next run to resume from.

Rerank stages run on the driver, as locally.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from agents.config.run_config import RunConfig
from agents.execution.cluster.cache import RemoteCache, start_owner
from agents.execution.cluster.cells import Inputs, inputs, moved_config
from agents.execution.cluster.folders import pack, unpack
from retrievers.cluster.connect import ClusterError, one_line, shown


class QueryWorker:
    """A task's graph on a worker (made a Ray actor by `Cluster.graph`)."""

    def __init__(
        self,
        config: RunConfig,
        shipped: Inputs,
        task_index: int,
        owner: Any,
        agent_graph: Callable[..., tuple[Any, Any]],
        indexes: Mapping[str, bytes],
    ) -> None:
        from agents.execution.plan import prepare
        from agents.llm.cache import use_opener
        from eval.datasets import default_cache_dir

        self._inputs = tempfile.TemporaryDirectory(prefix="r2med-queries-")
        root = Path(self._inputs.name)
        paths = shipped.place(root)
        use_opener(lambda directory: RemoteCache(owner))
        cache = default_cache_dir()
        for relative, data in indexes.items():
            _place(data, cache / relative)
        # nothing is written in runs: the driver writes; indexes and models: the worker's cache
        local = moved_config(config, paths, str(root / "runs"), config.run_name, str(cache))
        plan = prepare(local)
        self._graph, _ = agent_graph(plan, plan.tasks[task_index], progress=False)

    async def invoke(self, state: dict) -> dict:
        return await self._graph.ainvoke(state)


@dataclasses.dataclass
class Cluster:
    """The cluster a run's queries go to: its `ray` module and the driver's cache owner."""

    ray: Any
    owner: Any
    config: RunConfig
    shipped: Inputs
    workers: int  # actors per task
    agent_graph: Callable[
        ..., tuple[Any, Any]
    ]  # agents.execution.whole_run's: (plan, task plan) -> graph

    address: str

    def graph(self, task_index: int, queries: int, retriever: Any, cache_dir: Path) -> ClusterGraph:
        """Workers for task ``task_index``, sent the corpus vectors of ``retriever`` (the
        task's, built here) cached below ``cache_dir``."""
        actor = self.ray.remote(QueryWorker).options(num_cpus=1, max_restarts=0)
        count = max(1, min(self.workers, queries))
        indexes = self.ray.put({str(f.relative_to(cache_dir)): pack(f)
                                for f in index_folders(retriever)})  # fmt: skip
        made = (self.config, self.shipped, task_index, self.owner, self.agent_graph, indexes)
        return ClusterGraph(self.ray, [actor.remote(*made) for _ in range(count)], self.address)


def index_folders(retriever: Any) -> list[Path]:
    """The cache folders of ``retriever``'s corpus vectors (a hybrid's members' too)."""
    found = []
    for member in getattr(retriever, "members", [retriever]):
        path = getattr(getattr(member, "index", None), "cache_path", None)
        if path is not None and Path(path).is_dir():
            found.append(Path(path))
    return found


def _place(data: bytes, folder: Path) -> None:
    """Unpack a cached index into ``folder`` unless it is there; whole or not at all, for the
    workers of a node may share its cache folder."""
    if folder.is_dir():
        return
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=".placing-") as tmp:
        unpack(data, Path(tmp) / "index")
        try:
            os.rename(Path(tmp) / "index", folder)
        except OSError:  # another worker of this node placed it first
            pass


class ClusterGraph:
    """A graph whose ``ainvoke`` runs on the least busy of ``actors``."""

    def __init__(self, ray: Any, actors: list[Any], address: str) -> None:
        self._ray = ray
        self._actors = actors
        self._busy = [0] * len(actors)
        self._address = address

    async def ainvoke(self, state: dict) -> dict:
        i = min(range(len(self._actors)), key=self._busy.__getitem__)
        self._busy[i] += 1
        try:
            return await self._actors[i].invoke.remote(state)
        except self._ray.exceptions.RayTaskError as e:
            cause = getattr(e, "cause", None)
            raise (cause if isinstance(cause, BaseException) else e) from None
        except self._ray.exceptions.RayActorError as e:  # a fault of the run: runner.RUN_ERRORS
            raise ClusterError(
                f"--ray {shown(self._address)}: a query worker is gone ({one_line(e)}); every "
                "finished query is kept: run the same command again to resume"
            ) from None
        finally:
            self._busy[i] -= 1

    def close(self) -> None:
        for actor in self._actors:
            self._ray.kill(actor)


def start(
    address: str, config: RunConfig, cache_dir: Path, agent_graph: Callable[..., tuple[Any, Any]]
) -> Cluster:
    """Join the cluster at ``address`` for ``config``'s run (its LLM cache: ``cache_dir``);
    each worker builds its graph with ``agent_graph`` (agents.execution.whole_run's)."""
    from retrievers.cluster.connect import connect

    ray = connect(address)
    cpus = int(ray.cluster_resources().get("CPU", 1))
    in_flight = config.llm.concurrency if config.llm is not None else 4
    workers = max(1, min(cpus, in_flight))
    shipped = inputs(config, None)
    owner = start_owner(ray, cache_dir / "llm")
    return Cluster(ray, owner, config, shipped, workers, agent_graph, address)
