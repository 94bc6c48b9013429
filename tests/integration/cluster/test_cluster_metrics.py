"""Broker metrics that only a cluster moves: a leader counts the ISR changes the controller accepted
(kafka_server_replicamanager_isrshrinks_total / isrexpands_total), scraped from real broker processes while a
follower is paused with SIGSTOP and resumed; and a leader times the transaction verification it asks of a
coordinator on another broker (kafka_server_addpartitionstotxnmanager_verificationtimems)."""

from __future__ import annotations

import os
import re
import signal

import pytest
from confluent_kafka import Producer

from broker_runtime.txn.records import TRANSACTION_STATE_TOPIC, transaction_partition
from tests.integration.test_broker_metrics import scrape

pytestmark = pytest.mark.odradek_only


def metrics_port(broker) -> int:
    """The port a broker picked for `odradek.metrics.listener=http://127.0.0.1:0`, from its start-up line."""
    found = re.search(r"serves metrics at http://[^:]+:(\d+)/metrics", broker.log_text())
    assert found, "the broker did not log its metrics address"
    return int(found.group(1))


def isr_changes(port: int) -> tuple[float, float, float]:
    samples = scrape(port)
    return tuple(
        samples[f"kafka_server_replicamanager_{name}_total", ()]
        for name in ("isrshrinks", "isrexpands", "failedisrupdates")
    )


def test_the_leader_counts_isr_shrinks_and_expands(cluster_factory, topic_name: str) -> None:
    # A short lag time so that the paused follower drops out quickly; its ZooKeeper session outlives the pause.
    c = cluster_factory(
        replica_lag_time_max_ms="1500", replica_fetch_wait_max_ms="200",
        odradek_metrics_listener="http://127.0.0.1:0", transaction_state_log_num_partitions="3",
    )  # fmt: skip
    c.create_topic(topic_name, 1, 3, {"min.insync.replicas": "2"})
    leader, replicas, isr = c.wait_for_leaders(topic_name, 1)[0]
    assert sorted(isr) == sorted(replicas)
    port = metrics_port(c.brokers[leader])
    shrinks, expands, _ = isr_changes(port)
    assert (shrinks, expands) == (0, 0)  # a new topic starts with its whole replica set in sync

    paused = next(r for r in replicas if r != c.controller_id() and r != leader)
    os.kill(c.brokers[paused].pid, signal.SIGSTOP)
    try:
        producer = Producer({"bootstrap.servers": c.brokers[leader].bootstrap, "acks": "all"})
        producer.produce(topic_name, b"while paused", partition=0)
        assert producer.flush(30) == 0
        c.wait_for(lambda: paused not in c.partition_state(topic_name, 0)["isr"], "the ISR shrunk")
        shrunk = c.wait_for(lambda: (n := isr_changes(port)) and n[0] >= 1 and n, "the shrink counted")
        assert shrunk[1] == 0  # nothing rejoined while the follower is paused
    finally:
        os.kill(c.brokers[paused].pid, signal.SIGCONT)

    c.wait_for(lambda: paused in c.partition_state(topic_name, 0)["isr"], "the follower back in the ISR")
    grown = c.wait_for(lambda: (n := isr_changes(port)) and n[1] >= 1 and n, "the expansion counted")
    assert grown[0] >= shrunk[0]
    # Followers count nothing: only a partition's leader proposes ISR changes.
    assert isr_changes(metrics_port(c.brokers[paused]))[:2] == (0, 0)

    # Transaction verification over the network: the partition's leader asks a coordinator on another broker.
    probe = Producer(
        {"bootstrap.servers": c.brokers[leader].bootstrap, "transactional.id": f"probe-{topic_name}"}
    )
    probe.init_transactions(30)  # creates __transaction_state
    coordinators = c.wait_for_leaders(TRANSACTION_STATE_TOPIC, 3)
    transactional_id = next(
        tid for n in range(1000)
        if coordinators[transaction_partition(tid := f"tx-{n}-{topic_name}", 3)][0] != leader
    )  # fmt: skip
    verification = "kafka_server_addpartitionstotxnmanager_verificationtimems_count", ()
    assert scrape(port)[verification] == 0
    producer = Producer(
        {"bootstrap.servers": c.brokers[leader].bootstrap, "transactional.id": transactional_id}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic_name, b"in a transaction", partition=0)
    assert producer.flush(30) == 0
    producer.commit_transaction(30)
    samples = scrape(port)
    assert samples[verification] == 1
    assert samples["kafka_server_addpartitionstotxnmanager_verificationfailurerate_total", ()] == 0
    assert samples["kafka_server_addpartitionstotxnmanager_verificationtimems_max", ()] >= 0
