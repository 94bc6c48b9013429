"""Fixtures of the report-job tests: one real local SparkSession and one real broker with known data.

- ``spark``: the session of the whole test run (``local[2]``, two shuffle partitions, no UI), with the
  ``odradek`` data source registered. Starting one takes about ten seconds, so there is only one.
- ``jobs_broker``: a broker process of this directory's own (so reports over "every topic" see only the
  topics made here).
- ``dataset``: topics and records produced once, with explicit timestamps across hours, and everything the
  tests check against (``Dataset``): an ``orders`` topic of 3 skewed partitions, ``clicks`` with headers and no
  keys, a compacted ``profiles`` topic with superseded values and an old tombstone, ``audit`` with a 4 h
  ``retention.ms`` and records about to pass it, and the lag sampler's topic with a caught-up, a slow and a
  stuck group.
- ``produce(topic, records)``: produce ``Rec``s and wait for every acknowledgement.
"""

from __future__ import annotations

import logging
import random
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from report_data import HOUR_MS, MINUTE_MS, Dataset, Rec, create_topics, lag_samples, orders_records, produce

from jobs.lag_samples import LAG_SAMPLES_TOPIC, TOPIC_CONFIGS


@pytest.fixture(scope="session")
def spark():
    from jobs.spark import spark_session

    # py4j says goodbye at interpreter exit, after pytest has closed the streams its log handlers write to
    logging.getLogger("py4j").setLevel(logging.WARNING)
    session = spark_session(
        "odradek-tests",
        master="local[2]",
        conf={
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.default.parallelism": "2",
            "spark.driver.memory": "1g",
        },
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def jobs_broker(broker_logs_dir, helpers):
    broker = helpers.new_broker(broker_logs_dir, "jobs", {"auto.create.topics.enable": "false"})
    broker.start()
    yield broker
    broker.stop()


@pytest.fixture
def broker(request, jobs_broker, helpers):
    """The jobs broker, its log added to the report of a failing test."""
    helpers.remember_broker(request, jobs_broker)
    return jobs_broker


@pytest.fixture(scope="session")
def dataset(jobs_broker) -> Dataset:
    bootstrap = jobs_broker.bootstrap
    now = int(time.time() * 1000)
    suffix = uuid.uuid4().hex[:6]
    ds = Dataset(
        bootstrap,
        now,
        suffix,
        orders=f"orders-{suffix}",
        clicks=f"clicks-{suffix}",
        profiles=f"profiles-{suffix}",
        audit=f"audit-{suffix}",
    )
    create_topics(
        bootstrap,
        {
            ds.orders: (3, {}),
            ds.clicks: (1, {}),
            ds.profiles: (1, {"cleanup.policy": "compact", "delete.retention.ms": str(HOUR_MS)}),
            ds.audit: (1, {"retention.ms": str(4 * HOUR_MS)}),
            LAG_SAMPLES_TOPIC: (1, TOPIC_CONFIGS),
        },
    )
    rng = random.Random(12)
    clicks = [
        Rec(
            ds.clicks,
            0,
            None,
            f"click-{i:04d}".encode(),
            now - 5 * MINUTE_MS,
            headers=(("source", b"web"), ("n", str(i).encode())),
        )
        for i in range(200)
    ]
    profiles = [
        Rec(
            ds.profiles,
            0,
            f"user-{k}".encode(),
            f"v{version}-".encode() * (k + 2),
            now - (4 - version) * MINUTE_MS,
        )
        for version in range(4)
        for k in range(5)
    ]
    # a tombstone older than delete.retention.ms: the cleaner would drop it too
    profiles.append(Rec(ds.profiles, 0, b"user-0", None, now - 2 * HOUR_MS))
    audit = [Rec(ds.audit, 0, None, b"a" * 50, now - 3 * HOUR_MS) for _ in range(10)]
    audit += [Rec(ds.audit, 0, None, b"b" * 50, now - 10 * MINUTE_MS) for _ in range(10)]
    for recs in (orders_records(ds.orders, now, rng), clicks, profiles, audit):
        ds.records[recs[0].topic] = produce(bootstrap, recs)
    ds.samples = lag_samples(now)
    producer = Producer({"bootstrap.servers": bootstrap})
    for s in ds.samples:
        producer.produce(LAG_SAMPLES_TOPIC, key=s.key(), value=s.value(), timestamp=s.timestamp_ms)
    assert producer.flush(60) == 0
    return ds


@pytest.fixture
def new_topic(jobs_broker) -> Iterator:
    """``new_topic(partitions=1, config=None) -> name`` on the jobs broker."""

    def make(partitions: int = 1, config: dict[str, str] | None = None) -> str:
        name = f"t-{uuid.uuid4().hex[:10]}"
        create_topics(jobs_broker.bootstrap, {name: (partitions, config or {})})
        return name

    yield make
