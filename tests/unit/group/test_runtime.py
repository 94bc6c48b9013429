"""The asyncio runtime around the shards: load on leadership, answers while loading, ordered appends, append
failures, unload mid-append, timers. The broker around it is a small in-memory stand-in (real records, real
batches, no sockets); the real broker is exercised by tests/integration/test_groups_*.py."""

from __future__ import annotations

import asyncio

import pytest
from kio.schema.errors import ErrorCode

from broker_runtime.clock import Clock, ManualClock
from broker_runtime.errors import KafkaError
from broker_runtime.group.api import (
    CommitPartition,
    HeartbeatArgs,
    JoinGroupArgs,
    OffsetCommitArgs,
    SyncGroupArgs,
    TopicPartition,
    TxnOffsetCommitArgs,
)
from broker_runtime.group.records import (
    OFFSETS_TOPIC,
    OffsetCommitValue,
    decode_offset_commit_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
    partition_for,
)
from broker_runtime.group.runtime import GroupCoordinatorRuntime
from broker_runtime.protocol.records import build_batch, decode_records, iter_headers
from tests.unit.coordinator.fake_broker import FakeBroker, FakePartition, until

E = ErrorCode
PARTITIONS = 3


def broker_config() -> dict:
    return {
        "group.min.session.timeout.ms": 10,
        "group.max.session.timeout.ms": 60_000,
        "group.max.size": 100,
        "group.initial.rebalance.delay.ms": 0,
        "offset.metadata.max.bytes": 4096,
        "offsets.retention.minutes": 10080,
        "offsets.retention.check.interval.ms": 600_000,
        "offsets.load.buffer.size": 300,  # tiny: the load reads many chunks
        "offsets.commit.timeout.ms": 5000,
        "offsets.topic.compression.codec": 0,
        "offsets.topic.num.partitions": PARTITIONS,
        "offsets.topic.replication.factor": 1,
        "offsets.topic.segment.bytes": 1 << 20,
        "request.timeout.ms": 30_000,
    }


def group_on(partition: int) -> str:
    return next(g for g in (f"group-{i}" for i in range(1000)) if partition_for(g, PARTITIONS) == partition)


def commit(group: str, offset: int) -> OffsetCommitArgs:
    return OffsetCommitArgs(group, (CommitPartition("t", 0, offset),))


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


async def started(clock: Clock | None = None) -> tuple[FakeBroker, GroupCoordinatorRuntime]:
    broker = FakeBroker(clock or Clock(), OFFSETS_TOPIC, PARTITIONS, broker_config())
    runtime = GroupCoordinatorRuntime(broker)
    runtime.start()
    return broker, runtime


def test_a_partition_loads_from_its_log_and_serves_only_when_loaded() -> None:
    async def scenario():
        broker, runtime = await started()
        group = group_on(1)
        log = broker.replica_manager.partitions.setdefault(1, FakePartition()).log
        for i in range(50):  # an existing partition: 50 commits of one offset, one batch each
            key = encode_offset_commit_key(group, "t", 0)
            log.append(build_batch([(key, encode_offset_commit_value(OffsetCommitValue(i, f"m{i}", 0)))]))
        with pytest.raises(KafkaError) as not_ours:
            await runtime.call(group, lambda s: s.fetch_offsets(group, None))
        assert not_ours.value.error_code is E.not_coordinator
        broker.replica_manager.lead(1)
        with pytest.raises(KafkaError) as loading:
            await runtime.call(group, lambda s: s.fetch_offsets(group, None))
        assert loading.value.error_code is E.coordinator_load_in_progress
        assert runtime.is_loading()
        await until(lambda: not runtime.is_loading(), "end of the load")
        fetched = await runtime.call(group, lambda s: s.fetch_offsets(group, [TopicPartition("t", 0)]))
        assert (fetched.partitions[0].offset, fetched.partitions[0].metadata) == (49, "m49")
        await runtime.stop()

    run(scenario())


def test_appends_go_out_in_order_and_replies_wait_for_them() -> None:
    async def scenario():
        broker, runtime = await started()
        group = group_on(0)
        broker.replica_manager.lead(0)
        await until(lambda: runtime.active_shards(), "the shard")
        broker.replica_manager.gate = asyncio.Event()
        pending = [asyncio.ensure_future(runtime.call(group, lambda s, i=i: s.commit_offsets(commit(group, i))))
                   for i in range(20)]  # fmt: skip
        await asyncio.sleep(0.05)
        assert not any(p.done() for p in pending), "a commit was answered before it was appended"
        broker.replica_manager.gate.set()
        results = await asyncio.gather(*pending)
        assert all(r[0].error is E.none for r in results)
        # Queued commits were batched into fewer appends, in order: the last one wins.
        assert broker.replica_manager.appended_batches < 20
        written = [
            decode_offset_commit_value(r.value).offset
            for b in broker.replica_manager.partitions[0].log.batches
            for header in iter_headers(b)
            for r in decode_records(b, header)
        ]
        assert written == list(range(20))
        fetched = await runtime.call(group, lambda s: s.fetch_offsets(group, [TopicPartition("t", 0)]))
        assert fetched.partitions[0].offset == 19
        await runtime.stop()

    run(scenario())


def test_a_failed_append_answers_with_kafkas_mapped_error_and_stores_nothing() -> None:
    async def scenario():
        broker, runtime = await started()
        group = group_on(2)
        broker.replica_manager.lead(2)
        await until(lambda: runtime.active_shards(), "the shard")
        broker.replica_manager.fail_with = E.not_enough_replicas
        (result,) = await runtime.call(group, lambda s: s.commit_offsets(commit(group, 5)))
        assert result.error is E.coordinator_not_available
        broker.replica_manager.fail_with = None
        fetched = await runtime.call(group, lambda s: s.fetch_offsets(group, [TopicPartition("t", 0)]))
        assert fetched.partitions[0].offset == -1
        await runtime.stop()

    run(scenario())


def test_losing_leadership_mid_append_answers_not_coordinator() -> None:
    async def scenario():
        broker, runtime = await started()
        group = group_on(0)
        broker.replica_manager.lead(0)
        await until(lambda: runtime.active_shards(), "the shard")
        broker.replica_manager.gate = asyncio.Event()  # the append never completes
        waiting = asyncio.ensure_future(runtime.call(group, lambda s: s.commit_offsets(commit(group, 1))))
        await asyncio.sleep(0.02)
        broker.replica_manager.lead(0, is_leader=False)
        (result,) = await waiting
        assert result.error is E.not_coordinator
        with pytest.raises(KafkaError) as moved:
            await runtime.call(group, lambda s: s.fetch_offsets(group, None))
        assert moved.value.error_code is E.not_coordinator
        await runtime.stop()

    run(scenario())


def test_the_timer_task_completes_joins_and_ends_silent_sessions() -> None:
    async def scenario():
        clock = ManualClock()
        broker, runtime = await started(clock)
        group = group_on(1)
        broker.replica_manager.lead(1)
        await until(lambda: runtime.active_shards(), "the shard")
        args = JoinGroupArgs(group, "", "consumer", (("range", b""),), session_timeout_ms=50,
                             rebalance_timeout_ms=100, require_known_member_id=False)  # fmt: skip
        joined = await runtime.call(
            group, lambda s: s.join_group(args)
        )  # delay 0: the timer task completes it
        assert joined.error is E.none and joined.generation_id == 1
        beat = HeartbeatArgs(group, 1, joined.member_id)
        assert await runtime.call(group, lambda s: s.heartbeat(beat)) is E.none
        members = runtime.active_shards()[0].groups[group].members
        clock.advance(49)  # no heartbeat: the session ends at 50 ms on the broker's clock, the group empties
        await asyncio.sleep(0)
        assert members
        clock.advance(1)
        await until(lambda: not members, "the end of the session")
        assert await runtime.call(group, lambda s: s.heartbeat(beat)) is E.unknown_member_id
        await runtime.stop()

    run(scenario())


def test_a_parked_join_is_answered_not_coordinator_when_the_partition_moves() -> None:
    async def scenario():
        broker, runtime = await started()
        group = group_on(1)
        broker.replica_manager.lead(1)
        await until(lambda: runtime.active_shards(), "the shard")
        first_args = JoinGroupArgs(group, "", "consumer", (("range", b""),), 5000, 5000,
                                   require_known_member_id=False)  # fmt: skip
        first = await runtime.call(group, lambda s: s.join_group(first_args))
        sync = SyncGroupArgs(group, first.generation_id, first.member_id, assignments={first.member_id: b"a"})
        assert (await runtime.call(group, lambda s: s.sync_group(sync))).error is E.none
        # A newcomer's JoinGroup waits for the first member to rejoin.
        parked = asyncio.ensure_future(runtime.call(group, lambda s: s.join_group(first_args)))
        await asyncio.sleep(0.05)
        assert not parked.done()
        broker.replica_manager.lead(1, is_leader=False)
        assert (await parked).error is E.not_coordinator
        await runtime.stop()

    run(scenario())


def test_a_load_replays_only_committed_records_and_serves_once_the_leaders_records_are_committed() -> None:
    async def scenario():
        broker, runtime = await started()
        group = group_on(1)
        rm = broker.replica_manager
        rm.partitions[1] = FakePartition()
        plog = rm.partitions[1].log
        for offset in (3, 7):
            plog.append(build_batch([(encode_offset_commit_key(group, "t", 0),
                                      encode_offset_commit_value(OffsetCommitValue(offset, "", 0)))]))  # fmt: skip
        rm.partitions[1].commit_to(1)  # only the first commit is at the high watermark
        rm.lead(1)
        await asyncio.sleep(0.05)
        with pytest.raises(KafkaError) as loading:
            await runtime.call(group, lambda s: s.fetch_offsets(group, None))
        assert loading.value.error_code is E.coordinator_load_in_progress
        assert rm.listeners and runtime.is_loading()
        rm.partitions[1].commit_to(None)  # the followers caught up
        await until(lambda: runtime.active_shards(), "the shard")
        fetched = await runtime.call(group, lambda s: s.fetch_offsets(group, [TopicPartition("t", 0)]))
        assert fetched.partitions[0].offset == 7
        await runtime.stop()

    run(scenario())


def test_an_append_that_times_out_is_replayed_once_the_high_watermark_covers_it() -> None:
    async def scenario():
        broker, runtime = await started()
        group = group_on(0)
        rm = broker.replica_manager
        rm.lead(0)
        await until(lambda: runtime.active_shards(), "the shard")
        rm.partitions[0].commit_to(0)  # the ISR stops acknowledging
        (result,) = await runtime.call(group, lambda s: s.commit_offsets(commit(group, 42)))
        assert result.error is E.request_timed_out  # as Kafka answers it
        # the record is in the log, not committed: the shard reloads and does not show it
        await until(lambda: runtime.is_loading(), "the reload")
        rm.partitions[0].commit_to(None)  # now the ISR has it
        await until(lambda: runtime.active_shards(), "the reloaded shard")
        fetched = await runtime.call(group, lambda s: s.fetch_offsets(group, [TopicPartition("t", 0)]))
        assert fetched.partitions[0].offset == 42
        await runtime.stop()

    run(scenario())


def test_staying_leader_at_a_newer_epoch_keeps_the_loaded_shard() -> None:
    async def scenario():
        broker, runtime = await started()
        broker.replica_manager.lead(0)
        await until(lambda: runtime.active_shards(), "the shard")
        (shard,) = runtime.active_shards()
        broker.replica_manager.lead(0, epoch=1)  # an ISR change: the controller bumps the leader epoch
        assert runtime.active_shards() == [shard] and not runtime.is_loading()
        await runtime.stop()

    run(scenario())


def test_complete_transaction_commits_pending_offsets_and_a_new_leader_replays_the_marker() -> None:
    """Contract C1 on the group runtime: the marker goes to the log as a control batch after the transactional
    offsets, applies to the shard, and a reload (another broker taking over) reaches the same offsets."""

    async def scenario():
        broker, runtime = await started()
        group = group_on(2)
        rm = broker.replica_manager
        rm.lead(2)
        await until(lambda: runtime.active_shards(), "the shard")

        def txn_commit(producer_id: int, offset: int) -> TxnOffsetCommitArgs:
            return TxnOffsetCommitArgs(group, "tx", producer_id, 0, (CommitPartition("t", 0, offset),))

        def stable(shard):
            fetched = shard.fetch_offsets(group, [TopicPartition("t", 0)], require_stable=True).partitions[0]
            return fetched.offset if fetched.error is E.none else fetched.error

        assert (await runtime.call(group, lambda s: s.commit_offsets(commit(group, 3))))[0].error is E.none
        for producer_id, offset in ((11, 30), (12, 40)):
            (result,) = await runtime.call(group, lambda s, p=producer_id, o=offset: s.commit_transactional_offsets(
                txn_commit(p, o)))  # fmt: skip
            assert result.error is E.none
        assert await runtime.call(group, stable) is E.unstable_offset_commit
        partition = partition_for(group, PARTITIONS)
        assert await runtime.complete_transaction(partition, 12, 0, 5, False) is E.none  # abort 40
        assert await runtime.call(group, stable) is E.unstable_offset_commit  # 11 is still open
        assert await runtime.complete_transaction(partition, 11, 0, 5, True) is E.none  # commit 30
        assert await runtime.call(group, stable) == 30
        headers = [h for b in rm.partitions[2].log.batches for h in iter_headers(b)]
        assert [(h.producer_id, h.is_transactional, h.is_control) for h in headers] == [
            (-1, False, False), (11, True, False), (12, True, False), (12, True, True), (11, True, True)
        ]  # fmt: skip
        # Another broker takes over: its load replays the batches and markers from the log.
        rm.lead(2, is_leader=False)
        assert await runtime.complete_transaction(partition, 11, 0, 5, True) is E.not_leader_or_follower
        rm.lead(2, epoch=1)
        await until(lambda: runtime.active_shards(), "the reloaded shard")
        assert await runtime.call(group, stable) == 30
        assert runtime.active_shards()[0].pending_txn_offsets == {}
        await runtime.stop()

    run(scenario())
