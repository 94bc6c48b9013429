"""The transaction coordinator on the coordinator runtime, with the in-memory broker of the runtime's tests: a
loaded PrepareCommit is finished (markers at the partition's leader epoch, then CompleteCommit in the log; while
it is, DescribeTransactions lists the partitions still without a marker), and a shard that loses its partition
before the markers are written completes nothing."""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode

from broker_runtime.clock import Clock
from broker_runtime.protocol.records import build_batch, decode_records, iter_headers
from broker_runtime.txn.records import (
    TRANSACTION_STATE_TOPIC,
    TransactionValue,
    decode_value,
    encode_key,
    encode_value,
    transaction_partition,
)
from broker_runtime.txn.runtime import TransactionCoordinatorRuntime
from broker_runtime.txn.state import TransactionState
from tests.unit.coordinator.fake_broker import FakeBroker, FakePartition, until

S = TransactionState
PARTITIONS = 3
LEADER_EPOCH = 4
CONFIG = {
    "transaction.state.log.num.partitions": PARTITIONS,
    "transaction.state.log.replication.factor": 1,
    "transaction.state.log.load.buffer.size": 1 << 20,
    "transaction.state.log.min.isr": 1,
    "transaction.state.log.segment.bytes": 1 << 20,
    "transaction.max.timeout.ms": 900_000,
    "transactional.id.expiration.ms": 604_800_000,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 10_000,
    "transaction.remove.expired.transaction.cleanup.interval.ms": 3_600_000,
}
TID = "tx"
INDEX = transaction_partition(TID, PARTITIONS)


class Destination:
    """Where the runtime's marker sender writes: each broker held until released, then every partition written."""

    def __init__(self) -> None:
        self.released = {1: asyncio.Event(), 2: asyncio.Event()}
        self.written: list[tuple] = []

    def release(self, *broker_ids: int) -> None:
        for broker_id in broker_ids or tuple(self.released):
            self.released[broker_id].set()

    async def write(self, broker_id: int, markers) -> list[dict]:
        await self.released[broker_id].wait()
        for m in markers:
            self.written.append((broker_id, m.producer_id, m.producer_epoch, m.coordinator_epoch, m.committed,
                                 sorted(m.partitions)))  # fmt: skip
        return [dict.fromkeys(m.partitions, ErrorCode.none) for m in markers]


async def started_with_prepare_commit() -> tuple[FakeBroker, TransactionCoordinatorRuntime, Destination]:
    broker = FakeBroker(Clock(), TRANSACTION_STATE_TOPIC, PARTITIONS, CONFIG)
    broker.broker_id = 0
    runtime = TransactionCoordinatorRuntime(broker)
    destination = Destination()
    runtime.markers._write = destination.write
    runtime.markers._route_of = lambda topic, partition: 1 if topic == "a" else 2  # "a" on broker 1, "b" on 2
    partition = FakePartition()
    partition.leader_epoch = LEADER_EPOCH
    broker.replica_manager.partitions[INDEX] = partition
    decided = TransactionValue(7, 2, 60_000, S.PREPARE_COMMIT, (("a", 0), ("b", 1)), 1_000, 900)
    partition.log.append(build_batch([(encode_key(TID), encode_value(decided))]))
    runtime.start()
    broker.replica_manager.lead(INDEX, epoch=LEADER_EPOCH)
    await until(lambda: runtime.is_active(INDEX), "the load")
    return broker, runtime, destination


def logged_states(broker: FakeBroker) -> list[TransactionState]:
    log = broker.replica_manager.partitions[INDEX].log
    return [
        decode_value(r.value).state
        for batch in log.batches
        for h in iter_headers(batch)
        for r in decode_records(batch, h)
    ]


def test_a_loaded_prepare_commit_is_finished_by_the_new_coordinator() -> None:
    async def scenario() -> None:
        broker, runtime, destination = await started_with_prepare_commit()
        shard = runtime.active_shards()[0]
        assert shard.transactions[TID].pending_state is S.COMPLETE_COMMIT  # waiting for its markers
        await until(lambda: runtime.markers.pending_transactions == 1, "markers on their way")
        assert runtime.describe(TID).partitions == (("a", 0), ("b", 1))
        destination.release(1)
        await until(lambda: destination.written, "broker 1's marker")
        await until(lambda: runtime.describe(TID).partitions == (("b", 1),), "only b left to mark")
        assert runtime.describe(TID).state == "PrepareCommit"
        destination.release(2)
        await until(lambda: shard.transactions[TID].state is S.COMPLETE_COMMIT, "CompleteCommit")
        assert sorted(destination.written) == [
            (1, 7, 2, LEADER_EPOCH, True, [("a", 0)]), (2, 7, 2, LEADER_EPOCH, True, [("b", 1)]),
        ]  # fmt: skip
        assert runtime.describe(TID).partitions == ()
        assert logged_states(broker) == [S.PREPARE_COMMIT, S.COMPLETE_COMMIT]
        assert runtime.markers.pending_transactions == 0
        await runtime.stop()

    asyncio.run(asyncio.wait_for(scenario(), 20))


def test_a_coordinator_that_lost_its_partition_completes_nothing() -> None:
    async def scenario() -> None:
        broker, runtime, destination = await started_with_prepare_commit()
        await until(lambda: runtime.markers.pending_transactions == 1, "markers on their way")
        broker.replica_manager.lead(INDEX, is_leader=False)  # the partition moved away mid-send
        destination.release()
        await until(lambda: runtime.markers.pending_transactions == 0, "the job dropped")
        assert logged_states(broker) == [S.PREPARE_COMMIT]  # no CompleteCommit from a deposed coordinator
        await runtime.stop()

    asyncio.run(asyncio.wait_for(scenario(), 20))
