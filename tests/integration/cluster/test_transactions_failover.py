"""read_committed across a leader kill -9 in the three-broker cluster.

Two transactional confluent-kafka producers run transactions over both partitions of a topic replicated three
times (min.insync.replicas=2), committing most and aborting every third, while the leader of partition 0 is
killed with SIGKILL and later restarted. Each producer keeps its history: which records each transaction wrote
and whether it committed, aborted, or ended without a known outcome (a commit cut by the failover that the
client could not confirm). A read_committed consumer then reads both partitions to their last stable offsets,
and the records are checked one by one against that history: every committed transaction whole and exactly
once, in its producer's order per partition; nothing of an aborted one; an unknown one whole or not at all.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field

import pytest
from txn_harness import read_all

from broker_runtime.protocol.apis import ApiKey
from broker_runtime.tools.admin_client import build_request

pytestmark = pytest.mark.odradek_only

PARTITIONS = 2
RECORDS_PER_TXN = 4
TXNS_BEFORE_KILL = 6
TXNS_AFTER_KILL = 6
DEADLINE_S = 120.0
CLUSTER_OVERRIDES = {
    "offsets.topic.replication.factor": "3",
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.replication.factor": "3",
    "transaction.state.log.min.isr": "2",
    "transaction.state.log.num.partitions": "3",
    "min.insync.replicas": "2",
    "replica.lag.time.max.ms": "4000",
}


@dataclass
class Txn:
    producer: str
    number: int
    values: list[tuple[int, bytes]] = field(default_factory=list)  # (partition, value) in produce order
    outcome: str = "open"  # committed, aborted, unknown


class TransactionalWriter:
    """One transactional producer in a thread: transactions until told to stop, recreated (fencing the old
    instance by init_transactions) after a fatal error."""

    def __init__(self, bootstrap: str, topic: str, name: str) -> None:
        self.bootstrap, self.topic, self.name = bootstrap, topic, name
        self.transactional_id = f"{name}-{uuid.uuid4().hex[:8]}"
        self.history: list[Txn] = []
        self.done = threading.Event()
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def committed_count(self) -> int:
        return sum(t.outcome == "committed" for t in self.history)

    def _producer(self):
        from confluent_kafka import Producer

        producer = Producer({
            "bootstrap.servers": self.bootstrap, "transactional.id": self.transactional_id,
            "transaction.timeout.ms": 60000, "message.timeout.ms": 60000, "socket.timeout.ms": 10000,
        })  # fmt: skip
        producer.init_transactions(60)
        return producer

    def _run(self) -> None:
        from confluent_kafka import KafkaException

        try:
            producer = self._producer()
            number = 0
            while not self.stop.is_set():
                txn = Txn(self.name, number)
                self.history.append(txn)
                number += 1
                try:
                    producer.begin_transaction()
                    for i in range(RECORDS_PER_TXN):
                        partition = i % PARTITIONS
                        value = f"{self.name}-{txn.number}-{i}".encode()
                        txn.values.append((partition, value))
                        producer.produce(self.topic, value=value, partition=partition)
                    if txn.number % 3 == 2:
                        producer.abort_transaction(60)
                        txn.outcome = "aborted"
                    else:
                        self._commit(producer, txn)
                except KafkaException as exc:
                    error = exc.args[0]
                    if error.txn_requires_abort():
                        producer.abort_transaction(60)
                        txn.outcome = "aborted"
                    else:  # fatal: the outcome is the coordinator's; a new instance fences this one
                        txn.outcome = "unknown"
                        producer = self._producer()
        except BaseException as exc:  # reported by the test
            self.error = exc
        finally:
            self.done.set()

    @staticmethod
    def _commit(producer, txn: Txn) -> None:
        from confluent_kafka import KafkaException

        deadline = time.monotonic() + DEADLINE_S
        while True:
            try:
                producer.commit_transaction(60)
                txn.outcome = "committed"
                return
            except KafkaException as exc:
                if not exc.args[0].retriable() or time.monotonic() > deadline:
                    raise
                txn.outcome = "unknown"  # while retrying: the EndTxn may have been written


def read_committed(bootstrap: str, topic: str) -> dict[int, list[bytes]]:
    got: dict[int, list[bytes]] = defaultdict(list)
    for partition, _, value in read_all(bootstrap, topic, deadline_s=DEADLINE_S):
        got[partition].append(value)
    return got


def check_against_history(got: dict[int, list[bytes]], history: list[Txn]) -> None:
    owner = {value: txn for txn in history for _, value in txn.values}
    seen: set[bytes] = set()
    for partition, values in got.items():
        last_per_producer: dict[str, tuple[int, int]] = {}
        for value in values:
            txn = owner.get(value)
            assert txn is not None, f"{value!r} in partition {partition} was never produced"
            assert value not in seen, f"{value!r} read twice"
            seen.add(value)
            assert txn.outcome != "aborted", (
                f"{value!r} of aborted transaction {txn.producer}/{txn.number} read"
            )
            assert txn.outcome != "open", f"{value!r} of a transaction still open was read"
            order = (txn.number, txn.values.index((partition, value)))
            previous = last_per_producer.get(txn.producer)
            assert previous is None or order > previous, f"{value!r} out of its producer's order"
            last_per_producer[txn.producer] = order
    for txn in history:
        present = [value for _, value in txn.values if value in seen]
        if txn.outcome == "committed":
            assert len(present) == len(txn.values), f"committed {txn.producer}/{txn.number} lost {txn.values}"
        elif txn.outcome == "unknown":
            assert len(present) in (0, len(txn.values)), f"{txn.producer}/{txn.number} read in part"


def all_decided(cluster, raw, topic: str) -> bool:
    """Every partition's last stable offset equals its high watermark (ListOffsets LATEST at both isolation
    levels, asked of its leader)."""
    leaders = cluster.wait_for_leaders(topic, PARTITIONS)
    for partition, (leader, _, _) in leaders.items():
        ends = []
        with raw.RawClient.to(cluster.brokers[leader]) as client:
            for isolation in (0, 1):
                response = client.call(build_request(
                    ApiKey.LIST_OFFSETS, 7, replica_id=-1, isolation_level=isolation,
                    topics=lambda m, p=partition: (m.ListOffsetsTopic(name=topic, partitions=(
                        m.ListOffsetsPartition(partition_index=p, current_leader_epoch=-1, timestamp=-1),)),),
                ))  # fmt: skip
                ends.append(int(response.topics[0].partitions[0].offset))
        if ends[0] != ends[1] or ends[0] < 0:
            return False
    return True


def test_read_committed_never_sees_aborted_records_across_a_leader_kill_9(cluster_factory, raw) -> None:
    cluster = cluster_factory(**CLUSTER_OVERRIDES)
    topic = f"txn-failover-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, PARTITIONS, 3)
    leaders = cluster.wait_for_leaders(topic, PARTITIONS)
    bootstrap = cluster.bootstrap
    writers = [TransactionalWriter(bootstrap, topic, f"producer{i}") for i in range(2)]
    for writer in writers:
        writer.thread.start()

    def progressed(target: int) -> bool:
        for writer in writers:
            assert writer.error is None, writer.error
        return all(w.committed_count() >= target for w in writers)

    cluster.wait_for(
        lambda: progressed(TXNS_BEFORE_KILL * 2 // 3), "transactions before the kill", DEADLINE_S
    )
    victim = leaders[0][0]
    cluster.brokers[victim].kill()
    before_restart = [w.committed_count() for w in writers]
    cluster.wait_for(
        lambda: progressed(0) and all(w.committed_count() > n for w, n in zip(writers, before_restart, strict=True)),
        "transactions committed without the killed leader", DEADLINE_S,
    )  # fmt: skip
    cluster.restart(victim)
    target = max(before_restart) + TXNS_AFTER_KILL * 2 // 3
    cluster.wait_for(lambda: progressed(target), "transactions after the restart", DEADLINE_S)
    for writer in writers:
        writer.stop.set()
    for writer in writers:
        assert writer.done.wait(DEADLINE_S), f"{writer.name} did not finish its last transaction"
        assert writer.error is None, writer.error

    history = [txn for writer in writers for txn in writer.history]
    assert any(t.outcome == "aborted" for t in history) and any(t.outcome == "committed" for t in history)
    # EndTxn answers once the decision is logged; markers follow. Read once every partition's transactions ended.
    cluster.wait_for(
        lambda: all_decided(cluster, raw, topic), "the last transactions' markers written", DEADLINE_S
    )
    got = read_committed(cluster.bootstrap, topic)
    check_against_history(got, history)
    assert sum(len(v) for v in got.values()) >= sum(
        len(t.values) for t in history if t.outcome == "committed"
    )
