"""`__consumer_offsets` records: golden bytes in Kafka's layout, every value version, partitioning."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker_runtime.group.records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    RecordFormatError,
    UnknownKey,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
    java_string_hash,
    partition_for,
    subscribed_topics,
)


def test_offset_commit_key_golden_bytes() -> None:
    expected = bytes.fromhex(
        "0001"  # key version 1: offset commit
        "0002" "6731"  # group "g1"
        "0001" "74"  # topic "t"
        "00000003"  # partition 3
    )  # fmt: skip
    assert encode_offset_commit_key("g1", "t", 3) == expected
    assert decode_key(expected) == OffsetCommitKey("g1", "t", 3)
    # Version 0 keys (Kafka before 0.10.1) have the same fields.
    assert decode_key(b"\x00\x00" + expected[2:]) == OffsetCommitKey("g1", "t", 3)


def test_group_metadata_key_golden_bytes() -> None:
    expected = bytes.fromhex("000200026731")  # key version 2, group "g1"
    assert encode_group_metadata_key("g1") == expected
    assert decode_key(expected) == GroupMetadataKey("g1")


def test_keys_of_other_group_types_are_recognised_as_unknown() -> None:
    # Version 3+ keys belong to KIP-848 consumer groups, share groups, ...; Kafka skips them at load.
    assert decode_key(bytes.fromhex("000300026731")) == UnknownKey(3)


def test_offset_commit_value_v3_golden_bytes() -> None:
    expected = bytes.fromhex(
        "0003"  # value version 3
        "000000000000002a"  # offset 42
        "00000007"  # leader epoch 7
        "0001" "6d"  # metadata "m"
        "00000000000003e8"  # commit timestamp 1000
    )  # fmt: skip
    value = OffsetCommitValue(offset=42, metadata="m", commit_timestamp=1000, leader_epoch=7)
    assert encode_offset_commit_value(value) == expected
    assert decode_offset_commit_value(expected) == value


def test_offset_commit_value_with_expiry_is_written_as_v1() -> None:
    value = OffsetCommitValue(offset=1, metadata="", commit_timestamp=10, expire_timestamp=99)
    data = encode_offset_commit_value(value)
    assert data == bytes.fromhex(
        "0001"  # version 1: the only one with an expire timestamp
        "0000000000000001"  # offset
        "0000"  # metadata ""
        "000000000000000a"  # commit timestamp
        "0000000000000063"  # expire timestamp 99
    )  # fmt: skip
    assert decode_offset_commit_value(data) == value


def test_group_metadata_value_v3_golden_bytes() -> None:
    member = MemberMetadataValue(
        member_id="m1", group_instance_id="i1", client_id="c", client_host="/h",
        rebalance_timeout=300000, session_timeout=10000, subscription=b"\x01", assignment=b"\x02",
    )  # fmt: skip
    value = GroupMetadataValue("consumer", 5, "range", "m1", 1234, (member,))
    expected = bytes.fromhex(
        "0003"  # value version 3
        "0008" + b"consumer".hex() +  # protocol type
        "00000005"  # generation
        "0005" + b"range".hex() +  # protocol
        "0002" + b"m1".hex() +  # leader
        "00000000000004d2"  # current state timestamp 1234
        "00000001"  # one member
        "0002" + b"m1".hex() +  # member id
        "0002" + b"i1".hex() +  # group instance id
        "0001" + b"c".hex() +  # client id
        "0002" + b"/h".hex() +  # client host
        "000493e0"  # rebalance timeout 300000
        "00002710"  # session timeout 10000
        "00000001" "01"  # subscription
        "00000001" "02"  # assignment
    )  # fmt: skip
    assert encode_group_metadata_value(value) == expected
    assert decode_group_metadata_value(expected) == value


def test_empty_group_value_has_null_protocol_and_leader() -> None:
    value = GroupMetadataValue("consumer", 3, None, None, 77, ())
    data = encode_group_metadata_value(value)
    assert data[16:20] == bytes.fromhex("ffffffff")  # null protocol, null leader
    assert decode_group_metadata_value(data) == value


def test_group_metadata_v0_uses_the_session_timeout_as_rebalance_timeout() -> None:
    member = MemberMetadataValue("m", None, "c", "h", 45000, 45000, b"s", b"a")
    data = encode_group_metadata_value(
        GroupMetadataValue("consumer", 1, "range", "m", -1, (member,)), version=0
    )
    decoded = decode_group_metadata_value(data)
    assert decoded.members[0].rebalance_timeout == 45000
    assert decoded.current_state_timestamp == -1


def test_flexible_v4_values_skip_unknown_tagged_fields() -> None:
    value = OffsetCommitValue(offset=5, metadata="meta", commit_timestamp=9, leader_epoch=2)
    data = encode_offset_commit_value(value, version=4)
    assert data[-1] == 0  # empty tagged-field section
    # A future Kafka adds tag 7 with two bytes: the record must still load.
    tagged = data[:-1] + bytes([1, 7, 2, 0xAB, 0xCD])
    assert decode_offset_commit_value(tagged) == value


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00",
        bytes.fromhex("000300000000"),  # offset cut short
        bytes.fromhex("0009" + "00" * 30),  # no such version
        bytes.fromhex("0003" + "00" * 8 + "00000000000561"),  # metadata says 5 bytes, 1 follows
    ],
)
def test_truncated_or_unknown_values_raise_record_format_error(data: bytes) -> None:
    with pytest.raises(RecordFormatError):
        decode_offset_commit_value(data)


def test_truncated_key_raises_record_format_error() -> None:
    with pytest.raises(RecordFormatError):
        decode_key(bytes.fromhex("000100056162"))


text = st.text(max_size=20)
nullable_text = st.none() | text
i32 = st.integers(-(2**31), 2**31 - 1)
i64 = st.integers(-(2**63), 2**63 - 1)


@given(offset=i64, epoch=i32, metadata=text, ts=i64, version=st.integers(0, 4))
def test_offset_commit_value_round_trips_in_every_version(offset, epoch, metadata, ts, version) -> None:
    value = OffsetCommitValue(offset, metadata, ts, epoch if version >= 3 else -1, ts if version == 1 else -1)
    assert decode_offset_commit_value(encode_offset_commit_value(value, version)) == value


member_values = st.builds(
    MemberMetadataValue,
    member_id=text, group_instance_id=nullable_text, client_id=text, client_host=text,
    rebalance_timeout=st.integers(0, 2**31 - 1), session_timeout=st.integers(0, 2**31 - 1),
    subscription=st.binary(max_size=40), assignment=st.binary(max_size=40),
)  # fmt: skip


@given(
    protocol_type=text, generation=i32, protocol=nullable_text, leader=nullable_text, ts=i64,
    members=st.lists(member_values, max_size=4), version=st.integers(0, 4),
)  # fmt: skip
def test_group_metadata_value_round_trips_in_every_version(
    protocol_type, generation, protocol, leader, ts, members, version
) -> None:
    def as_written(m: MemberMetadataValue) -> MemberMetadataValue:
        # Fields a version does not have come back as their defaults.
        return MemberMetadataValue(
            m.member_id, m.group_instance_id if version >= 3 else None, m.client_id, m.client_host,
            m.rebalance_timeout if version >= 1 else m.session_timeout, m.session_timeout, m.subscription, m.assignment,
        )  # fmt: skip

    value = GroupMetadataValue(protocol_type, generation, protocol, leader, ts, tuple(members))
    expected = GroupMetadataValue(
        protocol_type,
        generation,
        protocol,
        leader,
        ts if version >= 2 else -1,
        tuple(map(as_written, members)),
    )
    assert decode_group_metadata_value(encode_group_metadata_value(value, version)) == expected


@given(st.binary(max_size=64))
def test_decoders_raise_only_record_format_error(data: bytes) -> None:
    for decode in (decode_key, decode_offset_commit_value, decode_group_metadata_value):
        try:
            decode(data)
        except RecordFormatError:
            pass


# Computed with OpenJDK 17: String.hashCode() and Utils.abs(hash) % 50.
JAVA_HASHES = [
    ("", 0, 0),
    ("test-group", 627841412, 12),
    ("my-group", -1906497762, 12),
    ("console-consumer-12345", 158455506, 6),
    ("grüße-𝄞", 347391072, 22),  # a non-BMP character counts as two UTF-16 units
    ("polygenelubricants", -(2**31), 0),  # Integer.MIN_VALUE: Utils.abs maps it to 0
]


@pytest.mark.parametrize(("group", "java_hash", "partition"), JAVA_HASHES)
def test_partition_for_matches_kafka(group: str, java_hash: int, partition: int) -> None:
    assert java_string_hash(group) == java_hash
    assert partition_for(group, 50) == partition


def test_subscribed_topics_reads_any_subscription_version_prefix() -> None:
    v0 = bytes.fromhex("00000000000200016100026263ffffffff")
    assert subscribed_topics(v0) == frozenset({"a", "bc"})
    # Version 3 adds fields after the topics; the prefix still parses.
    v3 = bytes.fromhex("000300000001000161") + b"\x00" * 20
    assert subscribed_topics(v3) == frozenset({"a"})
    with pytest.raises(RecordFormatError):
        subscribed_topics(b"\x00")
