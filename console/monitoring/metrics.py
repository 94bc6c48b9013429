"""/metrics: the sampled lag in Prometheus text format, under kafka-lag-exporter's metric names (so its
dashboards and alerts work unchanged), plus Burrow's statuses as odradek_* gauges.

Labels follow kafka-lag-exporter's: the per-partition metrics carry the member that had the partition at the
newest round (member_host, consumer_id, client_id; "unknown" for a partition no member has, as there), the
group maxima whether the group is a simple consumer group (is_simple_consumer). Values are those of each
cluster's newest sampling round."""

from __future__ import annotations

import time

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily

from console.clusters.models import Cluster
from console.monitoring.selectors import lag_now


class LagCollector:
    def collect(self):
        def family(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, labels=labels)

        part_labels = ["cluster_name", "group", "topic", "partition"]
        member_labels = [*part_labels, "member_host", "consumer_id", "client_id"]
        offset = family(
            "kafka_consumergroup_group_offset", "Last group consumed offset of a partition", member_labels
        )
        lag = family("kafka_consumergroup_group_lag", "Group offset lag of a partition", member_labels)
        lag_s = family(
            "kafka_consumergroup_group_lag_seconds", "Group time lag of a partition in seconds", member_labels
        )
        max_lag = family(
            "kafka_consumergroup_group_max_lag",
            "Max group offset lag",
            ["cluster_name", "group", "is_simple_consumer"],
        )
        max_lag_s = family(
            "kafka_consumergroup_group_max_lag_seconds",
            "Max group time lag in seconds",
            ["cluster_name", "group", "is_simple_consumer"],
        )
        sum_lag = family(
            "kafka_consumergroup_group_sum_lag", "Sum of group offset lag", ["cluster_name", "group"]
        )
        topic_sum = family(
            "kafka_consumergroup_group_topic_sum_lag",
            "Sum of group offset lag across topic partitions",
            ["cluster_name", "group", "topic"],
        )
        latest = family(
            "kafka_partition_latest_offset",
            "Latest offset of a partition",
            ["cluster_name", "topic", "partition"],
        )
        status = family(
            "odradek_consumergroup_status",
            "Burrow's group status: 0 OK, 1 WARN, 2 ERR",
            ["cluster_name", "group"],
        )
        p_status = family(
            "odradek_consumergroup_partition_status",
            "Burrow's partition status: 0 OK, 1 WARN, 2 STOP, 3 STALL, 4 REWIND",
            part_labels,
        )
        now_ms = int(time.time() * 1000)
        for cluster in Cluster.objects.all():
            seen_partitions = set()
            for group, g in lag_now(cluster, now_ms).items():
                topic_lags: dict[str, int] = {}
                for p in g.partitions:
                    labels = [cluster.name, group, p.topic, str(p.partition)]
                    with_member = [*labels, p.member_host, p.consumer_id, p.client_id]
                    if p.committed is not None:
                        offset.add_metric(with_member, p.committed)
                        lag.add_metric(with_member, p.lag)
                        lag_s.add_metric(with_member, p.lag_seconds or 0.0)
                    p_status.add_metric(labels, int(p.status))
                    topic_lags[p.topic] = topic_lags.get(p.topic, 0) + (p.lag or 0)
                    if (p.topic, p.partition) not in seen_partitions:
                        seen_partitions.add((p.topic, p.partition))
                        latest.add_metric([cluster.name, p.topic, str(p.partition)], p.end)
                simple = "true" if g.is_simple_consumer else "false"
                max_lag.add_metric([cluster.name, group, simple], g.max_lag)
                max_lag_s.add_metric([cluster.name, group, simple], g.max_lag_seconds)
                sum_lag.add_metric([cluster.name, group], g.lag)
                status.add_metric([cluster.name, group], min(int(g.status), 2))
                for topic, value in sorted(topic_lags.items()):
                    topic_sum.add_metric([cluster.name, group, topic], value)
        yield from (offset, lag, lag_s, max_lag, max_lag_s, sum_lag, topic_sum, latest, status, p_status)


def metrics_view(request: HttpRequest) -> HttpResponse:
    """Open unless CONSOLE_METRICS_TOKEN is set; then `Authorization: Bearer <token>` (Prometheus's
    bearer_token) is required."""
    token = settings.CONSOLE_METRICS_TOKEN
    if token and request.headers.get("Authorization", "") != f"Bearer {token}":
        return HttpResponse("a bearer token is required\n", status=401, content_type="text/plain")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(LagCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
