"""Every advertised version of the transaction coordinator's APIs, spoken raw (kio-encoded): a transaction's
lifecycle per version of AddPartitionsToTxn, AddOffsetsToTxn and EndTxn, the brokers' batched and verify-only
AddPartitionsToTxn, and ListTransactions' filters. Clients use a few of these versions each (aiokafka the oldest);
this keeps the others honest."""

from __future__ import annotations

import uuid

import pytest
from kio.index import load_request_schema
from kio.schema.errors import ErrorCode as E
from txn_harness import (
    _parse_describe_transactions,
    describe_transaction,
    find_transaction_coordinator,
    init_producer_id,
)

from broker_runtime.handlers.transactions import TRANSACTION_API_VERSIONS
from broker_runtime.protocol.apis import ApiKey
from broker_runtime.tools.admin_client import build_request as build
from tests.integration.group_txn_raw import nested

TXN_OVERRIDES = {"transaction.state.log.num.partitions": "3", "num.partitions": "2"}


def versions(api_key: int) -> list[int]:
    low, high = TRANSACTION_API_VERSIONS[api_key]
    return list(range(low, high + 1))


@pytest.fixture(scope="module")
def _txn_versions_broker(broker_logs_dir, helpers):
    with helpers.running_broker(broker_logs_dir, "txn-versions", TXN_OVERRIDES) as broker:
        yield broker


@pytest.fixture
def client(request, _txn_versions_broker, helpers, raw):
    helpers.remember_broker(request, _txn_versions_broker)
    with raw.RawClient.to(_txn_versions_broker, timeout=30) as c:
        yield c


@pytest.fixture
def topic(_txn_versions_broker, clients) -> str:
    name = f"tv-{uuid.uuid4().hex[:8]}"
    clients.create_topic(_txn_versions_broker.bootstrap, name, 2)
    return name


def begin(client, transactional_id: str) -> tuple[int, int]:
    find_transaction_coordinator(client, transactional_id)
    response = init_producer_id(client, transactional_id)
    assert response.error_code == E.none
    return response.producer_id, response.producer_epoch


def add_partitions(client, version: int, tid: str, pid: int, epoch: int, partitions: dict[str, list[int]]):
    topics = tuple(
        nested("add_partitions_to_txn", version, "AddPartitionsToTxnTopic", name=t, partitions=tuple(ps))
        for t, ps in partitions.items()
    )
    response = client.call(build(
        ApiKey.ADD_PARTITIONS_TO_TXN, version, v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch, v3_and_below_topics=topics,
    ))  # fmt: skip
    return {
        (t.name, p.partition_index): p.partition_error_code
        for t in response.results_by_topic_v3_and_below
        for p in t.results_by_partition
    }


def end_txn(client, version: int, tid: str, pid: int, epoch: int, committed: bool):
    return client.call(build(
        ApiKey.END_TXN, version, transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=committed
    )).error_code  # fmt: skip


@pytest.mark.parametrize("version", versions(ApiKey.ADD_PARTITIONS_TO_TXN)[:4])
def test_add_partitions_to_txn_from_clients(version, client, topic, _txn_versions_broker, raw) -> None:
    tid = f"apv{version}-{uuid.uuid4().hex[:8]}"
    pid, epoch = begin(client, tid)
    assert add_partitions(client, version, tid, pid, epoch, {topic: [0, 1]}) == {
        (topic, 0): E.none, (topic, 1): E.none,
    }  # fmt: skip
    state = describe_transaction(_txn_versions_broker, raw, tid)
    assert (state.transaction_state, state.topics) == ("Ongoing", ((topic, (0, 1)),))
    # A partition that does not exist fails alone; the others of the request are not attempted.
    assert add_partitions(client, version, tid, pid, epoch, {topic: [0], "no-such-topic": [0]}) == {
        (topic, 0): E.operation_not_attempted, ("no-such-topic", 0): E.unknown_topic_or_partition,
    }  # fmt: skip
    # Clients may not add internal topics themselves (Kafka leaves them out of WRITE authorization).
    assert add_partitions(client, version, tid, pid, epoch, {topic: [0], "__consumer_offsets": [0]}) == {
        (topic, 0): E.operation_not_attempted, ("__consumer_offsets", 0): E.topic_authorization_failed,
    }  # fmt: skip
    fenced = add_partitions(client, version, tid, pid, epoch + 1, {topic: [0]})
    assert fenced == {(topic, 0): E.producer_fenced if version >= 2 else E.invalid_producer_epoch}
    assert end_txn(client, 3, tid, pid, epoch, committed=True) == E.none


@pytest.mark.parametrize("version", versions(ApiKey.ADD_PARTITIONS_TO_TXN)[4:])
def test_batched_and_verify_only_add_partitions_to_txn(version, client, topic) -> None:
    first, second = f"apb{version}-{uuid.uuid4().hex[:8]}", f"apb{version}-{uuid.uuid4().hex[:8]}"
    pid1, epoch1 = begin(client, first)
    pid2, epoch2 = begin(client, second)

    def transaction(tid, pid, epoch, verify_only, partitions):
        topics = (nested("add_partitions_to_txn", version, "AddPartitionsToTxnTopic", name=topic,
                         partitions=tuple(partitions)),)  # fmt: skip
        return nested(
            "add_partitions_to_txn", version, "AddPartitionsToTxnTransaction", transactional_id=tid,
            producer_id=pid, producer_epoch=epoch, verify_only=verify_only, topics=topics,
        )  # fmt: skip

    response = client.call(build(ApiKey.ADD_PARTITIONS_TO_TXN, version, transactions=(
        transaction(first, pid1, epoch1, False, [0]),
        transaction(second, pid2, epoch2, False, [1]),
    )))  # fmt: skip
    assert response.error_code == E.none
    results = {
        (r.transactional_id, p.partition_index): p.partition_error_code
        for r in response.results_by_transaction
        for t in r.topic_results
        for p in t.results_by_partition
    }
    assert results == {(first, 0): E.none, (second, 1): E.none}
    verified = client.call(build(ApiKey.ADD_PARTITIONS_TO_TXN, version, transactions=(
        transaction(first, pid1, epoch1, True, [0, 1]),
    )))  # fmt: skip
    assert {
        p.partition_index: p.partition_error_code
        for r in verified.results_by_transaction
        for t in r.topic_results
        for p in t.results_by_partition
    } == {0: E.none, 1: E.transaction_abortable}
    for tid, pid, epoch in ((first, pid1, epoch1), (second, pid2, epoch2)):
        assert end_txn(client, 3, tid, pid, epoch, committed=False) == E.none


@pytest.mark.parametrize("version", versions(ApiKey.ADD_OFFSETS_TO_TXN))
def test_add_offsets_to_txn(version, client, _txn_versions_broker, raw) -> None:
    tid = f"aov{version}-{uuid.uuid4().hex[:8]}"
    pid, epoch = begin(client, tid)
    group = f"g-{uuid.uuid4().hex[:6]}"
    response = client.call(build(
        ApiKey.ADD_OFFSETS_TO_TXN, version, transactional_id=tid, producer_id=pid, producer_epoch=epoch,
        group_id=group,
    ))  # fmt: skip
    assert response.error_code == E.none
    state = describe_transaction(_txn_versions_broker, raw, tid)
    assert [topic for topic, _ in state.topics] == ["__consumer_offsets"]
    stale = client.call(build(
        ApiKey.ADD_OFFSETS_TO_TXN, version, transactional_id=tid, producer_id=pid, producer_epoch=epoch + 1,
        group_id=group,
    ))  # fmt: skip
    assert stale.error_code == (E.producer_fenced if version >= 2 else E.invalid_producer_epoch)
    assert end_txn(client, 3, tid, pid, epoch, committed=False) == E.none


@pytest.mark.parametrize("version", versions(ApiKey.END_TXN))
def test_end_txn(version, client, topic, _txn_versions_broker, raw) -> None:
    tid = f"etv{version}-{uuid.uuid4().hex[:8]}"
    pid, epoch = begin(client, tid)
    assert end_txn(client, version, tid, pid, epoch, committed=True) == E.invalid_txn_state  # nothing open
    add_partitions(client, 3, tid, pid, epoch, {topic: [0]})
    fenced = end_txn(client, version, tid, pid, epoch + 1, committed=True)
    assert fenced == (E.producer_fenced if version >= 2 else E.invalid_producer_epoch)
    assert end_txn(client, version, tid, pid + 1000, epoch, committed=True) == E.invalid_producer_id_mapping
    assert end_txn(client, version, tid, pid, epoch, committed=True) == E.none
    assert end_txn(client, version, tid, pid, epoch, committed=False) in (
        E.invalid_txn_state,
        E.concurrent_transactions,
    )
    state = describe_transaction(_txn_versions_broker, raw, tid)
    assert state.transaction_state in ("PrepareCommit", "CompleteCommit")


@pytest.mark.parametrize("version", versions(ApiKey.LIST_TRANSACTIONS))
def test_list_transactions(version, client, topic) -> None:
    tid = f"ltv{version}-{uuid.uuid4().hex[:8]}"
    pid, epoch = begin(client, tid)
    add_partitions(client, 3, tid, pid, epoch, {topic: [0]})
    response = client.call(build(
        ApiKey.LIST_TRANSACTIONS, version, state_filters=("Ongoing", "Bogus"), producer_id_filters=(pid,),
        duration_filter=-1,
    ))  # fmt: skip
    assert response.error_code == E.none
    assert list(response.unknown_state_filters) == ["Bogus"]
    assert [
        (t.transactional_id, t.producer_id, t.transaction_state) for t in response.transaction_states
    ] == [(tid, pid, "Ongoing")]
    empty = client.call(build(ApiKey.LIST_TRANSACTIONS, version, state_filters=("CompleteAbort",),
                              producer_id_filters=(pid,), duration_filter=-1))  # fmt: skip
    assert list(empty.transaction_states) == []
    assert end_txn(client, 3, tid, pid, epoch, committed=False) == E.none


@pytest.mark.parametrize("version", [3, 4, 5])
def test_init_producer_id_with_half_an_existing_producer_is_invalid(version, client) -> None:
    """KIP-360 versions name an existing producer by id and epoch; one without the other is INVALID_REQUEST (Kafka's
    KafkaApis), never a re-initialisation that hands out the current epoch without fencing its holder."""
    tid = f"ipv{version}-{uuid.uuid4().hex[:8]}"
    pid, epoch = begin(client, tid)
    assert init_producer_id(client, tid, version, pid=pid, epoch=-1).error_code == E.invalid_request
    assert init_producer_id(client, tid, version, pid=-1, epoch=epoch).error_code == E.invalid_request
    assert init_producer_id(client, None, version, pid=pid, epoch=-1).error_code == E.invalid_request
    # The producer holding the epoch was not disturbed: naming it whole bumps its epoch, as KIP-360 does.
    bumped = init_producer_id(client, tid, version, pid=pid, epoch=epoch)
    assert (bumped.error_code, bumped.producer_id, bumped.producer_epoch) == (E.none, pid, epoch + 1)


def test_describe_transactions_of_an_empty_id_is_an_invalid_request(client) -> None:
    """Kafka checks the id before asking which coordinator owns it (TransactionCoordinator
    .handleDescribeTransactions)."""
    client.send(load_request_schema(ApiKey.DESCRIBE_TRANSACTIONS, 0)(transactional_ids=("",)))
    (state,) = _parse_describe_transactions(client.recv_frame())
    assert state.error_code == E.invalid_request
