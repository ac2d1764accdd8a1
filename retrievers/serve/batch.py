"""Searches that arrive together, run together: one batch per task and depth, one at a time.

Every query of every request waits in one queue; a single worker takes all that are waiting
(up to ``max_batch``), groups them by task and ``k``, and searches each group with the
retriever's batched search in a worker thread (a dense retriever encodes the group at once).
While a batch runs, new queries gather for the next one, so the batch size follows the load
with no added wait. The queue is bounded (``max_queue`` queries): past it a request is refused
at once (`Busy`) rather than left to time out. A client that goes away still has its queries
searched (the web server does not cancel its handler), and the answer is dropped; a request
that is cancelled has its queries skipped; nobody else notices either.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from retrievers.base import SearchRequest, search_all
from retrievers.serve.index import ServedIndex
from retrievers.serve.limits import MAX_BATCH, MAX_QUEUE


class Busy(RuntimeError):
    """The queue is full: the request is refused (HTTP 503), the client may retry."""


@dataclass
class _Item:
    index: ServedIndex
    request: SearchRequest
    k: int
    future: asyncio.Future


@dataclass
class Stats:
    queries: int = 0
    batches: int = 0
    largest: int = 0


@dataclass
class Batcher:
    max_batch: int = MAX_BATCH
    max_queue: int = MAX_QUEUE
    stats: Stats = field(default_factory=Stats)
    _queue: asyncio.Queue | None = None
    _pending: int = 0

    async def search(
        self, index: ServedIndex, requests: list[SearchRequest], k: int
    ) -> list[dict[str, float]]:
        if self._queue is None:
            raise RuntimeError("the batcher is not running")
        if self._pending + len(requests) > self.max_queue:
            raise Busy(f"{self._pending} queries are waiting (--max-queue {self.max_queue}); "
                       "retry shortly")  # fmt: skip
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in requests]
        self._pending += len(requests)
        for request, future in zip(requests, futures, strict=True):
            self._queue.put_nowait(_Item(index, request, k, future))
        return list(await asyncio.gather(*futures))

    async def run(self) -> None:
        """The worker; runs until cancelled."""
        self._queue = asyncio.Queue()
        while True:
            batch = [await self._queue.get()]
            while len(batch) < self.max_batch and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            try:
                await self._run_batch(batch)
            finally:
                self._pending -= len(batch)

    async def _run_batch(self, batch: list[_Item]) -> None:
        groups: dict[tuple[str, int], list[_Item]] = defaultdict(list)
        for item in batch:
            if not item.future.done():  # a client that went away cancelled it
                groups[item.index.task.name, item.k].append(item)
        for (_, k), items in groups.items():
            requests = {str(i): item.request for i, item in enumerate(items)}
            try:
                found: Any = await asyncio.to_thread(search_all, items[0].index.retriever,
                                                     requests, k)  # fmt: skip
            except Exception as e:  # the whole group fails alike; the server goes on
                for item in items:
                    if not item.future.done():
                        item.future.set_exception(e)
                continue
            self.stats.batches += 1
            self.stats.queries += len(items)
            self.stats.largest = max(self.stats.largest, len(items))
            for i, item in enumerate(items):
                if not item.future.done():
                    item.future.set_result(found[str(i)])
