"""A small in-memory broker for coordinator runtime tests: real batches in a memory log, a replica manager whose
high watermark a test holds back or releases, leadership events on demand. No sockets, no disk."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

from broker_runtime.clock import Clock
from broker_runtime.errors import KafkaError
from broker_runtime.protocol.records import read_header, stamp


class MemoryLog:
    def __init__(self) -> None:
        self.batches: list[bytearray] = []
        self.log_start_offset = 0
        self.log_end_offset = 0

    def append(self, batch: bytearray) -> int:
        header = read_header(batch)
        base = self.log_end_offset
        stamp(batch, 0, base, 0)
        self.batches.append(batch)
        self.log_end_offset = base + header.last_offset_delta + 1
        return base

    def read(self, start: int, max_bytes: int, max_offset: int, min_one_batch: bool) -> bytes:
        out = bytearray()
        for batch in self.batches:
            header = read_header(batch)
            if header.next_offset <= start or header.base_offset >= max_offset:
                continue
            if out and len(out) + len(batch) > max_bytes:
                break
            out += batch
        return bytes(out)


@dataclass
class FakePartition:
    log: MemoryLog = field(default_factory=MemoryLog)
    held_high_watermark: int | None = None  # None: every append is committed at once (a lone replica)
    waiters: list[asyncio.Future] = field(default_factory=list)

    @property
    def high_watermark(self) -> int:
        return self.log.log_end_offset if self.held_high_watermark is None else self.held_high_watermark

    def commit_to(self, offset: int | None) -> None:
        self.held_high_watermark = offset
        for waiter in self.waiters:
            if not waiter.done():
                waiter.set_result(None)


@dataclass
class AppendResult:
    base_offset: int
    duplicate: bool = False


class FakeReplicaManager:
    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.partitions: dict[int, FakePartition] = {}
        self.listeners: list[Any] = []
        self.fail_with: ErrorCode | None = None
        self.gate: asyncio.Event | None = None  # when set, appends wait for it
        self.answer_duplicate = False  # answer as the log answers a retried batch: an earlier batch's offsets
        self.appended_batches = 0

    def add_leadership_listener(self, fn) -> None:
        self.listeners.append(fn)

    def lead(self, index: int, is_leader: bool = True, epoch: int = 0) -> None:
        self.partitions.setdefault(index, FakePartition())
        for fn in self.listeners:
            fn(self.topic, index, is_leader, epoch)

    def get_partition(self, topic: str, index: int):
        return self.partitions.get(index) if topic == self.topic else None

    async def append(self, topic, index, batch, header, *, acks, timeout_ms):
        assert (topic, acks) == (self.topic, -1)
        if self.gate is not None:
            await self.gate.wait()
        if self.fail_with is not None:
            raise KafkaError(self.fail_with)
        if self.answer_duplicate:
            return AppendResult(0, duplicate=True)
        self.appended_batches += 1
        partition = self.partitions[index]
        base = partition.log.append(batch)
        if partition.high_watermark < partition.log.log_end_offset:
            raise KafkaError(ErrorCode.request_timed_out)  # written here, not (yet) by the ISR
        return AppendResult(base)

    async def wait_for_data(self, partitions, timeout_ms) -> None:
        future = asyncio.get_running_loop().create_future()
        for p in partitions:
            p.waiters.append(future)
        await asyncio.wait([future], timeout=timeout_ms / 1000)


class FakeMetadata:
    def __init__(self, topic: str, partitions: int) -> None:
        self.topic_name = topic
        self.topic = type("Topic", (), {"partitions": dict.fromkeys(range(partitions))})()

    def topics(self):
        return {self.topic_name: self.topic}

    def brokers(self):
        return [object()]


class FakeBroker:
    def __init__(self, clock: Clock, topic: str, partitions: int, config: dict[str, Any]) -> None:
        self.clock = clock
        self.config = config
        self.replica_manager = FakeReplicaManager(topic)
        self.metadata = FakeMetadata(topic, partitions)
        self.member = None  # standalone


async def until(condition, what: str) -> None:
    """Wait for the runtime's tasks to reach a state (they run on the same loop; no timing involved)."""
    for _ in range(2000):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"no {what}")
