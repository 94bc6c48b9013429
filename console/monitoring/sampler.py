"""The lag sampler: one round reads, for every consumer group of a cluster and every partition it committed
on, the committed offset, the log end offset and the last stable offset, through the Kafka protocol only (any
Kafka-compatible cluster), stores them (a bounded window), and writes them to the cluster's lag-samples topic
in the format of docs/contracts.md (jobs.lag_samples.LagSample).

A round costs a bounded number of round trips, whatever the number of groups: one ListGroups, the groups'
OffsetFetch requests all in flight at once, DescribeGroups for the groups that have members (who owns each
partition: kafka-lag-exporter's member labels), and two ListOffsets (read_uncommitted and read_committed)
batched per leader by the client. Brokers that serve Prometheus metrics (Odradek's `odradek.metrics.listener`)
also give their per-topic byte counters (broker_metrics.py), for the topic charts' bytes in and out."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction

from console.clusters.client import client_for
from console.errors import Conflict, ConsoleError
from console.monitoring.broker_metrics import scrape_brokers
from console.monitoring.models import BrokerTopicCounters, OffsetSample, SamplerConfig, TopicSample
from jobs.lag_samples import LAG_SAMPLES_TOPIC, TOPIC_CONFIGS, LagSample

log = logging.getLogger(__name__)
OFFSET_FETCH_BATCH = 250
#: groups whose listed state means they have no member
MEMBERLESS_STATES = {"EMPTY", "DEAD", "UNKNOWN"}


@dataclass
class RoundResult:
    round_ms: int
    groups: int
    samples: int
    partitions: int


def sample_cluster(cluster, now_ms: int, *, publish: bool = True) -> RoundResult:
    """One sampling round at time `now_ms` (the caller's clock)."""
    client = client_for(cluster)
    metadata = client.metadata(max_age_s=0)
    groups = client.list_groups()
    committed: dict[str, dict[tuple[str, int], int]] = {}
    ids = [g.group_id for g in groups]
    for start in range(0, len(ids), OFFSET_FETCH_BATCH):
        committed.update(client.committed_offsets(ids[start : start + OFFSET_FETCH_BATCH]))
    partitions = {(p.topic, p.partition) for p in metadata.partitions()}
    partitions |= {tp for offsets in committed.values() for tp in offsets}
    ends = client.offsets(partitions, "latest")
    stables = client.offsets(partitions, "latest", read_committed=True)
    try:
        sizes = client.log_dir_sizes()[1]
    except ConsoleError:  # a cluster without DescribeLogDirs: no byte rates
        sizes = {}
    counters = scrape_brokers(client, metadata.brokers)
    state = {g.group_id: g.state for g in groups}
    simple = {g.group_id: g.is_simple for g in groups}
    owners = partition_owners(client, [g for g in ids if state[g] not in MEMBERLESS_STATES])
    samples = [
        LagSample(
            cluster.name,
            group,
            topic,
            partition,
            now_ms,
            offset,
            ends[(topic, partition)],
            stables.get((topic, partition), ends[(topic, partition)]),
        )
        for group, offsets in committed.items()
        for (topic, partition), offset in sorted(offsets.items())
        if (topic, partition) in ends
    ]
    health = {(p.topic, p.partition): p for p in metadata.partitions()}
    with transaction.atomic():
        OffsetSample.objects.bulk_create(
            [
                OffsetSample(
                    cluster=cluster,
                    round_ms=now_ms,
                    group_id=s.group,
                    topic=s.topic,
                    partition=s.partition,
                    committed=s.committed_offset,
                    end=s.log_end_offset,
                    stable=s.last_stable_offset,
                    active_members=state.get(s.group, "") not in MEMBERLESS_STATES,
                    simple_consumer=simple.get(s.group, False),
                    **owners.get((s.group, s.topic, s.partition), {}),
                )
                for s in samples
            ],
            batch_size=2000,
        )
        TopicSample.objects.bulk_create(
            [
                TopicSample(
                    cluster=cluster,
                    round_ms=now_ms,
                    topic=topic,
                    partition=partition,
                    end=end,
                    size_bytes=sizes.get((topic, partition)),
                    under_replicated=bool(
                        health.get((topic, partition)) and health[(topic, partition)].under_replicated
                    ),
                    offline=bool(health.get((topic, partition)) and health[(topic, partition)].offline),
                )
                for (topic, partition), end in ends.items()
            ],
            batch_size=2000,
        )
        BrokerTopicCounters.objects.bulk_create(
            [
                BrokerTopicCounters(
                    cluster=cluster,
                    round_ms=now_ms,
                    broker_id=broker_id,
                    topic=topic,
                    bytes_in=c.bytes_in,
                    bytes_out=c.bytes_out,
                    messages_in=c.messages_in,
                )
                for broker_id, topics in counters.items()
                for topic, c in topics.items()
            ],
            batch_size=2000,
        )
        cutoff = now_ms - settings.CONSOLE_LAG_RETENTION_S * 1000
        OffsetSample.objects.filter(cluster=cluster, round_ms__lt=cutoff).delete()
        TopicSample.objects.filter(cluster=cluster, round_ms__lt=cutoff).delete()
        BrokerTopicCounters.objects.filter(cluster=cluster, round_ms__lt=cutoff).delete()
        config, _ = SamplerConfig.objects.get_or_create(cluster=cluster)
        config.last_round_ms = now_ms
        config.last_error = ""
        # [broker id, last seen ms]; a broker unseen for the whole retention is forgotten (decommissioned)
        last_seen = {int(b): int(t) for b, t in config.known_brokers if int(t) >= cutoff}
        last_seen.update({b.id: now_ms for b in metadata.brokers})
        config.known_brokers = sorted([b, t] for b, t in last_seen.items())
        config.save()
    if publish and samples:
        publish_samples(cluster, samples)
    return RoundResult(now_ms, len(ids), len(samples), len(partitions))


def partition_owners(client, group_ids: list[str]) -> dict[tuple[str, str, int], dict[str, str]]:
    """{(group, topic, partition): member labels} of the assigned partitions of groups that have members
    (DescribeGroups); a group that cannot be described keeps "unknown" labels rather than failing the round."""
    out: dict[tuple[str, str, int], dict[str, str]] = {}
    for start in range(0, len(group_ids), OFFSET_FETCH_BATCH):
        batch = group_ids[start : start + OFFSET_FETCH_BATCH]
        try:
            described = client.describe_groups(batch)
        except ConsoleError as exc:
            log.warning("member labels of %d groups not read: %s", len(batch), exc)
            continue
        for group_id, description in described.items():
            for member in description.members:
                labels = {
                    "member_host": member.host[:255],
                    "consumer_id": member.member_id[:255],
                    "client_id": member.client_id[:255],
                }
                for topic, partition in member.assignment:
                    out[(group_id, topic, partition)] = labels
    return out


def publish_samples(cluster, samples: list[LagSample]) -> None:
    """Write a round's samples to the cluster's lag-samples topic, creating it first if it is missing."""
    client = client_for(cluster)
    if LAG_SAMPLES_TOPIC not in client.metadata().topics:
        try:
            client.create_topic(LAG_SAMPLES_TOPIC, 1, 1, dict(TOPIC_CONFIGS), validate_only=False)
        except Conflict:  # created meanwhile
            pass
    producer = client.producer()
    for sample in samples:
        while True:
            try:
                producer.produce(
                    LAG_SAMPLES_TOPIC, key=sample.key(), value=sample.value(), timestamp=sample.timestamp_ms
                )
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.1)
    remaining = producer.flush(client.timeout_s)
    if remaining:
        log.warning("%d lag samples of cluster %s not delivered", remaining, cluster.name)
