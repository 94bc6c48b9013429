"""Produced batches are checked record by record, as Kafka's LogValidator does: raw batches whose header lies,
garbage and bomb payloads, and records that break a topic's rules (KIP-467 record errors), against a live
broker; then librdkafka's reading of those record errors."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import zstandard
from confluent_kafka import KafkaError, Producer

CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, INVALID_TIMESTAMP, INVALID_RECORD = 2, 10, 32, 87
CODECS = [None, "gzip", "snappy", "lz4", "zstd"]


def _produce(raw, broker, topic: str, batch: bytes, partition: int = 0):
    """The partition's response to one raw produce (v8: with record errors)."""
    with raw.RawClient.to(broker) as client:
        (topic_response,) = client.call(raw.produce(topic, partition, batch, version=8)).responses
        (part,) = topic_response.partition_responses
        return part


def _log_end(raw, broker, topic: str) -> int:
    with raw.RawClient.to(broker) as client:
        return raw.fetch_result(client.call(raw.fetch(topic, 0, 0, max_wait_ms=0)))[1]


@pytest.mark.parametrize("codec", CODECS)
def test_a_batch_carrying_more_records_than_it_declares_is_refused(
    shared_broker, new_topic, raw, clients, codec
):
    topic = new_topic()
    recs = clients.numbered_records(3)
    part = _produce(raw, shared_broker, topic, raw.build_batch(recs, compression=codec, record_count=2))
    extra = len(raw.encode_record(2, recs[2], recs[0].timestamp))
    assert part.error_code == INVALID_RECORD
    assert part.error_message == f"batch declares 2 records but {extra} more bytes follow them"
    assert _log_end(raw, shared_broker, topic) == 0
    # The partition is intact: the next batch lands at offset 0 and every record has an offset of its own.
    assert _produce(raw, shared_broker, topic, raw.build_batch(clients.numbered_records(3))).base_offset == 0
    consumed = clients.confluent_consume(shared_broker.bootstrap, topic, 3)
    assert [r.offset for r in consumed] == [0, 1, 2]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("declared", [4, 2**31 - 1])
def test_a_batch_declaring_more_records_than_it_carries_is_refused(
    shared_broker, new_topic, raw, clients, codec, declared
):
    topic = new_topic()
    part = _produce(
        raw,
        shared_broker,
        topic,
        raw.build_batch(clients.numbered_records(3), compression=codec, record_count=declared),
    )
    assert (part.error_code, part.error_message) == (
        INVALID_RECORD,
        f"batch declares {declared} records but it carries 3",
    )
    assert _log_end(raw, shared_broker, topic) == 0


@pytest.mark.parametrize("codec", CODECS[1:])
@pytest.mark.parametrize("topic_config", [{}, {"cleanup.policy": "compact"}, {"compression.type": "lz4"}])
def test_garbage_compressed_payloads_are_corrupt_messages(
    shared_broker, new_topic, raw, clients, codec, topic_config
):
    """Stored, a payload that does not decompress would break every later read of the partition."""
    topic = new_topic(config=topic_config)
    garbage = (
        b"\x07garbage, not a compressed payload\x00\x01\x02" * 3
    )  # fixed: random bytes can be valid snappy
    part = _produce(
        raw,
        shared_broker,
        topic,
        raw.build_batch(clients.numbered_records(1), compression=codec, payload=garbage),
    )
    assert part.error_code == CORRUPT_MESSAGE, part.error_message
    good = clients.numbered_records(5)
    assert _produce(raw, shared_broker, topic, raw.build_batch(good, compression=codec)).error_code == 0
    assert clients.contents(clients.confluent_consume(shared_broker.bootstrap, topic, 5)) == clients.contents(
        good
    )


def _zstd_bomb(value_bytes: int, varint) -> bytes:
    """One record with a `value_bytes` zero value, zstd-compressed in a streaming way: a few KB."""
    value_length = varint(value_bytes)
    body_length = (
        1 + 1 + 1 + 1 + len(value_length) + value_bytes + 1
    )  # attrs, ts, offset, key, value, headers
    compressor = zstandard.ZstdCompressor().compressobj()
    out = [compressor.compress(varint(body_length) + b"\x00\x00\x00\x01" + value_length)]
    zeros = bytes(1 << 20)
    for _ in range(value_bytes >> 20):
        out.append(compressor.compress(zeros))
    out.append(compressor.compress(b"\x00"))
    out.append(compressor.flush())
    return b"".join(out)


def _peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


@pytest.mark.odradek_only
@pytest.mark.parametrize("topic_config", [{"cleanup.policy": "compact"}, {"compression.type": "gzip"}, {}])
def test_a_decompression_bomb_is_refused_within_bounded_memory(broker_factory, raw, clients, topic_config):
    """1 GiB of zeros in one record, 30-odd KB on the wire: refused at socket.request.max.bytes (100 MiB) of
    output, on a worker thread, without ever holding much more than that."""
    broker = broker_factory()
    topic = clients.create_topic(broker.bootstrap, f"bomb-{len(topic_config)}", 1, topic_config)
    payload = _zstd_bomb(1 << 30, raw.varint)
    assert len(payload) < 64 << 10
    rec = clients.Rec(b"k", b"")
    part = _produce(raw, broker, topic, raw.build_batch([rec], compression="zstd", payload=payload))
    assert part.error_code == MESSAGE_TOO_LARGE
    assert part.error_message == "zstd payload decompresses to more than 104857600 bytes"
    assert _peak_rss_mb(broker.pid) < 600, "the bomb was held in memory"
    good = clients.numbered_records(3)
    assert (
        _produce(raw, broker, topic, raw.build_batch([clients.Rec(b"k", r.value) for r in good])).error_code
        == 0
    )
    assert _log_end(raw, broker, topic) == 3


def test_keyless_records_on_a_compacted_topic_are_named(shared_broker, new_topic, raw, clients):
    topic = new_topic(config={"cleanup.policy": "compact"})
    recs = [
        clients.Rec(b"a", b"1"),
        clients.Rec(None, b"2"),
        clients.Rec(b"c", b"3"),
        clients.Rec(None, b"4"),
    ]
    for codec in (None, "lz4"):
        part = _produce(raw, shared_broker, topic, raw.build_batch(recs, compression=codec))
        assert part.error_code == INVALID_RECORD
        assert [(e.batch_index, e.batch_index_error_message) for e in part.record_errors] == [
            (1, "a compacted topic accepts only records with a key"),
            (3, "a compacted topic accepts only records with a key"),
        ]
        assert part.error_message == "2 of 4 records have no key, which a compacted topic requires"
    assert _log_end(raw, shared_broker, topic) == 0


def test_a_record_with_a_timestamp_out_of_bounds_is_named(shared_broker, new_topic, raw, clients):
    """The batch header's first and max timestamps are in bounds; the middle record is two hours old."""
    topic = new_topic(config={"message.timestamp.before.max.ms": "3600000"})
    now = int(time.time() * 1000)
    recs = [clients.Rec(b"a", b"1", timestamp=now), clients.Rec(b"b", b"2", timestamp=now - 7_200_000),
            clients.Rec(b"c", b"3", timestamp=now)]  # fmt: skip
    part = _produce(raw, shared_broker, topic, raw.build_batch(recs))
    assert part.error_code == INVALID_TIMESTAMP
    assert [e.batch_index for e in part.record_errors] == [1]
    assert part.record_errors[0].batch_index_error_message.startswith("timestamp outside [")
    assert _log_end(raw, shared_broker, topic) == 0


def test_pipelined_batches_are_appended_in_arrival_order(shared_broker, new_topic, raw, clients):
    """Batches checked on a worker thread (those decompressing to more than 128 KiB) and those checked at once
    keep their order."""
    topic = new_topic(config={"cleanup.policy": "compact"})
    batches = [
        raw.build_batch([clients.Rec(b"k", str(i).encode() * (150_000 if i % 3 == 0 else 1))],
                        compression=CODECS[i % len(CODECS)])
        for i in range(30)
    ]  # fmt: skip
    with raw.RawClient.to(shared_broker) as client:
        requests = [raw.produce(topic, 0, b, version=8) for b in batches]
        for request in requests:
            client.send(request)
        offsets = [raw.produce_result(client.recv(type(request))[1]) for request in requests]
    assert offsets == [(0, i) for i in range(30)]
    consumed = clients.confluent_consume(shared_broker.bootstrap, topic, 30)
    assert [r.value[: len(str(i))] for i, r in enumerate(consumed)] == [str(i).encode() for i in range(30)]


def test_librdkafka_fails_only_the_keyless_records_with_invalid_record(bootstrap, new_topic):
    """KIP-467 from the client's side: the records named in record_errors fail with INVALID_RECORD, the others
    in the batch with librdkafka's _INVALID_DIFFERENT_RECORD."""
    topic = new_topic(config={"cleanup.policy": "compact"})
    reports: dict[int, KafkaError | None] = {}
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1000, "batch.num.messages": 100})
    keys = [b"a", None, b"c", None, b"e"]
    for i, key in enumerate(keys):
        producer.produce(topic, b"v%d" % i, key=key, partition=0,
                         on_delivery=lambda err, msg, i=i: reports.__setitem__(i, err))  # fmt: skip
    assert producer.flush(30) == 0
    codes = [reports[i].code() if reports[i] else None for i in range(len(keys))]
    assert codes == [KafkaError._INVALID_DIFFERENT_RECORD, KafkaError.INVALID_RECORD,
                     KafkaError._INVALID_DIFFERENT_RECORD, KafkaError.INVALID_RECORD,
                     KafkaError._INVALID_DIFFERENT_RECORD]  # fmt: skip


def test_whatever_is_accepted_reads_back_one_record_per_offset(shared_broker, new_topic, raw, clients):
    """Seeded fuzz: batches with bytes of their records flipped, cut or added, the CRC made right again. The
    broker answers each with a code; whatever it accepts, a consumer (checking CRCs) reads back whole, with
    every offset up to the log end carrying exactly one record."""
    import random

    import crc32c

    rng = random.Random(467)
    topic = new_topic()
    allowed = {0, CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, INVALID_RECORD}
    with raw.RawClient.to(shared_broker) as client:
        for i in range(300):
            recs = [clients.Rec(rng.choice([None, b"k%d" % j]), rng.randbytes(rng.randrange(0, 300)),
                                (("h", b"x"),) if rng.random() < 0.3 else ()) for j in range(rng.randrange(1, 8))]  # fmt: skip
            batch = bytearray(raw.build_batch(recs, compression=rng.choice(CODECS)))
            for _ in range(rng.randrange(0, 3)):
                where = rng.randrange(61, len(batch))
                kind = rng.random()
                if kind < 0.6:
                    batch[where] = rng.randrange(256)
                elif kind < 0.8:
                    del batch[where : where + rng.randrange(1, 8)]
                else:
                    batch[where:where] = rng.randbytes(rng.randrange(1, 8))
            batch[8:12] = (len(batch) - 12).to_bytes(4, "big")
            batch[17:21] = crc32c.crc32c(bytes(batch[21:])).to_bytes(4, "big")
            error, _ = raw.produce_result(client.call(raw.produce(topic, 0, bytes(batch), version=8)))
            assert error in allowed, f"batch {i}: error {error}"
    log_end = _log_end(raw, shared_broker, topic)
    assert log_end > 0, "no batch survived the fuzz: the test proves nothing"
    consumed = clients.confluent_consume(shared_broker.bootstrap, topic, log_end, config={"check.crcs": True})
    assert [r.offset for r in consumed] == list(range(log_end))
