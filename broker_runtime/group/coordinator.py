"""The classic group coordinator for one `__consumer_offsets` partition: a replayable, synchronous shard.

Theory of operation
-------------------
Each partition of `__consumer_offsets` owns the groups that hash to it (`records.partition_for`). The broker
leading that partition runs one `GroupCoordinatorShard` for it (on the shared runtime, `coordinator/runtime.py`).
The shard does no I/O and never sleeps. As Kafka's GroupCoordinatorShard it composes two halves:

- `GroupMetadataManager` (`group_metadata_manager.py`): the groups, their members and rebalances, GroupMetadata
  records; JoinGroup, SyncGroup, Heartbeat, LeaveGroup, DescribeGroups, ListGroups.
- `OffsetMetadataManager` (`offset_metadata_manager.py`): committed offsets and offsets pending in open
  transactions, OffsetCommit records; OffsetCommit, OffsetFetch, OffsetDelete.

What spans both lives here: the runtime's interface (replay dispatched by record key, transaction markers, the
load, unload, timers, appends), DeleteGroups, the periodic cleanup (expired offsets, then the Empty groups left
without offsets), and deleted topics.

- **Handlers** run synchronously. They answer at once (a value, or a completed `Reply`) or hand back a `Reply`
  that completes later, when other members join, a timer expires, or an append finishes.
- **Appends**: a handler that changes persisted state does not change it. It queues an `Append` (records in
  Kafka's format plus a continuation); the runtime takes them with `take_appends()`, appends them to the
  partition in order, calls `replay()` for every appended record, then the continuation. A failed append calls
  the continuation with the error and replays nothing.
- **Replay** (`replay`, `replay_end_txn`) is the only code that mutates persisted state. It is used both when a
  partition is loaded and live, so what a shard holds is what its log says. Only the latest record per key
  matters; while loading, replay keeps raw bytes per key and decodes each survivor once in `finish_load()`.
- **Timers** are data in one `TimerQueue`: the groups' (sessions, pending member ids, join and sync phases) and
  the periodic offset expiry. The runtime calls `poll_timers()` at `next_deadline()`.

The semantics follow Kafka's GroupCoordinator and GroupMetadataManager (core/.../coordinator/group, 3.x) and,
where they agree, the newer group-coordinator module's GroupMetadataManager and OffsetMetadataManager.
Deliberate differences: a parked JoinGroup or SyncGroup that the same member supersedes with a new request is
answered (REBALANCE_IN_PROGRESS) instead of being dropped, so per-connection response order never stalls; a
removed member's parked SyncGroup is answered with UNKNOWN_MEMBER_ID for the same reason.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from broker_runtime.coordinator.shard import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, Append, Record, ShardBase
from broker_runtime.coordinator.timers import Timer
from broker_runtime.group.api import (
    GroupDescription,
    GroupOverview,
    HeartbeatArgs,
    JoinGroupArgs,
    JoinGroupResult,
    LeaveGroupResult,
    LeavingMember,
    OffsetCommitArgs,
    OffsetDeleteResult,
    OffsetFetchResult,
    PartitionError,
    Reply,
    SyncGroupArgs,
    SyncGroupResult,
    TopicPartition,
    TxnOffsetCommitArgs,
)
from broker_runtime.group.classic_group import ClassicGroup
from broker_runtime.group.config import GroupCoordinatorConfig
from broker_runtime.group.group_metadata_manager import GroupMetadataManager
from broker_runtime.group.offset_metadata_manager import (
    OffsetEntry,
    OffsetMetadataManager,
    offset_append_error,
)
from broker_runtime.group.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    OffsetCommitKey,
    RecordFormatError,
    decode_key,
)
from broker_runtime.group.state import GroupState

__all__ = ["Append", "GroupCoordinatorConfig", "GroupCoordinatorShard", "OffsetEntry"]

log = logging.getLogger(__name__)

OFFSETS_EXPIRY = "offsets-expiry"  # timer key (OFFSETS_EXPIRY,): the periodic cleanup


@dataclass
class _LoadBuffer:
    """Raw latest value per key while a partition loads; decoded once at the end.

    Open transactions keep their records per producer: (value, offset, offset of a later plain tombstone of the
    key or None). A tombstone removes what open transactions committed for its key (as live replay does), but the
    producer's transaction stays open for the group until its marker.
    """

    latest: dict[bytes, tuple[bytes | None, int]] = field(default_factory=dict)
    pending_txn: dict[int, dict[bytes, tuple[bytes | None, int, int | None]]] = field(default_factory=dict)


class GroupCoordinatorShard(ShardBase):
    def __init__(self, partition: int, config: GroupCoordinatorConfig, clock) -> None:
        super().__init__(clock)
        self.partition = partition
        self.config = config
        self._load: _LoadBuffer | None = _LoadBuffer()
        self.group_manager = GroupMetadataManager(partition, config, clock, self.timers, self._write)
        self.offset_manager = OffsetMetadataManager(partition, config, clock, self.group_manager, self._write)

    # --- the state of both halves, for the runtime's metrics and for tests ---

    @property
    def groups(self) -> dict[str, ClassicGroup]:
        return self.group_manager.groups

    @property
    def group_records(self) -> dict[str, tuple[GroupMetadataValue, int]]:
        return self.group_manager.group_records

    @property
    def offsets(self) -> dict[str, dict[TopicPartition, OffsetEntry]]:
        return self.offset_manager.offsets

    @property
    def pending_txn_offsets(self) -> dict[int, dict[tuple[str, TopicPartition], OffsetEntry | None]]:
        return self.offset_manager.pending_txn_offsets

    # ===================================================================================================
    # runtime interface
    # ===================================================================================================

    @property
    def loading(self) -> bool:
        return self._load is not None

    def _on_timer(self, timer: Timer) -> None:
        if timer.key[0] == OFFSETS_EXPIRY:
            self.expire_offsets()
            self._schedule_offsets_expiry()
        else:
            self.group_manager.on_timer(timer)

    def replay(
        self,
        key: bytes,
        value: bytes | None,
        offset: int,
        *,
        producer_id: int = -1,
        transactional: bool = False,
    ) -> None:
        """Apply one record of the partition (at `offset`); the only mutation of persisted state."""
        if self._load is not None:
            if transactional:
                self._load.pending_txn.setdefault(producer_id, {})[key] = (value, offset, None)
            else:
                self._load.latest[key] = (value, offset)
                if value is None:
                    for pending in self._load.pending_txn.values():
                        if key in pending:
                            pending[key] = (*pending[key][:2], offset)
            return
        try:
            decoded = decode_key(key)
        except RecordFormatError as e:
            log.error(
                "partition %d: skipping record at %d with an unreadable key: %s", self.partition, offset, e
            )
            return
        if isinstance(decoded, OffsetCommitKey):
            self.offset_manager.replay(
                decoded, value, offset, producer_id=producer_id, transactional=transactional
            )
        elif isinstance(decoded, GroupMetadataKey):
            self.group_manager.replay(decoded, value, offset)
        # Other key versions belong to group types this broker does not run; Kafka skips them too.

    def replay_end_txn(self, producer_id: int, committed: bool, offset: int) -> None:
        """Apply a transaction marker: commit or drop the producer's pending offset commits."""
        if self._load is not None:
            pending = self._load.pending_txn.pop(producer_id, {})
            if committed:
                for key, (value, record_offset, tombstoned_at) in pending.items():
                    current = self._load.latest.get(key)
                    if tombstoned_at is None and (current is None or current[1] < record_offset):
                        self._load.latest[key] = (value, record_offset)
            return
        self.offset_manager.replay_end_txn(producer_id, committed, offset)

    def _forget_pending(self, key: bytes, producer_id: int) -> None:
        decoded = decode_key(key)
        if isinstance(decoded, OffsetCommitKey):
            self.offset_manager.forget_pending(
                producer_id, decoded.group, TopicPartition(decoded.topic, decoded.partition)
            )

    def finish_load(self) -> None:
        """Decode what the load buffered, rebuild the groups, restart sessions and timers."""
        assert self._load is not None, "finish_load() called twice"
        buffered, self._load = self._load, None
        for key, (value, offset) in buffered.latest.items():
            self.replay(key, value, offset)
        for producer_id, pending in buffered.pending_txn.items():
            for key, (value, offset, tombstoned_at) in pending.items():
                self.replay(key, value, offset, producer_id=producer_id, transactional=True)
                if tombstoned_at is not None:
                    self._forget_pending(key, producer_id)
        self.group_manager.finish_load(self.offset_manager.group_ids())
        self._schedule_offsets_expiry()

    def unload(self) -> None:
        """This broker no longer coordinates the partition: answer everything parked with NOT_COORDINATOR."""
        self.group_manager.unload()
        self.timers.clear()
        for append in self.take_appends():
            if append.on_done is not None:
                append.on_done(ErrorCode.not_coordinator)

    def on_partitions_deleted(self, partitions: Iterable[TopicPartition]) -> None:
        """Topics were deleted: drop their committed offsets from every group (Kafka's handleDeletedPartitions)."""
        self.offset_manager.on_partitions_deleted(set(partitions))

    # ===================================================================================================
    # the groups half
    # ===================================================================================================

    def join_group(self, args: JoinGroupArgs) -> Reply[JoinGroupResult]:
        return self.group_manager.join_group(args)

    def sync_group(self, args: SyncGroupArgs) -> Reply[SyncGroupResult]:
        return self.group_manager.sync_group(args)

    def heartbeat(self, args: HeartbeatArgs) -> ErrorCode:
        return self.group_manager.heartbeat(args)

    def leave_group(self, group_id: str, leaving: Iterable[LeavingMember]) -> LeaveGroupResult:
        return self.group_manager.leave_group(group_id, leaving)

    def describe_group(self, group_id: str) -> GroupDescription:
        return self.group_manager.describe_group(group_id)

    def list_groups(self, states: Iterable[str] = ()) -> list[GroupOverview]:
        return self.group_manager.list_groups(states)

    # ===================================================================================================
    # the offsets half
    # ===================================================================================================

    def commit_offsets(self, args: OffsetCommitArgs) -> Reply[tuple[PartitionError, ...]]:
        return self.offset_manager.commit_offsets(args)

    def commit_transactional_offsets(self, args: TxnOffsetCommitArgs) -> Reply[tuple[PartitionError, ...]]:
        return self.offset_manager.commit_transactional_offsets(args)

    def fetch_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None, require_stable: bool = False
    ) -> OffsetFetchResult:
        return self.offset_manager.fetch_offsets(group_id, partitions, require_stable)

    def delete_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition]
    ) -> Reply[OffsetDeleteResult]:
        return self.offset_manager.delete_offsets(group_id, partitions)

    # ===================================================================================================
    # both halves
    # ===================================================================================================

    def delete_groups(self, group_ids: Iterable[str]) -> Reply[dict[str, ErrorCode]]:
        reply: Reply[dict[str, ErrorCode]] = Reply()
        results: dict[str, ErrorCode] = {}
        deleted: list[str] = []
        records: list[Record] = []
        for group_id in group_ids:
            group = self.groups.get(group_id)
            if group is None or group.is_in(GroupState.DEAD):
                results[group_id] = ErrorCode.group_id_not_found
            elif group.is_in(GroupState.EMPTY):
                records += self.offset_manager.delete_all_offsets(group_id)
                records += self.group_manager.retire_group(group)
                deleted.append(group_id)
            else:
                results[group_id] = ErrorCode.non_empty_group

        def answer(append_error: ErrorCode | None) -> None:
            error = ErrorCode.none if append_error is None else offset_append_error(append_error)
            reply.complete({**results, **dict.fromkeys(deleted, error)})

        if records:
            self._write(records, answer)
        else:
            answer(None)
        return reply

    def expire_offsets(self) -> int:
        """Drop expired offsets and retire Empty groups left without offsets (Kafka's cleanupGroupMetadata);
        returns how many offsets expired."""
        expired_total = 0
        records: list[Record] = []
        for group in list(self.groups.values()):
            expired, keeps_offsets = self.offset_manager.cleanup_expired_offsets(group, records)
            expired_total += expired
            records += self.group_manager.maybe_retire_group(group, keeps_offsets=keeps_offsets)
        if records:
            self._write(records)
        if expired_total:
            log.info("partition %d: %d expired offsets removed", self.partition, expired_total)
        return expired_total

    def _schedule_offsets_expiry(self) -> None:
        self.timers.schedule(
            (OFFSETS_EXPIRY,), self.clock.monotonic_ms() + self.config.offsets_retention_check_interval_ms
        )

    def _write(
        self,
        records: list[Record],
        on_done: Callable[[ErrorCode | None], None] | None = None,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        verification_guard: object | None = None,
    ) -> None:
        """Queue records (a transactional producer's when `producer_id` is set) for the runtime to append."""
        self._appends.append(
            Append(
                records, on_done, self.clock.time_ms(), producer_id, producer_epoch,
                verification_guard=verification_guard,
            )
        )  # fmt: skip

    # ===================================================================================================
    # inspection (tests, tools)
    # ===================================================================================================

    def persisted_state(self) -> tuple[dict, dict]:
        """What the log says: (group id -> snapshot, group id -> {partition: (offset, epoch, metadata, ts)})."""
        groups = {g: snapshot for g, (snapshot, _) in self.group_records.items()}
        offsets = {
            g: {
                tp: (e.offset, e.leader_epoch, e.metadata, e.commit_timestamp, e.expire_timestamp)
                for tp, e in c.items()
            }
            for g, c in self.offsets.items()
            if c
        }
        return groups, offsets
