"""Replication throttles (Kafka's ReplicationQuotaManager): a byte rate measured over sampled windows.

`leader.replication.throttled.rate` bounds what a leader sends to followers of throttled replicas,
`follower.replication.throttled.rate` what a follower fetches for them; a topic's
`leader/follower.replication.throttled.replicas` ("*" or partitionId:brokerId entries naming this broker) picks
the throttled replicas, as `kafka-reassign-partitions --throttle` sets them. Replicas in the ISR are never
throttled. The rate is Kafka's: the bytes of the last `replication.quota.window.num` windows of
`replication.quota.window.size.seconds`, over the time they span (at least all windows but the current one), so
a throttle allows a burst at first and holds the bound on average.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from broker_runtime.replication.partition import Partition

UNBOUNDED = 2**63 - 1


class ByteRate:
    """Kafka's Rate over a SampledStat: samples of `window_ms`, the last `windows` of them kept."""

    def __init__(
        self, clock, bound: Callable[[], int], windows: Callable[[], int], window_ms: Callable[[], int]
    ):
        self._clock = clock
        self._bound = bound
        self._windows = windows
        self._window_ms = window_ms
        self._samples: deque[list[int]] = deque()  # [start ms, bytes]

    @property
    def window_ms(self) -> int:
        return self._window_ms()

    def record(self, size: int) -> None:
        now = self._clock.monotonic_ms()
        self._purge(now)
        if not self._samples or now - self._samples[-1][0] >= self.window_ms:
            self._samples.append([now, 0])
        self._samples[-1][1] += size

    def _purge(self, now: int) -> None:
        horizon = now - self._windows() * self.window_ms
        while self._samples and self._samples[0][0] <= horizon:
            self._samples.popleft()

    def rate(self) -> float:
        """Bytes per second."""
        now = self._clock.monotonic_ms()
        self._purge(now)
        if not self._samples:
            return 0.0
        elapsed = now - self._samples[0][0]
        elapsed = max(elapsed, (self._windows() - 1) * self.window_ms, 1)
        return sum(s[1] for s in self._samples) * 1000 / elapsed

    def exceeded(self) -> bool:
        bound = self._bound()
        return bound < UNBOUNDED and self.rate() > bound


class ReplicationQuota:
    def __init__(self, broker_id: int, clock, config, topic_configs: Callable[[str], dict[str, str] | None]):
        self._broker_id = broker_id
        self._topic_configs = topic_configs

        def rate(key: str) -> ByteRate:
            return ByteRate(
                clock,
                lambda: config[key],
                lambda: config["replication.quota.window.num"],
                lambda: config["replication.quota.window.size.seconds"] * 1000,
            )

        self.leader = rate("leader.replication.throttled.rate")
        self.follower = rate("follower.replication.throttled.rate")

    def _listed(self, partition: Partition, key: str) -> bool:
        configs = self._topic_configs(partition.topic) or {}
        entries = [e.strip() for e in str(configs.get(key) or "").split(",") if e.strip()]
        return "*" in entries or f"{partition.index}:{self._broker_id}" in entries

    def throttles_leader(self, partition: Partition, follower_id: int) -> bool:
        """Is what this leader sends `follower_id` for `partition` throttled (a replica not in the ISR)."""
        return follower_id not in partition.isr and self._listed(
            partition, "leader.replication.throttled.replicas"
        )

    def throttles_follower(self, partition: Partition) -> bool:
        return self._broker_id not in partition.isr and self._listed(
            partition, "follower.replication.throttled.replicas"
        )
