"""Long polls and timeouts driven by a ManualClock: no test here sleeps; time moves when the test says so.

- The clock seam itself: sleeps and waits complete exactly when advanced past their deadline, in order.
- A Fetch long poll on a real in-process broker: parked until max wait elapses on the manual clock, or woken by
  an append without any time passing.
- An acks=-1 append to a partition whose follower never catches up: REQUEST_TIMED_OUT exactly at the timeout,
  or success as soon as the high watermark covers it.
"""

from __future__ import annotations

import asyncio
import datetime
import uuid

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12.request import FetchPartition, FetchRequest, FetchTopic
from kio.static.primitive import i8, i32, i32Timedelta, i64

from broker_runtime.broker import Broker
from broker_runtime.clock import ManualClock
from broker_runtime.config import BrokerConfig
from broker_runtime.errors import KafkaError
from broker_runtime.handlers.context import RequestContext
from broker_runtime.handlers.fetch import handle_fetch
from broker_runtime.log.config import LogConfig
from broker_runtime.log.fs import RealFileSystem
from broker_runtime.log.partition_log import PartitionLog
from broker_runtime.protocol.framing import RequestHeader
from broker_runtime.protocol.records import build_batch, read_header
from broker_runtime.replication.partition import Partition
from broker_runtime.replication.replica_manager import ReplicaManager


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


async def parked(clock: ManualClock, timers: int = 1) -> None:
    """Let the loop run until `timers` waits are registered on the clock (the task under test has parked)."""
    for _ in range(1000):
        if clock.pending_timers() >= timers:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{clock.pending_timers()} timers pending, expected {timers}")


async def settle() -> None:
    """Let callbacks that a clock advance scheduled run."""
    for _ in range(5):
        await asyncio.sleep(0)


# --------------------------------------------------------------------------------------------------------------
# the seam


def test_sleeps_end_in_deadline_order_when_the_clock_passes_them() -> None:
    async def scenario():
        clock = ManualClock()
        woke: list[int] = []

        async def sleeper(ms: int) -> None:
            await clock.sleep_ms(ms)
            woke.append(ms)

        tasks = [asyncio.ensure_future(sleeper(ms)) for ms in (300, 100, 200)]
        await parked(clock, 3)
        clock.advance(99)
        await settle()
        assert woke == []
        clock.advance(150)
        await settle()
        assert woke == [100, 200]
        clock.advance(51)
        await asyncio.gather(*tasks)
        assert woke == [100, 200, 300]
        assert clock.monotonic_ms() == 300

    run(scenario())


def test_a_wait_returns_early_when_its_future_completes_and_leaves_no_timer() -> None:
    async def scenario():
        clock = ManualClock()
        future = asyncio.get_running_loop().create_future()
        waiter = asyncio.ensure_future(clock.wait_ms(future, 5000))
        await parked(clock)
        future.set_result(None)
        assert await waiter is True
        assert clock.pending_timers() == 0
        timed_out = asyncio.ensure_future(clock.wait_ms(asyncio.get_running_loop().create_future(), 5000))
        await parked(clock)
        clock.advance(5000)
        assert await timed_out is False

    run(scenario())


# --------------------------------------------------------------------------------------------------------------
# a Fetch long poll on a real broker


def _fetch(topic: str, offset: int, max_wait_ms: int) -> FetchRequest:
    return FetchRequest(
        replica_id=i32(-1), max_wait=i32Timedelta.parse(datetime.timedelta(milliseconds=max_wait_ms)),
        min_bytes=i32(1), max_bytes=i32(1 << 20), isolation_level=i8(0), session_id=i32(0), session_epoch=i32(-1),
        topics=(FetchTopic(topic=topic, partitions=(FetchPartition(
            partition=i32(0), current_leader_epoch=i32(-1), fetch_offset=i64(offset), last_fetched_epoch=i32(-1),
            log_start_offset=i64(-1), partition_max_bytes=i32(1 << 20)),)),),
        forgotten_topics_data=(), rack_id="",
    )  # fmt: skip


@pytest.fixture
def broker_config(tmp_path) -> BrokerConfig:
    return BrokerConfig({"log.dirs": str(tmp_path / "data"), "listeners": "PLAINTEXT://127.0.0.1:0"})


async def _started(config: BrokerConfig) -> tuple[Broker, ManualClock]:
    clock = ManualClock()
    broker = Broker(config, clock=clock)
    await broker.start()
    await broker.create_topic("orders", 1, 1)
    await settle()  # housekeeping tasks have registered their sleeps
    return broker, clock


def _records_of(response) -> bytes:
    (topic,) = response.responses
    (partition,) = topic.partitions
    assert partition.error_code == ErrorCode.none
    return bytes(partition.records or b"")


def test_a_fetch_long_poll_answers_empty_exactly_when_max_wait_has_passed(broker_config) -> None:
    async def scenario():
        broker, clock = await _started(broker_config)
        ctx = RequestContext(broker, RequestHeader(1, 12, 1, "test"), "127.0.0.1", "conn-test")
        timers_before = clock.pending_timers()
        poll = asyncio.ensure_future(handle_fetch(ctx, _fetch("orders", 0, 30_000)))
        await parked(clock, timers_before + 1)
        clock.advance(29_999)
        await settle()
        assert not poll.done(), "the long poll answered before its max wait"
        clock.advance(1)
        assert _records_of(await poll) == b""
        await broker.stop()

    run(scenario())


def test_a_fetch_long_poll_is_woken_by_an_append_without_time_passing(broker_config) -> None:
    async def scenario():
        broker, clock = await _started(broker_config)
        ctx = RequestContext(broker, RequestHeader(1, 12, 1, "test"), "127.0.0.1", "conn-test")
        timers_before = clock.pending_timers()
        poll = asyncio.ensure_future(handle_fetch(ctx, _fetch("orders", 0, 30_000)))
        await parked(clock, timers_before + 1)
        batch = build_batch([(b"k", b"woken")], timestamp_ms=clock.time_ms())
        await broker.replica_manager.append("orders", 0, batch, read_header(batch), acks=1, timeout_ms=1000)
        records = _records_of(await poll)
        assert b"woken" in records
        assert clock.monotonic_ms() == 0
        await broker.stop()

    run(scenario())


# --------------------------------------------------------------------------------------------------------------
# an acks=-1 replication wait


async def _parked_acks_all_append(tmp_path, clock: ManualClock) -> tuple[Partition, asyncio.Future]:
    """An acks=-1 append, parked, to a leader partition on broker 0 whose in-sync follower 1 never fetches."""
    replica_manager = ReplicaManager(0, clock, lambda topic: 1)
    plog = PartitionLog.open(RealFileSystem(), tmp_path / "orders-0", "orders", 0, LogConfig(), clock)
    partition = Partition(
        topic="orders", index=0, topic_id=uuid.uuid4(), log=plog, leader_id=0, leader_epoch=0,
        replicas=[0, 1], isr=[0, 1], broker_id=0,
    )  # fmt: skip
    replica_manager.add_partition(partition)
    batch = build_batch([(None, b"v")], timestamp_ms=clock.time_ms())
    append = asyncio.ensure_future(
        replica_manager.append("orders", 0, batch, read_header(batch), acks=-1, timeout_ms=30_000)
    )
    await parked(clock)
    assert partition.log.log_end_offset == 1 and partition.high_watermark == 0
    return partition, append


def test_an_acks_all_append_times_out_exactly_at_its_timeout(tmp_path) -> None:
    async def scenario():
        clock = ManualClock()
        partition, append = await _parked_acks_all_append(tmp_path, clock)
        clock.advance(29_999)
        await settle()
        assert not append.done()
        clock.advance(1)
        with pytest.raises(KafkaError) as timed_out:
            await append
        assert timed_out.value.error_code == ErrorCode.request_timed_out
        partition.log.close()

    run(scenario())


def test_an_acks_all_append_completes_when_the_high_watermark_covers_it(tmp_path) -> None:
    async def scenario():
        clock = ManualClock()
        partition, append = await _parked_acks_all_append(tmp_path, clock)
        partition.high_watermark = 1  # the follower caught up
        partition.wake_waiters()
        assert (await append).base_offset == 0
        assert clock.pending_timers() == 0
        partition.log.close()

    run(scenario())
