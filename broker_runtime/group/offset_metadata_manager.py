"""The offsets half of a `__consumer_offsets` shard: Kafka's OffsetMetadataManager.

Theory of operation
-------------------
- **Persisted state**: the committed offsets per group and partition (`offsets`), and the offsets that open
  transactions committed (`pending_txn_offsets`, per producer id), changed only by `replay()` and
  `replay_end_txn()`. Each entry remembers the offset of its record: when a transaction commits offsets older
  than a plain commit that followed them, the newer record wins, as compaction would leave it.
- **Handlers** (`commit_offsets`, `fetch_offsets`, `delete_offsets`) validate against the group (the groups half,
  `group_metadata_manager.py`, which also restarts a committing member's session) and queue records through the
  shard's `write`; `cleanup_expired_offsets` is the retention half of the shard's periodic cleanup.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from broker_runtime.coordinator.shard import NO_PRODUCER_EPOCH, NO_PRODUCER_ID, Record
from broker_runtime.group.api import (
    UNKNOWN_MEMBER_ID,
    CommitPartition,
    FetchedOffset,
    OffsetCommitArgs,
    OffsetDeleteResult,
    OffsetFetchResult,
    PartitionError,
    Reply,
    TopicPartition,
    TxnOffsetCommitArgs,
)
from broker_runtime.group.classic_group import ClassicGroup
from broker_runtime.group.config import GroupCoordinatorConfig
from broker_runtime.group.group_metadata_manager import (
    APPEND_ERRORS,
    TOO_LARGE_APPEND_ERRORS,
    GroupMetadataManager,
    Write,
)
from broker_runtime.group.records import (
    CONSUMER_PROTOCOL_TYPE,
    NO_TIMESTAMP,
    OffsetCommitKey,
    OffsetCommitValue,
    RecordFormatError,
    decode_offset_commit_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
)
from broker_runtime.group.state import GroupState

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class OffsetEntry:
    """A committed offset as the log holds it; `record_offset` is where its record sits in the partition."""

    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int
    record_offset: int


_OFFSET_APPEND_ERRORS = {
    ErrorCode.network_exception: ErrorCode.coordinator_load_in_progress,
    **APPEND_ERRORS,
    **dict.fromkeys(TOO_LARGE_APPEND_ERRORS, ErrorCode.invalid_commit_offset_size),
}


def offset_append_error(error: ErrorCode) -> ErrorCode:
    """Kafka's mapping of a failed offset-commit append (GroupMetadataManager.maybeConvertOffsetCommitError)."""
    return _OFFSET_APPEND_ERRORS.get(error, error)


def _java_length(s: str) -> int:
    """String.length() in Java (UTF-16 code units), which is what offset.metadata.max.bytes is compared with."""
    return len(s) + sum(1 for ch in s if ord(ch) > 0xFFFF)


class OffsetMetadataManager:
    def __init__(
        self,
        partition: int,
        config: GroupCoordinatorConfig,
        clock,
        group_manager: GroupMetadataManager,
        write: Write,
    ) -> None:
        self.partition = partition
        self.config = config
        self.clock = clock
        self.group_manager = group_manager
        self._write = write
        # --- persisted state: mutated by replay only ---
        self.offsets: dict[str, dict[TopicPartition, OffsetEntry]] = {}
        # producer id -> (group, partition) -> (entry or None for a tombstone) of an open transaction
        self.pending_txn_offsets: dict[int, dict[tuple[str, TopicPartition], OffsetEntry | None]] = {}
        # group -> producers with an open transaction that committed offsets for it (an index of the above,
        # kept even when a tombstone emptied a producer's entries: the group lives until the marker)
        self._open_transactions: dict[str, set[int]] = {}

    @property
    def groups(self) -> dict[str, ClassicGroup]:
        return self.group_manager.groups

    # ===================================================================================================
    # replay
    # ===================================================================================================

    def replay(
        self, key: OffsetCommitKey, value: bytes | None, offset: int, *, producer_id: int, transactional: bool
    ) -> None:
        tp = TopicPartition(key.topic, key.partition)
        if transactional:
            entry = self._decode_offset(value, offset)
            self.pending_txn_offsets.setdefault(producer_id, {})[(key.group, tp)] = entry
            self._open_transactions.setdefault(key.group, set()).add(producer_id)
            return
        if value is None:
            self._remove_offset(key.group, tp, offset)
            # A tombstone (OffsetDelete, expiry, DeleteGroups) also removes what open transactions committed
            # for the partition, as Kafka's OffsetMetadataManager.replay does.
            for producer in self._open_transactions.get(key.group, ()):
                self.pending_txn_offsets.get(producer, {}).pop((key.group, tp), None)
            return
        entry = self._decode_offset(value, offset)
        if entry is not None:
            self._put_offset(key.group, tp, entry)

    def replay_end_txn(self, producer_id: int, committed: bool, offset: int) -> None:
        """A transaction marker: the producer's pending offsets become committed, or are dropped."""
        pending_offsets = self.pending_txn_offsets.pop(producer_id, {})
        for group_id in {g for g, _ in pending_offsets} | self._groups_of(producer_id):
            producers = self._open_transactions.get(group_id)
            if producers is not None:
                producers.discard(producer_id)
                if not producers:
                    del self._open_transactions[group_id]
        if committed:
            for (group_id, tp), entry in pending_offsets.items():
                if entry is None:
                    self._remove_offset(group_id, tp, offset)
                else:
                    # The most recent record wins when transactional and plain commits mix (`_put_offset`).
                    self._put_offset(group_id, tp, entry)

    def forget_pending(self, producer_id: int, group_id: str, tp: TopicPartition) -> None:
        """A tombstone removed this pending offset (replayed at load, where the tombstone came first)."""
        self.pending_txn_offsets.get(producer_id, {}).pop((group_id, tp), None)

    def _groups_of(self, producer_id: int) -> set[str]:
        return {g for g, producers in self._open_transactions.items() if producer_id in producers}

    def group_ids(self) -> set[str]:
        """Groups with committed offsets or offsets pending in a transaction."""
        return set(self.offsets) | set(self._open_transactions)

    def has_pending_transaction(self, group_id: str) -> bool:
        """Whether an open transaction committed offsets for the group (Kafka keeps such a group alive)."""
        return group_id in self._open_transactions

    def _partitions_with_pending_txn(self, group_id: str) -> set[TopicPartition]:
        return {
            tp
            for producer in self._open_transactions.get(group_id, ())
            for g, tp in self.pending_txn_offsets.get(producer, {})
            if g == group_id
        }

    def on_partitions_deleted(self, doomed: set[TopicPartition]) -> None:
        """Topics were deleted: tombstone their committed offsets in every group (handleDeletedPartitions)."""
        for group_id in list(self.offsets):
            removed = [tp for tp in self.offsets[group_id] if tp in doomed]
            if removed:
                self._write(
                    [(encode_offset_commit_key(group_id, tp.topic, tp.partition), None) for tp in removed]
                )

    def delete_all_offsets(self, group_id: str) -> list[Record]:
        """Tombstones for every offset of a group being deleted, committed or pending in a transaction."""
        committed = self.offsets.get(group_id, {})
        partitions = list(committed) + [
            tp for tp in sorted(self._partitions_with_pending_txn(group_id), key=lambda tp: (tp.topic, tp.partition))
            if tp not in committed
        ]  # fmt: skip
        return [(encode_offset_commit_key(group_id, tp.topic, tp.partition), None) for tp in partitions]

    # ===================================================================================================
    # expiry
    # ===================================================================================================

    def cleanup_expired_offsets(self, group: ClassicGroup, records: list[Record]) -> tuple[int, bool]:
        """Tombstone the group's expired offsets into `records`: how many expired, and whether it keeps any
        (committed or pending in a transaction)."""
        committed = self.offsets.get(group.group_id, {})
        expired = self._expired_offsets(
            group, committed, self.clock.time_ms(), self.config.offsets_retention_ms
        )
        records += [
            (encode_offset_commit_key(group.group_id, tp.topic, tp.partition), None) for tp in expired
        ]
        keeps = len(expired) < len(committed) or self.has_pending_transaction(group.group_id)
        return len(expired), keeps

    # ===================================================================================================
    # OffsetCommit, OffsetFetch, OffsetDelete
    # ===================================================================================================

    def _group_to_commit_to(self, group_id: str, generation_id: int) -> ClassicGroup | None:
        """The group a commit goes to; created empty for a consumer that assigns partitions itself and only
        stores offsets here. None for a member of a generation this coordinator does not know (it must rejoin)."""
        group = self.groups.get(group_id)
        if group is None:
            if generation_id >= 0:
                return None
            group = self.groups[group_id] = ClassicGroup(group_id, state_timestamp=self.clock.time_ms())
        return group

    def commit_offsets(self, args: OffsetCommitArgs) -> Reply[tuple[PartitionError, ...]]:
        reply: Reply[tuple[PartitionError, ...]] = Reply()
        fail_all = functools.partial(_fail_all, reply, args.offsets)
        group = self._group_to_commit_to(args.group_id, args.generation_id)
        if group is None:
            return fail_all(ErrorCode.illegal_generation)
        error = self._validate_commit(group, args)
        if error is not None:
            return fail_all(error)
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            # A member of the new generation committing before its SyncGroup: let it finish the rebalance.
            return fail_all(ErrorCode.rebalance_in_progress)
        if group.is_in(GroupState.STABLE, GroupState.PREPARING_REBALANCE):
            # Commits count as liveness; during PreparingRebalance the heartbeat response tells it to rejoin.
            self.group_manager.schedule_session(group, group.members[args.member_id])

        now = self.clock.time_ms()
        expire = now + args.retention_time_ms if args.retention_time_ms >= 0 else NO_TIMESTAMP
        return self._write_commits(args.group_id, args.offsets, now, expire, reply)

    def commit_transactional_offsets(self, args: TxnOffsetCommitArgs) -> Reply[tuple[PartitionError, ...]]:
        """TxnOffsetCommit: the offsets are written as the producer's transactional batch and stay pending (not
        fetched, not expired; OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT) until its
        transaction's marker commits or aborts them. The producer's epoch is checked by the log's producer
        state when the batch is appended (INVALID_PRODUCER_EPOCH for a fenced producer), as in Kafka."""
        reply: Reply[tuple[PartitionError, ...]] = Reply()
        fail_all = functools.partial(_fail_all, reply, args.offsets)
        if not args.group_id:
            return fail_all(ErrorCode.invalid_group_id)
        # Without a producer the records could only be written as a plain commit, visible at once.
        if args.producer_id < 0:
            return fail_all(ErrorCode.invalid_producer_id_mapping)
        if args.producer_epoch < 0:
            return fail_all(ErrorCode.invalid_producer_epoch)
        group = self._group_to_commit_to(args.group_id, args.generation_id)
        if group is None:
            return fail_all(ErrorCode.illegal_generation)
        # The group's state is not enforced for transactional commits (versions before 3 carry no member).
        error = self._validate_commit(group, args, transactional=True)
        if error is not None:
            return fail_all(error)
        return self._write_commits(
            args.group_id, args.offsets, self.clock.time_ms(), NO_TIMESTAMP, reply,
            producer_id=args.producer_id, producer_epoch=args.producer_epoch,
            verification_guard=args.verification_guard,
        )  # fmt: skip

    def _write_commits(
        self,
        group_id: str,
        offsets: tuple[CommitPartition, ...],
        now: int,
        expire: int,
        reply: Reply[tuple[PartitionError, ...]],
        *,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
        verification_guard: object | None = None,
    ) -> Reply[tuple[PartitionError, ...]]:
        """Queue the OffsetCommit records of a validated commit; the reply completes when they are appended."""
        limit = self.config.offset_metadata_max_bytes
        too_large = {
            (p.topic, p.partition)
            for p in offsets
            if p.metadata is not None and _java_length(p.metadata) > limit
        }
        records: list[Record] = []
        for p in offsets:
            if (p.topic, p.partition) in too_large:
                continue
            value = OffsetCommitValue(p.offset, p.metadata or "", now, p.leader_epoch, expire)
            records.append(
                (
                    encode_offset_commit_key(group_id, p.topic, p.partition),
                    encode_offset_commit_value(value),
                )
            )
        if not records:
            reply.complete(
                tuple(
                    PartitionError(p.topic, p.partition, ErrorCode.offset_metadata_too_large) for p in offsets
                )
            )
            return reply

        def on_done(append_error: ErrorCode | None) -> None:
            error = ErrorCode.none if append_error is None else offset_append_error(append_error)
            reply.complete(
                tuple(
                    PartitionError(
                        p.topic,
                        p.partition,
                        ErrorCode.offset_metadata_too_large if (p.topic, p.partition) in too_large else error,
                    )
                    for p in offsets
                )
            )

        self._write(records, on_done, producer_id, producer_epoch, verification_guard)
        return reply

    @staticmethod
    def _validate_commit(
        group: ClassicGroup, args: OffsetCommitArgs | TxnOffsetCommitArgs, *, transactional: bool = False
    ) -> ErrorCode | None:
        """Kafka's ClassicGroup.validateOffsetCommit."""
        if group.is_in(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        if args.generation_id < 0 and group.is_in(GroupState.EMPTY):
            return None  # the admin client or a consumer without group management
        if (
            args.generation_id >= 0
            or args.member_id != UNKNOWN_MEMBER_ID
            or args.group_instance_id is not None
        ):
            error = GroupMetadataManager.validate_member(group, args.member_id, args.group_instance_id)
            if error is not None:
                return error
            if args.generation_id != group.generation_id:
                return ErrorCode.illegal_generation
            return None
        if not transactional and not group.is_in(GroupState.EMPTY):
            return ErrorCode.unknown_member_id  # only members commit for a group that has members
        return None

    def fetch_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition] | None, require_stable: bool = False
    ) -> OffsetFetchResult:
        group = self.groups.get(group_id)
        committed = (
            self.offsets.get(group_id, {}) if group is not None and not group.is_in(GroupState.DEAD) else {}
        )
        wanted = (
            sorted(committed, key=lambda tp: (tp.topic, tp.partition)) if partitions is None else partitions
        )
        pending = self._partitions_with_pending_txn(group_id) if require_stable else set()
        results = []
        for tp in wanted:
            if tp in pending:
                results.append(
                    FetchedOffset(tp.topic, tp.partition, -1, -1, "", ErrorCode.unstable_offset_commit)
                )
                continue
            entry = committed.get(tp)
            if entry is None:
                results.append(FetchedOffset(tp.topic, tp.partition, -1, -1, ""))
            else:
                results.append(
                    FetchedOffset(tp.topic, tp.partition, entry.offset, entry.leader_epoch, entry.metadata)
                )
        return OffsetFetchResult(ErrorCode.none, tuple(results))

    def delete_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition]
    ) -> Reply[OffsetDeleteResult]:
        reply: Reply[OffsetDeleteResult] = Reply()
        partitions = list(dict.fromkeys(partitions))
        if not group_id:  # Kafka's isValidGroupId: only commits, fetches, describes and deletes may use ""
            reply.complete(OffsetDeleteResult(ErrorCode.invalid_group_id))
            return reply
        group = self.groups.get(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            reply.complete(OffsetDeleteResult(ErrorCode.group_id_not_found))
            return reply
        errors: dict[TopicPartition, ErrorCode] = {}
        if group.is_in(GroupState.EMPTY):
            eligible = partitions
        elif group.protocol_type == CONSUMER_PROTOCOL_TYPE:
            eligible = []
            for tp in partitions:
                if group.is_subscribed_to(tp.topic):
                    errors[tp] = ErrorCode.group_subscribed_to_topic
                else:
                    eligible.append(tp)
        else:
            reply.complete(OffsetDeleteResult(ErrorCode.non_empty_group))
            return reply

        committed = self.offsets.get(group_id, {})
        pending = self._partitions_with_pending_txn(group_id)
        # A tombstone also removes what open transactions committed for the partition.
        records: list[Record] = [
            (encode_offset_commit_key(group_id, tp.topic, tp.partition), None)
            for tp in eligible
            if tp in committed or tp in pending
        ]
        remaining = set(committed) - set(eligible)
        records += self.group_manager.maybe_retire_group(
            group, keeps_offsets=bool(remaining) or self.has_pending_transaction(group_id)
        )

        def answer(append_error: ErrorCode | None) -> None:
            error = ErrorCode.none if append_error is None else offset_append_error(append_error)
            reply.complete(
                OffsetDeleteResult(
                    ErrorCode.none,
                    tuple(PartitionError(tp.topic, tp.partition, errors.get(tp, error)) for tp in partitions),
                )
            )

        if records:
            self._write(records, answer)
        else:
            answer(None)
        return reply

    def _expired_offsets(
        self, group: ClassicGroup, committed: dict[TopicPartition, OffsetEntry], now: int, retention: int
    ) -> list[TopicPartition]:
        pending = self._partitions_with_pending_txn(group.group_id)

        def expired(
            tp: TopicPartition, entry: OffsetEntry, base: int, subscribed: frozenset[str] = frozenset()
        ):
            if tp.topic in subscribed or tp in pending:
                return False
            if entry.expire_timestamp != NO_TIMESTAMP:  # written by OffsetCommit v1 with an explicit expiry
                return now >= entry.expire_timestamp
            return now - base >= retention

        if group.protocol_type is not None and group.is_in(GroupState.EMPTY):
            # Offsets of a group that lost its members live on for the retention period after it became Empty.
            return [
                tp for tp, e in committed.items()
                if expired(tp, e, group.state_timestamp if group.state_timestamp is not None else e.commit_timestamp)
            ]  # fmt: skip
        if (
            group.protocol_type == CONSUMER_PROTOCOL_TYPE
            and group.subscribed_topics is not None
            and group.is_in(GroupState.STABLE)
        ):
            # An active consumer group keeps what it consumes; offsets of topics it dropped expire.
            return [
                tp
                for tp, e in committed.items()
                if expired(tp, e, e.commit_timestamp, group.subscribed_topics)
            ]
        if group.protocol_type is None:
            # Offsets-only (manual assignment) groups: each offset lives for the retention after its commit.
            return [tp for tp, e in committed.items() if expired(tp, e, e.commit_timestamp)]
        return []

    def _decode_offset(self, value: bytes | None, offset: int) -> OffsetEntry | None:
        if value is None:
            return None
        try:
            v = decode_offset_commit_value(value)
        except RecordFormatError as e:
            log.error("partition %d: skipping unreadable offset commit at %d: %s", self.partition, offset, e)
            return None
        return OffsetEntry(
            v.offset, v.leader_epoch, v.metadata, v.commit_timestamp, v.expire_timestamp, offset
        )

    def _put_offset(self, group_id: str, tp: TopicPartition, entry: OffsetEntry) -> None:
        committed = self.offsets.setdefault(group_id, {})
        current = committed.get(tp)
        # Records are replayed in log order; the check only matters for a transaction committing offsets
        # older than a plain commit that followed them.
        if current is None or current.record_offset < entry.record_offset:
            committed[tp] = entry
        # A commit landed for a group that no longer exists live (deleted meanwhile): the log says it has
        # offsets, so it exists, exactly as a reload would find it.
        self.group_manager.get_or_create_for_offsets(group_id)

    def _remove_offset(self, group_id: str, tp: TopicPartition, offset: int) -> None:
        committed = self.offsets.get(group_id)
        if committed is None:
            return
        current = committed.get(tp)
        if current is not None and current.record_offset < offset:
            del committed[tp]
            if not committed:
                del self.offsets[group_id]


def _fail_all(
    reply: Reply[tuple[PartitionError, ...]], offsets, error: ErrorCode
) -> Reply[tuple[PartitionError, ...]]:
    reply.complete(tuple(PartitionError(p.topic, p.partition, error) for p in offsets))
    return reply
