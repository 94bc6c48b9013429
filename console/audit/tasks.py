"""Publishing audit entries to each cluster's audit topic (`settings.CONSOLE_AUDIT_TOPIC`).

The topic is created on first use with one partition (a single ordered trail), the cluster's
`default.replication.factor`, `cleanup.policy=delete` and 90 days' retention, never compacted. Each record's key is the cluster's name, its value the entry's JSON
(`AuditEntry.as_record`). An entry is marked published only after the broker acknowledged it, so a failure
leaves it for the periodic sweep; a sweep after a lost acknowledgement may publish an entry twice, and the
entry's `id` tells duplicates apart.
"""

from __future__ import annotations

import json
import logging

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from console.audit.models import AuditEntry
from console.clusters.client import client_for
from console.clusters.models import Cluster
from console.errors import Conflict

log = logging.getLogger(__name__)

AUDIT_TOPIC_CONFIGS = {"cleanup.policy": "delete", "retention.ms": str(90 * 24 * 3600 * 1000)}
BATCH = 500


def ensure_audit_topic(cluster: Cluster) -> str:
    client = client_for(cluster)
    topic = settings.CONSOLE_AUDIT_TOPIC
    if topic not in client.metadata().topics:
        # -1: the cluster's default.replication.factor (KIP-464). While fewer brokers are up the creation fails
        # and the entries wait for the sweep, rather than the trail keeping the few replicas visible right now.
        try:
            client.create_topic(topic, 1, -1, AUDIT_TOPIC_CONFIGS, validate_only=False)
        except Conflict:
            pass  # created meanwhile
    return topic


def publish(cluster: Cluster, entries: list[AuditEntry]) -> int:
    """Produce the entries to the cluster's audit topic, wait for every acknowledgement, mark them published."""
    if not entries:
        return 0
    topic = ensure_audit_topic(cluster)
    producer = client_for(cluster).producer()
    failures: list[str] = []

    def on_delivery(err, _msg) -> None:
        if err is not None:
            failures.append(str(err))

    for entry in entries:
        producer.produce(
            topic,
            key=cluster.name.encode(),
            value=json.dumps(entry.as_record()).encode(),
            on_delivery=on_delivery,
        )
    remaining = producer.flush(settings.CONSOLE_KAFKA_TIMEOUT_S)
    if remaining or failures:
        raise RuntimeError(f"audit topic {topic}: {remaining} unacknowledged, errors: {failures[:3]}")
    AuditEntry.objects.filter(pk__in=[e.pk for e in entries]).update(published_at=timezone.now())
    return len(entries)


@shared_task(ignore_result=True)
def publish_entry(entry_id: int) -> None:
    entry = (
        AuditEntry.objects.filter(pk=entry_id, published_at__isnull=True).select_related("cluster").first()
    )
    if entry is None or entry.cluster is None:
        return
    publish(entry.cluster, [entry])


@shared_task(ignore_result=True)
def publish_pending() -> int:
    """The sweep: whatever was not published at once (Redis or the cluster was down)."""
    done = 0
    for cluster in Cluster.objects.all():
        pending = list(
            AuditEntry.objects.filter(cluster=cluster, published_at__isnull=True).order_by("id")[:BATCH]
        )
        try:
            done += publish(cluster, pending)
        except Exception as exc:
            log.warning("audit entries of cluster %s not published yet: %s", cluster.name, exc)
    return done
