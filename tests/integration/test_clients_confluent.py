"""confluent-kafka (librdkafka) against a real broker process, default settings except the bootstrap address
(and the group.id its consumer insists on)."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

TIMEOUT = 30


def consumer(bootstrap: str, **extra) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": f"t-{uuid.uuid4().hex[:8]}", **extra})


def admin_error(future) -> KafkaError:
    with pytest.raises(KafkaException) as info:
        future.result(timeout=TIMEOUT)
    return info.value.args[0]


def describe(admin, restype, name, keys=None) -> dict[str, ConfigEntry]:
    resource = ConfigResource(restype, name)
    entries = admin.describe_configs([resource], request_timeout=TIMEOUT)[resource].result(timeout=TIMEOUT)
    return entries if keys is None else {k: entries[k] for k in keys}


def node_id(admin) -> int:
    md = admin.list_topics(timeout=TIMEOUT)
    assert len(md.brokers) == 1
    return next(iter(md.brokers))


# --------------------------------------------------------------------------------------------------------------
# produce / consume


def test_round_trip_keys_values_headers_timestamps(bootstrap, new_topic, clients):
    topic = new_topic()
    recs = clients.sample_records()
    offsets = clients.confluent_produce(bootstrap, topic, recs)
    assert offsets == list(range(len(recs)))
    got = clients.confluent_consume(bootstrap, topic, len(recs))
    assert clients.contents(got) == clients.contents(recs)
    assert [r.offset for r in got] == offsets
    assert clients.watermarks(bootstrap, topic) == (0, len(recs))


def test_timestamp_type_is_create_time(bootstrap, new_topic, clients):
    topic = new_topic()
    ts = int(time.time() * 1000) - 60_000
    clients.confluent_produce(bootstrap, topic, [clients.Rec(b"k", b"v", (), ts)])
    c = consumer(bootstrap)
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + TIMEOUT
        m = None
        while m is None and time.monotonic() < deadline:
            m = c.poll(0.2)
        assert m is not None and m.error() is None
        from confluent_kafka import TIMESTAMP_CREATE_TIME

        assert m.timestamp() == (TIMESTAMP_CREATE_TIME, ts)
    finally:
        c.close()


def test_log_append_time_topic_overrides_timestamps(bootstrap, new_topic, clients):
    topic = new_topic(config={"message.timestamp.type": "LogAppendTime"})
    old = 1_000_000_000_000  # 2001
    before = int(time.time() * 1000)
    clients.confluent_produce(bootstrap, topic, [clients.Rec(b"k", b"v", (), old)])
    c = consumer(bootstrap)
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + TIMEOUT
        m = None
        while m is None and time.monotonic() < deadline:
            m = c.poll(0.2)
        assert m is not None and m.error() is None
        from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME

        ts_type, ts = m.timestamp()
        assert ts_type == TIMESTAMP_LOG_APPEND_TIME
        assert ts >= before - 5_000, "LogAppendTime must be the broker's clock, not the producer's timestamp"
    finally:
        c.close()


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_acks(bootstrap, new_topic, clients, acks):
    topic = new_topic()
    recs = clients.numbered_records(50, prefix=f"acks{acks}".encode())
    offsets = clients.confluent_produce(bootstrap, topic, recs, config={"acks": acks})
    if acks != "0":  # with acks=0 there is no response, so no offset to check
        assert offsets == list(range(len(recs)))
    got = clients.confluent_consume(bootstrap, topic, len(recs))
    assert clients.contents(got) == clients.contents(recs)
    assert [r.offset for r in got] == list(range(len(recs)))


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_codec_round_trip(bootstrap, new_topic, clients, codec):
    topic = new_topic()
    recs = clients.sample_records()
    clients.confluent_produce(bootstrap, topic, recs, config={"compression.type": codec})
    got = clients.confluent_consume(bootstrap, topic, len(recs))
    assert clients.contents(got) == clients.contents(recs)


def test_earliest_latest(bootstrap, new_topic, clients):
    topic = new_topic(partitions=2)
    clients.confluent_produce(bootstrap, topic, clients.numbered_records(5, b"p0"), partition=0)
    clients.confluent_produce(bootstrap, topic, clients.numbered_records(2, b"p1"), partition=1)
    assert clients.watermarks(bootstrap, topic, 0) == (0, 5)
    assert clients.watermarks(bootstrap, topic, 1) == (0, 2)

    # reading from OFFSET_BEGINNING starts at the log start; the end is covered by aiokafka's seek_to_end test
    # (librdkafka exposes no fetch position before the first message, so "end" cannot be observed race-free)
    got = clients.confluent_consume(bootstrap, topic, 2, partition=1)
    assert [r.offset for r in got] == [0, 1]


def test_offsets_for_times(bootstrap, new_topic, clients):
    topic = new_topic()
    base = int(time.time() * 1000) - 600_000
    # three separate batches, timestamps 10 ms apart, so that the lookup has to find a record inside a batch
    for chunk in range(3):
        recs = [
            clients.Rec(b"k", b"v%d" % (chunk * 4 + i), (), base + 10 * (chunk * 4 + i)) for i in range(4)
        ]
        clients.confluent_produce(bootstrap, topic, recs)
    c = consumer(bootstrap)
    try:
        queries = {
            "before first": (base - 1_000, 0),
            "exact first": (base, 0),
            "exact middle": (base + 50, 5),
            "between": (base + 55, 6),
            "exact last": (base + 110, 11),
            "after last": (base + 111, -1),  # librdkafka reports OFFSET_END (-1): no such record
        }
        got = {}
        for name, (ts, _) in queries.items():  # one partition per call: a request names each partition once
            (tp,) = c.offsets_for_times([TopicPartition(topic, 0, ts)], timeout=TIMEOUT)
            assert tp.error is None, (name, tp.error)
            got[name] = tp.offset
        assert got == {name: expected for name, (_, expected) in queries.items()}
    finally:
        c.close()


def test_admin_list_offsets_specs(bootstrap, new_topic, clients):
    topic = new_topic()
    base = int(time.time() * 1000) - 600_000
    # the highest timestamp sits in the middle, as Kafka's max_timestamp spec must find it
    stamps = [base + 10, base + 20, base + 500, base + 30, base + 40]
    clients.confluent_produce(bootstrap, topic, [clients.Rec(b"k", b"v", (), ts) for ts in stamps])
    admin = clients.confluent_admin(bootstrap)
    tp = TopicPartition(topic, 0)

    def lookup(spec):
        return admin.list_offsets({tp: spec}, request_timeout=TIMEOUT)[tp].result(timeout=TIMEOUT)

    assert lookup(OffsetSpec.earliest()).offset == 0
    assert lookup(OffsetSpec.latest()).offset == 5
    mx = lookup(OffsetSpec.max_timestamp())
    assert (mx.offset, mx.timestamp) == (2, base + 500)
    ft = lookup(OffsetSpec.for_timestamp(base + 25))
    assert ft.offset == 2  # first record with timestamp >= target, in offset order


def test_idempotent_producer_no_duplicates(bootstrap, new_topic, clients):
    topic = new_topic(partitions=3)
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    delivered: list[tuple[int, int, bytes]] = []
    errors = []

    def cb(err, msg):
        if err is not None:
            errors.append(err)
        else:
            delivered.append((msg.partition(), msg.offset(), msg.value()))

    n = 3000
    for i in range(n):
        p.produce(topic, key=b"%d" % (i % 7), value=b"value-%06d" % i, on_delivery=cb)
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(TIMEOUT) == 0
    assert errors == []
    assert len(delivered) == n
    per_partition: dict[int, list[tuple[int, bytes]]] = {}
    for part, off, val in delivered:
        per_partition.setdefault(part, []).append((off, val))
    read_total = 0
    for part, items in per_partition.items():
        offsets = sorted(o for o, _ in items)
        assert offsets == list(range(len(items))), f"partition {part}: offsets not dense and unique"
        got = clients.confluent_consume(bootstrap, topic, len(items), partition=part)
        values = [r.value for r in got]
        assert len(set(values)) == len(values), f"partition {part}: duplicate values"
        assert sorted(values) == sorted(v for _, v in items)
        # one producer's sends to one partition keep their order
        assert values == sorted(values)
        read_total += len(got)
        assert clients.watermarks(bootstrap, topic, part)[1] == len(items)
    assert read_total == n


def test_max_message_bytes_enforced(bootstrap, new_topic, clients):
    topic = new_topic(config={"max.message.bytes": "2000"})
    p = Producer({"bootstrap.servers": bootstrap})
    outcome = {}

    def cb(err, msg):
        outcome["err"] = err

    p.produce(topic, value=b"x" * 5000, partition=0, on_delivery=cb)
    assert p.flush(TIMEOUT) == 0
    assert outcome["err"] is not None, (
        "a 5000-byte record was accepted by a topic with max.message.bytes=2000"
    )
    assert outcome["err"].code() == KafkaError.MSG_SIZE_TOO_LARGE, outcome["err"]
    # the partition still works and holds only the small record
    clients.confluent_produce(bootstrap, topic, [clients.Rec(b"k", b"small")])
    assert clients.watermarks(bootstrap, topic) == (0, 1)
    assert [r.value for r in clients.confluent_consume(bootstrap, topic, 1)] == [b"small"]


@pytest.mark.odradek_only
def test_unknown_topic_without_auto_create(no_autocreate_broker, clients, topic_name):
    boot = no_autocreate_broker.bootstrap
    admin = clients.confluent_admin(boot)
    md = admin.list_topics(topic=topic_name, timeout=TIMEOUT)
    t = md.topics[topic_name]
    assert t.error is not None and t.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    c = consumer(boot)
    try:
        with pytest.raises(KafkaException) as info:
            c.get_watermark_offsets(TopicPartition(topic_name, 0), timeout=TIMEOUT)
        # librdkafka turns the broker's UNKNOWN_TOPIC_OR_PARTITION in metadata into its local "unknown partition"
        assert info.value.args[0].code() in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION)
    finally:
        c.close()
    assert topic_name not in admin.list_topics(timeout=TIMEOUT).topics


def test_auto_create_on_metadata(bootstrap, clients, topic_name, helpers):
    # librdkafka's producer asks Metadata with allow_auto_topic_creation=true
    clients.confluent_produce(bootstrap, topic_name, [clients.Rec(b"k", b"auto")], partition=None)
    t = clients.wait_for_topic(bootstrap, topic_name)
    assert len(t.partitions) == helpers.SHARED_AUTO_PARTITIONS
    total = sum(clients.watermarks(bootstrap, topic_name, p)[1] for p in t.partitions)
    assert total == 1


def test_long_poll_fetch_wakes_on_append(bootstrap, new_topic, clients):
    topic = new_topic()
    # a long wait so that a broker that only answers at max wait is told apart from one that wakes on append
    c = consumer(bootstrap, **{"fetch.wait.max.ms": 20000})
    received = threading.Event()
    got: list[float] = []
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        c.poll(0.5)  # the consumer is now parked in a Fetch on an empty partition

        def produce_later():
            clients.confluent_produce(bootstrap, topic, [clients.Rec(b"k", b"wake")])

        t0 = time.monotonic()
        threading.Thread(target=produce_later, daemon=True).start()
        deadline = t0 + 40
        while not received.is_set() and time.monotonic() < deadline:
            m = c.poll(0.1)
            if m is not None and m.error() is None:
                got.append(time.monotonic() - t0)
                received.set()
        assert got, "the record never arrived"
        # loose: a broker that waits out fetch.wait.max.ms would take about 20 s
        assert got[0] < 12, f"record arrived {got[0]:.1f}s after produce: Fetch did not wake on append"
    finally:
        c.close()


# --------------------------------------------------------------------------------------------------------------
# admin: topics


def test_create_topic_with_configs(bootstrap, clients, topic_name):
    admin = clients.confluent_admin(bootstrap)
    configs = {"retention.ms": "123456789", "cleanup.policy": "delete", "max.message.bytes": "200000"}
    fs = admin.create_topics([NewTopic(topic_name, 3, 1, config=configs)], request_timeout=TIMEOUT)
    assert fs[topic_name].result(timeout=TIMEOUT) is None
    t = clients.wait_for_topic(bootstrap, topic_name, 3)
    assert sorted(t.partitions) == [0, 1, 2]
    entries = describe(admin, ResourceType.TOPIC, topic_name, configs.keys())
    assert {k: e.value for k, e in entries.items()} == configs
    for k, e in entries.items():
        assert e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value, (k, e.source)
        assert not e.is_default


def test_create_topic_default_partitions_and_replication(bootstrap, clients, topic_name, helpers):
    admin = clients.confluent_admin(bootstrap)
    fs = admin.create_topics([NewTopic(topic_name)], request_timeout=TIMEOUT)  # -1, -1: broker defaults
    fs[topic_name].result(timeout=TIMEOUT)
    t = clients.wait_for_topic(bootstrap, topic_name)
    assert len(t.partitions) == helpers.SHARED_AUTO_PARTITIONS
    assert all(p.replicas == [p.leader] for p in t.partitions.values())


def test_create_topic_validate_only(bootstrap, clients, topic_name):
    admin = clients.confluent_admin(bootstrap)
    fs = admin.create_topics(
        [NewTopic(topic_name, 2, 1, config={"retention.ms": "1000"})],
        validate_only=True,
        request_timeout=TIMEOUT,
    )
    assert fs[topic_name].result(timeout=TIMEOUT) is None
    assert topic_name not in admin.list_topics(timeout=TIMEOUT).topics
    # and validate-only still validates
    fs = admin.create_topics(
        [NewTopic(topic_name, 2, 1, config={"retention.ms": "not-a-number"})],
        validate_only=True,
        request_timeout=TIMEOUT,
    )
    assert admin_error(fs[topic_name]).code() == KafkaError.INVALID_CONFIG
    assert topic_name not in admin.list_topics(timeout=TIMEOUT).topics


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("bad-char", KafkaError.TOPIC_EXCEPTION),
        ("dot", KafkaError.TOPIC_EXCEPTION),
        ("too-long", KafkaError.TOPIC_EXCEPTION),
        ("zero-partitions", KafkaError.INVALID_PARTITIONS),
        ("replication-factor-3", KafkaError.INVALID_REPLICATION_FACTOR),
        ("unknown-config", KafkaError.INVALID_CONFIG),
        ("bad-config-value", KafkaError.INVALID_CONFIG),
        ("exists", KafkaError.TOPIC_ALREADY_EXISTS),
    ],
)
def test_create_topic_rejected(bootstrap, clients, topic_name, case, expected):
    admin = clients.confluent_admin(bootstrap)
    name, partitions, rf, config = topic_name, 1, 1, {}
    if case == "bad-char":
        name = topic_name + "!bad"
    elif case == "dot":
        name = "."
    elif case == "too-long":
        name = "x" * 250
    elif case == "zero-partitions":
        partitions = 0
    elif case == "replication-factor-3":
        rf = 3
    elif case == "unknown-config":
        config = {"no.such.config": "1"}
    elif case == "bad-config-value":
        config = {"cleanup.policy": "sometimes"}
    elif case == "exists":
        clients.create_topic(bootstrap, name)
    fs = admin.create_topics([NewTopic(name, partitions, rf, config=config)], request_timeout=TIMEOUT)
    err = admin_error(fs[name])
    assert err.code() == expected, err
    if case != "exists":
        assert name not in admin.list_topics(timeout=TIMEOUT).topics


def test_delete_topic_then_recreate_is_empty(bootstrap, new_topic, clients):
    topic = new_topic(partitions=2)
    clients.confluent_produce(bootstrap, topic, clients.numbered_records(10))
    admin = clients.confluent_admin(bootstrap)
    assert admin.delete_topics([topic], request_timeout=TIMEOUT)[topic].result(timeout=TIMEOUT) is None
    deadline = time.monotonic() + TIMEOUT
    while topic in admin.list_topics(timeout=TIMEOUT).topics and time.monotonic() < deadline:
        time.sleep(0.1)
    assert topic not in admin.list_topics(timeout=TIMEOUT).topics
    # deleting it again: UNKNOWN_TOPIC_OR_PARTITION
    assert admin_error(admin.delete_topics([topic], request_timeout=TIMEOUT)[topic]).code() == (
        KafkaError.UNKNOWN_TOPIC_OR_PART
    )
    # the same name again is a new, empty topic
    clients.create_topic(bootstrap, topic, 1)
    assert clients.watermarks(bootstrap, topic) == (0, 0)
    clients.confluent_produce(bootstrap, topic, [clients.Rec(b"k", b"fresh")])
    assert [r.value for r in clients.confluent_consume(bootstrap, topic, 1)] == [b"fresh"]


def test_create_partitions(bootstrap, new_topic, clients):
    topic = new_topic(partitions=1)
    admin = clients.confluent_admin(bootstrap)
    fs = admin.create_partitions([NewPartitions(topic, 3)], request_timeout=TIMEOUT)
    assert fs[topic].result(timeout=TIMEOUT) is None
    clients.wait_for_topic(bootstrap, topic, 3)
    clients.confluent_produce(bootstrap, topic, [clients.Rec(b"k", b"in-new-partition")], partition=2)
    assert [r.value for r in clients.confluent_consume(bootstrap, topic, 1, partition=2)] == [
        b"in-new-partition"
    ]
    # shrinking is refused
    err = admin_error(admin.create_partitions([NewPartitions(topic, 2)], request_timeout=TIMEOUT)[topic])
    assert err.code() == KafkaError.INVALID_PARTITIONS
    # validate-only does not add
    fs = admin.create_partitions([NewPartitions(topic, 5)], validate_only=True, request_timeout=TIMEOUT)
    assert fs[topic].result(timeout=TIMEOUT) is None
    assert len(admin.list_topics(timeout=TIMEOUT).topics[topic].partitions) == 3


def test_delete_records_moves_log_start(bootstrap, new_topic, clients):
    topic = new_topic()
    recs = clients.numbered_records(10)
    clients.confluent_produce(bootstrap, topic, recs)
    admin = clients.confluent_admin(bootstrap)
    tp = TopicPartition(topic, 0, 4)
    res = admin.delete_records([tp], request_timeout=TIMEOUT)[tp].result(timeout=TIMEOUT)
    assert res.low_watermark == 4
    assert clients.watermarks(bootstrap, topic) == (4, 10)
    got = clients.confluent_consume(bootstrap, topic, 6)  # from OFFSET_BEGINNING = the new log start
    assert [r.offset for r in got] == list(range(4, 10))
    assert clients.contents(got) == clients.contents(recs[4:])
    # beyond the high watermark: OFFSET_OUT_OF_RANGE
    bad = TopicPartition(topic, 0, 11)
    err = admin_error(admin.delete_records([bad], request_timeout=TIMEOUT)[bad])
    assert err.code() == KafkaError.OFFSET_OUT_OF_RANGE


# --------------------------------------------------------------------------------------------------------------
# admin: configs


def test_describe_topic_configs_values_sources_defaults_synonyms(bootstrap, new_topic, clients):
    topic = new_topic(config={"retention.ms": "86400000", "max.message.bytes": "2000000"})
    admin = clients.confluent_admin(bootstrap)
    entries = describe(admin, ResourceType.TOPIC, topic)
    # every topic config Kafka has is listed, overridden or not
    for key in (
        "cleanup.policy",
        "compression.type",
        "max.message.bytes",
        "message.timestamp.type",
        "min.insync.replicas",
        "retention.bytes",
        "retention.ms",
        "segment.bytes",
        "segment.ms",
    ):
        assert key in entries, f"DescribeConfigs lacks {key}"
    r = entries["retention.ms"]
    assert (r.value, r.source, r.is_default) == ("86400000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value, False)
    # Kafka's ConfigHelper drops broker synonyms listed before the first one named like the topic config's own
    # broker synonym: log.retention.ms is unset (only .hours has a value), so only the override remains.
    assert [(s.name, s.source) for s in r.synonyms.values()] == [
        ("retention.ms", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    ]
    # synonyms, most specific first: the topic override, then the broker's message.max.bytes
    m = entries["max.message.bytes"]
    assert [(s.name, s.value) for s in m.synonyms.values()] == [
        ("max.message.bytes", "2000000"),
        ("message.max.bytes", "1048588"),
    ]
    # no log.roll.* in the broker's config: Kafka's default, marked as such
    seg = entries["segment.ms"]
    assert seg.value == "604800000" and seg.is_default
    assert seg.source == ConfigSource.DEFAULT_CONFIG.value
    # log.segment.bytes is set in the broker's properties file: the topic inherits it as a static broker config
    sb = entries["segment.bytes"]
    assert sb.value == "1073741824"
    assert sb.source in (ConfigSource.STATIC_BROKER_CONFIG.value, ConfigSource.DEFAULT_CONFIG.value)
    assert entries["cleanup.policy"].value == "delete"
    assert entries["max.message.bytes"].value == "2000000"


def test_describe_broker_configs(bootstrap, clients, broker_target):
    admin = clients.confluent_admin(bootstrap)
    entries = describe(admin, ResourceType.BROKER, str(node_id(admin)))
    assert "num.partitions" in entries and "log.retention.hours" in entries
    if broker_target == "odradek":
        num = entries["num.partitions"]
        assert num.value == "3"  # set with --override
        assert num.source == ConfigSource.STATIC_BROKER_CONFIG.value
    ret = entries["log.retention.hours"]
    assert ret.value == "168"


def test_alter_configs_replaces_all_topic_overrides(bootstrap, new_topic, clients):
    # the legacy AlterConfigs sets the complete override set: what is not named returns to its default
    topic = new_topic(config={"retention.ms": "100000000", "segment.ms": "3600000"})
    admin = clients.confluent_admin(bootstrap)
    res = ConfigResource(ResourceType.TOPIC, topic, set_config={"retention.ms": "200000000"})
    admin.alter_configs([res], request_timeout=TIMEOUT)[res].result(timeout=TIMEOUT)
    entries = describe(admin, ResourceType.TOPIC, topic, ["retention.ms", "segment.ms"])
    assert entries["retention.ms"].value == "200000000"
    assert entries["segment.ms"].value == "604800000"
    assert entries["segment.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    # an unknown key is rejected and changes nothing
    bad = ConfigResource(ResourceType.TOPIC, topic, set_config={"no.such.config": "x"})
    err = admin_error(admin.alter_configs([bad], request_timeout=TIMEOUT)[bad])
    assert err.code() == KafkaError.INVALID_CONFIG
    assert describe(admin, ResourceType.TOPIC, topic, ["retention.ms"])["retention.ms"].value == "200000000"


def test_incremental_alter_topic_configs(bootstrap, new_topic, clients):
    topic = new_topic(config={"segment.ms": "3600000"})
    admin = clients.confluent_admin(bootstrap)
    res = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("retention.ms", "300000000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND),
        ],
    )
    admin.incremental_alter_configs([res], request_timeout=TIMEOUT)[res].result(timeout=TIMEOUT)
    entries = describe(admin, ResourceType.TOPIC, topic, ["retention.ms", "cleanup.policy", "segment.ms"])
    assert entries["retention.ms"].value == "300000000"
    assert entries["segment.ms"].value == "3600000", "incremental alter must keep other overrides"
    assert sorted(entries["cleanup.policy"].value.split(",")) == ["compact", "delete"]
    res = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[ConfigEntry("segment.ms", None, incremental_operation=AlterConfigOpType.DELETE)],
    )
    admin.incremental_alter_configs([res], request_timeout=TIMEOUT)[res].result(timeout=TIMEOUT)
    seg = describe(admin, ResourceType.TOPIC, topic, ["segment.ms"])["segment.ms"]
    assert (seg.value, seg.source) == ("604800000", ConfigSource.DEFAULT_CONFIG.value)
    # validation: a bad value is refused with INVALID_CONFIG, nothing changes
    bad = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET)
        ],
    )
    err = admin_error(admin.incremental_alter_configs([bad], request_timeout=TIMEOUT)[bad])
    assert err.code() == KafkaError.INVALID_CONFIG
    assert describe(admin, ResourceType.TOPIC, topic, ["retention.ms"])["retention.ms"].value == "300000000"


def test_incremental_alter_broker_config_and_topic_inherits_it(bootstrap, new_topic, clients):
    admin = clients.confluent_admin(bootstrap)
    broker = str(node_id(admin))
    topic = new_topic()

    def alter(op, value):
        res = ConfigResource(
            ResourceType.BROKER,
            broker,
            incremental_configs=[ConfigEntry("message.max.bytes", value, incremental_operation=op)],
        )
        admin.incremental_alter_configs([res], request_timeout=TIMEOUT)[res].result(timeout=TIMEOUT)

    alter(AlterConfigOpType.SET, "2000000")
    try:
        b = describe(admin, ResourceType.BROKER, broker, ["message.max.bytes"])["message.max.bytes"]
        assert (b.value, b.source) == ("2000000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
        t = describe(admin, ResourceType.TOPIC, topic, ["max.message.bytes"])["max.message.bytes"]
        assert t.value == "2000000", (
            "a topic without override inherits the broker's dynamic message.max.bytes"
        )
        assert t.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    finally:
        alter(AlterConfigOpType.DELETE, None)
    b = describe(admin, ResourceType.BROKER, broker, ["message.max.bytes"])["message.max.bytes"]
    assert b.value == "1048588"
    assert b.source in (ConfigSource.DEFAULT_CONFIG.value, ConfigSource.STATIC_BROKER_CONFIG.value)


def test_describe_cluster(bootstrap, clients):
    admin = clients.confluent_admin(bootstrap)
    desc = admin.describe_cluster(request_timeout=TIMEOUT).result(timeout=TIMEOUT)
    assert desc.cluster_id
    assert len(desc.nodes) == 1
    node = desc.nodes[0]
    host, port = bootstrap.rsplit(":", 1)
    assert (node.host, node.port) == (host, int(port))
    assert desc.controller is not None and desc.controller.id == node.id


def test_legacy_alter_broker_configs(bootstrap, clients):
    # AlterConfigs (not incremental) on a broker: the given set becomes the broker's whole dynamic config
    admin = clients.confluent_admin(bootstrap)
    broker = str(node_id(admin))
    res = ConfigResource(ResourceType.BROKER, broker, set_config={"log.cleaner.backoff.ms": "17000"})
    admin.alter_configs([res], request_timeout=TIMEOUT)[res].result(timeout=TIMEOUT)
    try:
        got = describe(admin, ResourceType.BROKER, broker, ["log.cleaner.backoff.ms"])[
            "log.cleaner.backoff.ms"
        ]
        assert (got.value, got.source) == ("17000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
        # a static-only key is refused and nothing changes
        bad = ConfigResource(ResourceType.BROKER, broker, set_config={"broker.id": "7"})
        err = admin_error(admin.alter_configs([bad], request_timeout=TIMEOUT)[bad])
        assert err.code() in (KafkaError.INVALID_REQUEST, KafkaError.INVALID_CONFIG), err
        got = describe(admin, ResourceType.BROKER, broker, ["log.cleaner.backoff.ms"])[
            "log.cleaner.backoff.ms"
        ]
        assert got.value == "17000"
    finally:
        empty = ConfigResource(ResourceType.BROKER, broker, set_config={})
        admin.alter_configs([empty], request_timeout=TIMEOUT)[empty].result(timeout=TIMEOUT)
    got = describe(admin, ResourceType.BROKER, broker, ["log.cleaner.backoff.ms"])["log.cleaner.backoff.ms"]
    assert (got.value, got.source) == ("15000", ConfigSource.DEFAULT_CONFIG.value)
