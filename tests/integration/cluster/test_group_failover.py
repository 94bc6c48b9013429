"""Group coordinators follow the leadership of their `__consumer_offsets` partition across a real cluster: the
offsets topic is created through the controller with `offsets.topic.replication.factor`, FindCoordinator names
the partition's current leader, and a group keeps its committed offsets when its coordinator's broker is killed
or shut down (the new leader loads the partition, answering COORDINATOR_LOAD_IN_PROGRESS meanwhile), offsets
pending in a transaction included."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from kio.schema.errors import ErrorCode as E

from broker_runtime.group.records import OFFSETS_TOPIC, partition_for
from tests.integration.group_txn_raw import commit, fetch, txn_commit, wait_for_coordinator, write_marker

pytestmark = pytest.mark.odradek_only

OFFSETS_PARTITIONS = 3
RECORDS = 60


def make_cluster(cluster_factory, **overrides: str):
    return cluster_factory(
        offsets_topic_replication_factor=3,
        offsets_topic_num_partitions=OFFSETS_PARTITIONS,
        min_insync_replicas=2,
        **overrides,
    )


def coordinator_of(c, group: str) -> int:
    admin = AdminClient({"bootstrap.servers": c.bootstrap})
    return admin.describe_consumer_groups([group])[group].result(30).coordinator.id


def consumer(c, group: str) -> Consumer:
    return Consumer({
        "bootstrap.servers": c.bootstrap, "group.id": group, "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
    })  # fmt: skip


def consume(cons: Consumer, count: int, deadline_polls: int = 600) -> list[tuple[int, int]]:
    seen: list[tuple[int, int]] = []
    for _ in range(deadline_polls):
        if len(seen) >= count:
            break
        msg = cons.poll(0.1)
        if msg is not None and msg.error() is None:
            seen.append((msg.partition(), msg.offset()))
    return seen


def committed_after(c, group: str, topic: str) -> dict[int, int]:
    cons = consumer(c, group)
    try:
        return {
            tp.partition: tp.offset
            for tp in cons.committed([TopicPartition(topic, p) for p in range(3)], timeout=60)
        }
    finally:
        cons.close()


@pytest.mark.parametrize("how", ["kill", "sigterm"])
def test_a_group_keeps_its_offsets_when_its_coordinators_broker_goes(
    cluster_factory, topic_name: str, how: str
) -> None:
    c = make_cluster(cluster_factory)
    c.create_topic(topic_name, 3, 3)
    c.wait_for_leaders(topic_name, 3)
    producer = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(RECORDS):
        producer.produce(topic_name, str(i).encode(), partition=i % 3)
    assert producer.flush(60) == 0
    group = f"{topic_name}-g"
    first = consumer(c, group)
    first.subscribe([topic_name])
    assert len(consume(first, RECORDS)) == RECORDS
    first.commit(offsets=[TopicPartition(topic_name, p, 5 + p) for p in range(3)], asynchronous=False)
    first.close()
    before = {p: 5 + p for p in range(3)}
    assert committed_after(c, group, topic_name) == before

    # the offsets topic came from the controller with its replication factor, and FindCoordinator names the
    # leader of the group's partition
    offsets_partition = partition_for(group, OFFSETS_PARTITIONS)
    state = c.partition_state(OFFSETS_TOPIC, offsets_partition)
    assert len(c.znode(f"/brokers/topics/{OFFSETS_TOPIC}")["partitions"][str(offsets_partition)]) == 3
    coordinator = coordinator_of(c, group)
    assert coordinator == state["leader"]

    if how == "kill":
        c.brokers[coordinator].kill()
    else:
        assert c.brokers[coordinator].stop() == 0
    survivors = set(c.brokers) - {coordinator}
    c.wait_for(lambda: c.partition_state(OFFSETS_TOPIC, offsets_partition)["leader"] in survivors,
               "a new leader of the group's offsets partition")  # fmt: skip
    new_leader = c.partition_state(OFFSETS_TOPIC, offsets_partition)["leader"]
    c.wait_for(lambda: coordinator_of(c, group) == new_leader, "FindCoordinator naming the new leader")

    assert committed_after(c, group, topic_name) == before  # loaded by the new coordinator, nothing lost
    second = consumer(c, group)
    second.subscribe([topic_name])
    rest = consume(second, RECORDS - sum(before.values()))
    assert sorted(rest) == sorted(
        (p, o) for p in range(3) for o in range(before[p], RECORDS // 3)
    )  # resumed exactly where the group had committed
    second.commit(asynchronous=False)
    second.close()
    assert committed_after(c, group, topic_name) == dict.fromkeys(range(3), RECORDS // 3)
    c.restart(coordinator)


def test_offsets_pending_in_a_transaction_move_with_the_coordinator_and_its_marker_commits_them(
    cluster_factory, topic_name: str, raw
) -> None:
    """TxnOffsetCommit to the coordinator, kill -9 of its broker: the new leader of the group's
    `__consumer_offsets` partition loads the replicated transactional batch (still pending), and the transaction
    coordinator's WriteTxnMarkers to it (contract C1) makes the offset visible. The test plays the transaction
    coordinator, so partition leaders do not verify transactions (transaction.partition.verification.enable=false)."""
    c = make_cluster(cluster_factory, transaction_partition_verification_enable="false")
    c.create_topic(topic_name, 1, 3)
    c.wait_for_leaders(topic_name, 1)
    group = f"{topic_name}-txn"
    offsets_partition = partition_for(group, OFFSETS_PARTITIONS)
    producer_id = 7_000 + offsets_partition
    coordinator = coordinator_of(c, group)  # (creates __consumer_offsets)
    with raw.RawClient.to(c.brokers[coordinator], timeout=30) as client:
        wait_for_coordinator(client, group)
        assert commit(client, group, topic_name, 5) == E.none
        assert txn_commit(client, 4, group, producer_id, topic_name, 50) == E.none
        assert fetch(client, group, topic_name, require_stable=True) == (E.unstable_offset_commit, -1)

    c.brokers[coordinator].kill()
    survivors = set(c.brokers) - {coordinator}
    c.wait_for(lambda: c.partition_state(OFFSETS_TOPIC, offsets_partition)["leader"] in survivors,
               "a new leader of the group's offsets partition")  # fmt: skip
    new_leader = c.partition_state(OFFSETS_TOPIC, offsets_partition)["leader"]
    with raw.RawClient.to(c.brokers[new_leader], timeout=30) as client:
        wait_for_coordinator(client, group)
        assert fetch(client, group, topic_name, require_stable=True) == (E.unstable_offset_commit, -1)
        assert fetch(client, group, topic_name, require_stable=False) == (E.none, 5)
        assert write_marker(client, producer_id, True, offsets_partition) == E.none
        assert fetch(client, group, topic_name, require_stable=True) == (E.none, 50)
    assert committed_after(c, group, topic_name)[0] == 50
    c.restart(coordinator)
