"""The marker sender against a scripted cluster: leaders that move, brokers that do not answer, partitions that
disappear, fencing, and a coordinator that loses its partition. Time is a ManualClock."""

from __future__ import annotations

import asyncio

from kio.schema.errors import ErrorCode

from broker_runtime.clock import ManualClock
from broker_runtime.txn.coordinator import MarkerJob
from broker_runtime.txn.marker_sender import LEADER_UNKNOWN, TransactionMarkerSender, TxnMarker

E = ErrorCode


class FakeCluster:
    """Partition leaders, brokers that are down, scripted answers; records every marker written."""

    def __init__(self, leaders: dict[tuple[str, int], int | None]) -> None:
        self.leaders = dict(leaders)
        self.down: set[int] = set()
        self.scripted: dict[tuple[str, int], list[ErrorCode]] = {}
        self.written: list[
            tuple[int, tuple[str, int], int, bool]
        ] = []  # (broker, tp, producer id, committed)
        self.requests: list[int] = []

    def route(self, topic: str, partition: int) -> int | None:
        return self.leaders.get((topic, partition))

    async def write(self, broker_id: int, markers: list[TxnMarker]) -> list[dict[tuple[str, int], ErrorCode]]:
        self.requests.append(broker_id)
        await asyncio.sleep(0)  # a real write awaits the network or the ISR
        if broker_id in self.down:
            raise ConnectionError(f"broker {broker_id} is down")
        results = []
        for marker in markers:
            errors = {}
            for tp in marker.partitions:
                script = self.scripted.get(tp)
                if script:
                    errors[tp] = script.pop(0)
                elif self.leaders.get(tp) != broker_id:
                    errors[tp] = E.not_leader_or_follower
                else:
                    errors[tp] = E.none
                    self.written.append((broker_id, tp, marker.producer_id, marker.committed))
            results.append(errors)
        return results


def job(*partitions: tuple[str, int], committed: bool = True, producer_id: int = 7) -> MarkerJob:
    return MarkerJob("tx", 3, producer_id, 0, committed, frozenset(partitions))


class Harness:
    def __init__(self, cluster: FakeCluster) -> None:
        self.clock = ManualClock()
        self.cluster = cluster
        self.sender = TransactionMarkerSender(self.clock, cluster.route, cluster.write)
        self.completed: list[MarkerJob] = []
        self.current = True

    def add(self, marker_job: MarkerJob) -> None:
        self.sender.add(marker_job, is_current=lambda _: self.current, on_written=self.completed.append)

    async def settle(self) -> None:
        """Let the destination tasks run until they wait again (no time passes)."""
        for _ in range(20):
            await asyncio.sleep(0)

    async def advance(self, ms: int) -> None:
        self.clock.advance(ms)
        await self.settle()


def run(coro) -> None:
    asyncio.run(asyncio.wait_for(coro, 20))


def test_markers_go_to_each_partitions_leader_once_and_complete_the_job() -> None:
    async def scenario() -> None:
        cluster = FakeCluster({("a", 0): 1, ("a", 1): 2, ("b", 0): 1})
        h = Harness(cluster)
        marker_job = job(("a", 0), ("a", 1), ("b", 0))
        h.add(marker_job)
        await h.settle()
        assert sorted(cluster.written) == [
            (1, ("a", 0), 7, True),
            (1, ("b", 0), 7, True),
            (2, ("a", 1), 7, True),
        ]
        assert sorted(cluster.requests) == [1, 2]  # one request per destination
        assert h.completed == [marker_job]
        assert h.sender.pending_transactions == 0
        await h.sender.stop()

    run(scenario())


def test_a_leader_that_moved_is_looked_up_again() -> None:
    async def scenario() -> None:
        cluster = FakeCluster({("a", 0): 1})
        h = Harness(cluster)
        h.add(job(("a", 0)))
        cluster.leaders[("a", 0)] = 2  # moved after routing: broker 1 answers NOT_LEADER_OR_FOLLOWER
        await h.settle()
        assert cluster.written == [] and h.completed == []
        await h.advance(h.sender.retry_backoff_ms)
        assert cluster.written == [(2, ("a", 0), 7, True)]
        assert len(h.completed) == 1
        await h.sender.stop()

    run(scenario())


def test_a_broker_that_does_not_answer_is_tried_again_until_it_does() -> None:
    async def scenario() -> None:
        cluster = FakeCluster({("a", 0): 1})
        cluster.down.add(1)
        h = Harness(cluster)
        h.add(job(("a", 0), committed=False))
        await h.settle()
        await h.advance(h.sender.retry_backoff_ms)
        assert cluster.requests == [1, 1] and h.completed == []
        cluster.down.clear()
        await h.advance(h.sender.retry_backoff_ms)
        assert cluster.written == [(1, ("a", 0), 7, False)]
        assert len(h.completed) == 1
        await h.sender.stop()

    run(scenario())


def test_retriable_partition_errors_are_retried_and_partitions_without_a_leader_wait() -> None:
    async def scenario() -> None:
        cluster = FakeCluster({("a", 0): 1, ("a", 1): LEADER_UNKNOWN})
        cluster.scripted[("a", 0)] = [E.not_enough_replicas, E.request_timed_out]
        h = Harness(cluster)
        h.add(job(("a", 0), ("a", 1)))
        await h.settle()
        await h.advance(h.sender.retry_backoff_ms)
        await h.advance(h.sender.retry_backoff_ms)
        assert cluster.written == [(1, ("a", 0), 7, True)]
        assert h.completed == []  # ("a", 1) still has no leader
        cluster.leaders[("a", 1)] = 2
        await h.advance(h.sender.retry_backoff_ms)
        assert (2, ("a", 1), 7, True) in cluster.written
        assert len(h.completed) == 1
        await h.sender.stop()

    run(scenario())


def test_transactions_waiting_for_an_unknown_leader_are_counted_until_a_leader_is_known() -> None:
    async def scenario() -> None:
        cluster = FakeCluster({("a", 0): 1, ("a", 1): LEADER_UNKNOWN, ("a", 2): LEADER_UNKNOWN})
        h = Harness(cluster)
        h.add(job(("a", 0), ("a", 1), ("a", 2)))
        h.add(MarkerJob("other", 3, 8, 0, True, frozenset({("a", 0)})))
        await h.settle()
        # One transaction waits (two of its partitions lack a leader); the other one is written.
        assert h.sender.unknown_destination_queue_size == 1
        await h.advance(h.sender.retry_backoff_ms)
        assert h.sender.unknown_destination_queue_size == 1  # still no leader: routed again, waiting again
        cluster.leaders[("a", 1)] = cluster.leaders[("a", 2)] = 2
        await h.advance(h.sender.retry_backoff_ms)
        assert h.sender.unknown_destination_queue_size == 0
        assert len(h.completed) == 2
        cluster.leaders[("b", 0)] = LEADER_UNKNOWN
        h.add(job(("b", 0), producer_id=9))
        assert h.sender.unknown_destination_queue_size == 1
        await h.sender.stop()
        assert h.sender.unknown_destination_queue_size == 0

    run(scenario())


def test_a_deleted_partition_needs_no_marker() -> None:
    async def scenario() -> None:
        cluster = FakeCluster({("a", 0): 1})  # ("gone", 0) is not in the metadata
        h = Harness(cluster)
        h.add(job(("a", 0), ("gone", 0)))
        await h.settle()
        assert cluster.written == [(1, ("a", 0), 7, True)]
        assert len(h.completed) == 1
        await h.sender.stop()

    run(scenario())


def test_a_fenced_marker_abandons_the_job() -> None:
    async def scenario() -> None:
        cluster = FakeCluster({("a", 0): 1, ("a", 1): 1})
        cluster.scripted[("a", 1)] = [E.transaction_coordinator_fenced]
        h = Harness(cluster)
        h.add(job(("a", 0), ("a", 1)))
        await h.settle()
        await h.advance(10 * h.sender.retry_backoff_ms)
        assert h.completed == [] and h.sender.pending_transactions == 0
        assert cluster.requests == [1]
        await h.sender.stop()

    run(scenario())


def test_jobs_of_a_coordinator_that_moved_on_are_dropped() -> None:
    async def scenario() -> None:
        cluster = FakeCluster({("a", 0): 1})
        cluster.down.add(1)
        h = Harness(cluster)
        h.add(job(("a", 0)))
        await h.settle()
        h.current = False  # the shard was unloaded: a new coordinator will send these markers
        cluster.down.clear()
        await h.advance(10 * h.sender.retry_backoff_ms)
        assert cluster.written == [] and h.completed == []
        assert h.sender.pending_transactions == 0
        await h.sender.stop()

    run(scenario())


def test_a_newer_job_for_the_same_transactional_id_replaces_the_old_one() -> None:
    async def scenario() -> None:
        cluster = FakeCluster({("a", 0): 1})
        cluster.down.add(1)
        h = Harness(cluster)
        h.add(job(("a", 0), producer_id=7))
        await h.settle()
        newer = job(("a", 0), producer_id=8)
        h.add(newer)
        cluster.down.clear()
        await h.advance(h.sender.retry_backoff_ms)
        assert [w[2] for w in cluster.written] == [8]
        assert h.completed == [newer]
        await h.sender.stop()

    run(scenario())


def test_a_stale_job_never_replaces_a_current_one() -> None:
    """A job its coordinator no longer wants (an unloaded shard's, reaching the sender late) is dropped on
    arrival; the current job for the same transactional id keeps being written."""

    async def scenario() -> None:
        cluster = FakeCluster({("a", 0): 1})
        cluster.down.add(1)
        h = Harness(cluster)
        current = job(("a", 0), producer_id=8)
        h.add(current)
        await h.settle()
        stale = job(("a", 0), producer_id=7)
        h.sender.add(stale, is_current=lambda _: False, on_written=h.completed.append)
        cluster.down.clear()
        await h.advance(h.sender.retry_backoff_ms)
        assert [w[2] for w in cluster.written] == [8]
        assert h.completed == [current]
        await h.sender.stop()

    run(scenario())
