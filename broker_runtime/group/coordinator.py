"""The classic group coordinator for one `__consumer_offsets` partition: a replayable, synchronous shard.

Theory of operation
-------------------
Each partition of `__consumer_offsets` owns the groups that hash to it (`records.partition_for`). The broker
leading that partition runs one `GroupCoordinatorShard` for it. The shard does no I/O and never sleeps:

- **Handlers** (`join_group`, `sync_group`, `heartbeat`, `leave_group`, `commit_offsets`, `fetch_offsets`,
  `delete_offsets`, `describe_group`, `list_groups`, `delete_groups`) run synchronously. They answer at once
  (a value, or a completed `Reply`) or hand back a `Reply` that completes later, when other members join, a
  timer expires, or an append finishes.
- **Appends**: a handler that changes persisted state does not change it. It queues an `Append` (records in
  Kafka's format plus a continuation); the driver takes them with `take_appends()`, appends them to the
  partition in order, calls `replay()` for every appended record, then the continuation. A failed append calls
  the continuation with the error and replays nothing.
- **Replay** (`replay`, `replay_end_txn`) is the only code that mutates persisted state: committed offsets
  (`offsets`) and the last GroupMetadata snapshot of each group (`group_records`). It is used both when a
  partition is loaded and live, so what a shard holds is what its log says. Only the latest record per key
  matters; while loading, replay keeps raw bytes per key and decodes each survivor once in `finish_load()`.
- **Soft state**: the live `ClassicGroup` objects (members, who waits for which response, the rebalance in
  progress) are Kafka's in-memory group metadata: they are rebuilt from the snapshots at load (every group
  Stable or Empty, members' sessions restarted) and otherwise evolve with the protocol. State changes go
  through `state.transition()` only.
- **Timers** are data in a `TimerQueue`: member sessions, pending member ids, the join phase (including the
  doubling initial delay of an Empty group), the sync phase, and periodic offset expiry. The driver calls
  `poll_timers()` at `next_deadline()`.

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

from broker_runtime.coordinator.shard import Append, Record
from broker_runtime.coordinator.timers import Timer, TimerQueue
from broker_runtime.group.api import (
    UNKNOWN_MEMBER_ID,
    FetchedOffset,
    GroupDescription,
    GroupOverview,
    HeartbeatArgs,
    JoinGroupArgs,
    JoinGroupResult,
    LeaveGroupResult,
    LeavingMember,
    LeftMember,
    MemberDescription,
    OffsetCommitArgs,
    OffsetDeleteResult,
    OffsetFetchResult,
    PartitionError,
    Reply,
    SyncGroupArgs,
    SyncGroupResult,
    TopicPartition,
)
from broker_runtime.group.classic_group import ClassicGroup, GroupMember
from broker_runtime.group.records import (
    CONSUMER_PROTOCOL_TYPE,
    NO_TIMESTAMP,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    RecordFormatError,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
)
from broker_runtime.group.state import GroupState

log = logging.getLogger(__name__)

# A member that joined in the current join phase cannot heartbeat yet (it has no generation); if its client
# disconnected it would linger, so its JoinGroup expires after this long (Kafka's NewMemberJoinTimeoutMs).
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000
INT32_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class GroupCoordinatorConfig:
    """The broker settings the shard reads, with Kafka's defaults."""

    min_session_timeout_ms: int = 6000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    max_group_size: int = INT32_MAX  # group.max.size
    initial_rebalance_delay_ms: int = 3000  # group.initial.rebalance.delay.ms
    offset_metadata_max_bytes: int = 4096  # offset.metadata.max.bytes
    offsets_retention_ms: int = 10080 * 60_000  # offsets.retention.minutes
    offsets_retention_check_interval_ms: int = 600_000  # offsets.retention.check.interval.ms

    @classmethod
    def from_broker_config(cls, config) -> GroupCoordinatorConfig:
        return cls(
            min_session_timeout_ms=config["group.min.session.timeout.ms"],
            max_session_timeout_ms=config["group.max.session.timeout.ms"],
            max_group_size=config["group.max.size"],
            initial_rebalance_delay_ms=config["group.initial.rebalance.delay.ms"],
            offset_metadata_max_bytes=config["offset.metadata.max.bytes"],
            offsets_retention_ms=config["offsets.retention.minutes"] * 60_000,
            offsets_retention_check_interval_ms=config["offsets.retention.check.interval.ms"],
        )


@dataclass(frozen=True, slots=True)
class OffsetEntry:
    """A committed offset as the log holds it; `record_offset` is where its record sits in the partition."""

    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    expire_timestamp: int
    record_offset: int


@dataclass(frozen=True, slots=True)
class _InitialJoin:
    """Payload of the join timer of a group that left Empty: Kafka's InitialDelayedJoin."""

    delay_ms: int
    remaining_ms: int


# Timer kinds (first element of a timer key).
HEARTBEAT = "heartbeat"  # (HEARTBEAT, group_id, member_id)
PENDING_MEMBER = "pending-member"  # (PENDING_MEMBER, group_id, member_id)
JOIN = "join"  # (JOIN, group_id), payload _InitialJoin or None
SYNC = "sync"  # (SYNC, group_id), payload: the generation whose SyncGroups are awaited
OFFSETS_EXPIRY = "offsets-expiry"  # (OFFSETS_EXPIRY,)


def _group_append_error(error: ErrorCode) -> ErrorCode:
    """Kafka's mapping of a failed GroupMetadata append to what JoinGroup/SyncGroup answer."""
    if error in (
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.not_enough_replicas,
        ErrorCode.not_enough_replicas_after_append,
    ):
        return ErrorCode.coordinator_not_available
    if error in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error):
        return ErrorCode.not_coordinator
    if error is ErrorCode.request_timed_out:
        return ErrorCode.rebalance_in_progress
    if error in (ErrorCode.message_too_large, ErrorCode.record_list_too_large, ErrorCode.invalid_fetch_size):
        return ErrorCode.unknown_server_error
    return error


def _offset_append_error(error: ErrorCode) -> ErrorCode:
    """Kafka's mapping of a failed offset-commit append (GroupMetadataManager.maybeConvertOffsetCommitError)."""
    if error is ErrorCode.network_exception:
        return ErrorCode.coordinator_load_in_progress
    if error in (
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.not_enough_replicas,
        ErrorCode.not_enough_replicas_after_append,
    ):
        return ErrorCode.coordinator_not_available
    if error in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error):
        return ErrorCode.not_coordinator
    if error in (ErrorCode.message_too_large, ErrorCode.record_list_too_large, ErrorCode.invalid_fetch_size):
        return ErrorCode.invalid_commit_offset_size
    return error


def _java_length(s: str) -> int:
    """String.length() in Java (UTF-16 code units), which is what offset.metadata.max.bytes is compared with."""
    return len(s) + sum(1 for ch in s if ord(ch) > 0xFFFF)


@dataclass
class _LoadBuffer:
    """Raw latest value per key while a partition loads; decoded once at the end."""

    latest: dict[bytes, tuple[bytes | None, int]] = field(default_factory=dict)
    pending_txn: dict[int, dict[bytes, tuple[bytes | None, int]]] = field(default_factory=dict)


class GroupCoordinatorShard:
    def __init__(self, partition: int, config: GroupCoordinatorConfig, clock) -> None:
        self.partition = partition
        self.config = config
        self.clock = clock
        # --- persisted state: mutated by replay only ---
        self.offsets: dict[str, dict[TopicPartition, OffsetEntry]] = {}
        self.group_records: dict[str, tuple[GroupMetadataValue, int]] = {}
        # producer id -> (group, partition) -> (entry or None for a tombstone) of an open transaction
        self.pending_txn_offsets: dict[int, dict[tuple[str, TopicPartition], OffsetEntry | None]] = {}
        # --- soft state ---
        self.groups: dict[str, ClassicGroup] = {}
        self.timers = TimerQueue()
        self._appends: list[Append] = []
        self._load: _LoadBuffer | None = _LoadBuffer()

    # ===================================================================================================
    # driver interface
    # ===================================================================================================

    @property
    def loading(self) -> bool:
        return self._load is not None

    def take_appends(self) -> list[Append]:
        appends, self._appends = self._appends, []
        return appends

    def next_deadline(self) -> int | None:
        return self.timers.next_deadline()

    def poll_timers(self) -> int:
        """Fire every timer that is due; returns how many fired."""
        fired = 0
        while True:
            timer = self.timers.pop_due(self.clock.monotonic_ms())
            if timer is None:
                return fired
            fired += 1
            self._on_timer(timer)

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
                self._load.pending_txn.setdefault(producer_id, {})[key] = (value, offset)
            else:
                self._load.latest[key] = (value, offset)
            return
        try:
            decoded = decode_key(key)
        except RecordFormatError as e:
            log.error(
                "partition %d: skipping record at %d with an unreadable key: %s", self.partition, offset, e
            )
            return
        if transactional and isinstance(decoded, OffsetCommitKey):
            tp = TopicPartition(decoded.topic, decoded.partition)
            entry = self._decode_offset(value, offset)
            self.pending_txn_offsets.setdefault(producer_id, {})[(decoded.group, tp)] = entry
            return
        self._apply(decoded, value, offset)

    def replay_end_txn(self, producer_id: int, committed: bool, offset: int) -> None:
        """Apply a transaction marker: commit or drop the producer's pending offset commits."""
        if self._load is not None:
            pending = self._load.pending_txn.pop(producer_id, {})
            if committed:
                for key, (value, record_offset) in pending.items():
                    current = self._load.latest.get(key)
                    if current is None or current[1] < record_offset:
                        self._load.latest[key] = (value, record_offset)
            return
        pending_offsets = self.pending_txn_offsets.pop(producer_id, {})
        if committed:
            for (group_id, tp), entry in pending_offsets.items():
                if entry is None:
                    self._remove_offset(group_id, tp, offset)
                else:
                    self._put_offset(group_id, tp, entry)

    def finish_load(self) -> None:
        """Decode what the load buffered, rebuild the groups, restart sessions and timers."""
        assert self._load is not None, "finish_load() called twice"
        buffered, self._load = self._load, None
        for key, (value, offset) in buffered.latest.items():
            self.replay(key, value, offset)
        for producer_id, pending in buffered.pending_txn.items():
            for key, (value, offset) in pending.items():
                self.replay(key, value, offset, producer_id=producer_id, transactional=True)
        for group_id, (snapshot, _) in self.group_records.items():
            self.groups[group_id] = self._group_from_snapshot(group_id, snapshot)
        group_ids_with_offsets = set(self.offsets) | {
            g for p in self.pending_txn_offsets.values() for g, _ in p
        }
        for group_id in group_ids_with_offsets:
            if group_id not in self.groups:
                self.groups[group_id] = ClassicGroup(group_id)
        for group in self.groups.values():
            self._on_group_loaded(group)
        self._schedule_offsets_expiry()

    def unload(self) -> None:
        """This broker no longer coordinates the partition: answer everything parked with NOT_COORDINATOR."""
        for group in self.groups.values():
            previous = group.state
            group.transition_to(GroupState.DEAD, self.clock.time_ms())
            if previous is GroupState.PREPARING_REBALANCE:
                for member in group.members.values():
                    member.complete_join(JoinGroupResult.failure(member.member_id, ErrorCode.not_coordinator))
            elif previous in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
                for member in group.members.values():
                    member.complete_sync(SyncGroupResult(ErrorCode.not_coordinator))
            group.pending_sync_members.clear()
        self.timers.clear()
        for append in self.take_appends():
            if append.on_done is not None:
                append.on_done(ErrorCode.not_coordinator)

    def on_partitions_deleted(self, partitions: Iterable[TopicPartition]) -> None:
        """Topics were deleted: drop their committed offsets from every group (Kafka's handleDeletedPartitions)."""
        doomed = set(partitions)
        for group_id in list(self.offsets):
            removed = [tp for tp in self.offsets[group_id] if tp in doomed]
            if removed:
                self._write(
                    [(encode_offset_commit_key(group_id, tp.topic, tp.partition), None) for tp in removed]
                )

    # ===================================================================================================
    # JoinGroup
    # ===================================================================================================

    def join_group(self, args: JoinGroupArgs) -> Reply[JoinGroupResult]:
        reply: Reply[JoinGroupResult] = Reply()
        if not args.group_id:
            reply.complete(JoinGroupResult.failure(args.member_id, ErrorCode.invalid_group_id))
            return reply
        if (
            not self.config.min_session_timeout_ms
            <= args.session_timeout_ms
            <= self.config.max_session_timeout_ms
        ):
            reply.complete(JoinGroupResult.failure(args.member_id, ErrorCode.invalid_session_timeout))
            return reply
        is_unknown_member = args.member_id == UNKNOWN_MEMBER_ID
        group = self.groups.get(args.group_id)
        if group is None:
            if not is_unknown_member:
                reply.complete(JoinGroupResult.failure(args.member_id, ErrorCode.unknown_member_id))
                return reply
            group = self.groups[args.group_id] = ClassicGroup(
                args.group_id, state_timestamp=self.clock.time_ms()
            )

        if not self._accepts_joining_member(group, args.member_id):
            self._drop_member(group, args.member_id)
            reply.complete(JoinGroupResult.failure(UNKNOWN_MEMBER_ID, ErrorCode.group_max_size_reached))
        elif is_unknown_member:
            self._join_new_member(group, args, reply)
        else:
            self._join_current_member(group, args, reply)

        if group.is_in(GroupState.PREPARING_REBALANCE):
            self._maybe_complete_join(group)
        return reply

    def _accepts_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        limit = self.config.max_group_size
        if group.is_in(GroupState.EMPTY, GroupState.DEAD):
            return True
        if group.is_in(GroupState.PREPARING_REBALANCE):
            # Count those who have rejoined, not the group size: the size may already exceed a lowered limit,
            # and counting the awaiting members turns away the last members to rejoin.
            member = group.members.get(member_id)
            return (member is not None and member.is_awaiting_join) or group.num_awaiting_join < limit
        return group.has(member_id) or group.size < limit

    def _join_new_member(
        self, group: ClassicGroup, args: JoinGroupArgs, reply: Reply[JoinGroupResult]
    ) -> None:
        if group.is_in(GroupState.DEAD):
            # The group is being unloaded or deleted; the client looks the coordinator up again.
            reply.complete(JoinGroupResult.failure(UNKNOWN_MEMBER_ID, ErrorCode.coordinator_not_available))
            return
        if not group.supports_protocols(args.protocol_type, {name for name, _ in args.protocols}):
            reply.complete(JoinGroupResult.failure(UNKNOWN_MEMBER_ID, ErrorCode.inconsistent_group_protocol))
            return
        new_member_id = ClassicGroup.generate_member_id(args.client_id, args.group_instance_id)
        if args.group_instance_id is not None:
            old_member_id = group.static_member_id(args.group_instance_id)
            if old_member_id is not None:
                self._replace_static_member(group, old_member_id, new_member_id, args, reply)
            else:
                self._add_member_and_rebalance(group, new_member_id, args, reply)
        elif args.require_known_member_id:
            # KIP-394: hand out the id first, so a client that times out and retries does not leave
            # a trail of anonymous members behind.
            group.pending_members.add(new_member_id)
            self.timers.schedule(
                (PENDING_MEMBER, group.group_id, new_member_id), self._mono() + args.session_timeout_ms
            )
            reply.complete(JoinGroupResult.failure(new_member_id, ErrorCode.member_id_required))
        else:
            self._add_member_and_rebalance(group, new_member_id, args, reply)

    def _join_current_member(
        self, group: ClassicGroup, args: JoinGroupArgs, reply: Reply[JoinGroupResult]
    ) -> None:
        member_id = args.member_id
        if group.is_in(GroupState.DEAD):
            reply.complete(JoinGroupResult.failure(member_id, ErrorCode.coordinator_not_available))
            return
        if not group.supports_protocols(args.protocol_type, {name for name, _ in args.protocols}):
            reply.complete(JoinGroupResult.failure(member_id, ErrorCode.inconsistent_group_protocol))
            return
        if member_id in group.pending_members:
            if args.group_instance_id is not None:
                # Pending ids are only handed to dynamic members; Kafka fails this with an internal error.
                reply.complete(JoinGroupResult.failure(member_id, ErrorCode.unknown_server_error))
                return
            self.timers.cancel((PENDING_MEMBER, group.group_id, member_id))
            self._add_member_and_rebalance(group, member_id, args, reply)
            return
        error = self._validate_member(group, member_id, args.group_instance_id)
        if error is not None:
            reply.complete(JoinGroupResult.failure(member_id, error))
            return
        member = group.members[member_id]
        state = group.state
        if state is GroupState.PREPARING_REBALANCE:
            self._update_member_and_rebalance(group, member, args, reply)
        elif state is GroupState.COMPLETING_REBALANCE:
            if member.matches(args.protocols):
                # The member probably missed its JoinGroup response: send the current generation again.
                reply.complete(self._join_result(group, member, include_members=group.is_leader(member_id)))
            else:
                self._update_member_and_rebalance(group, member, args, reply)
        elif state is GroupState.STABLE:
            if group.is_leader(member_id) or not member.matches(args.protocols):
                # A rejoining leader forces a rebalance: that is how it reacts to changes the member metadata
                # does not show, such as new partitions of a subscribed topic.
                self._update_member_and_rebalance(group, member, args, reply)
            else:
                reply.complete(self._join_result(group, member, include_members=False))
        else:  # Empty groups have no members; validation already answered for them.
            reply.complete(JoinGroupResult.failure(member_id, ErrorCode.unknown_member_id))

    def _join_result(
        self, group: ClassicGroup, member: GroupMember, *, include_members: bool
    ) -> JoinGroupResult:
        return JoinGroupResult(
            error=ErrorCode.none,
            member_id=member.member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=group.leader_id or "",
            members=group.current_member_list() if include_members else (),
        )

    def _add_member_and_rebalance(
        self, group: ClassicGroup, member_id: str, args: JoinGroupArgs, reply: Reply[JoinGroupResult]
    ) -> None:
        member = GroupMember(
            member_id=member_id,
            group_instance_id=args.group_instance_id,
            client_id=args.client_id,
            client_host=args.client_host,
            rebalance_timeout_ms=args.rebalance_timeout_ms,
            session_timeout_ms=args.session_timeout_ms,
            protocol_type=args.protocol_type,
            protocols=args.protocols,
            join_reply=reply,
            is_new=True,
            supports_skipping_assignment=args.supports_skipping_assignment,
        )
        # A member arriving during the initial delay of generation 0 extends the delay (InitialDelayedJoin).
        if group.is_in(GroupState.PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True
        group.add(member)
        self._schedule_session(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._maybe_prepare_rebalance(group)

    def _update_member_and_rebalance(
        self, group: ClassicGroup, member: GroupMember, args: JoinGroupArgs, reply: Reply[JoinGroupResult]
    ) -> None:
        self._supersede_join(member)
        group.update_member(member, args.protocols, args.rebalance_timeout_ms, args.session_timeout_ms, reply)
        self._maybe_prepare_rebalance(group)

    @staticmethod
    def _supersede_join(member: GroupMember) -> None:
        # A second JoinGroup from the same member replaces its parked one; answer the old request so that
        # responses on its connection keep flowing.
        member.complete_join(JoinGroupResult.failure(member.member_id, ErrorCode.rebalance_in_progress))

    def _replace_static_member(
        self,
        group: ClassicGroup,
        old_member_id: str,
        new_member_id: str,
        args: JoinGroupArgs,
        reply: Reply[JoinGroupResult],
    ) -> None:
        """A static member rejoined without its member id (a restart): it takes over its old identity."""
        instance_id = args.group_instance_id
        assert instance_id is not None
        current_leader = group.leader_id
        member = group.replace_static_member(instance_id, old_member_id, new_member_id)
        self.timers.cancel((HEARTBEAT, group.group_id, old_member_id))
        self._schedule_session(group, member)
        old_protocols = member.protocols
        old_rebalance_timeout, old_session_timeout = member.rebalance_timeout_ms, member.session_timeout_ms
        group.update_member(member, args.protocols, args.rebalance_timeout_ms, args.session_timeout_ms, reply)
        member.supports_skipping_assignment = args.supports_skipping_assignment

        if group.is_in(GroupState.STABLE):
            if group.protocol_name != group.select_protocol():
                self._maybe_prepare_rebalance(group)
                return
            # Nothing the assignment depends on changed: persist the new member id and hand the member its old
            # assignment back through SyncGroup, without disturbing the others.
            generation = group.generation_id

            def on_done(error: ErrorCode | None) -> None:
                if group.members.get(new_member_id) is not member or group.generation_id != generation:
                    return  # the group moved on while the record was written; its new rebalance answers
                if error is not None:
                    group.update_member(
                        member, old_protocols, old_rebalance_timeout, old_session_timeout, None
                    )
                    group.replace_static_member(instance_id, new_member_id, old_member_id)
                    self.timers.cancel((HEARTBEAT, group.group_id, new_member_id))
                    self._schedule_session(group, member)
                    reply.complete(
                        JoinGroupResult(
                            error=_group_append_error(error),
                            member_id=UNKNOWN_MEMBER_ID,
                            generation_id=group.generation_id,
                            protocol_type=group.protocol_type,
                            protocol_name=group.protocol_name,
                            leader=current_leader or "",
                        )
                    )
                elif member.supports_skipping_assignment:
                    is_leader = group.is_leader(new_member_id)
                    result = self._join_result(group, member, include_members=is_leader)
                    member.complete_join(
                        JoinGroupResult(
                            error=result.error,
                            member_id=result.member_id,
                            generation_id=result.generation_id,
                            protocol_type=result.protocol_type,
                            protocol_name=result.protocol_name,
                            leader=result.leader,
                            skip_assignment=is_leader,
                            members=result.members,
                        )
                    )
                else:
                    # Report the old leader id: a restarted leader must not think it leads and reassign, since a
                    # Stable group would not distribute that assignment.
                    member.complete_join(
                        JoinGroupResult(
                            error=ErrorCode.none,
                            member_id=new_member_id,
                            generation_id=group.generation_id,
                            protocol_type=group.protocol_type,
                            protocol_name=group.protocol_name,
                            leader=current_leader or "",
                        )
                    )

            self._write([self._group_metadata_record(group, group.assignments())], on_done)
        elif group.is_in(GroupState.COMPLETING_REBALANCE):
            # The leader may already be assigning for the old member id; start over so the new id gets a share.
            self._prepare_rebalance(group)
        elif group.is_in(GroupState.EMPTY, GroupState.DEAD):
            raise RuntimeError(
                f"static member {instance_id} rejoined group {group.group_id} in {group.state}"
            )
        # PreparingRebalance: the member simply joins the rebalance in progress.

    # ===================================================================================================
    # the rebalance
    # ===================================================================================================

    def _maybe_prepare_rebalance(self, group: ClassicGroup) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group)

    def _prepare_rebalance(self, group: ClassicGroup) -> None:
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(group, ErrorCode.rebalance_in_progress)
        self._clear_pending_syncs(group)
        key = (JOIN, group.group_id)
        if group.is_in(GroupState.EMPTY):
            delay = self.config.initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms - delay, 0)
            self.timers.schedule(key, self._mono() + delay, _InitialJoin(delay, remaining))
        else:
            self.timers.schedule(key, self._mono() + group.rebalance_timeout_ms)
        group.transition_to(GroupState.PREPARING_REBALANCE, self.clock.time_ms())
        log.info(
            "preparing to rebalance group %s (generation %d, %s-%d)",
            group.group_id, group.generation_id, "__consumer_offsets", self.partition,
        )  # fmt: skip
        self._maybe_complete_join(group)

    def _maybe_complete_join(self, group: ClassicGroup) -> None:
        """Complete the join phase early once everyone has rejoined (not during the initial delay)."""
        if not group.is_in(GroupState.PREPARING_REBALANCE):
            return
        timer = self.timers.get((JOIN, group.group_id))
        if timer is not None and isinstance(timer.payload, _InitialJoin):
            return
        if group.has_all_members_joined():
            self.timers.cancel((JOIN, group.group_id))
            self._complete_join(group)

    def _complete_join(self, group: ClassicGroup) -> None:
        # Dynamic members that did not rejoin are gone; static members keep their place until their session ends.
        for member in group.not_yet_rejoined():
            if not member.is_static:
                self._drop_member(group, member.member_id)
        if group.is_in(GroupState.DEAD):
            return
        if not self._elect_joined_leader(group) and group.members:
            # Nobody rejoined: wait another rebalance timeout for their sessions to run out.
            log.error("group %s could not complete its rebalance because no member rejoined", group.group_id)
            self.timers.schedule((JOIN, group.group_id), self._mono() + group.rebalance_timeout_ms)
            return

        group.generation_id += 1
        now = self.clock.time_ms()
        if group.members:
            group.protocol_name = group.select_protocol()
            group.subscribed_topics = group.compute_subscribed_topics()
            group.transition_to(GroupState.COMPLETING_REBALANCE, now)
        else:
            group.protocol_name = None
            group.subscribed_topics = group.compute_subscribed_topics()
            group.transition_to(GroupState.EMPTY, now)
        group.pending_sync_members.clear()

        if group.is_in(GroupState.EMPTY):
            log.info("group %s with generation %d is now empty", group.group_id, group.generation_id)

            def on_empty_stored(error: ErrorCode | None) -> None:
                if error is not None:
                    # Harmless: an older generation reloaded after a failover has no live members either.
                    log.warning("failed to write empty metadata for group %s: %s", group.group_id, error.name)

            self._write([self._group_metadata_record(group, {})], on_empty_stored)
            return

        log.info(
            "stabilized group %s generation %d with %d members",
            group.group_id,
            group.generation_id,
            group.size,
        )
        for member in group.members.values():
            member.complete_join(
                self._join_result(group, member, include_members=group.is_leader(member.member_id))
            )
            self._schedule_session(group, member)
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        self.timers.schedule(
            (SYNC, group.group_id), self._mono() + group.rebalance_timeout_ms, group.generation_id
        )

    @staticmethod
    def _elect_joined_leader(group: ClassicGroup) -> bool:
        """Keep the leader if it rejoined, else pick any member that did; False if nobody rejoined."""
        if group.leader_id is None:
            return False
        leader = group.members.get(group.leader_id)
        if leader is not None and leader.is_awaiting_join:
            return True
        for member in group.members.values():
            if member.is_awaiting_join:
                group.leader_id = member.member_id
                return True
        return False

    def _clear_pending_syncs(self, group: ClassicGroup) -> None:
        group.pending_sync_members.clear()
        self.timers.cancel((SYNC, group.group_id))

    def _reset_and_propagate_assignment_error(self, group: ClassicGroup, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, error)

    def _propagate_assignment(self, group: ClassicGroup, error: ErrorCode) -> None:
        ok = error is ErrorCode.none
        for member in group.members.values():
            result = SyncGroupResult(
                error=error,
                assignment=member.assignment if ok else b"",
                protocol_type=group.protocol_type if ok else None,
                protocol_name=group.protocol_name if ok else None,
            )
            if member.complete_sync(result):
                # Sessions that ran out while waiting for the leader were ignored; start them afresh.
                self._schedule_session(group, member)

    # ===================================================================================================
    # SyncGroup, Heartbeat, LeaveGroup
    # ===================================================================================================

    def sync_group(self, args: SyncGroupArgs) -> Reply[SyncGroupResult]:
        reply: Reply[SyncGroupResult] = Reply()
        if not args.group_id:
            reply.complete(SyncGroupResult(ErrorCode.invalid_group_id))
            return reply
        group = self.groups.get(args.group_id)
        if group is None:
            reply.complete(SyncGroupResult(ErrorCode.unknown_member_id))
            return reply
        error = self._validate_sync(group, args)
        if error is not None:
            reply.complete(SyncGroupResult(error))
            return reply
        member = group.members[args.member_id]
        if group.is_in(GroupState.EMPTY):
            reply.complete(SyncGroupResult(ErrorCode.unknown_member_id))
        elif group.is_in(GroupState.PREPARING_REBALANCE):
            reply.complete(SyncGroupResult(ErrorCode.rebalance_in_progress))
        elif group.is_in(GroupState.COMPLETING_REBALANCE):
            member.complete_sync(SyncGroupResult(ErrorCode.rebalance_in_progress))  # a superseded SyncGroup
            member.sync_reply = reply
            self._remove_pending_sync(group, args.member_id)
            if group.is_leader(args.member_id):
                self._store_assignment(group, args.assignments)
        elif group.is_in(GroupState.STABLE):
            self._remove_pending_sync(group, args.member_id)
            reply.complete(
                SyncGroupResult(ErrorCode.none, member.assignment, group.protocol_type, group.protocol_name)
            )
            self._schedule_session(group, member)
        return reply

    def _validate_sync(self, group: ClassicGroup, args: SyncGroupArgs) -> ErrorCode | None:
        if group.is_in(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        error = self._validate_member(group, args.member_id, args.group_instance_id)
        if error is not None:
            return error
        if args.generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        if args.protocol_type is not None and args.protocol_type != group.protocol_type:
            return ErrorCode.inconsistent_group_protocol
        if args.protocol_name is not None and args.protocol_name != group.protocol_name:
            return ErrorCode.inconsistent_group_protocol
        return None

    def _store_assignment(self, group: ClassicGroup, leader_assignment: dict[str, bytes]) -> None:
        log.info(
            "assignment received from leader %s for group %s for generation %d; %d members",
            group.leader_id, group.group_id, group.generation_id, group.size,
        )  # fmt: skip
        # Members the leader left out get an empty assignment; ids that are not members are ignored.
        assignment = {member_id: leader_assignment.get(member_id, b"") for member_id in group.members}
        missing = [m for m in group.members if m not in leader_assignment]
        if missing:
            log.warning(
                "group %s: empty assignment for %s in generation %d",
                group.group_id,
                missing,
                group.generation_id,
            )
        generation = group.generation_id

        def on_done(error: ErrorCode | None) -> None:
            # Another member may have joined while the record was written: only the same CompletingRebalance
            # generation may become Stable.
            if not (group.is_in(GroupState.COMPLETING_REBALANCE) and group.generation_id == generation):
                return
            if error is not None:
                self._reset_and_propagate_assignment_error(group, _group_append_error(error))
                self._maybe_prepare_rebalance(group)
            else:
                for member_id, member in group.members.items():
                    member.assignment = assignment.get(member_id, b"")
                self._propagate_assignment(group, ErrorCode.none)
                group.transition_to(GroupState.STABLE, self.clock.time_ms())
                log.info("group %s is Stable in generation %d", group.group_id, generation)

        self._write([self._group_metadata_record(group, assignment)], on_done)

    def _remove_pending_sync(self, group: ClassicGroup, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if not group.pending_sync_members:
            self.timers.cancel((SYNC, group.group_id))

    def heartbeat(self, args: HeartbeatArgs) -> ErrorCode:
        if not args.group_id:
            return ErrorCode.invalid_group_id
        group = self.groups.get(args.group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        if group.is_in(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        error = self._validate_member(group, args.member_id, args.group_instance_id)
        if error is not None:
            return error
        if args.generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        if group.is_in(GroupState.EMPTY):
            return ErrorCode.unknown_member_id
        self._schedule_session(group, group.members[args.member_id])
        if group.is_in(GroupState.PREPARING_REBALANCE):
            return ErrorCode.rebalance_in_progress
        # CompletingRebalance: members may heartbeat between their JoinGroup and SyncGroup responses.
        return ErrorCode.none

    def leave_group(self, group_id: str, leaving: Iterable[LeavingMember]) -> LeaveGroupResult:
        leaving = list(leaving)
        if not group_id:
            return LeaveGroupResult(ErrorCode.invalid_group_id)
        group = self.groups.get(group_id)
        if group is None:
            return LeaveGroupResult(
                ErrorCode.none,
                tuple(
                    LeftMember(m.member_id, m.group_instance_id, ErrorCode.unknown_member_id) for m in leaving
                ),
            )
        if group.is_in(GroupState.DEAD):
            return LeaveGroupResult(ErrorCode.coordinator_not_available)
        results = []
        for m in leaving:
            results.append(LeftMember(m.member_id, m.group_instance_id, self._leave_one(group, m)))
        return LeaveGroupResult(ErrorCode.none, tuple(results))

    def _leave_one(self, group: ClassicGroup, leaving: LeavingMember) -> ErrorCode:
        if leaving.member_id == UNKNOWN_MEMBER_ID:
            # Administrative removal by group.instance.id (kafka-consumer-groups, AdminClient).
            current = group.static_member_id(leaving.group_instance_id)
            if current is None:
                return ErrorCode.unknown_member_id
            self._remove_member_and_update_group(group, group.members[current])
            return ErrorCode.none
        if leaving.member_id in group.pending_members:
            group.remove(leaving.member_id)
            self.timers.cancel((PENDING_MEMBER, group.group_id, leaving.member_id))
            self._maybe_complete_join(group)
            return ErrorCode.none
        error = self._validate_member(group, leaving.member_id, leaving.group_instance_id)
        if error is not None:
            return error
        log.info("member %s left group %s (reason: %s)", leaving.member_id, group.group_id, leaving.reason)
        self._remove_member_and_update_group(group, group.members[leaving.member_id])
        return ErrorCode.none

    def _remove_member_and_update_group(self, group: ClassicGroup, member: GroupMember) -> None:
        # A new member may be parked in a JoinGroup: tell it to start over.
        member.complete_join(JoinGroupResult.failure(UNKNOWN_MEMBER_ID, ErrorCode.unknown_member_id))
        member.complete_sync(SyncGroupResult(ErrorCode.unknown_member_id))
        group.remove(member.member_id)
        self.timers.cancel((HEARTBEAT, group.group_id, member.member_id))
        if group.is_in(GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group)
        elif group.is_in(GroupState.PREPARING_REBALANCE):
            self._maybe_complete_join(group)

    def _drop_member(self, group: ClassicGroup, member_id: str) -> None:
        """Remove a member without any protocol side effect (Kafka's group.remove)."""
        group.remove(member_id)
        self.timers.cancel((HEARTBEAT, group.group_id, member_id))
        self.timers.cancel((PENDING_MEMBER, group.group_id, member_id))

    @staticmethod
    def _validate_member(
        group: ClassicGroup, member_id: str, group_instance_id: str | None
    ) -> ErrorCode | None:
        """The member exists and, if static, `member_id` is its current id (else another instance took over)."""
        if group_instance_id is not None:
            current = group.static_member_id(group_instance_id)
            if current is None:
                return ErrorCode.unknown_member_id
            if current != member_id:
                return ErrorCode.fenced_instance_id
        if not group.has(member_id):
            return ErrorCode.unknown_member_id
        return None

    # ===================================================================================================
    # offsets
    # ===================================================================================================

    def commit_offsets(self, args: OffsetCommitArgs) -> Reply[tuple[PartitionError, ...]]:
        reply: Reply[tuple[PartitionError, ...]] = Reply()

        def fail_all(error: ErrorCode) -> Reply[tuple[PartitionError, ...]]:
            reply.complete(tuple(PartitionError(p.topic, p.partition, error) for p in args.offsets))
            return reply

        group = self.groups.get(args.group_id)
        if group is None:
            if args.generation_id >= 0:
                # A member of a generation that this coordinator does not know: it must rejoin.
                return fail_all(ErrorCode.illegal_generation)
            # A consumer that assigns partitions itself and only stores offsets here.
            group = self.groups[args.group_id] = ClassicGroup(
                args.group_id, state_timestamp=self.clock.time_ms()
            )
        error = self._validate_commit(group, args)
        if error is not None:
            return fail_all(error)
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            # A member of the new generation committing before its SyncGroup: let it finish the rebalance.
            return fail_all(ErrorCode.rebalance_in_progress)
        if group.is_in(GroupState.STABLE, GroupState.PREPARING_REBALANCE):
            # Commits count as liveness; during PreparingRebalance the heartbeat response tells it to rejoin.
            self._schedule_session(group, group.members[args.member_id])

        limit = self.config.offset_metadata_max_bytes
        too_large = {
            (p.topic, p.partition)
            for p in args.offsets
            if p.metadata is not None and _java_length(p.metadata) > limit
        }
        now = self.clock.time_ms()
        expire = now + args.retention_time_ms if args.retention_time_ms >= 0 else NO_TIMESTAMP
        records: list[Record] = []
        for p in args.offsets:
            if (p.topic, p.partition) in too_large:
                continue
            value = OffsetCommitValue(p.offset, p.metadata or "", now, p.leader_epoch, expire)
            records.append(
                (
                    encode_offset_commit_key(args.group_id, p.topic, p.partition),
                    encode_offset_commit_value(value),
                )
            )
        if not records:
            return fail_all(ErrorCode.offset_metadata_too_large)

        def on_done(append_error: ErrorCode | None) -> None:
            error = ErrorCode.none if append_error is None else _offset_append_error(append_error)
            reply.complete(
                tuple(
                    PartitionError(
                        p.topic,
                        p.partition,
                        ErrorCode.offset_metadata_too_large if (p.topic, p.partition) in too_large else error,
                    )
                    for p in args.offsets
                )
            )

        self._write(records, on_done)
        return reply

    @staticmethod
    def _validate_commit(group: ClassicGroup, args: OffsetCommitArgs) -> ErrorCode | None:
        if group.is_in(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        if args.generation_id < 0 and group.is_in(GroupState.EMPTY):
            return None  # the admin client or a consumer without group management
        if (
            args.generation_id >= 0
            or args.member_id != UNKNOWN_MEMBER_ID
            or args.group_instance_id is not None
        ):
            error = GroupCoordinatorShard._validate_member(group, args.member_id, args.group_instance_id)
            if error is not None:
                return error
            if args.generation_id != group.generation_id:
                return ErrorCode.illegal_generation
            return None
        if not group.is_in(GroupState.EMPTY):
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

    def _partitions_with_pending_txn(self, group_id: str) -> set[TopicPartition]:
        return {tp for pending in self.pending_txn_offsets.values() for g, tp in pending if g == group_id}

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
        records: list[Record] = [
            (encode_offset_commit_key(group_id, tp.topic, tp.partition), None)
            for tp in eligible
            if tp in committed
        ]
        remaining = set(committed) - set(eligible)
        records += self._maybe_retire_group(group, has_offsets=bool(remaining))

        def answer(append_error: ErrorCode | None) -> None:
            error = ErrorCode.none if append_error is None else _offset_append_error(append_error)
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

    # ===================================================================================================
    # admin
    # ===================================================================================================

    def describe_group(self, group_id: str) -> GroupDescription:
        group = self.groups.get(group_id)
        if group is None:
            return GroupDescription(group_id, ErrorCode.none, GroupState.DEAD.value)
        stable = group.is_in(GroupState.STABLE)
        protocol = group.protocol_name if stable and group.protocol_name is not None else ""
        members = tuple(
            MemberDescription(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.metadata_for(protocol) if stable else b"",
                m.assignment if stable else b"",
            )
            for m in group.members.values()
        )
        return GroupDescription(
            group_id, ErrorCode.none, group.state.value, group.protocol_type or "", protocol, members
        )

    def list_groups(self, states: Iterable[str] = ()) -> list[GroupOverview]:
        wanted = {s.lower() for s in states}
        return [
            GroupOverview(g.group_id, g.protocol_type or "", g.state.value)
            for g in self.groups.values()
            if not wanted or g.state.value.lower() in wanted
        ]

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
                records += [
                    (encode_offset_commit_key(group_id, tp.topic, tp.partition), None)
                    for tp in self.offsets.get(group_id, {})
                ]
                records += self._retire_group(group)
                deleted.append(group_id)
            else:
                results[group_id] = ErrorCode.non_empty_group

        def answer(append_error: ErrorCode | None) -> None:
            error = ErrorCode.none if append_error is None else _offset_append_error(append_error)
            reply.complete({**results, **dict.fromkeys(deleted, error)})

        if records:
            self._write(records, answer)
        else:
            answer(None)
        return reply

    # ===================================================================================================
    # expiry
    # ===================================================================================================

    def _schedule_offsets_expiry(self) -> None:
        self.timers.schedule(
            (OFFSETS_EXPIRY,), self._mono() + self.config.offsets_retention_check_interval_ms
        )

    def expire_offsets(self) -> int:
        """Drop expired offsets and retire Empty groups left without offsets; returns how many offsets expired."""
        now = self.clock.time_ms()
        retention = self.config.offsets_retention_ms
        expired_total = 0
        records: list[Record] = []
        for group in list(self.groups.values()):
            committed = self.offsets.get(group.group_id, {})
            expired = self._expired_offsets(group, committed, now, retention)
            expired_total += len(expired)
            records += [
                (encode_offset_commit_key(group.group_id, tp.topic, tp.partition), None) for tp in expired
            ]
            records += self._maybe_retire_group(group, has_offsets=len(expired) < len(committed))
        if records:
            self._write(records)
        if expired_total:
            log.info("partition %d: %d expired offsets removed", self.partition, expired_total)
        return expired_total

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

    def _maybe_retire_group(self, group: ClassicGroup, *, has_offsets: bool) -> list[Record]:
        """An Empty group without offsets is Dead: drop it, and tombstone its metadata if it ever had any."""
        if (
            not group.is_in(GroupState.EMPTY)
            or has_offsets
            or self._partitions_with_pending_txn(group.group_id)
        ):
            return []
        return self._retire_group(group)

    def _retire_group(self, group: ClassicGroup) -> list[Record]:
        group.transition_to(GroupState.DEAD, self.clock.time_ms())
        del self.groups[group.group_id]
        self.timers.cancel((JOIN, group.group_id))
        # Generation 0 groups only ever stored offsets; they have no metadata record to delete.
        return [(encode_group_metadata_key(group.group_id), None)] if group.generation_id > 0 else []

    # ===================================================================================================
    # timers
    # ===================================================================================================

    def _on_timer(self, timer: Timer) -> None:
        kind = timer.key[0]
        if kind == OFFSETS_EXPIRY:
            self.expire_offsets()
            self._schedule_offsets_expiry()
            return
        group = self.groups.get(timer.key[1])
        if group is None or group.is_in(GroupState.DEAD):
            return
        if kind == HEARTBEAT:
            self._on_session_expired(group, timer.key[2])
        elif kind == PENDING_MEMBER:
            member_id = timer.key[2]
            if member_id in group.pending_members:
                log.info(
                    "pending member %s of group %s never joined; forgetting it", member_id, group.group_id
                )
                group.remove(member_id)
                self._maybe_complete_join(group)
        elif kind == JOIN:
            self._on_join_timeout(group, timer.payload)
        elif kind == SYNC:
            self._on_sync_timeout(group, timer.payload)

    def _on_session_expired(self, group: ClassicGroup, member_id: str) -> None:
        member = group.members.get(member_id)
        if member is None:
            return
        # Members parked in a JoinGroup or SyncGroup count as alive (their session restarts when answered),
        # except new members, whose parked JoinGroup is itself what timed out.
        if not member.is_new and (member.is_awaiting_join or member.is_awaiting_sync):
            return
        log.info("member %s of group %s failed its session; removing it", member_id, group.group_id)
        self._remove_member_and_update_group(group, member)

    def _on_join_timeout(self, group: ClassicGroup, payload: _InitialJoin | None) -> None:
        if not group.is_in(GroupState.PREPARING_REBALANCE):
            return
        if isinstance(payload, _InitialJoin) and group.new_member_added and payload.remaining_ms != 0:
            # More members arrived during the delay: wait again, up to the rebalance timeout in total.
            group.new_member_added = False
            delay = min(self.config.initial_rebalance_delay_ms, payload.remaining_ms)
            remaining = max(payload.remaining_ms - payload.delay_ms, 0)
            self.timers.schedule((JOIN, group.group_id), self._mono() + delay, _InitialJoin(delay, remaining))
            return
        self._complete_join(group)

    def _on_sync_timeout(self, group: ClassicGroup, generation: int) -> None:
        if generation != group.generation_id or not group.is_in(
            GroupState.COMPLETING_REBALANCE, GroupState.STABLE
        ):
            return
        if not group.pending_sync_members:
            return
        missing = sorted(group.pending_sync_members)
        log.info(
            "group %s: members %s sent no SyncGroup in time; rebalancing without them",
            group.group_id,
            missing,
        )
        for member_id in missing:
            self._drop_member(group, member_id)
        self._prepare_rebalance(group)

    def _schedule_session(
        self, group: ClassicGroup, member: GroupMember, timeout_ms: int | None = None
    ) -> None:
        timeout = member.session_timeout_ms if timeout_ms is None else timeout_ms
        self.timers.schedule((HEARTBEAT, group.group_id, member.member_id), self._mono() + timeout)

    # ===================================================================================================
    # records and replay internals
    # ===================================================================================================

    def _write(
        self, records: list[Record], on_done: Callable[[ErrorCode | None], None] | None = None
    ) -> None:
        self._appends.append(Append(records, on_done, self.clock.time_ms()))

    def _group_metadata_record(self, group: ClassicGroup, assignment: dict[str, bytes]) -> Record:
        protocol = group.protocol_name
        members = tuple(
            MemberMetadataValue(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout=m.rebalance_timeout_ms,
                session_timeout=m.session_timeout_ms,
                subscription=m.metadata_for(protocol) if protocol is not None else b"",
                assignment=assignment.get(m.member_id, b""),
            )
            for m in group.members.values()
        )
        value = GroupMetadataValue(
            protocol_type=group.protocol_type or "",
            generation=group.generation_id,
            protocol=protocol,
            leader=group.leader_id,
            current_state_timestamp=group.state_timestamp
            if group.state_timestamp is not None
            else NO_TIMESTAMP,
            members=members,
        )
        return encode_group_metadata_key(group.group_id), encode_group_metadata_value(value)

    def _apply(self, key, value: bytes | None, offset: int) -> None:
        if isinstance(key, OffsetCommitKey):
            tp = TopicPartition(key.topic, key.partition)
            if value is None:
                self._remove_offset(key.group, tp, offset)
                return
            entry = self._decode_offset(value, offset)
            if entry is not None:
                self._put_offset(key.group, tp, entry)
        elif isinstance(key, GroupMetadataKey):
            current = self.group_records.get(key.group)
            if current is not None and current[1] > offset:
                return
            if value is None:
                self.group_records.pop(key.group, None)
                return
            try:
                self.group_records[key.group] = (decode_group_metadata_value(value), offset)
            except RecordFormatError as e:
                log.error(
                    "partition %d: skipping unreadable group metadata at %d: %s", self.partition, offset, e
                )
        # Other key versions belong to group types this broker does not run; Kafka skips them too.

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
        if self._load is None and group_id not in self.groups:
            # A commit landed for a group that no longer exists live (deleted meanwhile): the log says it has
            # offsets, so it exists, exactly as a reload would find it.
            self.groups[group_id] = ClassicGroup(group_id, state_timestamp=self.clock.time_ms())

    def _remove_offset(self, group_id: str, tp: TopicPartition, offset: int) -> None:
        committed = self.offsets.get(group_id)
        if committed is None:
            return
        current = committed.get(tp)
        if current is not None and current.record_offset < offset:
            del committed[tp]
            if not committed:
                del self.offsets[group_id]

    def _group_from_snapshot(self, group_id: str, snapshot: GroupMetadataValue) -> ClassicGroup:
        group = ClassicGroup(
            group_id,
            state=GroupState.STABLE if snapshot.members else GroupState.EMPTY,
            state_timestamp=None
            if snapshot.current_state_timestamp == NO_TIMESTAMP
            else snapshot.current_state_timestamp,
            generation_id=snapshot.generation,
            protocol_type=snapshot.protocol_type or None,
            protocol_name=snapshot.protocol,
            leader_id=snapshot.leader,
        )
        for m in snapshot.members:
            group.add(
                GroupMember(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout_ms=m.rebalance_timeout,
                    session_timeout_ms=m.session_timeout,
                    protocol_type=snapshot.protocol_type,
                    protocols=((snapshot.protocol or "", m.subscription),),
                    assignment=m.assignment,
                )
            )
        group.leader_id = snapshot.leader  # `add` made the first member leader; the record knows better
        group.subscribed_topics = group.compute_subscribed_topics()
        return group

    def _on_group_loaded(self, group: ClassicGroup) -> None:
        if group.size > self.config.max_group_size:
            # group.max.size was lowered since the group formed: rebalance so the excess members are turned away.
            self._prepare_rebalance(group)
        for member in group.members.values():
            self._schedule_session(group, member)

    def _mono(self) -> int:
        return self.clock.monotonic_ms()

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
