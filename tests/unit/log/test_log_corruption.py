"""Corruption at rest, found outside recovery: reads answer CORRUPT_MESSAGE instead of serving bad bytes or
jumping over offsets, damaged indexes are rebuilt, and every cut is logged with its bytes and offsets."""

from __future__ import annotations

import logging

import pytest
from kio.schema.errors import ErrorCode
from log_helpers import PARTITION_DIR, append, offsets_in, open_log

from broker_runtime.errors import KafkaError
from broker_runtime.log.config import LogConfig

SEGMENT = PARTITION_DIR / "00000000000000000000.log"
INDEX = PARTITION_DIR / "00000000000000000000.index"
CONFIG = LogConfig(segment_bytes=40_000, index_interval_bytes=200)


def _closed_log(fs, clock, batches: int = 100, config: LogConfig = CONFIG):
    """A cleanly closed log of `batches` batches of 10 records (offsets 10*i .. 10*i+9)."""
    log = open_log(fs, clock, config)
    for _ in range(batches):
        append(log, 10, value_size=20)
    log.close()
    return open_log(fs, clock, config, recovery_point=batches * 10, clean_shutdown=True)


def _batch_positions(fs, path=SEGMENT) -> list[tuple[int, int]]:
    """(base offset, byte position) of every batch in a segment file."""
    data = bytes(fs.files[path].data)
    positions, position = [], 0
    for base, _ in offsets_in(data):
        positions.append((base, position))
        position += int.from_bytes(data[position + 8 : position + 12], "big") + 12
    return positions


def _corrupt_message(call) -> KafkaError:
    with pytest.raises(KafkaError) as caught:
        call()
    assert caught.value.error_code == ErrorCode.corrupt_message
    return caught.value


def test_a_flipped_byte_at_rest_is_never_served(fs, clock, caplog):
    log = _closed_log(fs, clock)
    position = dict(_batch_positions(fs))[500]
    fs.files[SEGMENT].data[position + 80] ^= 0x01  # a record byte of the batch holding offsets 500-509
    assert offsets_in(log.read(480, 1 << 20, 2**62, True)) == [(480, 489), (490, 499)]  # stops before it
    with caplog.at_level(logging.ERROR):
        error = _corrupt_message(lambda: log.read(500, 1 << 20, 2**62, True))
        _corrupt_message(lambda: log.read(505, 1 << 20, 2**62, True))
    assert "reading offset 500" in error.message
    assert caplog.text.count("CRC mismatch") == 1  # logged once, not on every retry
    assert offsets_in(log.read(510, 1 << 20, 2**62, True))[0] == (510, 519)


def test_a_flipped_byte_in_an_oversized_first_batch_is_caught_too(fs, clock):
    log = _closed_log(fs, clock, batches=3)
    fs.files[SEGMENT].data[_batch_positions(fs)[1][1] + 100] ^= 0x40
    _corrupt_message(lambda: log.read(10, 10, 2**62, min_one_batch=True))


def test_a_damaged_index_entry_does_not_make_offsets_vanish(fs, clock, caplog):
    """An index entry pointing at a later batch made a fetch at 500 answer from 1020 on: 520 offsets skipped."""
    _closed_log(fs, clock, batches=200)
    positions = _batch_positions(fs)
    index = fs.files[INDEX].data
    entries = [(int.from_bytes(index[i : i + 4], "big"), i) for i in range(0, len(index), 8)]
    _, slot = next((rel, i) for rel, i in entries if rel >= 499)
    index[slot + 4 : slot + 8] = dict(positions)[1020].to_bytes(4, "big")
    reopened = open_log(fs, clock, CONFIG, recovery_point=2000, clean_shutdown=True)
    with caplog.at_level(logging.WARNING):
        assert offsets_in(reopened.read(500, 1 << 20, 2**62, True))[0] == (500, 509)
    assert "rebuilding the indexes" in caplog.text


def test_a_broken_batch_header_mid_log_answers_corrupt_message_not_a_jump(fs, clock):
    config = LogConfig(segment_bytes=8_000, index_interval_bytes=200)
    log = _closed_log(fs, clock, batches=60, config=config)
    assert len(log.segments) >= 3
    first_segment_batches = _batch_positions(fs)
    base, position = first_segment_batches[len(first_segment_batches) // 2]
    fs.files[SEGMENT].data[position + 8 : position + 12] = (3).to_bytes(4, "big")  # impossible length
    reopened = open_log(fs, clock, config, recovery_point=600, clean_shutdown=True)
    _corrupt_message(lambda: reopened.read(base, 1 << 20, 2**62, True))
    # The later segments are intact and still served.
    second = reopened.segments[1].base_offset
    assert offsets_in(reopened.read(second, 1 << 20, 2**62, True))[0][0] == second


def test_recovery_logs_every_cut_with_bytes_and_offsets(fs, clock, caplog):
    config = LogConfig(segment_bytes=2_000)
    log = open_log(fs, clock, config)
    for _ in range(30):
        append(log, 10, value_size=20)
    segments = [(s.log_path, s.base_offset, s.size) for s in log.segments]
    assert len(segments) >= 3
    third = _batch_positions(fs)[2][1]
    fs.files[SEGMENT].data[third + 70] ^= 0xFF  # the batch at offsets 20-29
    with caplog.at_level(logging.WARNING):
        reopened = open_log(fs, clock, config, recovery_point=0)
    assert reopened.log_end_offset == 20
    cut = segments[0][2] - third
    assert f"cut {cut} bytes from byte" in caplog.text and "before offset 20" in caplog.text
    for path, base, size in segments[1:]:
        assert f"deleting {path} ({size} bytes from offset {base} on)" in caplog.text
