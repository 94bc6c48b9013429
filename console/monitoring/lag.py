"""Lag kinds, computed from sampled offsets alone (no I/O): offset lag, lag in seconds, and Burrow's status.

**Offset lag** = ``max(0, log_end_offset - committed_offset)``.

**Lag in seconds** (kafka-lag-exporter's method): the log end offset's history is a table of (time, offset)
points; the time at which the partition's end offset passed the committed offset (the record the group reads
next was written) is found by linear interpolation between the two points around it, and the lag is
``now - that time``. A committed offset at or past the end is
0 s; one older than the whole history is extrapolated from the history's oldest two points (clamped at the
oldest point's time when the end offset did not move in them).

**Status per partition**, evaluated over a window of samples (oldest first), after Burrow's "Consumer Lag
Evaluation Rules", without its known false positives:

1. The newest lag is 0: **OK**. A group that finished its backlog is never STALL or STOP.
2. The committed offset went down between two samples: **REWIND**.
3. Some sample in the window had lag 0: **OK** (Burrow's first rule). This also keeps a slow topic whose one
   new record has not been consumed yet from looking stopped (Burrow's false STOP, its issue #303).
4. The committed offset never moved in the window and the lag was above 0 throughout:
   **STOP** if new records arrived in the window (the log end offset moved) and the group has no active member;
   **STALL** otherwise (members that do not commit progress, or an idle topic: no new data is never STOP).
5. The committed offset moved but the lag never went down between two samples: **WARN** (the consumer is
   slower than the producers).
6. Otherwise **OK**.

A window of fewer than two samples can only be OK (rule 1) or OK for want of evidence.

**Status per group**: NOTFOUND when nothing was sampled for it; ERR when any partition is STOP, STALL or
REWIND; WARN when any partition is WARN; else OK.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Sequence
from dataclasses import dataclass


class PartitionStatus(enum.IntEnum):
    OK = 0
    WARN = 1
    STOP = 2
    STALL = 3
    REWIND = 4


class GroupStatus(enum.IntEnum):
    OK = 0
    WARN = 1
    ERR = 2
    NOTFOUND = 3


@dataclass(frozen=True)
class Point:
    """One sample of one partition for one group."""

    timestamp_ms: int
    committed: int | None
    end: int

    @property
    def lag(self) -> int | None:
        return None if self.committed is None else max(0, self.end - self.committed)


def offset_lag(committed: int | None, end: int) -> int | None:
    return None if committed is None else max(0, end - committed)


def lag_seconds(committed: int | None, history: Sequence[tuple[int, int]], now_ms: int) -> float | None:
    """Seconds since the partition's end offset was `committed`; `history` is (timestamp_ms, end offset),
    oldest first. None without a committed offset or a history."""
    if committed is None or not history:
        return None
    if committed >= history[-1][1]:
        return 0.0
    for (t0, o0), (t1, o1) in reversed(list(itertools.pairwise(history))):
        if o0 <= committed < o1:
            at = t0 + (t1 - t0) * (committed - o0) / (o1 - o0)
            return max(0.0, (now_ms - at) / 1000)
    # older than the history: extrapolate from the oldest two points
    t0, o0 = history[0]
    at = float(t0)
    if len(history) > 1:
        t1, o1 = history[1]
        if o1 > o0:
            at = t0 - (o0 - committed) * (t1 - t0) / (o1 - o0)
    return max(0.0, (now_ms - at) / 1000)


def partition_status(window: Sequence[Point], *, active_members: bool) -> PartitionStatus:
    """The status of one partition over `window` (oldest first) by the rules of the module's docstring."""
    points = [p for p in window if p.committed is not None]
    if not points or points[-1].lag == 0 or len(points) < 2:
        return PartitionStatus.OK
    pairs = list(itertools.pairwise(points))
    if any(b.committed < a.committed for a, b in pairs):
        return PartitionStatus.REWIND
    if any(p.lag == 0 for p in points):
        return PartitionStatus.OK
    if points[0].committed == points[-1].committed:
        new_data = points[-1].end > points[0].end
        return PartitionStatus.STOP if new_data and not active_members else PartitionStatus.STALL
    if all(b.lag >= a.lag for a, b in pairs):
        return PartitionStatus.WARN
    return PartitionStatus.OK


def group_status(statuses: Sequence[PartitionStatus] | None) -> GroupStatus:
    if statuses is None:
        return GroupStatus.NOTFOUND
    worst = max(statuses, default=PartitionStatus.OK)
    if worst >= PartitionStatus.STOP:
        return GroupStatus.ERR
    return GroupStatus.WARN if worst == PartitionStatus.WARN else GroupStatus.OK
