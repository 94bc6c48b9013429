"""The log cleaner: compaction of logs whose cleanup.policy contains `compact`, as Kafka's LogCleaner does it.

Theory of operation. A cleaner thread picks the filthiest compacted log (`grab_filthiest`, on the owner's thread:
dirty bytes over total bytes of the part that may be cleaned, above min.cleanable.dirty.ratio, or any dirty bytes
once max.compaction.lag.ms has passed). The part that may be cleaned ends at the first of: the active segment, the
segment holding the last stable offset (no undecided transaction is cleaned), and the first segment younger than
min.compaction.lag.ms. The thread then, off the event loop:

1. builds a map key -> latest offset over the dirty part (from the `cleaner-offset-checkpoint` on), as many keys as
   log.cleaner.dedupe.buffer.size allows (a full map just cleans less this pass);
2. groups the segments from the log start to where the map ends so that each group fits one segment
   (`group_segments_by_size`), and rewrites each group into `<base>.log.cleaned` (and indexes), keeping a record
   only if its offset is the latest of its key, or it lies past the map; batches keep their base offset, last
   offset, producer id, epoch and base sequence (so offsets leave gaps and never move); the last batch of each
   active producer is kept, emptied if need be, so idempotence survives; tombstones (and transaction markers
   whose transaction has no data left) get a delete horizon, now + delete.retention.ms, stamped in their batch
   when a pass first reaches them, and go at the first pass after it (Kafka's KIP-534);
3. swaps each group in (`PartitionLog.replace_segments`, on the owner's thread, a few renames: `.cleaned` ->
   `.swap`, old files -> `.deleted`, `.swap` -> final), then fsyncs the partition dir and deletes the old files;
4. records where it stopped in `cleaner-offset-checkpoint`.

Crash safety is Kafka's: at start-up `.cleaned` files are deleted, and so are `.swap` files at or above the
lowest `.cleaned` one (an unfinished swap); the remaining `.swap` files are complete, so the segments they cover
are deleted and they are renamed in place (`PartitionLog._load`).

Reads of source segments go through descriptors of the cleaner's own, opened on the owner's thread, so the log may
roll, append, truncate or be deleted meanwhile: the swap checks that the log was not truncated since the pass was
planned and that the group's segments are still its own (else the pass is dropped, nothing renamed). Retention
skips a log while it is being cleaned. Every byte goes through the filesystem seam and the throttle
(log.cleaner.io.max.bytes.per.second, measured with the clock seam). The per-record work gives the GIL up every
128 records and allocates no per-record object the cyclic GC tracks, so the event loop hardly waits for it.

Transactions: `CleanedTransactions` applies Kafka's rules for control batches and aborted data. The aborted
transactions of the range being mapped or rewritten come from the log's `.txnindex` files (`add_aborted`):
their data is dropped (never in the offset map), an ABORT marker stays while data of its transaction does, a
COMMIT marker while the pass saw its data, then until its own delete horizon. One `CleanedTransactions` serves a
whole pass (as Kafka's doClean), so a marker rewritten in a later group than its data still knows of it. The
aborted transactions whose marker the cleaned segment keeps (`kept_aborted`) are its `.txnindex`
(`.txnindex.cleaned`, swapped in with the rest).
"""

from __future__ import annotations

import hashlib
import logging
import struct
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from broker_runtime.clock import Clock
from broker_runtime.log import checkpoint
from broker_runtime.log.fs import FileSystem
from broker_runtime.log.index import OffsetIndex, TimeIndex
from broker_runtime.log.partition_log import PartitionLog
from broker_runtime.log.segment import NO_TIMESTAMP, LogSegment, file_name
from broker_runtime.log.txn_index import AbortedTxn
from broker_runtime.protocol.compression import compress, decompress
from broker_runtime.protocol.records import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    CRC_START,
    DELETE_HORIZON_FLAG,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
)
from broker_runtime.protocol.varint import read_varint, write_varint

try:
    from crc32c import crc32c
except ImportError:  # pragma: no cover - records.require_native_crc32c guards broker start
    crc32c = None

log = logging.getLogger(__name__)

CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"
SEGMENT_FILE_SUFFIXES = (".log", ".index", ".timeindex", ".txnindex")
# A map entry in Python (16-byte digest object, dict slot, int) costs about this much, where Kafka's packed map
# costs 24 bytes: log.cleaner.dedupe.buffer.size buys fewer keys here, but stays the memory bound it promises.
OFFSET_MAP_ENTRY_BYTES = 128
_LONG_MAX = 2**63 - 1
_MAX_DECOMPRESSED = 1 << 30
_CONTROL_KEY = struct.Struct(">hh")

Key = tuple[str, int]
T = TypeVar("T")


class CleaningAborted(Exception):
    """The log changed under the cleaner (truncated, deleted, closed) or the cleaner is stopping."""


class UncleanableLog(Exception):
    """The log holds bytes the cleaner will not rewrite (a bad CRC, an impossible batch) or the dedupe buffer
    cannot hold even one batch's keys: the log is skipped until the broker restarts, as Kafka marks it
    uncleanable."""


@dataclass(frozen=True)
class CleanerConfig:
    """Kafka's CleanerConfig, from the log.cleaner.* broker settings."""

    threads: int = 1
    dedupe_buffer_size: int = 134217728
    load_factor: float = 0.9
    io_buffer_size: int = 524288
    max_io_bytes_per_second: float = float("inf")
    backoff_ms: int = 15000
    enabled: bool = True

    @classmethod
    def from_broker(cls, get: Callable[[str], Any]) -> CleanerConfig:
        return cls(
            threads=get("log.cleaner.threads"), dedupe_buffer_size=get("log.cleaner.dedupe.buffer.size"),
            load_factor=get("log.cleaner.io.buffer.load.factor"), io_buffer_size=get("log.cleaner.io.buffer.size"),
            max_io_bytes_per_second=get("log.cleaner.io.max.bytes.per.second"),
            backoff_ms=get("log.cleaner.backoff.ms"), enabled=get("log.cleaner.enable"),
        )  # fmt: skip


# --- the offset map ----------------------------------------------------------------------------------------


class OffsetMap:
    """Kafka's SkimpyOffsetMap: key (or its MD5) -> the latest offset seen, with a fixed capacity."""

    def __init__(self, memory_bytes: int, load_factor: float = 0.9) -> None:
        self.capacity = max(1, int(memory_bytes * load_factor) // OFFSET_MAP_ENTRY_BYTES)
        self._offsets: dict[bytes, int] = {}
        self.latest_offset = -1  # every offset up to here has been seen (or is a gap)

    def __len__(self) -> int:
        return len(self._offsets)

    @property
    def full(self) -> bool:
        return len(self._offsets) >= self.capacity

    @staticmethod
    def _slot(key: bytes) -> bytes:
        # Keys up to 32 bytes are their own slot (exact, and no hashing); longer ones are their MD5, as in Kafka.
        return key if len(key) <= 32 else hashlib.md5(key, usedforsecurity=False).digest()

    def put(self, key: bytes, offset: int) -> None:
        self._offsets[self._slot(key)] = offset

    def get(self, key: bytes) -> int:
        return self._offsets.get(self._slot(key), -1)

    def clear(self) -> None:
        self._offsets.clear()
        self.latest_offset = -1


# --- the throttle --------------------------------------------------------------------------------------------


class Throttler:
    """Kafka's Throttler: after each `check_interval_ms` of (clock-seam) monotonic time, sleep long enough that
    the bytes done since stay at or under `rate` per second. `sleep_ms` must return early when the cleaner stops."""

    def __init__(self, clock: Clock, rate: float, sleep_ms: Callable[[float], None],
                 check_interval_ms: int = 300) -> None:  # fmt: skip
        self.clock, self.rate, self._sleep_ms, self._interval = clock, rate, sleep_ms, check_interval_ms
        self._period_start = clock.monotonic_ms()
        self._observed = 0.0
        self.slept_ms = 0.0

    def maybe_throttle(self, nbytes: int) -> None:
        if self.rate == float("inf"):
            return
        self._observed += nbytes
        now = self.clock.monotonic_ms()
        elapsed = now - self._period_start
        if elapsed < self._interval and self._observed < self.rate * self._interval / 1000:
            return
        wanted_ms = self._observed * 1000 / self.rate
        if wanted_ms > elapsed:
            self._sleep_ms(wanted_ms - elapsed)
            self.slept_ms += wanted_ms - elapsed
        self._period_start = self.clock.monotonic_ms()
        self._observed = 0.0


# --- records of one batch --------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Records:
    """The records of one batch as parallel lists of ints and bytes: nothing per record for the cyclic GC to
    track (a batch can hold thousands, and collections of a busy broker's heap would stall the event loop)."""

    body: bytes  # decompressed
    offsets: list[int]
    timestamps: list[int]
    keys: list[bytes | None]
    has_value: list[bool]
    tails: list[int]  # where each record's key length starts: from there to its end it is copied as is
    ends: list[int]

    def __len__(self) -> int:
        return len(self.offsets)


def _politely(count: int) -> Iterator[int]:
    """range(count), giving the GIL up every 128: the cleaner threads are Python, and the event loop must not
    wait for a whole batch of thousands of records."""
    for i in range(count):
        if i & 127 == 127:
            time.sleep(0)
        yield i


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint; one- and two-byte ones (nearly every record field) without a call."""
    b = buf[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    b2 = buf[pos + 1]
    if b2 < 0x80:
        v = (b & 0x7F) | (b2 << 7)
        return (v >> 1) ^ -(v & 1), pos + 2
    return read_varint(buf, pos)


def _records(batch: memoryview, header: BatchHeader) -> _Records:
    """The records of one batch (decompressed if need be), kept as raw tails so a rewrite copies them."""
    body = bytes(batch[HEADER_SIZE : header.size])
    if header.codec:
        body = decompress(header.codec, body, _MAX_DECOMPRESSED)
    records = _Records(body, [], [], [], [], [], [])
    offsets, timestamps, keys, has_value = (
        records.offsets,
        records.timestamps,
        records.keys,
        records.has_value,
    )
    tails, ends = records.tails, records.ends
    pos = 0
    base_offset, base_ts = header.base_offset, header.base_timestamp
    for _ in _politely(header.record_count):
        length, pos = _varint(body, pos)
        end = pos + length
        ts_delta, p = _varint(body, pos + 1)  # skip the record attributes
        offset_delta, p = _varint(body, p)
        tails.append(p)
        key_len, p = _varint(body, p)
        if key_len >= 0:
            keys.append(body[p : p + key_len])
            p += key_len
        else:
            keys.append(None)
        offsets.append(base_offset + offset_delta)
        timestamps.append(base_ts + ts_delta)
        has_value.append(body[p] != 1)  # a value length of -1 is the one-byte varint 1
        ends.append(end)
        pos = end
    if pos != len(body):
        raise UncleanableLog(f"batch at offset {base_offset}: its records do not add up to its length")
    return records


def _delete_horizon(header: BatchHeader) -> int | None:
    return header.base_timestamp if header.attributes & DELETE_HORIZON_FLAG else None


def _rebuilt_batch(
    header: BatchHeader, records: _Records, kept: list[int], delete_horizon: int | None
) -> bytearray:
    """The batch with only the records at indexes `kept`, as Kafka's MemoryRecordsBuilder writes it for the
    cleaner: same base offset and last offset (so the last sequence stays), producer fields, leader epoch, codec
    and timestamp type; the base timestamp is the delete horizon when there is one (record deltas follow it)."""
    if kept:
        timestamps, offsets, body = records.timestamps, records.offsets, records.body
        base_ts = delete_horizon if delete_horizon is not None else timestamps[kept[0]]
        max_ts = header.max_timestamp if header.log_append_time else max(timestamps[i] for i in kept)
        out_body = bytearray()
        for n in _politely(len(kept)):
            i = kept[n]
            encoded = bytearray(b"\x00")
            write_varint(encoded, timestamps[i] - base_ts)
            write_varint(encoded, offsets[i] - header.base_offset)
            encoded += body[records.tails[i] : records.ends[i]]
            write_varint(out_body, len(encoded))
            out_body += encoded
        payload = compress(header.codec, bytes(out_body)) if header.codec else out_body
        attributes = header.attributes & ~DELETE_HORIZON_FLAG
        if delete_horizon is not None:
            attributes |= DELETE_HORIZON_FLAG
    else:  # Kafka's writeEmptyHeader: the batch stays for its producer fields only, uncompressed
        base_ts = max_ts = header.max_timestamp
        payload = b""
        attributes = header.attributes & ~(DELETE_HORIZON_FLAG | 0x07)
    out = bytearray(HEADER_SIZE) + payload
    HEADER.pack_into(
        out, 0, header.base_offset, len(out) - LOG_OVERHEAD, header.partition_leader_epoch, 2, 0, attributes,
        header.last_offset_delta, base_ts, max_ts, header.producer_id, header.producer_epoch, header.base_sequence,
        len(kept),
    )  # fmt: skip
    struct.pack_into(">I", out, 17, crc32c(memoryview(out)[CRC_START:]))
    return out


# --- transactions ------------------------------------------------------------------------------------------------


@dataclass
class CleanedTransactions:
    """Kafka's CleanedTransactionMetadata: which transactional batches are aborted, and which markers may go.

    `add_aborted` takes the aborted transactions of the range being cleaned (from the `.txnindex` files); aborted
    data is dropped, an ABORT marker stays while data of its transaction is
    still in the log, a COMMIT marker while the cleaned range held none of its data. `kept_aborted` lists the
    aborted transactions whose data remains: the cleaned segment's `.txnindex`."""

    _pending: list[AbortedTxn] = field(default_factory=list)
    _ongoing_aborted: dict[int, tuple[AbortedTxn, list[int]]] = field(default_factory=dict)
    _ongoing_committed: set[int] = field(default_factory=set)
    kept_aborted: list[AbortedTxn] = field(default_factory=list)

    def add_aborted(self, aborted: list[AbortedTxn]) -> None:
        self._pending = sorted(self._pending + aborted, key=lambda a: a.first_offset)

    def _consume_up_to(self, offset: int) -> None:
        while self._pending and self._pending[0].first_offset <= offset:
            txn = self._pending.pop(0)
            # A transaction spanning groups is listed again for each (Kafka's getOrElseUpdate): keep what was
            # seen of it.
            self._ongoing_aborted.setdefault(txn.producer_id, (txn, []))

    def on_control_batch(self, header: BatchHeader, control_type: int | None) -> bool:
        """Whether the marker may be discarded (once its delete horizon passed)."""
        self._consume_up_to(header.last_offset)
        if control_type == CONTROL_ABORT:
            ongoing = self._ongoing_aborted.pop(header.producer_id, None)
            if ongoing is not None and ongoing[1]:
                self.kept_aborted.append(ongoing[0])
                return False
            return True
        if control_type == CONTROL_COMMIT:
            if header.producer_id in self._ongoing_committed:
                self._ongoing_committed.discard(header.producer_id)
                return False
            return True
        return control_type is None  # an empty control batch; unknown types stay

    def on_batch(self, header: BatchHeader) -> bool:
        """Whether the data batch belongs to an aborted transaction (and may be discarded)."""
        self._consume_up_to(header.last_offset)
        if not header.is_transactional:
            return False
        ongoing = self._ongoing_aborted.get(header.producer_id)
        if ongoing is not None:
            ongoing[1].append(header.last_offset)
            return True
        self._ongoing_committed.add(header.producer_id)
        return False


def _control_type(batch: memoryview, header: BatchHeader) -> int | None:
    keys = _records(batch, header).keys
    if not keys or keys[0] is None or len(keys[0]) < 4:
        return None
    return _CONTROL_KEY.unpack_from(keys[0])[1]


# --- what to clean -----------------------------------------------------------------------------------------------


@dataclass
class LogToClean:
    key: Key
    log: PartitionLog
    log_dir: Path
    first_dirty_offset: int
    first_uncleanable_offset: int  # a segment base: everything below may be cleaned
    clean_bytes: int
    cleanable_bytes: int
    needs_compaction_now: bool = False
    truncations: int = 0  # the log's truncation count when the pass was planned

    @property
    def cleanable_ratio(self) -> float:
        total = self.clean_bytes + self.cleanable_bytes
        return self.cleanable_bytes / total if total else 0.0


def cleanable_offsets(plog: PartitionLog, checkpointed: int | None, now_ms: int,
                      high_watermark: int | None) -> tuple[int, int]:  # fmt: skip
    """Kafka's cleanableOffsets: (first dirty offset, first offset the cleaner may not reach)."""
    first_dirty = checkpointed if checkpointed is not None else plog.log_start_offset
    if first_dirty < plog.log_start_offset or first_dirty > plog.log_end_offset:
        first_dirty = plog.log_start_offset
    bounds = [plog.segments[-1].base_offset]  # the active segment is never cleaned
    bounds.append(plog.log_end_offset if high_watermark is None else high_watermark)
    lag = max(plog.config.min_compaction_lag_ms, 0)
    if lag > 0:
        for segment in _dirty_non_active(plog, first_dirty):
            if segment.largest_timestamp() > now_ms - lag:
                bounds.append(segment.base_offset)
                break
    return first_dirty, max(first_dirty, min(bounds))


def _dirty_non_active(plog: PartitionLog, first_dirty: int) -> list[LogSegment]:
    """The non-active segments from the one holding `first_dirty` on."""
    return plog.segments[plog._segment_index(first_dirty) : -1]


def log_to_clean(key: Key, plog: PartitionLog, log_dir: Path, checkpointed: int | None, now_ms: int,
                 high_watermark: int | None) -> LogToClean:  # fmt: skip
    first_dirty, uncleanable = cleanable_offsets(plog, checkpointed, now_ms, high_watermark)
    # Cleaning stops at a segment boundary: the start of the segment holding the uncleanable offset.
    end = plog._segment_index(uncleanable)
    first_uncleanable = plog.segments[end].base_offset
    start = plog._segment_index(min(first_dirty, first_uncleanable))
    clean_bytes = sum(s.size for s in plog.segments if s.base_offset < first_dirty)
    cleanable = sum(s.size for s in plog.segments[start:end])
    needs_now = False
    max_lag = plog.config.max_compaction_lag_ms
    if 0 <= max_lag < _LONG_MAX:  # Kafka's maxCompactionDelay: the first batch of a dirty segment is too old
        for segment in _dirty_non_active(plog, first_dirty):
            first = segment.header_at(0)
            if first is not None and 0 < first.max_timestamp < now_ms - max_lag:
                needs_now = True
                break
    return LogToClean(key, plog, log_dir, first_dirty, first_uncleanable, clean_bytes, cleanable, needs_now,
                      plog.truncations)  # fmt: skip


def group_segments_by_size(segments: list[LogSegment], max_size: int, max_index_entries: int,
                           index_interval: int, first_uncleanable: int) -> list[list[LogSegment]]:  # fmt: skip
    """Kafka's groupSegmentsBySize: consecutive segments whose total size fits one segment, whose offsets fit a
    relative int32, and whose index entries (estimated: one per index.interval.bytes) fit one index."""
    groups: list[list[LogSegment]] = []
    i = 0
    while i < len(segments):
        group = [segments[i]]
        size = segments[i].size
        entries = segments[i].size // max(index_interval, 1)
        i += 1
        while i < len(segments):
            candidate = segments[i]
            last_offset = segments[i + 1].base_offset - 1 if i + 1 < len(segments) else first_uncleanable - 1
            if (
                size + candidate.size > max_size
                or entries + candidate.size // max(index_interval, 1) > max_index_entries
                or (candidate.size and last_offset - group[0].base_offset > 2**31 - 1)
            ):
                break
            group.append(candidate)
            size += candidate.size
            entries += candidate.size // max(index_interval, 1)
            i += 1
        groups.append(group)
    return groups


# --- one cleaning pass ----------------------------------------------------------------------------------------


@dataclass
class CleanerStats:
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_kept: int = 0
    map_records: int = 0
    segments_swapped: int = 0
    elapsed_ms: int = 0  # the whole pass: offset map, rewriting, swaps


@dataclass
class _Source:
    """One segment to clean, read through a descriptor of the cleaner's own."""

    segment: LogSegment
    handle: int
    size: int


class _CleanedWriter:
    """`<base>.log.cleaned` and its indexes, indexed as LogSegment.append indexes (one entry per
    index.interval.bytes, added before counting the batch)."""

    def __init__(self, fs: FileSystem, directory: Path, base_offset: int, plog: PartitionLog) -> None:
        self.fs, self.dir, self.base_offset = fs, directory, base_offset
        config = plog.config
        self.paths = [directory / (file_name(base_offset, s) + CLEANED_SUFFIX) for s in SEGMENT_FILE_SUFFIXES]
        self.handle = fs.open(self.paths[0])
        fs.truncate(self.handle, 0)
        self.offset_index = OffsetIndex(fs, self.paths[1], base_offset, config.segment_index_bytes)
        self.time_index = TimeIndex(fs, self.paths[2], base_offset, config.segment_index_bytes)
        self.interval = config.index_interval_bytes
        self.size = 0
        self._since_entry = 0
        self.max_timestamp, self.offset_of_max = NO_TIMESTAMP, base_offset

    def append(self, batch: bytes | bytearray | memoryview, header: BatchHeader) -> None:
        self.fs.append(self.handle, batch)
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp, self.offset_of_max = header.max_timestamp, header.last_offset
        if self._since_entry > self.interval:
            self.offset_index.append(header.last_offset, self.size)
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max)
            self._since_entry = 0
        self._since_entry += len(batch)
        self.size += len(batch)

    def finish(self, aborted: list[AbortedTxn]) -> None:
        """Final time index entry, indexes written (`aborted`: the `.txnindex`, if any), everything fsynced
        (Kafka flushes before the swap)."""
        if aborted:
            handle = self.fs.open(self.paths[3])
            try:
                self.fs.truncate(handle, 0)
                self.fs.append(handle, b"".join(txn.to_bytes() for txn in aborted))
                self.fs.fsync(handle)
            finally:
                self.fs.close(handle)
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max)
        for index in (self.offset_index, self.time_index):
            index.write_trimmed()
            index.fsync()
        self.fs.fsync(self.handle)
        self.close()

    def close(self) -> None:
        if self.handle >= 0:
            self.fs.close(self.handle)
            self.handle = -1

    def delete(self) -> None:
        self.close()
        for path in self.paths:
            if self.fs.exists(path):
                self.fs.unlink(path)


class Cleaner:
    """Kafka's Cleaner: cleans one log at a time (one per cleaner thread).

    `run_on_owner(fn)` runs `fn` on the thread that owns the logs (the event loop) and returns its result;
    tests that drive the cleaner on one thread pass `lambda fn: fn()`."""

    def __init__(self, fs: FileSystem, clock: Clock, config: CleanerConfig, run_on_owner: Callable[[Callable[[], T]], T],
                 *, should_stop: Callable[[], bool] = lambda: False,
                 sleep_ms: Callable[[float], None] | None = None) -> None:  # fmt: skip
        self.fs, self.clock, self.config = fs, clock, config
        self.run_on_owner = run_on_owner
        self.should_stop = should_stop
        threads = max(config.threads, 1)
        self.offset_map = OffsetMap(config.dedupe_buffer_size // threads, config.load_factor)
        self.io_buffer_size = max(config.io_buffer_size // threads // 2, HEADER_SIZE)
        self.throttler = Throttler(clock, config.max_io_bytes_per_second, sleep_ms or (lambda ms: None))

    def clean(self, target: LogToClean, now_ms: int) -> tuple[int, CleanerStats]:
        """Clean `target` up to where the offset map reaches; returns (the new first dirty offset, stats).
        Raises CleaningAborted when the log changed under the cleaner."""
        stats = CleanerStats()
        plog = target.log
        sources = self.run_on_owner(lambda: self._open_sources(plog, target.first_uncleanable_offset))
        try:
            transactions = CleanedTransactions()
            first_dirty, uncleanable = target.first_dirty_offset, target.first_uncleanable_offset
            transactions.add_aborted(
                self.run_on_owner(lambda: plog.aborted_transactions(first_dirty, uncleanable))
            )
            dirty = [s for i, s in enumerate(sources)
                     if (sources[i + 1].segment.base_offset if i + 1 < len(sources) else target.first_uncleanable_offset)
                     > target.first_dirty_offset]  # fmt: skip
            self._build_offset_map(plog, dirty, target.first_dirty_offset, target.first_uncleanable_offset,
                                   transactions, stats)  # fmt: skip
            end_offset = self.offset_map.latest_offset + 1
            if end_offset <= target.first_dirty_offset:
                raise UncleanableLog(
                    f"{plog.name}: log.cleaner.dedupe.buffer.size holds {self.offset_map.capacity} keys, too few for "
                    f"one batch at offset {target.first_dirty_offset}"
                )
            to_clean = [s for s in sources if s.segment.base_offset < end_offset]
            groups = group_segments_by_size(
                [s.segment for s in to_clean], plog.config.segment_bytes,
                plog.config.segment_index_bytes // 8, plog.config.index_interval_bytes, target.first_uncleanable_offset,
            )  # fmt: skip
            by_segment = {id(s.segment): s for s in to_clean}
            active_producers = self.run_on_owner(lambda: _last_records_of_active_producers(plog))
            bases = [s.segment.base_offset for s in sources] + [target.first_uncleanable_offset]
            # Kafka's doClean: one transaction state for the whole pass, so that a marker cleaned in a later
            # group than its transaction's data knows the data is still there (and stays).
            transactions = CleanedTransactions()
            for group in groups:
                # Kafka's cleanSegments: the aborted transactions from the group's first offset to the next
                # segment's base; the cleaned segment's .txnindex holds those whose marker it keeps.
                start, upper = group[0].base_offset, bases[bases.index(group[-1].base_offset) + 1]
                transactions.kept_aborted = []
                transactions.add_aborted(
                    self.run_on_owner(lambda s=start, u=upper: plog.aborted_transactions(s, u))
                )
                self._clean_group(target, [by_segment[id(s)] for s in group], now_ms, transactions,
                                  active_producers, stats)  # fmt: skip
            return end_offset, stats
        finally:
            for source in sources:
                self.fs.close(source.handle)

    def _check(self, plog: PartitionLog) -> None:
        if self.should_stop() or plog.closed or plog.failed:
            raise CleaningAborted(f"cleaning {plog.name} aborted")

    def _open_sources(self, plog: PartitionLog, upto: int) -> list[_Source]:
        """On the owner's thread: descriptors of the log's segments below `upto` (never the active one)."""
        sources = []
        try:
            for segment in plog.segments[:-1]:
                if segment.base_offset >= upto:
                    break
                sources.append(_Source(segment, self.fs.open(segment.log_path, create=False), segment.size))
        except BaseException:
            for source in sources:
                self.fs.close(source.handle)
            raise
        return sources

    @staticmethod
    def _unreadable(plog: PartitionLog, source: _Source, problem: str) -> Exception:
        """A segment the log truncated meanwhile aborts the pass; bad bytes in one it still has make it
        uncleanable."""
        if source.segment not in plog.segments[:-1] or source.segment.size != source.size:
            return CleaningAborted(f"{plog.name}: {source.segment.log_path} changed while being cleaned")
        return UncleanableLog(f"{source.segment.log_path}: {problem}")

    def _batches(self, plog: PartitionLog, source: _Source) -> Iterator[tuple[memoryview, BatchHeader]]:
        """Every batch of a source segment, read in io-buffer chunks (grown for a batch larger than one)."""
        position = 0
        chunk_size = self.io_buffer_size
        while position < source.size:
            self._check(plog)
            chunk = memoryview(
                self.fs.pread(source.handle, min(chunk_size, source.size - position), position)
            )
            self.throttler.maybe_throttle(len(chunk))
            offset = 0
            while offset + HEADER_SIZE <= len(chunk):
                header = BatchHeader(0, *HEADER.unpack_from(chunk, offset))
                if header.batch_length < HEADER_SIZE - LOG_OVERHEAD or header.magic != 2:
                    raise self._unreadable(plog, source, f"no valid batch at byte {position + offset}")
                if offset + header.size > len(chunk):
                    break
                batch = chunk[offset : offset + header.size]
                if crc32c(batch[CRC_START:]) != header.crc:
                    raise self._unreadable(plog, source, f"CRC mismatch at byte {position + offset}")
                yield batch, header
                offset += header.size
                time.sleep(0)  # lets the event loop take the GIL between batches
            if offset == 0:  # one batch larger than the buffer, or bytes that are not a whole batch
                header = BatchHeader(0, *HEADER.unpack_from(chunk, 0)) if len(chunk) >= HEADER_SIZE else None
                if header is None or position + header.size > source.size:
                    # A rolled segment is whole (recovery cut any torn tail): never rewrite one that is not.
                    raise self._unreadable(plog, source, f"a torn batch at byte {position}")
                chunk_size = max(chunk_size, header.size)
                continue
            position += offset
            chunk_size = self.io_buffer_size

    def _build_offset_map(self, plog: PartitionLog, dirty: list[_Source], start: int, end: int,
                          transactions: CleanedTransactions, stats: CleanerStats) -> None:  # fmt: skip
        """Kafka's buildOffsetMap: key -> latest offset over [start, end), until the map is full."""
        offset_map = self.offset_map
        offset_map.clear()
        for i, source in enumerate(dirty):
            next_start = dirty[i + 1].segment.base_offset if i + 1 < len(dirty) else end
            for batch, header in self._batches(plog, source):
                if header.last_offset < start:
                    continue
                if header.is_control:
                    transactions.on_control_batch(header, _control_type(batch, header))
                elif not transactions.on_batch(header):
                    records = _records(batch, header)
                    for i in _politely(len(records)):
                        key, offset = records.keys[i], records.offsets[i]
                        if key is not None and offset >= start:
                            if offset_map.full:
                                return
                            offset_map.put(key, offset)
                    stats.map_records += len(records)
                offset_map.latest_offset = max(offset_map.latest_offset, header.last_offset)
            offset_map.latest_offset = max(offset_map.latest_offset, next_start - 1)  # a gap ends the segment

    def _clean_group(self, target: LogToClean, group: list[_Source], now_ms: int,
                     transactions: CleanedTransactions, active_producers: Mapping[int, tuple[int, int]],
                     stats: CleanerStats) -> None:  # fmt: skip
        plog = target.log
        base = group[0].segment.base_offset
        writer = _CleanedWriter(self.fs, plog.dir, base, plog)
        try:
            for source in group:
                for batch, header in self._batches(plog, source):
                    out = self._filter_batch(batch, header, now_ms, plog.config.delete_retention_ms, transactions,
                                             active_producers, stats)  # fmt: skip
                    stats.bytes_read += len(batch)
                    if out is None:
                        continue
                    out_header = header if out is batch else BatchHeader(0, *HEADER.unpack_from(out, 0))
                    writer.append(out, out_header)
                    stats.bytes_written += len(out)
                    self.throttler.maybe_throttle(len(out))
            writer.finish(transactions.kept_aborted)
            self.fs.fsync_dir(plog.dir)  # the .cleaned names, before they are renamed
            self._check(plog)
            old = self.run_on_owner(lambda: self._swap(target, [s.segment for s in group], base))
        except BaseException:
            if not plog.failed:  # a failed log dir is never written again; loading clears what is left
                try:
                    writer.delete()
                except OSError as error:
                    log.warning("%s: removing %s: %s", plog.name, writer.paths[0], error)
            raise
        # The swap is durable with the directory; then the old files go (a crash leaves .deleted files, which
        # loading removes).
        self.fs.fsync_dir(plog.dir)
        for segment in old:
            segment.close_handle()
            for suffix in SEGMENT_FILE_SUFFIXES:
                path = plog.dir / (file_name(segment.base_offset, suffix) + DELETED_SUFFIX)
                if self.fs.exists(path):
                    self.fs.unlink(path)
        stats.segments_swapped += 1

    def _swap(self, target: LogToClean, old: list[LogSegment], base: int) -> list[LogSegment]:
        """On the owner's thread: swap the cleaned segment in, unless the log was closed or truncated since the
        pass was planned (Kafka aborts cleaning before truncating)."""
        plog = target.log
        if plog.closed or plog.failed:
            raise CleaningAborted(f"{plog.name} closed while being cleaned")
        if plog.truncations != target.truncations:
            raise CleaningAborted(f"{plog.name} was truncated while being cleaned")
        try:
            return plog.replace_segments(old, base)
        except ValueError as error:  # truncated or retained meanwhile: the next pass starts afresh
            raise CleaningAborted(str(error)) from None

    def _filter_batch(self, batch: memoryview, header: BatchHeader, now_ms: int, delete_retention_ms: int,
                      transactions: CleanedTransactions, active_producers: Mapping[int, tuple[int, int]],
                      stats: CleanerStats) -> memoryview | bytearray | None:  # fmt: skip
        """Kafka's cleanInto filter for one batch: the batch as is, rebuilt with fewer records, emptied (its
        producer's last), or None (gone)."""
        horizon = _delete_horizon(header)
        if header.is_control:
            control_type = _control_type(batch, header)
            can_discard = transactions.on_control_batch(header, control_type)
            discard_records = can_discard and horizon is not None and horizon <= now_ms
        else:
            can_discard = discard_records = transactions.on_batch(header)
        last_of_producer = False
        if header.has_producer_id:
            last = active_producers.get(header.producer_id)
            if last is not None:
                last_data_offset, epoch = last
                if last_data_offset >= 0:
                    last_of_producer = header.last_offset == last_data_offset
                else:
                    last_of_producer = header.is_control and header.producer_epoch == epoch
        if not last_of_producer and discard_records:
            return None
        marker_for_empty_txn = can_discard and header.is_control
        records = _records(batch, header)
        stats.records_read += len(records)
        offset_map = self.offset_map
        if discard_records:
            kept = []
        elif header.is_control:
            kept = list(range(len(records)))
        else:
            kept = []
            offsets, keys, has_value, latest = (
                records.offsets,
                records.keys,
                records.has_value,
                offset_map.latest_offset,
            )
            for i in _politely(len(records)):
                offset, key = offsets[i], keys[i]
                if offset > latest or (
                    key is not None
                    and offset >= offset_map.get(key)
                    and (has_value[i] or horizon is None or now_ms < horizon)
                ):
                    kept.append(i)
        stats.records_kept += len(kept)
        if kept:
            tombstones = not header.is_control and not all(records.has_value[i] for i in kept)
            set_horizon = (tombstones or marker_for_empty_txn) and horizon is None
            if len(kept) == len(records) and not set_horizon:
                return batch
            return _rebuilt_batch(
                header, records, kept, now_ms + delete_retention_ms if set_horizon else horizon
            )
        if last_of_producer:
            return _rebuilt_batch(header, records, [], None)
        return None


def _last_records_of_active_producers(plog: PartitionLog) -> dict[int, tuple[int, int]]:
    """producer id -> (offset of its last data batch or -1, epoch): the batches the cleaner must keep."""
    return {pid: (e.last_data_offset, e.epoch) for pid, e in plog.producer_state.producers.items()}


# --- the cleaner threads and their checkpoints ---------------------------------------------------------------


class LogCleaner:
    """Kafka's LogCleaner + LogCleanerManager: cleaner threads, the logs being cleaned, and each log dir's
    `cleaner-offset-checkpoint` (the first dirty offset of each compacted log).

    `logs()` gives {key: (log, log dir)} of the live logs, `high_watermark(key)` the offset cleaning must stay
    below, `run_on_owner(fn)` runs `fn` on the owner's thread and returns its result, `on_io_error(log_dir, what,
    error)` takes a log dir offline (called on the owner's thread)."""

    def __init__(self, fs: FileSystem, clock: Clock, config: CleanerConfig, *,
                 logs: Callable[[], Mapping[Key, tuple[PartitionLog, Path]]],
                 high_watermark: Callable[[Key], int | None],
                 run_on_owner: Callable[[Callable[[], Any]], Any],
                 on_io_error: Callable[[Path, str, OSError], None],
                 log_dirs: list[Path]) -> None:  # fmt: skip
        self.fs, self.clock, self.config = fs, clock, config
        self._logs, self._high_watermark = logs, high_watermark
        self.run_on_owner, self._on_io_error = run_on_owner, on_io_error
        self.in_progress: set[Key] = set()
        self.uncleanable: set[Key] = set()  # logs whose cleaning failed on bad data: skipped until restart
        self._checkpoints: dict[Path, dict[Key, int]] = {}
        self._checkpoint_lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._lifecycle = threading.Lock()  # reconfigurations and the shutdown one at a time
        self._closed = False
        self._stop = threading.Event()
        self._wake = threading.Event()
        self.passes = 0  # cleanings finished, for tests and metrics
        self.last_stats: CleanerStats | None = None
        for log_dir in log_dirs:
            self._load_checkpoint(log_dir)

    def _load_checkpoint(self, log_dir: Path) -> None:
        try:
            self._checkpoints[log_dir] = checkpoint.read_offsets(self.fs, log_dir / CLEANER_OFFSET_CHECKPOINT)
        except (checkpoint.CorruptCheckpointError, OSError) as error:
            log.warning("%s; every compacted log there is cleaned from its start", error)
            self._checkpoints[log_dir] = {}

    def checkpointed(self, key: Key, log_dir: Path) -> int | None:
        with self._checkpoint_lock:
            return self._checkpoints.get(log_dir, {}).get(key)

    # --- threads -------------------------------------------------------------------------------------------

    def start(self) -> None:
        if not self.config.enabled:
            return
        self._stop.clear()
        self._threads = [
            threading.Thread(target=self._run, args=(i,), name=f"odradek-cleaner-{i}", daemon=True)
            for i in range(self.config.threads)
        ]
        for thread in self._threads:
            thread.start()

    def shutdown(self) -> None:
        """Stop the threads (a pass under way is abandoned, its .cleaned files removed) and wait for them; no
        reconfiguration starts them again."""
        with self._lifecycle:
            self._closed = True
            self._stop_threads()

    def _stop_threads(self) -> None:
        self._stop.set()
        self._wake.set()
        for thread in self._threads:
            thread.join()
        self._threads = []

    def reconfigure(self, config: Callable[[], CleanerConfig]) -> None:
        """A dynamic log.cleaner.* change: restart the threads with the settings `config()` gives then (changes
        made meanwhile included), as Kafka does."""
        with self._lifecycle:
            if not self._closed and config() != self.config:
                self._stop_threads()
                self.config = config()
                self.start()

    def wake(self) -> None:
        """Look for work now rather than after log.cleaner.backoff.ms."""
        self._wake.set()

    def _run(self, thread_index: int) -> None:
        cleaner = Cleaner(self.fs, self.clock, self.config, self.run_on_owner, should_stop=self._stop.is_set,
                          sleep_ms=lambda ms: self._stop.wait(ms / 1000))  # fmt: skip
        while not self._stop.is_set():
            try:
                cleaned = self.clean_filthiest(cleaner)
            except Exception:
                if self._stop.is_set():
                    return
                log.exception("log cleaner thread %d", thread_index)
                cleaned = False
            if not cleaned:
                self._wake.wait(self.config.backoff_ms / 1000)
                self._wake.clear()

    # --- one pass ------------------------------------------------------------------------------------------

    def grab_filthiest(self) -> LogToClean | None:
        """On the owner's thread: the compacted log most worth cleaning, marked in progress (Kafka's
        grabFilthiestCompactedLog)."""
        now = self.clock.time_ms()
        best: LogToClean | None = None
        for key, (plog, log_dir) in self._logs().items():
            if not plog.config.compacts or key in self.in_progress or key in self.uncleanable or plog.failed:
                continue
            target = log_to_clean(
                key, plog, log_dir, self.checkpointed(key, log_dir), now, self._high_watermark(key)
            )
            if target.cleanable_bytes <= 0:
                continue
            if (
                not target.needs_compaction_now
                and target.cleanable_ratio <= plog.config.min_cleanable_dirty_ratio
            ):
                continue
            if best is None or target.cleanable_ratio > best.cleanable_ratio:
                best = target
        if best is not None:
            self.in_progress.add(best.key)
        return best

    def clean_filthiest(self, cleaner: Cleaner) -> bool:
        """Clean the filthiest log, if any is worth it; returns whether one was cleaned."""
        target = self.run_on_owner(self.grab_filthiest)
        if target is None:
            return False
        plog = target.log
        started = self.clock.monotonic_ms()
        try:
            end_offset, stats = cleaner.clean(target, self.clock.time_ms())
        except CleaningAborted as aborted:
            log.info("%s", aborted)
            return False
        except OSError as error:
            if not (plog.closed or plog.failed or self._stop.is_set()):
                what = f"cleaning {plog.name}"
                self.run_on_owner(lambda e=error: self._on_io_error(target.log_dir, what, e))
            return False
        except Exception as error:
            if plog.closed or plog.failed:  # its log dir failed meanwhile (logged there)
                return False
            if isinstance(error, UncleanableLog):
                log.error("%s; it is left uncleaned until the broker restarts", error)
            else:
                log.exception(
                    "%s: cleaning failed; it is left uncleaned until the broker restarts", plog.name
                )
            self.uncleanable.add(target.key)
            return False
        finally:
            self.run_on_owner(lambda: self.in_progress.discard(target.key))
        self._done_cleaning(target, end_offset)
        stats.elapsed_ms = self.clock.monotonic_ms() - started
        self.passes += 1
        self.last_stats = stats
        log.info(
            "%s cleaned: %d bytes read, %d written, %d of %d records kept, %d segments swapped in %d ms "
            "(%.1f MB/s); clean up to %d",
            plog.name, stats.bytes_read, stats.bytes_written, stats.records_kept, stats.records_read,
            stats.segments_swapped, stats.elapsed_ms, stats.bytes_read / max(stats.elapsed_ms, 1) / 1000, end_offset,
        )  # fmt: skip
        return True

    def _done_cleaning(self, target: LogToClean, end_offset: int) -> None:
        """Record where the next pass starts, in the log dir's cleaner-offset-checkpoint (written at once)."""
        live = self.run_on_owner(lambda: {k for k, (_, d) in self._logs().items() if d == target.log_dir})
        with self._checkpoint_lock:
            offsets = self._checkpoints.setdefault(target.log_dir, {})
            offsets[target.key] = end_offset
            for key in [k for k in offsets if k not in live]:
                del offsets[key]
            try:
                checkpoint.write_offsets(self.fs, target.log_dir / CLEANER_OFFSET_CHECKPOINT, dict(offsets))
            except OSError as error:
                what = "writing the cleaner checkpoint"
                self.run_on_owner(lambda e=error: self._on_io_error(target.log_dir, what, e))

    def clean_now(self) -> int:
        """Clean every log worth cleaning on this thread, as the cleaner threads would (tests, tools);
        returns how many passes ran."""
        cleaner = Cleaner(self.fs, self.clock, self.config, self.run_on_owner)
        passes = 0
        while self.clean_filthiest(cleaner):
            passes += 1
        return passes
