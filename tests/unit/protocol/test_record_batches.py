"""Record batch header validation: each corruption gets Kafka's error code."""

from __future__ import annotations

import struct

import pytest
from kio.schema.errors import ErrorCode

from broker_runtime.protocol.compression import CODEC_GZIP, CODEC_LZ4, CODEC_NONE, CODEC_SNAPPY, CODEC_ZSTD
from broker_runtime.protocol.records import (
    InvalidRecords,
    build_batch,
    decode_records,
    stamp,
    validate_produce_batch,
)

RECORDS = [(b"k1", b"v1", [("h", b"x")]), (None, b"v2"), (b"k3", None)]


@pytest.mark.parametrize("codec", [CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD])
def test_round_trip_every_codec(codec: int) -> None:
    batch = build_batch(RECORDS, timestamp_ms=1000, codec=codec)
    header = validate_produce_batch(batch, 1 << 20)
    assert header.record_count == 3 and header.codec == codec
    decoded = decode_records(batch, header)
    assert [(r.key, r.value, r.headers) for r in decoded] == [
        (b"k1", b"v1", (("h", b"x"),)), (None, b"v2", ()), (b"k3", None, ()),
    ]  # fmt: skip


def test_stamping_keeps_the_crc_valid() -> None:
    batch = build_batch(RECORDS)
    stamp(batch, 0, 42, 7)
    header = validate_produce_batch(batch, 1 << 20)
    assert (header.base_offset, header.partition_leader_epoch, header.last_offset) == (42, 7, 44)


def _corrupt(offset: int, fmt: str, value: int) -> bytearray:
    batch = build_batch(RECORDS)
    struct.pack_into(fmt, batch, offset, value)
    return batch


@pytest.mark.parametrize(
    ("batch", "code"),
    [
        (_corrupt(16, ">b", 1), ErrorCode.invalid_record),  # magic 1
        (_corrupt(17, ">I", 12345), ErrorCode.corrupt_message),  # CRC
        (_corrupt(8, ">i", 10), ErrorCode.invalid_record),  # length shorter than the bytes
        (build_batch(RECORDS)[:40], ErrorCode.invalid_record),  # shorter than a header
        (build_batch(RECORDS) + build_batch(RECORDS), ErrorCode.invalid_record),  # two batches
    ],
    ids=["magic", "crc", "length", "truncated", "two-batches"],
)
def test_corruptions_are_refused_with_kafkas_code(batch: bytearray, code: ErrorCode) -> None:
    with pytest.raises(InvalidRecords) as exc:
        validate_produce_batch(batch, 1 << 20)
    assert exc.value.error_code == code


def test_batch_larger_than_max_message_bytes() -> None:
    batch = build_batch([(None, b"x" * 2000)])
    with pytest.raises(InvalidRecords) as exc:
        validate_produce_batch(batch, 1000)
    assert exc.value.error_code == ErrorCode.message_too_large


def test_record_count_must_match_offset_delta() -> None:
    from broker_runtime.protocol.records import CRC_START, crc32c

    batch = build_batch(RECORDS)
    struct.pack_into(">i", batch, 57, 5)
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[CRC_START:])))
    with pytest.raises(InvalidRecords) as exc:
        validate_produce_batch(batch, 1 << 20)
    assert exc.value.error_code == ErrorCode.invalid_record
