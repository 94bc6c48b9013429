"""Reads over the sampled offsets: per-partition lag kinds of a cluster's groups (the newest round, Burrow's
window before it), lag history for charts, and topic throughput."""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass

from console.monitoring.lag import (
    GroupStatus,
    PartitionStatus,
    Point,
    group_status,
    lag_seconds,
    offset_lag,
    partition_status,
)
from console.monitoring.models import BrokerTopicCounters, OffsetSample, TopicSample

#: Burrow's window: the number of rounds a partition's status is evaluated over
STATUS_WINDOW = 10


@dataclass
class PartitionLagNow:
    group: str
    topic: str
    partition: int
    committed: int | None
    end: int
    lag: int | None
    lag_seconds: float | None
    status: PartitionStatus
    #: who had the partition at the newest round (kafka-lag-exporter's labels; "unknown" when nobody)
    member_host: str = "unknown"
    consumer_id: str = "unknown"
    client_id: str = "unknown"


@dataclass
class GroupLagNow:
    group: str
    partitions: list[PartitionLagNow]
    is_simple_consumer: bool = False

    @property
    def lag(self) -> int:
        return sum(p.lag or 0 for p in self.partitions)

    @property
    def max_lag(self) -> int:
        return max((p.lag or 0 for p in self.partitions), default=0)

    @property
    def max_lag_seconds(self) -> float:
        return max((p.lag_seconds or 0.0 for p in self.partitions), default=0.0)

    @property
    def status(self) -> GroupStatus:
        return group_status([p.status for p in self.partitions])


def recent_rounds(cluster, count: int) -> list[int]:
    return list(
        OffsetSample.objects.filter(cluster=cluster)
        .values_list("round_ms", flat=True)
        .distinct()
        .order_by("-round_ms")[:count]
    )[::-1]


def lag_now(cluster, now_ms: int, *, group: str | None = None) -> dict[str, GroupLagNow]:
    """Every sampled group's lag kinds at the newest round (one group's if `group` is given)."""
    rounds = recent_rounds(cluster, STATUS_WINDOW)
    if not rounds:
        return {}
    rows = OffsetSample.objects.filter(cluster=cluster, round_ms__gte=rounds[0])
    if group is not None:
        rows = rows.filter(group_id=group)
    windows: dict[tuple[str, str, int], list[Point]] = defaultdict(list)
    members: dict[str, bool] = {}
    simple: dict[str, bool] = {}
    owners: dict[tuple[str, str, int], tuple[str, str, str]] = {}
    for g, t, p, r, c, e, active, host, consumer_id, client_id, is_simple in rows.order_by("round_ms").values_list(
        "group_id", "topic", "partition", "round_ms", "committed", "end", "active_members",
        "member_host", "consumer_id", "client_id", "simple_consumer",
    ):  # fmt: skip
        windows[(g, t, p)].append(Point(r, c, e))
        if r == rounds[-1]:
            members[g], simple[g] = active, is_simple
            owners[(g, t, p)] = (host, consumer_id, client_id)
    histories = end_histories(cluster, {(t, p) for (_, t, p) in windows})
    out: dict[str, GroupLagNow] = {}
    for (g, t, p), points in sorted(windows.items()):
        newest = points[-1]
        if newest.timestamp_ms != rounds[-1]:  # the group no longer has this partition
            continue
        out.setdefault(g, GroupLagNow(g, [], simple[g])).partitions.append(
            PartitionLagNow(
                g,
                t,
                p,
                newest.committed,
                newest.end,
                offset_lag(newest.committed, newest.end),
                lag_seconds(
                    newest.committed, histories.get((t, p), [(newest.timestamp_ms, newest.end)]), now_ms
                ),
                partition_status(points, active_members=members.get(g, False)),
                *owners[(g, t, p)],
            )
        )
    return out


def end_histories(cluster, partitions: set[tuple[str, int]]) -> dict[tuple[str, int], list[tuple[int, int]]]:
    """(round_ms, end offset) per partition, oldest first, over the kept window."""
    topics = {t for t, _ in partitions}
    out: dict[tuple[str, int], list[tuple[int, int]]] = defaultdict(list)
    for t, p, r, e in (
        TopicSample.objects.filter(cluster=cluster, topic__in=topics)
        .order_by("round_ms")
        .values_list("topic", "partition", "round_ms", "end")
    ):
        if (t, p) in partitions:
            out[(t, p)].append((r, e))
    return out


def group_lag_history(cluster, group: str) -> dict:
    """Per round: the group's total lag and max lag in seconds, and each partition's lag (for the charts)."""
    samples = list(
        OffsetSample.objects.filter(cluster=cluster, group_id=group)
        .order_by("round_ms")
        .values_list("round_ms", "topic", "partition", "committed", "end")
    )
    histories = end_histories(cluster, {(t, p) for _, t, p, _, _ in samples})
    total: dict[int, int] = defaultdict(int)
    seconds: dict[int, float] = defaultdict(float)
    per_partition: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for r, t, p, c, e in samples:
        lag = offset_lag(c, e) or 0
        total[r] += lag
        history = [h for h in histories.get((t, p), []) if h[0] <= r] or [(r, e)]
        seconds[r] = max(seconds[r], lag_seconds(c, history, r) or 0.0)
        per_partition[f"{t}-{p}"].append((r, lag))
    return {
        "lag": sorted(total.items()),
        "lag_seconds": sorted(seconds.items()),
        "partitions": dict(per_partition),
    }


def topic_throughput(cluster, topic: str) -> dict:
    """Per round: messages in (end offset growth), messages out (committed offset growth summed over groups),
    and bytes in and out from the brokers' counters (where brokers serve metrics; bytes in otherwise from the
    log size's growth, where the cluster reports sizes), as rates per second."""
    by_round_end: dict[int, int] = defaultdict(int)
    by_round_size: dict[int, int] = defaultdict(int)
    for r, e, size in (
        TopicSample.objects.filter(cluster=cluster, topic=topic)
        .order_by("round_ms")
        .values_list("round_ms", "end", "size_bytes")
    ):
        by_round_end[r] += e
        by_round_size[r] += size or 0
    by_round_committed: dict[int, int] = defaultdict(int)
    for r, c in OffsetSample.objects.filter(
        cluster=cluster, topic=topic, committed__isnull=False
    ).values_list("round_ms", "committed"):
        by_round_committed[r] += c
    counters = list(
        BrokerTopicCounters.objects.filter(cluster=cluster, topic=topic)
        .order_by("round_ms")
        .values_list("broker_id", "round_ms", "bytes_in", "bytes_out")
    )
    return {
        "messages_in": _rates(by_round_end),
        "bytes_in": _counter_rates([(b, r, i) for b, r, i, _ in counters])
        if counters
        else _rates(by_round_size),
        "bytes_out": _counter_rates([(b, r, o) for b, r, _, o in counters]),
        "messages_out": _rates(by_round_committed),
    }


def _counter_rates(rows: list[tuple[int, int, int]]) -> list[tuple[int, float]]:
    """Per round, the summed rate of per-broker counters [(broker, round_ms, value)]: each broker's growth since
    its previous round (after a restart, a smaller value counts from zero, as Prometheus's rate() does)."""
    per_broker: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for broker, r, value in rows:
        per_broker[broker].append((r, value))
    summed: dict[int, float] = defaultdict(float)
    for points in per_broker.values():
        for (t0, v0), (t1, v1) in itertools.pairwise(points):
            if t1 > t0:
                summed[t1] += (v1 - v0 if v1 >= v0 else v1) / ((t1 - t0) / 1000)
    return sorted(summed.items())


def _rates(counter: dict[int, int]) -> list[tuple[int, float]]:
    points = sorted(counter.items())
    return [
        (t1, max(0.0, (v1 - v0) / ((t1 - t0) / 1000)))
        for (t0, v0), (t1, v1) in itertools.pairwise(points)
        if t1 > t0
    ]
