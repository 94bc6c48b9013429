"""The log cleaner on real segments (in the fault-injecting filesystem and in a temp dir): which records stay,
offsets and producer fields preserved, tombstones and their delete horizon, what may be cleaned, checkpoints."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from log_helpers import LOG_DIR, PARTITION_DIR

from broker_runtime.log import checkpoint
from broker_runtime.log.cleaner import (
    CLEANER_OFFSET_CHECKPOINT,
    CleanerConfig,
    LogCleaner,
    OffsetMap,
    Throttler,
    group_segments_by_size,
)
from broker_runtime.log.config import LogConfig
from broker_runtime.log.fs import RealFileSystem
from broker_runtime.log.partition_log import PartitionLog
from broker_runtime.protocol.compression import CODEC_GZIP, CODEC_LZ4, CODEC_SNAPPY, CODEC_ZSTD
from broker_runtime.protocol.records import (
    DELETE_HORIZON_FLAG,
    build_batch,
    decode_records,
    iter_headers,
    read_header,
)

DAY = 86_400_000
COMPACT = LogConfig(cleanup_policy="compact", segment_bytes=1024, min_cleanable_dirty_ratio=0.0)
KEY = ("orders", 0)


def open_log(
    fs, clock, config: LogConfig = COMPACT, directory: Path = PARTITION_DIR, **kwargs
) -> PartitionLog:
    return PartitionLog.open(fs, directory, "orders", 0, config, clock, **kwargs)


def produce(plog: PartitionLog, records, **kwargs):
    """Append one batch of (key, value) records; returns (base offset, last offset)."""
    batch = build_batch(records, timestamp_ms=kwargs.pop("timestamp_ms", plog.clock.time_ms()), **kwargs)
    result = plog.append_as_leader(batch, read_header(batch), 0, plog.clock.time_ms())
    return result.base_offset, result.last_offset


def cleaner_for(
    fs, clock, plog: PartitionLog, log_dir: Path = LOG_DIR, high_watermark=None, **config
) -> LogCleaner:
    return LogCleaner(
        fs, clock, CleanerConfig(**config), logs=lambda: {KEY: (plog, log_dir)},
        high_watermark=lambda key: high_watermark, run_on_owner=lambda fn: fn(),
        on_io_error=lambda d, what, e: plog.fail(what, e), log_dirs=[log_dir],
    )  # fmt: skip


def contents(plog: PartitionLog) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record from the log start, read as a consumer would."""
    data = plog.read(plog.log_start_offset, 1 << 30, plog.log_end_offset, True)
    return [(r.offset, r.key, r.value) for h in iter_headers(data) for r in decode_records(data, h)]


def latest_values(history: list[tuple[int, bytes, bytes | None]]) -> dict[bytes, tuple[int, bytes | None]]:
    latest: dict[bytes, tuple[int, bytes | None]] = {}
    for offset, key, value in history:
        latest[key] = (offset, value)
    return latest


def fill(
    plog: PartitionLog, rounds: int, keys: int = 5, value_size: int = 40
) -> list[tuple[int, bytes, bytes]]:
    """`rounds` values for each of `keys` keys, one record per batch, several segments; then a roll so that
    everything written is in non-active segments."""
    history = []
    for r in range(rounds):
        for k in range(keys):
            key, value = b"k%d" % k, b"%d-" % r + b"v" * value_size
            base, _ = produce(plog, [(key, value)])
            history.append((base, key, value))
    plog.roll()
    return history


def test_latest_value_of_each_key_survives_with_offsets_kept(fs, clock):
    plog = open_log(fs, clock)
    history = fill(plog, rounds=10)
    end_before = plog.log_end_offset
    size_before = plog.size_bytes()
    assert cleaner_for(fs, clock, plog).clean_now() == 1
    after = contents(plog)
    expected = latest_values(history)
    assert [(o, k, v) for o, k, v in after] == sorted((o, k, v) for k, (o, v) in expected.items())
    assert plog.log_end_offset == end_before  # offsets never renumbered
    assert plog.size_bytes() < size_before / 5
    # reads from any offset, including one in a gap, find the next record kept
    first_kept = after[0][0]
    gap = next(o for o in range(first_kept) if o not in {a[0] for a in after}) if first_kept else None
    if gap is not None:
        data = plog.read(gap, 1 << 20, plog.log_end_offset, True)
        assert next(iter_headers(data)).base_offset == first_kept
    # and the log reopens to the same contents, indexes and all
    plog.close()
    reopened = open_log(fs, clock, clean_shutdown=True, recovery_point=end_before)
    assert contents(reopened) == after
    assert reopened.log_end_offset == end_before


def test_active_segment_is_never_cleaned(fs, clock):
    plog = open_log(fs, clock, replace(COMPACT, segment_bytes=1 << 20))
    for r in range(20):
        produce(plog, [(b"same", b"%d" % r)])
    assert len(plog.segments) == 1
    assert cleaner_for(fs, clock, plog).clean_now() == 0
    assert len(contents(plog)) == 20


def test_high_watermark_bounds_cleaning(fs, clock):
    plog = open_log(fs, clock)
    fill(plog, rounds=10)
    cleaner = cleaner_for(fs, clock, plog, high_watermark=0)
    assert cleaner.clean_now() == 0
    assert len(contents(plog)) == 50


def test_tombstones_stay_for_delete_retention_ms_after_the_pass_that_reached_them(fs, clock):
    config = replace(COMPACT, delete_retention_ms=DAY)
    plog = open_log(fs, clock, config)
    fill(plog, rounds=4)
    tombstone, _ = produce(plog, [(b"k1", None)])
    for r in range(20):  # enough later data that the tombstone's segment is not the active one
        produce(plog, [(b"k%d" % (2 + r % 3), b"later-%d" % r + b"x" * 40)])
    plog.roll()
    cleaner = cleaner_for(fs, clock, plog)
    assert cleaner.clean_now() == 1
    kept = {o: (k, v) for o, k, v in contents(plog)}
    assert kept[tombstone] == (b"k1", None)
    assert not any(k == b"k1" and v is not None for k, v in kept.values())
    batch = _batch_holding(plog, tombstone)
    assert batch.attributes & DELETE_HORIZON_FLAG
    assert batch.base_timestamp == clock.time_ms() + DAY

    # Before the horizon, another pass (new dirty data) keeps it; after, the next pass removes it.
    produce(plog, [(b"k2", b"newer")])
    plog.roll()
    clock.advance(DAY - 1)
    assert cleaner.clean_now() == 1
    assert tombstone in {o for o, _, _ in contents(plog)}
    produce(plog, [(b"k3", b"newest")])
    plog.roll()
    clock.advance(1)
    assert cleaner.clean_now() == 1
    assert tombstone not in {o for o, _, _ in contents(plog)}
    assert b"k1" not in {k for _, k, _ in contents(plog)}


def _batch_holding(plog: PartitionLog, offset: int):
    data = plog.read(offset, 1 << 20, plog.log_end_offset, True)
    return next(h for h in iter_headers(data) if h.base_offset <= offset <= h.last_offset)


@pytest.mark.parametrize("codec", [CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD])
def test_compressed_batches_are_rebuilt_with_their_codec_and_offsets(fs, clock, codec):
    plog = open_log(fs, clock)
    history = []
    for r in range(6):
        records = [(b"k%d" % k, b"%d-%d" % (r, k) + b"z" * 30) for k in range(4)]
        base, _ = produce(plog, records, codec=codec)
        history += [(base + i, k, v) for i, (k, v) in enumerate(records)]
    # a batch whose middle record is the only latest one: rebuilt keeping its base and last offsets
    base, _last = produce(plog, [(b"k0", b"a"), (b"solo", b"kept"), (b"k0", b"b")], codec=codec)
    history += [(base, b"k0", b"a"), (base + 1, b"solo", b"kept"), (base + 2, b"k0", b"b")]
    produce(plog, [(b"k0", b"final")], codec=codec)
    history.append((base + 3, b"k0", b"final"))
    plog.roll()
    assert cleaner_for(fs, clock, plog).clean_now() == 1
    expected = sorted((o, k, v) for k, (o, v) in latest_values(history).items())
    assert contents(plog) == expected
    rebuilt = _batch_holding(plog, base + 1)
    assert (rebuilt.base_offset, rebuilt.last_offset, rebuilt.record_count) == (base, base + 2, 1)
    assert rebuilt.codec == codec


def test_idempotent_producer_keeps_its_last_batch_and_its_sequence(fs, clock):
    plog = open_log(fs, clock)
    pid, epoch = 4000, 3
    sequence = 0
    for r in range(8):
        produce(plog, [(b"k", b"%d" % r)], producer_id=pid, producer_epoch=epoch, base_sequence=sequence)
        sequence += 1
    # The producer's last batch holds only an old value of a key rewritten later by another producer.
    last_base, _ = produce(plog, [(b"gone", b"old"), (b"gone", b"older")], producer_id=pid, producer_epoch=epoch,
                           base_sequence=sequence)  # fmt: skip
    sequence += 2
    produce(plog, [(b"gone", b"replaced")])
    plog.roll()
    assert cleaner_for(fs, clock, plog).clean_now() == 1
    emptied = _batch_holding(plog, last_base)
    assert emptied.record_count == 0  # kept, empty, for its producer fields
    assert (emptied.producer_id, emptied.producer_epoch, emptied.base_sequence) == (pid, epoch, 7 + 1)
    assert emptied.last_offset == last_base + 1  # so its last sequence is still base + 1
    # After a restart the producer state comes back from the log and the next sequence is accepted.
    plog.close()
    for name in fs.listdir(PARTITION_DIR):
        if name.endswith(".snapshot"):
            fs.unlink(PARTITION_DIR / name)
    reopened = open_log(fs, clock)
    produce(reopened, [(b"k", b"next")], producer_id=pid, producer_epoch=epoch, base_sequence=sequence)
    with pytest.raises(Exception, match="out of order sequence"):
        produce(
            reopened, [(b"k", b"skip")], producer_id=pid, producer_epoch=epoch, base_sequence=sequence + 5
        )


def test_min_compaction_lag_keeps_young_segments_dirty(fs, clock):
    config = replace(COMPACT, min_compaction_lag_ms=60_000)
    plog = open_log(fs, clock, config)
    fill(plog, rounds=10)  # timestamps: now
    cleaner = cleaner_for(fs, clock, plog)
    assert cleaner.clean_now() == 0
    clock.advance(60_001)
    assert cleaner.clean_now() == 1
    assert len(contents(plog)) == 5


def test_dirty_ratio_chooses_whether_and_which_log_to_clean(fs, clock):
    dirty_config = replace(COMPACT, min_cleanable_dirty_ratio=0.5)
    dirty = open_log(fs, clock, dirty_config)
    fill(dirty, rounds=10)
    fill_once = open_log(fs, clock, dirty_config, directory=LOG_DIR / "orders-1")
    fill(fill_once, rounds=10)
    logs = {("orders", 0): (dirty, LOG_DIR), ("orders", 1): (fill_once, LOG_DIR)}
    cleaner = LogCleaner(fs, clock, CleanerConfig(), logs=lambda: logs, high_watermark=lambda key: None,
                         run_on_owner=lambda fn: fn(), on_io_error=lambda *a: None, log_dirs=[LOG_DIR])  # fmt: skip
    assert cleaner.clean_now() == 2  # both fully dirty: ratio 1.0
    # Now a little new dirt in each: below the ratio, nothing is cleaned.
    produce(dirty, [(b"k1", b"new")])
    dirty.roll()
    assert cleaner.clean_now() == 0
    # Much dirt in one: that one, only.
    fill(dirty, rounds=10)
    target = cleaner.grab_filthiest()
    assert target is not None and target.key == ("orders", 0) and target.cleanable_ratio > 0.5
    cleaner.in_progress.clear()
    assert cleaner.clean_now() == 1
    assert cleaner.grab_filthiest() is None


def test_max_compaction_lag_forces_cleaning_below_the_ratio(fs, clock):
    config = replace(COMPACT, min_cleanable_dirty_ratio=0.99, max_compaction_lag_ms=60_000)
    plog = open_log(fs, clock, config)
    fill(plog, rounds=10)
    cleaner = cleaner_for(fs, clock, plog)
    assert cleaner.clean_now() == 1  # first pass: everything dirty, ratio 1.0
    produce(plog, [(b"k1", b"new")])
    plog.roll()
    assert cleaner.clean_now() == 0
    clock.advance(60_001)
    assert cleaner.clean_now() == 1


def test_checkpoint_records_where_cleaning_stopped_and_is_read_back(fs, clock):
    plog = open_log(fs, clock)
    fill(plog, rounds=10)
    cleaner = cleaner_for(fs, clock, plog)
    assert cleaner.clean_now() == 1
    written = checkpoint.read_offsets(fs, LOG_DIR / CLEANER_OFFSET_CHECKPOINT)
    assert written == {KEY: plog.segments[-1].base_offset}
    again = cleaner_for(fs, clock, plog)
    assert again.checkpointed(KEY, LOG_DIR) == plog.segments[-1].base_offset
    assert again.clean_now() == 0


def test_small_dedupe_buffer_cleans_in_several_passes(fs, clock):
    plog = open_log(fs, clock)
    history = fill(plog, rounds=6, keys=40)
    cleaner = cleaner_for(fs, clock, plog, dedupe_buffer_size=40 * 128, load_factor=1.0)
    passes = cleaner.clean_now()
    assert passes > 1
    expected = sorted((o, k, v) for k, (o, v) in latest_values(history).items())
    assert contents(plog) == expected


def test_cleaning_on_a_real_filesystem(tmp_path, clock):
    fs = RealFileSystem()
    log_dir = tmp_path / "logs"
    fs.mkdir(log_dir)
    plog = open_log(fs, clock, directory=log_dir / "orders-0")
    history = fill(plog, rounds=8)
    assert cleaner_for(fs, clock, plog, log_dir=log_dir).clean_now() == 1
    names = sorted(p.name for p in (log_dir / "orders-0").iterdir())
    assert not [n for n in names if n.endswith((".cleaned", ".swap", ".deleted"))]
    plog.close()
    reopened = open_log(fs, clock, directory=log_dir / "orders-0")  # unclean path: every batch re-read
    assert contents(reopened) == sorted((o, k, v) for k, (o, v) in latest_values(history).items())


def test_group_segments_by_size_respects_segment_bytes(fs, clock):
    plog = open_log(fs, clock, replace(COMPACT, segment_bytes=400))
    fill(plog, rounds=6)
    segments = plog.segments[:-1]
    groups = group_segments_by_size(segments, 1000, 1 << 20, 4096, plog.segments[-1].base_offset)
    assert [s for g in groups for s in g] == segments
    assert all(sum(s.size for s in g) <= 1000 for g in groups)
    assert len(groups) > 1


def test_offset_map_capacity_follows_the_buffer():
    offset_map = OffsetMap(128 * 10, load_factor=1.0)
    for i in range(10):
        offset_map.put(b"%d" % i, i)
    assert offset_map.full
    assert offset_map.get(b"3") == 3 and offset_map.get(b"none") == -1


def test_throttler_sleeps_through_the_clock(clock):
    slept = []

    def sleep(ms: float) -> None:
        slept.append(ms)
        clock.advance(int(ms))

    throttler = Throttler(clock, rate=1000.0, sleep_ms=sleep, check_interval_ms=100)
    for _ in range(10):
        throttler.maybe_throttle(500)  # 5000 bytes at 1000 B/s: about 5 s of sleeping
    assert 4000 <= sum(slept) <= 5000


def test_cleaner_threads_clean_and_restart_with_new_settings(fs, clock):
    import threading
    import time

    plog = open_log(fs, clock)
    history = fill(plog, rounds=10)
    lock = threading.Lock()  # the test's "event loop": one owner step at a time

    def on_owner(fn):
        with lock:
            return fn()

    cleaner = LogCleaner(fs, clock, CleanerConfig(backoff_ms=10), logs=lambda: {KEY: (plog, LOG_DIR)},
                         high_watermark=lambda key: None, run_on_owner=on_owner, on_io_error=lambda *a: None,
                         log_dirs=[LOG_DIR])  # fmt: skip
    cleaner.start()
    try:
        deadline = time.monotonic() + 30
        while cleaner.passes < 1:
            assert time.monotonic() < deadline, "no pass by the cleaner thread"
            time.sleep(0.01)
        cleaner.reconfigure(lambda: CleanerConfig(threads=2, backoff_ms=10))
        threads = list(cleaner._threads)
        assert len(threads) == 2 and all(t.is_alive() for t in threads)
    finally:
        cleaner.shutdown()
    assert not any(t.is_alive() for t in threads)
    cleaner.reconfigure(lambda: CleanerConfig(threads=3))  # after the shutdown: nothing starts
    assert cleaner._threads == []
    with lock:
        assert contents(plog) == sorted((o, k, v) for k, (o, v) in latest_values(history).items())


def test_a_log_truncated_during_a_pass_is_left_as_truncated(fs, clock):
    """A follower truncating its log while the cleaner works on it: the swap finds the segments changed, renames
    nothing, and the next pass cleans the log as it now is."""
    plog = open_log(fs, clock)
    fill(plog, rounds=10)
    cut = plog.segments[2].base_offset + 1
    cleaner = cleaner_for(fs, clock, plog)

    def on_owner(fn):
        if "_clean_group" in fn.__qualname__ and plog.log_end_offset > cut:  # the first swap: truncate first
            plog.truncate_to(cut)
        return fn()

    cleaner.run_on_owner = on_owner
    assert cleaner.clean_now() == 0
    assert not [n for n in fs.listdir(PARTITION_DIR) if n.endswith((".cleaned", ".swap", ".deleted"))]
    assert [o for o, _, _ in contents(plog)] == list(range(cut))
    assert plog.log_end_offset == cut and KEY not in cleaner.uncleanable
    cleaner.run_on_owner = lambda fn: fn()
    produce(plog, [(b"k0", b"after")])
    plog.roll()
    assert cleaner.clean_now() == 1
    assert (b"k0", b"after") in {(k, v) for _, k, v in contents(plog)}
