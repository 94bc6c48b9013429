"""Transactional offset commits at the group coordinator, spoken raw (kio-encoded) to a broker process: every
TxnOffsetCommit version leaves its offsets pending (OffsetFetch with require_stable answers
UNSTABLE_OFFSET_COMMIT, without it the last committed offset); pending offsets survive a restart, which
replays the transactional batches from `__consumer_offsets`; a WriteTxnMarkers COMMIT for the group's
`__consumer_offsets` partition (the group coordinator's complete_transaction) makes them visible, an ABORT drops
them, and a restart replays the markers to the same result. Then each client library's
send_offsets_to_transaction, through the whole path (AddOffsetsToTxn, TxnOffsetCommit at the version the
library speaks, EndTxn, the markers): committed offsets appear when the transaction commits, never when it
aborts."""

from __future__ import annotations

import uuid

import pytest
from group_harness import GROUP_BROKER_OVERRIDES, produce_spread
from kio.schema.errors import ErrorCode as E

from broker_runtime.group.records import partition_for
from broker_runtime.handlers.groups import GROUP_API_VERSIONS
from broker_runtime.protocol.apis import ApiKey
from tests.integration.group_txn_raw import commit, fetch, txn_commit, wait_for_coordinator, write_marker

OFFSETS_PARTITIONS = int(GROUP_BROKER_OVERRIDES["offsets.topic.num.partitions"])


@pytest.fixture(scope="module")
def txn_broker(broker_logs_dir, helpers):
    # The raw tests play the transaction coordinator (their producer ids never went through AddOffsetsToTxn), so
    # the group coordinator must not verify transactions here; the clients' tests verify on the shared broker.
    overrides = {
        **GROUP_BROKER_OVERRIDES,
        "transaction.state.log.num.partitions": "3",
        "transaction.partition.verification.enable": "false",
    }
    with helpers.running_broker(broker_logs_dir, "group-transactions", overrides) as broker:
        yield broker


def test_transactional_offsets_stay_pending_in_every_version_and_across_a_restart(txn_broker, raw, new_topic):
    topic = new_topic(1, broker=txn_broker)
    produce_spread(txn_broker.bootstrap, topic, 1, 3)
    low, high = GROUP_API_VERSIONS[ApiKey.TXN_OFFSET_COMMIT]
    assert (low, high) == (0, 4)  # Kafka 3.9's range
    run = uuid.uuid4().int % 10**9
    groups = {v: f"txn-v{v}-{run}" for v in range(low, high + 1)}
    with raw.RawClient.to(txn_broker, timeout=30) as client:
        for version, group in groups.items():
            wait_for_coordinator(client, group)
            assert commit(client, group, topic, 1) == E.none
            assert txn_commit(client, version, group, run * 10 + version, topic, 100 + version) == E.none
            assert fetch(client, group, topic, require_stable=True) == (E.unstable_offset_commit, -1)
            assert fetch(client, group, topic, require_stable=False) == (E.none, 1)
        # Offsets of a topic that does not exist are refused per partition, and nothing is written for them.
        assert (
            txn_commit(client, high, groups[high], run * 10, "no-such-topic", 5)
            == E.unknown_topic_or_partition
        )

    txn_broker.restart()  # the new coordinator loads __consumer_offsets, transactional batches included
    with raw.RawClient.to(txn_broker, timeout=30) as client:
        for version, group in groups.items():
            wait_for_coordinator(client, group)
            assert fetch(client, group, topic, require_stable=True) == (E.unstable_offset_commit, -1), version
            assert fetch(client, group, topic, require_stable=False) == (E.none, 1), version


def test_markers_commit_or_drop_pending_offsets_and_a_restart_replays_them(txn_broker, raw, new_topic):
    topic = new_topic(1, broker=txn_broker)
    produce_spread(txn_broker.bootstrap, topic, 1, 3)
    run = uuid.uuid4().int % 10**9
    # producer id -> (group, commits?): two producers share a group, their transactions end differently.
    plan = {
        run * 10 + 1: (f"m-a-{run}", True),
        run * 10 + 2: (f"m-a-{run}", False),
        run * 10 + 3: (f"m-b-{run}", False),
    }
    offsets = {pid: 1000 + i for i, pid in enumerate(plan)}
    with raw.RawClient.to(txn_broker, timeout=30) as client:
        for group in sorted({group for group, _ in plan.values()}):
            wait_for_coordinator(client, group)
            assert commit(client, group, topic, 7) == E.none
        for pid, (group, _) in plan.items():
            assert txn_commit(client, 4, group, pid, topic, offsets[pid]) == E.none
        for pid, (group, committed) in plan.items():
            assert write_marker(client, pid, committed, partition_for(group, OFFSETS_PARTITIONS)) == E.none
        assert fetch(client, f"m-a-{run}", topic, require_stable=True) == (E.none, offsets[run * 10 + 1])
        assert fetch(client, f"m-b-{run}", topic, require_stable=True) == (
            E.none,
            7,
        )  # aborted: the plain one
        # A second marker for the same transaction (the coordinator retrying) changes nothing.
        assert (
            write_marker(client, run * 10 + 1, True, partition_for(f"m-a-{run}", OFFSETS_PARTITIONS))
            == E.none
        )
        assert fetch(client, f"m-a-{run}", topic, require_stable=True) == (E.none, offsets[run * 10 + 1])

    txn_broker.restart(kill=True)  # recovery, then the load replays the batches and markers in log order
    with raw.RawClient.to(txn_broker, timeout=30) as client:
        wait_for_coordinator(client, f"m-a-{run}")
        wait_for_coordinator(client, f"m-b-{run}")
        assert fetch(client, f"m-a-{run}", topic, require_stable=True) == (E.none, offsets[run * 10 + 1])
        assert fetch(client, f"m-b-{run}", topic, require_stable=True) == (E.none, 7)


# --- send_offsets_to_transaction with each client ------------------------------------------------------------


def committed_offset(bootstrap: str, group: str, topic: str) -> int:
    """The group's committed offset of partition 0 as a read_committed consumer sees it (require_stable)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed"}
    )
    try:
        (tp,) = consumer.committed([TopicPartition(topic, 0)], timeout=30)
        return tp.offset
    finally:
        consumer.close()


def confluent_offsets(
    bootstrap: str, tid: str, group: str, topic: str, steps: list[tuple[int, bool]]
) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition

    member = Consumer({"bootstrap.servers": bootstrap, "group.id": group})  # only for its group metadata
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid})
    try:
        producer.init_transactions(30)
        for offset, commits in steps:
            producer.begin_transaction()
            producer.produce(topic, value=b"out", partition=0)
            producer.send_offsets_to_transaction(
                [TopicPartition(topic, 0, offset)], member.consumer_group_metadata(), 30
            )
            if commits:
                producer.commit_transaction(30)
            else:
                producer.abort_transaction(30)
    finally:
        member.close()


def kafka_python_offsets(
    bootstrap: str, tid: str, group: str, topic: str, steps: list[tuple[int, bool]]
) -> None:
    from kafka import KafkaProducer
    from kafka.structs import OffsetAndMetadata, TopicPartition

    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=tid)
    try:
        producer.init_transactions()
        for offset, commits in steps:
            producer.begin_transaction()
            producer.send(topic, value=b"out", partition=0)
            producer.send_offsets_to_transaction(
                {TopicPartition(topic, 0): OffsetAndMetadata(offset, "", -1)}, group
            )
            if commits:
                producer.commit_transaction()
            else:
                producer.abort_transaction()
    finally:
        producer.close()


def aiokafka_offsets(bootstrap: str, tid: str, group: str, topic: str, steps: list[tuple[int, bool]]) -> None:
    import asyncio

    from aiokafka import AIOKafkaProducer, TopicPartition

    async def run() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=tid)
        await producer.start()
        try:
            for offset, commits in steps:
                await producer.begin_transaction()
                await producer.send_and_wait(topic, value=b"out", partition=0)
                await producer.send_offsets_to_transaction({TopicPartition(topic, 0): offset}, group)
                if commits:
                    await producer.commit_transaction()
                else:
                    await producer.abort_transaction()
        finally:
            await producer.stop()

    asyncio.run(asyncio.wait_for(run(), 60))


def kafkajs_offsets(bootstrap, tid, group, topic, steps, clients) -> None:
    for offset, commits in steps:
        clients.run_kafkajs(
            "transaction", bootstrap, topic=topic, transactionalId=tid, commit=commits, groupId=group,
            messages=[clients.rec_to_js(clients.Rec(None, b"out", (), None, None, None), 0)],
            offsets=[{"topic": topic, "partitions": [{"partition": 0, "offset": str(offset)}]}],
        )  # fmt: skip


@pytest.mark.parametrize("client", ["confluent", "kafka-python", "aiokafka", "kafkajs"])
def test_offsets_sent_to_a_transaction_are_committed_with_it_and_never_when_it_aborts(
    client, txn_broker, clients, new_topic
) -> None:
    topic = new_topic(1, broker=txn_broker)
    bootstrap = txn_broker.bootstrap
    group, tid = f"{client}-g-{uuid.uuid4().hex[:8]}", f"{client}-tx-{uuid.uuid4().hex[:8]}"
    run = {
        "confluent": confluent_offsets,
        "kafka-python": kafka_python_offsets,
        "aiokafka": aiokafka_offsets,
        "kafkajs": lambda *args: kafkajs_offsets(*args, clients),
    }[client]
    run(bootstrap, tid, group, topic, [(10, True)])
    assert committed_offset(bootstrap, group, topic) == 10
    run(bootstrap, tid, group, topic, [(20, False)])
    assert committed_offset(bootstrap, group, topic) == 10  # aborted: never visible
    run(bootstrap, tid, group, topic, [(30, True), (40, False)])
    assert committed_offset(bootstrap, group, topic) == 30
