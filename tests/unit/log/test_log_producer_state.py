"""Idempotent producer state: duplicates, sequence gaps, epochs, wrap-around, snapshots."""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c
from kio.schema.errors import ErrorCode
from log_helpers import PARTITION_DIR, append, make_batch, open_log

from broker_runtime.errors import KafkaError
from broker_runtime.log.config import LogConfig
from broker_runtime.protocol.records import read_header
from broker_runtime.txn.producer_state import (
    BatchMetadata,
    CorruptSnapshotError,
    ProducerStateManager,
    parse_snapshot,
)

PID = 1000


def _record(state: ProducerStateManager, epoch: int, first_seq: int, count: int, first_offset: int) -> None:
    last_seq = (first_seq + count - 1) % 2**31
    assert state.check(PID, epoch, first_seq, last_seq) is None
    state.update(PID, epoch, first_seq, last_seq, first_offset, first_offset + count - 1, 1234)


def _error(state: ProducerStateManager, epoch: int, first_seq: int, last_seq: int) -> ErrorCode:
    with pytest.raises(KafkaError) as info:
        state.check(PID, epoch, first_seq, last_seq)
    return info.value.error_code


def test_unknown_producer_may_start_at_any_sequence():
    state = ProducerStateManager()
    assert state.check(PID, 0, 42, 44) is None


def test_in_order_batches_are_accepted():
    state = ProducerStateManager()
    _record(state, 0, 0, 3, 0)
    _record(state, 0, 3, 2, 3)
    assert state.producers[PID].last_seq == 4


def test_retry_of_any_of_last_five_batches_is_a_duplicate():
    state = ProducerStateManager()
    for n in range(6):
        _record(state, 0, 2 * n, 2, 10 * n)
    for n in range(1, 6):
        assert state.check(PID, 0, 2 * n, 2 * n + 1) == BatchMetadata(
            2 * n, 2 * n + 1, 10 * n, 10 * n + 1, 1234
        )
    # The oldest batch fell out of the window: it is now just out of order.
    assert _error(state, 0, 0, 1) == ErrorCode.out_of_order_sequence_number


def test_sequence_gap_is_out_of_order():
    state = ProducerStateManager()
    _record(state, 0, 0, 2, 0)
    assert _error(state, 0, 3, 3) == ErrorCode.out_of_order_sequence_number


def test_overlapping_but_different_range_is_out_of_order():
    state = ProducerStateManager()
    _record(state, 0, 0, 4, 0)
    assert _error(state, 0, 2, 5) == ErrorCode.out_of_order_sequence_number


def test_lower_epoch_is_invalid_producer_epoch():
    state = ProducerStateManager()
    _record(state, 3, 0, 1, 0)
    assert _error(state, 2, 1, 1) == ErrorCode.invalid_producer_epoch
    assert _error(state, 2, 0, 0) == ErrorCode.invalid_producer_epoch  # even a would-be duplicate


def test_new_epoch_must_start_at_zero():
    state = ProducerStateManager()
    _record(state, 0, 0, 5, 0)
    assert _error(state, 1, 5, 5) == ErrorCode.out_of_order_sequence_number
    _record(state, 1, 0, 1, 5)
    assert state.producers[PID].epoch == 1
    assert len(state.producers[PID].batches) == 1  # the old epoch's batches are forgotten


def test_sequence_wraps_at_int32_max():
    state = ProducerStateManager()
    _record(state, 0, 2**31 - 2, 1, 0)
    _record(state, 0, 2**31 - 1, 1, 1)
    _record(state, 0, 0, 1, 2)
    assert state.producers[PID].last_seq == 0


def test_batch_spanning_the_wrap():
    state = ProducerStateManager()
    _record(state, 0, 2**31 - 2, 4, 0)  # sequences 2**31-2, 2**31-1, 0, 1
    assert state.producers[PID].last_seq == 1
    assert state.check(PID, 0, 2**31 - 2, 1) is not None
    _record(state, 0, 2, 1, 4)


def test_non_transactional_write_during_transaction_is_invalid_txn_state():
    state = ProducerStateManager()
    state.update(PID, 0, 0, 0, 0, 0, 1, is_transactional=True)
    assert state.producers[PID].current_txn_first_offset == 0
    assert _error(state, 0, 1, 1) == ErrorCode.invalid_txn_state
    state.update_marker(PID, 0, 1, 2)
    assert state.producers[PID].current_txn_first_offset is None
    assert state.check(PID, 0, 1, 1) is None


def test_expired_producers_are_forgotten():
    state = ProducerStateManager()
    state.update(PID, 0, 0, 0, 0, 0, 1_000)
    state.update(PID + 1, 0, 0, 0, 1, 1, 5_000)
    assert state.remove_expired(now_ms=1_000 + 86_400_000) == 1
    assert list(state.producers) == [PID + 1]


def test_snapshot_round_trips_all_five_batches():
    state = ProducerStateManager()
    for n in range(7):
        _record(state, 2, 3 * n, 3, 100 + 3 * n)
    state.update(PID + 1, 0, 0, 0, 200, 200, 1, is_transactional=True)
    restored = ProducerStateManager()
    restored.load_snapshot(state.to_snapshot(), 201)
    assert restored.producers[PID].batches == state.producers[PID].batches
    assert restored.producers[PID].epoch == 2
    assert restored.producers[PID + 1].current_txn_first_offset == 200
    assert restored.map_end_offset == 201


def test_snapshot_uses_kafka_v1_layout():
    state = ProducerStateManager()
    state.update(PID, 7, 10, 12, 50, 52, 999)
    data = state.to_snapshot()
    version, crc, count = struct.unpack_from(">hIi", data)
    assert (version, count) == (1, 1)
    assert crc == crc32c(data[6:])  # CRC32C of everything after the crc field
    entry = struct.unpack_from(">qhiqiqiq", data, 10)
    # producer id, epoch, last seq, last offset, offset delta, timestamp, coordinator epoch, txn first offset
    assert entry == (PID, 7, 12, 52, 2, 999, -1, -1)
    assert len(data) == 10 + 46


def test_corrupt_snapshot_is_rejected():
    state = ProducerStateManager()
    state.update(PID, 0, 0, 0, 0, 0, 1)
    data = bytearray(state.to_snapshot())
    data[-1] ^= 1
    with pytest.raises(CorruptSnapshotError):
        list(parse_snapshot(bytes(data)))
    with pytest.raises(CorruptSnapshotError):
        list(parse_snapshot(b"\x00\x01"))


# --- through PartitionLog ------------------------------------------------------------------------------------


def _produce(log, seq: int, n: int = 1, epoch: int = 0):
    batch = make_batch(n, producer_id=PID, producer_epoch=epoch, base_sequence=seq)
    return log.append_as_leader(batch, read_header(batch), 0, log.clock.time_ms())


def test_log_returns_original_offsets_for_a_retried_batch(fs, clock):
    log = open_log(fs, clock)
    first = _produce(log, 0, 3)
    append(log, 2)  # someone else's batch in between
    retry = _produce(log, 0, 3)
    assert retry.duplicate and (retry.base_offset, retry.last_offset) == (
        first.base_offset,
        first.last_offset,
    )
    assert log.log_end_offset == 5


def test_log_rejects_out_of_order_without_writing(fs, clock):
    log = open_log(fs, clock)
    _produce(log, 0, 2)
    size = log.size_bytes()
    with pytest.raises(KafkaError) as info:
        _produce(log, 5)
    assert info.value.error_code == ErrorCode.out_of_order_sequence_number
    assert (log.size_bytes(), log.log_end_offset) == (size, 2)


def test_producer_state_survives_clean_restart_via_snapshot(fs, clock):
    log = open_log(fs, clock)
    for n in range(5):
        _produce(log, 2 * n, 2)
    log.close()
    assert "00000000000000000010.snapshot" in fs.listdir(PARTITION_DIR)
    reopened = open_log(fs, clock, recovery_point=10, clean_shutdown=True)
    assert _produce(reopened, 4, 2).duplicate
    assert _produce(reopened, 10).base_offset == 10


def test_producer_state_rebuilt_after_crash_from_snapshot_and_replay(fs, clock):
    config = LogConfig(segment_bytes=400)
    log = open_log(fs, clock, config)
    for n in range(10):
        _produce(log, n)
    assert len(log.segments) > 1  # rolls took snapshots
    snapshots = [n for n in fs.listdir(PARTITION_DIR) if n.endswith(".snapshot")]
    assert snapshots
    log.flush()
    fs.crash()
    reopened = open_log(fs, clock, config, recovery_point=0)
    assert _produce(reopened, 9).duplicate
    assert _produce(reopened, 10).base_offset == 10


def test_producer_state_rebuilt_without_any_snapshot(fs, clock):
    log = open_log(fs, clock)
    for n in range(3):
        _produce(log, n)
    log.flush()
    fs.crash()
    reopened = open_log(fs, clock, recovery_point=0)
    assert _produce(reopened, 2).duplicate
    with pytest.raises(KafkaError):
        _produce(reopened, 7)


def test_corrupt_snapshot_falls_back_to_replay(fs, clock):
    log = open_log(fs, clock)
    for n in range(3):
        _produce(log, n)
    log.close()
    snapshot = PARTITION_DIR / "00000000000000000003.snapshot"
    fs.files[snapshot].data[12] ^= 0xFF
    reopened = open_log(fs, clock, recovery_point=3, clean_shutdown=True)
    assert _produce(reopened, 2).duplicate
    assert not fs.exists(snapshot)


def test_snapshots_above_log_end_are_discarded_on_truncate(fs, clock):
    log = open_log(fs, clock, LogConfig(segment_bytes=300))
    for n in range(8):
        _produce(log, n)
    log.truncate_to(2)
    offsets = sorted(int(n[:20]) for n in fs.listdir(PARTITION_DIR) if n.endswith(".snapshot"))
    assert all(o <= 2 for o in offsets)
    assert _produce(log, 2).base_offset == 2
