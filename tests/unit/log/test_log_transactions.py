"""Transactions in the partition log: producer state, markers, `.txnindex`, last stable offset, recovery."""

from __future__ import annotations

import struct

import pytest
from kio.schema.errors import ErrorCode
from log_helpers import PARTITION_DIR, append, make_batch, open_log

from broker_runtime.errors import KafkaError
from broker_runtime.log.config import LogConfig
from broker_runtime.log.txn_index import AbortedTxn, parse_entries
from broker_runtime.protocol.records import read_header
from broker_runtime.txn.control import marker_batch

A, B = 1000, 2000  # producer ids
TXN_INDEX = PARTITION_DIR / "00000000000000000000.txnindex"


def txn_append(log, pid, n=1, *, seq, epoch=0):
    return append(log, n, producer_id=pid, producer_epoch=epoch, base_sequence=seq, transactional=True)


def marker(log, pid, *, committed, epoch=0, coordinator_epoch=0):
    batch, header = marker_batch(pid, epoch, coordinator_epoch, committed, log.clock.time_ms())
    return log.append_as_leader(batch, header, 0, log.clock.time_ms())


def test_a_transactional_batch_opens_a_transaction_that_holds_the_lso(fs, clock):
    log = open_log(fs, clock)
    append(log, 2)  # offsets 0-1, plain
    txn_append(log, A, 3, seq=0)  # 2-4
    append(log, 1)  # 5
    assert log.producer_state.producers[A].current_txn_first_offset == 2
    assert log.last_stable_offset(log.log_end_offset) == 2
    assert log.last_stable_offset(1) == 1  # never above the high watermark


def test_commit_moves_the_lso_once_the_high_watermark_passes_the_marker(fs, clock):
    log = open_log(fs, clock)
    txn_append(log, A, 2, seq=0)  # 0-1
    result = marker(log, A, committed=True)  # 2
    assert result.base_offset == 2
    assert log.producer_state.producers[A].current_txn_first_offset is None
    assert log.last_stable_offset(2) == 0  # the marker is not replicated yet: still unstable
    assert log.last_stable_offset(3) == 3
    assert not fs.exists(TXN_INDEX)  # commits are not indexed


def test_abort_writes_kafkas_aborted_txn_entry(fs, clock):
    log = open_log(fs, clock)
    txn_append(log, A, 2, seq=0)  # 0-1
    txn_append(log, B, 1, seq=0)  # 2
    marker(log, A, committed=False)  # 3: B is still open, so the LSO recorded is B's first offset
    raw = bytes(fs.files[TXN_INDEX].data)
    assert raw == struct.pack(">hqqqq", 0, A, 0, 3, 2)
    assert parse_entries(raw) == [AbortedTxn(A, 0, 3, 2)]
    marker(log, B, committed=False)  # 4: nothing else open, LSO = marker + 1
    assert log.aborted_transactions(0, 5) == [AbortedTxn(A, 0, 3, 2), AbortedTxn(B, 2, 4, 5)]
    assert log.aborted_transactions(4, 5) == [AbortedTxn(A, 0, 3, 2), AbortedTxn(B, 2, 4, 5)][1:]
    assert log.last_stable_offset(5) == 5


def test_collect_stops_at_an_entry_whose_lso_reaches_the_upper_bound(fs, clock):
    log = open_log(fs, clock)
    txn_append(log, A, 1, seq=0)  # 0
    marker(log, A, committed=False)  # 1, lso 2
    txn_append(log, A, 1, seq=1)  # 2
    marker(log, A, committed=False)  # 3, lso 4
    assert log.aborted_transactions(0, 2) == [AbortedTxn(A, 0, 1, 2)]
    assert log.aborted_transactions(2, 10) == [AbortedTxn(A, 2, 3, 4)]


def test_fencing_and_transaction_state_errors(fs, clock):
    log = open_log(fs, clock)
    txn_append(log, A, 1, seq=0, epoch=3)
    with pytest.raises(KafkaError) as raised:
        txn_append(log, A, 1, seq=1, epoch=2)
    assert raised.value.error_code == ErrorCode.invalid_producer_epoch
    with pytest.raises(KafkaError) as raised:  # a plain batch while the producer's transaction is open
        append(log, 1, producer_id=A, producer_epoch=3, base_sequence=1)
    assert raised.value.error_code == ErrorCode.invalid_txn_state
    with pytest.raises(KafkaError) as raised:
        marker(log, A, committed=True, epoch=2)
    assert raised.value.error_code == ErrorCode.invalid_producer_epoch
    marker(log, A, committed=True, epoch=3, coordinator_epoch=7)
    with pytest.raises(KafkaError) as raised:  # a deposed transaction coordinator
        marker(log, A, committed=False, epoch=3, coordinator_epoch=6)
    assert raised.value.error_code == ErrorCode.transaction_coordinator_fenced
    end = log.log_end_offset
    marker(log, A, committed=False, epoch=4, coordinator_epoch=7)  # a bumped epoch (fencing abort): written
    assert log.log_end_offset == end + 1


def test_a_marker_without_an_open_transaction_is_written_and_ends_nothing(fs, clock):
    log = open_log(fs, clock)
    marker(log, A, committed=False)
    assert log.log_end_offset == 1
    assert log.last_stable_offset(1) == 1
    assert not fs.exists(TXN_INDEX)


def test_followers_build_the_same_state_and_index_from_replicated_batches(fs, clock):
    leader = open_log(fs, clock)
    txn_append(leader, A, 2, seq=0)
    txn_append(leader, B, 1, seq=0)
    marker(leader, A, committed=False)
    data = leader.read(0, 1 << 20, 2**62, True)
    follower = type(leader).open(fs, PARTITION_DIR.parent / "orders-1", "orders", 1, LogConfig(), clock)
    follower.append_as_follower(data)
    assert follower.aborted_transactions(0, 10) == [AbortedTxn(A, 0, 3, 2)]
    assert follower.last_stable_offset(follower.log_end_offset) == 2  # B is open
    assert follower.producer_state.ongoing == {2: B}


def test_clean_restart_keeps_open_transactions_and_the_index(fs, clock):
    log = open_log(fs, clock)
    txn_append(log, A, 1, seq=0)  # 0
    marker(log, A, committed=False)  # 1
    txn_append(log, B, 2, seq=0)  # 2-3
    log.close()
    reopened = open_log(fs, clock, recovery_point=4, clean_shutdown=True)
    assert reopened.producer_state.producers[B].current_txn_first_offset == 2
    assert reopened.last_stable_offset(4) == 2
    assert reopened.aborted_transactions(0, 4) == [AbortedTxn(A, 0, 1, 2)]
    marker(reopened, B, committed=True)
    assert reopened.last_stable_offset(5) == 5


def test_unclean_shutdown_rebuilds_the_txn_index_of_recovered_segments(fs, clock):
    config = LogConfig(segment_bytes=400)
    log = open_log(fs, clock, config)
    txn_append(log, A, 1, seq=0)
    for i in range(6):  # enough to roll a few segments with a transaction spanning them
        txn_append(log, B, 1, seq=i)
        append(log, 1)
    marker(log, B, committed=False)
    marker(log, A, committed=False)
    assert len(log.segments) > 2
    before = log.aborted_transactions(0, 2**62)
    assert [t.producer_id for t in before] == [B, A]
    log.flush()
    for path in [p for p in fs.files if p.name.endswith(".txnindex")]:
        fs.unlink(path)  # lost: recovery from the start must rebuild them
    reopened = open_log(fs, clock, config, recovery_point=0)
    assert reopened.aborted_transactions(0, 2**62) == before


def test_power_cut_loses_unflushed_markers_and_their_index_entries(fs, clock):
    log = open_log(fs, clock)
    txn_append(log, A, 1, seq=0)
    log.flush()
    marker(log, A, committed=False)  # not flushed
    fs.crash()
    reopened = open_log(fs, clock, recovery_point=1)
    assert reopened.log_end_offset == 1
    assert reopened.aborted_transactions(0, 10) == []
    assert reopened.producer_state.ongoing == {0: A}  # the transaction is open again: the coordinator resends
    marker(reopened, A, committed=False)
    assert reopened.aborted_transactions(0, 10) == [AbortedTxn(A, 0, 1, 2)]


def test_flushed_markers_survive_a_power_cut_with_their_index(fs, clock):
    config = LogConfig(segment_bytes=300)
    log = open_log(fs, clock, config)
    txn_append(log, A, 1, seq=0)
    marker(log, A, committed=False)
    for _ in range(4):
        append(log, 1)  # rolls: the segment with the marker is no longer active
    log.flush()
    fs.crash(drop_unsynced_dir_entries=True)
    reopened = open_log(fs, clock, config, recovery_point=log.recovery_point)
    assert reopened.aborted_transactions(0, 100) == [AbortedTxn(A, 0, 1, 2)]


def test_truncation_drops_index_entries_and_reopens_the_transaction(fs, clock):
    log = open_log(fs, clock)
    txn_append(log, A, 1, seq=0)  # 0
    append(log, 1)  # 1
    marker(log, A, committed=False)  # 2
    log.truncate_to(2)
    assert log.aborted_transactions(0, 10) == []
    assert not fs.exists(TXN_INDEX)
    assert log.producer_state.ongoing == {0: A}
    assert log.last_stable_offset(2) == 0


def test_retention_deletes_the_txn_index_with_its_segment(fs, clock):
    config = LogConfig(segment_bytes=300)
    log = open_log(fs, clock, config)
    txn_append(log, A, 1, seq=0)
    marker(log, A, committed=False)
    for _ in range(4):
        append(log, 1)
    assert fs.exists(TXN_INDEX)
    log.delete_records_before(log.segments[1].base_offset)
    for segment in log.delete_old_segments(clock.time_ms()):
        segment.delete()
    assert not fs.exists(TXN_INDEX)


def test_lso_is_never_below_the_log_start(fs, clock):
    log = open_log(fs, clock)
    txn_append(log, A, 1, seq=0)  # 0, open
    append(log, 3)  # 1-3
    log.delete_records_before(2)
    assert log.last_stable_offset(4) == 2


def test_coordinator_batches_are_fenced_by_epoch_but_not_sequenced(fs, clock):
    """Transactional offset commits: the group coordinator writes each as its producer's batch with base
    sequence 0 (Kafka's AppendOrigin.COORDINATOR); none is a duplicate of another."""
    log = open_log(fs, clock)

    def coordinator_append(epoch):
        batch = make_batch(1, producer_id=A, producer_epoch=epoch, base_sequence=0, transactional=True)
        return log.append_as_leader(batch, read_header(batch), 0, clock.time_ms(), from_coordinator=True)

    assert coordinator_append(2).base_offset == 0
    assert coordinator_append(2).base_offset == 1  # same sequence again: appended, not a retry
    assert log.last_stable_offset(2) == 0
    with pytest.raises(KafkaError) as raised:
        coordinator_append(1)
    assert raised.value.error_code == ErrorCode.invalid_producer_epoch
    marker(log, A, committed=True, epoch=2)
    assert log.last_stable_offset(3) == 3


def test_an_index_entry_flushed_with_its_active_segment_survives_a_power_cut_after_the_roll(fs, clock):
    """The recovery point may reach the end of the active segment (a flush at the log end) and the segment then
    roll right there: recovery never re-reads it again, so its `.txnindex` (contents and name) must be durable
    by then, as Kafka's LogSegment.flush fsyncs the active segment's indexes with its log."""
    config = LogConfig(segment_bytes=300)
    log = open_log(fs, clock, config)
    append(log, 1)  # 0
    log.roll()
    log.flush()  # the active segment (base 1) and its name are durable; it has no .txnindex yet
    txn_append(log, A, 1, seq=0)  # 1
    marker(log, A, committed=False)  # 2: creates the active segment's .txnindex
    log.flush()  # recovery point = log end = 3, in the active segment
    assert log.recovery_point == 3
    log.roll()  # at the recovery point (segment.ms, or a full segment at the next append)
    append(log, 1)  # 3
    log.flush()  # recovery point 4: the segment with the marker is below it, never re-read by recovery
    fs.crash(drop_unsynced_dir_entries=True)
    reopened = open_log(fs, clock, config, recovery_point=log.recovery_point)
    assert reopened.aborted_transactions(0, 100) == [AbortedTxn(A, 1, 2, 3)]
