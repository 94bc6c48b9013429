"""The message browser and producing a message, through a real consumer and producer.

A browse never loads a whole topic: it reads at most `limit` records per partition between the start it was
asked for and the partition's end at the time of the request, stops at the time limit, and reports which of
the bounds stopped it. The live tail is the same read from a cursor (the next offset per partition), repeated
by the page.
"""

from __future__ import annotations

import base64
import binascii
import json
import time
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from console.clusters.client import client_for, translate
from console.clusters.models import Cluster
from console.errors import Invalid

MODES = ("newest", "oldest", "offset", "timestamp", "tail")
FORMATS = ("auto", "text", "json", "hex")
ENCODINGS = ("text", "json", "base64", "hex")  # of keys and values sent to produce
MAX_LIMIT = 500
DEFAULT_LIMIT = 50
MAX_TIME_LIMIT_S = 10.0
DISPLAY_BYTES = 16 * 1024


@dataclass
class Message:
    partition: int
    offset: int
    timestamp: int | None
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]

    @property
    def size(self) -> int:
        return len(self.key or b"") + len(self.value or b"")


@dataclass
class BrowseResult:
    messages: list[Message]
    next_offsets: dict[int, int]
    stopped_by: str  # "end", "limit" or "time"
    elapsed_ms: int
    partitions: list[int] = field(default_factory=list)


def browse(
    cluster: Cluster,
    topic: str,
    *,
    mode: str = "newest",
    partition: int | None = None,
    offset: int | None = None,
    timestamp_ms: int | None = None,
    limit: int = DEFAULT_LIMIT,
    time_limit_s: float = 5.0,
    cursor: dict[int, int] | None = None,
) -> BrowseResult:
    if mode not in MODES:
        raise Invalid(f"mode must be one of {', '.join(MODES)}", field="mode")
    if not 1 <= limit <= MAX_LIMIT:
        raise Invalid(f"limit must be between 1 and {MAX_LIMIT}", field="limit")
    if mode == "offset" and (offset is None or offset < 0):
        raise Invalid("an offset (>= 0) is needed to browse from an offset", field="offset")
    if mode == "timestamp" and timestamp_ms is None:
        raise Invalid("a timestamp is needed to browse from a time", field="timestamp")
    time_limit_s = max(0.1, min(time_limit_s, MAX_TIME_LIMIT_S))
    started = time.monotonic()
    client = client_for(cluster)
    info = client.topic(topic)
    all_partitions = [p.partition for p in info.partitions]
    if partition is not None and partition not in all_partitions:
        raise Invalid(f"topic {topic!r} has no partition {partition}", field="partition")
    partitions = [partition] if partition is not None else all_partitions
    keys = [(topic, p) for p in partitions]
    low = {p: o for (_, p), o in client.offsets(keys, "earliest").items()}
    high = {p: o for (_, p), o in client.offsets(keys, "latest").items()}

    if mode == "oldest":
        start = dict(low)
    elif mode == "offset":
        start = {p: min(max(offset, low[p]), high[p]) for p in partitions}
    elif mode == "timestamp":
        found = client.offsets(keys, timestamp_ms)
        start = {p: (o if o >= 0 else high[p]) for (_, p), o in found.items()}
    elif mode == "newest":
        start = {p: max(low[p], high[p] - limit) for p in partitions}
    else:  # tail: from the cursor, or from the end
        start = {p: max(low[p], (cursor or {}).get(p, high[p])) for p in partitions}
    stop = None if mode == "tail" else high

    collected, next_offsets, stopped_by = _read(
        client.consumer_config(), topic, start, stop, limit, started + time_limit_s
    )
    if mode == "newest":
        collected.sort(key=lambda m: (m.timestamp or 0, m.partition, m.offset), reverse=True)
        collected = collected[:limit]
    elif mode == "tail":
        collected.sort(key=lambda m: (m.timestamp or 0, m.partition, m.offset), reverse=True)
    else:
        collected.sort(key=lambda m: (m.timestamp or 0, m.partition, m.offset))
        collected = collected[:limit]
    return BrowseResult(
        collected, next_offsets, stopped_by, int((time.monotonic() - started) * 1000), partitions
    )


def _read(
    config: dict, topic: str, start: dict[int, int], stop: dict[int, int] | None, limit: int, deadline: float
) -> tuple[list[Message], dict[int, int], str]:
    """Read from `start` up to `stop` (exclusive; None = whatever is there now), at most `limit` records per
    partition, until `deadline`."""
    next_offsets = dict(start)
    pending = {p for p in start if stop is None or start[p] < stop[p]}
    counts = dict.fromkeys(start, 0)
    out: list[Message] = []
    if not pending:
        return out, next_offsets, "end"
    consumer = Consumer(config)
    stopped_by = "end"
    try:
        consumer.assign([TopicPartition(topic, p, start[p]) for p in sorted(pending)])
        while pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                stopped_by = "time"
                break
            for msg in consumer.consume(num_messages=min(500, limit), timeout=min(remaining, 0.5)):
                p = msg.partition()
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        if stop is None or next_offsets.get(p, 0) >= stop[p]:
                            pending.discard(p)
                        continue
                    raise translate(KafkaException(error), what=f"reading {topic}-{p}")
                if p not in pending:
                    continue
                off = msg.offset()
                if stop is not None and off >= stop[p]:
                    pending.discard(p)
                    continue
                ts_type, ts = msg.timestamp()
                out.append(
                    Message(
                        p,
                        off,
                        ts if ts_type else None,
                        ts_type,
                        msg.key(),
                        msg.value(),
                        list(msg.headers() or []),
                    )
                )
                next_offsets[p] = off + 1
                counts[p] += 1
                if counts[p] >= limit:
                    pending.discard(p)
                    stopped_by = "limit"
                elif stop is not None and off + 1 >= stop[p]:
                    pending.discard(p)
    finally:
        consumer.close()
    return out, next_offsets, stopped_by


# ---------------------------------------------------------------------------------------------- rendering


def render(data: bytes | None, fmt: str = "auto") -> tuple[str, str]:
    """(text, format shown) for a key, value or header: JSON pretty-printed, UTF-8 text, or hex."""
    if data is None:
        return "null", "null"
    shown = data[:DISPLAY_BYTES]
    suffix = f"\n… ({len(data):,} bytes in all)" if len(data) > DISPLAY_BYTES else ""
    if fmt == "hex":
        return shown.hex(" ") + suffix, "hex"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        if fmt == "text":
            return shown.decode("utf-8", errors="replace") + suffix, "text"
        return shown.hex(" ") + suffix, "hex"
    if fmt == "json" or (fmt == "auto" and text[:1] in ("{", "[")):
        try:
            return json.dumps(json.loads(text), indent=2, ensure_ascii=False)[:DISPLAY_BYTES] + suffix, "json"
        except ValueError:
            if fmt == "json":
                return text[:DISPLAY_BYTES] + suffix, "text (not JSON)"
    return text[:DISPLAY_BYTES] + suffix, "text"


def encode(text: str | None, encoding: str, field_name: str) -> bytes | None:
    """Bytes to produce from a form or API field: text (UTF-8), json (checked), base64 or hex; None = null."""
    if text is None:
        return None
    if encoding == "text":
        return text.encode()
    if encoding == "json":
        try:
            json.loads(text)
        except ValueError as exc:
            raise Invalid(f"not valid JSON: {exc}", field=field_name) from None
        return text.encode()
    if encoding == "base64":
        try:
            return base64.b64decode(text, validate=True)
        except binascii.Error:
            raise Invalid("not valid base64", field=field_name) from None
    if encoding == "hex":
        try:
            return bytes.fromhex(text)
        except ValueError:
            raise Invalid("not valid hex", field=field_name) from None
    raise Invalid("encoding must be text, json, base64 or hex", field=f"{field_name}_encoding")


def produce(
    cluster: Cluster,
    topic: str,
    *,
    key: bytes | None,
    value: bytes | None,
    headers: list[tuple[str, bytes]],
    partition: int | None,
    timeout_s: float | None = None,
) -> tuple[int, int]:
    """Produce one record and wait for its acknowledgement: (partition, offset)."""
    client = client_for(cluster)
    info = client.topic(topic)
    if partition is not None and partition not in {p.partition for p in info.partitions}:
        raise Invalid(f"topic {topic!r} has no partition {partition}", field="partition")
    outcome: dict = {}

    def delivered(err, msg) -> None:
        outcome["error"] = err
        outcome["where"] = (msg.partition(), msg.offset()) if err is None else None

    producer = client.producer()
    kwargs = {"partition": partition} if partition is not None else {}
    try:
        producer.produce(
            topic, value=value, key=key, headers=headers or None, on_delivery=delivered, **kwargs
        )
    except Exception as exc:
        raise translate(exc, what=f"producing to {topic}", field="value") from exc
    deadline = time.monotonic() + (timeout_s or client.timeout_s)
    while "error" not in outcome and time.monotonic() < deadline:
        producer.poll(0.05)
    if "error" not in outcome:
        raise translate(TimeoutError(), what=f"producing to {topic}")
    if outcome["error"] is not None:
        raise translate(KafkaException(outcome["error"]), what=f"producing to {topic}", field="value")
    return outcome["where"]
