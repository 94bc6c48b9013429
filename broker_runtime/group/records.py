"""The records of `__consumer_offsets`, byte for byte as Kafka writes them.

Every record's key and value start with an int16 version. The key version says what the record is:

| key version | key                                          | value                                      |
|-------------|----------------------------------------------|--------------------------------------------|
| 0, 1        | OffsetCommitKey(group, topic, partition)     | OffsetCommitValue v0-v4, or null (deleted) |
| 2           | GroupMetadataKey(group)                      | GroupMetadataValue v0-v4, or null (deleted)|
| 3+          | KIP-848 / share / streams group records      | ignored here (this broker runs no such groups)|

Field layouts (Kafka's group-coordinator/src/main/resources/common/message/*.json):

    OffsetCommitValue   offset int64, leaderEpoch int32 (v3+), metadata string, commitTimestamp int64,
                        expireTimestamp int64 (v1 only)
    GroupMetadataValue  protocolType string, generation int32, protocol string?, leader string?,
                        currentStateTimestamp int64 (v2+), members []:
                          memberId string, groupInstanceId string? (v3+), clientId string, clientHost string,
                          rebalanceTimeout int32 (v1+), sessionTimeout int32, subscription bytes, assignment bytes

Versions 0-3 use classic encodings (int16-length strings, int32-length bytes and arrays); version 4 is
"flexible" (unsigned-varint length+1 compact strings, bytes and arrays, and a tagged-field section closing every
struct). Like Kafka 3.x we write OffsetCommitKey v1, GroupMetadataKey v2, OffsetCommitValue v3 and
GroupMetadataValue v3 (the highest non-flexible versions) and read every version, so a log written by Kafka
loads here and ours loads in Kafka.

The group to partition mapping is Kafka's: `Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions`,
with Java's String.hashCode over UTF-16 code units and Utils.abs mapping Integer.MIN_VALUE to 0.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker_runtime.coordinator.record_codec import RecordFormatError, RecordReader, RecordWriter

OFFSETS_TOPIC = "__consumer_offsets"

OFFSET_COMMIT_KEY_VERSIONS = (0, 1)
GROUP_METADATA_KEY_VERSION = 2
OFFSET_COMMIT_KEY_WRITE_VERSION = 1
OFFSET_COMMIT_VALUE_WRITE_VERSION = 3
GROUP_METADATA_VALUE_WRITE_VERSION = 3
MAX_VALUE_VERSION = 4  # both value schemas: 0-4, flexible from 4

NO_LEADER_EPOCH = -1
NO_TIMESTAMP = -1


# --- the decoded forms ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OffsetCommitKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupMetadataKey:
    group: str


@dataclass(frozen=True, slots=True)
class UnknownKey:
    """A record type this broker does not run (KIP-848 consumer groups, share groups, ...)."""

    version: int


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    metadata: str
    commit_timestamp: int
    leader_epoch: int = NO_LEADER_EPOCH
    # Only version 1 carries it: commits from OffsetCommit v1 that asked for an explicit expiry time.
    expire_timestamp: int = NO_TIMESTAMP


@dataclass(frozen=True, slots=True)
class MemberMetadataValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberMetadataValue, ...]


RecordKey = OffsetCommitKey | GroupMetadataKey | UnknownKey


# --- keys ----------------------------------------------------------------------------------------------------


def encode_offset_commit_key(group: str, topic: str, partition: int) -> bytes:
    w = RecordWriter()
    w.int16(OFFSET_COMMIT_KEY_WRITE_VERSION)
    w.nullable_string(group)
    w.nullable_string(topic)
    w.int32(partition)
    return bytes(w.out)


def encode_group_metadata_key(group: str) -> bytes:
    w = RecordWriter()
    w.int16(GROUP_METADATA_KEY_VERSION)
    w.nullable_string(group)
    return bytes(w.out)


def decode_key(data: bytes | memoryview) -> RecordKey:
    r = RecordReader(data)
    version = r.int16()
    if version in OFFSET_COMMIT_KEY_VERSIONS:
        return OffsetCommitKey(r.string(), r.string(), r.int32())
    if version == GROUP_METADATA_KEY_VERSION:
        return GroupMetadataKey(r.string())
    return UnknownKey(version)


# --- values --------------------------------------------------------------------------------------------------


def encode_offset_commit_value(value: OffsetCommitValue, version: int | None = None) -> bytes:
    if version is None:
        # Kafka writes v1 only for commits that carry an explicit expire timestamp, otherwise v3.
        version = 1 if value.expire_timestamp != NO_TIMESTAMP else OFFSET_COMMIT_VALUE_WRITE_VERSION
    if not 0 <= version <= MAX_VALUE_VERSION:
        raise RecordFormatError(f"OffsetCommitValue has no version {version}")
    w = RecordWriter(flexible=version >= 4)
    w.int16(version)
    w.int64(value.offset)
    if version >= 3:
        w.int32(value.leader_epoch)
    w.nullable_string(value.metadata)
    w.int64(value.commit_timestamp)
    if version == 1:
        w.int64(value.expire_timestamp)
    w.no_tagged_fields()
    return bytes(w.out)


def decode_offset_commit_value(data: bytes | memoryview) -> OffsetCommitValue:
    r = RecordReader(data)
    version = r.int16()
    if not 0 <= version <= MAX_VALUE_VERSION:
        raise RecordFormatError(f"unknown OffsetCommitValue version {version}")
    r.flexible = version >= 4
    offset = r.int64()
    leader_epoch = r.int32() if version >= 3 else NO_LEADER_EPOCH
    metadata = r.string()
    commit_timestamp = r.int64()
    expire_timestamp = r.int64() if version == 1 else NO_TIMESTAMP
    r.skip_tagged_fields()
    return OffsetCommitValue(offset, metadata, commit_timestamp, leader_epoch, expire_timestamp)


def encode_group_metadata_value(
    value: GroupMetadataValue, version: int = GROUP_METADATA_VALUE_WRITE_VERSION
) -> bytes:
    if not 0 <= version <= MAX_VALUE_VERSION:
        raise RecordFormatError(f"GroupMetadataValue has no version {version}")
    w = RecordWriter(flexible=version >= 4)
    w.int16(version)
    w.nullable_string(value.protocol_type)
    w.int32(value.generation)
    w.nullable_string(value.protocol)
    w.nullable_string(value.leader)
    if version >= 2:
        w.int64(value.current_state_timestamp)
    w.array_length(len(value.members))
    for m in value.members:
        w.nullable_string(m.member_id)
        if version >= 3:
            w.nullable_string(m.group_instance_id)
        w.nullable_string(m.client_id)
        w.nullable_string(m.client_host)
        if version >= 1:
            w.int32(m.rebalance_timeout)
        w.int32(m.session_timeout)
        w.bytes_(m.subscription)
        w.bytes_(m.assignment)
        w.no_tagged_fields()
    w.no_tagged_fields()
    return bytes(w.out)


def decode_group_metadata_value(data: bytes | memoryview) -> GroupMetadataValue:
    r = RecordReader(data)
    version = r.int16()
    if not 0 <= version <= MAX_VALUE_VERSION:
        raise RecordFormatError(f"unknown GroupMetadataValue version {version}")
    r.flexible = version >= 4
    protocol_type = r.string()
    generation = r.int32()
    protocol = r.nullable_string()
    leader = r.nullable_string()
    current_state_timestamp = r.int64() if version >= 2 else NO_TIMESTAMP
    members = []
    for _ in range(r.array_length()):
        member_id = r.string()
        group_instance_id = r.nullable_string() if version >= 3 else None
        client_id = r.string()
        client_host = r.string()
        rebalance_timeout = r.int32() if version >= 1 else -1
        session_timeout = r.int32()
        # Version 0 predates separate rebalance timeouts: the session timeout was both (Kafka does the same).
        if rebalance_timeout == -1:
            rebalance_timeout = session_timeout
        subscription = r.bytes_()
        assignment = r.bytes_()
        r.skip_tagged_fields()
        members.append(
            MemberMetadataValue(
                member_id, group_instance_id, client_id, client_host, rebalance_timeout, session_timeout,
                subscription, assignment,
            )
        )  # fmt: skip
    r.skip_tagged_fields()
    return GroupMetadataValue(
        protocol_type, generation, protocol, leader, current_state_timestamp, tuple(members)
    )


# --- partitioning --------------------------------------------------------------------------------------------


def java_string_hash(s: str) -> int:
    """Java's String.hashCode(): sum of UTF-16 code units times powers of 31, as a signed 32-bit int."""
    h = 0
    units = s.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + ((units[i] << 8) | units[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group_id: str, num_partitions: int) -> int:
    """The `__consumer_offsets` partition (and so the coordinator) of a group, as Kafka computes it."""
    h = java_string_hash(group_id)
    # Kafka's Utils.abs: Integer.MIN_VALUE has no positive counterpart and maps to 0.
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


# --- the consumer protocol (just what the coordinator reads) -------------------------------------------------

CONSUMER_PROTOCOL_TYPE = "consumer"


def subscribed_topics(subscription: bytes) -> frozenset[str]:
    """The topics of a ConsumerProtocolSubscription, read through its version-0 prefix as Kafka does.

    Every version starts with (version int16, topics [string]); later fields are ignored so that future
    versions parse too. Raises RecordFormatError when the bytes are not a subscription.
    """
    r = RecordReader(subscription)
    r.int16()
    n = r.int32()
    if n < 0:
        raise RecordFormatError("null topic list in a consumer subscription")
    return frozenset(r.string() for _ in range(n))
