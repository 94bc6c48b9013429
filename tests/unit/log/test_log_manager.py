"""LogManager: log dirs, checkpoints, clean shutdown, retention, deletion, flush."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from log_helpers import LOG_DIR, append

from broker_runtime.log.config import LogConfig
from broker_runtime.log.fs import read_whole
from broker_runtime.log.log_manager import LogDirError, LogManager, topic_id_from_str, topic_id_to_str

TOPIC_ID = uuid.UUID("12345678-1234-5678-1234-567812345678")


def _manager(fs, clock, dirs=(LOG_DIR,), **kwargs) -> LogManager:
    manager = LogManager([Path(d) for d in dirs], clock, fs, **kwargs)
    manager.startup(broker_id=1, cluster_id="c1")
    return manager


def _text(fs, path) -> str:
    return read_whole(fs, path).decode()


def test_startup_writes_meta_properties_and_refuses_another_broker_id(fs, clock):
    manager = _manager(fs, clock)
    props = _text(fs, LOG_DIR / "meta.properties")
    assert "broker.id=1\n" in props and "cluster.id=c1\n" in props and "version=0\n" in props
    manager.shutdown({})
    other = LogManager([LOG_DIR], clock, fs)
    with pytest.raises(LogDirError, match=r"broker\.id"):
        other.startup(broker_id=2, cluster_id="c1")


def test_second_manager_on_same_dir_is_refused(fs, clock):
    _manager(fs, clock)
    with pytest.raises(LogDirError, match="locked"):
        _manager(fs, clock)


def test_create_log_writes_partition_metadata_with_kafka_topic_id(fs, clock):
    manager = _manager(fs, clock)
    manager.create_log("orders", 0, LogConfig(), TOPIC_ID)
    text = _text(fs, LOG_DIR / "orders-0" / "partition.metadata")
    assert text == f"version: 0\ntopic_id: {topic_id_to_str(TOPIC_ID)}\n"
    assert topic_id_from_str(topic_id_to_str(TOPIC_ID)) == TOPIC_ID
    assert len(topic_id_to_str(TOPIC_ID)) == 22


def test_clean_shutdown_writes_checkpoints_and_marker(fs, clock):
    manager = _manager(fs, clock)
    log = manager.create_log("orders", 0, LogConfig(), TOPIC_ID)
    append(log, 3)
    append(log, 2)
    log.delete_records_before(2)
    manager.shutdown({("orders", 0): 4})
    assert fs.exists(LOG_DIR / ".kafka_cleanshutdown")
    assert _text(fs, LOG_DIR / "recovery-point-offset-checkpoint") == "0\n1\norders 0 5\n"
    assert _text(fs, LOG_DIR / "log-start-offset-checkpoint") == "0\n1\norders 0 2\n"
    assert _text(fs, LOG_DIR / "replication-offset-checkpoint") == "0\n1\norders 0 4\n"
    assert fs.exists(LOG_DIR / "orders-0" / "00000000000000000005.snapshot")

    again = _manager(fs, clock)
    assert LOG_DIR in again.clean_shutdown_dirs
    assert not fs.exists(LOG_DIR / ".kafka_cleanshutdown")
    reopened = again.get_log("orders", 0)
    assert (reopened.log_start_offset, reopened.log_end_offset, reopened.recovery_point) == (2, 5, 5)
    assert again.topic_ids[("orders", 0)] == TOPIC_ID
    assert again.initial_high_watermarks() == {("orders", 0): 4}


def test_unclean_shutdown_recovers_from_recovery_point(fs, clock):
    manager = _manager(fs, clock)
    log = manager.create_log("orders", 0, LogConfig(), TOPIC_ID)
    append(log, 3)
    log.flush()
    manager.checkpoint({})
    append(log, 3)
    fs.crash()
    again = _manager(fs, clock)
    assert LOG_DIR not in again.clean_shutdown_dirs
    assert again.get_log("orders", 0).log_end_offset == 3


def test_delete_records_checkpoints_log_starts_once_per_dir_and_survives_a_crash(fs, clock):
    manager = _manager(fs, clock)
    logs = [manager.create_log("orders", p, LogConfig(), TOPIC_ID) for p in range(50)]
    for log in logs:
        append(log, 5)
        log.flush()
    syncs = fs.fsync_count
    for log in logs:
        log.delete_records_before(3)
    assert fs.fsync_count == syncs  # nothing written per partition
    assert manager.log_start_checkpoint_job([("orders", p) for p in range(50)])() == set()
    assert fs.fsync_count - syncs == 1  # one checkpoint file for the whole request
    fs.crash()
    again = _manager(fs, clock)
    assert {again.get_log("orders", p).log_start_offset for p in range(50)} == {3}


def test_retention_by_time_deletes_old_segments_and_rolls_active(fs, clock):
    manager = _manager(fs, clock)
    config = LogConfig(segment_bytes=300, retention_ms=60_000)
    log = manager.create_log("orders", 0, config, TOPIC_ID)
    now = clock.time_ms()
    for _ in range(4):
        append(log, 1, value_size=100, timestamp_ms=now)
    old_segments = len(log.segments)
    assert old_segments >= 2
    assert manager.run_retention(now + 60_000) == 0
    clock.advance(60_001)
    append(log, 1, value_size=100, timestamp_ms=clock.time_ms())  # rolls: the old active segment is full
    deleted = manager.run_retention(clock.time_ms())
    assert deleted == old_segments
    assert log.log_start_offset == 4
    assert _text(fs, LOG_DIR / "log-start-offset-checkpoint") == "0\n1\norders 0 4\n"
    clock.advance(60_001)
    assert manager.run_retention(clock.time_ms()) == 1  # the active segment itself: rolled, then deleted
    assert (log.log_start_offset, log.log_end_offset, len(log.segments)) == (5, 5, 1)
    assert log.segments[0].size == 0
    assert append(log, 1).base_offset == 5


def test_retention_by_bytes_keeps_at_most_retention_bytes(fs, clock):
    manager = _manager(fs, clock)
    config = LogConfig(segment_bytes=300, retention_bytes=700, retention_ms=-1)
    log = manager.create_log("orders", 0, config, TOPIC_ID)
    for _ in range(12):
        append(log, 1, value_size=100)
    before = log.size_bytes()
    manager.run_retention(clock.time_ms())
    # Kafka deletes a segment only if the log stays at or above retention.bytes without it.
    assert 700 <= log.size_bytes() < before
    assert log.size_bytes() - log.segments[0].size < 700


def test_retention_stops_at_high_watermark(fs, clock):
    manager = _manager(fs, clock)
    log = manager.create_log("orders", 0, LogConfig(segment_bytes=300, retention_ms=0), TOPIC_ID)
    for _ in range(6):
        append(log, 1, value_size=100)
    clock.advance(10)
    second_base = log.segments[1].base_offset
    deleted = manager.run_retention(clock.time_ms(), {("orders", 0): second_base})
    assert deleted == 1
    assert log.log_start_offset == second_base


def test_segments_below_log_start_are_deleted_for_compacted_topics_too(fs, clock):
    manager = _manager(fs, clock)
    log = manager.create_log("orders", 0, LogConfig(segment_bytes=300, cleanup_policy="compact"), TOPIC_ID)
    for _ in range(6):
        append(log, 1, value_size=100)
    log.delete_records_before(log.segments[2].base_offset)
    assert manager.run_retention(clock.time_ms()) == 2


def test_delete_log_renames_then_removes_after_delay(fs, clock):
    manager = _manager(fs, clock)
    log = manager.create_log("orders", 0, LogConfig(file_delete_delay_ms=1000), TOPIC_ID)
    append(log, 1)
    manager.delete_log("orders", 0)
    names = fs.listdir(LOG_DIR)
    assert "orders-0" not in names
    doomed = [n for n in names if n.startswith("orders-0.") and n.endswith("-delete")]
    assert len(doomed) == 1 and len(doomed[0]) == len("orders-0.") + 32 + len("-delete")
    assert manager.get_log("orders", 0) is None
    assert _text(fs, LOG_DIR / "recovery-point-offset-checkpoint") == "0\n0\n"
    manager.run_retention(clock.time_ms() + 999)
    assert doomed[0] in fs.listdir(LOG_DIR)
    manager.run_retention(clock.time_ms() + 1000)
    assert doomed[0] not in fs.listdir(LOG_DIR)


def test_leftover_delete_dirs_are_removed_at_startup(fs, clock):
    manager = _manager(fs, clock)
    manager.create_log("orders", 0, LogConfig(), TOPIC_ID)
    manager.delete_log("orders", 0)
    fs.crash()
    again = _manager(fs, clock)  # the start-up path only finds them; removal runs with the periodic work
    again.run_retention(clock.time_ms())
    assert [n for n in fs.listdir(LOG_DIR) if n.endswith("-delete")] == []


def test_new_logs_go_to_the_emptiest_dir(fs, clock):
    dirs = (Path("/d1"), Path("/d2"))
    manager = _manager(fs, clock, dirs)
    for p in range(4):
        manager.create_log("orders", p, LogConfig(), TOPIC_ID)
    sizes = manager.dir_sizes()
    assert sorted(len(v) for v in sizes.values()) == [2, 2]


def test_flush_ms_fsyncs_and_advances_recovery_point(fs, clock):
    manager = _manager(fs, clock)
    log = manager.create_log("orders", 0, LogConfig(flush_ms=1000), TOPIC_ID)
    append(log, 2)
    syncs = fs.fsync_count
    manager.run_flush(clock.time_ms() + 500)
    assert (log.recovery_point, fs.fsync_count) == (0, syncs)
    manager.run_flush(clock.time_ms() + 1000)
    assert log.recovery_point == 2 and fs.fsync_count > syncs


def test_flush_messages_fsyncs_on_append(fs, clock):
    manager = _manager(fs, clock)
    log = manager.create_log("orders", 0, LogConfig(flush_messages=3), TOPIC_ID)
    append(log, 2)
    assert log.recovery_point == 0
    append(log, 1)
    assert log.recovery_point == 3


def test_appends_do_not_fsync_by_default(fs, clock):
    manager = _manager(fs, clock)
    log = manager.create_log("orders", 0, LogConfig(segment_bytes=300), TOPIC_ID)
    append(log, 1)  # the first batch of a leader epoch writes leader-epoch-checkpoint (fsynced, as Kafka)
    syncs = fs.fsync_count
    for _ in range(10):
        append(log, 1, value_size=100)
    assert fs.fsync_count == syncs


def test_rolled_segments_are_flushed_by_run_flush(fs, clock):
    manager = _manager(fs, clock)
    log = manager.create_log("orders", 0, LogConfig(segment_bytes=300), TOPIC_ID)
    for _ in range(6):
        append(log, 1, value_size=100)
    manager.run_flush(clock.time_ms())
    assert log.recovery_point == log.segments[-1].base_offset > 0


def test_deleting_many_partitions_rewrites_each_checkpoint_once(fs, clock):
    """Deleting two 5,000-partition topics rewrote and fsynced the checkpoints once per partition (minutes)."""
    manager = _manager(fs, clock)
    for p in range(200):
        append(manager.create_log("orders", p, LogConfig(), TOPIC_ID), 1)
    syncs = fs.fsync_count
    writes = []
    real_rename = fs.rename
    fs.rename = lambda src, dst: (writes.append(Path(dst).name), real_rename(src, dst))[1]
    job = manager.delete_logs([("orders", p) for p in range(200)])
    assert [manager.get_log("orders", p) for p in range(200)] == [None] * 200  # forgotten at once
    assert fs.fsync_count == syncs and writes == []  # the disk work is all in `run`
    job()
    checkpoints = [w for w in writes if not w.endswith("-delete")]
    assert sorted(checkpoints) == [
        "log-start-offset-checkpoint", "recovery-point-offset-checkpoint", "replication-offset-checkpoint",
    ]  # fmt: skip
    assert len(writes) - len(checkpoints) == 200
    assert fs.fsync_count - syncs == 3  # the three checkpoint files


def test_flushed_records_of_rolled_segments_survive_a_power_cut(fs, clock):
    """A flush also makes new segment files' names durable (fsync of the partition dir), as Kafka does."""
    manager = _manager(fs, clock)
    log = manager.create_log("orders", 0, LogConfig(segment_bytes=300), TOPIC_ID)
    for _ in range(10):
        append(log, 1, value_size=100)
    assert len(log.segments) >= 4
    log.flush()
    manager.checkpoint({})
    fs.crash(drop_unsynced_dir_entries=True)
    again = _manager(fs, clock)
    assert again.get_log("orders", 0).log_end_offset == 10
