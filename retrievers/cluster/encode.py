"""A corpus encoded by a Ray cluster's workers (``--ray``), chunk by chunk.

The chunks are the ones a one-process encode makes (`retrievers.dense`: longest first, the
same size and names); the driver hands those its cache lacks to `EncodeWorker` actors and
saves each as it comes back, so an interrupted encode resumes from the chunks already saved,
with or without the cluster. Each worker loads the model once, with the driver's settings and
the dtype the driver resolved (so the cache key is the driver's), on its own device: where the
cluster has GPUs, one worker per GPU; else one per node with CPUs, holding all of them. A
chunk's vectors are the model's on that kind of device and dtype, the same bytes a
one-process encode gives there; a worker that loads the model as something else (another
revision, another length) is refused in one line, as is a worker that fails or dies, and every
chunk saved so far is kept.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from ..dense import ChunkEncoder, ChunkEncoderFor, EncoderSettings, LoadedEncoder, load_encoder
from .connect import ClusterError, connect, one_line, shown

IN_FLIGHT = 2  # chunks queued per worker: the next is there when one finishes


class EncodeWorker:
    """The model on one worker (made a Ray actor by `cluster_chunks`)."""

    def __init__(self, settings: EncoderSettings) -> None:
        self._loaded = load_encoder(settings, progress=False)

    def encoder_id(self) -> str:
        return self._loaded.encoder_id

    def encode(self, texts: list[str], instruction: str) -> np.ndarray:
        return np.asarray(self._loaded.encode(texts, instruction, "doc"), dtype=np.float32)


def on_cluster(address: str) -> ChunkEncoderFor:
    """`retrievers.dense.build_dense`'s ``encode_on`` for the cluster at ``address``, joined
    now: a cluster that cannot be used is one line, before any model is loaded."""
    connect(address)
    return lambda settings, loaded: cluster_chunks(address, settings, loaded)


def cluster_chunks(address: str, settings: EncoderSettings, loaded: LoadedEncoder) -> ChunkEncoder:
    """Chunks encoded by the cluster at ``address``; ``loaded`` is the driver's model, whose
    encoder id every worker's must equal."""

    def encode_chunks(
        pending: list[tuple[str, list[str]]], instruction: str
    ) -> Iterator[tuple[str, np.ndarray]]:
        if not pending:
            return
        ray = connect(address)
        actors = _start(ray, settings, len(pending))
        try:
            yield from _dispatch(ray, actors, pending, instruction, address, loaded.encoder_id)
        finally:  # done, failed or interrupted: the workers go, with any chunk still queued
            for actor in actors:
                ray.kill(actor)

    return encode_chunks


def _start(ray: Any, settings: EncoderSettings, chunks: int) -> list[Any]:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    worker = ray.remote(EncodeWorker)
    gpus = int(ray.cluster_resources().get("GPU", 0))
    if gpus:
        return [worker.options(num_gpus=1).remote(settings) for _ in range(min(gpus, chunks))]
    nodes = [n for n in ray.nodes() if n["Alive"] and n["Resources"].get("CPU", 0) >= 1]
    return [
        worker.options(
            num_cpus=n["Resources"]["CPU"],
            scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False),
        ).remote(settings)
        for n in nodes[:chunks]
    ]


def _dispatch(
    ray: Any,
    actors: list[Any],
    pending: list[tuple[str, list[str]]],
    instruction: str,
    address: str,
    encoder_id: str,
) -> Iterator[tuple[str, np.ndarray]]:
    for found in _get(ray, [a.encoder_id.remote() for a in actors], address):
        if found != encoder_id:
            raise ClusterError(
                f"--ray {shown(address)}: a worker loads the model as {found}, this process as "
                f"{encoder_id}; give every node the same model folder and packages"
            )
    todo = list(reversed(pending))
    running: dict[Any, tuple[str, Any]] = {}

    def feed(actor: Any) -> None:
        if todo:
            name, texts = todo.pop()
            running[actor.encode.remote(texts, instruction)] = (name, actor)

    for actor in actors:
        for _ in range(IN_FLIGHT):
            feed(actor)
    while running:
        [done], _ = ray.wait(list(running), num_returns=1)
        name, actor = running.pop(done)
        [part] = _get(ray, [done], address)
        feed(actor)
        yield name, part


def _get(ray: Any, refs: list[Any], address: str) -> list[Any]:
    try:
        return ray.get(refs)
    except (ray.exceptions.RayTaskError, ray.exceptions.RayActorError) as e:
        cause = getattr(e, "cause", None)  # the worker's own exception, when it raised one
        said = f"{type(cause).__name__}: {one_line(cause)}" if cause is not None else one_line(e)
        raise ClusterError(f"--ray {shown(address)}: an encode worker failed: {said}") from None
