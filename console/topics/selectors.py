"""Reads about topics: the filtered, sorted list (from cached metadata, so thousands of topics page quickly)
and one topic's partitions with offsets and sizes."""

from __future__ import annotations

from dataclasses import dataclass

from console.clusters.client import ClusterClient, PartitionInfo, TopicInfo, client_for
from console.clusters.models import Cluster
from console.errors import ConsoleError

SORTS = {
    "name": lambda t: t.name,
    "partitions": lambda t: (len(t.partitions), t.name),
    "replication": lambda t: (t.replication_factor, t.name),
    "under_replicated": lambda t: (t.under_replicated, t.name),
}


@dataclass
class TopicRow:
    name: str
    partitions: int
    replication_factor: int
    under_replicated: int
    offline: int
    internal: bool
    messages: int | None = None
    size_bytes: int | None = None


@dataclass
class PartitionRow:
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    start_offset: int | None
    end_offset: int | None
    size_bytes: int | None

    @property
    def messages(self) -> int | None:
        if self.start_offset is None or self.end_offset is None:
            return None
        return self.end_offset - self.start_offset

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)


def topic_list(
    cluster: Cluster, *, query: str = "", internal: bool = False, sort: str = "name"
) -> list[TopicInfo]:
    topics = client_for(cluster).metadata().topics.values()
    needle = query.strip().lower()
    matched = [t for t in topics if (internal or not t.internal) and (not needle or needle in t.name.lower())]
    key = SORTS.get(sort.lstrip("-"), SORTS["name"])
    return sorted(matched, key=key, reverse=sort.startswith("-"))


def rows_with_sizes(cluster: Cluster, topics: list[TopicInfo]) -> tuple[list[TopicRow], str]:
    """Rows for one page of topics: message counts (end - start offsets) and sizes, asked for those topics
    only. A failure of the size or offset request leaves those columns empty and says why."""
    client = client_for(cluster)
    rows = [
        TopicRow(t.name, len(t.partitions), t.replication_factor, t.under_replicated, t.offline, t.internal)
        for t in topics
    ]
    if not rows:
        return rows, ""
    problem = ""
    partitions = [(p.topic, p.partition) for t in topics for p in t.partitions if not p.offline]
    try:
        starts, ends = client.offsets(partitions, "earliest"), client.offsets(partitions, "latest")
        per_topic: dict[str, int] = {}
        for key, end in ends.items():
            per_topic[key[0]] = per_topic.get(key[0], 0) + max(0, end - starts.get(key, 0))
        sizes = _sizes(client, [t.name for t in topics])
    except ConsoleError as exc:
        return rows, exc.message
    for row in rows:
        row.messages = per_topic.get(row.name, 0)
        row.size_bytes = sum(v for (t, _), v in sizes.items() if t == row.name)
    return rows, problem


def _sizes(client: ClusterClient, topics: list[str]) -> dict[tuple[str, int], int]:
    _, per_partition = client.log_dir_sizes(topics)
    return per_partition


def partition_rows(cluster: Cluster, topic: TopicInfo) -> tuple[list[PartitionRow], str]:
    client = client_for(cluster)
    keys = [(p.topic, p.partition) for p in topic.partitions if not p.offline]
    problem = ""
    starts: dict = {}
    ends: dict = {}
    sizes: dict = {}
    try:
        starts, ends = client.offsets(keys, "earliest"), client.offsets(keys, "latest")
        sizes = _sizes(client, [topic.name])
    except ConsoleError as exc:
        problem = exc.message
    return [_partition_row(p, starts, ends, sizes) for p in topic.partitions], problem


def _partition_row(p: PartitionInfo, starts: dict, ends: dict, sizes: dict) -> PartitionRow:
    key = (p.topic, p.partition)
    return PartitionRow(
        p.partition, p.leader, p.replicas, p.isr, starts.get(key), ends.get(key), sizes.get(key)
    )
