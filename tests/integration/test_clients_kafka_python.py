"""kafka-python 3 against a real broker process, default settings except the bootstrap address.

kafka-python 3's producer defaults are idempotence on and acks=all, so every default-producer test here also
exercises InitProducerId and sequence numbers."""

from __future__ import annotations

import time

import kafka.errors as Errors
import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import AlterConfigOp, ConfigResource, ConfigResourceType, OffsetSpec

TIMEOUT_MS = 30_000


@pytest.fixture
def admin(bootstrap, clients):
    a = clients.kafka_python_admin(bootstrap)
    yield a
    a.close()


def topic_configs(admin, topic, keys=None, synonyms=False) -> dict[str, dict]:
    res = admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, topic)], include_synonyms=synonyms, config_filter="all"
    )
    entries = res["topic"][topic]
    return entries if keys is None else {k: entries[k] for k in keys}


def node_id(admin) -> int:
    brokers = admin.describe_cluster()["brokers"]
    assert len(brokers) == 1
    return brokers[0]["broker_id"]


# --------------------------------------------------------------------------------------------------------------
# produce / consume


def test_default_producer_is_idempotent_and_round_trips(bootstrap, new_topic, clients):
    topic = new_topic()
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    try:
        assert producer.config["acks"] == -1
        assert producer.config["enable_idempotence"] is True
    finally:
        producer.close(timeout=10)
    recs = clients.sample_records()
    offsets = clients.kafka_python_produce(bootstrap, topic, recs)
    assert offsets == list(range(len(recs)))
    got = clients.kafka_python_consume(bootstrap, topic, len(recs))
    assert clients.contents(got) == clients.contents(recs)
    assert [r.offset for r in got] == offsets


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_acks(bootstrap, new_topic, clients, acks):
    topic = new_topic()
    recs = clients.numbered_records(40, prefix=f"kp-acks-{acks}".encode())
    # idempotence requires acks=all; for 0 and 1 it has to be switched off
    extra = {} if acks == "all" else {"enable_idempotence": False}
    offsets = clients.kafka_python_produce(bootstrap, topic, recs, acks=acks, **extra)
    if acks != 0:  # with acks=0 there is no response, so no offset to check
        assert offsets == list(range(len(recs)))
    got = clients.kafka_python_consume(bootstrap, topic, len(recs))
    assert clients.contents(got) == clients.contents(recs)


@pytest.mark.parametrize("codec", [None, "gzip", "snappy", "lz4", "zstd"])
def test_codec_round_trip(bootstrap, new_topic, clients, codec):
    topic = new_topic()
    recs = clients.sample_records()
    clients.kafka_python_produce(bootstrap, topic, recs, compression_type=codec)
    got = clients.kafka_python_consume(bootstrap, topic, len(recs))
    assert clients.contents(got) == clients.contents(recs)


def test_beginning_end_offsets_and_offsets_for_times(bootstrap, new_topic, clients):
    topic = new_topic(partitions=2)
    base = int(time.time() * 1000) - 900_000
    recs = [clients.Rec(b"k", b"v%d" % i, (), base + 100 * i) for i in range(10)]
    clients.kafka_python_produce(bootstrap, topic, recs[:5])  # two batches
    clients.kafka_python_produce(bootstrap, topic, recs[5:])
    c = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
        assert c.beginning_offsets([tp0, tp1], timeout_ms=TIMEOUT_MS) == {tp0: 0, tp1: 0}
        assert c.end_offsets([tp0, tp1], timeout_ms=TIMEOUT_MS) == {tp0: 10, tp1: 0}
        found = {}
        for name, ts in {
            "before": base - 1,
            "first": base,
            "inside": base + 350,
            "second batch": base + 500,
            "last": base + 900,
            "after last": base + 901,
        }.items():
            r = c.offsets_for_times({tp0: ts}, timeout_ms=TIMEOUT_MS)[tp0]
            found[name] = None if r is None else (r.offset, r.timestamp)
        assert found == {
            "before": (0, base),
            "first": (0, base),
            "inside": (4, base + 400),
            "second batch": (5, base + 500),
            "last": (9, base + 900),
            "after last": None,  # kafka-python: no record at or after the timestamp
        }
        # an empty partition has no record for any timestamp
        assert c.offsets_for_times({tp1: base}, timeout_ms=TIMEOUT_MS)[tp1] is None
    finally:
        c.close()


def test_admin_list_partition_offsets(bootstrap, new_topic, clients, admin):
    topic = new_topic()
    base = int(time.time() * 1000) - 900_000
    stamps = [base + 5, base + 900, base + 10]
    clients.kafka_python_produce(bootstrap, topic, [clients.Rec(b"k", b"v", (), ts) for ts in stamps])
    tp = TopicPartition(topic, 0)
    assert admin.list_partition_offsets({tp: OffsetSpec.EARLIEST})[tp].offset == 0
    assert admin.list_partition_offsets({tp: OffsetSpec.LATEST})[tp].offset == 3
    mx = admin.list_partition_offsets({tp: OffsetSpec.MAX_TIMESTAMP})[tp]
    assert (mx.offset, mx.timestamp) == (1, base + 900)


def test_idempotent_producer_many_partitions_no_duplicates(bootstrap, new_topic, clients):
    topic = new_topic(partitions=4)
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    n = 2000
    try:
        futures = [producer.send(topic, key=b"%d" % (i % 11), value=b"v-%06d" % i) for i in range(n)]
        producer.flush(timeout=30)
        metas = [f.get(timeout=30) for f in futures]
    finally:
        producer.close(timeout=10)
    per_partition: dict[int, list[int]] = {}
    for m in metas:
        per_partition.setdefault(m.partition, []).append(m.offset)
    total = 0
    for part, offsets in per_partition.items():
        assert offsets == sorted(offsets), "one producer's sends to a partition get increasing offsets"
        assert offsets == list(range(len(offsets))), f"partition {part}: gaps or duplicates in offsets"
        got = clients.kafka_python_consume(bootstrap, topic, len(offsets), partition=part)
        values = [r.value for r in got]
        assert len(set(values)) == len(values)
        total += len(got)
        assert clients.watermarks(bootstrap, topic, part)[1] == len(offsets)
    assert total == n


def test_max_message_bytes_enforced(bootstrap, new_topic, clients):
    topic = new_topic(config={"max.message.bytes": "3000"})
    producer = KafkaProducer(bootstrap_servers=bootstrap, retries=0)
    try:
        fut = producer.send(topic, value=b"y" * 10_000, partition=0)
        with pytest.raises(Errors.MessageSizeTooLargeError):
            fut.get(timeout=30)
    finally:
        producer.close(timeout=10)
    clients.kafka_python_produce(bootstrap, topic, [clients.Rec(None, b"ok")])
    assert [r.value for r in clients.kafka_python_consume(bootstrap, topic, 1)] == [b"ok"]


@pytest.mark.odradek_only
def test_unknown_topic_without_auto_create(no_autocreate_broker, clients, topic_name):
    a = clients.kafka_python_admin(no_autocreate_broker.bootstrap)
    try:
        (described,) = a.describe_topics([topic_name])
        assert described["error_code"] == Errors.UnknownTopicOrPartitionError.errno, described
        assert topic_name not in a.list_topics()
    finally:
        a.close()
    c = KafkaConsumer(bootstrap_servers=no_autocreate_broker.bootstrap)
    try:
        assert not c.partitions_for_topic(topic_name)  # None or empty: no partitions known
    finally:
        c.close()


def test_auto_create_on_produce(bootstrap, clients, topic_name, helpers):
    offsets = clients.kafka_python_produce(
        bootstrap, topic_name, [clients.Rec(b"k", b"auto")], partition=None
    )
    assert offsets == [0]
    t = clients.wait_for_topic(bootstrap, topic_name)
    assert len(t.partitions) == helpers.SHARED_AUTO_PARTITIONS


def test_long_poll_fetch_wakes_on_append(bootstrap, new_topic, clients):
    import threading

    topic = new_topic()
    c = KafkaConsumer(bootstrap_servers=bootstrap, fetch_max_wait_ms=20_000)
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek(tp, 0)
        c.poll(timeout_ms=500)  # a Fetch is now parked on the empty partition

        def produce():
            clients.kafka_python_produce(bootstrap, topic, [clients.Rec(b"k", b"wake")])

        t0 = time.monotonic()
        threading.Thread(target=produce, daemon=True).start()
        got = None
        while got is None and time.monotonic() - t0 < 40:
            for msgs in c.poll(timeout_ms=200).values():
                got = (time.monotonic() - t0, msgs[0].value)
        assert got is not None and got[1] == b"wake"
        assert got[0] < 12, f"record arrived {got[0]:.1f}s after produce: Fetch did not wake on append"
    finally:
        c.close()


# --------------------------------------------------------------------------------------------------------------
# admin


def test_create_topics_with_configs_and_validate_only(bootstrap, clients, admin, helpers):
    name = helpers.make_topic_name("kp-create")
    configs = {"retention.ms": "7200000", "segment.bytes": "10485760"}
    admin.create_topics({name: {"num_partitions": 2, "replication_factor": 1, "configs": configs}})
    clients.wait_for_topic(bootstrap, name, 2)
    got = topic_configs(admin, name, configs.keys())
    assert {k: v["value"] for k, v in got.items()} == configs
    assert {v["config_source"] for v in got.values()} == {"DYNAMIC_TOPIC_CONFIG"}

    other = helpers.make_topic_name("kp-validate")
    admin.create_topics({other: {"num_partitions": 3, "replication_factor": 1}}, validate_only=True)
    assert other not in admin.list_topics()


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ({"name": "has space", "num_partitions": 1}, Errors.InvalidTopicError),
        ({"name": "..", "num_partitions": 1}, Errors.InvalidTopicError),
        ({"num_partitions": 0}, Errors.InvalidPartitionsError),
        ({"num_partitions": 1, "replication_factor": 2}, Errors.InvalidReplicationFactorError),
        ({"num_partitions": 1, "configs": {"retention.bogus": "1"}}, Errors.InvalidConfigurationError),
        ({"num_partitions": 1, "configs": {"min.insync.replicas": "-5"}}, Errors.InvalidConfigurationError),
    ],
    ids=["space", "dotdot", "zero-partitions", "rf2", "unknown-config", "bad-value"],
)
def test_create_topics_rejected(admin, topic_name, spec, error):
    spec = dict(spec)
    name = spec.pop("name", topic_name)
    spec.setdefault("replication_factor", 1)
    with pytest.raises(error):
        admin.create_topics({name: spec})
    assert name not in admin.list_topics()


def test_create_existing_topic(admin, new_topic):
    topic = new_topic()
    with pytest.raises(Errors.TopicAlreadyExistsError):
        admin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1}})


def test_delete_topics_and_create_partitions(bootstrap, new_topic, clients, admin):
    gone = new_topic()
    grows = new_topic(partitions=2)
    admin.delete_topics([gone])
    deadline = time.monotonic() + 30
    while gone in admin.list_topics() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert gone not in admin.list_topics()
    with pytest.raises(Errors.UnknownTopicOrPartitionError):
        admin.delete_topics([gone])

    admin.create_partitions({grows: 5})
    clients.wait_for_topic(bootstrap, grows, 5)
    with pytest.raises(Errors.InvalidPartitionsError):
        admin.create_partitions({grows: 5})  # same count: not an increase
    clients.kafka_python_produce(bootstrap, grows, [clients.Rec(b"k", b"p4")], partition=4)
    assert [r.value for r in clients.kafka_python_consume(bootstrap, grows, 1, partition=4)] == [b"p4"]


def test_describe_configs_with_synonyms(new_topic, admin):
    topic = new_topic(config={"max.message.bytes": "500000"})
    entries = topic_configs(admin, topic, synonyms=True)
    mmb = entries["max.message.bytes"]
    assert mmb["value"] == "500000" and mmb["config_source"] == "DYNAMIC_TOPIC_CONFIG"
    syn = [(s["name"], s["source"]) for s in mmb["synonyms"]]
    assert syn[0] == ("max.message.bytes", "DYNAMIC_TOPIC_CONFIG")
    assert ("message.max.bytes", "DEFAULT_CONFIG") in syn or (
        "message.max.bytes",
        "STATIC_BROKER_CONFIG",
    ) in syn
    ct = entries["compression.type"]
    assert (ct["value"], ct["config_source"]) == ("producer", "DEFAULT_CONFIG")
    assert entries["cleanup.policy"]["value"] == "delete"
    # only-modified filter: exactly the override
    modified = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])["topic"][topic]
    assert set(modified) == {"max.message.bytes"}


def test_describe_broker_configs(admin, broker_target):
    nid = node_id(admin)
    res = admin.describe_configs(
        [ConfigResource(ConfigResourceType.BROKER, str(nid))], include_synonyms=True, config_filter="all"
    )
    entries = res["broker"][str(nid)]
    for key in (
        "broker.id",
        "log.dirs",
        "num.partitions",
        "message.max.bytes",
        "log.retention.hours",
        "auto.create.topics.enable",
        "log.segment.bytes",
    ):
        assert key in entries, f"broker DescribeConfigs lacks {key}"
    if broker_target == "odradek":
        assert entries["broker.id"]["value"] == str(nid)
        assert entries["num.partitions"]["value"] == "3"
        assert entries["num.partitions"]["config_source"] == "STATIC_BROKER_CONFIG"
        assert entries["message.max.bytes"]["config_source"] == "DEFAULT_CONFIG"


def test_alter_configs_legacy_and_incremental(new_topic, admin):
    topic = new_topic(config={"retention.ms": "1000000", "segment.ms": "3600000"})
    # incremental: SET one, DELETE another, the rest untouched
    result = admin.alter_configs(
        [
            ConfigResource(
                ConfigResourceType.TOPIC,
                topic,
                {
                    "retention.ms": (AlterConfigOp.SET, "2000000"),
                    "segment.ms": (AlterConfigOp.DELETE, None),
                    "flush.messages": (AlterConfigOp.SET, "1000"),
                },
            )
        ],
        incremental=True,
    )
    assert result == {"topic": {topic: "OK"}}
    got = topic_configs(admin, topic, ["retention.ms", "segment.ms", "flush.messages"])
    assert got["retention.ms"]["value"] == "2000000"
    assert (got["segment.ms"]["value"], got["segment.ms"]["config_source"]) == ("604800000", "DEFAULT_CONFIG")
    assert got["flush.messages"]["value"] == "1000"
    # legacy AlterConfigs replaces every override; kafka-python therefore re-sends the other modified keys
    result = admin.alter_configs(
        [ConfigResource(ConfigResourceType.TOPIC, topic, {"retention.ms": "3000000"})], incremental=False
    )
    assert result == {"topic": {topic: "OK"}}
    got = topic_configs(admin, topic, ["retention.ms", "flush.messages"])
    assert got["retention.ms"]["value"] == "3000000"
    assert (got["flush.messages"]["value"], got["flush.messages"]["config_source"]) == (
        "1000",
        "DYNAMIC_TOPIC_CONFIG",
    )
    # unknown keys are refused (raise_on_unknown=False lets the broker decide); kafka-python returns the error
    result = admin.alter_configs(
        [ConfigResource(ConfigResourceType.TOPIC, topic, {"retention.nonsense": "1"})],
        incremental=True,
        raise_on_unknown=False,
    )
    assert "InvalidConfigurationError" in result["topic"][topic], result


def test_alter_broker_config_incremental_and_reset(admin):
    nid = str(node_id(admin))
    resource = ConfigResource(ConfigResourceType.BROKER, nid, {"log.cleaner.backoff.ms": "20000"})
    assert admin.alter_configs([resource], incremental=True) == {"broker": {nid: "OK"}}
    try:
        got = admin.describe_configs(
            [ConfigResource(ConfigResourceType.BROKER, nid, ["log.cleaner.backoff.ms"])], config_filter="all"
        )["broker"][nid]["log.cleaner.backoff.ms"]
        assert (got["value"], got["config_source"]) == ("20000", "DYNAMIC_BROKER_CONFIG")
    finally:
        admin.reset_configs([ConfigResource(ConfigResourceType.BROKER, nid, ["log.cleaner.backoff.ms"])])
    got = admin.describe_configs(
        [ConfigResource(ConfigResourceType.BROKER, nid, ["log.cleaner.backoff.ms"])], config_filter="all"
    )["broker"][nid]["log.cleaner.backoff.ms"]
    assert (got["value"], got["config_source"]) == ("15000", "DEFAULT_CONFIG")
    # a read-only (static) broker config cannot be changed at runtime: Kafka answers INVALID_REQUEST
    result = admin.alter_configs(
        [ConfigResource(ConfigResourceType.BROKER, nid, {"log.dirs": "/elsewhere"})],
        incremental=True,
        raise_on_unknown=False,
    )
    assert result["broker"][nid] != "OK", "log.dirs was accepted as a dynamic broker config"
    assert (
        "InvalidRequestError" in result["broker"][nid] or "InvalidConfigurationError" in result["broker"][nid]
    )


def test_describe_cluster(bootstrap, admin):
    cluster = admin.describe_cluster()
    assert cluster["cluster_id"]
    (broker,) = cluster["brokers"]
    host, port = bootstrap.rsplit(":", 1)
    assert (broker["host"], broker["port"]) == (host, int(port))
    assert cluster["controller_id"] == broker["broker_id"]


def test_describe_log_dirs(bootstrap, new_topic, clients, admin, shared_broker, broker_target):
    topic = new_topic(partitions=2)
    clients.kafka_python_produce(bootstrap, topic, clients.numbered_records(20))
    result = admin.describe_log_dirs()
    assert len(result) == 1
    dirs = result[0]["log_dirs"]
    assert dirs and all(d["error_code"] == 0 for d in dirs)
    if broker_target == "odradek":
        assert [d["log_dir"] for d in dirs] == [str(shared_broker.log_dir)]
    sizes = {}
    for d in dirs:
        for t in d["topics"]:
            if t["name"] == topic:
                for p in t["partitions"]:
                    sizes[p["partition_index"]] = p["partition_size"]
    assert set(sizes) == {0, 1}
    assert sizes[0] > 20 * len(b"m-value-00") and sizes[1] == 0


def test_delete_records(bootstrap, new_topic, clients, admin):
    topic = new_topic()
    clients.kafka_python_produce(bootstrap, topic, clients.numbered_records(8))
    tp = TopicPartition(topic, 0)
    result = admin.delete_records({tp: 3})
    assert result[tp]["low_watermark"] == 3
    c = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        assert c.beginning_offsets([tp], timeout_ms=TIMEOUT_MS) == {tp: 3}
    finally:
        c.close()
    got = clients.kafka_python_consume(bootstrap, topic, 5)
    assert [r.offset for r in got] == [3, 4, 5, 6, 7]
    # -1 means "up to the high watermark"
    result = admin.delete_records({tp: -1})
    assert result[tp]["low_watermark"] == 8
    assert clients.watermarks(bootstrap, topic) == (8, 8)
