"""Group administration through real admin clients: DescribeGroups, ListGroups (state filter), DeleteGroups,
OffsetFetch (batched groups), OffsetCommit without membership, OffsetDelete, LeaveGroup by instance id."""

from __future__ import annotations

import uuid

import pytest
from group_harness import (
    committed_offsets,
    group_broker_fixture,  # noqa: F401  (fixture "group_broker")
    group_broker_process_fixture,  # noqa: F401  (fixture)
    members_fixture,  # noqa: F401  (fixture "members")
    produce_spread,
    settled,
    wait_until,
)

PARTITIONS = 4
TIMEOUT = 30


def _group() -> str:
    return f"g-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def stable_group(group_broker, new_topic, members):
    """(bootstrap, topic, group, [a, b]): two confluent members, Stable, everything committed."""
    bootstrap = group_broker.bootstrap
    topic = new_topic(PARTITIONS, broker=group_broker)
    group = _group()
    produce_spread(bootstrap, topic, PARTITIONS, 5)
    ms = [
        members("confluent", bootstrap, group, topic, name=n, instance_id=f"{group}-{n}") for n in ("a", "b")
    ]
    wait_until(lambda: settled(ms, PARTITIONS), what="a settled group")
    wait_until(lambda: committed_offsets(bootstrap, group, topic, PARTITIONS) == dict.fromkeys(range(PARTITIONS), 5),
               what="commits")  # fmt: skip
    return bootstrap, topic, group, ms


def test_confluent_admin_describes_lists_and_deletes_groups(stable_group) -> None:
    from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaError, TopicPartition
    from confluent_kafka.admin import AdminClient

    bootstrap, topic, group, (a, b) = stable_group
    admin = AdminClient({"bootstrap.servers": bootstrap})

    described = admin.describe_consumer_groups([group])[group].result(TIMEOUT)
    assert described.state == ConsumerGroupState.STABLE
    assert described.partition_assignor == "range"
    assert not described.is_simple_consumer_group
    owners = {
        m.group_instance_id: sorted(tp.partition for tp in m.assignment.topic_partitions)
        for m in described.members
    }
    assert owners == {f"{group}-a": a.assignment(), f"{group}-b": b.assignment()}
    assert {m.member_id for m in described.members} == a.member_ids() | b.member_ids()
    assert described.coordinator.id == 0

    stable = admin.list_consumer_groups(states={ConsumerGroupState.STABLE}).result(TIMEOUT)
    assert group in {g.group_id for g in stable.valid}
    empty = admin.list_consumer_groups(states={ConsumerGroupState.EMPTY}).result(TIMEOUT)
    assert group not in {g.group_id for g in empty.valid}

    with pytest.raises(Exception) as refused:
        admin.delete_consumer_groups([group])[group].result(TIMEOUT)
    assert refused.value.args[0].code() == KafkaError.NON_EMPTY_GROUP

    a.stop()
    b.stop()
    # Static members do not leave on close; remove them by instance id (LeaveGroup v3+, batched).
    from kafka import KafkaAdminClient
    from kafka.admin import MemberToRemove

    kp = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        removed = kp.remove_group_members(
            group, [MemberToRemove(group_instance_id=f"{group}-{n}") for n in "ab"]
        )
        assert all(err.errno == 0 for err in removed.values()), removed
    finally:
        kp.close()
    wait_until(
        lambda: (
            admin.describe_consumer_groups([group])[group].result(TIMEOUT).state == ConsumerGroupState.EMPTY
        ),
        what="an Empty group",
    )
    empty = admin.list_consumer_groups(states={ConsumerGroupState.EMPTY}).result(TIMEOUT)
    assert group in {g.group_id for g in empty.valid}

    wanted = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(PARTITIONS)])
    offsets = admin.list_consumer_group_offsets([wanted])[group].result(TIMEOUT)
    assert {tp.partition: tp.offset for tp in offsets.topic_partitions} == dict.fromkeys(range(PARTITIONS), 5)

    admin.delete_consumer_groups([group])[group].result(TIMEOUT)
    gone = admin.describe_consumer_groups([group])[group].result(TIMEOUT)
    assert gone.state == ConsumerGroupState.DEAD
    assert committed_offsets(bootstrap, group, topic, PARTITIONS) == dict.fromkeys(range(PARTITIONS), -1001)


def test_admin_commits_offsets_for_a_group_without_members_and_deletes_them(group_broker, new_topic) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KTP
    from kafka.structs import OffsetAndMetadata

    bootstrap = group_broker.bootstrap
    topic = new_topic(PARTITIONS, broker=group_broker)
    produce_spread(bootstrap, topic, PARTITIONS, 10)
    group = _group()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, p, 3 + p) for p in range(PARTITIONS)]
    )
    admin.alter_consumer_group_offsets([request])[group].result(TIMEOUT)  # OffsetCommit, generation -1
    assert committed_offsets(bootstrap, group, topic, PARTITIONS) == {p: 3 + p for p in range(PARTITIONS)}

    kp = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        # Metadata round-trips, and OffsetFetch v8 answers several groups in one request.
        kp.alter_group_offsets(group, {KTP(topic, 0): OffsetAndMetadata(7, "checkpoint:7", -1)})
        other = _group()
        kp.alter_group_offsets(other, {KTP(topic, 1): OffsetAndMetadata(2, "", -1)})
        both = kp.list_group_offsets({group: None, other: None})
        assert both[group][KTP(topic, 0)].offset == 7
        assert both[group][KTP(topic, 0)].metadata == "checkpoint:7"
        assert {tp.partition: o.offset for tp, o in both[other].items()} == {1: 2}

        groups = {g["group_id"] for g in kp.list_groups()}
        assert {group, other} <= groups
        deleted = kp.delete_group_offsets(group, [KTP(topic, 0), KTP(topic, 1)])  # OffsetDelete
        assert all(err.errno == 0 for err in deleted.values()), deleted
        assert kp.list_group_offsets({group: None})[group].keys() == {KTP(topic, 2), KTP(topic, 3)}
        result = kp.delete_groups([other])
        assert dict(result) == {other: "OK"}
    finally:
        kp.close()


def test_offset_delete_refuses_topics_an_active_group_consumes(stable_group) -> None:
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KTP
    from kafka.errors import GroupSubscribedToTopicError

    bootstrap, topic, group, _ = stable_group
    kp = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        result = kp.delete_group_offsets(group, [KTP(topic, 0)])
        assert result[KTP(topic, 0)] is GroupSubscribedToTopicError
    finally:
        kp.close()
    assert committed_offsets(bootstrap, group, topic, PARTITIONS)[0] == 5


def test_offsets_of_a_deleted_topic_are_forgotten(group_broker, new_topic) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    bootstrap = group_broker.bootstrap
    doomed, kept = new_topic(1, broker=group_broker), new_topic(1, broker=group_broker)
    produce_spread(bootstrap, doomed, 1, 3)
    produce_spread(bootstrap, kept, 1, 3)
    group = _group()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(doomed, 0, 2), TopicPartition(kept, 0, 1)])
    admin.alter_consumer_group_offsets([request])[group].result(TIMEOUT)
    admin.delete_topics([doomed])[doomed].result(TIMEOUT)

    def committed_topics() -> set[str]:
        result = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])[group].result(
            TIMEOUT
        )
        return {tp.topic for tp in result.topic_partitions}

    wait_until(lambda: committed_topics() == {kept}, timeout=20, what="the deleted topic's offsets to go")
