"""KIP-890 verification state in the partition log (Kafka's VerificationStateEntry / VerificationGuard): with
verification on, a transactional batch of a producer with no open transaction is appended only with the guard of
its current verification; markers and appended batches retire the guard (the ABA case); the lowest sequence seen
while verifying holds back higher ones; entries expire with idle producers."""

from __future__ import annotations

import pytest
from kio.schema.errors import ErrorCode
from log_helpers import make_batch, open_log

from broker_runtime.errors import KafkaError
from broker_runtime.protocol.records import read_header
from broker_runtime.txn.control import marker_batch
from broker_runtime.txn.producer_state import NO_GUARD, VerificationGuard

A = 1000


def txn_append(log, guard, n=1, *, seq, epoch=0, pid=A):
    batch = make_batch(n, producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=True)
    return log.append_as_leader(batch, read_header(batch), 0, log.clock.time_ms(), verification_guard=guard)


def marker(log, *, committed, epoch=0, pid=A):
    batch, header = marker_batch(pid, epoch, 0, committed, log.clock.time_ms())
    return log.append_as_leader(batch, header, 0, log.clock.time_ms())


def refused(call) -> ErrorCode:
    with pytest.raises(KafkaError) as raised:
        call()
    return raised.value.error_code


def test_only_the_current_verifications_guard_appends(fs, clock):
    log = open_log(fs, clock)
    state = log.producer_state
    assert refused(lambda: txn_append(log, NO_GUARD, seq=0)) == ErrorCode.invalid_txn_state
    assert refused(lambda: txn_append(log, VerificationGuard(), seq=0)) == ErrorCode.invalid_txn_state
    assert log.log_end_offset == 0  # nothing appended
    guard = state.start_verification(A, 0, 0, clock.time_ms())
    assert state.start_verification(A, 0, 0, clock.time_ms()) is guard  # one verification per producer
    assert txn_append(log, guard, seq=0).base_offset == 0
    assert A not in state.verifications  # the open transaction takes over
    # While the transaction is open, nothing needs verifying and later batches append.
    assert state.start_verification(A, 1, 0, clock.time_ms()) is NO_GUARD
    assert txn_append(log, NO_GUARD, seq=1).base_offset == 1


def test_a_marker_retires_a_verification_started_before_it(fs, clock):
    """The ABA case: verified, then the transaction ends, then the stale verified batch arrives."""
    log = open_log(fs, clock)
    state = log.producer_state
    first = state.start_verification(A, 0, 0, clock.time_ms())
    txn_append(log, first, seq=0)
    stale = state.start_verification(A, 1, 0, clock.time_ms())  # a batch of the same transaction: no guard
    assert stale is NO_GUARD
    marker(log, committed=True)  # the transaction ends
    assert refused(lambda: txn_append(log, stale, seq=1)) == ErrorCode.invalid_txn_state
    # A verification started before a marker is retired by it too.
    pending = state.start_verification(A, 1, 0, clock.time_ms())
    marker(log, committed=False)
    assert refused(lambda: txn_append(log, pending, seq=1)) == ErrorCode.invalid_txn_state
    assert log.producer_state.open_transactions() == 0
    fresh = state.start_verification(A, 1, 0, clock.time_ms())
    assert txn_append(log, fresh, seq=1).base_offset == 3


def test_the_lowest_sequence_seen_while_verifying_holds_back_higher_ones(fs, clock):
    log = open_log(fs, clock)
    state = log.producer_state
    state.start_verification(A, 5, 0, clock.time_ms())
    guard = state.start_verification(A, 3, 0, clock.time_ms())  # a lower one of the same epoch lowers the bar
    assert refused(lambda: txn_append(log, guard, seq=5)) == ErrorCode.out_of_order_sequence_number
    assert txn_append(log, guard, seq=3).base_offset == 0
    # A higher epoch starts the bar again.
    marker(log, committed=True)
    state.start_verification(A, 4, 0, clock.time_ms())
    guard = state.start_verification(A, 0, 1, clock.time_ms())
    assert state.verifications[A].lowest_sequence == 0 and state.verifications[A].epoch == 1
    assert txn_append(log, guard, seq=0, epoch=1).base_offset == 2


def test_verification_off_appends_as_before_and_entries_expire(fs, clock):
    log = open_log(fs, clock)
    state = log.producer_state
    assert txn_append(log, None, seq=0, pid=A + 1).base_offset == 0  # no guard asked for: not checked
    state.start_verification(A, 0, 0, clock.time_ms())
    clock.advance(1000)
    state.remove_expired(clock.time_ms(), expiration_ms=5000)
    assert A in state.verifications
    clock.advance(5000)
    state.remove_expired(clock.time_ms(), expiration_ms=5000)
    assert A not in state.verifications
