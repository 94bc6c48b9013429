"""Lag kinds as tables: Burrow's evaluation rules (its documented cases, and the false positives it is known
for) and kafka-lag-exporter's lag in seconds."""

from __future__ import annotations

import pytest

from console.monitoring.lag import (
    GroupStatus,
    PartitionStatus,
    Point,
    group_status,
    lag_seconds,
    offset_lag,
    partition_status,
)


def window(committed: list[int | None], ends: list[int], step_ms: int = 60_000) -> list[Point]:
    return [Point(i * step_ms, c, e) for i, (c, e) in enumerate(zip(committed, ends, strict=True))]


S = PartitionStatus
# (case, committed offsets, log end offsets, active members, expected)
PARTITION_CASES = [
    # Burrow's rule 1: a zero lag anywhere in the window is OK
    ("lag zero in window", [10, 20, 30, 40], [10, 25, 35, 45], True, S.OK),
    ("caught up, offsets moving", [10, 20, 30, 40], [10, 20, 30, 40], True, S.OK),
    # a group that finished its backlog is never STALL (its offset stopped moving because nothing is left)
    ("finished backlog, idle", [50, 50, 50, 50], [50, 50, 50, 50], True, S.OK),
    ("finished backlog, no members", [50, 50, 50, 50], [50, 50, 50, 50], False, S.OK),
    # rule 2: committed offset unchanged, lag fixed or growing, consumer present: STALL
    ("stalled, lag fixed", [10, 10, 10, 10], [20, 20, 20, 20], True, S.STALL),
    ("stalled, lag growing", [10, 10, 10, 10], [20, 25, 30, 35], True, S.STALL),
    # rule 3: offsets move but lag never shrinks: WARN
    ("slow consumer", [10, 20, 30, 40], [20, 31, 42, 53], True, S.WARN),
    ("slow consumer, lag fixed", [10, 20, 30, 40], [20, 30, 40, 50], True, S.WARN),
    # offsets move and lag shrinks somewhere: OK
    ("catching up", [10, 20, 30, 40], [30, 35, 40, 45], True, S.OK),
    ("lag wobbles", [10, 20, 30, 40], [20, 35, 38, 55], True, S.OK),
    # rule 4: no commits while new data arrives and nobody is consuming: STOP
    ("stopped", [10, 10, 10, 10], [20, 30, 40, 50], False, S.STOP),
    # an idle topic (no new data) is never STOP
    ("idle topic with old lag, no members", [10, 10, 10, 10], [20, 20, 20, 20], False, S.STALL),
    # Burrow #303: a slow topic's first new record in a long while is not a stopped consumer
    ("slow topic, one new record", [50, 50, 50, 50], [50, 50, 50, 51], False, S.OK),
    # rule 5: committed offset goes backwards
    ("rewind", [40, 30, 35, 38], [50, 50, 50, 50], True, S.REWIND),
    ("rewind wins over stall", [40, 20, 20, 20], [50, 50, 50, 50], True, S.REWIND),
    # too little evidence
    ("one sample with lag", [10], [20], True, S.OK),
    ("no committed offsets", [None, None], [20, 30], True, S.OK),
    ("first commit inside window", [None, 10, 20], [20, 30, 40], True, S.WARN),
]


@pytest.mark.parametrize(
    ("committed", "ends", "members", "expected"),
    [c[1:] for c in PARTITION_CASES],
    ids=[c[0] for c in PARTITION_CASES],
)
def test_partition_status(committed, ends, members, expected):
    assert partition_status(window(committed, ends), active_members=members) == expected


G = GroupStatus
GROUP_CASES = [
    ("nothing sampled", None, G.NOTFOUND),
    ("no partitions", [], G.OK),
    ("all ok", [S.OK, S.OK], G.OK),
    ("one warn", [S.OK, S.WARN], G.WARN),
    ("stop is err", [S.WARN, S.STOP], G.ERR),
    ("stall is err", [S.STALL, S.OK], G.ERR),
    ("rewind is err", [S.REWIND], G.ERR),
]


@pytest.mark.parametrize(
    ("statuses", "expected"), [c[1:] for c in GROUP_CASES], ids=[c[0] for c in GROUP_CASES]
)
def test_group_status(statuses, expected):
    assert group_status(statuses) == expected


HISTORY = [(0, 100), (10_000, 200), (20_000, 300), (30_000, 300), (40_000, 500)]
SECONDS_CASES = [
    ("caught up", 500, 40_000, 0.0),
    ("past the end", 600, 40_000, 0.0),
    ("on a point", 200, 40_000, 30.0),
    ("between points", 150, 40_000, 35.0),
    ("between points, later now", 400, 50_000, 15.0),
    ("flat stretch: when the end moved past it", 300, 40_000, 10.0),
    ("older than history, extrapolated", 50, 40_000, 45.0),
    ("no committed offset", None, 40_000, None),
]


@pytest.mark.parametrize(
    ("committed", "now", "expected"), [c[1:] for c in SECONDS_CASES], ids=[c[0] for c in SECONDS_CASES]
)
def test_lag_seconds(committed, now, expected):
    assert lag_seconds(committed, HISTORY, now) == expected


def test_offset_lag_never_negative():
    assert offset_lag(10, 5) == 0
    assert offset_lag(None, 5) is None
    assert offset_lag(5, 12) == 7
