"""The transaction coordinator shard, driven synchronously: appends replayed into a list-backed log, time moved
with a ManualClock, markers completed by hand."""

from __future__ import annotations

import itertools

import pytest
from kio.schema.errors import ErrorCode

from broker_runtime.clock import ManualClock
from broker_runtime.errors import KafkaError
from broker_runtime.txn.coordinator import (
    EPOCH_EXHAUSTED,
    InitProducerIdResult,
    MarkerJob,
    TransactionCoordinatorConfig,
    TransactionCoordinatorShard,
)
from broker_runtime.txn.records import (
    TransactionKey,
    TransactionValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from broker_runtime.txn.state import TransactionState

S = TransactionState
E = ErrorCode
CONFIG = TransactionCoordinatorConfig(
    max_timeout_ms=60_000,
    transactional_id_expiration_ms=3_600_000,
    abort_timed_out_interval_ms=1_000,
    remove_expired_interval_ms=60_000,
)


class Driver:
    """What the runtime does with a shard, in memory: append, replay at the offset, then the continuation."""

    def __init__(self, clock: ManualClock | None = None, epoch: int = 5, log: list | None = None) -> None:
        self.clock = clock or ManualClock()
        self.log: list[tuple[bytes, bytes | None]] = list(log or [])
        self.producer_ids = itertools.count(1000)
        self.shard = TransactionCoordinatorShard(0, epoch, CONFIG, self.clock)
        for offset, (key, value) in enumerate(self.log):
            self.shard.replay(key, value, offset)
        self.shard.finish_load()
        self.fail_next: ErrorCode | None = None

    def new_producer_id(self) -> int:
        return next(self.producer_ids)

    def flush(self) -> None:
        while appends := self.shard.take_appends():
            for append in appends:
                error, self.fail_next = self.fail_next, None
                if error is None:
                    for key, value in append.records:
                        self.shard.replay(key, value, len(self.log))
                        self.log.append((key, value))
                assert append.on_done is not None
                append.on_done(error)

    def call(self, reply):
        self.flush()
        assert reply.done, "the reply waits for something the test did not do"
        return reply.result()

    def init(
        self, tid: str = "tx", timeout_ms: int = 30_000, pid: int = -1, epoch: int = -1
    ) -> InitProducerIdResult:
        return self.call(self.shard.init_producer_id(tid, timeout_ms, self.new_producer_id, pid, epoch))

    def add(self, tid: str, pid: int, epoch: int, *partitions: tuple[str, int]) -> ErrorCode:
        return self.call(self.shard.add_partitions(tid, pid, epoch, partitions))

    def end(self, tid: str, pid: int, epoch: int, commit: bool) -> ErrorCode:
        return self.call(self.shard.end_transaction(tid, pid, epoch, commit))

    def deliver_markers(self) -> list[MarkerJob]:
        jobs = self.shard.take_marker_jobs()
        for job in jobs:
            self.shard.markers_written(job)
        self.flush()
        return jobs

    def logged(self, tid: str = "tx"):
        """The values written for `tid`, oldest first (None for a tombstone)."""
        return [
            None if value is None else decode_value(value)
            for key, value in self.log
            if decode_key(key) == TransactionKey(tid)
        ]

    def state(self, tid: str = "tx") -> TransactionState:
        return self.shard.transactions[tid].state


def encode_value_for(state: TransactionState, epoch: int = 0, partitions=(), start_ms: int = -1) -> bytes:
    return encode_value(
        TransactionValue(77, epoch, 30_000, state, tuple(partitions), 1_700_000_000_000, start_ms)
    )


def test_a_transaction_from_init_to_complete_commit() -> None:
    d = Driver()
    assert d.init() == InitProducerIdResult(E.none, 1000, 0)
    assert d.add("tx", 1000, 0, ("a", 0), ("b", 1)) is E.none
    assert d.add("tx", 1000, 0, ("a", 0)) is E.none  # already in: nothing written
    assert d.end("tx", 1000, 0, commit=True) is E.none
    jobs = d.shard.take_marker_jobs()
    assert jobs == [MarkerJob("tx", 5, 1000, 0, True, frozenset({("a", 0), ("b", 1)}))]
    # Until the markers are written the producer waits.
    assert d.add("tx", 1000, 0, ("a", 0)) is E.concurrent_transactions
    assert d.end("tx", 1000, 0, commit=True) is E.concurrent_transactions
    d.shard.markers_written(jobs[0])
    d.flush()
    assert [v.state for v in d.logged()] == [S.EMPTY, S.ONGOING, S.PREPARE_COMMIT, S.COMPLETE_COMMIT]
    assert d.logged()[1].partitions == (("a", 0), ("b", 1))
    assert d.logged()[3].partitions == ()
    # A retried EndTxn of the finished transaction succeeds; the opposite decision is refused.
    assert d.end("tx", 1000, 0, commit=True) is E.none
    assert d.end("tx", 1000, 0, commit=False) is E.invalid_txn_state
    # The next transaction starts from CompleteCommit.
    assert d.add("tx", 1000, 0, ("c", 0)) is E.none
    assert d.state() is S.ONGOING


def test_abort_writes_prepare_then_complete_abort() -> None:
    d = Driver()
    d.init()
    d.add("tx", 1000, 0, ("a", 0))
    assert d.end("tx", 1000, 0, commit=False) is E.none
    (job,) = d.deliver_markers()
    assert not job.committed
    assert [v.state for v in d.logged()][-2:] == [S.PREPARE_ABORT, S.COMPLETE_ABORT]


def test_a_second_init_bumps_the_epoch_and_fences_the_first() -> None:
    d = Driver()
    d.init()
    assert d.init() == InitProducerIdResult(E.none, 1000, 1)
    assert d.add("tx", 1000, 0, ("a", 0)) is E.producer_fenced
    assert d.end("tx", 1000, 0, commit=True) is E.producer_fenced
    assert d.add("tx", 1000, 1, ("a", 0)) is E.none


def test_init_during_an_open_transaction_aborts_it_at_a_bumped_epoch() -> None:
    d = Driver()
    d.init()
    d.add("tx", 1000, 0, ("a", 0))
    # The new producer is told to retry while the old transaction is aborted at epoch 1 (never handed out).
    assert d.init() == InitProducerIdResult(E.concurrent_transactions)
    assert d.logged()[-1].state is S.PREPARE_ABORT and d.logged()[-1].producer_epoch == 1
    assert d.add("tx", 1000, 0, ("b", 0)) is E.producer_fenced  # the zombie
    assert d.init() == InitProducerIdResult(E.concurrent_transactions)  # markers still pending
    (job,) = d.deliver_markers()
    assert job.producer_epoch == 1 and not job.committed
    assert d.init() == InitProducerIdResult(E.none, 1000, 2)


def test_a_lost_init_answer_is_answered_again_with_the_same_epoch() -> None:
    d = Driver()
    d.init()
    assert d.init(pid=1000, epoch=0) == InitProducerIdResult(E.none, 1000, 1)
    # The producer did not get the answer and retries with its previous epoch: no second bump.
    assert d.init(pid=1000, epoch=0) == InitProducerIdResult(E.none, 1000, 1)
    assert d.init(pid=1000, epoch=7) == InitProducerIdResult(E.producer_fenced)
    assert d.init(pid=4242, epoch=1) == InitProducerIdResult(E.producer_fenced)


def test_an_exhausted_epoch_rotates_the_producer_id() -> None:
    d = Driver(log=[(encode_key("tx"), encode_value_for(S.COMPLETE_COMMIT, epoch=EPOCH_EXHAUSTED))])
    assert d.init() == InitProducerIdResult(E.none, 1000, 0)


def test_requests_are_validated() -> None:
    d = Driver()
    assert d.init("") == InitProducerIdResult(E.invalid_request)
    assert d.init(timeout_ms=0) == InitProducerIdResult(E.invalid_transaction_timeout)
    assert d.init(timeout_ms=60_001) == InitProducerIdResult(E.invalid_transaction_timeout)
    assert d.add("nobody", 1, 0, ("a", 0)) is E.invalid_producer_id_mapping
    assert d.end("nobody", 1, 0, commit=True) is E.invalid_producer_id_mapping
    d.init()
    assert d.add("tx", 999, 0, ("a", 0)) is E.invalid_producer_id_mapping
    assert d.end("tx", 1000, 0, commit=True) is E.invalid_txn_state  # nothing to end: Empty
    assert d.log and all(v.state is S.EMPTY for v in d.logged())


def test_no_producer_id_block_yet_is_answered_with_the_sources_error() -> None:
    d = Driver()

    def none_left() -> int:
        raise KafkaError(E.coordinator_load_in_progress)

    reply = d.shard.init_producer_id("tx", 30_000, none_left)
    assert reply.result() == InitProducerIdResult(E.coordinator_load_in_progress)


def test_a_failed_append_answers_the_mapped_error_and_leaves_the_state() -> None:
    d = Driver()
    d.init()
    d.fail_next = E.not_enough_replicas
    assert d.add("tx", 1000, 0, ("a", 0)) is E.coordinator_not_available
    assert d.state() is S.EMPTY and d.shard.transactions["tx"].pending_state is None
    d.fail_next = E.not_leader_or_follower
    assert d.add("tx", 1000, 0, ("a", 0)) is E.not_coordinator
    assert d.add("tx", 1000, 0, ("a", 0)) is E.none


def test_a_failed_fence_does_not_bump_the_epoch_twice() -> None:
    d = Driver()
    d.init()
    d.add("tx", 1000, 0, ("a", 0))
    d.fail_next = E.request_timed_out
    assert d.init() == InitProducerIdResult(E.coordinator_not_available)
    assert d.shard.transactions["tx"].producer_epoch == 1  # bumped in memory, never handed out
    assert d.init() == InitProducerIdResult(E.concurrent_transactions)
    assert d.logged()[-1].producer_epoch == 1  # the second fence reused epoch 1
    d.deliver_markers()
    assert d.init() == InitProducerIdResult(E.none, 1000, 2)


def test_transactions_open_past_their_timeout_are_aborted_by_the_timer() -> None:
    clock = ManualClock()
    d = Driver(clock)
    d.init(timeout_ms=5_000)
    d.add("tx", 1000, 0, ("a", 0))
    clock.advance(5_000)
    d.shard.poll_timers()
    d.flush()
    assert d.state() is S.ONGOING  # not yet past the timeout
    clock.advance(1_000)
    assert d.shard.poll_timers() == 1
    d.flush()
    assert d.state() is S.PREPARE_ABORT and d.shard.transactions["tx"].producer_epoch == 1
    (job,) = d.deliver_markers()
    assert not job.committed and job.partitions == frozenset({("a", 0)})
    assert d.state() is S.COMPLETE_ABORT
    # The timed-out producer is fenced; a new one gets the next epoch.
    assert d.end("tx", 1000, 0, commit=True) is E.producer_fenced
    assert d.init() == InitProducerIdResult(E.none, 1000, 2)


def test_idle_transactional_ids_expire_with_a_tombstone() -> None:
    clock = ManualClock()
    d = Driver(clock)
    d.init("idle")
    d.init("busy")
    d.add("busy", 1001, 0, ("a", 0))
    clock.advance(CONFIG.transactional_id_expiration_ms + CONFIG.remove_expired_interval_ms)
    d.shard.poll_timers()
    d.flush()
    assert "idle" not in d.shard.transactions
    assert d.logged("idle")[-1] is None
    assert "busy" in d.shard.transactions  # an open transaction never expires (it times out instead)


def test_a_loaded_prepare_commit_is_completed_by_the_new_coordinator() -> None:
    log = [
        (encode_key("tx"), encode_value_for(S.ONGOING, partitions=[("a", 0)], start_ms=1)),
        (encode_key("tx"), encode_value_for(S.PREPARE_COMMIT, partitions=[("a", 0), ("b", 3)], start_ms=1)),
        (encode_key("gone"), encode_value_for(S.EMPTY)),
        (encode_key("gone"), None),
    ]
    d = Driver(epoch=9, log=log)
    assert "gone" not in d.shard.transactions
    (job,) = d.shard.take_marker_jobs()
    assert job == MarkerJob("tx", 9, 77, 0, True, frozenset({("a", 0), ("b", 3)}))
    assert d.init() == InitProducerIdResult(E.concurrent_transactions)
    d.shard.markers_written(job)
    d.flush()
    assert d.state() is S.COMPLETE_COMMIT


def test_markers_of_a_superseded_transaction_complete_nothing() -> None:
    d = Driver()
    d.init()
    d.add("tx", 1000, 0, ("a", 0))
    d.end("tx", 1000, 0, commit=True)
    (job,) = d.shard.take_marker_jobs()
    stale = MarkerJob(job.transactional_id, job.coordinator_epoch - 1, job.producer_id, job.producer_epoch,
                      job.committed, job.partitions)  # fmt: skip
    assert not d.shard.is_current(stale)
    d.shard.markers_written(stale)
    assert d.shard.take_appends() == []
    assert d.shard.is_current(job)


def test_a_completion_that_cannot_be_written_is_retried_by_timer() -> None:
    clock = ManualClock()
    d = Driver(clock)
    d.init()
    d.add("tx", 1000, 0, ("a", 0))
    d.end("tx", 1000, 0, commit=True)
    (job,) = d.shard.take_marker_jobs()
    d.shard.markers_written(job)
    d.fail_next = E.not_enough_replicas
    d.flush()
    assert d.state() is S.PREPARE_COMMIT
    assert d.init() == InitProducerIdResult(E.concurrent_transactions)
    clock.advance(100)
    d.shard.poll_timers()
    d.flush()
    assert d.state() is S.COMPLETE_COMMIT


def test_unload_answers_queued_appends_not_coordinator() -> None:
    d = Driver()
    reply = d.shard.init_producer_id("tx", 30_000, d.new_producer_id)
    d.shard.unload()
    assert reply.result() == InitProducerIdResult(E.not_coordinator)


def test_describe_and_list() -> None:
    clock = ManualClock()
    d = Driver(clock)
    d.init("a")
    d.init("b")
    d.add("b", 1001, 0, ("t", 1), ("t", 0))
    desc = d.shard.describe("b")
    assert (desc.error, desc.state, desc.producer_id, desc.partitions) == (
        E.none,
        "Ongoing",
        1001,
        (("t", 0), ("t", 1)),
    )
    assert desc.start_ms == clock.time_ms()
    assert d.shard.describe("zzz").error is E.transactional_id_not_found
    assert d.shard.describe("").error is E.invalid_request
    listed = lambda *args: sorted(t.transactional_id for t in d.shard.list_transactions(*args))  # noqa: E731
    assert listed((), ()) == ["a", "b"]
    assert listed((S.ONGOING,), ()) == ["b"]
    assert listed((), (1000,)) == ["a"]
    clock.advance(10_000)
    assert listed((S.ONGOING,), (), 5_000) == ["b"]
    assert listed((S.ONGOING,), (), 20_000) == []


def test_verify_only_checks_membership() -> None:
    d = Driver()
    d.init()
    d.add("tx", 1000, 0, ("a", 0))
    assert d.shard.verify_partitions("tx", 1000, 0, [("a", 0), ("a", 1)]) == {
        ("a", 0): E.none, ("a", 1): E.transaction_abortable,
    }  # fmt: skip
    assert d.shard.verify_partitions("tx", 1000, 1, [("a", 0)]) == {("a", 0): E.producer_fenced}


@pytest.mark.parametrize("commit", [True, False])
def test_replaying_the_log_rebuilds_the_same_state(commit: bool) -> None:
    d = Driver()
    d.init("x")
    d.add("x", 1000, 0, ("a", 0))
    d.init("y")
    d.add("y", 1001, 0, ("b", 0))
    d.end("y", 1001, 0, commit=commit)
    d.deliver_markers()
    again = Driver(log=d.log)
    for tid in ("x", "y"):
        old, new = d.shard.transactions[tid], again.shard.transactions[tid]
        assert (old.producer_id, old.producer_epoch, old.state, old.partitions, old.start_ms) == (
            new.producer_id, new.producer_epoch, new.state, new.partitions, new.start_ms,
        )  # fmt: skip


def test_many_expiring_ids_are_tombstoned_in_bounded_appends() -> None:
    from broker_runtime.txn.coordinator import MAX_TOMBSTONE_BYTES

    clock = ManualClock()
    d = Driver(clock)
    ids = [f"{i:05d}-" + "x" * 200 for i in range(3000)]  # ~620 KB of keys
    for tid in ids:
        d.init(tid)
    clock.advance(CONFIG.transactional_id_expiration_ms + CONFIG.remove_expired_interval_ms)
    d.shard.poll_timers()
    appends = d.shard.take_appends()
    assert len(appends) >= 3
    assert all(sum(len(key) for key, _ in a.records) <= MAX_TOMBSTONE_BYTES for a in appends)
    assert sum(len(a.records) for a in appends) == len(ids)
    for append in appends:  # written and replayed as the runtime would
        for key, value in append.records:
            d.shard.replay(key, value, len(d.log))
            d.log.append((key, value))
        append.on_done(None)
    assert d.shard.transactions == {}
