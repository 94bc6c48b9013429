"""One log segment: `%020d.log` plus its `.index`, `.timeindex` and `.txnindex` (aborted transactions, only
when the segment holds an ABORT marker; see txn_index.py).

The `.log` file is a sequence of v2 record batches exactly as stored on the wire. The segment reads only batch
headers (61 bytes) when it scans; record bodies are read only by `recover` (for the CRC) and by timestamp
lookups (to find the record inside a batch).
"""

from __future__ import annotations

import logging
import random
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from broker_runtime.log.config import LogConfig
from broker_runtime.log.fs import FileSystem
from broker_runtime.log.index import CorruptIndexError, OffsetIndex, TimeIndex
from broker_runtime.log.txn_index import TransactionIndex
from broker_runtime.protocol.records import (
    CRC_START,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    decode_records,
)

try:
    from crc32c import crc32c
except ImportError:  # pragma: no cover - records.require_native_crc32c guards broker start
    crc32c = None

log = logging.getLogger(__name__)
_SCAN_CHUNK = 16 * 1024  # header scans: a sparse-index gap (4 KiB) plus some
_RECOVER_CHUNK = 1024 * 1024  # recovery reads every byte; big reads keep syscalls few
NO_TIMESTAMP = -1


def file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """What the segment needs to index one batch it is about to append."""

    relative_position: int  # within the bytes handed to append()
    size: int
    base_offset: int
    last_offset: int
    max_timestamp: int


class CorruptSegmentError(Exception):
    """Bytes of a segment that are not the valid batch that should start there."""

    def __init__(self, path: Path, position: int, reason: str) -> None:
        super().__init__(f"{path} at byte {position}: {reason}")
        self.path, self.position, self.reason = path, position, reason


_BASE_AND_LENGTH = struct.Struct(">qi")
_MAGIC_AND_CRC = struct.Struct(">bI")
_MAGIC_AT = 16
_LAST_OFFSET_DELTA = struct.Struct(">i")
_LAST_OFFSET_DELTA_AT = 23
_MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD


def _batches_end(buf: bytes, max_offset: int, *, ends_segment: bool, check_from: int = 0,
                 check_to: int = 2**62) -> tuple[int, str | None]:  # fmt: skip
    """(end, problem): the end of the complete, intact batches at the start of `buf` whose last offset is below
    `max_offset`, and why the batch at `end` is corrupt (None when it is merely past the limits).

    The fetch path's only per-batch work: two small unpacks, no header object; and for the batches starting in
    [check_from, check_to), the ones not known good, the magic and a CRC32C (in C), so that a flipped byte at rest
    never reaches clients that do not check CRCs (librdkafka's default).
    `ends_segment`: `buf` reaches the end of the segment, so a batch running past it is torn, not cut short."""
    position, size = 0, len(buf)
    unpack_base, unpack_delta = _BASE_AND_LENGTH.unpack_from, _LAST_OFFSET_DELTA.unpack_from
    while position + HEADER_SIZE <= size:
        base_offset, length = unpack_base(buf, position)
        end = position + LOG_OVERHEAD + length
        if length < _MIN_BATCH_LENGTH:
            return position, f"impossible batch length {length}"
        if end > size:
            return position, ("batch runs past the end of the segment" if ends_segment else None)
        if base_offset + unpack_delta(buf, position + _LAST_OFFSET_DELTA_AT)[0] >= max_offset:
            break
        if check_from <= position < check_to:
            magic, crc = _MAGIC_AND_CRC.unpack_from(buf, position + _MAGIC_AT)
            if magic != 2:
                return position, f"magic {magic}, not 2"
            if crc32c(memoryview(buf)[position + CRC_START : end]) != crc:
                return position, f"CRC mismatch in the batch at offset {base_offset}"
        position = end
    if ends_segment and 0 < size - position < HEADER_SIZE:
        return position, f"{size - position} bytes at the end are not a whole batch"
    return position, None


def _header_problem(header: BatchHeader, segment_size: int, next_offset: int | None) -> str | None:
    """Why `header` cannot be the next batch of a segment of `segment_size` bytes (None if it can)."""
    if header.batch_length < _MIN_BATCH_LENGTH:
        return f"impossible batch length {header.batch_length}"
    if header.position + header.size > segment_size:
        return f"batch of {header.size} bytes runs past the end of the segment ({segment_size} bytes)"
    if header.magic != 2:
        return f"magic {header.magic}, not 2"
    if header.last_offset_delta < 0 or (next_offset is not None and header.base_offset < next_offset):
        return (
            f"offsets {header.base_offset}-{header.last_offset} go backwards (expected {next_offset} or more)"
        )
    return None


class _ChunkReader:
    """Serves small reads of a file region from one buffered pread, refilling when a read falls outside."""

    def __init__(self, fs: FileSystem, handle: int, end: int, chunk: int) -> None:
        self._fs, self._handle, self._end, self._chunk = fs, handle, end, chunk
        self._start = 0
        self._buf = b""

    def get(self, position: int, size: int) -> memoryview | None:
        if position + size > self._end:
            return None
        offset = position - self._start
        if offset < 0 or offset + size > len(self._buf):
            self._start = position
            self._buf = self._fs.pread(
                self._handle, min(max(size, self._chunk), self._end - position), position
            )
            offset = 0
            if len(self._buf) < size:
                return None
        return memoryview(self._buf)[offset : offset + size]


class LogSegment:
    def __init__(self, fs: FileSystem, directory: Path, base_offset: int, config: LogConfig, created_ms: int,
                 handle: int, size: int) -> None:  # fmt: skip
        self.fs = fs
        self.dir = directory
        self.base_offset = base_offset
        self.config = config
        self.created_ms = created_ms
        self._handle = handle
        self.size = size
        self.log_path = directory / file_name(base_offset, ".log")
        self.index_path = directory / file_name(base_offset, ".index")
        self.time_index_path = directory / file_name(base_offset, ".timeindex")
        self.txn_index_path = directory / file_name(base_offset, ".txnindex")
        self.txn_index = TransactionIndex(fs, self.txn_index_path, base_offset)
        self._offset_index: OffsetIndex | None = None
        self._time_index: TimeIndex | None = None
        self.next_offset = base_offset  # valid once loaded: LEO of this segment
        self.max_timestamp = NO_TIMESTAMP
        self.offset_of_max_timestamp = base_offset
        self._first_batch_timestamp: int | None = None
        self._bytes_since_index_entry = 0
        self.unflushed = False
        # Batches known good, which reads need not CRC-check again: those starting below `_checked_end` (checked
        # by recovery or by an earlier read) and from `_written_from` on (this process validated them before
        # writing them).
        self._checked_end = 0
        self._written_from = size
        jitter = config.segment_jitter_ms
        self.roll_jitter_ms = random.randrange(min(jitter, config.segment_ms)) if jitter > 0 else 0

    # --- lifecycle ---------------------------------------------------------------------------------------

    @classmethod
    def create(
        cls, fs: FileSystem, directory: Path, base_offset: int, config: LogConfig, now_ms: int
    ) -> LogSegment:
        path = directory / file_name(base_offset, ".log")
        handle = fs.open(path)
        fs.truncate(handle, 0)
        segment = cls(fs, directory, base_offset, config, now_ms, handle, 0)
        segment._offset_index = OffsetIndex(fs, segment.index_path, base_offset, config.segment_index_bytes)
        segment._time_index = TimeIndex(fs, segment.time_index_path, base_offset, config.segment_index_bytes)
        segment._offset_index.write_trimmed()
        segment._time_index.write_trimmed()
        segment._offset_index.preallocate()
        segment._time_index.preallocate()
        return segment

    @classmethod
    def open(
        cls, fs: FileSystem, directory: Path, base_offset: int, config: LogConfig, now_ms: int
    ) -> LogSegment:
        """Open an existing segment without reading it; indexes load on first use (rebuilt if bad)."""
        path = directory / file_name(base_offset, ".log")
        handle = fs.open(path, create=False)
        try:
            created = fs.mtime_ms(path)
        except (OSError, KeyError):
            created = now_ms
        return cls(fs, directory, base_offset, config, created, handle, fs.size(handle))

    def close(self) -> None:
        if self._handle < 0:
            return
        if self.finish_indexes():
            self._offset_index.fsync()  # type: ignore[union-attr]
            self._time_index.fsync()  # type: ignore[union-attr]
        self.txn_index.fsync()
        self.fs.close(self._handle)
        self._handle = -1

    def close_handle(self) -> None:
        """Close the file without touching indexes (the segment is about to be deleted)."""
        if self._handle >= 0:
            self.fs.close(self._handle)
            self._handle = -1

    def delete(self) -> None:
        self.close_handle()
        for path in (self.log_path, self.index_path, self.time_index_path, self.txn_index_path):
            if self.fs.exists(path):
                self.fs.unlink(path)
        self.txn_index.forget()

    def change_config(self, config: LogConfig) -> None:
        self.config = config

    # --- indexes -----------------------------------------------------------------------------------------

    @property
    def offset_index(self) -> OffsetIndex:
        if self._offset_index is None:
            self._load_indexes()
        assert self._offset_index is not None
        return self._offset_index

    @property
    def time_index(self) -> TimeIndex:
        if self._time_index is None:
            self._load_indexes()
        assert self._time_index is not None
        return self._time_index

    def _load_indexes(self) -> None:
        """Load both indexes; a missing, misshapen or inconsistent index is rebuilt from the log."""
        try:
            if not (self.fs.exists(self.index_path) and self.fs.exists(self.time_index_path)):
                raise CorruptIndexError("index file missing")
            offset_index = OffsetIndex.load(
                self.fs, self.index_path, self.base_offset, self.config.segment_index_bytes
            )
            time_index = TimeIndex.load(
                self.fs, self.time_index_path, self.base_offset, self.config.segment_index_bytes
            )
            offset_index.sanity_check(self.size)
            time_index.sanity_check(self.size)
        except CorruptIndexError as error:
            log.warning("rebuilding the indexes of %s: %s", self.log_path, error)
            self.rebuild_indexes()
            return
        self._offset_index, self._time_index = offset_index, time_index
        self.max_timestamp, self.offset_of_max_timestamp = time_index.last_entry()
        if self.max_timestamp < 0:
            self.offset_of_max_timestamp = self.base_offset

    def rebuild_indexes(self) -> None:
        """Rebuild the indexes from the batches, without cutting anything: bytes that are not a valid batch
        stay (and reads reaching them answer CORRUPT_MESSAGE), so that a segment in the middle of a log never
        loses data quietly. Only recovery of the log's tail cuts (`recover`)."""
        problem = self._reindex()
        if problem is not None:
            position, reason = problem
            log.error(
                "%s: %d bytes from byte %d (offset %d on) are unreadable: %s; fetches reaching them answer "
                "CORRUPT_MESSAGE", self.log_path, self.size - position, position, self.next_offset, reason,
            )  # fmt: skip

    def load_end(self) -> bool:
        """Find this segment's next offset by scanning from its last index entry (clean-shutdown path); returns
        whether the segment had to be recovered.

        Nothing is trusted: the batch at the last entry must be the one it names, every header after it must
        be whole, and the scan must end exactly at the end of the file. Otherwise the segment is recovered like
        after a crash (every batch read, CRC included; the tail from the first bad batch on is cut, logged)."""
        indexed_offset, position = self.offset_index.lookup(2**62)
        next_offset, max_timestamp, offset_of_max = (
            self.base_offset,
            self.max_timestamp,
            self.offset_of_max_timestamp,
        )
        try:
            for header in self.checked_headers_from(position, indexed_offset if position else None):
                next_offset = header.next_offset
                if header.max_timestamp > max_timestamp:
                    max_timestamp, offset_of_max = header.max_timestamp, header.last_offset
        except CorruptSegmentError as error:
            log.warning("%s; recovering the segment", error)
            self.txn_index.reset()
            self.recover()
            return True
        self.next_offset = next_offset
        self.max_timestamp, self.offset_of_max_timestamp = max_timestamp, offset_of_max
        return False

    def finish_indexes(self) -> bool:
        """The segment stops being active (roll or close): final time entry, trim index files to their entries.
        Returns whether anything was written."""
        if self._offset_index is None or self._time_index is None:
            return False
        if self.max_timestamp >= 0:
            self._time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        wrote = False
        for index in (self._offset_index, self._time_index):
            if not index.trimmed:
                index.write_trimmed()
                wrote = True
        return wrote

    # --- append ------------------------------------------------------------------------------------------

    def should_roll(self, incoming_bytes: int, incoming_max_timestamp: int, incoming_last_offset: int,
                    now_ms: int) -> bool:  # fmt: skip
        """Kafka's LogSegment.shouldRoll."""
        if self.size == 0:
            return False
        if self.size > self.config.segment_bytes - incoming_bytes:
            return True
        if (
            self._time_waited_for_roll(now_ms, incoming_max_timestamp)
            > self.config.segment_ms - self.roll_jitter_ms
        ):
            return True
        if self.offset_index.is_full or self.time_index.is_full:
            return True
        return incoming_last_offset - self.base_offset > 2**31 - 1

    def _time_waited_for_roll(self, now_ms: int, incoming_timestamp: int) -> int:
        if self._first_batch_timestamp is None:
            header = self.header_at(0)
            self._first_batch_timestamp = header.max_timestamp if header else NO_TIMESTAMP
        if self._first_batch_timestamp >= 0:
            return incoming_timestamp - self._first_batch_timestamp
        return now_ms - self.created_ms

    def append(self, data: bytes | bytearray | memoryview, batches: list[BatchInfo]) -> None:
        """Write `data` (one or more whole batches) with one write, then index it as Kafka does.

        A write that fails (a full disk) may have written part of `data`: the file is cut back to the size it
        had, so that no torn batch is left in the log, and the error is raised."""
        offset_index, time_index = self.offset_index, self.time_index
        start = self.size
        try:
            self.fs.append(self._handle, data, start)
        except OSError:
            try:
                self.fs.truncate(self._handle, start)
            except OSError as error:
                log.error(
                    "cannot cut %s back to %d bytes after a failed write: %s", self.log_path, start, error
                )
            raise
        self.size += len(data)
        self.unflushed = True
        interval = self.config.index_interval_bytes
        for batch in batches:
            if self._first_batch_timestamp is None and start + batch.relative_position == 0:
                self._first_batch_timestamp = batch.max_timestamp
            if batch.max_timestamp > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = batch.max_timestamp, batch.last_offset
            if self._bytes_since_index_entry > interval:
                offset_index.append(batch.last_offset, start + batch.relative_position)
                time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
                self._bytes_since_index_entry = 0
            self._bytes_since_index_entry += batch.size
            self.next_offset = batch.last_offset + 1

    def flush(self) -> None:
        """fsync the log and write + fsync the indexes."""
        self.fs.fsync(self._handle)
        if self._offset_index is not None and self._time_index is not None:
            self._offset_index.flush()
            self._time_index.flush()
            self._offset_index.fsync()
            self._time_index.fsync()
        self.txn_index.fsync()
        self.unflushed = False

    def fsync_files(self, *, indexes: bool) -> None:
        """fsync the log file and the `.txnindex`, and the offset and time indexes of a rolled segment (written
        when it rolled; recovery rebuilds the active segment's). Safe on any thread while the owner appends: it
        touches descriptors and paths only. A segment closed meanwhile (deleted by retention) is skipped."""
        try:
            if self._handle >= 0:
                self.fs.fsync(self._handle)
            if indexes and self._offset_index is not None and self._time_index is not None:
                self._offset_index.fsync()
                self._time_index.fsync()
            # Always, the active segment's too: the recovery point may pass the end of the active segment, which
            # may then roll right there and never be re-read by recovery (Kafka's LogSegment.flush does the same).
            self.txn_index.fsync()
        except OSError:
            if self._handle >= 0:
                raise

    @property
    def closed(self) -> bool:
        return self._handle < 0

    def write_indexes(self) -> None:
        if self._offset_index is not None and self._time_index is not None:
            self._offset_index.flush()
            self._time_index.flush()

    # --- reads -------------------------------------------------------------------------------------------

    def header_at(self, position: int) -> BatchHeader | None:
        if position + HEADER_SIZE > self.size:
            return None
        raw = self.fs.pread(self._handle, HEADER_SIZE, position)
        return BatchHeader(position, *HEADER.unpack_from(raw, 0)) if len(raw) == HEADER_SIZE else None

    def headers_from(self, position: int) -> Iterator[BatchHeader]:
        """Headers of the complete batches from `position` to the end (positions are file positions)."""
        reader = _ChunkReader(self.fs, self._handle, self.size, _SCAN_CHUNK)
        while True:
            raw = reader.get(position, HEADER_SIZE)
            if raw is None:
                return
            header = BatchHeader(position, *HEADER.unpack_from(raw, 0))
            if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or position + header.size > self.size:
                return
            yield header
            position += header.size

    def checked_headers_from(self, position: int, indexed_offset: int | None = None) -> Iterator[BatchHeader]:
        """Headers from `position` to the end of the segment, each checked; raises CorruptSegmentError where a
        header cannot be the next batch, or where the first one is not the batch an index entry named
        (`indexed_offset`: its last offset)."""
        reader = _ChunkReader(self.fs, self._handle, self.size, _SCAN_CHUNK)
        next_offset: int | None = None
        while position < self.size:
            raw = reader.get(position, HEADER_SIZE)
            if raw is None:
                raise CorruptSegmentError(
                    self.log_path, position, f"{self.size - position} bytes at the end are not a whole batch"
                )
            header = BatchHeader(position, *HEADER.unpack_from(raw, 0))
            problem = _header_problem(header, self.size, next_offset)
            if problem is None and indexed_offset is not None and header.last_offset != indexed_offset:
                problem = f"the index names offset {indexed_offset} here, the batch holds {header.base_offset}-{header.last_offset}"
            if problem is not None:
                raise CorruptSegmentError(self.log_path, position, problem)
            indexed_offset = None
            yield header
            next_offset = header.next_offset
            position += header.size

    def translate_offset(self, offset: int) -> BatchHeader | None:
        """The first batch whose last offset is >= `offset`, found from the sparse index; None when the segment
        ends before it. An index entry that does not point at the batch it names makes the indexes be rebuilt
        (once); bytes that are not a batch raise CorruptSegmentError."""
        for attempt in (1, 2):
            indexed_offset, position = self.offset_index.lookup(offset)
            try:
                for header in self.checked_headers_from(position, indexed_offset if position else None):
                    if header.last_offset >= offset:
                        return header
                return None
            except CorruptSegmentError as error:
                if attempt == 2 or error.position != position or not position:
                    raise
                log.warning("%s; rebuilding the indexes of %s", error, self.log_path)
                self.rebuild_indexes()
        return None

    def read(self, position: int, max_bytes: int, max_offset: int, min_one_batch: bool) -> bytes:
        """Whole batches from `position` whose last offset is below `max_offset`, at most `max_bytes` unless
        `min_one_batch` and the first batch alone is larger. Stops before a corrupt batch; raises
        CorruptSegmentError when the first one is."""
        want = min(max_bytes, self.size - position)
        buf = self.fs.pread(self._handle, want, position) if want > 0 else b""
        end, problem = self._checked_batches_end(buf, position, max_offset)
        if problem is not None and not end:
            raise CorruptSegmentError(self.log_path, position, problem)
        if end or not min_one_batch or problem is not None:
            return buf if end == len(buf) else buf[:end]
        first = self.header_at(position)
        if first is None or first.last_offset >= max_offset:
            return b""
        if position + first.size > self.size:
            raise CorruptSegmentError(
                self.log_path, position, _header_problem(first, self.size, None) or "torn"
            )
        whole = self.fs.pread(self._handle, first.size, position)
        end, problem = self._checked_batches_end(whole, position, max_offset)
        if problem is not None:
            raise CorruptSegmentError(self.log_path, position, problem)
        return whole

    def _checked_batches_end(self, buf: bytes, position: int, max_offset: int) -> tuple[int, str | None]:
        end, problem = _batches_end(
            buf, max_offset, ends_segment=position + len(buf) >= self.size,
            check_from=self._checked_end - position, check_to=self._written_from - position,
        )  # fmt: skip
        if position <= self._checked_end:
            self._checked_end = max(self._checked_end, position + end)
        return end, problem

    def read_batch(self, header: BatchHeader) -> bytes:
        return self.fs.pread(self._handle, header.size, header.position)

    def find_offset_by_timestamp(self, timestamp: int, min_offset: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after `min_offset` with a timestamp >= `timestamp`."""
        _, indexed_offset = self.time_index.lookup(timestamp)
        _, position = self.offset_index.lookup(max(indexed_offset, min_offset))
        for header in self.headers_from(position):
            if header.max_timestamp < timestamp or header.last_offset < min_offset:
                continue
            data = self.read_batch(header)
            batch = BatchHeader(0, *HEADER.unpack_from(data, 0))
            for record in decode_records(data, batch):
                record_ts = batch.max_timestamp if batch.log_append_time else record.timestamp
                if record_ts >= timestamp and record.offset >= min_offset:
                    return record.offset, record_ts
        return None

    def indexed_max_timestamp(self) -> int:
        """The largest batch max timestamp in the segment (-1 if none), loading indexes if needed."""
        if self._time_index is None:
            self._load_indexes()
        return self.max_timestamp

    def largest_timestamp(self) -> int:
        """For retention: the max timestamp of the segment's records, or the file's mtime if it has none."""
        if self.indexed_max_timestamp() >= 0:
            return self.max_timestamp
        return self.fs.mtime_ms(self.log_path)

    # --- recovery and truncation ---------------------------------------------------------------------------

    def recover(self, epoch_starts: list[tuple[int, int]] | None = None) -> int:
        """Rebuild the indexes by reading every batch; cut the log at the first batch that is torn, has a bad
        CRC, a wrong magic or offsets that go backwards, and log the cut. Returns the number of bytes cut.

        `epoch_starts` collects (partition leader epoch, base offset) wherever the epoch grows, so the caller
        can rebuild its leader epoch cache as Kafka does during recovery."""
        problem = self._reindex(epoch_starts)
        if problem is None:
            return 0
        position, reason = problem
        truncated = self.size - position
        log.warning(
            "%s: cut %d bytes from byte %d on (%s); this segment now ends before offset %d",
            self.log_path, truncated, position, reason, self.next_offset,
        )  # fmt: skip
        self.fs.truncate(self._handle, position)
        self.size = self._written_from = position
        return truncated

    def _reindex(self, epoch_starts: list[tuple[int, int]] | None = None) -> tuple[int, str] | None:
        """Read every batch and rebuild both indexes, the max timestamp and the next offset up to the first
        batch that is not valid; returns (its position, why) or None when the whole segment is valid."""
        offset_index = OffsetIndex(
            self.fs, self.index_path, self.base_offset, self.config.segment_index_bytes
        )
        time_index = TimeIndex(
            self.fs, self.time_index_path, self.base_offset, self.config.segment_index_bytes
        )
        self._offset_index, self._time_index = offset_index, time_index
        for index in (
            offset_index,
            time_index,
        ):  # drop whatever was there; entries are written on flush/roll/close
            index.write_trimmed()
            index.preallocate()
        self.max_timestamp, self.offset_of_max_timestamp = NO_TIMESTAMP, self.base_offset
        self._bytes_since_index_entry = 0
        self._first_batch_timestamp = None
        self.next_offset = self.base_offset
        reader = _ChunkReader(self.fs, self._handle, self.size, _RECOVER_CHUNK)
        position = 0
        interval = self.config.index_interval_bytes
        while position < self.size:
            raw = reader.get(position, HEADER_SIZE)
            if raw is None:
                return position, "a torn batch header"
            header = BatchHeader(position, *HEADER.unpack_from(raw, 0))
            problem = _header_problem(header, self.size, self.next_offset)
            if problem is not None:
                return position, problem
            whole = reader.get(position, header.size)
            if whole is None or crc32c(whole[CRC_START:]) != header.crc:
                return (
                    position,
                    f"CRC mismatch in the batch at offsets {header.base_offset}-{header.last_offset}",
                )
            if self._first_batch_timestamp is None:
                self._first_batch_timestamp = header.max_timestamp
            if header.max_timestamp > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = header.max_timestamp, header.last_offset
            epoch = header.partition_leader_epoch
            if epoch_starts is not None and epoch >= 0 and (not epoch_starts or epoch > epoch_starts[-1][0]):
                epoch_starts.append((epoch, header.base_offset))
            if self._bytes_since_index_entry > interval:
                offset_index.append(header.last_offset, position)
                time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
                self._bytes_since_index_entry = 0
            self._bytes_since_index_entry += header.size
            self.next_offset = header.next_offset
            position += header.size
            self._checked_end = max(self._checked_end, position)
        return None

    def truncate_to(self, offset: int) -> int:
        """Remove batches whose last offset is >= `offset`; returns bytes removed."""
        header = self.translate_offset(offset)
        if header is None:
            return 0
        removed = self.size - header.position
        self.offset_index.truncate_to_position(header.position)
        self.time_index.truncate_to(header.base_offset)
        self.txn_index.truncate_to(header.base_offset)
        self.fs.truncate(self._handle, header.position)
        self.size = header.position
        self._written_from = min(self._written_from, header.position)
        self._checked_end = min(self._checked_end, header.position)
        self.next_offset = header.base_offset
        # Timestamps and index bookkeeping are recomputed from what is left, as Kafka does after truncation.
        self.max_timestamp, self.offset_of_max_timestamp = self.time_index.last_entry()
        if self.max_timestamp < 0:
            self.offset_of_max_timestamp = self.base_offset
        last_indexed = self.offset_index.lookup(2**62)[1]
        for remaining in self.headers_from(last_indexed):
            if remaining.max_timestamp > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = (
                    remaining.max_timestamp,
                    remaining.last_offset,
                )
        self._bytes_since_index_entry = self.size - last_indexed if self.size else 0
        if self.size == 0:
            self._first_batch_timestamp = None
        self.unflushed = True
        return removed
