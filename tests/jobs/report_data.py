"""The known data of the report-job tests (see conftest.py) and helpers to produce it."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from jobs.lag_samples import LagSample

HOUR_MS = 3_600_000
MINUTE_MS = 60_000


@dataclass(frozen=True)
class Rec:
    topic: str
    partition: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int
    headers: tuple[tuple[str, bytes], ...] = ()
    offset: int = -1  # filled in from the delivery report

    @property
    def size(self) -> int:
        return len(self.key or b"") + len(self.value or b"")


@dataclass
class Dataset:
    bootstrap: str
    now_ms: int
    suffix: str
    orders: str
    clicks: str
    profiles: str
    audit: str
    records: dict[str, list[Rec]] = field(default_factory=dict)
    samples: list[LagSample] = field(default_factory=list)

    @property
    def topics(self) -> list[str]:
        return [self.orders, self.clicks, self.profiles, self.audit]

    @property
    def topic_pattern(self) -> str:
        return f".*-{self.suffix}"


def produce(bootstrap: str, records: list[Rec]) -> list[Rec]:
    """Produce in order (one in flight per partition, so offsets follow the list); returns them with offsets."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    done: list[Rec | None] = [None] * len(records)
    errors = []

    def on_delivery(index: int):
        def callback(err, msg):
            if err is not None:
                errors.append(err)
            else:
                done[index] = Rec(**{**records[index].__dict__, "offset": msg.offset()})

        return callback

    for i, r in enumerate(records):
        producer.produce(
            r.topic,
            key=r.key,
            value=r.value,
            partition=r.partition,
            timestamp=r.timestamp_ms,
            headers=list(r.headers) or None,
            on_delivery=on_delivery(i),
        )
        producer.poll(0)
    assert producer.flush(60) == 0, "records still in flight after 60 s"
    assert not errors, errors
    return [r for r in done if r is not None]


def create_topics(bootstrap: str, topics: dict[str, tuple[int, dict[str, str]]]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = [NewTopic(name, partitions, 1, config=config) for name, (partitions, config) in topics.items()]
    for future in admin.create_topics(new, operation_timeout=30).values():
        future.result(timeout=60)


def orders_records(topic: str, now: int, rng: random.Random) -> list[Rec]:
    recs = []
    # five records from before any report window used here (10 h ago), first in partition 0
    for i in range(5):
        recs.append(Rec(topic, 0, f"old{i}".encode(), b"o" * 40, now - 10 * HOUR_MS))
    # 300 / 150 / 50 records over partitions 0 / 1 / 2 (skewed), in the current hour and the two before
    for partition, count in ((0, 300), (1, 150), (2, 50)):
        for i in range(count):
            hours_ago = i % 3
            ts = now - hours_ago * HOUR_MS - (i % 7) * MINUTE_MS - 1000
            key = f"customer-{rng.randrange(1000)}".encode()
            recs.append(Rec(topic, partition, key, rng.randbytes(rng.randrange(10, 200)), ts))
    return recs


def lag_samples(now: int) -> list[LagSample]:
    """20 rounds 30 s apart, the last a minute ago. On orders-0 the log end offset grows 100 per round;
    "fast" is always caught up, "slow" commits 50 per round (lag 50*i offsets, 15*i seconds), "stuck" stays
    at 1000 (never caught up). "slow" also has a partition without a committed offset."""
    out = []
    first = now - MINUTE_MS - 19 * 30_000
    for i in range(20):
        ts = first + i * 30_000
        leo = 1000 + 100 * i
        out.append(LagSample("local", "fast", "orders", 0, ts, leo, leo, leo))
        out.append(LagSample("local", "slow", "orders", 0, ts, 1000 + 50 * i, leo, leo))
        out.append(LagSample("local", "slow", "orders", 1, ts, None, 10, 10))
        out.append(LagSample("local", "stuck", "orders", 0, ts, 1000 - 1, leo, leo))
    return out
