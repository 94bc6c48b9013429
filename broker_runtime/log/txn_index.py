"""`%020d.txnindex`: the aborted transactions whose ABORT marker is in one segment (Kafka's TransactionIndex).

Format (Kafka's AbortedTxn, big-endian), one 34-byte entry per aborted transaction, in marker order:
    version int16 (=0) | producer_id int64 | first_offset int64 | last_offset int64 | last_stable_offset int64
`last_offset` is the marker's offset; `last_stable_offset` the partition's LSO once the transaction ended (the
first offset of the earliest other open transaction, else the offset after the marker). A fetch at
read_committed collects the entries overlapping [fetch offset, upper bound) from the segment holding the fetch
offset onwards, and stops at the first entry whose LSO reaches the upper bound (nothing later can overlap).

The file is created by the first entry (a segment without aborted transactions has none), appended to through
the filesystem seam and fsynced whenever its segment's log is, active segment included (unlike the offset and
time indexes, it is not rebuilt once the recovery point has passed its segment); recovery rebuilds it from the
markers of the segments it re-reads. Entries are read once and kept in memory (34 bytes of file each; aborts are rare).

Pure: no asyncio.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass
from pathlib import Path

from broker_runtime.log.fs import FileSystem, read_whole

log = logging.getLogger(__name__)

_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34
CURRENT_VERSION = 0


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One `.txnindex` entry: producer `producer_id`'s transaction over [first_offset, last_offset] aborted."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def to_bytes(self) -> bytes:
        return _ENTRY.pack(
            CURRENT_VERSION, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset
        )


def parse_entries(data: bytes, path: Path | str = "") -> list[AbortedTxn]:
    """The whole entries of a `.txnindex`; a torn tail (a write cut by a crash) is ignored and logged."""
    whole = len(data) - len(data) % ENTRY_SIZE
    if whole != len(data):
        log.warning("%s: ignoring %d bytes at the end that are not a whole entry", path, len(data) - whole)
    entries = []
    for position in range(0, whole, ENTRY_SIZE):
        version, pid, first, last, lso = _ENTRY.unpack_from(data, position)
        if version != CURRENT_VERSION:
            log.warning("%s: entry at byte %d has version %d; ignoring the rest", path, position, version)
            break
        entries.append(AbortedTxn(pid, first, last, lso))
    return entries


class TransactionIndex:
    def __init__(self, fs: FileSystem, path: Path, base_offset: int) -> None:
        self.fs = fs
        self.path = path
        self.base_offset = base_offset
        self._entries: list[AbortedTxn] | None = None  # loaded on first use
        self.unflushed = False
        # Changes to the file so far: an fsync on the flusher's thread clears `unflushed` only if none came
        # while it ran.
        self._changes = 0

    @property
    def entries(self) -> list[AbortedTxn]:
        if self._entries is None:
            self._entries = (
                parse_entries(read_whole(self.fs, self.path), self.path) if self.fs.exists(self.path) else []
            )
        return self._entries

    def append(self, txn: AbortedTxn) -> None:
        entries = self.entries
        if entries and entries[-1].last_offset >= txn.last_offset:
            raise ValueError(
                f"{self.path}: aborted transactions must be appended in marker order ({txn.last_offset} after "
                f"{entries[-1].last_offset})"
            )
        handle = self.fs.open(self.path)
        try:
            self.fs.append(handle, txn.to_bytes())
        finally:
            self.fs.close(handle)
        entries.append(txn)
        self._changes += 1
        self.unflushed = True

    def fsync(self) -> None:
        """Make the entries durable. Safe on the flusher's thread while the owner appends or truncates."""
        if not self.unflushed:
            return
        changes = self._changes
        try:
            handle = self.fs.open(self.path, create=False)
        except FileNotFoundError:
            return  # reset meanwhile (truncation, recovery): nothing of it is left to make durable
        try:
            self.fs.fsync(handle)
        finally:
            self.fs.close(handle)
        if self._changes == changes:
            self.unflushed = False

    def reset(self) -> None:
        """Drop every entry (recovery rebuilds them)."""
        if self.fs.exists(self.path):
            self.fs.unlink(self.path)
        self._entries = []
        self.unflushed = False

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or above `offset` (the log was truncated there)."""
        entries = self.entries
        keep = len(entries)
        while keep and entries[keep - 1].last_offset >= offset:
            keep -= 1
        if keep == len(entries):
            return
        del entries[keep:]
        if not entries:
            self.reset()
            return
        handle = self.fs.open(self.path, create=False)
        try:
            self.fs.truncate(handle, keep * ENTRY_SIZE)
        finally:
            self.fs.close(handle)
        self._changes += 1
        self.unflushed = True

    def collect(self, fetch_offset: int, upper_bound: int, into: list[AbortedTxn]) -> bool:
        """Add the entries overlapping [fetch_offset, upper_bound) to `into`; True when the search is complete
        (an entry's LSO reached the upper bound, so later segments cannot overlap)."""
        for txn in self.entries:
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound:
                into.append(txn)
            if txn.last_stable_offset >= upper_bound:
                return True
        return False

    def forget(self) -> None:
        """The file was renamed or deleted underneath (the segment is going away)."""
        self._entries = []
        self.unflushed = False
