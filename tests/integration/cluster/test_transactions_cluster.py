"""Transactions across a three-broker cluster: markers reach partitions led by other brokers (WriteTxnMarkers),
an open transaction survives the death of its coordinator, and a transaction decided just before its coordinator
died is completed by the next coordinator, whose markers follow the partition's leadership to a new leader."""

from __future__ import annotations

import os
import signal
import uuid

import pytest
from confluent_kafka import Producer
from kio.schema.errors import ErrorCode as E
from txn_harness import (
    RawTransactionalProducer,
    check_exactly_once_across_a_killed_processor,
    find_transaction_coordinator,
    partition_offsets,
    read_all,
    run_transactions,
    values,
    wait_for_state,
)

from broker_runtime.txn.records import TRANSACTION_STATE_TOPIC, transaction_partition

pytestmark = pytest.mark.odradek_only

TXN_PARTITIONS = 3


CLUSTER_OVERRIDES = {
    "transaction_state_log_num_partitions": TXN_PARTITIONS,
    "transaction_state_log_replication_factor": 3,
    "transaction_state_log_min_isr": 2,
    "offsets_topic_num_partitions": 3,
    "offsets_topic_replication_factor": 3,
    "min_insync_replicas": 2,
    # A paused follower leaves the ISR quickly, so appends that wait for the ISR go on without it.
    "replica_lag_time_max_ms": 3000,
}


def make_cluster(cluster_factory):
    return cluster_factory(**CLUSTER_OVERRIDES)


def transactional_producer(c, tid: str, **config) -> Producer:
    producer = Producer({"bootstrap.servers": c.bootstrap, "transactional.id": tid, **config})
    producer.init_transactions(60)
    return producer


def coordinator_of(c, tid: str) -> int:
    """The broker leading the transactional id's `__transaction_state` partition."""
    return c.partition_state(TRANSACTION_STATE_TOPIC, transaction_partition(tid, TXN_PARTITIONS))["leader"]


def live(c) -> list:
    return [b for b in c.brokers.values() if b.alive]


def test_markers_reach_the_leaders_of_every_partition(cluster_factory, raw) -> None:
    c = make_cluster(cluster_factory)
    topic = f"txn-{uuid.uuid4().hex[:8]}"
    c.create_topic(topic, 6, 3)
    c.wait_for_leaders(topic, 6)
    leaders = {c.partition_state(topic, p)["leader"] for p in range(6)}
    assert len(leaders) > 1, "the partitions' leaders are spread over the brokers"
    tid = f"spread-{uuid.uuid4().hex[:8]}"
    producer = transactional_producer(c, tid)
    expected = []
    for round_, commit in enumerate([True, False, True]):
        producer.begin_transaction()
        batch = [f"r{round_}-{p}".encode() for p in range(6)]
        for p, value in enumerate(batch):
            producer.produce(topic, value=value, partition=p)
        if commit:
            producer.commit_transaction(60)
            expected += batch
        else:
            producer.flush(60)
            producer.abort_transaction(60)
    assert values(read_all(c.bootstrap, topic)) == sorted(expected)
    assert len(read_all(c.bootstrap, topic, "read_uncommitted")) == 18
    state = wait_for_state(live(c), raw, tid, "CompleteCommit")
    assert state.topics == ()  # every marker written


@pytest.mark.parametrize("client", ["confluent", "kafka-python", "aiokafka", "kafkajs"])
def test_every_client_commits_and_aborts_across_the_cluster(client, cluster, clients) -> None:
    c = cluster  # the module's cluster, every broker kept running
    topic = f"txn-{client}-{uuid.uuid4().hex[:8]}"
    c.create_topic(topic, 3, 3)
    c.wait_for_leaders(topic, 3)
    committed = [f"c{i}".encode() for i in range(6)]
    aborted = [f"a{i}".encode() for i in range(6)]
    run_transactions(client, c.bootstrap, topic, f"{client}-{uuid.uuid4().hex[:8]}",
                     [(committed, True), (aborted, False)], clients)  # fmt: skip
    assert values(read_all(c.bootstrap, topic)) == sorted(committed)
    assert values(read_all(c.bootstrap, topic, "read_uncommitted")) == sorted(committed + aborted)


def test_a_leader_verifies_with_a_coordinator_on_another_broker(cluster, raw) -> None:
    """KIP-890 across brokers: the leader of a partition asks the transactional id's coordinator, on another
    broker, with an AddPartitionsToTxn verifyOnly request; a partition never added is refused and nothing is
    appended, an added one is appended."""
    c = cluster
    topic = f"txn-verify-{uuid.uuid4().hex[:8]}"
    c.create_topic(topic, 3, 3)
    c.wait_for_leaders(topic, 3)
    leaders = {p: c.partition_state(topic, p)["leader"] for p in range(3)}
    any_broker = next(iter(c.brokers.values()))
    with raw.RawClient.to(any_broker, timeout=30) as client:
        # A transactional id whose coordinator leads none of the topic's partitions, or at least not partition p.
        for n in range(200):
            tid = f"remote-{n}-{uuid.uuid4().hex[:6]}"
            coordinator = int(find_transaction_coordinator(client, tid).node_id)
            remote = [p for p, leader in leaders.items() if leader != coordinator]
            if remote:
                break
        assert remote, "some partition is led by a broker other than the coordinator"
    partition = remote[0]
    with (
        raw.RawClient.to(c.brokers[coordinator], timeout=30) as at_coordinator,
        raw.RawClient.to(c.brokers[leaders[partition]], timeout=30) as at_leader,
    ):
        producer = RawTransactionalProducer(at_coordinator, tid)
        assert producer.produce(topic, partition, [b"stray"], via=at_leader)[0] == E.invalid_txn_state
        assert partition_offsets(at_leader, topic, partition) == (0, 0)
        producer.add(topic, partition)
        assert producer.produce(topic, partition, [b"added"], via=at_leader) == (E.none, 0)
        assert producer.end(committed=True) == E.none
    assert values(read_all(c.bootstrap, topic)) == [b"added"]


@pytest.mark.parametrize("client", ["confluent", "kafka-python"])
def test_exactly_once_across_a_killed_processor_on_the_cluster(client, cluster, clients, tmp_path) -> None:
    # The group's offsets, the transaction's state and the data live on different brokers: the markers for
    # __consumer_offsets go through WriteTxnMarkers to the group coordinator's broker.
    topics = []
    for _ in range(2):
        topics.append(f"eos-{uuid.uuid4().hex[:8]}")
        cluster.create_topic(topics[-1], 3, 3)
        cluster.wait_for_leaders(topics[-1], 3)
    check_exactly_once_across_a_killed_processor(client, cluster.bootstrap, *topics, clients, tmp_path)


def test_an_open_transaction_survives_its_coordinators_death(cluster_factory, raw) -> None:
    c = make_cluster(cluster_factory)
    topic = f"txn-{uuid.uuid4().hex[:8]}"
    c.create_topic(topic, 3, 3)
    c.wait_for_leaders(topic, 3)
    tid = f"open-{uuid.uuid4().hex[:8]}"
    producer = transactional_producer(c, tid)
    producer.begin_transaction()
    batch = [f"v{p}".encode() for p in range(3)]
    for p, value in enumerate(batch):
        producer.produce(topic, value=value, partition=p)
    assert producer.flush(60) == 0

    coordinator = coordinator_of(c, tid)
    c.brokers[coordinator].kill()
    txn_partition = transaction_partition(tid, TXN_PARTITIONS)
    c.wait_for(lambda: c.partition_state(TRANSACTION_STATE_TOPIC, txn_partition)["leader"] not in (coordinator, -1),
               "a new leader of the transaction's __transaction_state partition")  # fmt: skip
    # The client finds the new coordinator, which loaded the Ongoing transaction with its partitions.
    producer.commit_transaction(60)
    assert values(read_all(c.bootstrap, topic)) == sorted(batch)
    assert wait_for_state(live(c), raw, tid, "CompleteCommit").producer_epoch == 0
    c.restart(coordinator)


def test_a_decided_transaction_is_completed_by_the_next_coordinator(cluster_factory, raw) -> None:
    c = make_cluster(cluster_factory)
    topic = f"txn-{uuid.uuid4().hex[:8]}"
    c.create_topic(topic, 1, 3)
    c.wait_for_leaders(topic, 1)
    data_leader = c.partition_state(topic, 0)["leader"]
    # A transactional id whose coordinator is not the data partition's leader (the first InitProducerId
    # creates __transaction_state).
    transactional_producer(c, f"probe-{uuid.uuid4().hex[:6]}")
    c.wait_for_leaders(TRANSACTION_STATE_TOPIC, TXN_PARTITIONS)
    tid = next(t for t in (f"decided-{i}-{uuid.uuid4().hex[:6]}" for i in range(1000))
               if coordinator_of(c, t) != data_leader)  # fmt: skip
    producer = transactional_producer(c, tid)
    coordinator = coordinator_of(c, tid)
    producer.begin_transaction()
    batch = [f"d{i}".encode() for i in range(5)]
    for value in batch:
        producer.produce(topic, value=value, partition=0)
    assert producer.flush(60) == 0

    # The data partition's leader stops answering: the marker for it cannot be written.
    os.kill(c.brokers[data_leader].pid, signal.SIGSTOP)
    try:
        producer.commit_transaction(60)  # answered once PrepareCommit is in __transaction_state
        # The coordinator dies with the decision made and the marker unwritten.
        c.brokers[coordinator].kill()
        # The paused leader's session expires and the third broker leads the data partition (and the
        # transaction's state partition).
        c.wait_for(lambda: c.partition_state(topic, 0)["leader"] not in (data_leader, coordinator, -1),
                   "the third broker leading the data partition", timeout=90)  # fmt: skip
    finally:
        os.kill(c.brokers[data_leader].pid, signal.SIGCONT)
    # The new coordinator found PrepareCommit at load and wrote the marker to the partition's new leader (once
    # the resumed broker is back in the ISR, as min.insync.replicas asks).
    state = wait_for_state(live(c), raw, tid, "CompleteCommit")
    assert state.producer_epoch == 0
    assert values(read_all(c.bootstrap, topic)) == sorted(batch)
    c.restart(coordinator)
