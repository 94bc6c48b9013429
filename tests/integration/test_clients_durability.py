"""Restart durability with real clients on a broker process of the test's own (Odradek only: Tansu is in-memory).

- SIGTERM (controlled shutdown, exit code 0 asserted by the fixture) then start on the same log dir: every record,
  offset, log start offset, topic config and partition count is back, and the log continues where it stopped.
- kill -9 while an acks=all producer is running, then start: every acknowledged record is there at the offset it
  was acknowledged with, offsets are dense, nothing is duplicated, and producing continues after the recovered end.
- The idempotent producer's state survives both: a duplicate of an acknowledged batch sent after the restart is
  answered with its original offset and not appended again.
"""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import KafkaError, Producer, TopicPartition
from confluent_kafka.admin import ConfigResource, ResourceType
from kafka import KafkaConsumer
from kafka import TopicPartition as KTP

pytestmark = pytest.mark.odradek_only

TIMEOUT = 30
NONE, DUPLICATE_SEQUENCE_NUMBER = 0, 46


def describe_topic(clients, bootstrap, topic, keys):
    admin = clients.confluent_admin(bootstrap)
    res = ConfigResource(ResourceType.TOPIC, topic)
    entries = admin.describe_configs([res], request_timeout=TIMEOUT)[res].result(timeout=TIMEOUT)
    return {k: entries[k].value for k in keys}


def test_sigterm_restart_keeps_everything(broker_factory, clients, helpers):
    broker = broker_factory(num_partitions="2")
    boot = broker.bootstrap
    topic = clients.create_topic(boot, helpers.make_topic_name("durable"), 3, {"retention.ms": "987654321"})
    base = int(time.time() * 1000) - 300_000
    per_partition = {
        0: clients.sample_records(ts_base=base),
        1: clients.numbered_records(50, b"p1", ts_base=base),
        2: [],
    }
    clients.confluent_produce(boot, topic, per_partition[0], 0, {"acks": "all", "compression.type": "zstd"})
    clients.kafka_python_produce(boot, topic, per_partition[1], 1)  # idempotent by default
    admin = clients.confluent_admin(boot)
    tp = TopicPartition(topic, 1, 10)
    assert admin.delete_records([tp], request_timeout=TIMEOUT)[tp].result(timeout=TIMEOUT).low_watermark == 10
    auto_topic = helpers.make_topic_name("durable-auto")
    clients.confluent_produce(boot, auto_topic, [clients.Rec(b"a", b"auto")], partition=None)
    clients.wait_for_topic(boot, auto_topic, 2)
    before = {p: clients.watermarks(boot, topic, p) for p in per_partition}
    assert before == {0: (0, len(per_partition[0])), 1: (10, 50), 2: (0, 0)}

    broker.restart()  # SIGTERM, exit code 0 asserted, start on the same log dir and port

    assert {p: clients.watermarks(boot, topic, p) for p in per_partition} == before
    got0 = clients.confluent_consume(boot, topic, len(per_partition[0]), 0)
    assert clients.contents(got0) == clients.contents(per_partition[0])
    got1 = clients.kafka_python_consume(boot, topic, 40, 1)
    assert [r.offset for r in got1] == list(range(10, 50))
    assert clients.contents(got1) == clients.contents(per_partition[1][10:])
    assert describe_topic(clients, boot, topic, ["retention.ms"]) == {"retention.ms": "987654321"}
    assert len(clients.wait_for_topic(boot, topic, 3).partitions) == 3
    assert len(clients.wait_for_topic(boot, auto_topic, 2).partitions) == 2
    # the time index still answers
    kc = KafkaConsumer(bootstrap_servers=boot)
    try:
        found = kc.offsets_for_times({KTP(topic, 1): base + 20}, timeout_ms=TIMEOUT * 1000)[KTP(topic, 1)]
        assert (found.offset, found.timestamp) == (20, base + 20)
    finally:
        kc.close()
    # the log continues after the old end
    assert clients.confluent_produce(boot, topic, [clients.Rec(b"n", b"after restart")], 0) == [
        len(per_partition[0])
    ]
    # and a second restart right away (recovering what the first restart wrote) is clean too
    broker.restart()
    assert clients.watermarks(boot, topic, 0) == (0, len(per_partition[0]) + 1)


def test_kill9_keeps_every_acknowledged_record(broker_factory, clients, helpers):
    broker = broker_factory()
    boot = broker.bootstrap
    topic = clients.create_topic(boot, helpers.make_topic_name("kill9"), 2)
    acked: dict[tuple[int, int], bytes] = {}
    failed = []
    stop = threading.Event()
    lock = threading.Lock()

    def cb(err, msg):
        with lock:
            if err is None:
                acked[(msg.partition(), msg.offset())] = msg.value()
            else:
                failed.append(err)

    def produce_forever():
        # acks=all, small message timeout so that the producer gives up on the dead broker quickly
        p = Producer({"bootstrap.servers": boot, "acks": "all", "linger.ms": 2, "message.timeout.ms": 5000})
        i = 0
        while not stop.is_set():
            try:
                p.produce(topic, key=b"%d" % i, value=b"kill9-%08d" % i, partition=i % 2, on_delivery=cb)
            except BufferError:
                p.poll(0.05)
                continue
            i += 1
            if i % 100 == 0:
                p.poll(0)
                time.sleep(0.001)
        p.flush(10)

    t = threading.Thread(target=produce_forever, daemon=True)
    t.start()
    deadline = time.monotonic() + TIMEOUT
    while len(acked) < 3000 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(acked) >= 3000, f"only {len(acked)} records acknowledged before the kill"
    broker.kill()  # mid-stream: batches in flight are lost, acknowledged ones must not be
    stop.set()
    t.join(TIMEOUT)
    with lock:
        acknowledged = dict(acked)

    broker.start()

    for part in (0, 1):
        low, high = clients.watermarks(boot, topic, part)
        ours = {off: v for (p, off), v in acknowledged.items() if p == part}
        assert low == 0
        assert high >= max(ours) + 1, f"partition {part}: high watermark {high} below an acknowledged offset"
        got = clients.confluent_consume(boot, topic, high, part)
        assert [r.offset for r in got] == list(range(high)), f"partition {part}: offsets not dense"
        values = [r.value for r in got]
        assert len(set(values)) == len(values), f"partition {part}: a value appears twice"
        lost = [off for off, v in ours.items() if got[off].value != v]
        assert not lost, (
            f"partition {part}: {len(lost)} acknowledged records lost or changed, first {lost[:5]}"
        )
        nxt = clients.confluent_produce(boot, topic, [clients.Rec(b"n", b"after kill")], part)
        assert nxt == [high]


@pytest.mark.parametrize("how", ["sigterm", "kill9"])
def test_idempotent_producer_state_survives_restart(broker_factory, clients, helpers, raw, how):
    broker = broker_factory()
    topic = clients.create_topic(broker.bootstrap, helpers.make_topic_name(f"pid-{how}"), 1)
    adv = helpers.api_versions_probe(broker.host, broker.port)
    pv = raw.pick_version(adv, 0, [8, 7, 9, 3])
    iv = raw.pick_version(adv, 22, [1, 0, 2, 3, 4])
    with raw.RawClient.to(broker) as c:
        init = c.call(raw.init_producer_id(version=iv))
        assert int(init.error_code) == NONE
        pid, epoch = int(init.producer_id), int(init.producer_epoch)
        batches = [
            raw.build_batch(
                [clients.Rec(b"k", b"seq-%d-%d" % (seq, i)) for i in range(3)],
                producer_id=pid,
                producer_epoch=epoch,
                base_sequence=seq,
            )
            for seq in (0, 3, 6)
        ]
        offsets = [raw.produce_result(c.call(raw.produce(topic, 0, b, version=pv))) for b in batches[:2]]
        assert offsets == [(NONE, 0), (NONE, 3)]

    broker.restart(kill=(how == "kill9"))

    with raw.RawClient.to(broker) as c:
        # the last acknowledged batch again (a producer retry after the restart): same offset, not appended
        err, base = raw.produce_result(c.call(raw.produce(topic, 0, batches[1], version=pv)))
        assert (err, base) in ((NONE, 3), (DUPLICATE_SEQUENCE_NUMBER, 3)), (err, base)
        # the next sequence continues
        assert raw.produce_result(c.call(raw.produce(topic, 0, batches[2], version=pv))) == (NONE, 6)
        # a gap in sequence numbers is refused
        gap = raw.build_batch(
            [clients.Rec(b"k", b"gap")], producer_id=pid, producer_epoch=epoch, base_sequence=42
        )
        err, _ = raw.produce_result(c.call(raw.produce(topic, 0, gap, version=pv)))
        assert err == KafkaError.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert clients.watermarks(broker.bootstrap, topic) == (0, 9)
    values = [r.value for r in clients.confluent_consume(broker.bootstrap, topic, 9)]
    assert values == [b"seq-%d-%d" % (s, i) for s in (0, 3, 6) for i in range(3)]


def test_default_kafka_python_producer_across_restart(broker_factory, clients, helpers):
    """kafka-python 3's default producer (idempotent, acks=all) keeps producing through a broker restart
    without duplicates or sequence errors."""
    from kafka import KafkaProducer

    broker = broker_factory()
    topic = clients.create_topic(broker.bootstrap, helpers.make_topic_name("kp-restart"), 1)
    producer = KafkaProducer(bootstrap_servers=broker.bootstrap)
    try:
        first = [producer.send(topic, value=b"a-%d" % i, partition=0) for i in range(200)]
        producer.flush(timeout=30)
        assert [f.get(timeout=30).offset for f in first] == list(range(200))
        broker.restart()
        second = [producer.send(topic, value=b"b-%d" % i, partition=0) for i in range(200)]
        producer.flush(timeout=60)
        assert [f.get(timeout=60).offset for f in second] == list(range(200, 400))
    finally:
        producer.close(timeout=10)
    values = [r.value for r in clients.confluent_consume(broker.bootstrap, topic, 400)]
    assert values == [b"a-%d" % i for i in range(200)] + [b"b-%d" % i for i in range(200)]
