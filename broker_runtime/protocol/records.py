"""Record batch v2 views: the 61-byte header, validation, stamping, and (off the hot path) record codecs.

Theory of operation. The produce and fetch paths never look at individual records: a batch is validated from
its header alone (size, magic, CRC32C over bytes 21.., offset-delta/count consistency) and stored as the
producer sent it, bar the base offset and partition leader epoch which the broker stamps in place (neither is
covered by the CRC). Record-level decoding (`decode_records`) exists for the few places that need it: offset
lookups by timestamp inside one batch, the group and transaction coordinators reading their own topics, and
tests. Everything here is pure: bytes in, values or bytes out.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

try:
    from crc32c import crc32c
except ImportError:  # pragma: no cover - the broker refuses to start without it (see require_native_crc32c)
    crc32c = None

from kio.schema.errors import ErrorCode

from broker_runtime.protocol.varint import VarintError, read_varint, write_varint

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

CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD = range(5)
CODEC_NAMES = {
    CODEC_NONE: "none",
    CODEC_GZIP: "gzip",
    CODEC_SNAPPY: "snappy",
    CODEC_LZ4: "lz4",
    CODEC_ZSTD: "zstd",
}

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


class InvalidRecords(Exception):
    """A batch failed validation; carries the Kafka error code to answer with."""

    def __init__(self, error_code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error_code = error_code
        self.message = message


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """The fixed fields of one record batch, read from its first 61 bytes."""

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
    return BatchHeader(position, *HEADER.unpack_from(buf, position))


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

    Raises InvalidRecords with Kafka's error code. Only the header is read; records are trusted to match it
    (a documented deviation from Kafka, which also walks every record).
    """
    size = len(buf)
    if size < HEADER_SIZE:
        raise InvalidRecords(
            ErrorCode.invalid_record, f"record set of {size} bytes is shorter than a batch header"
        )
    _, length = _OFFSET_LENGTH.unpack_from(buf, 0)
    if length + LOG_OVERHEAD != size:
        if length + LOG_OVERHEAD < size and length >= HEADER_SIZE - LOG_OVERHEAD:
            raise InvalidRecords(
                ErrorCode.invalid_record, "produce requests must carry exactly one record batch per partition"
            )
        raise InvalidRecords(
            ErrorCode.invalid_record, f"batch length {length} does not match the {size} bytes received"
        )
    header = read_header(buf, 0)
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
    if header.is_control:
        raise InvalidRecords(ErrorCode.invalid_record, "clients may not produce control batches")
    if header.codec > CODEC_ZSTD:
        raise InvalidRecords(ErrorCode.corrupt_message, f"unknown compression codec {header.codec}")
    if header.has_producer_id and header.base_sequence < 0:
        raise InvalidRecords(
            ErrorCode.invalid_record, "a batch with a producer id must carry a base sequence"
        )
    return header


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


def _decompress(codec: int, data: bytes) -> bytes:
    import cramjam

    if codec == CODEC_NONE:
        return data
    if codec == CODEC_GZIP:
        return bytes(cramjam.gzip.decompress(data))
    if codec == CODEC_SNAPPY:
        return _snappy_decompress(data)
    if codec == CODEC_LZ4:
        return bytes(cramjam.lz4.decompress(data))
    if codec == CODEC_ZSTD:
        return bytes(cramjam.zstd.decompress(data))
    raise InvalidRecords(ErrorCode.corrupt_message, f"unknown compression codec {codec}")


_XERIAL_MAGIC = b"\x82SNAPPY\x00"


def _snappy_decompress(data: bytes) -> bytes:
    """Java clients frame snappy the xerial way (magic, then length-prefixed blocks); librdkafka sends raw."""
    import cramjam

    if not data.startswith(_XERIAL_MAGIC):
        return bytes(cramjam.snappy.decompress_raw(data))
    out = bytearray()
    pos = 16  # magic (8) + version (4) + compatible version (4)
    while pos + 4 <= len(data):
        (n,) = struct.unpack_from(">i", data, pos)
        pos += 4
        out += bytes(cramjam.snappy.decompress_raw(data[pos : pos + n]))
        pos += n
    return bytes(out)


def _compress(codec: int, data: bytes) -> bytes:
    import cramjam

    if codec == CODEC_NONE:
        return data
    if codec == CODEC_GZIP:
        return bytes(cramjam.gzip.compress(data))
    if codec == CODEC_SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == CODEC_LZ4:
        return bytes(cramjam.lz4.compress(data))
    if codec == CODEC_ZSTD:
        return bytes(cramjam.zstd.compress(data))
    raise ValueError(f"unknown codec {codec}")


def decode_records(buf: bytes | bytearray | memoryview, header: BatchHeader) -> list[Record]:
    """Decode every record of one batch (decompressing if needed)."""
    body = bytes(memoryview(buf)[header.position + HEADER_SIZE : header.position + header.size])
    data = memoryview(_decompress(header.codec, body))
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


def recompress(buf: bytes | bytearray, header: BatchHeader, codec: int) -> bytearray:
    """Re-encode one batch with another codec (a topic's compression.type differs from the producer's).

    Records are encoded the same whatever the codec, so only the body is decompressed and compressed again;
    the header keeps every field but the codec bits, the length and the CRC. Off the hot path by definition:
    it runs only for topics that ask for it.
    """
    body = bytes(memoryview(buf)[header.position + HEADER_SIZE : header.position + header.size])
    payload = _compress(codec, _decompress(header.codec, body))
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
    payload = _compress(codec, bytes(body))
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
