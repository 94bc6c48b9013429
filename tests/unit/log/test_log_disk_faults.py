"""A full disk or a failed fsync: the log dir goes offline (Kafka's rule), nothing torn stays in a segment, and a
restart recovers every acknowledged record. On the fault-injecting filesystem, which can write part of a buffer
and then fail."""

from __future__ import annotations

import errno
import logging
import uuid
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode
from log_helpers import LOG_DIR, append, offsets_in

from broker_runtime.errors import KafkaError
from broker_runtime.log.config import LogConfig
from broker_runtime.log.log_manager import CLEAN_SHUTDOWN_FILE, LogDirError, LogManager

TOPIC_ID = uuid.UUID("12345678-1234-5678-1234-567812345678")
SECOND_DIR = Path("/data/logs2")
SEGMENT = LOG_DIR / "orders-0" / "00000000000000000000.log"


def _manager(fs, clock, dirs=(LOG_DIR,)) -> LogManager:
    manager = LogManager(list(dirs), clock, fs)
    failures: list[tuple[Path, list]] = []
    manager.on_dir_failure = lambda log_dir, keys: failures.append((log_dir, keys))
    manager.failures = failures  # type: ignore[attr-defined]
    manager.startup(broker_id=1, cluster_id="c1")
    return manager


def _all_offsets(log) -> list[int]:
    return [b for b, _ in offsets_in(log.read(log.log_start_offset, 1 << 30, 2**62, True))]


def _storage_error(call) -> KafkaError:
    with pytest.raises(KafkaError) as caught:
        call()
    assert caught.value.error_code == ErrorCode.kafka_storage_error
    return caught.value


def test_disk_full_mid_write_cuts_the_torn_bytes_and_takes_the_dir_offline(fs, clock):
    manager = _manager(fs, clock)
    log = manager.create_log("orders", 0, LogConfig(), TOPIC_ID)
    acknowledged = [append(log, 3).base_offset for _ in range(4)]
    size = len(fs.files[SEGMENT].data)
    fs.fail_next("append", after_bytes=37)  # the disk fills up inside the next batch

    _storage_error(lambda: append(log, 3))

    assert len(fs.files[SEGMENT].data) == size  # the 37 torn bytes are gone
    assert manager.failures == [(LOG_DIR, [("orders", 0)])]
    assert manager.get_log("orders", 0) is None and manager.is_offline("orders", 0)
    # Space comes back, but nothing is appended after the failure: no acknowledgement the log cannot keep.
    _storage_error(lambda: append(log, 1))
    _storage_error(lambda: log.read(0, 1 << 20, 2**62, True))

    manager.shutdown({})
    assert not fs.exists(LOG_DIR / CLEAN_SHUTDOWN_FILE)  # a failed dir is recovered at the next start
    again = _manager(fs, clock)
    reopened = again.get_log("orders", 0)
    assert _all_offsets(reopened) == acknowledged
    assert append(reopened, 1).base_offset == 12


def test_torn_bytes_that_cannot_be_cut_are_recovered_at_the_next_start(fs, clock, caplog):
    manager = _manager(fs, clock)
    log = manager.create_log("orders", 0, LogConfig(), TOPIC_ID)
    append(log, 3)
    fs.fail_next("append", after_bytes=40)
    fs.fail_next("truncate", OSError(errno.EIO, "I/O error"))
    _storage_error(lambda: append(log, 3))
    assert len(fs.files[SEGMENT].data) > log.segments[0].size  # torn bytes stayed on disk

    manager.shutdown({})
    with caplog.at_level(logging.WARNING):
        again = _manager(fs, clock)
    assert _all_offsets(again.get_log("orders", 0)) == [0]
    assert "cut 40 bytes from byte" in caplog.text


def test_failed_fsync_takes_the_dir_offline_and_the_restart_recovers(fs, clock):
    manager = _manager(fs, clock)
    log = manager.create_log("orders", 0, LogConfig(flush_ms=0), TOPIC_ID)
    append(log, 2)
    manager.run_flush(clock.time_ms())
    assert log.recovery_point == 2
    append(log, 2)
    fs.fail_next("fsync", OSError(errno.EIO, "I/O error"))
    manager.run_flush(clock.time_ms())
    assert manager.failures and manager.failures[0][0] == LOG_DIR
    assert log.recovery_point == 2  # never moved past what is known durable
    _storage_error(lambda: append(log, 1))
    manager.shutdown({})
    assert not fs.exists(LOG_DIR / CLEAN_SHUTDOWN_FILE)
    fs.crash()  # the page cache is not to be trusted after a failed fsync
    assert _manager(fs, clock).get_log("orders", 0).log_end_offset == 2


def test_failed_flush_messages_fsync_fails_the_append(fs, clock):
    manager = _manager(fs, clock)
    log = manager.create_log("orders", 0, LogConfig(flush_messages=1), TOPIC_ID)
    append(log, 1)
    fs.fail_next("fsync")
    _storage_error(lambda: append(log, 1))
    assert manager.is_offline("orders", 0)


def test_other_log_dirs_keep_serving_and_the_last_one_failing_is_reported(fs, clock):
    manager = _manager(fs, clock, (LOG_DIR, SECOND_DIR))
    first = manager.create_log("orders", 0, LogConfig(), TOPIC_ID)
    second = manager.create_log("orders", 1, LogConfig(), TOPIC_ID)
    assert {first.dir.parent, second.dir.parent} == {LOG_DIR, SECOND_DIR}
    fs.fail_next("append")
    _storage_error(lambda: append(first, 1))
    assert manager.live_dirs == [second.dir.parent]
    assert append(second, 2).base_offset == 0
    assert manager.create_log("orders", 2, LogConfig(), TOPIC_ID).dir.parent == second.dir.parent
    manager.checkpoint({})  # only the live dir is written
    manager.shutdown({})
    assert fs.exists(second.dir.parent / CLEAN_SHUTDOWN_FILE)
    assert not fs.exists(first.dir.parent / CLEAN_SHUTDOWN_FILE)


def test_a_failing_checkpoint_takes_its_dir_offline(fs, clock):
    manager = _manager(fs, clock, (LOG_DIR, SECOND_DIR))
    manager.create_log("orders", 0, LogConfig(), TOPIC_ID)
    fs.fail_next("pwrite")
    assert manager.checkpoint_job({})() == {LOG_DIR}
    assert manager.live_dirs == [SECOND_DIR]


def test_existing_partitions_are_not_recreated_elsewhere_while_a_dir_is_offline(fs, clock):
    manager = _manager(fs, clock, (LOG_DIR, SECOND_DIR))
    log = manager.create_log("orders", 0, LogConfig(), TOPIC_ID)
    manager.shutdown({})
    fs.fail_next("open")  # the first dir cannot even be opened at the next start
    again = _manager(fs, clock, (LOG_DIR, SECOND_DIR))
    assert again.offline_dirs == {log.dir.parent}
    with pytest.raises(KafkaError) as caught:
        again.create_log("orders", 0, LogConfig(), TOPIC_ID, is_new=False)
    assert caught.value.error_code == ErrorCode.kafka_storage_error
    assert again.is_offline("orders", 0)


def test_startup_refuses_when_no_log_dir_is_usable(fs, clock):
    fs.fail_next("open")
    with pytest.raises(LogDirError, match="no usable log dir"):
        _manager(fs, clock)


def test_a_wrong_last_index_entry_is_not_trusted_after_a_clean_shutdown(fs, clock):
    """A last offset-index entry pointing into the middle of a batch used to end the log there: every later
    record vanished on a clean restart and new appends reused their offsets."""
    config = LogConfig(index_interval_bytes=200)
    manager = _manager(fs, clock)
    log = manager.create_log("orders", 0, config, TOPIC_ID)
    for _ in range(60):
        append(log, 16, value_size=20)
    manager.shutdown({})
    index = fs.files[LOG_DIR / "orders-0" / "00000000000000000000.index"].data
    assert len(index) >= 16
    index[-4:] = (int.from_bytes(index[-4:], "big") + 30).to_bytes(4, "big")  # lands inside the batch
    again = _manager(fs, clock)
    reopened = again.get_log("orders", 0)
    assert reopened.log_end_offset == 960
    assert _all_offsets(reopened) == list(range(0, 960, 16))
    assert append(reopened, 1).base_offset == 960
