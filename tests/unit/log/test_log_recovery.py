"""Crash recovery: one named test per corruption kind, on the fault-injecting filesystem."""

from __future__ import annotations

from log_helpers import PARTITION_DIR, append, offsets_in, open_log

from broker_runtime.log.config import LogConfig

SEGMENT = PARTITION_DIR / "00000000000000000000.log"
INDEX = PARTITION_DIR / "00000000000000000000.index"
TIME_INDEX = PARTITION_DIR / "00000000000000000000.timeindex"


def _all_offsets(log):
    return [b for b, _ in offsets_in(log.read(log.log_start_offset, 1 << 30, 2**62, True))]


def test_unflushed_appends_are_lost_and_log_reopens_at_last_flush(fs, clock):
    log = open_log(fs, clock)
    for _ in range(3):
        append(log, 2)
    log.flush()
    for _ in range(3):
        append(log, 2)
    fs.crash()
    reopened = open_log(fs, clock, recovery_point=6)
    assert reopened.log_end_offset == 6
    assert _all_offsets(reopened) == [0, 2, 4]
    assert append(reopened, 1).base_offset == 6


def test_half_written_batch_is_truncated(fs, clock):
    log = open_log(fs, clock)
    append(log, 2)
    log.flush()
    flushed_size = log.segments[0].size
    append(log, 2, value_size=500)
    fs.crash(keep_unsynced_bytes=100)  # the second batch made it to disk only in part
    assert len(fs.files[SEGMENT].data) == flushed_size + 100
    reopened = open_log(fs, clock, recovery_point=0)
    assert reopened.log_end_offset == 2
    assert _all_offsets(reopened) == [0]
    assert len(fs.files[SEGMENT].data) == reopened.segments[0].size


def test_garbage_after_last_batch_is_truncated(fs, clock):
    log = open_log(fs, clock)
    append(log, 2)
    append(log, 2)
    log.close()
    good_size = len(fs.files[SEGMENT].data)
    fs.files[SEGMENT].data += b"\xde\xad\xbe\xef" * 40
    reopened = open_log(fs, clock, recovery_point=0)
    assert reopened.log_end_offset == 4
    assert len(fs.files[SEGMENT].data) == good_size


def test_zero_filled_tail_is_truncated(fs, clock):
    log = open_log(fs, clock)
    append(log, 2)
    log.close()
    fs.files[SEGMENT].data += bytes(4096)  # preallocated-looking space after a crash
    reopened = open_log(fs, clock, recovery_point=0)
    assert reopened.log_end_offset == 2
    assert append(reopened, 1).base_offset == 2


def test_bad_crc_in_the_middle_truncates_from_there_and_drops_later_segments(fs, clock):
    log = open_log(fs, clock, LogConfig(segment_bytes=500))
    for _ in range(12):
        append(log, 1, value_size=100)
    assert len(log.segments) >= 3
    first_size = log.segments[0].size
    log.close()
    batches = offsets_in(bytes(fs.files[SEGMENT].data))
    assert len(batches) >= 2
    corrupt_at = len(fs.files[SEGMENT].data) // 2 + 70  # inside the records of a middle batch
    fs.files[SEGMENT].data[corrupt_at] ^= 0xFF
    reopened = open_log(fs, clock, LogConfig(segment_bytes=500), recovery_point=0)
    assert len(reopened.segments) == 1
    assert reopened.segments[0].size < first_size
    assert reopened.log_end_offset == len(offsets_in(bytes(fs.files[SEGMENT].data)))
    assert [n for n in fs.listdir(PARTITION_DIR) if n.endswith(".log")] == ["00000000000000000000.log"]


def test_corrupt_length_field_truncates(fs, clock):
    log = open_log(fs, clock)
    append(log, 1)
    append(log, 1)
    log.close()
    second = offsets_in(bytes(fs.files[SEGMENT].data))
    assert len(second) == 2
    first_size = len(fs.files[SEGMENT].data) // 2
    fs.files[SEGMENT].data[first_size + 8 : first_size + 12] = b"\x00\x00\x00\x05"  # impossible batch length
    reopened = open_log(fs, clock, recovery_point=0)
    assert reopened.log_end_offset == 1


def test_offsets_going_backwards_truncate(fs, clock):
    log = open_log(fs, clock)
    append(log, 3)
    append(log, 3)
    log.close()
    size = len(fs.files[SEGMENT].data) // 2
    fs.files[SEGMENT].data[size : size + 8] = (1).to_bytes(8, "big")  # base offset 1 < previous next offset 3
    reopened = open_log(fs, clock, recovery_point=0)
    assert reopened.log_end_offset == 3


def test_missing_index_is_rebuilt_after_clean_shutdown(fs, clock):
    config = LogConfig(index_interval_bytes=100)
    log = open_log(fs, clock, config)
    for _ in range(50):
        append(log, 1, value_size=50)
    log.close()
    entries = bytes(fs.files[INDEX].data)
    assert entries
    fs.unlink(INDEX)
    reopened = open_log(fs, clock, config, recovery_point=50, clean_shutdown=True)
    assert reopened.log_end_offset == 50
    assert _all_offsets(reopened) == list(range(50))
    reopened.close()
    assert bytes(fs.files[INDEX].data) == entries


def test_corrupt_index_is_rebuilt(fs, clock):
    config = LogConfig(index_interval_bytes=100)
    log = open_log(fs, clock, config)
    for _ in range(50):
        append(log, 1, value_size=50)
    log.close()
    entries = bytes(fs.files[INDEX].data)
    fs.files[INDEX].data[-4:] = (10**9).to_bytes(4, "big")  # last entry points past the end of the log
    reopened = open_log(fs, clock, config, recovery_point=50, clean_shutdown=True)
    assert offsets_in(reopened.read(40, 1 << 20, 100, False))[0] == (40, 40)
    reopened.close()
    assert bytes(fs.files[INDEX].data) == entries


def test_index_with_partial_entry_is_rebuilt(fs, clock):
    config = LogConfig(index_interval_bytes=100)
    log = open_log(fs, clock, config)
    for _ in range(50):
        append(log, 1, value_size=50)
    log.close()
    entries = bytes(fs.files[INDEX].data)
    del fs.files[INDEX].data[-3:]
    reopened = open_log(fs, clock, config, recovery_point=50, clean_shutdown=True)
    assert reopened.log_end_offset == 50
    reopened.close()
    assert bytes(fs.files[INDEX].data) == entries


def test_missing_time_index_is_rebuilt(fs, clock):
    log = open_log(fs, clock, LogConfig(index_interval_bytes=1))
    for i in range(10):
        append(log, 1, timestamp_ms=1000 + i)
    log.close()
    fs.unlink(TIME_INDEX)
    reopened = open_log(fs, clock, LogConfig(index_interval_bytes=1), recovery_point=10, clean_shutdown=True)
    assert reopened.offset_for_timestamp(1005) == (5, 1005)


def test_preallocated_index_of_active_segment_reads_back(fs, clock):
    config = LogConfig(index_interval_bytes=100, segment_index_bytes=4096)
    log = open_log(fs, clock, config)
    for _ in range(20):
        append(log, 1, value_size=50)
    log.flush()  # writes entries into the preallocated (zero-filled) file
    assert len(fs.files[INDEX].data) == 4096
    fs.crash()
    reopened = open_log(fs, clock, config, recovery_point=20)
    assert reopened.log_end_offset == 20
    assert offsets_in(reopened.read(13, 1 << 20, 100, False))[0] == (13, 13)


def test_recovery_starts_at_segment_holding_recovery_point(fs, clock):
    config = LogConfig(segment_bytes=600)
    log = open_log(fs, clock, config)
    for _ in range(12):
        append(log, 1, value_size=100)
    log.flush()
    bases = [s.base_offset for s in log.segments]
    assert len(bases) >= 3
    # Corrupt the first segment: below the recovery point it is trusted, not re-read.
    fs.files[SEGMENT].data[80] ^= 0xFF
    fs.crash()
    reopened = open_log(fs, clock, config, recovery_point=bases[-1])
    assert reopened.log_end_offset == 12
    assert [s.base_offset for s in reopened.segments] == bases


def test_leader_epochs_rebuilt_from_batches_when_checkpoint_lost(fs, clock):
    log = open_log(fs, clock)
    append(log, 2, epoch=3)
    append(log, 2, epoch=5)
    log.flush()
    fs.unlink(PARTITION_DIR / "leader-epoch-checkpoint")
    fs.crash()
    reopened = open_log(fs, clock, recovery_point=0)
    assert reopened.leader_epochs.entries == [(3, 0), (5, 2)]


def test_epochs_above_recovered_end_are_dropped(fs, clock):
    log = open_log(fs, clock)
    append(log, 2, epoch=1)
    log.flush()
    append(log, 2, epoch=2)
    fs.crash()
    reopened = open_log(fs, clock, recovery_point=2)
    assert reopened.log_end_offset == 2
    assert reopened.leader_epochs.entries == [(1, 0)]
