"""The log of one partition: an ordered list of segments, the last one active.

Theory of operation. Appends stamp the batch's base offset and leader epoch, check the producer's sequence
(idempotence), roll the active segment when Kafka would, write the batch with one write and add a sparse
index entry every index.interval.bytes. Reads find the batch holding the start offset through the sparse index
and return whole batches by position. Nothing is fsynced on the append path unless flush.messages asks;
`flush()` fsyncs and moves the recovery point to the log end. Opening after an unclean shutdown re-reads every
segment from the one holding the recovery point (CRC of each batch), cuts the first bad batch and everything
after it, and rebuilds indexes, leader epochs and producer state (see FORMAT.md).

Transactions. Producer state tracks each producer's open transaction; a marker (control batch) ends it, and an
ABORT marker adds the aborted transaction to its segment's `.txnindex` (txn_index.py) with the LSO of that
moment. The last stable offset is min(high watermark, first offset of the earliest transaction that is open or
whose marker the high watermark has not passed). Recovery re-reads segments from the recovery point and rebuilds
their `.txnindex` from the markers, with producer state replayed from a snapshot at or below the first of them.

An `OSError` from the filesystem (a full disk, a failed fsync) fails the log for good: the operation answers
KAFKA_STORAGE_ERROR, `on_io_error` tells the log manager (which takes the whole log dir offline, as Kafka does),
and every later call answers KAFKA_STORAGE_ERROR without touching the files. A failed append never leaves torn
bytes behind it (the segment cuts them); the next start recovers the log from its recovery point.
"""

from __future__ import annotations

import bisect
import functools
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from kio.schema.errors import ErrorCode

from broker_runtime.clock import Clock
from broker_runtime.errors import KafkaError
from broker_runtime.log.config import LogConfig
from broker_runtime.log.fs import FileSystem, read_whole, write_atomically
from broker_runtime.log.leader_epoch import LeaderEpochCache
from broker_runtime.log.segment import BatchInfo, CorruptSegmentError, LogSegment, file_name
from broker_runtime.log.txn_index import AbortedTxn
from broker_runtime.protocol.records import (
    HEADER,
    BatchHeader,
    check_crc,
    decode_records,
    iter_headers,
    read_header,
    set_log_append_time,
    stamp,
)
from broker_runtime.txn.control import EndTxnMarker, parse_marker
from broker_runtime.txn.producer_state import (
    CompletedTxn,
    CorruptSnapshotError,
    ProducerStateManager,
    VerificationGuard,
)

log = logging.getLogger(__name__)

SNAPSHOT_SUFFIX = ".snapshot"
_LEFTOVER_SUFFIXES = (".tmp", ".deleted")
_SEGMENT_SUFFIXES = (".log", ".index", ".timeindex", ".txnindex")


@dataclass
class FlushPlan:
    """fsyncs of one log that may run on any thread: descriptors and paths only, no shared buffers."""

    log: PartitionLog
    upto: int  # the recovery point once done
    rolled: list[LogSegment]  # rolled segments: log and index files
    active: LogSegment | None  # the active segment's log and .txnindex (recovery rebuilds its other indexes)
    dir_changes: int | None  # fsync the partition dir (segment files created or deleted) up to this change
    messages: int  # unflushed messages when planned

    def run(self) -> None:
        for segment in self.rolled:
            segment.fsync_files(indexes=True)
        if self.active is not None:
            self.active.fsync_files(indexes=False)
        if self.dir_changes is not None:
            self.log.fs.fsync_dir(self.log.dir)


class AppendResult(NamedTuple):  # one per append: a tuple is cheaper to build than a frozen dataclass
    base_offset: int
    last_offset: int
    log_append_time: int  # -1 unless LogAppendTime
    log_start_offset: int
    duplicate: bool = False


def _offset_of(name: str) -> int | None:
    stem = name.split(".", 1)[0]
    return int(stem) if len(stem) == 20 and stem.isdigit() else None


def _storage_operation(method):
    """Run `method` only on a log that has not failed; an OSError fails the log and becomes KAFKA_STORAGE_ERROR,
    corrupt bytes met on the way become CORRUPT_MESSAGE."""
    operation = method.__name__.strip("_").replace("_", " ")

    @functools.wraps(method)
    def guarded(self: PartitionLog, *args, **kwargs):
        if self.failed:
            raise KafkaError(ErrorCode.kafka_storage_error, f"{self.name} is in an offline log dir")
        try:
            return method(self, *args, **kwargs)
        except OSError as error:
            self.fail(operation, error)
            raise KafkaError(
                ErrorCode.kafka_storage_error, f"{operation} on {self.name} failed: {error}"
            ) from error
        except CorruptSegmentError as error:
            raise self._corrupt(error, operation) from None

    return guarded


class PartitionLog:
    def __init__(self, fs: FileSystem, directory: Path, topic: str, partition: int, config: LogConfig,
                 clock: Clock) -> None:  # fmt: skip
        """Use `PartitionLog.open`; this only sets fields."""
        self.fs = fs
        self.dir = directory
        self.topic = topic
        self.partition = partition
        self.config = config
        self.clock = clock
        self.log_start_offset = 0
        self.log_end_offset = 0
        self.recovery_point = 0
        self.segments: list[LogSegment] = []
        self._bases: list[int] = []
        self.leader_epochs = LeaderEpochCache.load(fs, directory)
        self.producer_state = ProducerStateManager()
        self.unflushed_messages = 0
        self.last_flush_ms = clock.time_ms()
        # Segment files created or deleted so far, and how many of those changes a partition-dir fsync covers.
        self._dir_changes = self._dir_synced = 0
        self.on_io_error: Callable[[PartitionLog, OSError], None] | None = None
        self.closed = False
        self.failed = False
        # Truncations so far: a cleaning pass planned before one must not swap anything in (its offset map saw
        # records that are gone).
        self.truncations = 0
        self._reported_corruption: set[tuple[Path, int]] = set()

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    def fail(self, operation: str, error: OSError) -> None:
        """Stop using this log after an I/O error; tell the log manager (once)."""
        if self.failed:
            return
        self.failed = True
        log.error("%s: %s failed: %s", self.name, operation, error)
        if self.on_io_error is not None:
            self.on_io_error(self, error)

    # --- opening -----------------------------------------------------------------------------------------

    @classmethod
    def open(cls, fs: FileSystem, directory: Path, topic: str, partition: int, config: LogConfig, clock: Clock, *,
             recovery_point: int = 0, log_start_offset: int = 0, clean_shutdown: bool = False) -> PartitionLog:  # fmt: skip
        fs.mkdir(directory)
        self = cls(fs, directory, topic, partition, config, clock)
        self._load(recovery_point, log_start_offset, clean_shutdown)
        return self

    def _load(self, recovery_point: int, log_start_offset: int, clean_shutdown: bool) -> None:
        now = self.clock.time_ms()
        names = self.fs.listdir(self.dir)
        for name in names:
            if name.endswith(_LEFTOVER_SUFFIXES):
                self.fs.unlink(self.dir / name)
        self._finish_interrupted_swaps()
        names = self.fs.listdir(self.dir)
        bases = sorted(b for n in names if n.endswith(".log") and (b := _offset_of(n)) is not None)
        for name in names:  # indexes whose log is gone would shadow a future segment with the same base
            base = _offset_of(name)
            if (
                base is not None
                and name.endswith((".index", ".timeindex", ".txnindex"))
                and base not in bases
            ):
                self.fs.unlink(self.dir / name)
        for base in bases:
            self.segments.append(LogSegment.open(self.fs, self.dir, base, self.config, now))
        if not self.segments:
            self.segments.append(
                LogSegment.create(self.fs, self.dir, max(log_start_offset, 0), self.config, now)
            )
            self._dir_changes += 1  # the first flush makes the new segment's name durable
        self._bases = [s.base_offset for s in self.segments]

        rebuild_txn_index_from: int | None = None
        if clean_shutdown or not bases:
            if self.segments[-1].load_end():
                rebuild_txn_index_from = self.segments[-1].base_offset
        else:
            rebuild_txn_index_from = self._recover_from(recovery_point)
        active = self.segments[-1]
        self.log_end_offset = max(active.next_offset, active.base_offset)
        self.recovery_point = (
            min(recovery_point, self.log_end_offset) if not clean_shutdown else self.log_end_offset
        )
        self.log_start_offset = max(log_start_offset, self.segments[0].base_offset)
        if self.log_start_offset > self.log_end_offset:
            self.log_start_offset = self.log_end_offset
        self.leader_epochs.truncate_from_end(self.log_end_offset)
        self.leader_epochs.truncate_from_start(self.log_start_offset)
        self._load_producer_state(rebuild_txn_index_from)

    def _finish_interrupted_swaps(self) -> None:
        """Kafka's LogLoader for a cleaning cut short: `.cleaned` files are deleted, and so are `.swap` files at
        or above the lowest `.cleaned` one (their swap had not begun); the remaining `.swap` files are complete
        cleaned segments, so the segments they cover are deleted and they take their final names."""
        names = self.fs.listdir(self.dir)
        cleaned = [b for n in names if n.endswith(".cleaned") and (b := _offset_of(n)) is not None]
        lowest_cleaned = min(cleaned, default=2**63)
        for name in names:
            base = _offset_of(name)
            if name.endswith(".cleaned") or (
                name.endswith(".swap") and (base is None or base >= lowest_cleaned)
            ):
                self.fs.unlink(self.dir / name)
        swaps = [n for n in self.fs.listdir(self.dir) if n.endswith(".swap")]
        covered: list[tuple[int, int]] = []
        for name in swaps:
            base = _offset_of(name)
            if base is not None and name.endswith(".log.swap"):
                end, position = base, 0
                handle = self.fs.open(self.dir / name, create=False)
                try:
                    size = self.fs.size(handle)
                    while position + HEADER.size <= size:  # the swap file was fsynced whole before its rename
                        header = BatchHeader(
                            position, *HEADER.unpack_from(self.fs.pread(handle, HEADER.size, position))
                        )
                        end, position = header.next_offset, position + header.size
                finally:
                    self.fs.close(handle)
                covered.append((base, max(end, base + 1)))
        if not swaps:
            return
        low, high = min((b for b, _ in covered), default=0), max((e for _, e in covered), default=0)
        for name in self.fs.listdir(self.dir):
            base = _offset_of(name)
            if base is not None and low <= base < high and name.endswith(_SEGMENT_SUFFIXES):
                log.info(
                    "%s: deleting %s, replaced by a cleaned segment whose swap was interrupted",
                    self.name,
                    name,
                )
                self.fs.unlink(self.dir / name)
        for name in swaps:
            log.info("%s: finishing the interrupted swap of %s", self.name, name)
            self.fs.rename(self.dir / name, self.dir / name.removesuffix(".swap"))
        self.fs.fsync_dir(self.dir)

    def _recover_from(self, recovery_point: int) -> int:
        """Kafka's recoverLog: re-validate every segment from the one holding the recovery point. Returns the
        base offset of the first segment re-read (their `.txnindex` files are rebuilt from there)."""
        first = max(0, bisect.bisect_right(self._bases, recovery_point) - 1)
        for segment in self.segments[first:]:
            segment.txn_index.reset()
        for i in range(first, len(self.segments)):
            segment = self.segments[i]
            epoch_starts: list[tuple[int, int]] = []
            truncated = segment.recover(epoch_starts)  # logs the cut
            for epoch, start in epoch_starts:
                if epoch > self.leader_epochs.latest_epoch():
                    self.leader_epochs.assign(epoch, start)
            if truncated:
                for doomed in self.segments[i + 1 :]:
                    log.warning("%s: deleting %s (%d bytes from offset %d on): it follows the cut in %s",
                                self.name, doomed.log_path, doomed.size, doomed.base_offset, segment.log_path)  # fmt: skip
                    doomed.delete()
                self._dir_changes += 1
                del self.segments[i + 1 :]
                self._bases = self._bases[: i + 1]
                break
        for segment in self.segments[first:-1]:
            segment.finish_indexes()
        self.segments[-1].write_indexes()
        return self.segments[first].base_offset

    def _snapshot_offsets(self) -> list[int]:
        return sorted(
            b for n in self.fs.listdir(self.dir)
            if n.endswith(SNAPSHOT_SUFFIX) and (b := _offset_of(n)) is not None
        )  # fmt: skip

    def _load_producer_state(self, rebuild_txn_index_from: int | None = None) -> None:
        """Latest readable snapshot at or below the log end, then replay batch headers after it. With
        `rebuild_txn_index_from` (recovery), the snapshot must be at or below that offset too, and aborted
        transactions whose marker is at or above it are written to their segment's `.txnindex` again."""
        self.producer_state.clear()
        start = self.segments[0].base_offset
        rebuild_from = 2**63 if rebuild_txn_index_from is None else rebuild_txn_index_from
        limit = min(self.log_end_offset, rebuild_from)
        for offset in reversed(self._snapshot_offsets()):
            path = self.dir / file_name(offset, SNAPSHOT_SUFFIX)
            if offset > self.log_end_offset:
                self.fs.unlink(path)
                continue
            if offset > limit:
                continue  # newer than the segments to re-index: replaying from it would miss their markers
            try:
                self.producer_state.load_snapshot(read_whole(self.fs, path), offset)
            except CorruptSnapshotError as error:
                log.warning("%s: %s; trying an older snapshot", path, error)
                self.fs.unlink(path)
                continue
            start = offset
            break
        try:
            for segment, header in self._headers_from_offset(max(start, self.segments[0].base_offset)):
                if header.is_control and header.has_producer_id:
                    raw = segment.read_batch(header)
                    marker = parse_marker(raw, read_header(raw))
                    self._record_marker(
                        header, marker, segment if header.base_offset >= rebuild_from else None
                    )
                else:
                    self._record_producer_batch(header)
        except CorruptSegmentError as error:  # reads there answer CORRUPT_MESSAGE; the state stops before it
            log.error("%s: rebuilding producer state: %s", self.name, error)

    def _headers_from_offset(self, offset: int) -> Iterator[tuple[LogSegment, BatchHeader]]:
        i = self._segment_index(offset)
        first = self.segments[i].translate_offset(offset)
        if first is not None:
            for header in self.segments[i].headers_from(first.position):
                yield self.segments[i], header
        for segment in self.segments[i + 1 :]:
            for header in segment.headers_from(0):
                yield segment, header

    def _record_producer_batch(self, header: BatchHeader) -> None:
        """A data batch now in the log (replication, replay): producer state only, nothing validated."""
        if header.has_producer_id and not header.is_control:
            self.producer_state.update(
                header.producer_id, header.producer_epoch, header.base_sequence, header.last_sequence,
                header.base_offset, header.last_offset, header.max_timestamp, is_transactional=header.is_transactional,
            )  # fmt: skip

    def _record_marker(self, header: BatchHeader, marker: EndTxnMarker | None,
                       segment: LogSegment | None) -> CompletedTxn | None:  # fmt: skip
        """A marker now in the log at `header.base_offset`: it ends its producer's transaction; an aborted one
        goes to `segment`'s `.txnindex` (the segment the marker is in; None on a replay whose segments' indexes
        are already whole)."""
        if marker is None:  # an emptied control batch: the cleaner removed its transaction, it ends nothing
            return None
        completed = self.producer_state.update_marker(
            header.producer_id, header.producer_epoch, header.base_offset, header.max_timestamp,
            marker.coordinator_epoch, aborted=not marker.committed,
        )  # fmt: skip
        if completed is None:
            return None
        if completed.aborted and segment is not None:
            lso = self.producer_state.last_stable_offset_of(completed)
            segment.txn_index.append(
                AbortedTxn(completed.producer_id, completed.first_offset, completed.last_offset, lso)
            )
        self.producer_state.complete_txn(completed)
        return completed

    # --- appends -----------------------------------------------------------------------------------------

    @_storage_operation
    def append_as_leader(
        self,
        batch: bytearray,
        header: BatchHeader,
        leader_epoch: int,
        now_ms: int,
        *,
        from_coordinator: bool = False,
        verification_guard: VerificationGuard | None = None,
    ) -> AppendResult:
        """Append one validated batch (`header` read from `batch` at `header.position`). A client's producer
        batch is checked for epoch, sequence (a retry answers the original offsets) and transaction state; a
        coordinator's (`from_coordinator`: transactional offset commits) for epoch and transaction state only.
        A control batch comes from the transaction coordinator: its marker is checked against the producer's
        state first. `verification_guard` (transaction verification on; None: off) is what a transactional data
        batch of a producer with no open transaction here must match (`ProducerStateManager.check_verified`)."""
        if header.size > self.config.segment_bytes:
            raise KafkaError(
                ErrorCode.record_list_too_large,
                f"batch of {header.size} bytes is larger than segment.bytes {self.config.segment_bytes}",
            )
        base_offset = self.log_end_offset
        last_offset = base_offset + header.last_offset_delta
        if header.has_producer_id and not header.is_control and from_coordinator:
            self.producer_state.check_epoch(
                header.producer_id, header.producer_epoch, header.is_transactional, base_offset
            )
        elif header.has_producer_id and not header.is_control:
            duplicate = self.producer_state.check(
                header.producer_id, header.producer_epoch, header.base_sequence, header.last_sequence,
                is_transactional=header.is_transactional, offset_hint=base_offset,
            )  # fmt: skip
            if duplicate is not None:
                append_time = duplicate.timestamp if self.config.log_append_time else -1
                return AppendResult(
                    duplicate.first_offset, duplicate.last_offset, append_time, self.log_start_offset, True
                )
        if verification_guard is not None and header.is_transactional and not header.is_control:
            self.producer_state.check_verified(header.producer_id, verification_guard, base_offset)
        marker = None
        if header.is_control and header.has_producer_id:
            marker = parse_marker(batch, header)
            if marker is not None:
                self.producer_state.check_marker(
                    header.producer_id, header.producer_epoch, marker.coordinator_epoch
                )
        stamp(batch, header.position, base_offset, leader_epoch)
        log_append_time = -1
        max_timestamp = header.max_timestamp
        if self.config.log_append_time and not header.is_control:
            set_log_append_time(batch, header, now_ms)
            log_append_time = max_timestamp = now_ms
        data = batch if header.position == 0 and len(batch) == header.size else (
            memoryview(batch)[header.position : header.position + header.size])  # fmt: skip
        self._maybe_roll(header.size, max_timestamp, last_offset, now_ms)
        self.segments[-1].append(data, [BatchInfo(0, header.size, base_offset, last_offset, max_timestamp)])
        self.log_end_offset = last_offset + 1
        if leader_epoch > self.leader_epochs.latest_epoch():
            self.leader_epochs.assign(leader_epoch, base_offset)
        if header.is_control and header.has_producer_id:
            self._record_marker(read_header(data), marker, self.segments[-1])
        elif header.has_producer_id:
            self.producer_state.update(
                header.producer_id, header.producer_epoch, header.base_sequence, header.last_sequence,
                base_offset, last_offset, max_timestamp, is_transactional=header.is_transactional,
            )  # fmt: skip
        self._after_append(header.record_count)
        return AppendResult(base_offset, last_offset, log_append_time, self.log_start_offset)

    @_storage_operation
    def append_as_follower(self, records: bytes | bytearray | memoryview) -> None:
        """Append batches already stamped by the leader (a fetch response); a torn last batch is ignored.

        As Kafka's appendAsFollower, every batch is checked (magic, CRC, offsets following on) before any is
        written, so that a corrupt batch is never appended, and the batches that pass go to the active segment
        in one write (the roll decided for all of them together, as Kafka's), not one write per batch."""
        view = memoryview(records)
        headers = []
        next_offset = self.log_end_offset
        for header in iter_headers(view):
            if header.magic != 2:
                raise KafkaError(
                    ErrorCode.corrupt_message,
                    f"batch at offset {header.base_offset} has magic {header.magic}",
                )
            if not check_crc(view, header):
                raise KafkaError(
                    ErrorCode.corrupt_message, f"batch at offset {header.base_offset} fails its CRC"
                )
            if header.base_offset < next_offset:
                raise KafkaError(
                    ErrorCode.unknown_server_error,
                    f"follower append at offset {header.base_offset} is below the log end {next_offset}",
                )
            next_offset = header.next_offset
            headers.append(header)
        group: list[BatchHeader] = []
        for header in headers:  # runs of at most segment.bytes (or one batch)
            if group and header.position + header.size - group[0].position > self.config.segment_bytes:
                self._append_follower_batches(view, group)
                group = []
            group.append(header)
        if group:
            self._append_follower_batches(view, group)

    def _append_follower_batches(self, view: memoryview, headers: list[BatchHeader]) -> None:
        active = self.segments[-1]
        if len(headers) > 1 and any(
            len(i) + len(headers) > i.max_entries for i in (active.offset_index, active.time_index)
        ):
            for header in headers:  # an index nearly full: the roll is decided batch by batch
                self._append_follower_batches(view, [header])
            return
        now = self.clock.time_ms()
        first, last = headers[0], headers[-1]
        start, end = first.position, last.position + last.size
        self._maybe_roll(end - start, max(h.max_timestamp for h in headers), last.last_offset, now,
                         first.base_offset)  # fmt: skip
        segment = self.segments[-1]
        segment.append(
            view[start:end],
            [
                BatchInfo(h.position - start, h.size, h.base_offset, h.last_offset, h.max_timestamp)
                for h in headers
            ],
        )
        self.log_end_offset = last.next_offset
        for header in headers:
            epoch = header.partition_leader_epoch
            if epoch > self.leader_epochs.latest_epoch():
                self.leader_epochs.assign(epoch, header.base_offset)
            if header.is_control and header.has_producer_id:
                self._record_marker(header, parse_marker(view, header), segment)
            else:
                self._record_producer_batch(header)
        self._after_append(sum(h.record_count for h in headers))

    def _after_append(self, record_count: int) -> None:
        self.unflushed_messages += record_count
        if self.unflushed_messages >= self.config.flush_messages:
            self.flush()

    def _maybe_roll(self, size: int, max_timestamp: int, last_offset: int, now_ms: int,
                    base_offset: int | None = None) -> None:  # fmt: skip
        active = self.segments[-1]
        if active.should_roll(size, max_timestamp, last_offset, now_ms):
            self.roll(base_offset)
        elif base_offset is not None and active.size == 0 and active.base_offset != base_offset:
            # A follower's first batch may start past an empty active segment's base (leader log start moved).
            self.roll(base_offset)

    @_storage_operation
    def roll(self, base_offset: int | None = None) -> None:
        """Start a new active segment at the log end (Kafka also snapshots producer state here)."""
        base = self.log_end_offset if base_offset is None else base_offset
        active = self.segments[-1]
        if active.base_offset == base and active.size == 0:
            return
        if active.size == 0:
            active.delete()
            self.segments.pop()
            self._bases.pop()
        else:
            active.finish_indexes()
            self._write_snapshot(self.log_end_offset, fsync=False)
        segment = LogSegment.create(self.fs, self.dir, base, self.config, self.clock.time_ms())
        self.segments.append(segment)
        self._bases.append(base)
        self._dir_changes += 1
        self.log_end_offset = max(self.log_end_offset, base)
        if self.segments[0].base_offset > self.log_start_offset:  # the only segment moved forward
            self.log_start_offset = self.segments[0].base_offset

    # --- reads -------------------------------------------------------------------------------------------

    def _segment_index(self, offset: int) -> int:
        return max(0, bisect.bisect_right(self._bases, offset) - 1)

    @_storage_operation
    def read(self, start_offset: int, max_bytes: int, max_offset: int, min_one_batch: bool) -> bytes:
        if start_offset < self.log_start_offset or start_offset > self.log_end_offset:
            raise KafkaError(
                ErrorCode.offset_out_of_range,
                f"offset {start_offset} is outside [{self.log_start_offset}, {self.log_end_offset}] "
                f"of {self.topic}-{self.partition}",
            )
        if start_offset >= self.log_end_offset or start_offset >= max_offset:
            return b""
        chunks: list[bytes] = []
        try:
            i = self._segment_index(start_offset)
            found = self.segments[i].translate_offset(start_offset)
            position = found.position if found is not None else None
            budget = max_bytes
            while i < len(self.segments):
                segment = self.segments[i]
                if position is None or position >= segment.size:
                    i, position = i + 1, 0
                    continue
                chunk = segment.read(position, budget, max_offset, min_one_batch and not chunks)
                if chunk:
                    chunks.append(chunk)
                    budget -= len(chunk)
                if budget <= 0 or position + len(chunk) < segment.size:
                    break
                i, position = i + 1, 0
        except CorruptSegmentError as error:
            if not chunks:  # what came before the corrupt batch is served; the next read gets the error
                raise self._corrupt(error, f"reading offset {start_offset}") from None
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def last_stable_offset(self, high_watermark: int) -> int:
        """Kafka's lastStableOffset: the high watermark, or the first unstable offset (not below the log start)
        when that is lower."""
        state = self.producer_state
        if not state.ongoing and not state.unreplicated:
            return high_watermark
        first_unstable = state.first_unstable_offset(high_watermark)
        if first_unstable is None or first_unstable >= high_watermark:
            return high_watermark
        return min(max(first_unstable, self.log_start_offset), high_watermark)

    @_storage_operation
    def aborted_transactions(self, start_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [start_offset, upper_bound), from the `.txnindex` of the segment
        holding `start_offset` onwards (Kafka's LocalLog.collectAbortedTransactions)."""
        found: list[AbortedTxn] = []
        for segment in self.segments[self._segment_index(start_offset) :]:
            if segment.txn_index.collect(start_offset, upper_bound, found):
                break
        return found

    def _corrupt(self, error: CorruptSegmentError, doing: str) -> KafkaError:
        """CORRUPT_MESSAGE for a read that reached bytes that are not a valid batch, as Kafka's fetch path
        answers a CorruptRecordException; logged once per place."""
        if (error.path, error.position) not in self._reported_corruption:
            self._reported_corruption.add((error.path, error.position))
            log.error("%s: %s: %s", self.name, doing, error)
        return KafkaError(
            ErrorCode.corrupt_message, f"{self.name}: {doing}: corrupt log data ({error.reason})"
        )

    @_storage_operation
    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the earliest record at or after the log start with timestamp >= the target."""
        for i, segment in enumerate(self.segments):
            segment_end = self._bases[i + 1] if i + 1 < len(self._bases) else self.log_end_offset
            if segment_end <= self.log_start_offset:
                continue
            if segment.indexed_max_timestamp() < timestamp_ms:
                continue
            found = segment.find_offset_by_timestamp(timestamp_ms, self.log_start_offset)
            if found is not None:
                return found
        return None

    @_storage_operation
    def max_timestamp(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record carrying the log's largest timestamp."""
        best: LogSegment | None = None
        for segment in self.segments:
            if segment.indexed_max_timestamp() >= 0 and (
                best is None or segment.max_timestamp > best.max_timestamp
            ):
                best = segment
        if best is None:
            return None
        header = best.translate_offset(best.offset_of_max_timestamp)
        if header is None:
            return best.offset_of_max_timestamp, best.max_timestamp
        data = best.read_batch(header)
        batch = BatchHeader(0, *HEADER.unpack_from(data, 0))
        if batch.log_append_time:
            return batch.base_offset, batch.max_timestamp
        for record in decode_records(data, batch):
            if record.timestamp == batch.max_timestamp:
                return record.offset, record.timestamp
        return batch.last_offset, batch.max_timestamp

    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    # --- offsets moving ----------------------------------------------------------------------------------

    @_storage_operation
    def delete_records_before(self, offset: int) -> int:
        """DeleteRecords: raise the log start offset (whole segments below it go at the next retention pass).
        Nothing is written: the caller checkpoints log start offsets once per request."""
        if offset > self.log_end_offset or offset < 0:
            raise KafkaError(
                ErrorCode.offset_out_of_range,
                f"cannot delete records before {offset}: the log ends at {self.log_end_offset}",
            )
        if offset > self.log_start_offset:
            self.log_start_offset = offset
            self.leader_epochs.truncate_from_start(offset)
        return self.log_start_offset

    @_storage_operation
    def truncate_to(self, offset: int) -> None:
        """Remove everything at and above `offset` (a follower diverged from its leader). At or past the log end
        nothing is removed but the epochs starting at the log end: an epoch this broker assigned as leader and
        was replaced in before it wrote anything, which the next leader never had (Kafka's truncateTo drops it
        too; kept, the follower would name it in every fetch and be told it diverges, forever)."""
        if offset >= self.log_end_offset:
            self.leader_epochs.truncate_from_end(self.log_end_offset)
            return
        if offset < self.log_start_offset:
            self.truncate_fully_and_start_at(offset)
            return
        self.truncations += 1
        keep = self._segment_index(offset)
        for segment in self.segments[keep + 1 :]:
            segment.delete()
            self._dir_changes += 1
        del self.segments[keep + 1 :]
        del self._bases[keep + 1 :]
        active = self.segments[-1]
        active.truncate_to(offset)
        self.log_end_offset = max(active.next_offset, active.base_offset)
        if active.size:
            active.load_end()
            self.log_end_offset = active.next_offset
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        self.leader_epochs.truncate_from_end(self.log_end_offset)
        self._delete_snapshots(lambda o: o > self.log_end_offset)
        self._load_producer_state()

    @_storage_operation
    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop every segment and restart the log empty at `offset`."""
        self.truncations += 1
        for segment in self.segments:
            segment.delete()
        self.segments = [LogSegment.create(self.fs, self.dir, offset, self.config, self.clock.time_ms())]
        self._dir_changes += 1
        self._bases = [offset]
        self.log_start_offset = self.log_end_offset = self.recovery_point = offset
        self.leader_epochs.clear()
        self._delete_snapshots(lambda o: True)
        self.producer_state.clear()

    # --- epochs ------------------------------------------------------------------------------------------

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        return self.leader_epochs.end_offset_for(epoch, self.log_end_offset)

    def latest_epoch(self) -> int:
        return self.leader_epochs.latest_epoch()

    @_storage_operation
    def assign_epoch_start_offset(self, epoch: int, *, sync: bool = True) -> None:
        """A new leader records where its epoch starts, before any append (Kafka's maybeAssignEpochStartOffset).
        `sync=False` for a new, empty log (see LeaderEpochCache.assign)."""
        if epoch > self.leader_epochs.latest_epoch():
            self.leader_epochs.assign(epoch, self.log_end_offset, sync=sync)

    # --- retention ---------------------------------------------------------------------------------------

    @_storage_operation
    def delete_old_segments(self, now_ms: int, high_watermark: int | None = None) -> list[LogSegment]:
        """Kafka's deleteOldSegments: segments below the log start offset, then (for cleanup.policy=delete)
        by retention.ms and retention.bytes. Returns the segments taken out of the log; the caller deletes
        their files (nothing reads them any more: reads copy bytes out)."""
        upper_bound = self.log_end_offset if high_watermark is None else high_watermark
        removed = self._remove_while(lambda seg, nxt: nxt is not None and nxt.base_offset <= self.log_start_offset,
                                     upper_bound)  # fmt: skip
        if not self.config.deletes:
            return removed
        if self.config.retention_ms >= 0:
            limit = self.config.retention_ms
            removed += self._remove_while(
                lambda seg, nxt: now_ms - seg.largest_timestamp() > limit, upper_bound
            )
        if self.config.retention_bytes >= 0:
            excess = self.size_bytes() - self.config.retention_bytes

            def over_size(seg: LogSegment, nxt: LogSegment | None) -> bool:
                nonlocal excess
                if excess - seg.size >= 0:
                    excess -= seg.size
                    return True
                return False

            if excess > 0:
                removed += self._remove_while(over_size, upper_bound)
        return removed

    def _remove_while(
        self, predicate: Callable[[LogSegment, LogSegment | None], bool], upper_bound: int
    ) -> list[LogSegment]:
        doomed = 0
        for i, segment in enumerate(self.segments):
            nxt = self.segments[i + 1] if i + 1 < len(self.segments) else None
            segment_end = nxt.base_offset if nxt is not None else self.log_end_offset
            last_and_empty = nxt is None and segment.size == 0
            if upper_bound >= segment_end and not last_and_empty and predicate(segment, nxt):
                doomed += 1
            else:
                break
        if not doomed:
            return []
        if doomed == len(self.segments):
            self.roll()  # Kafka never leaves a log without a segment: roll, then delete the old active one
        removed = self.segments[:doomed]
        self._dir_changes += 1
        del self.segments[:doomed]
        del self._bases[:doomed]
        if self.segments[0].base_offset > self.log_start_offset:
            self.log_start_offset = self.segments[0].base_offset
            self.leader_epochs.truncate_from_start(self.log_start_offset)
        self.recovery_point = max(self.recovery_point, self.segments[0].base_offset)
        latest = self._snapshot_offsets()[-1:] or [None]
        self._delete_snapshots(lambda o: o < self.segments[0].base_offset and o != latest[0])
        return removed

    # --- compaction --------------------------------------------------------------------------------------

    @_storage_operation
    def replace_segments(self, old: list[LogSegment], base_offset: int) -> list[LogSegment]:
        """Swap in the cleaned segment written as `<base_offset>.*.cleaned` for the consecutive, non-active
        segments `old` (Kafka's replaceSegments): `.cleaned` -> `.swap`, the old files -> `.deleted`, `.swap` ->
        final names; a crash at any step leaves files that loading turns into the old or the new segments
        (`_finish_interrupted_swaps`). Returns `old`, still open: the caller fsyncs the directory, closes them
        and deletes their `.deleted` files. Raises ValueError, renaming nothing, when `old` are no longer the
        log's (truncated or deleted meanwhile)."""
        first = next((i for i, s in enumerate(self.segments) if s is old[0]), None) if old else None
        if (
            first is None
            or self.segments[first : first + len(old)] != old
            or first + len(old) >= len(self.segments)
        ):
            raise ValueError(f"{self.name}: the cleaned segments are no longer the log's")

        def rename(base: int, old_suffix: str, new_suffix: str) -> None:
            for suffix in _SEGMENT_SUFFIXES:
                path = self.dir / (file_name(base, suffix) + old_suffix)
                if self.fs.exists(path):
                    self.fs.rename(path, self.dir / (file_name(base, suffix) + new_suffix))

        rename(base_offset, ".cleaned", ".swap")
        for segment in old:
            rename(segment.base_offset, "", ".deleted")
        rename(base_offset, ".swap", "")
        new = LogSegment.open(self.fs, self.dir, base_offset, self.config, self.clock.time_ms())
        self.segments[first : first + len(old)] = [new]
        self._bases = [s.base_offset for s in self.segments]
        self._dir_changes += 1
        return old

    # --- durability --------------------------------------------------------------------------------------

    @_storage_operation
    def flush(self) -> None:
        """fsync every segment holding data above the recovery point; the recovery point becomes the log end."""
        plan = self.plan_flush()
        if plan is not None:
            plan.run()
            self.finish_flush(plan)

    def plan_flush(self, upto: int | None = None) -> FlushPlan | None:
        """The fsyncs that make everything below `upto` (default: the log end) durable, or None if it is.
        `FlushPlan.run` may run on another thread while this log keeps appending; `finish_flush` then moves the
        recovery point, on the owner's thread."""
        if self.failed or self.closed:
            return None
        upto = self.log_end_offset if upto is None else min(upto, self.log_end_offset)
        dir_changes = self._dir_changes if self._dir_changes != self._dir_synced else None
        if upto <= self.recovery_point and dir_changes is None:
            return None
        active = self.segments[-1]
        first = self._segment_index(self.recovery_point)
        rolled = [s for s in self.segments[first:-1] if s.unflushed and s.base_offset < upto]
        include_active = upto > active.base_offset and upto > self.recovery_point
        return FlushPlan(self, upto, rolled, active if include_active else None, dir_changes,
                         self.unflushed_messages)  # fmt: skip

    def finish_flush(self, plan: FlushPlan) -> None:
        for segment in plan.rolled:
            segment.unflushed = False
        if plan.dir_changes is not None:
            self._dir_synced = plan.dir_changes
        self.recovery_point = max(self.recovery_point, min(plan.upto, self.log_end_offset))
        self.unflushed_messages = max(0, self.unflushed_messages - plan.messages)
        self.last_flush_ms = self.clock.time_ms()

    def flush_due(self, now_ms: int) -> FlushPlan | None:
        """flush.ms: a full flush when the last one is older than that; otherwise the segments that rolled since
        the last flush (Kafka flushes them after each roll), so the recovery point reaches the active segment."""
        if self.recovery_point < self.log_end_offset and now_ms - self.last_flush_ms >= self.config.flush_ms:
            return self.plan_flush()
        return self.plan_flush(self.segments[-1].base_offset)

    def _write_snapshot(self, offset: int, *, fsync: bool) -> None:
        path = self.dir / file_name(offset, SNAPSHOT_SUFFIX)
        data = self.producer_state.to_snapshot()
        if fsync:
            write_atomically(self.fs, path, data)
            return
        # On roll: no fsync (the append path never waits on the disk); a torn snapshot fails its CRC and the
        # load falls back to an older one.
        tmp = path.with_name(path.name + ".tmp")
        handle = self.fs.open(tmp)
        try:
            self.fs.truncate(handle, 0)
            self.fs.pwrite(handle, data, 0)
        finally:
            self.fs.close(handle)
        self.fs.rename(tmp, path)

    def _delete_snapshots(self, doomed: Callable[[int], bool]) -> None:
        for offset in self._snapshot_offsets():
            if doomed(offset):
                self.fs.unlink(self.dir / file_name(offset, SNAPSHOT_SUFFIX))

    @_storage_operation
    def take_snapshot(self) -> None:
        """Snapshot producer state at the log end (clean shutdown)."""
        self._write_snapshot(self.log_end_offset, fsync=True)

    def update_config(self, config: LogConfig) -> None:
        self.config = config
        for segment in self.segments:
            segment.change_config(config)

    @_storage_operation
    def close(self) -> None:
        """Flush, snapshot producer state and close every segment (indexes trimmed)."""
        if self.closed:
            return
        self.flush()
        self.take_snapshot()
        self.leader_epochs.flush_if_dirty()
        for segment in self.segments:
            segment.close()
        self.closed = True

    def close_without_flush(self) -> None:
        """Release file handles only (the directory is being deleted, or its log dir failed)."""
        for segment in self.segments:
            try:
                segment.close_handle()
            except OSError as error:
                log.warning("%s: closing %s: %s", self.name, segment.log_path, error)
        self.closed = True
