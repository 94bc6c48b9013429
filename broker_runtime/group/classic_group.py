"""In-memory shape of a classic group and its members (Kafka's GroupMetadata and MemberMetadata).

This is bookkeeping only: membership, protocol votes, who is waiting for which response. The decisions (what a
JoinGroup does in each state, when a rebalance starts or completes) are in `coordinator.py`; the legal state
moves are in `state.py`.
"""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from broker_runtime.group.api import JoinedMember, JoinGroupResult, Reply, SyncGroupResult
from broker_runtime.group.records import CONSUMER_PROTOCOL_TYPE, RecordFormatError, subscribed_topics
from broker_runtime.group.state import VALID_PREVIOUS, GroupState, transition


@dataclass(eq=False, slots=True)
class GroupMember:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""
    # The parked JoinGroup / SyncGroup of this member, if any.
    join_reply: Reply[JoinGroupResult] | None = None
    sync_reply: Reply[SyncGroupResult] | None = None
    # A member added in the current join phase that has not received a JoinGroup response yet: its session
    # does not protect it, it expires after NEW_MEMBER_JOIN_TIMEOUT_MS unless the join completes.
    is_new: bool = False
    # JoinGroup v9+ (KIP-814): the member understands skip_assignment.
    supports_skipping_assignment: bool = False

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    @property
    def is_awaiting_join(self) -> bool:
        return self.join_reply is not None

    @property
    def is_awaiting_sync(self) -> bool:
        return self.sync_reply is not None

    def metadata_for(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        raise KeyError(f"member {self.member_id} does not support protocol {protocol!r}")

    def matches(self, protocols: tuple[tuple[str, bytes], ...]) -> bool:
        """Same protocols, same order, same metadata: a rejoin that changes nothing."""
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def complete_join(self, result: JoinGroupResult) -> bool:
        reply, self.join_reply = self.join_reply, None
        return reply.complete(result) if reply is not None else False

    def complete_sync(self, result: SyncGroupResult) -> bool:
        reply, self.sync_reply = self.sync_reply, None
        return reply.complete(result) if reply is not None else False


@dataclass(eq=False)
class ClassicGroup:
    group_id: str
    state: GroupState = GroupState.EMPTY
    # Wall-clock time of the last state change (persisted as currentStateTimestamp); None for groups loaded
    # from records that predate the field. Offsets of an Empty group expire relative to it.
    state_timestamp: int | None = None
    generation_id: int = 0
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str | None = None
    members: dict[str, GroupMember] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # group.instance.id -> member id
    # Member ids handed out with MEMBER_ID_REQUIRED that have not joined with them yet.
    pending_members: set[str] = field(default_factory=set)
    # Members of the new generation that have not sent SyncGroup yet.
    pending_sync_members: set[str] = field(default_factory=set)
    # Set when a member joins during the initial delayed join of generation 0, which extends the delay.
    new_member_added: bool = False
    # Topics the members subscribe to (consumer protocol only); None when unknown.
    subscribed_topics: frozenset[str] | None = None
    _protocol_support: Counter[str] = field(default_factory=Counter)

    # --- state ----------------------------------------------------------------------------------------------

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    def transition_to(self, target: GroupState, wall_ms: int) -> None:
        self.state = transition(self.group_id, self.state, target)
        self.state_timestamp = wall_ms

    def can_rebalance(self) -> bool:
        return self.state in VALID_PREVIOUS[GroupState.PREPARING_REBALANCE]

    # --- membership -----------------------------------------------------------------------------------------

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id is not None and self.leader_id == member_id

    @property
    def size(self) -> int:
        return len(self.members)

    @property
    def num_awaiting_join(self) -> int:
        return sum(1 for m in self.members.values() if m.is_awaiting_join)

    def has_all_members_joined(self) -> bool:
        return all(m.is_awaiting_join for m in self.members.values()) and not self.pending_members

    def not_yet_rejoined(self) -> list[GroupMember]:
        return [m for m in self.members.values() if not m.is_awaiting_join]

    @property
    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def static_member_id(self, group_instance_id: str | None) -> str | None:
        if group_instance_id is None:
            return None
        return self.static_members.get(group_instance_id)

    def add(self, member: GroupMember) -> None:
        if member.group_instance_id is not None:
            if member.group_instance_id in self.static_members:
                raise RuntimeError(f"static member {member.group_instance_id} is already in {self.group_id}")
            self.static_members[member.group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self._protocol_support.update(name for name, _ in member.protocols)
        self.pending_members.discard(member.member_id)

    def remove(self, member_id: str) -> GroupMember | None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self._protocol_support.subtract(name for name, _ in member.protocols)
            if member.group_instance_id is not None:
                self.static_members.pop(member.group_instance_id, None)
        if self.is_leader(member_id):
            self.leader_id = next(iter(self.members), None)
        self.pending_members.discard(member_id)
        self.pending_sync_members.discard(member_id)
        return member

    def update_member(
        self,
        member: GroupMember,
        protocols: tuple[tuple[str, bytes], ...],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        join_reply: Reply[JoinGroupResult] | None,
    ) -> None:
        self._protocol_support.subtract(name for name, _ in member.protocols)
        member.protocols = protocols
        self._protocol_support.update(name for name, _ in protocols)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        member.join_reply = join_reply

    def replace_static_member(
        self, group_instance_id: str, old_member_id: str, new_member_id: str
    ) -> GroupMember:
        """Give a static member a new member id, fencing whatever the old id was waiting for."""
        member = self.members.pop(old_member_id)
        member.complete_join(JoinGroupResult.failure(old_member_id, ErrorCode.fenced_instance_id))
        member.complete_sync(SyncGroupResult(ErrorCode.fenced_instance_id))
        member.member_id = new_member_id
        self.members[new_member_id] = member
        if self.is_leader(old_member_id):
            self.leader_id = new_member_id
        self.static_members[group_instance_id] = new_member_id
        self.pending_sync_members.discard(old_member_id)
        return member

    @staticmethod
    def generate_member_id(client_id: str, group_instance_id: str | None) -> str:
        # Kafka's format: "<client.id or group.instance.id>-<uuid>"; tools parse the prefix.
        return f"{group_instance_id if group_instance_id is not None else client_id}-{uuid.uuid4()}"

    # --- protocols ------------------------------------------------------------------------------------------

    def candidate_protocols(self) -> set[str]:
        n = len(self.members)
        return {name for name, count in self._protocol_support.items() if count == n and n > 0}

    def supports_protocols(self, protocol_type: str, protocol_names: set[str]) -> bool:
        if self.state is GroupState.EMPTY:
            return bool(protocol_type) and bool(protocol_names)
        n = len(self.members)
        return self.protocol_type == protocol_type and any(
            self._protocol_support[p] == n for p in protocol_names
        )

    def select_protocol(self) -> str:
        """The protocol every member supports that gets the most first-preference votes.

        Ties go to the protocol voted for first in member order, so the choice is deterministic.
        """
        if not self.members:
            raise RuntimeError(f"cannot select a protocol for empty group {self.group_id}")
        candidates = self.candidate_protocols()
        votes: Counter[str] = Counter(m.vote(candidates) for m in self.members.values())
        best = max(votes.values())
        return next(name for name in votes if votes[name] == best)

    def compute_subscribed_topics(self) -> frozenset[str] | None:
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE:
            return None
        if not self.members:
            return frozenset()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        try:
            for m in self.members.values():
                topics |= subscribed_topics(m.metadata_for(self.protocol_name))
        except (RecordFormatError, KeyError):
            return None  # not the standard consumer protocol: unknown, so treated as subscribed to everything
        return frozenset(topics)

    def is_subscribed_to(self, topic: str) -> bool:
        return True if self.subscribed_topics is None else topic in self.subscribed_topics

    def current_member_list(self) -> tuple[JoinedMember, ...]:
        assert self.protocol_name is not None
        return tuple(
            JoinedMember(m.member_id, m.group_instance_id, m.metadata_for(self.protocol_name))
            for m in self.members.values()
        )

    def assignments(self) -> dict[str, bytes]:
        return {member_id: m.assignment for member_id, m in self.members.items()}
