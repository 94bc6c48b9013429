"""Leader epoch cache: (epoch, start offset) pairs, persisted in `leader-epoch-checkpoint`.

Semantics follow Kafka's LeaderEpochFileCache: epochs and start offsets both strictly increase; assigning an
epoch drops entries that would break that; `end_offset_for(epoch)` answers OffsetsForLeaderEpoch.
"""

from __future__ import annotations

import bisect
from pathlib import Path

from broker_runtime.log import checkpoint
from broker_runtime.log.fs import FileSystem

UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1
FILE_NAME = "leader-epoch-checkpoint"


class LeaderEpochCache:
    def __init__(self, fs: FileSystem, path: Path, entries: list[tuple[int, int]] | None = None) -> None:
        self._fs = fs
        self._path = path
        self._entries: list[tuple[int, int]] = list(entries or [])
        self._dirty = False  # entries changed since the file was written

    @classmethod
    def load(cls, fs: FileSystem, partition_dir: Path) -> LeaderEpochCache:
        path = partition_dir / FILE_NAME
        try:
            entries = checkpoint.read_epochs(fs, path)
        except checkpoint.CorruptCheckpointError:
            entries = []  # rebuilt from the batches' partition leader epochs by the caller
        return cls(fs, path, entries)

    @property
    def entries(self) -> list[tuple[int, int]]:
        return list(self._entries)

    def latest_epoch(self) -> int:
        return self._entries[-1][0] if self._entries else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int, *, persist: bool = True, sync: bool = True) -> None:
        """Record that `epoch` starts at `start_offset` (first batch appended with that epoch). `sync=False`
        writes the file without fsyncs (a new, empty log: rebuilt from the batches if a power cut loses it)."""
        if epoch < 0 or start_offset < 0:
            return
        if self._entries:
            last_epoch, last_start = self._entries[-1]
            if epoch == last_epoch and start_offset >= last_start:
                return
        # Kafka drops entries with an epoch >= the new one or a start offset >= the new one.
        self._entries = [(e, s) for e, s in self._entries if e < epoch and s < start_offset]
        self._entries.append((epoch, start_offset))
        if persist:
            self.flush(sync=sync)

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset): the start offset of the first epoch above `requested_epoch`, or the log end
        offset when it is the latest; (-1, -1) when unknown or above the latest epoch."""
        if requested_epoch == UNDEFINED_EPOCH or not self._entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if requested_epoch == self._entries[-1][0]:
            return requested_epoch, log_end_offset
        epochs = [e for e, _ in self._entries]
        higher = bisect.bisect_right(epochs, requested_epoch)
        if higher == len(epochs):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        higher_start = self._entries[higher][1]
        if higher == 0:
            # Requested epoch is older than anything we know: Kafka answers with it and the first start offset.
            return requested_epoch, higher_start
        return self._entries[higher - 1][0], higher_start

    def truncate_from_end(self, end_offset: int) -> None:
        """Drop epochs starting at or after `end_offset` (the log was truncated there)."""
        kept = [(e, s) for e, s in self._entries if s < end_offset]
        if kept != self._entries:
            self._entries = kept
            self.flush()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log now starts at `start_offset`: drop epochs that ended before it, move the survivor's start.

        Not written at once (Kafka flushes this asynchronously too): loading a log applies the checkpointed log
        start offset again, so a file that still has the older entries reads back the same; `flush_if_dirty`
        (on close) writes it."""
        below = [i for i, (_, s) in enumerate(self._entries) if s <= start_offset]
        if not below:
            return
        last_below = below[-1]
        epoch, start = self._entries[last_below]
        updated = [(epoch, max(start, start_offset)), *self._entries[last_below + 1 :]]
        if updated != self._entries:
            self._entries = updated
            self._dirty = True

    def clear(self) -> None:
        self._entries = []
        self.flush()

    def flush(self, *, sync: bool = True) -> None:
        checkpoint.write_epochs(self._fs, self._path, self._entries, sync=sync)
        self._dirty = False

    def flush_if_dirty(self) -> None:
        if self._dirty:
            self.flush()
