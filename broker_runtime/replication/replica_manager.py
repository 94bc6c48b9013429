"""The partitions this broker hosts, the append path, waiting for data, and replication.

In a cluster the replica manager follows leaders through its fetchers (fetcher.py), serves followers' fetches as
leader (the Fetch handler calls `record_follower_fetch`), and changes the ISR: every replica.lag.time.max.ms / 2
it drops followers that are not caught up, and a follower that catches up is added back, each time by an
AlterPartition to the controller (Kafka's AlterPartitionManager), one in flight per partition.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from functools import partial

from kio.schema.errors import ErrorCode

from broker_runtime.errors import KafkaError
from broker_runtime.log.partition_log import AppendResult
from broker_runtime.protocol.records import BatchHeader
from broker_runtime.replication.fetcher import ReplicaFetcherManager
from broker_runtime.replication.partition import Partition
from broker_runtime.txn.producer_state import VerificationGuard

log = logging.getLogger(__name__)

LeadershipListener = Callable[[str, int, bool, int], None]
# Sends an ISR change to the controller: (partition, proposed ISR) -> the controller's answer for it, as
# (error, leader epoch, ISR, partition epoch).
IsrSender = Callable[[Partition, tuple[int, ...]], Awaitable[tuple[ErrorCode, int, tuple[int, ...], int]]]


class ReplicaManager:
    def __init__(
        self,
        broker_id: int,
        clock,
        min_insync_replicas: Callable[[str], int],
        replica_lag_time_max_ms: Callable[[], int] = lambda: 30000,
    ) -> None:
        self.broker_id = broker_id
        self._clock = clock
        self._min_insync = min_insync_replicas
        self._max_lag_ms = replica_lag_time_max_ms
        self._partitions: dict[tuple[str, int], Partition] = {}
        self._offline: set[tuple[str, int]] = set()  # hosted here, but their log dir failed
        self._listeners: list[LeadershipListener] = []
        # Cluster mode only: the fetchers of followed partitions, and the way to the controller for ISR changes.
        self.fetchers: ReplicaFetcherManager | None = None
        self.isr_sender: IsrSender | None = None
        self._isr_tasks: set[asyncio.Task] = set()
        self._isr_timer = None
        # ISR changes the controller accepted, and those it refused or that failed (Kafka's IsrExpandsPerSec,
        # IsrShrinksPerSec and FailedIsrUpdatesPerSec; read by metrics.py).
        self.isr_expands = self.isr_shrinks = self.failed_isr_updates = 0

    # --- partitions ---------------------------------------------------------------------------------------

    def get_partition(self, topic: str, index: int) -> Partition | None:
        return self._partitions.get((topic, index))

    def add_partition(self, partition: Partition) -> None:
        self._partitions[(partition.topic, partition.index)] = partition
        partition.maybe_advance_high_watermark()
        if partition.is_leader:
            self._notify(partition.topic, partition.index, True, partition.leader_epoch)

    def remove_partition(self, topic: str, index: int) -> Partition | None:
        self._offline.discard((topic, index))
        partition = self._partitions.pop((topic, index), None)
        if self.fetchers is not None:
            self.fetchers.remove_partition((topic, index))
        if partition is not None:
            partition.wake_waiters()
            if partition.is_leader:
                self._notify(topic, index, False, partition.leader_epoch)
        return partition

    def mark_offline(self, topic: str, index: int) -> None:
        """The partition's log dir failed (Kafka's HostedPartition.Offline): it is served no more, and requests
        for it answer KAFKA_STORAGE_ERROR until a restart recovers it."""
        self.remove_partition(topic, index)
        self._offline.add((topic, index))

    def is_offline(self, topic: str, index: int) -> bool:
        return (topic, index) in self._offline

    def not_hosted_error(self, topic: str, index: int, *, exists: bool) -> KafkaError:
        """The error for a partition this broker does not serve (Kafka's getPartitionOrError): offline,
        not a replica here (`exists` in the metadata), or unknown."""
        if (topic, index) in self._offline:
            return KafkaError(ErrorCode.kafka_storage_error, f"{topic}-{index} is in an offline log dir")
        if exists:
            return KafkaError(ErrorCode.not_leader_or_follower, f"{topic}-{index} is not hosted here")
        return KafkaError(ErrorCode.unknown_topic_or_partition, f"{topic}-{index} does not exist")

    # --- roles decided by the controller (cluster mode) ---------------------------------------------------

    def apply_leadership(self, partition: Partition, *, leader: int, leader_epoch: int, isr: list[int],
                         replicas: list[int], partition_epoch: int, leader_recovery_state: int = 0) -> None:  # fmt: skip
        """Take the controller's decision for a partition (a LeaderAndIsr at a newer leader epoch; the caller
        checked the epochs): it becomes leader here, or follower of `leader`."""
        key = (partition.topic, partition.index)
        hosted = self._partitions.get(key)
        was_leader = hosted is not None and hosted.is_leader
        partition.leader_id, partition.leader_epoch = leader, leader_epoch
        partition.isr, partition.replicas = list(isr), list(replicas)
        partition.partition_epoch, partition.leader_recovery_state = partition_epoch, leader_recovery_state
        self._partitions[key] = partition
        self._offline.discard(key)
        if partition.is_leader:
            if self.fetchers is not None:
                self.fetchers.remove_partition(key)
            # New data from here on carries the new epoch (the leader epoch cache, for followers' truncation).
            partition.log.assign_epoch_start_offset(leader_epoch)
            partition.reset_followers(self._clock.monotonic_ms(), new_leader=not was_leader)
            partition.maybe_advance_high_watermark()
            partition.wake_waiters()
            self._notify(partition.topic, partition.index, True, leader_epoch)
        else:
            partition.wake_waiters()  # produce waits and long polls see they lost leadership
            if was_leader:
                self._notify(partition.topic, partition.index, False, leader_epoch)
            self.become_follower(partition, leader, leader_epoch)

    def become_follower(self, partition: Partition, leader: int, leader_epoch: int) -> None:
        """The partition follows `leader` from `leader_epoch` on: its fetcher truncates it where it diverges from
        the leader's log, then fetches."""
        log.info("%s-%d: following broker %d at leader epoch %d", partition.topic, partition.index, leader,
                 leader_epoch)  # fmt: skip
        partition.followers, partition.pending_isr = {}, None
        if self.fetchers is not None:
            self.fetchers.add_partition(partition)

    # --- ISR changes (leader) -----------------------------------------------------------------------------

    def record_follower_fetch(
        self, partition: Partition, replica_id: int, fetch_offset: int, log_start: int, *, with_epoch: bool
    ) -> None:
        """A follower's fetch (before its data is read): its position, the high watermark, ISR expansion."""
        now = self._clock.monotonic_ms()
        partition.record_follower_fetch(replica_id, fetch_offset, log_start, now, with_epoch=with_epoch)
        expanded = partition.isr_to_expand(replica_id)
        if expanded is not None:
            self._propose_isr(partition, expanded)

    def start_isr_checks(self) -> None:
        """Every replica.lag.time.max.ms / 2, drop followers that are not caught up (Kafka's isr-expiration)."""
        if self._isr_timer is None:
            self._schedule_isr_check()

    def _schedule_isr_check(self) -> None:
        self._isr_timer = self._clock.call_later_ms(self._max_lag_ms() / 2, self._check_isr)

    def _check_isr(self) -> None:
        now, max_lag = self._clock.monotonic_ms(), self._max_lag_ms()
        for partition in list(self._partitions.values()):
            shrunk = partition.isr_to_shrink(now, max_lag)
            if shrunk is not None:
                log.info("%s-%d: followers %s are out of sync", partition.topic, partition.index,
                         sorted(set(partition.isr) - set(shrunk)))  # fmt: skip
                self._propose_isr(partition, shrunk)
        self._schedule_isr_check()

    def _propose_isr(self, partition: Partition, isr: tuple[int, ...]) -> None:
        if self.isr_sender is None:
            return
        partition.pending_isr = isr
        task = asyncio.ensure_future(self._send_isr(partition, isr))
        self._isr_tasks.add(task)
        task.add_done_callback(self._isr_tasks.discard)

    async def _send_isr(self, partition: Partition, isr: tuple[int, ...]) -> None:
        assert self.isr_sender is not None
        epoch = partition.leader_epoch
        try:
            error, leader_epoch, new_isr, partition_epoch = await self.isr_sender(partition, isr)
        except (KafkaError, ConnectionError, TimeoutError) as exc:
            log.warning(
                "%s-%d: ISR change to %s not sent: %s", partition.topic, partition.index, list(isr), exc
            )
            error = None
        if partition.pending_isr != isr or partition.leader_epoch != epoch or not partition.is_leader:
            return  # a LeaderAndIsr came meanwhile: it has the last word
        partition.pending_isr = None
        if error != ErrorCode.none or leader_epoch != partition.leader_epoch:
            self.failed_isr_updates += 1
        if error is None:
            return  # the next check (or fetch) tries again
        if error != ErrorCode.none:
            # INVALID_UPDATE_VERSION, FENCED_LEADER_EPOCH...: our state is stale; the controller's next
            # LeaderAndIsr brings the current one.
            log.info(
                "%s-%d: ISR change to %s refused: %s", partition.topic, partition.index, list(isr), error.name
            )
            return
        if leader_epoch == partition.leader_epoch:
            # Counted by what was proposed, as Kafka's PendingExpandIsr/PendingShrinkIsr notify their listener.
            if set(isr) > set(partition.isr):
                self.isr_expands += 1
            else:
                self.isr_shrinks += 1
            partition.isr, partition.partition_epoch = list(new_isr), partition_epoch
            log.info("%s-%d: ISR is now %s", partition.topic, partition.index, list(new_isr))
            partition.maybe_advance_high_watermark()
            partition.wake_waiters()  # acks=all produces recheck min.insync.replicas

    async def shutdown(self) -> None:
        """Stop fetching and ISR changes (before the logs close)."""
        if self._isr_timer is not None:
            self._isr_timer.cancel()
            self._isr_timer = None
        for task in list(self._isr_tasks):
            task.cancel()
        await asyncio.gather(*self._isr_tasks, return_exceptions=True)
        if self.fetchers is not None:
            await self.fetchers.shutdown()

    def fence_leaders(self) -> list[Partition]:
        """This broker's ZooKeeper session expired: another broker may be elected leader of any partition at
        any moment, so stop acting as leader of all of them until the controller says again (the partitions
        keep their logs and epochs; produce answers NOT_LEADER_OR_FOLLOWER meanwhile)."""
        fenced = [p for p in self._partitions.values() if p.is_leader]
        for p in fenced:
            p.leader_id = -1
            p.wake_waiters()
            self._notify(p.topic, p.index, False, p.leader_epoch)
        return fenced

    def add_leadership_listener(self, fn: LeadershipListener) -> None:
        self._listeners.append(fn)
        for p in self._partitions.values():
            if p.is_leader:
                fn(p.topic, p.index, True, p.leader_epoch)

    def _notify(self, topic: str, index: int, is_leader: bool, epoch: int) -> None:
        for fn in self._listeners:
            try:
                fn(topic, index, is_leader, epoch)
            except Exception:
                log.exception("leadership listener failed for %s-%d", topic, index)

    def high_watermarks(self) -> dict[tuple[str, int], int]:
        return {key: p.high_watermark for key, p in self._partitions.items()}

    # --- append -------------------------------------------------------------------------------------------

    def leader_partition(self, topic: str, index: int) -> Partition:
        partition = self._partitions.get((topic, index))
        if partition is None:
            raise self.not_hosted_error(topic, index, exists=False)
        partition.require_leader()
        return partition

    def append_local(
        self,
        topic: str,
        index: int,
        batch: bytearray,
        header: BatchHeader,
        *,
        acks: int,
        from_coordinator: bool = False,
        verification_guard: VerificationGuard | None = None,
    ) -> tuple[Partition, AppendResult]:
        """Append one validated batch as leader, synchronously, so that pipelined produce requests from one
        connection are appended in arrival order."""
        partition = self.leader_partition(topic, index)
        if acks == -1 and len(partition.isr) < self._min_insync(topic):
            raise KafkaError(
                ErrorCode.not_enough_replicas,
                f"{len(partition.isr)} in-sync replicas, below min.insync.replicas {self._min_insync(topic)}",
            )
        result = partition.log.append_as_leader(
            batch,
            header,
            partition.leader_epoch,
            self._clock.time_ms(),
            from_coordinator=from_coordinator,
            verification_guard=verification_guard,
        )
        partition.wake_append_waiters()
        partition.maybe_advance_high_watermark()
        return partition, result

    def start_transaction_verification(
        self, topic: str, index: int, producer_id: int, sequence: int, epoch: int
    ) -> VerificationGuard:
        """The guard a transactional append to this leader partition must present (NO_GUARD: its transaction is
        already open here). Raises NOT_LEADER_OR_FOLLOWER etc. (Kafka's Partition.maybeStartTransactionVerification)."""
        partition = self.leader_partition(topic, index)
        return partition.log.producer_state.start_verification(
            producer_id, sequence, epoch, self._clock.time_ms()
        )

    async def finish_appends(self) -> None:
        """Wait for the appends whose batches are still being validated off the event loop (at shutdown)."""
        tails = [
            p.append_tail for p in self._partitions.values() if p.append_tail and not p.append_tail.done()
        ]
        if tails:
            await asyncio.wait(tails)

    async def wait_for_replication(self, partition: Partition, result: AppendResult, timeout_ms: int) -> None:
        """acks=-1: return once the high watermark covers the appended batch; then the ISR must still be at
        least min.insync.replicas (Kafka's checkEnoughReplicasReachOffset)."""
        if partition.high_watermark <= result.last_offset:
            await self._wait_for_high_watermark(partition, result.last_offset + 1, timeout_ms)
        min_isr = self._min_insync(partition.topic)
        if len(partition.isr) < min_isr:
            raise KafkaError(
                ErrorCode.not_enough_replicas_after_append,
                f"{len(partition.isr)} in-sync replicas after the append, below min.insync.replicas {min_isr}",
            )

    async def append(
        self,
        topic: str,
        index: int,
        batch: bytearray,
        header: BatchHeader,
        *,
        acks: int,
        timeout_ms: int,
        verification_guard: VerificationGuard | None = None,
    ) -> AppendResult:
        """The append path of coordinators writing their own topics and transaction markers (Produce validates in
        its handler): Kafka's AppendOrigin.COORDINATOR, whose producer batches are fenced by epoch only."""
        partition = self.leader_partition(topic, index)
        if header.size > partition.log.config.max_message_bytes:
            raise KafkaError(
                ErrorCode.message_too_large,
                f"batch of {header.size} bytes exceeds max.message.bytes {partition.log.config.max_message_bytes}",
            )
        partition, result = self.append_local(
            topic,
            index,
            batch,
            header,
            acks=acks,
            from_coordinator=True,
            verification_guard=verification_guard,
        )
        if acks == -1:
            await self.wait_for_replication(partition, result, timeout_ms)
        return result

    async def _wait_for_high_watermark(self, partition: Partition, offset: int, timeout_ms: int) -> None:
        deadline = self._clock.monotonic_ms() + timeout_ms
        loop = asyncio.get_running_loop()
        while partition.high_watermark < offset:
            if (
                not partition.is_leader
                or self._partitions.get((partition.topic, partition.index)) is not partition
            ):
                raise KafkaError(
                    ErrorCode.not_leader_or_follower, "leadership moved while waiting for replicas"
                )
            remaining_ms = deadline - self._clock.monotonic_ms()
            if remaining_ms <= 0:
                raise KafkaError(ErrorCode.request_timed_out, "timed out waiting for in-sync replicas")
            future = loop.create_future()
            partition.add_produce_waiter(offset, future)
            timer = self._clock.call_later_ms(remaining_ms, partial(_finish, future))
            try:
                await future
            finally:
                timer.cancel()
                _finish(future)  # cancelled: the heap drops it

    async def wait_for_data(
        self, partitions: Iterable[Partition], timeout_ms: float, *, follower: bool = False
    ) -> None:
        """Return when any of the partitions' high watermark moves (a follower: its log end), or on timeout."""
        future = asyncio.get_running_loop().create_future()
        watched = list(partitions)
        for p in watched:
            p.add_waiter(future, on_append=follower)
        try:
            await self._clock.wait_ms(future, timeout_ms)
        finally:
            for p in watched:
                p.remove_waiter(future)


def _finish(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(None)
