"""Writing a decided transaction's markers to every partition it touched: Kafka's TransactionMarkerChannelManager.

Theory of operation
-------------------
A `MarkerJob` (from the coordinator shard, once PrepareCommit or PrepareAbort is in `__transaction_state`) names
the partitions that need a COMMIT or ABORT marker. The sender groups them by the partition's current leader,
looked up from the metadata on every attempt, and queues them per destination broker. One task per destination
drains its queue: everything queued goes out as one `write(broker_id, markers)` (the broker writes locally led
partitions in process and sends a WriteTxnMarkers request to the others). Per partition:

- written (NONE), or refused for good in a way that means nothing is left to do (UNSUPPORTED_FOR_MESSAGE_FORMAT,
  UNSUPPORTED_VERSION: the producer could never have written there) -> done;
- a leader that moved, an ISR too small, a timeout, a storage error, an unanswered request -> routed again after
  `retry_backoff_ms`, to whoever leads the partition then;
- a partition that no longer exists (its topic was deleted) -> done, as in Kafka;
- INVALID_PRODUCER_EPOCH or TRANSACTION_COORDINATOR_FENCED -> the job is dropped: a newer producer epoch or a
  newer coordinator owns the transaction now.

Before each attempt the job is checked with its `is_current` (the shard still waits for exactly these markers
under the same coordinator epoch); a coordinator that lost its partition drops its jobs that way, and the new
coordinator sends them again after loading. When the last partition is done, `on_written(job)` lets the shard
write CompleteCommit or CompleteAbort.

Nothing here sleeps on the event loop's clock: back-offs go through the injected `Clock`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from broker_runtime.txn.coordinator import MarkerJob, TopicPartition
from broker_runtime.txn.markers import TxnMarker

log = logging.getLogger(__name__)

RETRY_BACKOFF_MS = 100
# route() answers for a partition whose leader is not known right now (retry later) ...
LEADER_UNKNOWN = -1
# ... and None for a partition that does not exist.

DONE = frozenset({ErrorCode.none, ErrorCode.unsupported_for_message_format, ErrorCode.unsupported_version})
ABANDON = frozenset({ErrorCode.invalid_producer_epoch, ErrorCode.transaction_coordinator_fenced})
RETRIABLE = frozenset(
    {
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.not_leader_or_follower,
        ErrorCode.not_enough_replicas,
        ErrorCode.not_enough_replicas_after_append,
        ErrorCode.request_timed_out,
        ErrorCode.kafka_storage_error,
    }
)


# (broker id, markers) -> per marker, the error of each of its partitions. Raises ConnectionError, TimeoutError
# or OSError when the destination did not answer.
WriteMarkers = Callable[[int, list[TxnMarker]], Awaitable[list[dict[TopicPartition, ErrorCode]]]]
# (topic, partition) -> leader broker id, LEADER_UNKNOWN, or None when the partition does not exist.
Route = Callable[[str, int], int | None]


@dataclass(eq=False, slots=True)
class _PendingTxn:
    job: MarkerJob
    outstanding: set[TopicPartition]
    is_current: Callable[[MarkerJob], bool]
    on_written: Callable[[MarkerJob], None]


@dataclass(slots=True)
class _Destination:
    queue: list[tuple[_PendingTxn, list[TopicPartition]]] = field(default_factory=list)
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task | None = None


class TransactionMarkerSender:
    def __init__(
        self, clock, route: Route, write: WriteMarkers, retry_backoff_ms: int = RETRY_BACKOFF_MS
    ) -> None:
        self.clock = clock
        self._route_of = route
        self._write = write
        self.retry_backoff_ms = retry_backoff_ms
        self._destinations: dict[int, _Destination] = {}
        # transactional id -> the job whose markers are being written; a newer job for the id replaces it.
        self._pending: dict[str, _PendingTxn] = {}
        self._timers: set = set()
        self._stopped = False
        # Transactions with markers waiting for a partition leader to become known (Kafka's
        # UnknownDestinationQueueSize: one entry per transaction, however many of its partitions are leaderless).
        self.unknown_destination_queue_size = 0

    def add(
        self,
        job: MarkerJob,
        *,
        is_current: Callable[[MarkerJob], bool],
        on_written: Callable[[MarkerJob], None],
    ) -> None:
        if not is_current(job):
            # Checked before it may replace anything: a stale job must not push out the current one.
            log.info("markers of %r are no longer wanted here (the coordinator moved on); dropped",
                     job.transactional_id)  # fmt: skip
            return
        pending = _PendingTxn(job, set(job.partitions), is_current, on_written)
        previous = self._pending.get(job.transactional_id)
        if previous is not None:
            log.info("markers of %r replace a pending set at coordinator epoch %d", job.transactional_id,
                     previous.job.coordinator_epoch)  # fmt: skip
        self._pending[job.transactional_id] = pending
        self._route(pending, sorted(job.partitions))

    @property
    def pending_transactions(self) -> int:
        return len(self._pending)

    def outstanding(self, job: MarkerJob) -> frozenset[TopicPartition] | None:
        """The partitions of `job` still waiting for their marker; None when the sender holds no such job."""
        pending = self._pending.get(job.transactional_id)
        return frozenset(pending.outstanding) if pending is not None and pending.job == job else None

    async def stop(self) -> None:
        self._stopped = True
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()
        self.unknown_destination_queue_size = 0
        tasks = [d.task for d in self._destinations.values() if d.task is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._destinations.clear()
        self._pending.clear()

    # --- routing ------------------------------------------------------------------------------------------

    def _alive(self, pending: _PendingTxn) -> bool:
        if self._stopped or self._pending.get(pending.job.transactional_id) is not pending:
            return False
        if not pending.is_current(pending.job):
            log.info("markers of %r are no longer wanted here (the coordinator moved on); dropped",
                     pending.job.transactional_id)  # fmt: skip
            self._pending.pop(pending.job.transactional_id, None)
            return False
        return True

    def _route(self, pending: _PendingTxn, partitions: list[TopicPartition]) -> None:
        if not self._alive(pending):
            return
        by_leader: dict[int, list[TopicPartition]] = {}
        leaderless: list[TopicPartition] = []
        for tp in partitions:
            if tp not in pending.outstanding:
                continue
            leader = self._route_of(*tp)
            if leader is None:
                log.info("%s-%d no longer exists; no marker for %r needed there", tp[0], tp[1],
                         pending.job.transactional_id)  # fmt: skip
                pending.outstanding.discard(tp)
            elif leader < 0:
                leaderless.append(tp)
            else:
                by_leader.setdefault(leader, []).append(tp)
        for broker_id, tps in by_leader.items():
            destination = self._destination(broker_id)
            destination.queue.append((pending, tps))
            destination.wakeup.set()
        if leaderless:
            self.unknown_destination_queue_size += 1
            self._retry_later(pending, leaderless, leaderless=True)
        self._maybe_written(pending)

    def _retry_later(
        self, pending: _PendingTxn, partitions: list[TopicPartition], *, leaderless: bool = False
    ) -> None:
        handle = None

        def fire() -> None:
            self._timers.discard(handle)
            if leaderless:
                self.unknown_destination_queue_size -= 1
            self._route(pending, partitions)

        handle = self.clock.call_later_ms(self.retry_backoff_ms, fire)
        self._timers.add(handle)

    def _maybe_written(self, pending: _PendingTxn) -> None:
        if pending.outstanding or self._pending.get(pending.job.transactional_id) is not pending:
            return
        del self._pending[pending.job.transactional_id]
        try:
            pending.on_written(pending.job)
        except Exception:
            log.exception("completing the transaction of %r failed", pending.job.transactional_id)

    def _destination(self, broker_id: int) -> _Destination:
        destination = self._destinations.get(broker_id)
        if destination is None:
            destination = self._destinations[broker_id] = _Destination()
        if destination.task is None or destination.task.done():
            destination.task = asyncio.get_running_loop().create_task(
                self._drain(broker_id, destination), name=f"txn-markers-to-{broker_id}"
            )
        return destination

    # --- sending ------------------------------------------------------------------------------------------

    async def _drain(self, broker_id: int, destination: _Destination) -> None:
        while True:
            await destination.wakeup.wait()
            destination.wakeup.clear()
            entries = [(p, tps) for p, tps in destination.queue if self._alive(p)]
            destination.queue.clear()
            if not entries:
                continue
            markers = [
                TxnMarker(
                    p.job.producer_id, p.job.producer_epoch, p.job.coordinator_epoch, p.job.committed, tps
                )
                for p, tps in entries
            ]
            try:
                results = await self._write(broker_id, markers)
            except asyncio.CancelledError:
                raise
            except (ConnectionError, TimeoutError, OSError) as exc:
                log.info("writing %d transaction markers to broker %d failed (%s); retrying", len(markers),
                         broker_id, exc)  # fmt: skip
                for pending, tps in entries:
                    self._retry_later(pending, tps)
                continue
            except Exception:
                log.exception("writing transaction markers to broker %d failed", broker_id)
                for pending, tps in entries:
                    self._retry_later(pending, tps)
                continue
            for (pending, tps), errors in zip(entries, results, strict=True):
                self._on_result(broker_id, pending, tps, errors)

    def _on_result(
        self, broker_id: int, pending: _PendingTxn, partitions: list[TopicPartition], errors: dict
    ) -> None:
        if self._pending.get(pending.job.transactional_id) is not pending:
            return
        retry: list[TopicPartition] = []
        for tp in partitions:
            error = errors.get(tp, ErrorCode.request_timed_out)
            if error in DONE:
                pending.outstanding.discard(tp)
            elif error in ABANDON:
                log.info("the marker of %r for %s-%d was refused (%s): a newer producer or coordinator owns it; "
                         "no more markers are sent", pending.job.transactional_id, tp[0], tp[1],
                         error.name)  # fmt: skip
                self._pending.pop(pending.job.transactional_id, None)
                return
            else:
                if error not in RETRIABLE:
                    log.error("broker %d answered %s to the marker of %r for %s-%d; retrying", broker_id,
                              error.name, pending.job.transactional_id, tp[0], tp[1])  # fmt: skip
                retry.append(tp)
        if retry:
            self._retry_later(pending, retry)
        self._maybe_written(pending)
