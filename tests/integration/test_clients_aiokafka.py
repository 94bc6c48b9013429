"""aiokafka against a real broker process, default settings except the bootstrap address.

aiokafka negotiates with ApiVersions v0 only and then uses the highest version it implements inside the broker's
range; its admin client returns raw responses, so Kafka error codes are checked directly."""

from __future__ import annotations

import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions, NewTopic, RecordsToDelete
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import MessageSizeTooLargeError

# Kafka error codes
NONE, UNKNOWN_TOPIC_OR_PARTITION, INVALID_TOPIC_EXCEPTION = 0, 3, 17
TOPIC_ALREADY_EXISTS, INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR, INVALID_CONFIG = 36, 37, 38, 40


async def with_admin(bootstrap, fn):
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return await fn(admin)
    finally:
        await admin.close()


def admin_call(clients, bootstrap, fn):
    return clients.run_async(with_admin(bootstrap, fn))


def topic_errors(response) -> dict[str, int]:
    return {t["topic"]: t["error_code"] for t in response.to_object()["topic_errors"]}


def config_entries(responses) -> dict[str, dict]:
    out = {}
    for response in responses:
        for res in response.to_object()["resources"]:
            assert res["error_code"] == NONE, res
            for e in res["config_entries"]:
                out[e["config_names"]] = e
    return out


# --------------------------------------------------------------------------------------------------------------
# produce / consume


def test_round_trip_keys_values_headers_timestamps(bootstrap, new_topic, clients):
    topic = new_topic()
    recs = clients.sample_records()
    offsets = clients.aiokafka_produce(bootstrap, topic, recs)
    assert offsets == list(range(len(recs)))
    got = clients.aiokafka_consume(bootstrap, topic, len(recs))
    assert clients.contents(got) == clients.contents(recs)
    assert [r.offset for r in got] == offsets


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_acks(bootstrap, new_topic, clients, acks):
    topic = new_topic()
    recs = clients.numbered_records(30, prefix=f"aio-acks-{acks}".encode())
    offsets = clients.aiokafka_produce(bootstrap, topic, recs, acks=acks)
    if acks != 0:
        assert offsets == list(range(len(recs)))
    got = clients.aiokafka_consume(bootstrap, topic, len(recs))
    assert clients.contents(got) == clients.contents(recs)
    assert [r.offset for r in got] == list(range(len(recs)))


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_codec_round_trip(bootstrap, new_topic, clients, codec):
    topic = new_topic()
    recs = clients.sample_records()
    clients.aiokafka_produce(bootstrap, topic, recs, compression_type=codec)
    got = clients.aiokafka_consume(bootstrap, topic, len(recs))
    assert clients.contents(got) == clients.contents(recs)


def test_idempotent_producer(bootstrap, new_topic, clients):
    topic = new_topic(partitions=2)

    async def run():
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True)
        await producer.start()
        try:
            futs = [await producer.send(topic, key=b"%d" % (i % 5), value=b"i-%05d" % i) for i in range(1500)]
            return [await f for f in futs]
        finally:
            await producer.stop()

    metas = clients.run_async(run())
    per_partition: dict[int, list[int]] = {}
    for m in metas:
        per_partition.setdefault(m.partition, []).append(m.offset)
    for part, offsets in per_partition.items():
        assert offsets == list(range(len(offsets))), (
            f"partition {part}: offsets not dense, ordered and unique"
        )
        values = [r.value for r in clients.aiokafka_consume(bootstrap, topic, len(offsets), partition=part)]
        assert len(set(values)) == len(values) == len(offsets)
    assert sum(len(v) for v in per_partition.values()) == 1500


def test_offsets_beginning_end_and_for_times(bootstrap, new_topic, clients):
    topic = new_topic()
    base = int(time.time() * 1000) - 1_200_000
    recs = [clients.Rec(b"k", b"t%d" % i, (), base + 1000 * i) for i in range(6)]
    clients.aiokafka_produce(bootstrap, topic, recs[:3])
    clients.aiokafka_produce(bootstrap, topic, recs[3:])
    tp = TopicPartition(topic, 0)

    async def run():
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap)
        await c.start()
        try:
            begin = await c.beginning_offsets([tp])
            end = await c.end_offsets([tp])
            lookups = {}
            for ts in (base - 5, base + 1500, base + 3000, base + 5000, base + 5001):
                r = (await c.offsets_for_times({tp: ts}))[tp]
                lookups[ts] = None if r is None else (r.offset, r.timestamp)
            return begin, end, lookups
        finally:
            await c.stop()

    begin, end, lookups = clients.run_async(run())
    assert (begin, end) == ({tp: 0}, {tp: 6})
    assert lookups == {
        base - 5: (0, base),
        base + 1500: (2, base + 2000),
        base + 3000: (3, base + 3000),
        base + 5000: (5, base + 5000),
        base + 5001: None,  # aiokafka: no record at or after the timestamp
    }


def test_seek_to_end_then_new_records(bootstrap, new_topic, clients):
    topic = new_topic()
    clients.aiokafka_produce(bootstrap, topic, clients.numbered_records(4, b"old"))
    tp = TopicPartition(topic, 0)

    async def run():
        c = AIOKafkaConsumer(bootstrap_servers=bootstrap)
        await c.start()
        try:
            c.assign([tp])
            await c.seek_to_end(tp)
            pos = await c.position(tp)
            p = AIOKafkaProducer(bootstrap_servers=bootstrap)
            await p.start()
            try:
                await p.send_and_wait(topic, b"new-1", partition=0)
                await p.send_and_wait(topic, b"new-2", partition=0)
            finally:
                await p.stop()
            got = []
            deadline = time.monotonic() + 30
            while len(got) < 2 and time.monotonic() < deadline:
                for msgs in (await c.getmany(tp, timeout_ms=200)).values():
                    got += [(m.offset, m.value) for m in msgs]
            return pos, got
        finally:
            await c.stop()

    pos, got = clients.run_async(run())
    assert pos == 4
    assert got == [(4, b"new-1"), (5, b"new-2")]


def test_max_message_bytes_enforced(bootstrap, new_topic, clients):
    topic = new_topic(config={"max.message.bytes": "4000"})

    async def run():
        p = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await p.start()
        try:
            with pytest.raises(MessageSizeTooLargeError):
                await p.send_and_wait(topic, b"z" * 20_000, partition=0)
            return await p.send_and_wait(topic, b"fits", partition=0)
        finally:
            await p.stop()

    meta = clients.run_async(run())
    assert meta.offset == 0
    assert [r.value for r in clients.aiokafka_consume(bootstrap, topic, 1)] == [b"fits"]


@pytest.mark.odradek_only
def test_unknown_topic_without_auto_create(no_autocreate_broker, clients, topic_name):
    async def run():
        c = AIOKafkaConsumer(bootstrap_servers=no_autocreate_broker.bootstrap)
        await c.start()
        try:
            topics = await c.topics()  # refreshes metadata
            return c.partitions_for_topic(topic_name), topics
        finally:
            await c.stop()

    partitions, topics = clients.run_async(run())
    assert partitions is None
    assert topic_name not in topics

    resp = admin_call(clients, no_autocreate_broker.bootstrap, lambda a: a.describe_topics([topic_name]))
    assert [t["error_code"] for t in resp] == [UNKNOWN_TOPIC_OR_PARTITION]


# --------------------------------------------------------------------------------------------------------------
# admin


def test_admin_create_topics_errors_and_configs(bootstrap, clients, helpers):
    good = helpers.make_topic_name("aio-good")
    exists = helpers.make_topic_name("aio-exists")
    clients.create_topic(bootstrap, exists)
    topics = [
        NewTopic(good, 2, 1, topic_configs={"retention.ms": "5000000", "cleanup.policy": "compact"}),
        NewTopic(exists, 1, 1),
        NewTopic("bad/name", 1, 1),
        NewTopic(helpers.make_topic_name("aio-zero"), 0, 1),
        NewTopic(helpers.make_topic_name("aio-rf"), 1, 5),
        NewTopic(helpers.make_topic_name("aio-cfg"), 1, 1, topic_configs={"retention.msx": "1"}),
    ]
    resp = admin_call(clients, bootstrap, lambda a: a.create_topics(topics))
    errors = topic_errors(resp)
    assert [errors[t.name] for t in topics] == [
        NONE,
        TOPIC_ALREADY_EXISTS,
        INVALID_TOPIC_EXCEPTION,
        INVALID_PARTITIONS,
        INVALID_REPLICATION_FACTOR,
        INVALID_CONFIG,
    ]
    clients.wait_for_topic(bootstrap, good, 2)
    listed = admin_call(clients, bootstrap, lambda a: a.list_topics())
    assert good in listed
    assert not {t.name for t in topics[2:]} & set(listed)
    resp = admin_call(
        clients,
        bootstrap,
        lambda a: a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, good)], include_synonyms=True),
    )
    entries = config_entries(resp)
    assert entries["retention.ms"]["config_value"] == "5000000"
    assert entries["cleanup.policy"]["config_value"] == "compact"
    assert entries["retention.ms"]["config_source"] == 1  # DYNAMIC_TOPIC_CONFIG
    # deploy/standalone.properties sets no log.roll.*, so segment.ms is Kafka's default
    assert entries["segment.ms"]["config_source"] == 5  # DEFAULT_CONFIG
    assert entries["segment.ms"]["config_value"] == "604800000"


def test_admin_validate_only(bootstrap, clients, topic_name):
    resp = admin_call(
        clients, bootstrap, lambda a: a.create_topics([NewTopic(topic_name, 3, 1)], validate_only=True)
    )
    assert topic_errors(resp) == {topic_name: NONE}
    assert topic_name not in admin_call(clients, bootstrap, lambda a: a.list_topics())


def test_admin_delete_topics_and_create_partitions(bootstrap, new_topic, clients):
    gone, grows = new_topic(), new_topic(partitions=1)
    resp = admin_call(clients, bootstrap, lambda a: a.delete_topics([gone]))
    assert {
        t["name"] if "name" in t else t["topic"]: t["error_code"]
        for t in resp.to_object()["topic_error_codes"]
    } == {gone: NONE}
    resp = admin_call(clients, bootstrap, lambda a: a.create_partitions({grows: NewPartitions(4)}))
    results = resp.to_object()["topic_errors"]
    assert [(r["topic"], r["error_code"]) for r in results] == [(grows, NONE)]
    clients.wait_for_topic(bootstrap, grows, 4)
    deadline = time.monotonic() + 30
    while gone in admin_call(clients, bootstrap, lambda a: a.list_topics()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert gone not in admin_call(clients, bootstrap, lambda a: a.list_topics())


def test_admin_alter_configs(bootstrap, new_topic, clients):
    topic = new_topic(config={"segment.ms": "7200000"})
    resp = admin_call(
        clients,
        bootstrap,
        lambda a: a.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, {"retention.ms": "9000000"})]
        ),
    )
    results = [r for response in resp for r in response.to_object()["resources"]]
    assert [(r["resource_name"], r["error_code"]) for r in results] == [(topic, NONE)]
    entries = config_entries(
        admin_call(
            clients,
            bootstrap,
            lambda a: a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)]),
        )
    )
    assert entries["retention.ms"]["config_value"] == "9000000"
    # AlterConfigs (not incremental) replaced the whole override set
    assert entries["segment.ms"]["config_value"] == "604800000"


def test_admin_delete_records_and_describe_cluster(bootstrap, new_topic, clients):
    topic = new_topic()
    clients.aiokafka_produce(bootstrap, topic, clients.numbered_records(6))
    tp = TopicPartition(topic, 0)
    result = admin_call(clients, bootstrap, lambda a: a.delete_records({tp: RecordsToDelete(2)}))
    assert result == {tp: 2}
    assert clients.watermarks(bootstrap, topic) == (2, 6)
    assert [r.offset for r in clients.aiokafka_consume(bootstrap, topic, 4)] == [2, 3, 4, 5]
    cluster = admin_call(clients, bootstrap, lambda a: a.describe_cluster())
    assert cluster["cluster_id"]
    (broker,) = cluster["brokers"]
    assert cluster["controller_id"] == broker["node_id"]
    assert f"{broker['host']}:{broker['port']}" == bootstrap
