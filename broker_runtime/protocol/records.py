"""Record batch v2 views: the 61-byte header, validation, stamping, and record codecs.

Theory of operation. A produced batch is validated as Kafka's LogValidator does, without decoding records
into Python objects: the header (size, magic, CRC32C over bytes 21.., offset-delta/count consistency), then
`check_records`, which walks the records (decompressing a compressed batch in bounded chunks) and checks that
exactly the declared number of well-formed records fill the batch, and which records break the topic's rules
(keys on compacted topics, timestamp bounds). The walk is compiled (`_recordscan.c`: a few ns a record, so
uncompressed batches are checked on the produce path itself); `_scan_records_python` is the same walk in
Python, used when the extension is not built. The batch is then stored as the producer sent it, bar the base
offset and partition leader epoch which the broker stamps in place (neither is covered by the CRC).
Record-level decoding (`decode_records`) exists for the few places that need it: offset lookups by timestamp
inside one batch, the group and transaction coordinators reading their own topics, and tests. Everything
here is pure: bytes in, values or bytes out.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

try:
    from crc32c import crc32c
except ImportError:  # pragma: no cover - the broker refuses to start without it (see require_native_crc32c)
    crc32c = None

from kio.schema.errors import ErrorCode

from broker_runtime.protocol.compression import (
    CODEC_NAMES,
    CODEC_NONE,
    CODEC_ZSTD,
    CorruptPayload,
    DecompressedTooLarge,
    compress,
    decompress,
    decompressed_chunks,
)
from broker_runtime.protocol.varint import VarintError, read_varint, write_varint

try:
    from broker_runtime.protocol._recordscan import scan as _scan_records_compiled
except ImportError:  # pragma: no cover - `pip install -e .` builds it; the broker warns at start without it
    _scan_records_compiled = None

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta,
# baseTimestamp, maxTimestamp, producerId, producerEpoch, baseSequence, recordCount
HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
LOG_OVERHEAD = 12  # baseOffset + batchLength precede the part counted by batchLength
CRC_START = 21
_OFFSET_LENGTH = struct.Struct(">qi")
_EPOCH = struct.Struct(">i")
_BASE_OFFSET = struct.Struct(">q")
_MAX_TIMESTAMP = struct.Struct(">q")
_CRC = struct.Struct(">I")

CODEC_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_FLAG = 0x10
CONTROL_FLAG = 0x20
DELETE_HORIZON_FLAG = 0x40

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
NO_PARTITION_LEADER_EPOCH = -1

CONTROL_ABORT = 0
CONTROL_COMMIT = 1


def require_native_crc32c() -> None:
    """Raise unless the C CRC32C extension is importable: a pure-Python CRC is ~3000x slower."""
    if crc32c is None:
        raise RuntimeError("the C extension 'crc32c' is required (pip install crc32c); refusing to start")


def record_scan_is_compiled() -> bool:
    return scan_records is _scan_records_compiled


class InvalidRecords(Exception):
    """A batch failed validation; carries the Kafka error code to answer with and, when particular records
    are to blame (KIP-467), their batch indexes with a message each."""

    def __init__(
        self, error_code: ErrorCode, message: str, record_errors: tuple[tuple[int, str], ...] = ()
    ) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message
        self.record_errors = record_errors


class BatchHeader(NamedTuple):
    """The fixed fields of one record batch, read from its first 61 bytes. A named tuple: made once per
    produced batch and per batch a read walks, and a tuple is built in a fraction of a frozen dataclass's
    time (which sets each of its 14 fields through object.__setattr__)."""

    position: int  # where the batch starts in the buffer it was read from
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def codec(self) -> int:
        return self.attributes & CODEC_MASK

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_FLAG)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_FLAG)

    @property
    def log_append_time(self) -> bool:
        return bool(self.attributes & TIMESTAMP_TYPE_MASK)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence == NO_SEQUENCE:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) % 2**31

    @property
    def has_producer_id(self) -> bool:
        return self.producer_id >= 0


def read_header(buf: bytes | bytearray | memoryview, position: int = 0) -> BatchHeader:
    """Unpack the header at `position`; the caller guarantees 61 bytes are there."""
    return _new_header(BatchHeader, (position, *HEADER.unpack_from(buf, position)))


_new_header = tuple.__new__


def iter_headers(
    buf: bytes | bytearray | memoryview, start: int = 0, end: int | None = None
) -> Iterator[BatchHeader]:
    """Yield the headers of the complete batches in buf[start:end]; stops at a torn or truncated tail.

    Used by recovery and reads: it trusts nothing but the length fields, so a caller that needs the batch
    to be intact must also call `check_crc`.
    """
    end = len(buf) if end is None else end
    pos = start
    while pos + HEADER_SIZE <= end:
        _, length = _OFFSET_LENGTH.unpack_from(buf, pos)
        if length < HEADER_SIZE - LOG_OVERHEAD or pos + LOG_OVERHEAD + length > end:
            return
        yield read_header(buf, pos)
        pos += LOG_OVERHEAD + length


def check_crc(buf: bytes | bytearray | memoryview, header: BatchHeader) -> bool:
    start = header.position + CRC_START
    end = header.position + header.size
    return crc32c(memoryview(buf)[start:end]) == header.crc


def validate_produce_batch(buf: bytes | bytearray, max_message_bytes: int) -> BatchHeader:
    """Validate the records of one partition in a Produce request: exactly one magic-2 batch.

    Raises InvalidRecords with Kafka's error code. Only the header is read here; `check_records` walks the
    records.
    """
    size = len(buf)
    if size < HEADER_SIZE:
        raise InvalidRecords(
            ErrorCode.invalid_record, f"record set of {size} bytes is shorter than a batch header"
        )
    header = read_header(buf, 0)
    length = header.batch_length
    if length + LOG_OVERHEAD != size:
        if length + LOG_OVERHEAD < size and length >= HEADER_SIZE - LOG_OVERHEAD:
            raise InvalidRecords(
                ErrorCode.invalid_record, "produce requests must carry exactly one record batch per partition"
            )
        raise InvalidRecords(
            ErrorCode.invalid_record, f"batch length {length} does not match the {size} bytes received"
        )
    if header.magic != 2:
        raise InvalidRecords(
            ErrorCode.invalid_record, f"produce requests must use magic 2, not {header.magic}"
        )
    if size > max_message_bytes:
        raise InvalidRecords(
            ErrorCode.message_too_large,
            f"batch of {size} bytes exceeds max.message.bytes {max_message_bytes}",
        )
    if crc32c(memoryview(buf)[CRC_START:]) != header.crc:
        raise InvalidRecords(ErrorCode.corrupt_message, "batch CRC32C does not match its contents")
    if header.record_count <= 0 or header.last_offset_delta + 1 != header.record_count:
        raise InvalidRecords(
            ErrorCode.invalid_record,
            f"record count {header.record_count} does not match last offset delta {header.last_offset_delta}",
        )
    attributes = header.attributes
    if attributes & CONTROL_FLAG:
        raise InvalidRecords(ErrorCode.invalid_record, "clients may not produce control batches")
    if attributes & CODEC_MASK > CODEC_ZSTD:
        raise InvalidRecords(
            ErrorCode.corrupt_message, f"unknown compression codec {attributes & CODEC_MASK}"
        )
    if header.producer_id >= 0 and header.base_sequence < 0:
        raise InvalidRecords(
            ErrorCode.invalid_record, "a batch with a producer id must carry a base sequence"
        )
    return header


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
DEFAULT_DECOMPRESSED_LIMIT = 104857600  # socket.request.max.bytes' default


@dataclass(frozen=True, slots=True)
class RecordRules:
    """What a topic asks of every record, beyond the batch's own consistency (Kafka's LogValidator)."""

    keys_required: bool = False  # compacted topics
    min_timestamp: int = INT64_MIN  # CreateTime bounds: message.timestamp.before.max.ms and after.max.ms
    max_timestamp: int = INT64_MAX


NO_RULES = RecordRules()


def check_records(
    buf: bytes | bytearray | memoryview,
    header: BatchHeader,
    rules: RecordRules = NO_RULES,
    decompressed_limit: int = DEFAULT_DECOMPRESSED_LIMIT,
) -> None:
    """Walk the records of a produced batch: exactly `record_count` well-formed records must fill it, and no
    record may break the topic's rules.

    A compressed batch is decompressed in bounded chunks (never more than `decompressed_limit` bytes in all,
    never held whole) and walked chunk by chunk; an uncompressed one is walked in place. Raises InvalidRecords:
    INVALID_RECORD when the records do not match the header, CORRUPT_MESSAGE when the payload does not
    decompress, MESSAGE_TOO_LARGE past the limit, and INVALID_RECORD or INVALID_TIMESTAMP with the offending
    records' indexes when records break the rules (KIP-467).
    """
    start = header.position + HEADER_SIZE
    end = header.position + header.size
    if not header.attributes & CODEC_MASK:  # uncompressed: the produce path's common case, kept lean
        record_count = header.record_count
        try:
            found, position, need, keyless, untimely = scan_records(
                buf, start, end, record_count, 0, rules.keys_required, header.base_timestamp,
                rules.min_timestamp, rules.max_timestamp,
            )  # fmt: skip
        except ValueError as exc:
            raise InvalidRecords(ErrorCode.invalid_record, f"malformed batch: {exc}") from None
        if found != record_count or position != end or keyless or untimely:
            _refuse(header, rules, found, need, end - position, keyless, untimely)
        return
    walk = _RecordWalk(header, rules, decompressed_limit)
    body = bytes(memoryview(buf)[start:end])
    try:
        for chunk in decompressed_chunks(header.codec, body, decompressed_limit):
            walk.feed(chunk)
    except CorruptPayload as exc:
        raise InvalidRecords(ErrorCode.corrupt_message, str(exc)) from None
    except DecompressedTooLarge as exc:
        raise InvalidRecords(ErrorCode.message_too_large, str(exc)) from None
    walk.finish()


def _scan(
    data: bytes | bytearray | memoryview,
    start: int,
    end: int,
    header: BatchHeader,
    rules: RecordRules,
    done: int,
) -> tuple[int, int, int, list[int], list[int]]:
    try:
        return scan_records(
            data, start, end, header.record_count - done, done, rules.keys_required, header.base_timestamp,
            rules.min_timestamp, rules.max_timestamp,
        )  # fmt: skip
    except ValueError as exc:
        raise InvalidRecords(ErrorCode.invalid_record, f"malformed batch: {exc}") from None


def _refuse(
    header: BatchHeader,
    rules: RecordRules,
    found: int,
    need: int,
    leftover: int,
    keyless: list[int],
    untimely: list[int],
) -> None:
    """Raise what is wrong with a walked batch: its records against its header, then the rules (KIP-467)."""
    declared = header.record_count
    if found < declared:
        where = f"record {found} runs past the end of the batch" if need else f"it carries {found}"
        raise InvalidRecords(ErrorCode.invalid_record, f"batch declares {declared} records but {where}")
    if leftover:
        raise InvalidRecords(
            ErrorCode.invalid_record,
            f"batch declares {declared} records but {leftover} more bytes follow them",
        )
    # Kafka checks a record's key before its timestamp, and names one error per record.
    errors = dict.fromkeys(untimely, f"timestamp outside [{rules.min_timestamp}, {rules.max_timestamp}]")
    errors.update(dict.fromkeys(keyless, "a compacted topic accepts only records with a key"))
    record_errors = tuple(sorted(errors.items()))
    if untimely:
        raise InvalidRecords(
            ErrorCode.invalid_timestamp,
            f"{len(untimely)} of {declared} records have a timestamp outside the range the topic accepts, "
            f"[{rules.min_timestamp}, {rules.max_timestamp}]",
            record_errors,
        )
    if keyless:
        raise InvalidRecords(
            ErrorCode.invalid_record,
            f"{len(keyless)} of {declared} records have no key, which a compacted topic requires",
            record_errors,
        )


class _RecordWalk:
    """The walk of a compressed batch, fed decompressed chunks: records seen so far, rule breakers, and the
    bytes of a record cut by a chunk boundary."""

    __slots__ = (
        "decompressed",
        "header",
        "keyless",
        "limit",
        "need",
        "pending",
        "records",
        "rules",
        "untimely",
    )

    def __init__(self, header: BatchHeader, rules: RecordRules, limit: int) -> None:
        self.header = header
        self.rules = rules
        self.limit = limit
        self.decompressed = 0
        self.records = 0
        self.need = 0
        self.pending = bytearray()
        self.keyless: list[int] = []
        self.untimely: list[int] = []

    def feed(self, chunk: bytes) -> None:
        pending = self.pending
        if self.records == self.header.record_count and chunk:
            self.finish(len(chunk))  # raises: stop decompressing what nothing accounts for
        pending += chunk
        self.decompressed += len(chunk)
        if len(pending) < self.need:
            return
        found, position, self.need, keyless, untimely = _scan(
            pending, 0, len(pending), self.header, self.rules, self.records
        )
        self.records += found
        self.keyless += keyless
        self.untimely += untimely
        del pending[:position]
        if self.decompressed - len(pending) + self.need > self.limit:
            # A record longer than the limit allows: refused now rather than buffered up to the limit.
            raise DecompressedTooLarge(
                f"{CODEC_NAMES[self.header.codec]} payload decompresses to more than {self.limit} bytes"
            )

    def finish(self, more: int = 0) -> None:
        _refuse(
            self.header,
            self.rules,
            self.records,
            self.need,
            len(self.pending) + more,
            self.keyless,
            self.untimely,
        )


class _FieldError(ValueError):
    pass


def _field(view: memoryview, pos: int, end: int, max_bytes: int, what: str) -> tuple[int, int]:
    """A varint field of at most `max_bytes` bytes that must end before `end` (the C walk's read_varint)."""
    try:
        return read_varint(view[: min(end, pos + max_bytes)], pos)
    except VarintError:
        if end - pos >= max_bytes:
            raise _FieldError(f"{what} is a varint longer than allowed") from None
        raise _FieldError(f"{what} runs past the end of the record") from None


def _scan_records_python(
    data: bytes | bytearray | memoryview,
    pos: int,
    end: int,
    max_records: int,
    first_index: int,
    keys_required: bool,
    base_timestamp: int,
    min_timestamp: int,
    max_timestamp: int,
) -> tuple[int, int, int, list[int], list[int]]:
    """The walk of `_recordscan.c` (see there for the contract), for when the extension is not built."""
    view = memoryview(data)
    keyless: list[int] = []
    untimely: list[int] = []
    records = 0
    while records < max_records and pos < end:
        index = first_index + records
        try:
            length, p = _field(view, pos, end, 5, "record length")
        except _FieldError as exc:
            if "runs past" in str(exc):
                return records, pos, end - pos + 1, keyless, untimely
            raise ValueError(f"record {index}: record length is a varint longer than 5 bytes") from None
        if not 0 <= length <= 0x7FFFFFFF:
            raise ValueError(f"record {index}: record length is negative or too large")
        if length > end - p:
            return records, pos, p - pos + length, keyless, untimely
        record_end = p + length
        try:
            if p >= record_end:
                raise _FieldError("record has no attributes byte")
            timestamp_delta, p = _field(view, p + 1, record_end, 10, "timestamp delta")
            _, p = _field(view, p, record_end, 5, "offset delta")
            size, p = _field(view, p, record_end, 5, "key length")
            if size >= 0:
                if size > record_end - p:
                    raise _FieldError("key runs past the end of the record")
                p += size
            elif keys_required:
                keyless.append(index)
            size, p = _field(view, p, record_end, 5, "value length")
            if size >= 0:
                if size > record_end - p:
                    raise _FieldError("value runs past the end of the record")
                p += size
            count, p = _field(view, p, record_end, 5, "header count")
            if count < 0:
                raise _FieldError("header count is negative")
            for _ in range(count):
                size, p = _field(view, p, record_end, 5, "header key length")
                if size < 0:
                    raise _FieldError("header key length is negative")
                if size > record_end - p:
                    raise _FieldError("header key runs past the end of the record")
                p += size
                size, p = _field(view, p, record_end, 5, "header value length")
                if size >= 0:
                    if size > record_end - p:
                        raise _FieldError("header value runs past the end of the record")
                    p += size
            if p != record_end:
                raise _FieldError("record fields do not add up to its length")
        except _FieldError as exc:
            raise ValueError(f"record {index}: {exc}") from None
        timestamp = (base_timestamp + timestamp_delta + 2**63) % 2**64 - 2**63  # int64 wrap-around, as Java
        if timestamp != -1 and not min_timestamp <= timestamp <= max_timestamp:
            untimely.append(index)
        pos = record_end
        records += 1
    return records, pos, 0, keyless, untimely


scan_records = _scan_records_compiled or _scan_records_python


def stamp(buf: bytearray | memoryview, position: int, base_offset: int, leader_epoch: int) -> None:
    """Write the broker-assigned base offset and partition leader epoch; neither is covered by the CRC."""
    _BASE_OFFSET.pack_into(buf, position, base_offset)
    _EPOCH.pack_into(buf, position + 12, leader_epoch)


def set_log_append_time(buf: bytearray, header: BatchHeader, timestamp_ms: int) -> None:
    """Switch a batch to LogAppendTime: set the attribute bit, maxTimestamp, and recompute the CRC."""
    pos = header.position
    struct.pack_into(">h", buf, pos + 21, header.attributes | TIMESTAMP_TYPE_MASK)
    _MAX_TIMESTAMP.pack_into(buf, pos + 35, timestamp_ms)
    _CRC.pack_into(buf, pos + 17, crc32c(memoryview(buf)[pos + CRC_START : pos + header.size]))


# --- record-level codecs (off the hot path) ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


def decode_records(
    buf: bytes | bytearray | memoryview,
    header: BatchHeader,
    decompressed_limit: int = DEFAULT_DECOMPRESSED_LIMIT,
) -> list[Record]:
    """Decode every record of one batch (decompressing if needed)."""
    data = memoryview(_decompressed_body(buf, header, decompressed_limit))
    try:
        return _parse_records(data, header)
    except VarintError as exc:
        raise InvalidRecords(ErrorCode.corrupt_message, str(exc)) from None


def _parse_records(data: memoryview, header: BatchHeader) -> list[Record]:
    records = []
    pos = 0
    for _ in range(header.record_count):
        length, pos = read_varint(data, pos)
        end = pos + length
        if length < 0 or end > len(data):
            raise InvalidRecords(ErrorCode.corrupt_message, "record length runs past the batch")
        pos += 1  # record attributes, unused
        ts_delta, pos = read_varint(data, pos)
        off_delta, pos = read_varint(data, pos)
        key_len, pos = read_varint(data, pos)
        key = None
        if key_len >= 0:
            key = bytes(data[pos : pos + key_len])
            pos += key_len
        value_len, pos = read_varint(data, pos)
        value = None
        if value_len >= 0:
            value = bytes(data[pos : pos + value_len])
            pos += value_len
        n_headers, pos = read_varint(data, pos)
        headers = []
        for _ in range(n_headers):
            hk_len, pos = read_varint(data, pos)
            hk = bytes(data[pos : pos + hk_len]).decode("utf-8", "replace")
            pos += hk_len
            hv_len, pos = read_varint(data, pos)
            hv = None
            if hv_len >= 0:
                hv = bytes(data[pos : pos + hv_len])
                pos += hv_len
            headers.append((hk, hv))
        if pos != end:
            raise InvalidRecords(ErrorCode.corrupt_message, "record fields do not add up to its length")
        base_ts = header.max_timestamp if header.log_append_time else header.base_timestamp
        records.append(Record(header.base_offset + off_delta, base_ts + ts_delta, key, value, tuple(headers)))
    return records


def _decompressed_body(buf: bytes | bytearray | memoryview, header: BatchHeader, limit: int) -> bytes:
    body = bytes(memoryview(buf)[header.position + HEADER_SIZE : header.position + header.size])
    try:
        return decompress(header.codec, body, limit)
    except CorruptPayload as exc:
        raise InvalidRecords(ErrorCode.corrupt_message, str(exc)) from None
    except DecompressedTooLarge as exc:
        raise InvalidRecords(ErrorCode.message_too_large, str(exc)) from None


def recompress(
    buf: bytes | bytearray,
    header: BatchHeader,
    codec: int,
    decompressed_limit: int = DEFAULT_DECOMPRESSED_LIMIT,
) -> bytearray:
    """Re-encode one batch with another codec (a topic's compression.type differs from the producer's).

    Records are encoded the same whatever the codec, so only the body is decompressed and compressed again;
    the header keeps every field but the codec bits, the length and the CRC. Off the hot path by definition:
    it runs only for topics that ask for it.
    """
    payload = compress(codec, _decompressed_body(buf, header, decompressed_limit))
    out = bytearray(memoryview(buf)[header.position : header.position + HEADER_SIZE]) + payload
    _OFFSET_LENGTH.pack_into(out, 0, header.base_offset, len(out) - LOG_OVERHEAD)
    struct.pack_into(">h", out, 21, (header.attributes & ~CODEC_MASK) | codec)
    _CRC.pack_into(out, 17, crc32c(memoryview(out)[CRC_START:]))
    return out


def build_batch(
    records: Sequence[tuple[bytes | None, bytes | None]]
    | Sequence[tuple[bytes | None, bytes | None, Sequence[tuple[str, bytes | None]]]],
    *,
    base_offset: int = 0,
    timestamp_ms: int | None = None,
    codec: int = CODEC_NONE,
    producer_id: int = NO_PRODUCER_ID,
    producer_epoch: int = NO_PRODUCER_EPOCH,
    base_sequence: int = NO_SEQUENCE,
    transactional: bool = False,
    control: bool = False,
    partition_leader_epoch: int = NO_PARTITION_LEADER_EPOCH,
) -> bytearray:
    """Encode one v2 batch of (key, value[, headers]) records, all with the same timestamp."""
    if not records:
        raise ValueError("a batch needs at least one record")
    ts = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    body = bytearray()
    for delta, rec in enumerate(records):
        key, value = rec[0], rec[1]
        headers = rec[2] if len(rec) > 2 else ()  # type: ignore[misc]
        r = bytearray(b"\x00")  # attributes
        write_varint(r, 0)  # timestamp delta
        write_varint(r, delta)
        for field in (key, value):
            if field is None:
                write_varint(r, -1)
            else:
                write_varint(r, len(field))
                r += field
        write_varint(r, len(headers))
        for hk, hv in headers:
            hk_bytes = hk.encode()
            write_varint(r, len(hk_bytes))
            r += hk_bytes
            if hv is None:
                write_varint(r, -1)
            else:
                write_varint(r, len(hv))
                r += hv
        write_varint(body, len(r))
        body += r
    payload = compress(codec, bytes(body))
    attributes = codec | (TRANSACTIONAL_FLAG if transactional else 0) | (CONTROL_FLAG if control else 0)
    out = bytearray(HEADER_SIZE) + payload
    HEADER.pack_into(
        out, 0, base_offset, len(out) - LOG_OVERHEAD, partition_leader_epoch, 2, 0, attributes,
        len(records) - 1, ts, ts, producer_id, producer_epoch, base_sequence, len(records),
    )  # fmt: skip
    _CRC.pack_into(out, 17, crc32c(memoryview(out)[CRC_START:]))
    return out


def build_control_batch(
    control_type: int,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    timestamp_ms: int | None = None,
) -> bytearray:
    """A transaction marker: key = (version 0, type), value = (version 0, coordinator epoch)."""
    key = struct.pack(">hh", 0, control_type)
    value = struct.pack(">hi", 0, coordinator_epoch)
    return build_batch(
        [(key, value)], timestamp_ms=timestamp_ms, producer_id=producer_id, producer_epoch=producer_epoch,
        transactional=True, control=True,
    )  # fmt: skip
