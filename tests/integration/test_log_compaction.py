"""Compacted topics against a real broker process with confluent-kafka: the cleaner threads keep the latest value
of each key across cleaning and restarts, consumers read across the gaps it leaves, and `__consumer_offsets`
stays bounded under repeated commits."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from broker_runtime.log.checkpoint import read_offsets
from broker_runtime.log.fs import RealFileSystem
from broker_runtime.protocol.records import iter_headers

pytestmark = pytest.mark.odradek_only  # restarts the broker and reads its log dir

CLEANER = {"log.cleaner.backoff.ms": "50"}


def _cleaned_up_to(log_dir: Path, topic: str, partition: int = 0) -> int:
    path = log_dir / "cleaner-offset-checkpoint"
    if not path.exists():
        return -1
    return read_offsets(RealFileSystem(), path).get((topic, partition), -1)


def _wait(condition, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {timeout}s")
        time.sleep(0.05)


def _log_bytes(log_dir: Path, topic: str, partition: int = 0) -> int:
    return sum(p.stat().st_size for p in (log_dir / f"{topic}-{partition}").glob("*.log"))


def _read_all(clients, bootstrap: str, topic: str, start: int | None = None) -> list:
    """Every record from `start` (default: the beginning) to the end offset, read with confluent-kafka."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    _, high = clients.watermarks(bootstrap, topic)
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "compaction-reader", "enable.auto.commit": False}
    )
    out = []
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING if start is None else start)])
        deadline = time.monotonic() + 30
        while not out or out[-1][0] < high - 1:
            assert time.monotonic() < deadline, (
                f"read {len(out)} records, up to offset {out[-1][0] if out else None}"
            )
            m = consumer.poll(0.2)
            if m is None:
                continue
            assert m.error() is None, m.error()
            out.append((m.offset(), m.key(), m.value()))
    finally:
        consumer.close()
    return out


def test_compacted_topic_keeps_latest_values_across_cleaning_and_restarts(broker_factory, clients, helpers):
    broker = broker_factory(overrides=CLEANER)
    topic = helpers.make_topic_name("compacted")
    clients.create_topic(broker.bootstrap, topic, 1, config={
        "cleanup.policy": "compact", "segment.bytes": "4096", "min.cleanable.dirty.ratio": "0.01",
    })  # fmt: skip
    # An idempotent producer, then another one that replaces every key it wrote: its last batch stays, emptied
    # (its producer state needs it), and consumers must read across that empty batch.
    records = [
        clients.Rec(b"key-%02d" % (i % 20), b"round-%03d-" % (i // 20) + b"x" * 80) for i in range(600)
    ]
    offsets = clients.confluent_produce(
        broker.bootstrap, topic, records, config={"batch.size": 2000, "enable.idempotence": True}
    )
    overwrites = [clients.Rec(b"key-%02d" % i, b"final-%02d" % i) for i in range(20)]
    overwrites.append(clients.Rec(b"key-07", None))  # a tombstone: the latest "value" of key-07
    overwrites += [clients.Rec(b"filler-%03d" % i, b"f" * 100) for i in range(100)]
    offsets += clients.confluent_produce(broker.bootstrap, topic, overwrites, config={"batch.size": 2000})
    records += overwrites
    latest = {}
    for offset, record in zip(offsets, records, strict=True):
        latest[record.key] = (offset, record.value)
    written = _log_bytes(broker.log_dir, topic)

    # cleaned past the overwrites, so the idempotent producer's batches are all cleaned
    _wait(lambda: _cleaned_up_to(broker.log_dir, topic) > offsets[620], "a cleaning pass")
    headers = [
        h for p in sorted((broker.log_dir / f"{topic}-0").glob("*.log")) for h in iter_headers(p.read_bytes())
    ]
    assert any(h.record_count == 0 and h.producer_id >= 0 for h in headers), "no emptied producer batch"
    cleaned = _read_all(clients, broker.bootstrap, topic)
    offsets_read = [o for o, _, _ in cleaned]
    assert offsets_read == sorted(offsets_read) and len(cleaned) < len(records)
    gaps = [o for o in range(offsets_read[-1]) if o not in set(offsets_read)]
    assert gaps, "nothing was removed"
    last_by_key = {k: (o, v) for o, k, v in cleaned}
    assert last_by_key == latest  # every key's latest value (and the tombstone), at its original offset
    # kafka-python reads the same records across the gaps and the emptied batch
    other = clients.kafka_python_consume(broker.bootstrap, topic, len(cleaned))
    assert [(r.offset, r.key, r.value) for r in other] == cleaned
    assert _log_bytes(broker.log_dir, topic) < written

    # A consumer positioned inside a gap gets the next record kept.
    after_gap = next(o for o in offsets_read if o > gaps[-1])
    assert _read_all(clients, broker.bootstrap, topic, start=gaps[-1])[0][0] == after_gap

    broker.restart()
    assert {k: (o, v) for o, k, v in _read_all(clients, broker.bootstrap, topic)} == latest
    more = [clients.Rec(b"key-03", b"after restart")]
    (offset,) = clients.confluent_produce(broker.bootstrap, topic, more)
    latest[b"key-03"] = (offset, b"after restart")
    broker.restart(kill=True)
    assert {k: (o, v) for o, k, v in _read_all(clients, broker.bootstrap, topic)} == latest


def test_consumer_offsets_stay_bounded_under_repeated_commits(broker_factory, clients, helpers):
    from confluent_kafka import Consumer, TopicPartition

    broker = broker_factory(overrides={
        **CLEANER, "offsets.topic.num.partitions": "1", "offsets.topic.segment.bytes": "8192",
    })  # fmt: skip
    topic = clients.create_topic(broker.bootstrap, helpers.make_topic_name("committed"), 1)
    clients.confluent_produce(broker.bootstrap, topic, [clients.Rec(b"k", b"v")] * 10)
    group = helpers.make_topic_name("group")
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    commits = 1500
    try:
        for i in range(commits):
            consumer.commit(offsets=[TopicPartition(topic, 0, i % 10 + 1)], asynchronous=False)
    finally:
        consumer.close()
    # Each commit is a ~100-byte record: uncleaned, the partition would hold well over 100 KB.
    _wait(lambda: _log_bytes(broker.log_dir, "__consumer_offsets") < 40_000, "__consumer_offsets cleaned")
    assert _cleaned_up_to(broker.log_dir, "__consumer_offsets") > 0
    # The coordinator replays the cleaned partition (gaps and all) after a restart.
    broker.restart()
    check = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    try:
        (committed,) = check.committed([TopicPartition(topic, 0)], timeout=30)
    finally:
        check.close()
    assert committed.offset == (commits - 1) % 10 + 1
