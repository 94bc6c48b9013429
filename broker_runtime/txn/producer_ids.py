"""Producer ids handed out from blocks the metadata store allocates: Kafka's ProducerIdManager.

Blocks come from the metadata store (the standalone file, or ZooKeeper's `/latest_producer_id_block` in a
cluster), which is slow and asynchronous; the transaction coordinator's shard is synchronous. So ids are taken
synchronously from the current block (`generate`), and the next block is fetched in the background once 90 % of
the current one is used, as Kafka's RPCProducerIdManager does. When no id is left `generate` raises
COORDINATOR_LOAD_IN_PROGRESS (the client retries); `next()` waits for a block instead, for callers that may.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from kio.schema.errors import ErrorCode

from broker_runtime.errors import KafkaError

log = logging.getLogger(__name__)

PRODUCER_ID_BLOCK = 1000
PREFETCH_AT = 0.9


class ProducerIdManager:
    def __init__(
        self, allocate_block: Callable[[int], Awaitable[int]], block_size: int = PRODUCER_ID_BLOCK
    ) -> None:
        self._allocate_block = allocate_block
        self.block_size = block_size
        self._next = 0
        self._end = 0  # exclusive end of the current block
        self._prefetched: int | None = None  # start of the next block, once allocated
        self._fetching: asyncio.Task[int] | None = None

    def generate(self) -> int:
        """A fresh producer id now, or KafkaError(COORDINATOR_LOAD_IN_PROGRESS) while no block is at hand."""
        if self._next >= self._end and self._prefetched is not None:
            self._next, self._end, self._prefetched = (
                self._prefetched,
                self._prefetched + self.block_size,
                None,
            )
        if self._next >= self._end:
            self._fetch()
            raise KafkaError(ErrorCode.coordinator_load_in_progress, "no producer id block yet; retry")
        producer_id = self._next
        self._next += 1
        if (
            self._prefetched is None
            and self._next - (self._end - self.block_size) >= PREFETCH_AT * self.block_size
        ):
            self._fetch()
        return producer_id

    async def next(self) -> int:
        """A fresh producer id, waiting for a block if none is at hand."""
        while True:
            try:
                return self.generate()
            except KafkaError:
                assert self._fetching is not None
                await asyncio.shield(self._fetching)

    async def ready(self) -> None:
        """Wait until `generate` has an id to give (a block is at hand)."""
        if self._next < self._end or self._prefetched is not None:
            return
        self._fetch()
        assert self._fetching is not None
        await asyncio.shield(self._fetching)

    def _fetch(self) -> None:
        if self._fetching is not None and not self._fetching.done():
            return
        self._fetching = asyncio.get_running_loop().create_task(self._fetch_block(), name="producer-id-block")

    async def _fetch_block(self) -> int:
        try:
            start = await self._allocate_block(self.block_size)
        except Exception:
            log.exception("allocating a block of %d producer ids failed", self.block_size)
            raise
        self._prefetched = start
        log.info("allocated producer ids %d-%d", start, start + self.block_size - 1)
        return start
