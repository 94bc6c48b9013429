"""check_records: a batch must carry exactly the records its header declares, well formed, decompressed within
a bound; records that break a topic's rules are named (KIP-467). Every case runs against the compiled walk and
the Python one (test_record_scan.py checks that the two agree on arbitrary bytes)."""

from __future__ import annotations

import itertools
import os
import struct
import zlib

import pytest
import zstandard
from kio.schema.errors import ErrorCode

from broker_runtime.protocol import records
from broker_runtime.protocol.compression import (
    CHUNK_SIZE,
    CODEC_GZIP,
    CODEC_LZ4,
    CODEC_NONE,
    CODEC_SNAPPY,
    CODEC_ZSTD,
    compress,
    decompressed_chunks,
)
from broker_runtime.protocol.records import (
    CRC_START,
    HEADER_SIZE,
    InvalidRecords,
    RecordRules,
    build_batch,
    check_records,
    crc32c,
    read_header,
)
from broker_runtime.protocol.varint import write_varint

CODECS = [CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD]
COMPRESSED = CODECS[1:]
RECORDS = [(b"k1", b"v1", [("h", b"x"), ("h2", None)]), (None, b"v2"), (b"k3", None), (b"", b"")]
NOW = 1_700_000_000_000


@pytest.fixture(params=["compiled", "python"], autouse=True)
def scan_implementation(request, monkeypatch):
    if request.param == "python":
        monkeypatch.setattr(records, "scan_records", records._scan_records_python)
    return request.param


def record(
    ts_delta: int = 0, key: bytes | None = b"k", value: bytes | None = b"v", offset_delta: int = 0
) -> bytes:
    body = bytearray(b"\x00")
    write_varint(body, ts_delta)
    write_varint(body, offset_delta)
    for field in (key, value):
        write_varint(body, -1 if field is None else len(field))
        body += field or b""
    write_varint(body, 0)
    out = bytearray()
    write_varint(out, len(body))
    return bytes(out + body)


def _batch(body: bytes, count: int, codec: int = CODEC_NONE, timestamp: int = NOW) -> bytearray:
    """A batch around `body` (record bytes, compressed with `codec`) declaring `count` records, with a valid CRC:
    a header that lies is caught by the walk, not by the CRC."""
    out = bytearray(build_batch([(None, b"x")], timestamp_ms=timestamp, codec=codec)[:HEADER_SIZE])
    out += compress(codec, body)
    struct.pack_into(">i", out, 8, len(out) - 12)
    struct.pack_into(">i", out, 23, count - 1)
    struct.pack_into(">i", out, 57, count)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[CRC_START:])))
    return out


def _error(batch: bytearray, rules: RecordRules = records.NO_RULES, limit: int = 1 << 30) -> InvalidRecords:
    with pytest.raises(InvalidRecords) as exc:
        check_records(batch, read_header(batch), rules, limit)
    return exc.value


@pytest.mark.parametrize("codec", CODECS)
def test_client_built_batches_pass(codec: int) -> None:
    batch = build_batch(RECORDS, codec=codec)
    check_records(batch, read_header(batch))


@pytest.mark.parametrize("codec", CODECS)
def test_records_cut_by_chunk_boundaries(codec: int) -> None:
    value = os.urandom(1000) * 300  # 300 KB a record: each spans a decompressed chunk boundary
    body = b"".join(record(value=value) for _ in range(3))
    check_records(_batch(body, 3, codec), read_header(_batch(body, 3, codec)))
    assert _error(_batch(body[:-10], 3, codec)).message == (
        "batch declares 3 records but record 2 runs past the end of the batch"
    )


@pytest.mark.parametrize("codec", CODECS)
def test_more_records_than_declared(codec: int) -> None:
    body = record() * 3
    error = _error(_batch(body, 2, codec))
    assert error.error_code == ErrorCode.invalid_record
    assert error.message == f"batch declares 2 records but {len(record())} more bytes follow them"


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("declared", [4, 2**31 - 1])
def test_fewer_records_than_declared(codec: int, declared: int) -> None:
    error = _error(_batch(record() * 3, declared, codec))
    assert error.error_code == ErrorCode.invalid_record
    assert error.message == f"batch declares {declared} records but it carries 3"


@pytest.mark.parametrize("codec", COMPRESSED)
def test_garbage_payload_is_a_corrupt_message(codec: int) -> None:
    batch = _batch(b"", 1, codec)
    del batch[HEADER_SIZE:]
    batch += b"\x07garbage, not a compressed payload\x00\x01\x02" * 3
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[CRC_START:])))
    error = _error(batch)
    assert error.error_code == ErrorCode.corrupt_message, error.message
    assert "does not decompress" in error.message or "truncated" in error.message


@pytest.mark.parametrize("codec", [CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4])
def test_truncated_payload_is_a_corrupt_message(codec: int) -> None:
    batch = _batch(record() * 100, 100, codec)
    del batch[-8:]
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[CRC_START:])))
    assert _error(batch).error_code == ErrorCode.corrupt_message


def test_truncated_zstd_frame_is_caught_by_the_count() -> None:
    # zstandard's stream reader ends quietly at the end of its input; the records then come up short.
    batch = _batch(record() * 100, 100, CODEC_ZSTD)
    del batch[-8:]
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[CRC_START:])))
    assert _error(batch).error_code == ErrorCode.invalid_record


def _decompressed_bytes(monkeypatch) -> list[int]:
    """Make `check_records` count the bytes it decompresses."""
    seen = [0]

    def counting(codec, data, limit):
        for chunk in decompressed_chunks(codec, data, limit):
            seen[0] += len(chunk)
            yield chunk

    monkeypatch.setattr(records, "decompressed_chunks", counting)
    return seen


def test_a_bomb_stops_at_the_limit(monkeypatch) -> None:
    bomb = record(value=bytes(64 << 20))  # one 64 MiB record: a 2 KB zstd payload
    batch = _batch(bomb, 1, CODEC_ZSTD)
    assert len(batch) < 10_000
    seen = _decompressed_bytes(monkeypatch)
    error = _error(batch, limit=1 << 20)
    assert error.error_code == ErrorCode.message_too_large
    assert error.message == "zstd payload decompresses to more than 1048576 bytes"
    assert seen[0] <= CHUNK_SIZE  # the record's length says it cannot fit: refused before buffering it


def test_a_bomb_of_small_records_stops_at_the_limit(monkeypatch) -> None:
    batch = _batch(record(value=bytes(1000)) * 5000, 5000, CODEC_ZSTD)
    seen = _decompressed_bytes(monkeypatch)
    assert _error(batch, limit=1 << 20).error_code == ErrorCode.message_too_large
    assert seen[0] <= (1 << 20) + CHUNK_SIZE
    check_records(batch, read_header(batch), decompressed_limit=5 << 20)


def test_bytes_after_the_declared_records_stop_the_decompression(monkeypatch) -> None:
    body = record() + bytes(64 << 20)
    batch = _batch(body, 1, CODEC_ZSTD)
    seen = _decompressed_bytes(monkeypatch)
    assert "more bytes follow" in _error(batch).message
    assert seen[0] <= 2 * CHUNK_SIZE


def test_snappy_bomb_is_refused_from_its_declared_length(monkeypatch) -> None:
    batch = _batch(record(value=bytes(8 << 20)), 1, CODEC_SNAPPY)
    seen = _decompressed_bytes(monkeypatch)
    assert _error(batch, limit=1 << 20).error_code == ErrorCode.message_too_large
    assert seen[0] == 0


def test_gzip_members_are_read_one_after_another() -> None:
    first, second = record(value=b"a"), record(value=b"b")
    gz = zlib.compressobj(wbits=31)
    member = gz.compress(first) + gz.flush()
    gz = zlib.compressobj(wbits=31)
    batch = _batch(b"", 2, CODEC_GZIP)
    del batch[HEADER_SIZE:]
    batch += member + gz.compress(second) + gz.flush()
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[CRC_START:])))
    check_records(batch, read_header(batch))


def test_zstd_frames_are_read_one_after_another() -> None:
    frames = zstandard.ZstdCompressor().compress(record()) * 2
    batch = _batch(b"", 2, CODEC_ZSTD)
    del batch[HEADER_SIZE:]
    batch += frames
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[CRC_START:])))
    check_records(batch, read_header(batch))


@pytest.mark.parametrize(
    ("record", "message"),
    [
        (b"\x10" + b"\x00\x00\x00\x02k\x00\x00\x00", "record 0: record fields do not add up to its length"),
        (b"\x10" + b"\x00\x00\x00\x02k\x02v\x01", "record 0: header count is negative"),
        (b"\x0a" + b"\x00\x00\x00\x20k", "record 0: key runs past the end of the record"),
        (b"\x08" + b"\x00\x00\x00\x00", "record 0: value length runs past the end of the record"),
        (b"\x03", "record 0: record length is negative or too large"),
        (b"\x0e" + b"\x00\x00\x00\x00\x00\x02\x01", "record 0: header key length is negative"),
        (b"\x16" + b"\x00" + b"\xff" * 10, "record 0: timestamp delta is a varint longer than allowed"),
        (b"\x00", "record 0: record has no attributes byte"),
    ],
    ids=["sizes", "negative-headers", "key-overrun", "truncated-field", "negative-length", "negative-header-key",
         "long-varint", "empty"],
)  # fmt: skip
def test_malformed_records(record: bytes, message: str) -> None:
    error = _error(_batch(record, 1))
    assert error.error_code == ErrorCode.invalid_record
    assert error.message == f"malformed batch: {message}"


def test_malformed_record_is_named_by_its_batch_index() -> None:
    body = record() * 5 + b"\x03"
    assert _error(_batch(body, 6, CODEC_LZ4)).message == (
        "malformed batch: record 5: record length is negative or too large"
    )


@pytest.mark.parametrize("codec", [CODEC_NONE, CODEC_GZIP])
def test_keyless_records_on_a_compacted_topic(codec: int) -> None:
    body = record(key=b"a") + record(key=None) + record(key=b"") + record(key=None)
    error = _error(_batch(body, 4, codec), RecordRules(keys_required=True))
    assert error.error_code == ErrorCode.invalid_record
    assert error.record_errors == (
        (1, "a compacted topic accepts only records with a key"),
        (3, "a compacted topic accepts only records with a key"),
    )
    assert error.message == "2 of 4 records have no key, which a compacted topic requires"
    check_records(_batch(body, 4, codec), read_header(_batch(body, 4, codec)))  # keys optional elsewhere


def test_timestamps_out_of_bounds_are_named() -> None:
    rules = RecordRules(min_timestamp=NOW - 1000, max_timestamp=NOW + 1000)
    body = record(0) + record(-1001) + record(1000) + record(1001) + record(-1000)
    error = _error(_batch(body, 5), rules)
    assert error.error_code == ErrorCode.invalid_timestamp
    bounds = f"[{NOW - 1000}, {NOW + 1000}]"
    assert error.record_errors == ((1, f"timestamp outside {bounds}"), (3, f"timestamp outside {bounds}"))
    assert error.message == f"2 of 5 records have a timestamp outside the range the topic accepts, {bounds}"


def test_key_errors_come_before_timestamp_errors_but_the_batch_fails_on_timestamps() -> None:
    rules = RecordRules(keys_required=True, min_timestamp=NOW, max_timestamp=NOW)
    body = record(5, key=None) + record(0, key=None) + record(7)
    error = _error(_batch(body, 3), rules)
    assert error.error_code == ErrorCode.invalid_timestamp
    assert [i for i, _ in error.record_errors] == [0, 1, 2]
    assert error.record_errors[0][1].startswith("a compacted topic")
    assert error.record_errors[2][1].startswith("timestamp outside")


def test_records_without_a_timestamp_pass_the_bounds() -> None:
    rules = RecordRules(min_timestamp=NOW, max_timestamp=NOW)
    check_records(_batch(record(0), 1, timestamp=-1), read_header(_batch(record(0), 1, timestamp=-1)), rules)


def test_every_codec_round_trips_in_bounded_chunks() -> None:
    data = bytes(itertools.islice(itertools.cycle(range(251)), 3 * CHUNK_SIZE + 5))
    for codec in CODECS:
        chunks = list(decompressed_chunks(codec, compress(codec, data), len(data)))
        assert b"".join(chunks) == data
        if codec not in (CODEC_NONE, CODEC_SNAPPY):  # snappy blocks come whole, their size checked first
            assert max(map(len, chunks)) <= CHUNK_SIZE


def test_zstd_streams_read_at_once_or_abandoned_never_share_a_context() -> None:
    """A thread reuses its zstd context only after a stream was read to its end: streams interleaved, abandoned
    half-way or after an error still decompress exactly."""
    one = bytes(itertools.islice(itertools.cycle(range(251)), 5 * CHUNK_SIZE + 5))
    two = bytes(itertools.islice(itertools.cycle(range(7)), 5 * CHUNK_SIZE + 3))
    zone, ztwo = compress(CODEC_ZSTD, one), compress(CODEC_ZSTD, two)

    first, second = (
        decompressed_chunks(CODEC_ZSTD, zone, len(one)),
        decompressed_chunks(CODEC_ZSTD, ztwo, len(two)),
    )
    got_one, got_two = [next(first)], [next(second)]
    got_one += first
    got_two += second
    assert (b"".join(got_one), b"".join(got_two)) == (one, two)

    abandoned = decompressed_chunks(CODEC_ZSTD, zone, len(one))
    next(abandoned)
    reading = decompressed_chunks(CODEC_ZSTD, ztwo, len(two))
    got = [next(reading)]
    abandoned.close()
    got += reading
    assert b"".join(got) == two

    with pytest.raises(records.CorruptPayload):
        b"".join(decompressed_chunks(CODEC_ZSTD, b"not a zstd frame at all", len(one)))
    for _ in range(2):  # the second read reuses the context the first gave back
        assert b"".join(decompressed_chunks(CODEC_ZSTD, zone, len(one))) == one
