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
import struct
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
        Rec(
            bytes(range(256)),
            bytes(range(256)) * 4,
            (("bin", bytes(range(256))), ("dup", b"1"), ("dup", b"2")),
        ),
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


def _python_client_rec(m) -> Rec:
    """A kafka-python or aiokafka ConsumerRecord as a Rec (both have the same fields)."""
    return Rec(m.key, m.value, tuple((k, v) for k, v in m.headers), m.timestamp, m.partition, m.offset)


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
        [
            NewTopic(
                name, num_partitions=partitions, replication_factor=replication_factor, config=config or {}
            )
        ],
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
                out += [_python_client_rec(m) for m in msgs]
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
                out += [_python_client_rec(m) for m in msgs]
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
        raise AssertionError(
            f"kafkajs_cli {op} exited {proc.returncode}\nstdout: {stdout}\nstderr: {stderr[-4000:]}"
        )
    out = json.loads(stdout.splitlines()[-1])
    if not out["ok"]:
        failure = KafkaJSFailure(out["error"])
        failure.add_note(f"kafkajs stderr:\n{stderr[-4000:]}")
        raise failure
    return out["result"]


# --------------------------------------------------------------------------------------------------------------
# raw protocol: kio-encoded requests on a plain socket, and a small independent record-batch codec


def _zigzag(n: int) -> int:
    return (n << 1) ^ (n >> 63)


def _varint(n: int) -> bytes:
    z = _zigzag(n) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while True:
        b = z & 0x7F
        z >>= 7
        if z:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
    return (result >> 1) ^ -(result & 1), pos


CODECS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def compress_records(codec: str, data: bytes) -> bytes:
    """Compress record bytes the way clients do, with the clients' own codec libraries (not the broker's)."""
    import gzip

    import lz4.frame
    import snappy
    import zstandard

    return {
        "gzip": gzip.compress,
        "snappy": snappy.compress,  # one raw block, as librdkafka sends
        "lz4": lz4.frame.compress,
        "zstd": zstandard.ZstdCompressor().compress,
    }[codec](data)


def encode_record(index: int, r: Rec, base_ts: int) -> bytes:
    """One v2 record, length-prefixed."""
    rec = bytearray()
    rec += b"\x00"  # attributes
    rec += _varint((r.timestamp if r.timestamp is not None else base_ts) - base_ts)
    rec += _varint(index)
    for part in (r.key, r.value):
        if part is None:
            rec += _varint(-1)
        else:
            rec += _varint(len(part)) + part
    rec += _varint(len(r.headers))
    for hk, hv in r.headers:
        kb = hk.encode()
        rec += _varint(len(kb)) + kb
        rec += _varint(-1) if hv is None else _varint(len(hv)) + hv
    return _varint(len(rec)) + bytes(rec)


def build_batch(
    recs: list[Rec],
    *,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    base_offset: int = 0,
    attributes: int = 0,
    compression: str | None = None,
    record_count: int | None = None,
    payload: bytes | None = None,
) -> bytes:
    """A magic-2 record batch, written from the Kafka spec (not from broker code).

    ``compression`` (gzip, snappy, lz4, zstd) compresses the records; ``record_count`` declares another number
    of records than the batch carries (last offset delta to match); ``payload`` replaces the encoded, compressed
    records with the given bytes. The CRC is always right: these are batches whose header lies."""
    import crc32c

    now = int(time.time() * 1000)
    stamps = [r.timestamp if r.timestamp is not None else now for r in recs] or [now]
    base_ts = stamps[0]
    body = b"".join(encode_record(i, r, base_ts) for i, r in enumerate(recs))
    if compression is not None:
        attributes |= CODECS[compression]
        body = compress_records(compression, body)
    if payload is not None:
        body = payload
    count = len(recs) if record_count is None else record_count
    after_crc = struct.pack(
        ">hiqqqhii",
        attributes,
        count - 1,
        base_ts,
        max(stamps),
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    ) + bytes(body)
    crc = crc32c.crc32c(after_crc)
    # batchLength counts from partitionLeaderEpoch to the end
    head = struct.pack(">qiibI", base_offset, 4 + 1 + 4 + len(after_crc), -1, 2, crc)
    return head + after_crc


def parse_batches(data: bytes) -> list[dict]:
    """Uncompressed magic-2 batches -> [{base_offset, producer_id, records: [Rec]}] (partial tail ignored)."""
    out = []
    pos = 0
    while pos + 12 <= len(data):
        base_offset, length = struct.unpack_from(">qi", data, pos)
        if pos + 12 + length > len(data):
            break
        (_epoch, magic, _crc, attrs, _lod, base_ts, _max_ts, pid, _pe, _seq, count) = struct.unpack_from(
            ">ibIhiqqqhii", data, pos + 12
        )
        assert magic == 2
        assert attrs & 0x07 == 0, "parse_batches only reads uncompressed batches"
        p = pos + 12 + 49
        recs = []
        for _ in range(count):
            _length, p = _read_varint(data, p)
            p += 1
            ts_delta, p = _read_varint(data, p)
            off_delta, p = _read_varint(data, p)
            parts = []
            for _ in range(2):
                n, p = _read_varint(data, p)
                parts.append(None if n < 0 else data[p : p + n])
                p += max(n, 0)
            nh, p = _read_varint(data, p)
            headers = []
            for _ in range(nh):
                n, p = _read_varint(data, p)
                hk = data[p : p + n].decode()
                p += n
                n, p = _read_varint(data, p)
                headers.append((hk, None if n < 0 else data[p : p + n]))
                p += max(n, 0)
            recs.append(
                Rec(parts[0], parts[1], tuple(headers), base_ts + ts_delta, None, base_offset + off_delta)
            )
        if not attrs & 0x20:  # control batches are not data
            out.append({"base_offset": base_offset, "producer_id": pid, "records": recs})
        pos += 12 + length
    return out


class RawClient:
    """One TCP connection speaking the Kafka protocol with kio entities; nothing else in between.

    ``send(request)`` encodes the header version the request's schema names; ``recv(request_type)`` parses the
    response header (v0 for ApiVersions, otherwise v1 when the response is flexible) and body."""

    def __init__(
        self, host: str, port: int, timeout: float = 15.0, client_id: str | None = "odradek-raw"
    ) -> None:
        import socket

        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.settimeout(timeout)
        self.client_id = client_id
        self._corr = 0

    @classmethod
    def to(cls, broker, **kw: Any) -> RawClient:
        return cls(broker.host, broker.port, **kw)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def next_correlation_id(self) -> int:
        self._corr += 1
        return self._corr

    def encode(self, request: Any, correlation_id: int) -> bytes:
        import io

        from kio.serial import entity_writer
        from kio.static.primitive import i16, i32

        header_type = request.__header_schema__
        buf = io.BytesIO()
        header = header_type(
            request_api_key=i16(request.__api_key__),
            request_api_version=i16(request.__version__),
            correlation_id=i32(correlation_id),
            client_id=self.client_id,
        )
        entity_writer(header_type)(buf, header)
        entity_writer(type(request))(buf, request)
        return buf.getvalue()

    def send(self, request: Any, correlation_id: int | None = None) -> int:
        corr = self.next_correlation_id() if correlation_id is None else correlation_id
        body = self.encode(request, corr)
        self.sock.sendall(struct.pack(">i", len(body)) + body)
        return corr

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_frame(self) -> bytes:
        size = struct.unpack(">i", self._exact(4))[0]
        return self._exact(size)

    def _exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError(f"connection closed after {len(buf)} of {n} bytes")
            buf += chunk
        return bytes(buf)

    @staticmethod
    def parse(request_type: Any, frame: bytes) -> tuple[int, Any]:
        from kio.index import load_response_schema
        from kio.serial import entity_reader

        response_type = load_response_schema(request_type.__api_key__, request_type.__version__)
        (corr,) = struct.unpack_from(">i", frame, 0)
        pos = 4
        if response_type.__flexible__ and request_type.__api_key__ != 18:
            n, pos = _read_uvarint(frame, pos)  # tagged fields of response header v1
            for _ in range(n):
                _tag, pos = _read_uvarint(frame, pos)
                size, pos = _read_uvarint(frame, pos)
                pos += size
        result = entity_reader(response_type)(frame, pos)
        response = result[0] if isinstance(result, tuple) else result
        return corr, response

    def recv(self, request_type: Any) -> tuple[int, Any]:
        return self.parse(request_type, self.recv_frame())

    def call(self, request: Any) -> Any:
        corr = self.send(request)
        got, response = self.recv(type(request))
        assert got == corr, f"correlation id {got} != {corr}"
        return response


def _read_uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def pick_version(advertised: dict[int, tuple[int, int]], api_key: int, wanted: list[int]) -> int:
    """The first of ``wanted`` that the broker advertises for ``api_key``."""
    lo, hi = advertised[api_key]
    for v in wanted:
        if lo <= v <= hi:
            return v
    raise AssertionError(f"broker advertises {lo}-{hi} for api {api_key}; the test speaks {wanted}")


class Raw:
    """Request builders over kio for the tests that talk raw protocol."""

    RawClient = RawClient
    build_batch = staticmethod(build_batch)
    encode_record = staticmethod(encode_record)
    varint = staticmethod(_varint)
    parse_batches = staticmethod(parse_batches)
    pick_version = staticmethod(pick_version)

    @staticmethod
    def api_versions(version: int = 0):
        from kio.index import load_request_schema

        return load_request_schema(18, version)()

    @staticmethod
    def metadata(topics: list[str] | None, version: int = 8, allow_auto_topic_creation: bool = False):
        from kio.index import load_entity_module, load_request_schema
        from kio.static.constants import EntityType

        req_type = load_request_schema(3, version)
        mod = load_entity_module("metadata", version, EntityType.request)
        topic_list = None if topics is None else tuple(mod.MetadataRequestTopic(name=t) for t in topics)
        kwargs: dict[str, Any] = {"topics": topic_list}
        fields = req_type.__dataclass_fields__
        if "allow_auto_topic_creation" in fields:
            kwargs["allow_auto_topic_creation"] = allow_auto_topic_creation
        for name in ("include_cluster_authorized_operations", "include_topic_authorized_operations"):
            if name in fields:
                kwargs[name] = False
        return req_type(**kwargs)

    @staticmethod
    def produce(
        topic: str, partition: int, records: bytes, acks: int = -1, timeout_ms: int = 30000, version: int = 8
    ):
        import datetime

        from kio.index import load_entity_module, load_request_schema
        from kio.static.constants import EntityType
        from kio.static.primitive import Records, i16, i32, i32Timedelta

        mod = load_entity_module("produce", version, EntityType.request)
        return load_request_schema(0, version)(
            acks=i16(acks),
            timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=timeout_ms)),
            topic_data=(
                mod.TopicProduceData(
                    name=topic,
                    partition_data=(
                        mod.PartitionProduceData(index=i32(partition), records=Records(records)),
                    ),
                ),
            ),
        )

    @staticmethod
    def fetch(
        topic: str,
        partition: int,
        offset: int,
        max_wait_ms: int = 500,
        min_bytes: int = 1,
        max_bytes: int = 10 << 20,
        partition_max_bytes: int = 1 << 20,
        version: int = 11,
    ):
        import datetime

        from kio.index import load_entity_module, load_request_schema
        from kio.static.constants import EntityType
        from kio.static.primitive import i32, i32Timedelta, i64

        mod = load_entity_module("fetch", version, EntityType.request)
        return load_request_schema(1, version)(
            max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=max_wait_ms)),
            min_bytes=i32(min_bytes),
            max_bytes=i32(max_bytes),
            topics=(
                mod.FetchTopic(
                    topic=topic,
                    partitions=(
                        mod.FetchPartition(
                            partition=i32(partition),
                            fetch_offset=i64(offset),
                            partition_max_bytes=i32(partition_max_bytes),
                        ),
                    ),
                ),
            ),
            forgotten_topics_data=(),
        )

    @staticmethod
    def init_producer_id(version: int = 1, transaction_timeout_ms: int = 60000):
        import datetime

        from kio.index import load_request_schema
        from kio.static.primitive import i32Timedelta

        return load_request_schema(22, version)(
            transactional_id=None,
            transaction_timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=transaction_timeout_ms)),
        )

    @staticmethod
    def produce_result(response) -> tuple[int, int]:
        """(error_code, base_offset) of a single-partition Produce response."""
        (topic,) = response.responses
        (part,) = topic.partition_responses
        return int(part.error_code), int(part.base_offset)

    @staticmethod
    def fetch_result(response) -> tuple[int, int, bytes]:
        """(error_code, high_watermark, records) of a single-partition Fetch response."""
        (topic,) = response.responses
        (part,) = topic.partitions
        return int(part.error_code), int(part.high_watermark), bytes(part.records or b"")


@pytest.fixture(scope="session")
def raw() -> type[Raw]:
    return Raw


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
    def produce(
        client: str,
        bootstrap: str,
        topic: str,
        recs: list[Rec],
        compression: str = "none",
        partition: int = 0,
    ) -> list[int]:
        if client == "confluent":
            return confluent_produce(bootstrap, topic, recs, partition, {"compression.type": compression})
        if client == "kafka-python":
            return kafka_python_produce(
                bootstrap,
                topic,
                recs,
                partition,
                compression_type=None if compression == "none" else compression,
            )
        if client == "aiokafka":
            return aiokafka_produce(
                bootstrap,
                topic,
                recs,
                partition,
                compression_type=None if compression == "none" else compression,
            )
        if client == "kafkajs":
            res = run_kafkajs(
                "produce",
                bootstrap,
                topic=topic,
                compression=compression,
                messages=[rec_to_js(r, partition) for r in recs],
            )
            base = res[0]["baseOffset"]
            return list(range(base, base + len(recs)))
        raise ValueError(client)

    @staticmethod
    def consume(
        client: str, bootstrap: str, topic: str, count: int, partition: int = 0, start: int | None = None
    ) -> list[Rec]:
        if client == "confluent":
            return confluent_consume(bootstrap, topic, count, partition, start)
        if client == "kafka-python":
            return kafka_python_consume(bootstrap, topic, count, partition, start)
        if client == "aiokafka":
            return aiokafka_consume(bootstrap, topic, count, partition, start)
        if client == "kafkajs":
            res = run_kafkajs(
                "fetch",
                bootstrap,
                topic=topic,
                partition=partition,
                offset=start or 0,
                count=count,
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

    def factory(
        partitions: int = 1, config: dict[str, str] | None = None, broker=None, name: str | None = None
    ):
        target = broker or shared_broker
        topic = name or make_topic_name(request.node.name)
        return create_topic(target.bootstrap, topic, partitions, config)

    return factory


@pytest.fixture(scope="session")
def _no_autocreate_broker_process(broker_logs_dir, helpers) -> Iterator:
    if helpers.TARGET == "tansu":
        pytest.skip("Tansu always auto-creates topics")
    with helpers.running_broker(
        broker_logs_dir, "no-autocreate", {"auto.create.topics.enable": "false"}
    ) as broker:
        yield broker


@pytest.fixture
def no_autocreate_broker(request: pytest.FixtureRequest, _no_autocreate_broker_process, helpers):
    return helpers.live_broker(request, _no_autocreate_broker_process)


@pytest.fixture
def kafkajs(shared_broker) -> Callable[..., Any]:
    """``kafkajs(op, **request)`` against the shared broker; ``bootstrap=`` to aim elsewhere."""

    def call(op: str, bootstrap: str | None = None, **request: Any) -> Any:
        return run_kafkajs(op, bootstrap or shared_broker.bootstrap, **request)

    return call
