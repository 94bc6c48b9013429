"""The partition side of transactions against a live broker, spoken raw with kio: transactional produce,
WriteTxnMarkers, the last stable offset, Fetch at read_committed with its aborted-transactions list, ListOffsets
and DescribeProducers; then real consumers at isolation.level=read_committed skipping aborted data, and a kill -9
that the `.txnindex` and the open transactions survive."""

from __future__ import annotations

import datetime

import pytest
from kio.schema.errors import ErrorCode as E
from kio.static.primitive import Records, i32Timedelta

from broker_runtime.protocol.apis import ApiKey
from broker_runtime.protocol.records import build_batch, decode_records, iter_headers
from broker_runtime.tools.admin_client import build_request

pytestmark = pytest.mark.odradek_only

READ_UNCOMMITTED, READ_COMMITTED = 0, 1


def ms(n: int) -> i32Timedelta:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=n))


class Txn:
    """A producer id from InitProducerId, writing batches and ending transactions with raw requests (the
    transaction coordinator's part is played by the test)."""

    def __init__(self, client) -> None:
        response = client.call(build_request(ApiKey.INIT_PRODUCER_ID, 4, transactional_id=None,
                                             transaction_timeout=ms(60000), producer_id=-1, producer_epoch=-1))  # fmt: skip
        assert response.error_code == E.none
        self.client = client
        self.producer_id, self.epoch = int(response.producer_id), int(response.producer_epoch)
        self.sequence = 0

    def produce(self, topic: str, values: list[bytes], *, transactional: bool = True,
                transactional_id: str | None = "txn-test", partition: int = 0) -> tuple[E, int]:  # fmt: skip
        batch = build_batch([(None, v) for v in values], producer_id=self.producer_id,
                            producer_epoch=self.epoch, base_sequence=self.sequence, transactional=transactional)  # fmt: skip
        response = self.client.call(build_request(
            ApiKey.PRODUCE, 9, transactional_id=transactional_id, acks=-1, timeout=ms(10000),
            topic_data=lambda m: (m.TopicProduceData(name=topic, partition_data=(
                m.PartitionProduceData(index=partition, records=Records(bytes(batch))),)),),
        ))  # fmt: skip
        part = response.responses[0].partition_responses[0]
        if part.error_code == E.none:
            self.sequence += len(values)
        return part.error_code, int(part.base_offset)

    def end(self, topic: str, *, committed: bool, partitions=(0,), epoch: int | None = None,
            coordinator_epoch: int = 0) -> dict[int, E]:  # fmt: skip
        response = self.client.call(build_request(
            ApiKey.WRITE_TXN_MARKERS, 1,
            markers=lambda m: (m.WritableTxnMarker(
                producer_id=self.producer_id, producer_epoch=self.epoch if epoch is None else epoch,
                transaction_result=committed, coordinator_epoch=coordinator_epoch,
                topics=(m.WritableTxnMarkerTopic(name=topic, partition_indexes=tuple(partitions)),),
            ),),
        ))  # fmt: skip
        (marker,) = response.markers
        assert int(marker.producer_id) == self.producer_id
        return {int(p.partition_index): p.error_code for t in marker.topics for p in t.partitions}


def fetch(
    client, topic: str, offset: int, isolation: int, partition: int = 0, partition_max_bytes: int = 1 << 20
):
    response = client.call(build_request(
        ApiKey.FETCH, 12, replica_id=-1, max_wait=ms(0), min_bytes=0, max_bytes=10 << 20,
        isolation_level=isolation, session_id=0, session_epoch=-1, rack_id="", forgotten_topics_data=(),
        topics=lambda m: (m.FetchTopic(topic=topic, partitions=(m.FetchPartition(
            partition=partition, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
            log_start_offset=-1, partition_max_bytes=partition_max_bytes),)),),
    ))  # fmt: skip
    part = response.responses[0].partitions[0]
    assert part.error_code == E.none
    return part


def latest(client, topic: str, isolation: int) -> int:
    response = client.call(build_request(
        ApiKey.LIST_OFFSETS, 7, replica_id=-1, isolation_level=isolation,
        topics=lambda m: (m.ListOffsetsTopic(name=topic, partitions=(m.ListOffsetsPartition(
            partition_index=0, current_leader_epoch=-1, timestamp=-1),)),),
    ))  # fmt: skip
    part = response.topics[0].partitions[0]
    assert part.error_code == E.none
    return int(part.offset)


def offsets_of(raw, records: bytes) -> list[int]:
    """Offsets of the data records (control batches left out)."""
    return [r.offset for h in iter_headers(records) if not h.is_control for r in decode_records(records, h)]


# These tests play the transaction coordinator themselves (their producer ids never went through
# AddPartitionsToTxn), so partition leaders must not verify transactions: the setting's "off" behaviour.
UNVERIFIED = {"transaction.partition.verification.enable": "false"}


@pytest.fixture(scope="module")
def unverified_broker(broker_logs_dir, helpers):
    with helpers.running_broker(
        broker_logs_dir, "txn-log-unverified", {"num.partitions": "1", **UNVERIFIED}
    ) as broker:
        yield broker


@pytest.fixture
def new_topic(new_topic, unverified_broker):
    return lambda *args, **kw: new_topic(*args, broker=unverified_broker, **kw)


@pytest.fixture
def client(unverified_broker, raw):
    with raw.RawClient.to(unverified_broker) as c:
        yield c


def test_open_transaction_holds_the_lso_and_an_abort_is_listed(client, new_topic, raw) -> None:
    topic = new_topic()
    plain, txn = Txn(client), Txn(client)
    assert plain.produce(topic, [b"p0", b"p1"], transactional=False, transactional_id=None) == (E.none, 0)
    assert txn.produce(topic, [b"a0", b"a1"]) == (E.none, 2)
    assert plain.produce(topic, [b"p2"], transactional=False, transactional_id=None) == (E.none, 4)

    uncommitted = fetch(client, topic, 0, READ_UNCOMMITTED)
    assert (int(uncommitted.high_watermark), int(uncommitted.last_stable_offset)) == (5, 2)
    assert uncommitted.aborted_transactions is None
    assert offsets_of(raw, bytes(uncommitted.records)) == [0, 1, 2, 3, 4]
    committed = fetch(client, topic, 0, READ_COMMITTED)
    assert offsets_of(raw, bytes(committed.records)) == [0, 1]  # up to the LSO only
    assert list(committed.aborted_transactions) == []
    assert (latest(client, topic, READ_UNCOMMITTED), latest(client, topic, READ_COMMITTED)) == (5, 2)

    assert txn.end(topic, committed=False) == {0: E.none}  # the ABORT marker at offset 5
    after = fetch(client, topic, 0, READ_COMMITTED)
    assert (int(after.high_watermark), int(after.last_stable_offset)) == (6, 6)
    assert offsets_of(raw, bytes(after.records)) == [0, 1, 2, 3, 4]  # markers carry no client record
    assert [(int(a.producer_id), int(a.first_offset)) for a in after.aborted_transactions] == [
        (txn.producer_id, 2)
    ]
    assert latest(client, topic, READ_COMMITTED) == 6
    # A fetch from after the aborted transaction does not list it, nor one that ends before the transaction.
    assert list(fetch(client, topic, 6, READ_COMMITTED).aborted_transactions) == []
    first_batch_only = fetch(client, topic, 0, READ_COMMITTED, partition_max_bytes=1)
    assert offsets_of(raw, bytes(first_batch_only.records)) == [0, 1]
    assert list(first_batch_only.aborted_transactions) == []


def test_describe_producers_shows_the_open_transaction(client, new_topic) -> None:
    topic = new_topic()
    txn = Txn(client)
    txn.produce(topic, [b"x"])
    txn.produce(topic, [b"y", b"z"])
    response = client.call(build_request(ApiKey.DESCRIBE_PRODUCERS, 0, topics=lambda m: (
        m.TopicRequest(name=topic, partition_indexes=(0, 7)),)))  # fmt: skip
    by_partition = {int(p.partition_index): p for p in response.topics[0].partitions}
    assert by_partition[7].error_code == E.unknown_topic_or_partition
    (state,) = by_partition[0].active_producers
    assert (int(state.producer_id), int(state.producer_epoch), int(state.last_sequence)) == (
        txn.producer_id, txn.epoch, 2,
    )  # fmt: skip
    assert int(state.current_txn_start_offset) == 0
    txn.end(topic, committed=True)
    response = client.call(build_request(ApiKey.DESCRIBE_PRODUCERS, 0, topics=lambda m: (
        m.TopicRequest(name=topic, partition_indexes=(0,)),)))  # fmt: skip
    assert int(response.topics[0].partitions[0].active_producers[0].current_txn_start_offset) == -1


def test_fencing_errors(client, new_topic) -> None:
    topic = new_topic()
    txn = Txn(client)
    assert txn.produce(topic, [b"t"], transactional_id=None)[0] == E.transactional_id_authorization_failed
    txn.produce(topic, [b"t"])
    assert txn.produce(topic, [b"plain"], transactional=False)[0] == E.invalid_txn_state
    assert txn.end(topic, committed=True, epoch=txn.epoch - 1)[0] == E.invalid_producer_epoch
    assert txn.end(topic, committed=True, coordinator_epoch=3) == {0: E.none}
    assert txn.end(topic, committed=False, coordinator_epoch=2)[0] == E.transaction_coordinator_fenced
    assert txn.end(topic, committed=True, partitions=(9,))[9] == E.unknown_topic_or_partition
    assert txn.end("no-such-topic-" + topic, committed=True)[0] == E.unknown_topic_or_partition
    txn.epoch += 1  # a bumped epoch fences the older one for data too
    txn.sequence = 0
    assert txn.produce(topic, [b"new"])[0] == E.none
    txn.epoch -= 1
    txn.sequence = 1
    assert txn.produce(topic, [b"zombie"])[0] == E.invalid_producer_epoch


def _history(client, topic: str) -> list[bytes]:
    """Plain, aborted and committed data interleaved; returns the values a read_committed consumer must see."""
    plain, first, second = Txn(client), Txn(client), Txn(client)
    plain.produce(topic, [b"plain-0"], transactional=False, transactional_id=None)
    first.produce(topic, [b"aborted-0", b"aborted-1"])
    second.produce(topic, [b"committed-0"])
    first.produce(topic, [b"aborted-2"])
    plain.produce(topic, [b"plain-1"], transactional=False, transactional_id=None)
    second.produce(topic, [b"committed-1"])
    assert first.end(topic, committed=False) == {0: E.none}
    assert second.end(topic, committed=True) == {0: E.none}
    plain.produce(topic, [b"plain-2"], transactional=False, transactional_id=None)
    return [b"plain-0", b"committed-0", b"plain-1", b"committed-1", b"plain-2"]


def test_real_consumers_at_read_committed_skip_aborted_records(
    client, new_topic, unverified_broker, clients
) -> None:
    topic = new_topic()
    visible = _history(client, topic)
    got = clients.confluent_consume(unverified_broker.bootstrap, topic, len(visible),
                                    config={"isolation.level": "read_committed"})  # fmt: skip
    assert [r.value for r in got] == visible
    got = clients.kafka_python_consume(unverified_broker.bootstrap, topic, len(visible),
                                       isolation_level="read_committed")  # fmt: skip
    assert [r.value for r in got] == visible
    everything = clients.confluent_consume(unverified_broker.bootstrap, topic, 8,
                                           config={"isolation.level": "read_uncommitted"})  # fmt: skip
    assert sorted(r.value for r in everything) == sorted([*visible, b"aborted-0", b"aborted-1", b"aborted-2"])


def test_kill_9_keeps_the_aborted_list_and_open_transactions(broker_factory, clients, raw) -> None:
    broker = broker_factory(overrides=UNVERIFIED)
    topic = clients.create_topic(broker.bootstrap, "txn-kill9", 1)
    with raw.RawClient.to(broker) as c:
        visible = _history(c, topic)
        still_open = Txn(c)
        still_open.produce(topic, [b"open-0"])  # offset 10, never ended before the kill
        before = fetch(c, topic, 0, READ_COMMITTED)
        assert int(before.last_stable_offset) == 10
    broker.restart(kill=True)
    with raw.RawClient.to(broker) as c:
        after = fetch(c, topic, 0, READ_COMMITTED)
        assert int(after.last_stable_offset) == 10  # the open transaction still holds it
        assert [(a.producer_id, a.first_offset) for a in after.aborted_transactions] == [
            (a.producer_id, a.first_offset) for a in before.aborted_transactions
        ]
        still_open.client = c
        assert still_open.end(topic, committed=True) == {0: E.none}
        assert int(fetch(c, topic, 0, READ_COMMITTED).last_stable_offset) == 12
    got = clients.confluent_consume(broker.bootstrap, topic, len(visible) + 1,
                                    config={"isolation.level": "read_committed"})  # fmt: skip
    assert [r.value for r in got] == [*visible, b"open-0"]
