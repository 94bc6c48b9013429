"""Producer ids from blocks: synchronous while a block lasts, the next block fetched before it runs out."""

from __future__ import annotations

import asyncio

import pytest
from kio.schema.errors import ErrorCode

from broker_runtime.errors import KafkaError
from broker_runtime.txn.producer_ids import ProducerIdManager


class Blocks:
    def __init__(self) -> None:
        self.next_start = 0
        self.calls = 0
        self.gate: asyncio.Event | None = None

    async def allocate(self, size: int) -> int:
        self.calls += 1
        if self.gate is not None:
            await self.gate.wait()
        start, self.next_start = self.next_start, self.next_start + size
        return start


def test_ids_are_unique_across_blocks_and_the_next_block_is_fetched_early() -> None:
    async def scenario() -> None:
        blocks = Blocks()
        manager = ProducerIdManager(blocks.allocate, block_size=10)
        ids = [await manager.next() for _ in range(9)]
        assert ids == list(range(9))
        await asyncio.sleep(0)  # the prefetch started at 90 % runs
        assert blocks.calls == 2
        ids += [manager.generate() for _ in range(11)]  # no waiting: the next block is at hand
        assert ids == list(range(20))

    asyncio.run(scenario())


def test_generate_without_a_block_asks_the_client_to_retry() -> None:
    async def scenario() -> None:
        blocks = Blocks()
        blocks.gate = asyncio.Event()
        manager = ProducerIdManager(blocks.allocate, block_size=10)
        with pytest.raises(KafkaError) as raised:
            manager.generate()
        assert raised.value.error_code is ErrorCode.coordinator_load_in_progress
        waiter = asyncio.ensure_future(manager.ready())
        await asyncio.sleep(0)
        assert not waiter.done()
        blocks.gate.set()
        await waiter
        assert manager.generate() == 0
        assert blocks.calls == 1

    asyncio.run(scenario())
