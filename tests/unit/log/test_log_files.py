"""Byte layouts and small parts: indexes, checkpoints, leader epoch cache, LogConfig, the fault-injecting fs."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from log_helpers import LOG_DIR

from broker_runtime.log import checkpoint
from broker_runtime.log.config import LogConfig
from broker_runtime.log.fs import FaultInjectingFileSystem, read_whole
from broker_runtime.log.index import CorruptIndexError, OffsetIndex, TimeIndex
from broker_runtime.log.leader_epoch import LeaderEpochCache

INDEX = LOG_DIR / "00000000000000000100.index"
TIME_INDEX = LOG_DIR / "00000000000000000100.timeindex"


def test_offset_index_golden_bytes_and_lookup(fs):
    index = OffsetIndex(fs, INDEX, 100, 1024)
    index.append(103, 4096)
    index.append(110, 8200)
    index.write_trimmed()
    assert bytes(fs.files[INDEX].data) == (
        b"\x00\x00\x00\x03" b"\x00\x00\x10\x00"  # relative offset 3, position 4096
        b"\x00\x00\x00\x0a" b"\x00\x00\x20\x08"  # relative offset 10, position 8200
    )  # fmt: skip
    assert index.lookup(99) == (100, 0)
    assert index.lookup(102) == (100, 0)
    assert index.lookup(103) == (103, 4096)
    assert index.lookup(109) == (103, 4096)
    assert index.lookup(5000) == (110, 8200)


def test_time_index_golden_bytes_and_lookup(fs):
    index = TimeIndex(fs, TIME_INDEX, 100, 1200)
    index.maybe_append(1_000, 103)
    index.maybe_append(1_000, 104)  # not larger: ignored
    index.maybe_append(2_000, 110)
    index.write_trimmed()
    assert bytes(fs.files[TIME_INDEX].data) == struct.pack(">qi", 1_000, 3) + struct.pack(">qi", 2_000, 10)
    assert index.lookup(999) == (-1, 100)
    assert index.lookup(1_500) == (1_000, 103)
    assert index.lookup(2_000) == (2_000, 110)


def test_index_truncation_zeroes_stale_entries_on_flush(fs):
    index = OffsetIndex(fs, INDEX, 100, 1024)
    index.preallocate()
    for n in range(1, 6):
        index.append(100 + n, 100 * n)
    index.flush()
    index.truncate_to(103)
    assert len(index) == 2
    index.flush()
    reloaded = OffsetIndex.load(fs, INDEX, 100, 1024)
    assert len(reloaded) == 2 and reloaded.lookup(200) == (102, 200)


def test_index_full_at_segment_index_bytes(fs):
    index = OffsetIndex(fs, INDEX, 100, 24)
    for n in range(1, 4):
        index.append(100 + n, n)
    assert index.is_full


def test_index_size_not_multiple_of_entry_is_corrupt(fs):
    handle = fs.open(INDEX)
    fs.pwrite(handle, b"\x00\x00\x00\x01\x00\x00\x00\x10\x00\x00", 0)
    with pytest.raises(CorruptIndexError):
        OffsetIndex.load(fs, INDEX, 100, 1024)


def test_index_decreasing_entries_are_corrupt(fs):
    index = OffsetIndex(fs, INDEX, 100, 1024)
    index._buf += struct.pack(">ii", 5, 500) + struct.pack(">ii", 3, 600)
    with pytest.raises(CorruptIndexError):
        index.sanity_check(10_000)


def test_offset_checkpoint_format(fs):
    path = LOG_DIR / "recovery-point-offset-checkpoint"
    checkpoint.write_offsets(fs, path, {("b", 1): 7, ("a", 0): 42})
    assert read_whole(fs, path) == b"0\n2\na 0 42\nb 1 7\n"
    assert checkpoint.read_offsets(fs, path) == {("a", 0): 42, ("b", 1): 7}
    assert checkpoint.read_offsets(fs, LOG_DIR / "missing") == {}


@pytest.mark.parametrize(
    "text",
    [b"1\n0\n", b"0\n2\na 0 1\n", b"0\n1\na 0\n", b"0\n1\na x 1\n", b"0\n", b"\xff\xfe"],
    ids=["bad-version", "short-count", "missing-field", "non-integer", "no-count", "not-utf8"],
)
def test_corrupt_offset_checkpoint_is_reported(fs, text):
    path = LOG_DIR / "replication-offset-checkpoint"
    handle = fs.open(path)
    fs.pwrite(handle, text, 0)
    with pytest.raises(checkpoint.CorruptCheckpointError, match="replication-offset-checkpoint"):
        checkpoint.read_offsets(fs, path)


def test_leader_epoch_assign_drops_non_monotonic_entries(fs):
    cache = LeaderEpochCache(fs, LOG_DIR / "leader-epoch-checkpoint")
    cache.assign(1, 0)
    cache.assign(1, 5)  # same epoch, later offset: no change
    cache.assign(3, 10)
    cache.assign(5, 20)
    assert cache.entries == [(1, 0), (3, 10), (5, 20)]
    cache.assign(4, 15)  # a new leader with a lower epoch than the cached 5 overrides it
    assert cache.entries == [(1, 0), (3, 10), (4, 15)]
    cache.assign(6, 12)  # start offset before 15: entries at or after it go
    assert cache.entries == [(1, 0), (3, 10), (6, 12)]


def test_leader_epoch_truncation(fs):
    cache = LeaderEpochCache(fs, LOG_DIR / "leader-epoch-checkpoint")
    for epoch, start in [(1, 0), (3, 10), (5, 20)]:
        cache.assign(epoch, start)
    cache.truncate_from_start(15)
    assert cache.entries == [(3, 15), (5, 20)]
    cache.truncate_from_end(20)
    assert cache.entries == [(3, 15)]
    reloaded = LeaderEpochCache.load(fs, LOG_DIR)
    assert reloaded.entries == [(3, 15)]


def test_log_config_from_topic_config():
    config = LogConfig.from_topic_config(
        {"retention.ms": "-1", "segment.bytes": "1000", "cleanup.policy": "compact", "unrelated": "x"}
    )
    assert (config.retention_ms, config.segment_bytes, config.cleanup_policy) == (-1, 1000, "compact")
    assert not config.deletes
    assert LogConfig().deletes and LogConfig(cleanup_policy="compact,delete").deletes
    with pytest.raises(ValueError, match=r"segment\.ms"):
        LogConfig.from_topic_config({"segment.ms": "soon"})


def test_fault_injecting_fs_drops_unsynced_writes():
    fs = FaultInjectingFileSystem()
    fs.mkdir(Path("/d"))
    synced, unsynced = Path("/d/a"), Path("/d/b")
    h = fs.open(synced)
    fs.append(h, b"kept")
    fs.fsync(h)
    fs.append(h, b"-lost")
    g = fs.open(unsynced)
    fs.append(g, b"never synced")
    fs.crash()
    assert read_whole(fs, synced) == b"kept"
    assert read_whole(fs, unsynced) == b""
    fs.crash(drop_unsynced_files=True)
    assert not fs.exists(unsynced)


def test_fault_injecting_fs_torn_write_and_injected_errors():
    fs = FaultInjectingFileSystem()
    fs.mkdir(Path("/d"))
    h = fs.open(Path("/d/a"))
    fs.append(h, b"abc")
    fs.fsync(h)
    fs.append(h, b"defgh")
    fs.crash(keep_unsynced_bytes=2)
    assert read_whole(fs, Path("/d/a")) == b"abcde"
    h = fs.open(Path("/d/a"))
    fs.fail_next("fsync")
    with pytest.raises(OSError):
        fs.fsync(h)
    fs.fsync(h)  # only the next call fails


def test_fault_injecting_fs_writes_part_of_a_buffer_then_fails():
    fs = FaultInjectingFileSystem()
    fs.mkdir(Path("/d"))
    h = fs.open(Path("/d/a"))
    fs.append(h, b"abc")
    fs.fail_next("append", after_bytes=2)
    with pytest.raises(OSError, match="No space left"):
        fs.append(h, b"defgh")
    assert read_whole(fs, Path("/d/a")) == b"abcde"  # the disk took two bytes before it was full
    fs.append(h, b"!")  # only that call fails
    fs.fail_next("pwrite", after_bytes=1)
    with pytest.raises(OSError):
        fs.pwrite(h, b"XY", 0)
    assert read_whole(fs, Path("/d/a")) == b"Xbcde!"


def test_fault_injecting_fs_loses_renames_no_directory_fsync_covered():
    fs = FaultInjectingFileSystem()
    fs.mkdir(Path("/d"))
    for name in ("kept", "renamed-late"):
        h = fs.open(Path(f"/d/{name}.tmp"))
        fs.append(h, name.encode())
        fs.fsync(h)
        fs.close(h)
    h = fs.open(Path("/d/never-synced"))
    fs.fsync_dir(Path("/d"))
    fs.rename(Path("/d/kept.tmp"), Path("/d/kept"))
    fs.fsync_dir(Path("/d"))
    fs.rename(Path("/d/renamed-late.tmp"), Path("/d/renamed-late"))
    fs.unlink(Path("/d/never-synced"))
    fs.open(Path("/d/created-late"))
    fs.crash(drop_unsynced_dir_entries=True)
    # The last rename, unlink and creation never happened.
    assert fs.listdir(Path("/d")) == ["kept", "never-synced", "renamed-late.tmp"]
    assert read_whole(fs, Path("/d/kept")) == b"kept"
    assert read_whole(fs, Path("/d/renamed-late.tmp")) == b"renamed-late"
