"""Transactions with real clients against a real broker: commit and abort with each of the four libraries,
zombie fencing, and transactions that time out and are aborted by the coordinator.

Every check reads the output back through a read_committed consumer (and, where it matters, a
read_uncommitted one, which sees aborted records as Kafka's does)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from txn_harness import describe_transaction, new_topic, read_all, run_transactions, values, wait_for_state

HERE = Path(__file__).resolve().parent
PROCESSOR = HERE / "txn_processor.py"
DEADLINE_S = 60

TXN_BROKER_OVERRIDES = {
    "num.partitions": "3",
    "offsets.topic.num.partitions": "3",
    "transaction.state.log.num.partitions": "3",
    "group.initial.rebalance.delay.ms": "0",
    # Timed-out transactions are looked for often, so the timeout test takes seconds.
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "200",
}


@pytest.fixture(scope="module")
def _txn_broker_process(broker_logs_dir, helpers):
    with helpers.running_broker(broker_logs_dir, "transactions", TXN_BROKER_OVERRIDES) as broker:
        yield broker


@pytest.fixture
def txn_broker(request, _txn_broker_process, helpers):
    return helpers.live_broker(request, _txn_broker_process)


# --- commit and abort, each client --------------------------------------------------------------------------


@pytest.mark.parametrize("client", ["confluent", "kafka-python", "aiokafka", "kafkajs"])
def test_committed_records_are_read_and_aborted_ones_are_not(client, txn_broker, clients) -> None:
    bootstrap = txn_broker.bootstrap
    topic = new_topic(clients, bootstrap, "txn")
    tid = f"{client}-{uuid.uuid4().hex[:8]}"
    committed = [f"c{i}".encode() for i in range(6)]
    aborted = [f"a{i}".encode() for i in range(6)]
    later = [f"l{i}".encode() for i in range(3)]
    batches = [(committed, True), (aborted, False), (later, True)]
    run_transactions(client, bootstrap, topic, tid, batches, clients)
    assert values(read_all(bootstrap, topic)) == sorted(committed + later)
    # read_uncommitted sees everything that reached the log, aborted records included (as in Kafka).
    assert values(read_all(bootstrap, topic, "read_uncommitted")) == sorted(committed + aborted + later)


# --- zombie fencing -------------------------------------------------------------------------------------------


def test_a_zombie_producer_is_fenced_and_its_transaction_aborted(txn_broker, clients, raw) -> None:
    from confluent_kafka import KafkaException, Producer

    bootstrap = txn_broker.bootstrap
    topic = new_topic(clients, bootstrap, "txn")
    tid = f"zombie-{uuid.uuid4().hex[:8]}"
    zombie = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid})
    zombie.init_transactions(30)
    zombie.begin_transaction()
    for i in range(5):
        zombie.produce(topic, value=f"zombie{i}".encode(), partition=i % 3)
    zombie.flush(30)

    successor = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid})
    successor.init_transactions(60)  # fences the zombie: its open transaction is aborted first
    successor.begin_transaction()
    successor.produce(topic, value=b"successor", partition=0)
    successor.commit_transaction(30)

    with pytest.raises(KafkaException) as raised:
        zombie.produce(topic, value=b"zombie-late", partition=1)
        zombie.commit_transaction(30)
    error = raised.value.args[0]
    assert error.fatal() or error.txn_requires_abort(), error
    assert error.code() in (kafka_error_code("_FENCED"), kafka_error_code("PRODUCER_FENCED"),
                            kafka_error_code("INVALID_PRODUCER_EPOCH")), error  # fmt: skip
    assert values(read_all(bootstrap, topic)) == [b"successor"]
    state = describe_transaction(txn_broker, raw, tid)
    assert (state.transaction_state, state.producer_epoch) == ("CompleteCommit", 2)


def kafka_error_code(name: str) -> int:
    from confluent_kafka import KafkaError

    return getattr(KafkaError, name)


# --- transaction timeout --------------------------------------------------------------------------------------


def test_a_transaction_open_past_its_timeout_is_aborted(txn_broker, clients, raw) -> None:
    from confluent_kafka import KafkaException, Producer

    bootstrap = txn_broker.bootstrap
    topic = new_topic(clients, bootstrap, "txn")
    tid = f"timeout-{uuid.uuid4().hex[:8]}"
    slow = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "transaction.timeout.ms": 1000})
    slow.init_transactions(30)
    slow.begin_transaction()
    for i in range(4):
        slow.produce(topic, value=f"slow{i}".encode(), partition=i % 3)
    slow.flush(30)
    state = wait_for_state(txn_broker, raw, tid, "CompleteAbort")
    assert state.producer_epoch == 1  # the coordinator fenced the producer's epoch 0 to abort it
    assert values(read_all(bootstrap, topic)) == []
    assert len(read_all(bootstrap, topic, "read_uncommitted")) == 4
    with pytest.raises(KafkaException):
        slow.commit_transaction(30)
