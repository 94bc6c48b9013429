"""Bad and out-of-order group requests get Kafka's error codes, and the group carries on for its members.

Two real members (confluent-kafka processes) form a Stable group; a raw connection then sends requests with a
wrong generation, an unknown member, oversized commit metadata, an invalid session timeout, a foreign protocol
type, and so on. Each gets the error Kafka gives; afterwards the members still consume everything, in the same
generation: no garbage request caused a rebalance or lost a commit.
"""

from __future__ import annotations

import datetime
import uuid

import pytest
from group_harness import (
    OFFSETS_PARTITIONS,
    assert_commits_never_go_backwards,
    assert_everything_consumed,
    assert_no_partition_owned_twice_per_generation,
    committed_offsets,
    end_offsets,
    group_broker_fixture,  # noqa: F401  (fixture "group_broker")
    group_broker_process_fixture,  # noqa: F401  (fixture)
    group_history,
    members_fixture,  # noqa: F401  (fixture "members")
    produce_spread,
    settled,
    stop_all,
    wait_until,
)
from kio.schema.errors import ErrorCode as E
from kio.static.primitive import i8, i32, i32Timedelta, i64

PARTITIONS = 4


def _ms(ms: int) -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=ms))


def heartbeat(group: str, generation: int, member_id: str):
    from kio.schema.heartbeat.v4.request import HeartbeatRequest

    return HeartbeatRequest(
        group_id=group, generation_id=i32(generation), member_id=member_id, group_instance_id=None
    )


def sync_group(group: str, generation: int, member_id: str, protocol_name: str = "range"):
    from kio.schema.sync_group.v5.request import SyncGroupRequest

    return SyncGroupRequest(
        group_id=group, generation_id=i32(generation), member_id=member_id, group_instance_id=None,
        protocol_type="consumer", protocol_name=protocol_name, assignments=(),
    )  # fmt: skip


def join_group(group: str, member_id: str = "", session_ms: int = 10000, protocol_type: str = "consumer"):
    from kio.schema.join_group.v7.request import JoinGroupRequest, JoinGroupRequestProtocol

    return JoinGroupRequest(
        group_id=group, session_timeout=_ms(session_ms), rebalance_timeout=_ms(30000), member_id=member_id,
        group_instance_id=None, protocol_type=protocol_type,
        protocols=(JoinGroupRequestProtocol(name="range", metadata=b"\x00\x00\x00\x00\x00\x00"),),
    )  # fmt: skip


def offset_commit(group: str, generation: int, member_id: str, topic: str, offset: int, metadata: str):
    from kio.schema.offset_commit.v8 import request as oc

    return oc.OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=i32(generation), member_id=member_id, group_instance_id=None,
        topics=(oc.OffsetCommitRequestTopic(name=topic, partitions=(oc.OffsetCommitRequestPartition(
            partition_index=i32(0), committed_offset=i64(offset), committed_leader_epoch=i32(-1),
            committed_metadata=metadata),)),),
    )  # fmt: skip


def leave_group(group: str, member_id: str):
    from kio.schema.leave_group.v4.request import LeaveGroupRequest, MemberIdentity

    return LeaveGroupRequest(
        group_id=group, members=(MemberIdentity(member_id=member_id, group_instance_id=None),)
    )


def find_coordinator(key: str, key_type: int):
    from kio.schema.find_coordinator.v3.request import FindCoordinatorRequest

    return FindCoordinatorRequest(key=key, key_type=i8(key_type))


@pytest.mark.odradek_only  # reads the generation from __consumer_offsets
def test_bad_group_requests_get_kafkas_errors_and_the_group_carries_on(
    group_broker, new_topic, members, raw
) -> None:
    bootstrap = group_broker.bootstrap
    topic = new_topic(PARTITIONS, broker=group_broker)
    group = f"g-{uuid.uuid4().hex[:10]}"
    produce_spread(bootstrap, topic, PARTITIONS, 20, "before")
    a = members("confluent", bootstrap, group, topic, name="a")
    b = members("confluent", bootstrap, group, topic, name="b")
    wait_until(lambda: settled([a, b], PARTITIONS), what="a settled group")
    wait_until(lambda: committed_offsets(bootstrap, group, topic, PARTITIONS) == dict.fromkeys(range(PARTITIONS), 20),
               what="the first commits")  # fmt: skip
    generation = group_history(bootstrap, group, topic, OFFSETS_PARTITIONS).generations[-1].generation
    (member_a,) = a.member_ids()
    assignments_before = (a.assignments_count(), b.assignments_count())

    with raw.RawClient.to(group_broker) as c:
        assert c.call(heartbeat(group, generation + 7, member_a)).error_code == E.illegal_generation
        assert c.call(heartbeat(group, generation, "no-such-member")).error_code == E.unknown_member_id
        assert c.call(heartbeat("no-such-group", generation, member_a)).error_code == E.unknown_member_id
        assert c.call(sync_group(group, generation, "no-such-member")).error_code == E.unknown_member_id
        assert c.call(sync_group(group, generation - 1, member_a)).error_code == E.illegal_generation
        assert (
            c.call(sync_group(group, generation, member_a, "roundrobin")).error_code
            == E.inconsistent_group_protocol
        )
        # A well-formed SyncGroup from a member of the Stable generation just returns its assignment.
        assert c.call(sync_group(group, generation, member_a)).error_code == E.none

        too_big = offset_commit(group, generation, member_a, topic, 0, "x" * 4097)
        (t,) = c.call(too_big).topics
        assert t.partitions[0].error_code == E.offset_metadata_too_large
        (t,) = c.call(offset_commit(group, generation - 1, member_a, topic, 0, "")).topics
        assert t.partitions[0].error_code == E.illegal_generation
        (t,) = c.call(offset_commit(group, -1, "", topic, 0, "")).topics
        assert t.partitions[0].error_code == E.unknown_member_id  # only members commit for a live group
        (t,) = c.call(offset_commit(group, generation, member_a, "no-such-topic", 0, "")).topics
        assert t.partitions[0].error_code == E.unknown_topic_or_partition

        assert c.call(join_group(group, session_ms=1)).error_code == E.invalid_session_timeout
        assert c.call(join_group(group, protocol_type="connect")).error_code == E.inconsistent_group_protocol
        assert c.call(join_group(group, member_id="made-up-id")).error_code == E.unknown_member_id
        assert c.call(join_group("")).error_code == E.invalid_group_id

        left = c.call(leave_group(group, "no-such-member"))
        assert left.error_code == E.none and left.members[0].error_code == E.unknown_member_id

        assert c.call(find_coordinator(group, 7)).error_code == E.invalid_request
        found = c.call(find_coordinator(group, 0))
        assert (found.error_code, found.node_id, found.port) == (E.none, 0, group_broker.port)

    # Nothing of that disturbed the group: same generation, same owners, every record consumed and committed.
    produce_spread(bootstrap, topic, PARTITIONS, 20, "after")
    ends = end_offsets(bootstrap, topic, PARTITIONS)
    wait_until(
        lambda: committed_offsets(bootstrap, group, topic, PARTITIONS) == ends, what="the later commits"
    )
    history = group_history(bootstrap, group, topic, OFFSETS_PARTITIONS)
    assert history.generations[-1].generation == generation
    assert (a.assignments_count(), b.assignments_count()) == assignments_before
    stop_all([a, b])
    assert_everything_consumed([a, b], ends)
    history = group_history(bootstrap, group, topic, OFFSETS_PARTITIONS)
    assert_no_partition_owned_twice_per_generation(history)
    assert_commits_never_go_backwards(history)
