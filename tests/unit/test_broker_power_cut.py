"""A whole standalone broker on the fault-injecting filesystem: a power cut that drops every unsynced write and
every directory entry no fsync covered, right after a topic is created and its records flushed, loses neither the
topic nor the records, and sets nothing aside as stray."""

from __future__ import annotations

import asyncio
from pathlib import Path

from broker_runtime.broker import Broker
from broker_runtime.clock import ManualClock
from broker_runtime.config import BrokerConfig
from broker_runtime.log.fs import FaultInjectingFileSystem
from broker_runtime.log.log_manager import STRAY_DIR_SUFFIX
from broker_runtime.protocol.records import build_batch, iter_headers, read_header

LOG_DIR = Path("/data/logs")


def _config() -> BrokerConfig:
    return BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:0", "log.dirs": str(LOG_DIR), "broker.id": "0"})


async def _started(fs: FaultInjectingFileSystem, clock: ManualClock) -> Broker:
    broker = Broker(_config(), clock, fs)
    await broker.start()
    return broker


def test_a_power_cut_right_after_a_topic_creation_loses_nothing() -> None:
    fs = FaultInjectingFileSystem()
    fs.mkdir(LOG_DIR)
    clock = ManualClock(start_ms=1_700_000_000_000)

    async def before_the_cut() -> None:
        broker = await _started(fs, clock)
        topic = await broker.create_topic("orders", 3, 1)
        log = broker.log_manager.get_log("orders", 1)
        batch = build_batch([(b"k", b"v")] * 5, timestamp_ms=clock.time_ms())
        log.append_as_leader(batch, read_header(batch), 0, clock.time_ms())
        log.flush()
        await broker.stop(clean=False)  # no flush, checkpoint or clean-shutdown marker
        fs.crash(drop_unsynced_dir_entries=True)  # the power goes: nothing unsynced survives
        return topic

    async def after_the_cut(topic_id) -> None:
        broker = await _started(fs, clock)
        topic = broker.metadata.topics()["orders"]
        assert topic.topic_id == topic_id and sorted(topic.partitions) == [0, 1, 2]
        for partition in range(3):
            assert broker.log_manager.get_log("orders", partition) is not None
        log = broker.log_manager.get_log("orders", 1)
        data = log.read(0, 1 << 20, 2**62, True)
        assert [(h.base_offset, h.last_offset) for h in iter_headers(data)] == [(0, 4)]
        assert not [p for p in fs.files if STRAY_DIR_SUFFIX in str(p)]
        await broker.stop()

    topic = asyncio.run(before_the_cut())
    asyncio.run(after_the_cut(topic.topic_id))
