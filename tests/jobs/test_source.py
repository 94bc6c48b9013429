"""The ``odradek`` data source against a real broker: what it reads and its options, in batch and streaming."""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient
from report_data import HOUR_MS, Rec, produce

from jobs.source import OffsetRange, SourceOptionError, SourceOptions, read_range, split_ranges


def _read(spark, bootstrap, **options):
    reader = spark.read.format("odradek").option("kafka.bootstrap.servers", bootstrap)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def _rows(df) -> list[dict]:
    return [r.asDict() for r in df.orderBy("topic", "partition", "offset").collect()]


def test_batch_read_returns_every_record_as_produced(spark, broker, dataset):
    df = _read(spark, dataset.bootstrap, subscribe=dataset.orders)
    assert [f.name for f in df.schema.fields] == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
    ]
    rows = _rows(df)
    produced = sorted(dataset.records[dataset.orders], key=lambda r: (r.partition, r.offset))
    assert len(rows) == len(produced) == 505
    for row, rec in zip(rows, produced, strict=True):
        assert (row["topic"], row["partition"], row["offset"]) == (rec.topic, rec.partition, rec.offset)
        assert (bytes(row["key"]), bytes(row["value"])) == (rec.key, rec.value)
        assert int(row["timestamp"].timestamp() * 1000) == rec.timestamp_ms
        assert row["timestampType"] == 0  # CreateTime


def test_offsets_json_with_earliest_latest_and_explicit_offsets(spark, broker, dataset):
    t = dataset.orders
    df = _read(
        spark,
        dataset.bootstrap,
        subscribe=t,
        startingOffsets=json.dumps({t: {"0": 10, "1": -2, "2": -1}}),
        endingOffsets=json.dumps({t: {"0": 20, "1": 5, "2": -1}}),
    )
    got = sorted((r["partition"], r["offset"]) for r in _rows(df))
    assert got == [(0, o) for o in range(10, 20)] + [(1, o) for o in range(5)]


def test_assign_with_starting_timestamp(spark, broker, dataset):
    cutoff = dataset.now_ms - HOUR_MS // 2
    df = _read(
        spark, dataset.bootstrap, assign=json.dumps({dataset.orders: [0]}), startingTimestamp=str(cutoff)
    )
    part0 = [r for r in dataset.records[dataset.orders] if r.partition == 0]
    first = next(r.offset for r in part0 if r.timestamp_ms >= cutoff)  # Kafka's ListOffsets by timestamp
    assert sorted(r["offset"] for r in _rows(df)) == [r.offset for r in part0 if r.offset >= first]
    assert {r["partition"] for r in _rows(df)} == {0}


def test_offsets_by_timestamp_per_partition(spark, broker, dataset):
    audit, clicks, now = dataset.audit, dataset.clicks, dataset.now_ms
    df = _read(
        spark,
        dataset.bootstrap,
        assign=json.dumps({audit: [0], clicks: [0]}),
        # audit: 10 records 3 h old, then 10 records 10 min old; clicks: 200 records 5 min old
        startingOffsetsByTimestamp=json.dumps({audit: {"0": now - 4 * HOUR_MS}, clicks: {"0": now - 60_000}}),
        startingOffsetsByTimestampStrategy="latest",  # clicks has nothing that new: start at its end
        endingOffsetsByTimestamp=json.dumps({audit: {"0": now - HOUR_MS}, clicks: {"0": now}}),
    )
    assert sorted((r["topic"], r["offset"]) for r in _rows(df)) == [(audit, o) for o in range(10)]
    with pytest.raises(Exception, match=r"startingOffsetsByTimestamp: .*has no record at or after"):
        _read(
            spark,
            dataset.bootstrap,
            assign=json.dumps({clicks: [0]}),
            startingOffsetsByTimestamp=json.dumps({clicks: {"0": now}}),
        ).collect()


def test_subscribe_pattern_and_headers(spark, broker, dataset):
    df = _read(
        spark, dataset.bootstrap, subscribePattern=f"(clicks|audit)-{dataset.suffix}", includeHeaders="true"
    )
    rows = _rows(df)
    assert {r["topic"] for r in rows} == {dataset.clicks, dataset.audit}
    clicks = [r for r in rows if r["topic"] == dataset.clicks]
    assert len(clicks) == 200
    assert all(r["key"] is None for r in clicks)
    assert [(h["key"], bytes(h["value"])) for h in clicks[7]["headers"]] == [("source", b"web"), ("n", b"7")]
    assert all(r["headers"] == [] for r in rows if r["topic"] == dataset.audit)


def test_compacted_topic_reads_tombstones_as_null_values(spark, broker, dataset):
    rows = _rows(_read(spark, dataset.bootstrap, subscribe=dataset.profiles))
    assert len(rows) == 21
    assert rows[-1]["key"] == b"user-0" and rows[-1]["value"] is None


def test_min_partitions_and_max_records_per_partition_split_ranges(spark, broker, dataset):
    whole = _rows(_read(spark, dataset.bootstrap, subscribe=dataset.orders))
    split = _read(spark, dataset.bootstrap, subscribe=dataset.orders, maxRecordsPerPartition="40")
    assert split.rdd.getNumPartitions() == 8 + 4 + 2  # ceil(305/40), ceil(150/40), ceil(50/40)
    assert _rows(split) == whole
    spread = _read(spark, dataset.bootstrap, subscribe=dataset.orders, minPartitions="9")
    assert spread.rdd.getNumPartitions() >= 9
    assert _rows(spread) == whole


def test_deleted_records_fail_the_read_unless_failOnDataLoss_is_false(spark, broker, new_topic):
    topic = new_topic()
    produce(broker.bootstrap, [Rec(topic, 0, None, b"x%d" % i, 1_700_000_000_000 + i) for i in range(10)])
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, 4)]).values():
        future.result(timeout=30)
    start = json.dumps({topic: {"0": 2}})
    with pytest.raises(Exception, match="outside the log"):
        _read(spark, broker.bootstrap, subscribe=topic, startingOffsets=start).collect()
    lenient = _read(spark, broker.bootstrap, subscribe=topic, startingOffsets=start, failOnDataLoss="false")
    assert sorted(r["offset"] for r in _rows(lenient)) == list(range(4, 10))


def test_bad_options_name_the_option(spark, broker, dataset):
    with pytest.raises(Exception, match="subscribe: unknown topic"):
        _read(spark, dataset.bootstrap, subscribe="no-such-topic-" + uuid.uuid4().hex).collect()
    with pytest.raises(Exception, match=r"kafka\.bootstrap\.servers: required"):
        spark.read.format("odradek").option("subscribe", dataset.orders).load().collect()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subscribe": "a", "assign": '{"a":[0]}'}, "exactly one of subscribe"),
        ({"subscribe": "a", "startingOffsets": "latest"}, "'latest' is not allowed for a batch"),
        ({"subscribe": "a", "endingOffsets": '{"a":{"0":-2}}'}, "endingOffsets: offset -2"),
        ({"subscribe": "a", "startingOffsets": "{nope"}, "startingOffsets: expected"),
        ({"subscribe": "a", "minPartitions": "0"}, "minPartitions: must be at least 1"),
        ({"subscribe": "a", "includeHeaders": "yes"}, "includeHeaders: expected true or false"),
        (
            {
                "subscribePattern": "(",
            },
            "subscribePattern: invalid regular expression",
        ),
        ({"subscribe": "a", "startingOffset": "earliest"}, "unknown option"),
        ({"subscribe": "a", "startingOffsetsByTimestamp": '{"a":{"0":-5}}'}, "timestamps must be at least 0"),
    ],
)
def test_option_errors(options, message):
    with pytest.raises(SourceOptionError, match=message):
        SourceOptions.parse({"kafka.bootstrap.servers": "127.0.0.1:9", **options}, streaming=False)


def test_starting_offsets_json_must_name_every_partition(spark, broker, dataset):
    with pytest.raises(Exception, match=r"must name every assigned partition; missing .*-1"):
        _read(
            spark,
            dataset.bootstrap,
            subscribe=dataset.orders,
            startingOffsets=json.dumps({dataset.orders: {"0": 0, "2": 0}}),
        ).collect()


def test_split_ranges():
    ranges = [OffsetRange("a", 0, 0, 100), OffsetRange("a", 1, 100, 100), OffsetRange("b", 0, 5, 15)]
    assert [(r.partition, r.start, r.end) for r in split_ranges(ranges, 1000, None)] == [
        (0, 0, 100),
        (0, 5, 15),
    ]
    pieces = split_ranges(ranges, 30, None)
    assert [(r.topic, r.start, r.end) for r in pieces] == [
        ("a", 0, 25),
        ("a", 25, 50),
        ("a", 50, 75),
        ("a", 75, 100),
        ("b", 5, 15),
    ]
    spread = split_ranges(ranges, 1000, 11)
    assert len(spread) >= 11 and sum(r.size for r in spread) == 110


def test_streaming_read_respects_max_offsets_per_trigger(spark, broker, new_topic):
    topic = new_topic(partitions=2)
    produce(broker.bootstrap, [Rec(topic, i % 2, None, b"%d" % i, 1_700_000_000_000 + i) for i in range(250)])
    stream = (
        spark.readStream.format("odradek")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "100")
        .load()
    )
    sink = "stream_" + uuid.uuid4().hex[:8]
    query = stream.select("partition", "offset", "value").writeStream.format("memory").queryName(sink).start()
    try:
        query.processAllAvailable()
        batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
        assert sum(batches) == 250 and max(batches) <= 100 and len(batches) >= 3
        latest = json.loads(query.recentProgress[-1]["sources"][0]["latestOffset"])
        assert latest == {topic: {"0": 125, "1": 125}}
        produce(
            broker.bootstrap, [Rec(topic, 0, None, b"late%d" % i, 1_700_000_100_000 + i) for i in range(30)]
        )
        query.processAllAvailable()
        rows = spark.sql(f"select partition, offset, value from {sink}").collect()
    finally:
        query.stop()
    assert len(rows) == 280
    assert len({(r["partition"], r["offset"]) for r in rows}) == 280  # each record exactly once
    assert sum(1 for r in rows if bytes(r["value"]).startswith(b"late")) == 30


def test_records_deleted_under_a_planned_range(broker, new_topic):
    """Retention can delete a range's first records between planning and reading (a streaming query's next
    micro-batch, a long job): an error, or with failOnDataLoss=false the records that are left."""
    topic = new_topic()
    produce(broker.bootstrap, [Rec(topic, 0, None, b"x%d" % i, 1_700_000_000_000 + i) for i in range(10)])
    planned = OffsetRange(topic, 0, 2, 10)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, 6)]).values():
        future.result(timeout=30)
    base = {
        "kafka.bootstrap.servers": broker.bootstrap,
        "subscribe": topic,
        "kafkaConsumer.pollTimeoutMs": "20000",
    }
    strict = SourceOptions.parse(base, streaming=True)
    with pytest.raises(KafkaException, match=r"(?i)offset"):
        list(read_range(strict, planned))
    lenient = SourceOptions.parse({**base, "failOnDataLoss": "false"}, streaming=True)
    offsets = [o for batch in read_range(lenient, planned) for o in batch.column("offset").to_pylist()]
    assert offsets == [6, 7, 8, 9]
