"""A partition as this broker sees it: its log, its role, its high watermark, and who waits for new data."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from broker_runtime.errors import KafkaError
from broker_runtime.log.partition_log import PartitionLog


@dataclass(eq=False)
class Partition:
    topic: str
    index: int
    topic_id: uuid.UUID
    log: PartitionLog
    leader_id: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    broker_id: int
    high_watermark: int = 0
    # The version of the partition's state in ZooKeeper (Kafka's partition epoch): an AlterPartition from this
    # leader names it, and the controller refuses one based on an older state. 0 in standalone mode.
    partition_epoch: int = 0
    leader_recovery_state: int = 0  # 1 after an unclean election, until the leader has fenced the others
    # The latest append still waiting for its batch to be validated off the event loop; later appends to this
    # partition wait for it, so that batches are appended in arrival order (handlers/produce.py).
    append_tail: asyncio.Task | None = None
    _waiters: set[asyncio.Future] = field(default_factory=set)

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.broker_id

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """Fence requests from clients with a stale or future view of leadership (KIP-320)."""
        if current_leader_epoch < 0:
            return
        if current_leader_epoch < self.leader_epoch:
            raise KafkaError(ErrorCode.fenced_leader_epoch)
        if current_leader_epoch > self.leader_epoch:
            raise KafkaError(ErrorCode.unknown_leader_epoch)

    def require_leader(self) -> None:
        if not self.is_leader:
            raise KafkaError(ErrorCode.not_leader_or_follower)

    def maybe_advance_high_watermark(self) -> None:
        # With no followers in the ISR the leader's log end is the high watermark.
        if self.isr == [self.broker_id] or not self.isr:
            new = self.log.log_end_offset
        else:
            return
        if new != self.high_watermark:
            self.high_watermark = new
            self.wake_waiters()

    def add_waiter(self, future: asyncio.Future) -> None:
        self._waiters.add(future)

    def remove_waiter(self, future: asyncio.Future) -> None:
        self._waiters.discard(future)

    def wake_waiters(self) -> None:
        waiters, self._waiters = self._waiters, set()
        for future in waiters:
            if not future.done():
                future.set_result(None)
