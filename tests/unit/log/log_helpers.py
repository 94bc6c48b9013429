"""Helpers for log tests: batch builders, opening a log on the in-memory filesystem."""

from __future__ import annotations

from pathlib import Path

from broker_runtime.log.config import LogConfig
from broker_runtime.log.partition_log import PartitionLog
from broker_runtime.protocol.records import build_batch, iter_headers, read_header

LOG_DIR = Path("/data/logs")
PARTITION_DIR = LOG_DIR / "orders-0"


def make_batch(
    n: int = 1, *, value_size: int = 10, timestamp_ms: int = 1_700_000_000_000, **kwargs
) -> bytearray:
    return build_batch([(None, b"v" * value_size)] * n, timestamp_ms=timestamp_ms, **kwargs)


def append(log: PartitionLog, n: int = 1, *, epoch: int = 0, now_ms: int | None = None, **kwargs):
    batch = make_batch(n, **kwargs)
    return log.append_as_leader(
        batch, read_header(batch), epoch, now_ms if now_ms is not None else log.clock.time_ms()
    )


def open_log(fs, clock, config: LogConfig | None = None, **kwargs) -> PartitionLog:
    return PartitionLog.open(fs, PARTITION_DIR, "orders", 0, config or LogConfig(), clock, **kwargs)


def offsets_in(data: bytes) -> list[tuple[int, int]]:
    """(base offset, last offset) of every batch in a read result."""
    return [(h.base_offset, h.last_offset) for h in iter_headers(data)]


def batch_with_record_timestamps(base_timestamp: int, deltas: list[int]) -> bytearray:
    """An uncompressed batch whose records carry base_timestamp + delta (0 <= delta < 64).

    build_batch gives every record the same timestamp; each record's timestampDelta is then the one-byte varint
    0, two bytes after the record start, so it can be patched in place before the CRC is recomputed.
    """
    import struct

    from crc32c import crc32c

    batch = build_batch([(None, b"x")] * len(deltas), timestamp_ms=base_timestamp)
    position = 61
    for delta in deltas:
        assert 0 <= delta < 64
        length = batch[position] >> 1  # one-byte zigzag varint: records here are tiny
        batch[position + 2] = delta << 1
        position += 1 + length
    struct.pack_into(">q", batch, 35, base_timestamp + max(deltas))
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    return batch
