"""The lag report's DataFrame transforms on small in-memory samples: parsing, interpolated lag in seconds
(plateaus of an idle partition, offsets older than the history), rounds and time above thresholds."""

from __future__ import annotations

import json

from jobs.lag_report import group_rounds, group_stats, parse_samples, with_lag_seconds
from jobs.lag_samples import LagSample


def _records(spark, samples: list[LagSample], extra_values: list[bytes] = ()):
    values = [(s.value(),) for s in samples] + [(v,) for v in extra_values]
    return spark.createDataFrame(values, "value binary")


def _lag(spark, samples, extra=()):
    parsed = parse_samples(_records(spark, samples, extra), 0, 10**6)
    rows = with_lag_seconds(parsed).collect()
    return {(r["group"], r["partition"], r["timestamp_ms"]): (r["lag"], r["lag_seconds"]) for r in rows}


def test_lag_seconds_interpolates_on_the_log_end_offset_history(spark):
    # orders-0: log end offset 100 at 0 s and still at 10 s (idle), then 200 at 20 s and 300 at 30 s
    history = [(0, 100), (10_000, 100), (20_000, 200), (30_000, 300)]
    samples = [LagSample("c", "fast", "orders", 0, t, leo, leo, leo) for t, leo in history]
    samples += [
        LagSample("c", "g", "orders", 0, 10_000, 100, 100, 100),  # caught up on the idle partition
        LagSample("c", "g", "orders", 0, 30_000, 150, 300, 300),  # written half way from 10 s to 20 s
        LagSample("c", "h", "orders", 0, 30_000, 100, 300, 300),  # the log was at 100 until 10 s
        LagSample("c", "old", "orders", 0, 30_000, 50, 300, 300),  # older than the history: at least 30 s
        LagSample("c", "none", "orders", 0, 30_000, None, 300, 300),  # no committed offset
    ]
    lag = _lag(spark, samples)
    assert lag[("g", 0, 10_000)] == (0, 0.0)
    assert lag[("g", 0, 30_000)] == (150, 15.0)
    assert lag[("h", 0, 30_000)] == (200, 20.0)
    assert lag[("old", 0, 30_000)] == (250, 30.0)
    assert lag[("none", 0, 30_000)] == (None, None)
    assert all(lag[("fast", 0, t)] == (0, 0.0) for t, _ in history)


def test_parse_skips_other_versions_duplicates_and_samples_outside_the_window(spark):
    sample = LagSample("c", "g", "t", 0, 5_000, 1, 2, 2)
    future = json.dumps({**json.loads(sample.value()), "version": 2}).encode()
    late = LagSample("c", "g", "t", 0, 2_000_000, 1, 2, 2)
    parsed = parse_samples(_records(spark, [sample, sample, late], [future]), 0, 1_000_000).collect()
    assert [(r["group"], r["timestamp_ms"], r["lag"]) for r in parsed] == [("g", 5_000, 1)]


def test_rounds_and_time_above_thresholds(spark):
    # group g on two partitions, rounds every 10 s; a 100 s gap before the last round counts only 20 s
    times = [0, 10_000, 20_000, 120_000]
    samples = []
    for i, t in enumerate(times):
        leo = 1000 * (i + 1)
        samples.append(LagSample("c", "fast", "t", 0, t, leo, leo, leo))
        samples.append(LagSample("c", "fast", "t", 1, t, 5, 5, 5))
        samples.append(LagSample("c", "g", "t", 0, t, 0 if i else leo, leo, leo))
        samples.append(LagSample("c", "g", "t", 1, t, 3, 5, 5))
    parsed = parse_samples(_records(spark, samples), 0, 10**6)
    rounds = group_rounds(with_lag_seconds(parsed), max_gap_ms=20_000)
    got = {(r["group"], r["timestamp_ms"]): r for r in rounds.collect()}
    assert [got[("g", t)]["total_lag"] for t in times] == [2, 2002, 3002, 4002]
    assert [got[("g", t)]["interval_ms"] for t in times] == [10_000, 10_000, 20_000, 0]
    stats = {r["group"]: r for r in group_stats(rounds, [1_000, 15_000]).collect()}
    g = stats["g"]
    assert (g["max_lag"], g["total_lag"], g["max_partition_lag"], g["rounds"], g["samples"]) == (
        4002,
        4002,
        4000,
        4,
        8,
    )
    assert g["never_caught_up"]  # partition 1 was 2 behind at every round
    # both partitions' committed offsets lie below their history from round 1 on, so their lag in seconds is
    # the time since the first sample: 0, 10, 20, 120 s; intervals 10, 10, 20 (capped), 0
    assert [got[("g", t)]["max_lag_seconds"] for t in times] == [0.0, 10.0, 20.0, 120.0]
    assert (g["seconds_above_1s"], g["seconds_above_15s"]) == (30.0, 20.0)
    assert not stats["fast"]["never_caught_up"] and stats["fast"]["max_lag"] == 0
