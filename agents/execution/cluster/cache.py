"""One LLM response cache for a whole cluster: the driver's, owned by an actor on its node.

Every worker of a `--ray` command reads and writes through `RemoteCache`, which forwards
``get``/``set`` to `CacheOwner`, an actor pinned to the driver's node that holds the driver's
`LLMCache` (its diskcache folder). Keys and entries are the ones a local run uses, so a rerun
on the cluster, or a local rerun of a cluster run, is answered from the cache. Nothing is
shared through the file system and no server is started by hand: the actor lives as long as
the driver's Ray session.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agents.llm.cache import LLMCache


class CacheOwner:
    """The driver's cache (made a Ray actor by `start_owner`)."""

    def __init__(self, directory: str) -> None:
        self._cache = LLMCache(Path(directory))

    def get(self, key: str) -> dict | None:
        return self._cache.get(key)

    def set(self, key: str, entry: dict) -> None:
        self._cache.set(key, entry)


def start_owner(ray: Any, directory: Path) -> Any:
    """A `CacheOwner` actor on the driver's node, over ``directory`` (the driver's
    ``cache_dir/llm``)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = ray.get_runtime_context().get_node_id()
    actor = ray.remote(CacheOwner).options(
        num_cpus=0,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=here, soft=False),
    )
    return actor.remote(str(directory))


class RemoteCache:
    """`LLMCache`'s interface on a worker, answered by the driver's `CacheOwner`."""

    def __init__(self, owner: Any) -> None:
        self._owner = owner

    def get(self, key: str) -> dict | None:
        import ray

        return ray.get(self._owner.get.remote(key))

    def set(self, key: str, entry: dict) -> None:
        import ray

        # waited for: a cell's answers are in the driver's cache when the cell ends
        ray.get(self._owner.set.remote(key, entry))

    def close(self) -> None:
        pass
