"""KIP-890 transaction verification (`transaction.partition.verification.enable`, on by default), spoken raw
(kio-encoded): a transactional batch for a partition its producer never added to the transaction is refused and
not appended (INVALID_TXN_STATE, TRANSACTION_ABORTABLE from Produce v11), so no stray batch can leave a
transaction open that pins the last stable offset; a stale batch arriving after its transaction ended is refused
the same way; a TxnOffsetCommit whose group partition was never added is refused; with the setting switched off
(it is dynamic) the same batch is appended, as before. Real clients' transactions run with verification on in
every other transaction test module; the three-broker case (coordinator on another broker) is in
cluster/test_transactions_cluster.py."""

from __future__ import annotations

import uuid

import pytest
from kio.schema.errors import ErrorCode as E
from txn_harness import RawTransactionalProducer as Producer
from txn_harness import partition_offsets as offsets
from txn_harness import wait_for_state

from broker_runtime.protocol.apis import ApiKey
from broker_runtime.tools.admin_client import build_request
from tests.integration.group_txn_raw import fetch as fetch_offsets
from tests.integration.group_txn_raw import txn_commit_as, wait_for_coordinator

pytestmark = pytest.mark.odradek_only

SETTING = "transaction.partition.verification.enable"


@pytest.fixture(scope="module")
def verifying_broker(broker_logs_dir, helpers):
    with helpers.running_broker(
        broker_logs_dir,
        "txn-verification",
        {"transaction.state.log.num.partitions": "2", "num.partitions": "2"},
    ) as broker:
        yield broker


@pytest.fixture
def client(request, verifying_broker, helpers, raw):
    helpers.remember_broker(request, verifying_broker)
    with raw.RawClient.to(verifying_broker, timeout=30) as c:
        yield c


@pytest.fixture
def topic(verifying_broker, clients) -> str:
    name = f"verify-{uuid.uuid4().hex[:8]}"
    clients.create_topic(verifying_broker.bootstrap, name, 2)
    return name


def test_a_partition_never_added_is_refused_and_nothing_is_appended(client, topic) -> None:
    producer = Producer(client, f"never-added-{uuid.uuid4().hex[:8]}")
    producer.add(topic, 0)
    assert producer.produce(topic, 0, [b"in-0", b"in-1"]) == (E.none, 0)
    # Partition 1 was never added: the coordinator says so, the leader refuses (Kafka 3.9 per Produce version).
    assert producer.produce(topic, 1, [b"stray"], version=9)[0] == E.invalid_txn_state
    assert producer.produce(topic, 1, [b"stray"], version=10)[0] == E.invalid_txn_state
    assert producer.produce(topic, 1, [b"stray"], version=11)[0] == E.transaction_abortable
    assert offsets(client, topic, 1) == (0, 0)  # nothing appended, no open transaction pinning the LSO
    # Once added, the same partition takes the batch (its first sequence: the refused ones left no trace).
    producer.add(topic, 1)
    assert producer.produce(topic, 1, [b"added"]) == (E.none, 0)
    assert producer.end(committed=True) == E.none


def test_a_stale_batch_after_its_transaction_ended_is_refused(client, topic, verifying_broker, raw) -> None:
    """The hanging transaction KIP-890 closes: a retried batch of a transaction that already committed would
    otherwise open a transaction the coordinator knows nothing of, and hold the LSO forever."""
    producer = Producer(client, f"stale-{uuid.uuid4().hex[:8]}")
    producer.add(topic, 0)
    assert producer.produce(topic, 0, [b"committed"]) == (E.none, 0)
    assert producer.end(committed=True) == E.none
    wait_for_state(verifying_broker, raw, producer.tid, "CompleteCommit")  # the marker is in partition 0
    assert offsets(client, topic, 0) == (2, 2)
    assert producer.produce(topic, 0, [b"late"])[0] == E.invalid_txn_state
    assert offsets(client, topic, 0) == (2, 2)  # the LSO is not pinned by a transaction nobody will end


def test_txn_offset_commit_needs_the_group_partition_in_the_transaction(client, topic) -> None:
    producer = Producer(client, f"offsets-{uuid.uuid4().hex[:8]}")
    group = f"verify-group-{uuid.uuid4().hex[:8]}"
    wait_for_coordinator(client, group)
    producer.add(topic, 0)
    # No AddOffsetsToTxn: the group's __consumer_offsets partition is not in the transaction.
    assert txn_commit_as(client, 3, group, producer.tid, producer.pid, producer.epoch, topic, 5) == (
        E.invalid_txn_state
    )
    assert txn_commit_as(client, 4, group, producer.tid, producer.pid, producer.epoch, topic, 5) == (
        E.transaction_abortable
    )
    assert fetch_offsets(client, group, topic, require_stable=True) == (E.none, -1)  # nothing pending
    response = client.call(build_request(
        ApiKey.ADD_OFFSETS_TO_TXN, 3, transactional_id=producer.tid, producer_id=producer.pid,
        producer_epoch=producer.epoch, group_id=group,
    ))  # fmt: skip
    assert response.error_code == E.none
    assert txn_commit_as(client, 4, group, producer.tid, producer.pid, producer.epoch, topic, 5) == E.none
    assert fetch_offsets(client, group, topic, require_stable=True) == (E.unstable_offset_commit, -1)
    assert producer.end(committed=True) == E.none


def test_with_the_setting_off_the_batch_is_appended(client, topic, verifying_broker, clients) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    admin = clients.confluent_admin(verifying_broker.bootstrap)

    def set_verification(value: str) -> None:
        resource = ConfigResource(ResourceType.BROKER, "0", incremental_configs=[
            ConfigEntry(SETTING, value, incremental_operation=AlterConfigOpType.SET)])  # fmt: skip
        admin.incremental_alter_configs([resource], request_timeout=30)[resource].result(timeout=30)

    producer = Producer(client, f"off-{uuid.uuid4().hex[:8]}")
    set_verification("false")
    try:
        # The old behaviour: the leader takes the batch without asking, and the transaction it opens holds the LSO.
        assert producer.produce(topic, 1, [b"unverified"]) == (E.none, 0)
        assert offsets(client, topic, 1) == (1, 0)
    finally:
        set_verification("true")
    # Its transaction is open here now, so later batches need no verification either; the coordinator aborts it
    # when the producer ends the transaction (partition 1 unknown to it: only the marker it sends matters here).
    producer.add(topic, 1)
    assert producer.produce(topic, 1, [b"verified"]) == (E.none, 1)
    assert producer.end(committed=False) == E.none
