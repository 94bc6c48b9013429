"""What a coordinator shard is to the runtime that drives it: Kafka's CoordinatorShard, sans I/O.

A shard is the state of one partition of a coordinator's internal topic (`__consumer_offsets`,
`__transaction_state`). Its request handlers are synchronous; a handler that changes persisted state queues an
`Append` (records plus a continuation) instead of changing it, and the runtime appends those records to the
partition, replays them into the shard at their offsets, then runs the continuation. Replay is the only code
that mutates persisted state, live and when the partition is loaded. Timers are data: the runtime asks for the
next deadline and polls the shard when it is due.

`Reply` is the shard's promise of an answer that may come later (after an append, or when other members act);
the runtime turns it into a future, unit tests read it directly.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from kio.schema.errors import ErrorCode

from broker_runtime.coordinator.timers import Timer, TimerQueue

T = TypeVar("T")

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1

# A record of an internal topic: key and value bytes (None value: a tombstone).
Record = tuple[bytes, bytes | None]


@dataclass(slots=True)
class Append:
    """Records the runtime must append to the shard's partition, replay into the shard, then report back on.

    A plain append's records may share a batch with its neighbours'. A transactional append (a producer id) is
    written as its own transactional batch of that producer; a marker (`marker_committed` not None) is a control
    batch that ends the producer's transaction in this partition, replayed with `Shard.replay_end_txn`.
    """

    records: list[Record]
    on_done: Callable[[ErrorCode | None], None] | None = None
    timestamp_ms: int = 0
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    marker_committed: bool | None = None
    coordinator_epoch: int = -1
    # A transactional append whose transaction the partition leader verified (KIP-890): the log checks it.
    verification_guard: object | None = None

    @property
    def is_transactional(self) -> bool:
        return self.producer_id != NO_PRODUCER_ID

    @property
    def batch_key(self) -> tuple[int, int, bool | None]:
        """Appends with equal keys may be written as one batch."""
        return self.producer_id, self.producer_epoch, self.marker_committed


class Shard(Protocol):
    """The runtime's view of a shard. The shard does no I/O and never sleeps."""

    def replay(
        self,
        key: bytes,
        value: bytes | None,
        offset: int,
        *,
        producer_id: int = ...,
        transactional: bool = ...,
    ) -> None:
        """Apply one record of the partition at `offset` (a transactional one stays pending until its marker)."""

    def replay_end_txn(self, producer_id: int, committed: bool, offset: int) -> None:
        """Apply a transaction marker at `offset`: the producer's pending records take effect or are dropped."""

    def finish_load(self) -> None:
        """Every committed record was replayed: build what is derived from them and start serving."""

    def unload(self) -> None:
        """This broker no longer leads the partition: answer everything parked (NOT_COORDINATOR)."""

    def take_appends(self) -> list[Append]:
        """The appends queued since the last call, in order."""

    def next_deadline(self) -> int | None:
        """The earliest timer deadline (monotonic ms), None when no timer is set."""

    def poll_timers(self) -> int:
        """Fire the timers that are due; how many fired."""


class ShardBase:
    """What every shard does alike for its runtime: hands over the appends it queued and fires its due timers
    (one at a time, in `_on_timer`)."""

    def __init__(self, clock) -> None:
        self.clock = clock
        self.timers = TimerQueue()
        self._appends: list[Append] = []

    def take_appends(self) -> list[Append]:
        appends, self._appends = self._appends, []
        return appends

    def next_deadline(self) -> int | None:
        return self.timers.next_deadline()

    def poll_timers(self) -> int:
        """Fire every timer that is due; returns how many fired."""
        fired = 0
        while (timer := self.timers.pop_due(self.clock.monotonic_ms())) is not None:
            fired += 1
            self._on_timer(timer)
        return fired

    def _on_timer(self, timer: Timer) -> None:
        raise NotImplementedError


class Reply(Generic[T]):
    """A response that is produced once, now or later. Completing twice keeps the first value."""

    __slots__ = ("_callbacks", "_done", "_value")

    def __init__(self) -> None:
        self._done = False
        self._value: T | None = None
        self._callbacks: list[Callable[[T], None]] = []

    @classmethod
    def of(cls, value: T) -> Reply[T]:
        reply: Reply[T] = cls()
        reply.complete(value)
        return reply

    @property
    def done(self) -> bool:
        return self._done

    def result(self) -> T:
        if not self._done:
            raise RuntimeError("reply is not complete yet")
        return self._value  # type: ignore[return-value]

    def complete(self, value: T) -> bool:
        if self._done:
            return False
        self._done = True
        self._value = value
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(value)
        return True

    def add_done_callback(self, callback: Callable[[T], None]) -> None:
        if self._done:
            callback(self._value)  # type: ignore[arg-type]
        else:
            self._callbacks.append(callback)
