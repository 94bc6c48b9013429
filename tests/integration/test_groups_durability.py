"""Committed offsets and group state live in __consumer_offsets: they survive a broker restart and a kill -9,
and members of a running group ride through the broker's crash without losing a commit."""

from __future__ import annotations

import uuid

import pytest
from group_harness import (
    GROUP_BROKER_OVERRIDES,
    OFFSETS_PARTITIONS,
    assert_commits_never_go_backwards,
    assert_everything_consumed,
    assert_no_partition_owned_twice_per_generation,
    committed_offsets,
    end_offsets,
    group_history,
    members_fixture,  # noqa: F401  (fixture "members")
    produce_spread,
    settled,
    stop_all,
    wait_until,
)

PARTITIONS = 4
TIMEOUT = 30

pytestmark = pytest.mark.odradek_only


def _alter(bootstrap: str, group: str, topic: str, offsets: dict[int, tuple[int, str]]) -> None:
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KTP
    from kafka.structs import OffsetAndMetadata

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.alter_group_offsets(
            group, {KTP(topic, p): OffsetAndMetadata(o, m, -1) for p, (o, m) in offsets.items()}
        )
    finally:
        admin.close()


def _fetch(bootstrap: str, group: str) -> dict[tuple[str, int], tuple[int, str]]:
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        got = admin.list_group_offsets({group: None})[group]
        return {(tp.topic, tp.partition): (o.offset, o.metadata) for tp, o in got.items()}
    finally:
        admin.close()


@pytest.mark.parametrize("how", ["sigterm", "kill -9"])
def test_committed_offsets_survive_a_broker_restart(how, broker_factory, new_topic, members) -> None:
    broker = broker_factory(overrides=GROUP_BROKER_OVERRIDES)
    bootstrap = broker.bootstrap
    topic = new_topic(PARTITIONS, broker=broker)
    produce_spread(bootstrap, topic, PARTITIONS, 10, "old")
    group, manual = f"g-{uuid.uuid4().hex[:8]}", f"manual-{uuid.uuid4().hex[:8]}"
    member = members("confluent", bootstrap, group, topic)
    wait_until(lambda: committed_offsets(bootstrap, group, topic, PARTITIONS) == dict.fromkeys(range(PARTITIONS), 10),
               what="the member's commits")  # fmt: skip
    member.stop()
    _alter(bootstrap, manual, topic, {0: (3, "meta-0"), 2: (7, "meta-2")})
    before = (_fetch(bootstrap, group), _fetch(bootstrap, manual))
    generations_before = group_history(bootstrap, group, topic, OFFSETS_PARTITIONS).generations

    broker.restart(kill=how == "kill -9")

    assert (_fetch(bootstrap, group), _fetch(bootstrap, manual)) == before
    assert before[1] == {(topic, 0): (3, "meta-0"), (topic, 2): (7, "meta-2")}
    assert group_history(bootstrap, group, topic, OFFSETS_PARTITIONS).generations == generations_before
    # A new member of the group starts exactly where the old one committed.
    produce_spread(bootstrap, topic, PARTITIONS, 5, "new")
    successor = members("aiokafka", bootstrap, group, topic)
    successor.wait_for(lambda m: len(m.consumed()) >= PARTITIONS * 5, what="the new records")
    assert min(o for _, o in successor.consumed()) == 10
    successor.stop()


def test_a_running_group_rides_through_a_broker_crash_without_losing_commits(
    broker_factory, new_topic, members
):
    broker = broker_factory(overrides=GROUP_BROKER_OVERRIDES)
    bootstrap = broker.bootstrap
    topic = new_topic(PARTITIONS, broker=broker)
    group = f"g-{uuid.uuid4().hex[:8]}"
    produce_spread(bootstrap, topic, PARTITIONS, 30, "before")
    options = {"pace_ms": 100, "session_timeout_ms": 10000}
    a = members("confluent", bootstrap, group, topic, name="a", **options)
    b = members("aiokafka", bootstrap, group, topic, name="b", **options)
    wait_until(lambda: settled([a, b], PARTITIONS), what="a settled group")
    produce_spread(bootstrap, topic, PARTITIONS, 60, "during")  # work for both, whoever joined first
    for m in (a, b):
        m.wait_for(lambda m: any(e["event"] == "committed" for e in m.events), what="commits")

    broker.restart(kill=True)  # mid-stream: members have uncommitted work in flight

    produce_spread(bootstrap, topic, PARTITIONS, 20, "after")
    ends = end_offsets(bootstrap, topic, PARTITIONS)
    wait_until(lambda: committed_offsets(bootstrap, group, topic, PARTITIONS) == ends, timeout=90,
               what="the group catching up after the crash")  # fmt: skip
    stop_all([a, b])
    assert_everything_consumed([a, b], ends)
    history = group_history(bootstrap, group, topic, OFFSETS_PARTITIONS)
    assert_no_partition_owned_twice_per_generation(history)
    assert_commits_never_go_backwards(history)
