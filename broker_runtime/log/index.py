"""Sparse offset and time indexes, in Kafka's byte layout.

`.index`: 8-byte entries (relative offset int32, file position int32), big-endian. An entry (o, p) says the
batch whose last offset is `base + o` starts at byte `p` of the `.log`.
`.timeindex`: 12-byte entries (timestamp int64, relative offset int32): the largest timestamp seen up to and
including the batch whose last offset is `base + o`.

Entries are kept in a bytearray (the whole index of a 1 GiB segment at the default interval is ~2 MiB) and
written to the file on flush, roll and close. Files are preallocated to segment.index.bytes (sparse) while the
segment is active and trimmed to their entries when it rolls or the log closes; loading strips a zero tail, so
both shapes read back. An index that fails its sanity check is rebuilt from the log by the segment.
"""

from __future__ import annotations

import struct
from pathlib import Path

from broker_runtime.log.fs import FileSystem, read_whole


class CorruptIndexError(Exception):
    pass


class _Index:
    entry: struct.Struct
    entry_size: int
    key_index: int  # which unpacked field is searched (offset for .index, timestamp for .timeindex)

    def __init__(self, fs: FileSystem, path: Path, base_offset: int, max_index_bytes: int,
                 entries: bytearray | None = None) -> None:  # fmt: skip
        self.fs = fs
        self.path = path
        self.base_offset = base_offset
        self.max_entries = max(1, max_index_bytes // self.entry_size)
        self._buf = entries if entries is not None else bytearray()
        self._dirty_from = 0 if entries is None else len(self._buf)
        self._disk_len = len(self._buf)  # bytes of non-zero entries the file may hold
        self.trimmed = False  # the file holds exactly the entries, nothing more (set by write_trimmed / load)

    @classmethod
    def load(cls, fs: FileSystem, path: Path, base_offset: int, max_index_bytes: int):  # -> Self
        data = read_whole(fs, path)
        if len(data) % cls.entry_size:
            raise CorruptIndexError(f"{path}: size {len(data)} is not a multiple of {cls.entry_size}")
        used = len(data.rstrip(b"\0"))
        used = -(-used // cls.entry_size) * cls.entry_size  # the zero tail is preallocated space
        index = cls(fs, path, base_offset, max_index_bytes, bytearray(data[:used]))
        index.trimmed = used == len(data)
        return index

    def __len__(self) -> int:
        return len(self._buf) // self.entry_size

    @property
    def is_full(self) -> bool:
        return len(self._buf) // self.entry_size >= self.max_entries

    def entry_at(self, n: int) -> tuple[int, int]:
        return self.entry.unpack_from(self._buf, n * self.entry_size)

    def _search(self, key: int) -> int:
        """Index of the last entry whose key is <= `key`, or -1."""
        lo, hi = 0, len(self) - 1
        found = -1
        buf, size, unpack, k = self._buf, self.entry_size, self.entry.unpack_from, self.key_index
        while lo <= hi:
            mid = (lo + hi) // 2
            if unpack(buf, mid * size)[k] <= key:
                found = mid
                lo = mid + 1
            else:
                hi = mid - 1
        return found

    def _truncate_entries(self, count: int) -> None:
        if count < len(self):
            del self._buf[count * self.entry_size :]
            self._dirty_from = min(self._dirty_from, len(self._buf))
            self.trimmed = False

    def truncate_all(self) -> None:
        self._truncate_entries(0)

    def flush(self) -> None:
        """Write entries changed since the last flush; zero stale entries left on disk by a truncation."""
        stale = max(0, self._disk_len - len(self._buf))
        if self._dirty_from >= len(self._buf) and not stale:
            return
        handle = self.fs.open(self.path)
        try:
            self.fs.pwrite(handle, self._buf[self._dirty_from :] + bytes(stale), self._dirty_from)
        finally:
            self.fs.close(handle)
        self._dirty_from = self._disk_len = len(self._buf)

    def preallocate(self) -> None:
        """Size the file to segment.index.bytes (sparse), as Kafka does for the active segment."""
        handle = self.fs.open(self.path)
        try:
            size = self.max_entries * self.entry_size
            if self.fs.size(handle) < size:
                self.fs.truncate(handle, size)
                self.trimmed = False
        finally:
            self.fs.close(handle)

    def write_trimmed(self) -> None:
        """Write all entries and cut the file to exactly them (segment rolled or log closing)."""
        handle = self.fs.open(self.path)
        try:
            self.fs.truncate(handle, 0)
            if self._buf:
                self.fs.pwrite(handle, self._buf, 0)
        finally:
            self.fs.close(handle)
        self._dirty_from = self._disk_len = len(self._buf)
        self.trimmed = True

    def fsync(self) -> None:
        handle = self.fs.open(self.path)
        try:
            self.fs.fsync(handle)
        finally:
            self.fs.close(handle)


class OffsetIndex(_Index):
    entry = struct.Struct(">ii")
    entry_size = 8
    key_index = 0

    def last_offset(self) -> int:
        return self.base_offset + self.entry_at(len(self) - 1)[0] if len(self) else self.base_offset

    def append(self, offset: int, position: int) -> None:
        relative = offset - self.base_offset
        buf = self._buf  # read once: one entry per appended batch of the produce path
        if buf and relative <= self.entry.unpack_from(buf, len(buf) - self.entry_size)[0]:
            return  # entries strictly increase; a repeat can only come from a replayed append
        self._buf += self.entry.pack(relative, position)
        self.trimmed = False

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the last entry at or before `offset`; (base offset, 0) if none."""
        n = self._search(offset - self.base_offset)
        if n < 0:
            return self.base_offset, 0
        relative, position = self.entry_at(n)
        return self.base_offset + relative, position

    def truncate_to(self, offset: int) -> None:
        """Drop entries for offsets >= `offset`."""
        self._truncate_entries(self._search(offset - self.base_offset - 1) + 1)

    def truncate_to_position(self, position: int) -> None:
        """Drop entries pointing at or past `position` of the log."""
        count = len(self)
        while count and self.entry_at(count - 1)[1] >= position:
            count -= 1
        self._truncate_entries(count)

    def sanity_check(self, log_size: int) -> None:
        if not len(self):
            return
        first_rel, first_pos = self.entry_at(0)
        last_rel, last_pos = self.entry_at(len(self) - 1)
        if first_rel < 0 or last_rel < first_rel or last_pos < first_pos or first_pos <= 0:
            raise CorruptIndexError(f"{self.path}: entries are not increasing")
        if last_pos >= log_size:
            raise CorruptIndexError(
                f"{self.path}: last entry points at {last_pos}, past the log's {log_size} bytes"
            )


class TimeIndex(_Index):
    entry = struct.Struct(">qi")
    entry_size = 12
    key_index = 0

    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry; (-1, base offset) when empty, as Kafka."""
        if not len(self):
            return -1, self.base_offset
        timestamp, relative = self.entry_at(len(self) - 1)
        return timestamp, self.base_offset + relative

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Append only when the timestamp grows, so entries are increasing in both fields."""
        buf = self._buf  # read once: called per appended batch of the produce path
        if buf:
            last_ts, last_relative = self.entry.unpack_from(buf, len(buf) - self.entry_size)
            grows = timestamp > last_ts and offset >= self.base_offset + last_relative
        else:
            grows = timestamp > -1  # last_entry() of an empty index: (-1, base offset)
        if grows:
            self._buf += self.entry.pack(timestamp, offset - self.base_offset)
            self.trimmed = False

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """(timestamp, offset) of the last entry with timestamp <= `timestamp`; (-1, base offset) if none."""
        n = self._search(timestamp)
        if n < 0:
            return -1, self.base_offset
        ts, relative = self.entry_at(n)
        return ts, self.base_offset + relative

    def truncate_to(self, offset: int) -> None:
        count = len(self)
        while count and self.base_offset + self.entry_at(count - 1)[1] >= offset:
            count -= 1
        self._truncate_entries(count)

    def sanity_check(self, log_size: int) -> None:
        if not len(self):
            return
        first_ts, first_rel = self.entry_at(0)
        last_ts, last_rel = self.entry_at(len(self) - 1)
        if first_rel < 0 or last_rel < first_rel or last_ts < first_ts:
            raise CorruptIndexError(f"{self.path}: entries are not increasing")
