"""Kafka's text checkpoint files.

    <version>\\n
    <count>\\n
    <entry>\\n ...

Offset checkpoints (recovery-point-offset-checkpoint, replication-offset-checkpoint,
log-start-offset-checkpoint) are version 0 with entries `topic partition offset`; the leader-epoch-checkpoint is
version 0 with entries `epoch startOffset`. Writes go to `<file>.tmp`, are fsynced, then renamed over the file.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from broker_runtime.log.fs import FileSystem, read_whole, write_atomically

CHECKPOINT_VERSION = 0


class CorruptCheckpointError(Exception):
    """A checkpoint file does not parse; the message names the file and the problem."""


def write_lines(fs: FileSystem, path: Path, entries: Iterable[str], *, sync: bool = True) -> None:
    entries = list(entries)
    text = f"{CHECKPOINT_VERSION}\n{len(entries)}\n" + "".join(f"{e}\n" for e in entries)
    write_atomically(fs, path, text.encode(), sync=sync)


def read_lines(fs: FileSystem, path: Path, fields_per_entry: int) -> list[list[str]]:
    """Entries split on whitespace; [] if the file does not exist."""
    if not fs.exists(path):
        return []
    try:
        lines = read_whole(fs, path).decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise CorruptCheckpointError(f"{path}: not UTF-8 text") from None
    if len(lines) < 2:
        raise CorruptCheckpointError(f"{path}: missing version or count line")
    if lines[0].strip() != str(CHECKPOINT_VERSION):
        raise CorruptCheckpointError(f"{path}: unsupported version {lines[0].strip()!r}")
    try:
        count = int(lines[1])
    except ValueError:
        raise CorruptCheckpointError(f"{path}: bad count line {lines[1]!r}") from None
    entries = [line.split() for line in lines[2:] if line.strip()]
    if len(entries) != count:
        raise CorruptCheckpointError(f"{path}: expected {count} entries, found {len(entries)}")
    for entry in entries:
        if len(entry) != fields_per_entry:
            raise CorruptCheckpointError(f"{path}: malformed entry {' '.join(entry)!r}")
    return entries


def write_offsets(fs: FileSystem, path: Path, offsets: Mapping[tuple[str, int], int]) -> None:
    write_lines(
        fs, path, (f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(offsets.items()))
    )


def read_offsets(fs: FileSystem, path: Path) -> dict[tuple[str, int], int]:
    result = {}
    for topic, partition, offset in read_lines(fs, path, 3):
        try:
            result[(topic, int(partition))] = int(offset)
        except ValueError:
            raise CorruptCheckpointError(f"{path}: malformed entry {topic} {partition} {offset}") from None
    return result


def write_epochs(
    fs: FileSystem, path: Path, entries: Iterable[tuple[int, int]], *, sync: bool = True
) -> None:
    write_lines(fs, path, (f"{epoch} {start_offset}" for epoch, start_offset in entries), sync=sync)


def read_epochs(fs: FileSystem, path: Path) -> list[tuple[int, int]]:
    try:
        return [(int(epoch), int(start)) for epoch, start in read_lines(fs, path, 2)]
    except ValueError:
        raise CorruptCheckpointError(f"{path}: non-integer epoch entry") from None
