"""The groups half of a `__consumer_offsets` shard: Kafka's GroupMetadataManager for classic groups.

Theory of operation
-------------------
- **Persisted state** is the last GroupMetadata record of each group (`group_records`), changed only by
  `replay()`. **Soft state** is the live `ClassicGroup` objects (members, who waits for which response, the
  rebalance in progress): they are rebuilt from the records at load (every group Stable or Empty, members'
  sessions restarted) and otherwise evolve with the protocol. State changes go through `state.transition()` only.
- **Handlers** (`join_group`, `sync_group`, `heartbeat`, `leave_group`, `describe_group`, `list_groups`) answer at
  once or hand back a `Reply` that completes when other members join, a timer expires, or the GroupMetadata
  record they wrote is appended (through the shard's `write`).
- **Timers** (member sessions, pending member ids, the join phase with the doubling initial delay of an Empty
  group, the sync phase) live in the shard's `TimerQueue`; the shard hands the due ones to `on_timer()`.

The offsets half (`offset_metadata_manager.py`) reads the groups to validate commits and asks this half to create
or retire groups; the shard (`coordinator.py`) composes the two.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from broker_runtime.coordinator.shard import Record
from broker_runtime.coordinator.timers import Timer, TimerQueue
from broker_runtime.group.api import (
    UNKNOWN_MEMBER_ID,
    GroupDescription,
    GroupOverview,
    HeartbeatArgs,
    JoinGroupArgs,
    JoinGroupResult,
    LeaveGroupResult,
    LeavingMember,
    LeftMember,
    MemberDescription,
    Reply,
    SyncGroupArgs,
    SyncGroupResult,
)
from broker_runtime.group.classic_group import ClassicGroup, GroupMember
from broker_runtime.group.config import GroupCoordinatorConfig
from broker_runtime.group.records import (
    NO_TIMESTAMP,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadataValue,
    RecordFormatError,
    decode_group_metadata_value,
    encode_group_metadata_key,
    encode_group_metadata_value,
)
from broker_runtime.group.state import GroupState

log = logging.getLogger(__name__)

# A member that joined in the current join phase cannot heartbeat yet (it has no generation); if its client
# disconnected it would linger, so its JoinGroup expires after this long (Kafka's NewMemberJoinTimeoutMs).
NEW_MEMBER_JOIN_TIMEOUT_MS = 5 * 60 * 1000

# The shard's `_write(records, on_done=None, producer_id=..., producer_epoch=..., verification_guard=None)`:
# queues records for the runtime to append.
Write = Callable[..., None]


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
GROUP_TIMERS = frozenset({HEARTBEAT, PENDING_MEMBER, JOIN, SYNC})


# Kafka's mapping of a failed append of a group's records to what the request answers; the group metadata's and
# the offset commit's (GroupMetadataManager.maybeConvertOffsetCommitError) both start from these.
APPEND_ERRORS = {
    ErrorCode.unknown_topic_or_partition: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas: ErrorCode.coordinator_not_available,
    ErrorCode.not_enough_replicas_after_append: ErrorCode.coordinator_not_available,
    ErrorCode.not_leader_or_follower: ErrorCode.not_coordinator,
    ErrorCode.kafka_storage_error: ErrorCode.not_coordinator,
}
TOO_LARGE_APPEND_ERRORS = (
    ErrorCode.message_too_large,
    ErrorCode.record_list_too_large,
    ErrorCode.invalid_fetch_size,
)
_GROUP_APPEND_ERRORS = {
    **APPEND_ERRORS,
    ErrorCode.request_timed_out: ErrorCode.rebalance_in_progress,
    **dict.fromkeys(TOO_LARGE_APPEND_ERRORS, ErrorCode.unknown_server_error),
}


def _group_append_error(error: ErrorCode) -> ErrorCode:
    """What JoinGroup/SyncGroup answer for a failed GroupMetadata append."""
    return _GROUP_APPEND_ERRORS.get(error, error)


class GroupMetadataManager:
    def __init__(
        self, partition: int, config: GroupCoordinatorConfig, clock, timers: TimerQueue, write: Write
    ) -> None:
        self.partition = partition
        self.config = config
        self.clock = clock
        self.timers = timers
        self._write = write
        # --- persisted state: mutated by replay only ---
        self.group_records: dict[str, tuple[GroupMetadataValue, int]] = {}
        # --- soft state ---
        self.groups: dict[str, ClassicGroup] = {}

    # ===================================================================================================
    # loading, unloading, replay
    # ===================================================================================================

    def replay(self, key: GroupMetadataKey, value: bytes | None, offset: int) -> None:
        current = self.group_records.get(key.group)
        if current is not None and current[1] > offset:
            return
        if value is None:
            self.group_records.pop(key.group, None)
            return
        try:
            self.group_records[key.group] = (decode_group_metadata_value(value), offset)
        except RecordFormatError as e:
            log.error("partition %d: skipping unreadable group metadata at %d: %s", self.partition, offset, e)

    def finish_load(self, group_ids_with_offsets: Iterable[str]) -> None:
        """Rebuild the groups from their records (and offsets-only groups), restart sessions and timers."""
        for group_id, (snapshot, _) in self.group_records.items():
            self.groups[group_id] = self._group_from_snapshot(group_id, snapshot)
        for group_id in group_ids_with_offsets:
            if group_id not in self.groups:
                self.groups[group_id] = ClassicGroup(group_id)
        for group in self.groups.values():
            self._on_group_loaded(group)

    def unload(self) -> None:
        """Answer every parked JoinGroup and SyncGroup with NOT_COORDINATOR; the groups are Dead."""
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

    def get_or_create_for_offsets(self, group_id: str) -> ClassicGroup:
        """The group offsets were committed for; a group that only stores offsets is created on first use."""
        group = self.groups.get(group_id)
        if group is None:
            group = self.groups[group_id] = ClassicGroup(group_id, state_timestamp=self.clock.time_ms())
        return group

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
        error = self.validate_member(group, member_id, args.group_instance_id)
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
        self.schedule_session(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
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
        self.schedule_session(group, member)
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
                    self.schedule_session(group, member)
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
                    member.complete_join(dataclasses.replace(result, skip_assignment=is_leader))
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
            self.schedule_session(group, member)
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
                self.schedule_session(group, member)

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
            self.schedule_session(group, member)
        return reply

    def _validate_sync(self, group: ClassicGroup, args: SyncGroupArgs) -> ErrorCode | None:
        if group.is_in(GroupState.DEAD):
            return ErrorCode.coordinator_not_available
        error = self.validate_member(group, args.member_id, args.group_instance_id)
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
        error = self.validate_member(group, args.member_id, args.group_instance_id)
        if error is not None:
            return error
        if args.generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        if group.is_in(GroupState.EMPTY):
            return ErrorCode.unknown_member_id
        self.schedule_session(group, group.members[args.member_id])
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
        error = self.validate_member(group, leaving.member_id, leaving.group_instance_id)
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
    def validate_member(
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

    def maybe_retire_group(self, group: ClassicGroup, *, keeps_offsets: bool) -> list[Record]:
        """An Empty group without offsets (committed or pending in a transaction) is Dead: drop it, and
        tombstone its metadata if it ever had any."""
        if not group.is_in(GroupState.EMPTY) or keeps_offsets:
            return []
        return self.retire_group(group)

    def retire_group(self, group: ClassicGroup) -> list[Record]:
        group.transition_to(GroupState.DEAD, self.clock.time_ms())
        del self.groups[group.group_id]
        self.timers.cancel((JOIN, group.group_id))
        # Generation 0 groups only ever stored offsets; they have no metadata record to delete.
        return [(encode_group_metadata_key(group.group_id), None)] if group.generation_id > 0 else []

    # ===================================================================================================
    # timers
    # ===================================================================================================

    def on_timer(self, timer: Timer) -> None:
        kind = timer.key[0]
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

    def schedule_session(
        self, group: ClassicGroup, member: GroupMember, timeout_ms: int | None = None
    ) -> None:
        timeout = member.session_timeout_ms if timeout_ms is None else timeout_ms
        self.timers.schedule((HEARTBEAT, group.group_id, member.member_id), self._mono() + timeout)

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
            self.schedule_session(group, member)

    def _mono(self) -> int:
        return self.clock.monotonic_ms()
