"""What goes into and comes out of the coordinator shard: version-independent requests and results.

The handlers in `broker_runtime/handlers/groups.py` translate each wire version of a request into these and
back; the shard never sees wire versions, and the wire layer never sees group state.

`Reply` (`broker_runtime/coordinator/shard.py`) is the shard's sans-I/O promise: a request whose answer depends
on other members (JoinGroup, a follower's SyncGroup) or on an append to `__consumer_offsets` (OffsetCommit, the
leader's SyncGroup) gets a Reply that is completed later, by another request, a timer, or the append's
completion. The asyncio runtime turns it into a future; unit tests just read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from broker_runtime.coordinator.shard import Reply  # noqa: F401  (the shard API hands out Replies)

UNKNOWN_MEMBER_ID = ""
NO_GENERATION = -1


@dataclass(frozen=True, slots=True)
class TopicPartition:
    topic: str
    partition: int


# --- JoinGroup -----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JoinGroupArgs:
    group_id: str
    member_id: str
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]  # (name, metadata), in the member's order of preference
    session_timeout_ms: int
    rebalance_timeout_ms: int
    group_instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    # v4+: a member without an id gets one back with MEMBER_ID_REQUIRED and must join again with it (KIP-394).
    require_known_member_id: bool = True
    # v9+: a rejoining static leader may be told to skip the assignor (KIP-814).
    supports_skipping_assignment: bool = False
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class JoinedMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinGroupResult:
    error: ErrorCode
    member_id: str
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    skip_assignment: bool = False
    members: tuple[JoinedMember, ...] = ()  # only the leader gets the member list

    @classmethod
    def failure(cls, member_id: str, error: ErrorCode) -> JoinGroupResult:
        return cls(error=error, member_id=member_id)


# --- SyncGroup -----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SyncGroupArgs:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None
    protocol_type: str | None = None  # v5+; None when the client did not say
    protocol_name: str | None = None
    assignments: dict[str, bytes] = field(default_factory=dict)  # leader only: member id -> assignment


@dataclass(frozen=True, slots=True)
class SyncGroupResult:
    error: ErrorCode
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


# --- Heartbeat, LeaveGroup -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HeartbeatArgs:
    group_id: str
    generation_id: int
    member_id: str
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class LeavingMember:
    member_id: str
    group_instance_id: str | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class LeftMember:
    member_id: str
    group_instance_id: str | None
    error: ErrorCode


@dataclass(frozen=True, slots=True)
class LeaveGroupResult:
    error: ErrorCode
    members: tuple[LeftMember, ...] = ()


# --- offsets -------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CommitPartition:
    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""


@dataclass(frozen=True, slots=True)
class OffsetCommitArgs:
    group_id: str
    offsets: tuple[CommitPartition, ...]
    generation_id: int = NO_GENERATION
    member_id: str = UNKNOWN_MEMBER_ID
    group_instance_id: str | None = None
    retention_time_ms: int = -1  # v2-v4 only; -1 = the broker's offsets.retention.minutes


@dataclass(frozen=True, slots=True)
class TxnOffsetCommitArgs:
    """TxnOffsetCommit: offsets a transactional producer commits for a group; they take effect with its
    transaction's COMMIT marker. Member fields come with v3+ (KIP-447); older versions leave the defaults."""

    group_id: str
    transactional_id: str
    producer_id: int
    producer_epoch: int
    offsets: tuple[CommitPartition, ...]
    generation_id: int = NO_GENERATION
    member_id: str = UNKNOWN_MEMBER_ID
    group_instance_id: str | None = None
    # Set by the handler when transaction verification is on: the guard the offsets partition's log checks.
    verification_guard: object | None = None


@dataclass(frozen=True, slots=True)
class PartitionError:
    topic: str
    partition: int
    error: ErrorCode


@dataclass(frozen=True, slots=True)
class FetchedOffset:
    topic: str
    partition: int
    offset: int  # -1 when nothing is committed
    leader_epoch: int
    metadata: str
    error: ErrorCode = ErrorCode.none


@dataclass(frozen=True, slots=True)
class OffsetFetchResult:
    error: ErrorCode
    partitions: tuple[FetchedOffset, ...] = ()


@dataclass(frozen=True, slots=True)
class OffsetDeleteResult:
    error: ErrorCode
    partitions: tuple[PartitionError, ...] = ()


# --- admin ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    error: ErrorCode
    state: str
    protocol_type: str = ""
    protocol: str = ""
    members: tuple[MemberDescription, ...] = ()


@dataclass(frozen=True, slots=True)
class GroupOverview:
    group_id: str
    protocol_type: str
    state: str
