"""The same log on the real filesystem: files where Kafka puts them, readable after reopening."""

from __future__ import annotations

import uuid

from log_helpers import append, offsets_in

from broker_runtime.clock import ManualClock
from broker_runtime.log.config import LogConfig
from broker_runtime.log.log_manager import LogManager


def test_log_manager_round_trip_on_disk(tmp_path):
    clock = ManualClock()
    manager = LogManager([tmp_path], clock)
    manager.startup(broker_id=0, cluster_id="abc")
    log = manager.create_log(
        "events", 3, LogConfig(segment_bytes=1000, index_interval_bytes=100), uuid.uuid4()
    )
    for _ in range(30):
        append(log, 2, value_size=60)
    expected = log.read(0, 1 << 20, 1000, False)
    manager.shutdown({("events", 3): 60})

    part = tmp_path / "events-3"
    names = sorted(p.name for p in part.iterdir())
    assert "00000000000000000000.log" in names and "leader-epoch-checkpoint" in names
    assert "partition.metadata" in names and (tmp_path / ".kafka_cleanshutdown").exists()
    # Trimmed on close: index files hold exactly their entries.
    assert (part / "00000000000000000000.index").stat().st_size % 8 == 0
    assert (part / "00000000000000000000.index").stat().st_size < 10485760

    again = LogManager([tmp_path], clock)
    again.startup(broker_id=0, cluster_id="abc")
    reopened = again.get_log("events", 3)
    assert reopened.log_end_offset == 60
    assert reopened.read(0, 1 << 20, 1000, False) == expected
    assert offsets_in(reopened.read(33, 1 << 20, 1000, False))[0] == (32, 33)
    again.shutdown({})


def test_unclean_reopen_on_disk_with_torn_tail(tmp_path):
    clock = ManualClock()
    manager = LogManager([tmp_path], clock)
    manager.startup(broker_id=0, cluster_id="abc")
    log = manager.create_log("events", 0, LogConfig(), uuid.uuid4())
    for _ in range(5):
        append(log, 1)
    segment = tmp_path / "events-0" / "00000000000000000000.log"
    with open(segment, "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x05\x00\x00\x01\x00partial")
    # Simulated kill -9: no shutdown, lock released by "process death".
    for handle in manager._locks.values():
        manager.fs.unlock(handle)
    again = LogManager([tmp_path], clock)
    again.startup(broker_id=0, cluster_id="abc")
    assert again.get_log("events", 0).log_end_offset == 5
    assert append(again.get_log("events", 0), 1).base_offset == 5
