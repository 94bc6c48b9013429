"""The transaction coordinator of a real broker, spoken to raw (kio) and by a real client: FindCoordinator for
transactional ids creates `__transaction_state`, InitProducerId bumps epochs, and a restarted broker reloads
them from the log."""

from __future__ import annotations

import uuid

import pytest
from kio.schema.errors import ErrorCode as E
from txn_harness import find_transaction_coordinator, init_producer_id

TXN_OVERRIDES = {
    "transaction.state.log.num.partitions": "3",
    "transaction.max.timeout.ms": "120000",
}


@pytest.fixture
def txn_broker(broker_factory):
    return broker_factory(overrides=TXN_OVERRIDES)


def test_init_producer_id_bumps_the_epoch_and_survives_a_restart(txn_broker, raw) -> None:
    tid = f"tx-{uuid.uuid4().hex[:8]}"
    with raw.RawClient.to(txn_broker, timeout=30) as client:
        coordinator = find_transaction_coordinator(client, tid)
        assert (coordinator.host, coordinator.port) == (txn_broker.host, txn_broker.port)
        first = init_producer_id(client, tid)
        assert first.error_code == E.none and first.producer_id >= 0 and first.producer_epoch == 0
        second = init_producer_id(client, tid, version=0)
        assert (second.error_code, second.producer_id, second.producer_epoch) == (
            E.none,
            first.producer_id,
            1,
        )
        # Version 3+: a producer resuming with its current id and epoch gets the next epoch; a stale one is fenced.
        resumed = init_producer_id(client, tid, version=4, pid=first.producer_id, epoch=1)
        assert (resumed.error_code, resumed.producer_epoch) == (E.none, 2)
        stale = init_producer_id(client, tid, version=4, pid=first.producer_id + 1, epoch=0)
        assert stale.error_code == E.producer_fenced
        stale_v3 = init_producer_id(client, tid, version=3, pid=first.producer_id + 1, epoch=0)
        assert stale_v3.error_code == E.invalid_producer_epoch  # v3 predates PRODUCER_FENCED
        too_long = init_producer_id(client, f"{tid}-x", timeout_ms=120001)
        assert too_long.error_code == E.invalid_transaction_timeout
        other = init_producer_id(client, f"{tid}-other")
        assert other.producer_id != first.producer_id

    txn_broker.restart()
    with raw.RawClient.to(txn_broker, timeout=30) as client:
        find_transaction_coordinator(client, tid)
        after = init_producer_id(client, tid)
        # The new coordinator read the transactional id back from __transaction_state.
        assert (after.error_code, after.producer_id, after.producer_epoch) == (E.none, first.producer_id, 3)


def test_confluent_kafka_initializes_transactions(txn_broker) -> None:
    from confluent_kafka import Producer

    tid = f"tx-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": txn_broker.bootstrap, "transactional.id": tid})
    producer.init_transactions(30)
    # A second producer with the same id takes over at the next epoch (the first one is now a zombie).
    successor = Producer({"bootstrap.servers": txn_broker.bootstrap, "transactional.id": tid})
    successor.init_transactions(30)
