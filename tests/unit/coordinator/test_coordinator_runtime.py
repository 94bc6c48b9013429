"""The shared coordinator runtime with a shard that is neither groups nor transactions: a key-value store whose
writes may be transactional. Loads replay records and markers, plain and transactional appends become the right
batches, and `complete_transaction` writes a control batch in order with the shard's other appends."""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode

from broker_runtime.clock import Clock, ManualClock
from broker_runtime.coordinator.runtime import LOAD_TIME_WINDOW_MS, CoordinatorRuntime, CoordinatorTopic
from broker_runtime.coordinator.shard import Append, Reply
from broker_runtime.protocol.records import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    build_batch,
    build_control_batch,
    decode_records,
    iter_headers,
)
from tests.unit.coordinator.fake_broker import FakeBroker, FakePartition, until

E = ErrorCode
TOPIC = "__kv_state"
PARTITIONS = 2


class KvShard:
    """Committed values per key, and each producer's pending writes until its marker."""

    def __init__(self, partition: int) -> None:
        self.partition = partition
        self.values: dict[bytes, bytes | None] = {}
        self.pending: dict[int, dict[bytes, bytes | None]] = {}
        self.loaded = False
        self.unloaded = False
        self._appends: list[Append] = []

    def put(
        self, key: bytes, value: bytes, producer_id: int = -1, producer_epoch: int = -1
    ) -> Reply[ErrorCode]:
        reply: Reply[ErrorCode] = Reply()
        self._appends.append(
            Append(
                [(key, value)],
                lambda error: reply.complete(error or E.none),
                producer_id=producer_id,
                producer_epoch=producer_epoch,
            )
        )
        return reply

    def replay(self, key, value, offset, *, producer_id=-1, transactional=False) -> None:
        if transactional:
            self.pending.setdefault(producer_id, {})[bytes(key)] = value
        else:
            self.values[bytes(key)] = value

    def replay_end_txn(self, producer_id: int, committed: bool, offset: int) -> None:
        pending = self.pending.pop(producer_id, {})
        if committed:
            self.values.update(pending)

    def finish_load(self) -> None:
        self.loaded = True

    def unload(self) -> None:
        self.unloaded = True

    def take_appends(self) -> list[Append]:
        appends, self._appends = self._appends, []
        return appends

    def next_deadline(self) -> int | None:
        return None

    def poll_timers(self) -> int:
        return 0


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


async def started() -> tuple[FakeBroker, CoordinatorRuntime[KvShard]]:
    broker = FakeBroker(Clock(), TOPIC, PARTITIONS, {})
    topic = CoordinatorTopic(TOPIC, PARTITIONS, 1, load_buffer_bytes=200, commit_timeout_ms=5000)
    runtime = CoordinatorRuntime(broker, topic, KvShard, name="kv")
    runtime.start()
    return broker, runtime


def written_batches(broker: FakeBroker, partition: int) -> list[tuple]:
    """(producer id, epoch, transactional, control, [(key, value)]) of every batch in the partition's log."""
    out = []
    for batch in broker.replica_manager.partitions[partition].log.batches:
        for h in iter_headers(batch):
            records = [(r.key, r.value) for r in decode_records(batch, h)]
            out.append((h.producer_id, h.producer_epoch, h.is_transactional, h.is_control, records))
    return out


def test_a_load_replays_plain_records_and_transactions_ended_by_their_markers() -> None:
    async def scenario():
        broker, runtime = await started()
        log = broker.replica_manager.partitions.setdefault(0, FakePartition()).log
        log.append(build_batch([(b"a", b"1"), (b"b", b"1")]))
        log.append(build_batch([(b"a", b"2")], producer_id=7, producer_epoch=0, transactional=True))
        log.append(build_batch([(b"b", b"2")], producer_id=8, producer_epoch=0, transactional=True))
        log.append(build_batch([(b"c", b"open")], producer_id=9, producer_epoch=0, transactional=True))
        log.append(build_control_batch(CONTROL_COMMIT, producer_id=7, producer_epoch=0, coordinator_epoch=1))
        log.append(build_control_batch(CONTROL_ABORT, producer_id=8, producer_epoch=0, coordinator_epoch=1))
        broker.replica_manager.lead(0)
        await until(lambda: runtime.is_active(0), "the load")
        shard = runtime.active_shards()[0]
        assert shard.loaded
        assert shard.values == {b"a": b"2", b"b": b"1"}  # 7 committed, 8 aborted
        assert shard.pending == {9: {b"c": b"open"}}  # still open: waits for its marker
        await runtime.stop()
        assert shard.unloaded

    run(scenario())


def test_transactional_writes_are_batches_of_their_producer_and_markers_follow_them_in_order() -> None:
    async def scenario():
        broker, runtime = await started()
        broker.replica_manager.lead(1)
        await until(lambda: runtime.is_active(1), "the load")
        broker.replica_manager.gate = asyncio.Event()  # queue everything before the first append goes out
        writes = [
            asyncio.ensure_future(runtime.call_on(1, lambda s: s.put(b"x", b"plain-1"))),
            asyncio.ensure_future(runtime.call_on(1, lambda s: s.put(b"y", b"plain-2"))),
            asyncio.ensure_future(runtime.call_on(1, lambda s: s.put(b"x", b"txn", producer_id=5, producer_epoch=3))),
        ]  # fmt: skip
        await asyncio.sleep(0)
        marker = asyncio.ensure_future(runtime.complete_transaction(1, 5, 3, 11, True))
        await asyncio.sleep(0)
        shard = runtime.active_shards()[0]
        assert shard.values == {} and not marker.done()  # nothing is applied before it is written
        broker.replica_manager.gate.set()
        assert await asyncio.gather(*writes) == [E.none] * 3
        assert await marker is E.none
        assert shard.values == {b"x": b"txn", b"y": b"plain-2"}
        assert shard.pending == {}
        assert written_batches(broker, 1) == [
            (-1, -1, False, False, [(b"x", b"plain-1"), (b"y", b"plain-2")]),  # plain writes share a batch
            (5, 3, True, False, [(b"x", b"txn")]),
            (5, 3, True, True, [((0).to_bytes(2, "big") + CONTROL_COMMIT.to_bytes(2, "big"),
                                 (0).to_bytes(2, "big") + (11).to_bytes(4, "big"))]),
        ]  # fmt: skip
        # An abort drops what the producer wrote since.
        assert (
            await runtime.call_on(1, lambda s: s.put(b"y", b"doomed", producer_id=5, producer_epoch=3))
            is E.none
        )
        assert shard.pending == {5: {b"y": b"doomed"}}
        assert await runtime.complete_transaction(1, 5, 3, 11, False) is E.none
        assert shard.pending == {} and shard.values[b"y"] == b"plain-2"
        await runtime.stop()

    run(scenario())


def test_complete_transaction_answers_not_leader_where_the_shard_does_not_serve() -> None:
    async def scenario():
        broker, runtime = await started()
        assert (
            await runtime.complete_transaction(0, 5, 0, 1, True) is E.not_leader_or_follower
        )  # not led here
        partition = broker.replica_manager.partitions.setdefault(0, FakePartition())
        partition.log.append(build_batch([(b"k", b"v")]))
        partition.held_high_watermark = 0  # the load waits for the high watermark to reach the log end
        broker.replica_manager.lead(0)
        assert runtime.is_loading()
        assert await runtime.complete_transaction(0, 5, 0, 1, True) is E.not_leader_or_follower  # loading
        partition.commit_to(None)
        await until(lambda: runtime.is_active(0), "the load")
        assert await runtime.complete_transaction(0, 5, 0, 1, True) is E.none
        broker.replica_manager.lead(0, is_leader=False)
        assert await runtime.complete_transaction(0, 5, 0, 1, True) is E.not_leader_or_follower  # unloaded
        await runtime.stop()

    run(scenario())


def test_a_marker_whose_append_fails_answers_the_append_error_and_applies_nothing() -> None:
    async def scenario():
        broker, runtime = await started()
        broker.replica_manager.lead(0)
        await until(lambda: runtime.is_active(0), "the load")
        assert (
            await runtime.call_on(0, lambda s: s.put(b"k", b"v", producer_id=4, producer_epoch=0)) is E.none
        )
        broker.replica_manager.fail_with = E.not_enough_replicas
        assert await runtime.complete_transaction(0, 4, 0, 2, True) is E.not_enough_replicas
        shard = runtime.active_shards()[0]
        assert shard.pending == {4: {b"k": b"v"}} and shard.values == {}
        broker.replica_manager.fail_with = None
        # Written to the log but not acknowledged by the ISR in time: the error is answered (the transaction
        # coordinator retries) and the shard reloads; the marker counts once the high watermark covers it.
        partition = broker.replica_manager.partitions[0]
        partition.held_high_watermark = partition.log.log_end_offset
        assert await runtime.complete_transaction(0, 4, 0, 2, True) is E.request_timed_out
        await until(runtime.is_loading, "the reload")
        assert runtime.active_shards() == []
        partition.commit_to(None)
        await until(lambda: runtime.is_active(0), "the reload")
        assert runtime.active_shards()[0].values == {b"k": b"v"}
        await runtime.stop()

    run(scenario())


def test_a_batch_the_log_took_for_a_retry_is_not_replayed() -> None:
    async def scenario():
        broker, runtime = await started()
        broker.replica_manager.lead(0)
        await until(lambda: runtime.is_active(0), "the load")
        broker.replica_manager.answer_duplicate = True
        assert await runtime.call_on(0, lambda s: s.put(b"k", b"v", producer_id=4, producer_epoch=0)) is (
            E.unknown_server_error
        )
        assert runtime.active_shards()[0].pending == {}
        await runtime.stop()

    run(scenario())


def test_load_times_are_measured_by_the_clock_and_kept_for_kafkas_window() -> None:
    async def scenario():
        clock = ManualClock()
        broker = FakeBroker(clock, TOPIC, PARTITIONS, {})
        topic = CoordinatorTopic(TOPIC, PARTITIONS, 1, load_buffer_bytes=200, commit_timeout_ms=5000)
        runtime = CoordinatorRuntime(broker, topic, KvShard, name="kv")
        runtime.start()
        assert runtime.load_times_ms() == []
        partition = broker.replica_manager.partitions.setdefault(0, FakePartition())
        partition.log.append(build_batch([(b"a", b"1")]))
        partition.commit_to(0)  # the record is not committed yet: the load waits for the high watermark
        broker.replica_manager.lead(0)
        await until(lambda: partition.waiters, "the load to wait for the high watermark")
        clock.advance(250)
        partition.commit_to(None)
        await until(lambda: runtime.is_active(0), "the load")
        broker.replica_manager.lead(1)
        await until(lambda: runtime.is_active(1), "the second load")
        assert sorted(runtime.load_times_ms()) == [0, 250]
        clock.advance(LOAD_TIME_WINDOW_MS - 1)
        assert sorted(runtime.load_times_ms()) == [0, 250]
        clock.advance(1)
        assert runtime.load_times_ms() == []
        await runtime.stop()

    run(scenario())
