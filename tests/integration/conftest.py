"""Client-side fixtures for the integration tests: real clients (confluent-kafka, kafka-python, aiokafka,
kafkajs through node) against the broker processes of ``tests/conftest.py``.

Clients are created with their default settings plus the bootstrap address; where a client demands more
(confluent-kafka's consumer needs a ``group.id``) the minimum is added. Test code never sleeps on a timer to
wait for the broker: it polls for a condition with a generous deadline and asserts on the outcome.

Fixtures:
- ``clients``: the namespace ``Clients`` below (produce/consume helpers per client, ``Rec``, sample records).
- ``bootstrap``: the shared broker's address.
- ``new_topic(partitions=1, config=None, broker=None, name=None)``: creates a topic through confluent-kafka's
  admin client and waits until its partitions have leaders; returns the name.
- ``no_autocreate_broker``: a session-wide broker with ``auto.create.topics.enable=false``.
- ``kafkajs(op, **request)``: runs ``js/kafkajs_cli.js``; returns the result or raises ``KafkaJSFailure``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import random
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest

JS_DIR = Path(__file__).resolve().parent / "js"
CLIENT_TIMEOUT_S = 30.0


# --------------------------------------------------------------------------------------------------------------
# records


@dataclass(frozen=True)
class Rec:
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    timestamp: int | None = None
    partition: int | None = field(default=None, compare=False)
    offset: int | None = field(default=None, compare=False)

    def content(self) -> tuple:
        return (self.key, self.value, self.headers, self.timestamp)


def sample_records(ts_base: int | None = None, big: bool = True) -> list[Rec]:
    """Keys, null keys, empty key/value, a tombstone, binary and unicode, repeated headers, explicit timestamps
    (one hour in the past, increasing), a compressible value and (``big``) a 100 kB incompressible one."""
    if ts_base is None:
        ts_base = int(time.time() * 1000) - 3_600_000
    rnd = random.Random(20240611)
    recs = [
        Rec(b"key-0", b"value-0", (("h1", b"v1"),)),
        Rec(None, b"a record with a null key"),
        Rec(b"", b"", (("empty", b""),)),
        Rec(b"tombstone", None),
        Rec(bytes(range(256)), bytes(range(256)) * 4, (("bin", bytes(range(256))), ("dup", b"1"), ("dup", b"2"))),
        Rec(b"unicode", "héllo wörld ✓ 日本".encode(), (("ключ", "значение".encode()),)),
        Rec(b"compressible", b"abcdefgh" * 2000, (("n", b"16000"),)),
    ]
    if big:
        recs.append(Rec(b"incompressible", rnd.randbytes(100_000)))
    return [replace(r, timestamp=ts_base + i) for i, r in enumerate(recs)]


def numbered_records(n: int, prefix: bytes = b"m", ts_base: int | None = None) -> list[Rec]:
    if ts_base is None:
        ts_base = int(time.time() * 1000) - 3_600_000
    return [Rec(b"%s-%d" % (prefix, i), b"%s-value-%d" % (prefix, i), (), ts_base + i) for i in range(n)]


def contents(recs: list[Rec]) -> list[tuple]:
    return [r.content() for r in recs]


# --------------------------------------------------------------------------------------------------------------
# confluent-kafka


def confluent_produce(
    bootstrap: str, topic: str, recs: list[Rec], partition: int | None = 0, config: dict | None = None
) -> list[int]:
    """Produce ``recs`` in order; return their offsets (-1 for acks=0). Raises on any delivery error."""
    from confluent_kafka import KafkaException, Producer

    producer = Producer({"bootstrap.servers": bootstrap, **(config or {})})
    results: list[Any] = [None] * len(recs)

    def on_delivery(i: int):
        def cb(err, msg):
            # with acks=0 there is no offset (librdkafka reports None / -1001)
            off = msg.offset()
            results[i] = err if err is not None else (-1 if off is None or off < 0 else off)

        return cb

    for i, r in enumerate(recs):
        kwargs: dict[str, Any] = {"value": r.value, "key": r.key, "on_delivery": on_delivery(i)}
        if partition is not None:
            kwargs["partition"] = partition
        if r.headers:
            kwargs["headers"] = list(r.headers)
        if r.timestamp is not None:
            kwargs["timestamp"] = r.timestamp
        producer.produce(topic, **kwargs)
        producer.poll(0)
    left = producer.flush(CLIENT_TIMEOUT_S)
    assert left == 0, f"confluent producer: {left} messages not delivered within {CLIENT_TIMEOUT_S}s"
    errors = [e for e in results if not isinstance(e, int)]
    if errors:
        raise KafkaException(errors[0])
    return results


def _confluent_rec(m) -> Rec:
    headers = tuple((k, v) for k, v in (m.headers() or []))
    return Rec(m.key(), m.value(), headers, m.timestamp()[1], m.partition(), m.offset())


def confluent_consume(
    bootstrap: str,
    topic: str,
    count: int,
    partition: int = 0,
    start: int | None = None,
    config: dict | None = None,
    timeout: float = CLIENT_TIMEOUT_S,
) -> list[Rec]:
    """Read ``count`` records from one partition by manual assignment (default: from the beginning)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

    conf = {"bootstrap.servers": bootstrap, "group.id": f"odradek-test-{uuid.uuid4().hex[:8]}"}
    conf.update(config or {})
    consumer = Consumer(conf)
    out: list[Rec] = []
    try:
        consumer.assign([TopicPartition(topic, partition, OFFSET_BEGINNING if start is None else start)])
        deadline = time.monotonic() + timeout
        while len(out) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"confluent consumer: {len(out)}/{count} records within {timeout}s")
            m = consumer.poll(0.2)
            if m is None:
                continue
            if m.error():
                raise KafkaException(m.error())
            out.append(_confluent_rec(m))
    finally:
        consumer.close()
    return out


def confluent_admin(bootstrap: str, config: dict | None = None):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, **(config or {})})


def wait_for_topic(bootstrap: str, topic: str, partitions: int | None = None, timeout: float = 20.0):
    """Poll metadata (all topics, so that nothing is auto-created) until ``topic`` has ``partitions`` partitions
    with leaders. Returns the TopicMetadata."""
    admin = confluent_admin(bootstrap)
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        md = admin.list_topics(timeout=10)
        t = md.topics.get(topic)
        last = t
        if (
            t is not None
            and t.error is None
            and (partitions is None or len(t.partitions) == partitions)
            and t.partitions
            and all(p.leader >= 0 and p.error is None for p in t.partitions.values())
        ):
            return t
        time.sleep(0.1)
    raise AssertionError(f"topic {topic} not ready with {partitions} partitions in metadata: {last}")


def create_topic(
    bootstrap: str,
    name: str,
    partitions: int = 1,
    config: dict[str, str] | None = None,
    replication_factor: int = 1,
) -> str:
    from confluent_kafka.admin import NewTopic

    admin = confluent_admin(bootstrap)
    fs = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=replication_factor, config=config or {})],
        request_timeout=CLIENT_TIMEOUT_S,
    )
    fs[name].result(timeout=CLIENT_TIMEOUT_S)
    wait_for_topic(bootstrap, name, partitions)
    return name


def watermarks(bootstrap: str, topic: str, partition: int = 0) -> tuple[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"odradek-wm-{uuid.uuid4().hex[:8]}"})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=CLIENT_TIMEOUT_S)
    finally:
        c.close()


# --------------------------------------------------------------------------------------------------------------
# kafka-python


def kafka_python_produce(
    bootstrap: str, topic: str, recs: list[Rec], partition: int | None = 0, **config: Any
) -> list[int]:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=bootstrap, **config)
    try:
        futures = [
            producer.send(
                topic,
                value=r.value,
                key=r.key,
                headers=list(r.headers) or None,
                partition=partition,
                timestamp_ms=r.timestamp,
            )
            for r in recs
        ]
        producer.flush(timeout=CLIENT_TIMEOUT_S)
        return [f.get(timeout=CLIENT_TIMEOUT_S).offset for f in futures]
    finally:
        producer.close(timeout=10)


def kafka_python_consume(
    bootstrap: str,
    topic: str,
    count: int,
    partition: int = 0,
    start: int | None = None,
    timeout: float = CLIENT_TIMEOUT_S,
    **config: Any,
) -> list[Rec]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, **config)
    out: list[Rec] = []
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        if start is None:
            consumer.seek_to_beginning(tp)
        else:
            consumer.seek(tp, start)
        deadline = time.monotonic() + timeout
        while len(out) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"kafka-python consumer: {len(out)}/{count} records within {timeout}s")
            for msgs in consumer.poll(timeout_ms=200).values():
                for m in msgs:
                    out.append(
                        Rec(m.key, m.value, tuple((k, v) for k, v in m.headers), m.timestamp, m.partition, m.offset)
                    )
    finally:
        consumer.close()
    return out[:count] if len(out) > count else out


def kafka_python_admin(bootstrap: str, **config: Any):
    from kafka.admin import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=bootstrap, **config)


# --------------------------------------------------------------------------------------------------------------
# aiokafka


def run_async(coro):
    return asyncio.run(asyncio.wait_for(coro, timeout=CLIENT_TIMEOUT_S * 3))


async def _aiokafka_produce(bootstrap, topic, recs, partition, config) -> list[int]:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **config)
    await producer.start()
    try:
        futures = [
            await producer.send(
                topic,
                value=r.value,
                key=r.key,
                partition=partition,
                timestamp_ms=r.timestamp,
                headers=list(r.headers) or None,
            )
            for r in recs
        ]
        metas = [await f for f in futures]
        return [-1 if m is None else m.offset for m in metas]  # acks=0: no metadata
    finally:
        await producer.stop()


def aiokafka_produce(
    bootstrap: str, topic: str, recs: list[Rec], partition: int | None = 0, **config: Any
) -> list[int]:
    return run_async(_aiokafka_produce(bootstrap, topic, recs, partition, config))


async def _aiokafka_consume(bootstrap, topic, count, partition, start, timeout, config) -> list[Rec]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, **config)
    await consumer.start()
    out: list[Rec] = []
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        if start is None:
            await consumer.seek_to_beginning(tp)
        else:
            consumer.seek(tp, start)
        deadline = time.monotonic() + timeout
        while len(out) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"aiokafka consumer: {len(out)}/{count} records within {timeout}s")
            batches = await consumer.getmany(tp, timeout_ms=200)
            for msgs in batches.values():
                for m in msgs:
                    out.append(
                        Rec(m.key, m.value, tuple((k, v) for k, v in m.headers), m.timestamp, m.partition, m.offset)
                    )
    finally:
        await consumer.stop()
    return out[:count]


def aiokafka_consume(
    bootstrap: str,
    topic: str,
    count: int,
    partition: int = 0,
    start: int | None = None,
    timeout: float = CLIENT_TIMEOUT_S,
    **config: Any,
) -> list[Rec]:
    return run_async(_aiokafka_consume(bootstrap, topic, count, partition, start, timeout, config))


# --------------------------------------------------------------------------------------------------------------
# kafkajs (node)


class KafkaJSFailure(Exception):
    """kafkajs reported an error: ``.error`` is its {name, type, code, message, ...} description."""

    def __init__(self, error: dict) -> None:
        super().__init__(json.dumps(error)[:2000])
        self.error = error

    @property
    def types(self) -> set[str]:
        """Every Kafka error type named in the error and its nested errors/causes."""
        found: set[str] = set()

        def walk(e: dict | None) -> None:
            if not e:
                return
            if e.get("type"):
                found.add(e["type"])
            for sub in e.get("errors") or []:
                walk(sub)
            walk(e.get("originalError"))
            walk(e.get("cause"))

        walk(self.error)
        return found


def b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def unb64(data: str | None) -> bytes | None:
    return None if data is None else base64.b64decode(data)


def rec_to_js(r: Rec, partition: int | None = 0) -> dict:
    return {
        "key": b64(r.key),
        "value": b64(r.value),
        "headers": [[k, b64(v)] for k, v in r.headers],
        "timestamp": r.timestamp,
        "partition": partition,
    }


def rec_from_js(d: dict) -> Rec:
    return Rec(
        unb64(d["key"]),
        unb64(d["value"]),
        tuple((k, unb64(v)) for k, v in d["headers"]),
        d["timestamp"],
        d["partition"],
        d["offset"],
    )


def run_kafkajs(op: str, bootstrap: str, timeout: float = 120.0, **request: Any) -> Any:
    node = shutil.which("node")
    if node is None:
        pytest.fail("node is not installed; kafkajs tests need Node.js >= 18")
    if not (JS_DIR / "node_modules" / "kafkajs").is_dir():
        pytest.fail(f"kafkajs is not installed: run `npm ci --prefix {JS_DIR}`")
    payload = json.dumps({"op": op, "brokers": [bootstrap], **request})
    proc = subprocess.run(
        [node, str(JS_DIR / "kafkajs_cli.js")],
        input=payload.encode(),
        capture_output=True,
        timeout=timeout,
        cwd=JS_DIR,
    )
    stdout = proc.stdout.decode(errors="replace").strip()
    stderr = proc.stderr.decode(errors="replace")
    if proc.returncode != 0 or not stdout:
        raise AssertionError(f"kafkajs_cli {op} exited {proc.returncode}\nstdout: {stdout}\nstderr: {stderr[-4000:]}")
    out = json.loads(stdout.splitlines()[-1])
    if not out["ok"]:
        failure = KafkaJSFailure(out["error"])
        failure.add_note(f"kafkajs stderr:\n{stderr[-4000:]}")
        raise failure
    return out["result"]


# --------------------------------------------------------------------------------------------------------------
# the namespace handed to tests


class Clients:
    Rec = Rec
    KafkaJSFailure = KafkaJSFailure
    sample_records = staticmethod(sample_records)
    numbered_records = staticmethod(numbered_records)
    contents = staticmethod(contents)
    confluent_produce = staticmethod(confluent_produce)
    confluent_consume = staticmethod(confluent_consume)
    confluent_admin = staticmethod(confluent_admin)
    create_topic = staticmethod(create_topic)
    wait_for_topic = staticmethod(wait_for_topic)
    watermarks = staticmethod(watermarks)
    kafka_python_produce = staticmethod(kafka_python_produce)
    kafka_python_consume = staticmethod(kafka_python_consume)
    kafka_python_admin = staticmethod(kafka_python_admin)
    aiokafka_produce = staticmethod(aiokafka_produce)
    aiokafka_consume = staticmethod(aiokafka_consume)
    run_async = staticmethod(run_async)
    run_kafkajs = staticmethod(run_kafkajs)
    rec_to_js = staticmethod(rec_to_js)
    rec_from_js = staticmethod(rec_from_js)
    b64 = staticmethod(b64)
    unb64 = staticmethod(unb64)

    # by client name, for parametrized cross-client tests
    @staticmethod
    def produce(client: str, bootstrap: str, topic: str, recs: list[Rec], compression: str = "none",
                partition: int = 0) -> list[int]:
        if client == "confluent":
            return confluent_produce(bootstrap, topic, recs, partition, {"compression.type": compression})
        if client == "kafka-python":
            return kafka_python_produce(
                bootstrap, topic, recs, partition, compression_type=None if compression == "none" else compression
            )
        if client == "aiokafka":
            return aiokafka_produce(
                bootstrap, topic, recs, partition, compression_type=None if compression == "none" else compression
            )
        if client == "kafkajs":
            res = run_kafkajs(
                "produce", bootstrap, topic=topic, compression=compression,
                messages=[rec_to_js(r, partition) for r in recs],
            )
            base = res[0]["baseOffset"]
            return list(range(base, base + len(recs)))
        raise ValueError(client)

    @staticmethod
    def consume(client: str, bootstrap: str, topic: str, count: int, partition: int = 0,
                start: int | None = None) -> list[Rec]:
        if client == "confluent":
            return confluent_consume(bootstrap, topic, count, partition, start)
        if client == "kafka-python":
            return kafka_python_consume(bootstrap, topic, count, partition, start)
        if client == "aiokafka":
            return aiokafka_consume(bootstrap, topic, count, partition, start)
        if client == "kafkajs":
            res = run_kafkajs(
                "fetch", bootstrap, topic=topic, partition=partition, offset=start or 0, count=count,
                timeoutMs=int(CLIENT_TIMEOUT_S * 1000),
            )
            return [rec_from_js(d) for d in res["records"]]
        raise ValueError(client)


@pytest.fixture(scope="session")
def clients() -> type[Clients]:
    return Clients


@pytest.fixture
def bootstrap(shared_broker) -> str:
    return shared_broker.bootstrap


@pytest.fixture
def new_topic(request: pytest.FixtureRequest, shared_broker, helpers) -> Callable[..., str]:
    make_topic_name = helpers.make_topic_name

    def factory(partitions: int = 1, config: dict[str, str] | None = None, broker=None, name: str | None = None):
        target = broker or shared_broker
        topic = name or make_topic_name(request.node.name)
        return create_topic(target.bootstrap, topic, partitions, config)

    return factory


@pytest.fixture(scope="session")
def _no_autocreate_broker_process(broker_logs_dir, helpers) -> Iterator:
    if helpers.TARGET == "tansu":
        pytest.skip("Tansu always auto-creates topics")
    broker = helpers.new_broker(broker_logs_dir, "no-autocreate", {"auto.create.topics.enable": "false"})
    broker.start()
    yield broker
    broker.stop()


@pytest.fixture
def no_autocreate_broker(request: pytest.FixtureRequest, _no_autocreate_broker_process, helpers):
    broker = _no_autocreate_broker_process
    helpers.remember_broker(request, broker)
    if not broker.alive:
        broker.start()
    return broker


@pytest.fixture
def kafkajs(shared_broker) -> Callable[..., Any]:
    """``kafkajs(op, **request)`` against the shared broker; ``bootstrap=`` to aim elsewhere."""

    def call(op: str, bootstrap: str | None = None, **request: Any) -> Any:
        return run_kafkajs(op, bootstrap or shared_broker.bootstrap, **request)

    return call
