"""A partition as this broker sees it: its log, its role, its high watermark, and who waits for new data.

As leader it also tracks each follower from its fetches (Kafka's Replica state): the follower's log end offset,
and when it was last caught up. The high watermark is the smallest log end offset over the ISR (with the replicas
an AlterPartition in flight is adding: Kafka's "maximal ISR"), and never goes back on the leader. A follower is
out of sync once it has not been caught up for replica.lag.time.max.ms; it may rejoin when its log end reaches
the high watermark and the start of the current leader epoch. This module decides; replica_manager.py acts.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from broker_runtime.errors import KafkaError
from broker_runtime.log.partition_log import PartitionLog

_ARRIVAL = itertools.count()  # ties in the produce waiters' heap: futures do not compare


@dataclass
class FollowerState:
    """What the leader knows of one follower, from its fetches."""

    log_end_offset: int = -1  # unknown until it fetches
    log_start_offset: int = -1
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    last_fetch_leader_end: int = -1  # the leader's log end offset at the follower's previous fetch

    def record_fetch(self, fetch_offset: int, log_start_offset: int, now_ms: int, leader_end: int) -> None:
        """Kafka's Replica.updateFetchStateOrThrow: a fetch at the leader's end means caught up now; a fetch at
        the leader's end of the previous fetch means it was caught up then."""
        if fetch_offset >= leader_end:
            self.last_caught_up_ms = max(self.last_caught_up_ms, now_ms)
        elif fetch_offset >= self.last_fetch_leader_end:
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_ms)
        self.log_end_offset = fetch_offset
        self.log_start_offset = log_start_offset
        self.last_fetch_leader_end = max(self.last_fetch_leader_end, leader_end)
        self.last_fetch_ms = now_ms

    def is_caught_up(self, leader_end: int, now_ms: int, max_lag_ms: int) -> bool:
        return self.log_end_offset == leader_end or now_ms - self.last_caught_up_ms <= max_lag_ms


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
    # Leader only: the followers' fetch state, the offset where the current leader epoch began, and the ISR of an
    # AlterPartition sent but not answered yet (no other is sent meanwhile).
    followers: dict[int, FollowerState] = field(default_factory=dict)
    leader_epoch_start_offset: int = 0
    pending_isr: tuple[int, ...] | None = None
    _waiters: set[asyncio.Future] = field(default_factory=set)  # woken when the high watermark or role moves
    _append_waiters: set[asyncio.Future] = field(default_factory=set)  # followers' fetches: woken by appends
    # acks=all produces (Kafka's DelayedProduce): (high watermark each needs, arrival, future), a heap, so a move
    # of the high watermark completes only those it covers; the others sleep on.
    _produce_waiters: list[tuple[int, int, asyncio.Future]] = field(default_factory=list)

    @property
    def is_leader(self) -> bool:
        return self.leader_id == self.broker_id

    @property
    def last_stable_offset(self) -> int:
        """The offset below which every transaction is decided and replicated (leaders and followers alike: both
        build producer state from the same batches)."""
        return self.log.last_stable_offset(self.high_watermark)

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

    # --- leader: followers, ISR and high watermark ----------------------------------------------------------

    def reset_followers(self, now_ms: int, *, new_leader: bool) -> None:
        """Kafka's makeLeader: a new leader (or a new leader epoch) starts its epoch at its log end; followers in
        the ISR count as caught up now, so that none is dropped before it could fetch once."""
        if new_leader:
            self.followers = {}
        self.followers = {
            r: self.followers.get(r) or FollowerState(last_caught_up_ms=now_ms if r in self.isr else 0)
            for r in self.replicas
            if r != self.broker_id
        }
        self.leader_epoch_start_offset = self.log.log_end_offset
        self.pending_isr = None

    @property
    def maximal_isr(self) -> set[int]:
        """The ISR the high watermark waits for: the current one, plus replicas a pending expansion adds (a
        pending shrink still waits for the replica it removes until the controller agrees)."""
        return set(self.isr) | set(self.pending_isr or ())

    def record_follower_fetch(
        self, replica_id: int, fetch_offset: int, log_start_offset: int, now_ms: int, *, with_epoch: bool
    ) -> None:
        """A follower fetched at `fetch_offset`, which is its log end offset. A broker that is not a replica of
        this partition gets Kafka's followerReplicaOrThrow answer: UNKNOWN_LEADER_EPOCH when its request named
        the current epoch (it may be a replica our state does not know yet: it retries), NOT_LEADER_OR_FOLLOWER
        otherwise."""
        follower = self.followers.get(replica_id)
        if follower is None:
            raise KafkaError(
                ErrorCode.unknown_leader_epoch if with_epoch else ErrorCode.not_leader_or_follower,
                f"broker {replica_id} is not a follower of {self.topic}-{self.index} (replicas {self.replicas})",
            )
        follower.record_fetch(fetch_offset, log_start_offset, now_ms, self.log.log_end_offset)
        self.maybe_advance_high_watermark()

    def diverging_epoch(self, last_fetched_epoch: int, fetch_offset: int) -> tuple[int, int] | None:
        """A follower fetching at `fetch_offset` whose last batch has `last_fetched_epoch` (Fetch v12+): None when
        its log agrees with ours, else the (epoch, end offset) it must truncate from, as Kafka 2.7+ answers in
        the fetch response's DivergingEpoch instead of waiting for an OffsetForLeaderEpoch (KIP-320): our end
        offset for its epoch (the largest epoch we have at or below it) is below its fetch offset, or we never
        wrote that epoch."""
        if last_fetched_epoch < 0:
            return None
        epoch, end_offset = self.log.end_offset_for_epoch(last_fetched_epoch)
        if epoch < last_fetched_epoch or end_offset < fetch_offset:
            return epoch, end_offset
        return None

    def preferred_read_replica(
        self, client_rack: str, fetch_offset: int, racks: Mapping[int, str | None]
    ) -> int:
        """KIP-392, Kafka's RackAwareReplicaSelector: the replica a consumer in `client_rack` should fetch
        `fetch_offset` from. The leader when the consumer names no rack, when the leader is in its rack, or when no
        in-sync follower there has the offset; else the most caught-up such follower."""
        if not client_rack or racks.get(self.broker_id) == client_rack:
            return self.broker_id
        candidates = [
            (f.log_end_offset, f.last_caught_up_ms, -r)
            for r in self.isr
            if r != self.broker_id
            and racks.get(r) == client_rack
            and (f := self.followers.get(r)) is not None
            and f.log_end_offset >= fetch_offset
            and 0 <= f.log_start_offset <= fetch_offset
        ]
        return -max(candidates)[2] if candidates else self.broker_id

    def follower_in_sync(self, replica_id: int) -> bool:
        """May `replica_id` join the ISR: its log reaches the high watermark and the current epoch's start."""
        follower = self.followers.get(replica_id)
        return (
            follower is not None
            and follower.log_end_offset >= self.high_watermark
            and follower.log_end_offset >= self.leader_epoch_start_offset
        )

    def isr_to_expand(self, replica_id: int) -> tuple[int, ...] | None:
        """The ISR with `replica_id`, which has just fetched, if it may join; None when it may not (or a change
        is pending). Only the fetching follower is considered, as in Kafka's maybeExpandIsr: a replica that was
        caught up when it died must not be proposed again once the controller has taken it out."""
        if not self.is_leader or self.pending_isr is not None:
            return None
        if replica_id in self.isr or not self.follower_in_sync(replica_id):
            return None
        return (*self.isr, replica_id)

    def isr_to_shrink(self, now_ms: int, max_lag_ms: int) -> tuple[int, ...] | None:
        """The ISR without followers that have not been caught up for `max_lag_ms` (Kafka's
        getOutOfSyncReplicas), or None when all are in sync (or a change is pending)."""
        if not self.is_leader or self.pending_isr is not None:
            return None
        end = self.log.log_end_offset
        lagging = {
            r for r in self.isr
            if r != self.broker_id and not (r in self.followers and self.followers[r].is_caught_up(end, now_ms, max_lag_ms))
        }  # fmt: skip
        return tuple(r for r in self.isr if r not in lagging) if lagging else None

    def maybe_advance_high_watermark(self) -> None:
        """As leader: the smallest log end offset over the maximal ISR, if that is higher (Kafka's
        maybeIncrementLeaderHW); the high watermark never goes back on a leader."""
        if not self.is_leader:
            return
        new = self.log.log_end_offset
        for r in self.maximal_isr:
            if r != self.broker_id:
                follower = self.followers.get(r)
                new = min(new, follower.log_end_offset if follower is not None else -1)
        if new > self.high_watermark:
            self.high_watermark = new
            self._wake_high_watermark_waiters()
            waiting = self._produce_waiters
            while waiting and waiting[0][0] <= new:
                future = heapq.heappop(waiting)[2]
                if not future.done():
                    future.set_result(None)

    def update_follower_high_watermark(self, leader_high_watermark: int) -> None:
        """As follower: the leader's high watermark, capped by what this replica has."""
        new = max(min(leader_high_watermark, self.log.log_end_offset), 0)
        if new != self.high_watermark:
            moved_up = new > self.high_watermark
            self.high_watermark = new
            if moved_up:
                self.wake_waiters()  # consumers fetching from this follower (KIP-392) wait for it

    # --- waiting --------------------------------------------------------------------------------------------

    def add_produce_waiter(self, high_watermark: int, future: asyncio.Future) -> None:
        """`future` is done once the high watermark reaches `high_watermark`, or the role or ISR changes (then
        the waiter checks again). A waiter that gave up (its future done) is dropped when its turn comes."""
        heapq.heappush(self._produce_waiters, (high_watermark, next(_ARRIVAL), future))

    def add_waiter(self, future: asyncio.Future, *, on_append: bool = False) -> None:
        (self._append_waiters if on_append else self._waiters).add(future)

    def remove_waiter(self, future: asyncio.Future) -> None:
        self._waiters.discard(future)
        self._append_waiters.discard(future)

    def wake_append_waiters(self) -> None:
        """New data at the log end: followers' fetches may go on (consumers wait for the high watermark)."""
        if not self._append_waiters:  # the usual case at RF 1, and while followers' fetches are out
            return
        waiters, self._append_waiters = self._append_waiters, set()
        for future in waiters:
            if not future.done():
                future.set_result(None)

    def wake_waiters(self) -> None:
        """Everything waiting here checks again (the role, the ISR or the high watermark moved)."""
        self._wake_high_watermark_waiters()
        waiting, self._produce_waiters = self._produce_waiters, []
        for _, _, future in waiting:
            if not future.done():
                future.set_result(None)

    def _wake_high_watermark_waiters(self) -> None:
        self.wake_append_waiters()
        if not self._waiters:
            return
        waiters, self._waiters = self._waiters, set()
        for future in waiters:
            if not future.done():
                future.set_result(None)
