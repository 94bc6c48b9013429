"""Integration with a real Celery worker on a real Redis: topic creation as an operation, and the audit trail
published to the cluster's audit topic. These tests commit (transactional_db) so the worker sees their rows."""

from __future__ import annotations

import json

import pytest
from confluent_kafka import Consumer, TopicPartition
from django.conf import settings

from console.audit.models import AuditEntry, Outcome
from console.clusters.client import client_for
from console.operations.models import Operation
from console.operations.states import State
from tests.console.conftest import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def read_audit_topic(bootstrap: str) -> list[dict]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "audit-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(settings.CONSOLE_AUDIT_TOPIC, 0, 0)])
    records = []
    try:
        while True:
            msg = consumer.poll(5)
            if msg is None or msg.error():
                break
            records.append(json.loads(msg.value()))
    finally:
        consumer.close()
    return records


def test_topic_creation_runs_on_the_worker_and_waits_for_the_isr(
    api, cluster, celery_worker, topic_name, shared_broker
):
    response = api("oscar").post(
        f"/api/v1/clusters/{cluster.pk}/topics/",
        {
            "name": topic_name,
            "partitions": 4,
            "replication_factor": 1,
            "configs": {"retention.ms": "86400000"},
        },
        format="json",
    )
    assert response.status_code == 202, response.json()
    body = response.json()
    assert (body["kind"], body["state"], body["params"]["name"]) == ("create_topic", "approved", topic_name)

    def finished():
        op = api("victor").get(f"/api/v1/operations/{body['id']}/").json()
        return op if op["state"] in ("done", "failed") else None

    op = wait_for(finished, timeout=60, interval=0.2, what="the create_topic operation to finish")
    assert op["state"] == "done", op
    assert op["progress"] == 100
    assert op["steps"][0]["step"] == "created"
    assert op["result"]["partitions"] == 4
    topic = client_for(cluster).metadata(max_age_s=0).topic(topic_name)
    assert all(p.leader == 0 and p.isr == (0,) for p in topic.partitions) and len(topic.partitions) == 4
    retention = next(c for c in client_for(cluster).topic_configs(topic_name) if c.name == "retention.ms")
    assert retention.value == "86400000"

    entries = list(
        AuditEntry.objects.filter(action="topic.create").order_by("id").values_list("outcome", "source")
    )
    assert entries == [(Outcome.ACCEPTED, "api"), (Outcome.OK, "worker")]

    # both entries reach the audit topic, as JSON, in order
    def published():
        return not AuditEntry.objects.filter(action="topic.create", published_at__isnull=True).exists()

    wait_for(published, timeout=30, what="audit entries published")
    records = [r for r in read_audit_topic(shared_broker.bootstrap) if r["resource"]["name"] == topic_name]
    assert [(r["action"], r["outcome"], r["user"], r["cluster"]) for r in records] == [
        ("topic.create", "accepted", "oscar", "test"),
        ("topic.create", "ok", "oscar", "test"),
    ]
    assert records[0]["params"]["configs"] == {"retention.ms": "86400000"}
    audit_topic = client_for(cluster).metadata(max_age_s=0).topic(settings.CONSOLE_AUDIT_TOPIC)
    assert len(audit_topic.partitions) == 1
    configs = {c.name: c.value for c in client_for(cluster).topic_configs(settings.CONSOLE_AUDIT_TOPIC)}
    assert configs["cleanup.policy"] == "delete" and configs["retention.ms"] == str(90 * 24 * 3600 * 1000)


def test_operation_page_shows_progress_until_done(client, personas, cluster, celery_worker, topic_name):
    client.force_login(personas["oscar"])
    response = client.post(
        f"/clusters/{cluster.pk}/topics/new/",
        {"name": topic_name, "partitions": "2", "replication_factor": "1", "configs": ""},
    )
    operation = Operation.objects.get(kind="create_topic", params__name=topic_name)
    assert response.status_code == 302 and response["Location"] == f"/operations/{operation.pk}/"
    wait_for(lambda: Operation.objects.get(pk=operation.pk).is_final, timeout=60, what="operation finished")
    page = client.get(f"/operations/{operation.pk}/", headers={"HX-Request": "true"})
    assert b"Topic ready" in page.content and b"hx-trigger" not in page.content  # polling stops when done
    assert Operation.objects.get(pk=operation.pk).state == State.DONE


def test_a_denied_attempt_is_published_too(api, cluster, celery_worker, shared_broker):
    response = api("victor").post(f"/api/v1/clusters/{cluster.pk}/topics/", {"name": "nope"}, format="json")
    assert response.status_code == 403
    entry = AuditEntry.objects.get(action="topic.create")
    assert (entry.username, entry.outcome) == ("victor", Outcome.DENIED)
    wait_for(
        lambda: AuditEntry.objects.get(pk=entry.pk).published_at is not None, timeout=30, what="published"
    )
    assert any(
        r["id"] == entry.pk and r["outcome"] == "denied" for r in read_audit_topic(shared_broker.bootstrap)
    )


def test_the_audit_topic_waits_for_the_clusters_default_replication_factor(broker_factory):
    """A cluster whose default.replication.factor exceeds the brokers up (one of two, as while a cluster starts):
    the audit topic is not created with fewer replicas; the entry stays unpublished for the sweep."""
    from console.audit.tasks import publish, publish_pending
    from console.clusters.models import Cluster
    from console.errors import ConsoleError

    broker = broker_factory(overrides={"default.replication.factor": "2"})
    starting = Cluster.objects.create(name="starting", bootstrap_servers=broker.bootstrap)
    entry = AuditEntry.objects.create(
        username="alice", source="api", cluster=starting, cluster_name="starting", action="cluster.update",
        outcome=Outcome.OK,
    )  # fmt: skip
    with pytest.raises(ConsoleError, match=r"(?i)replication factor"):
        publish(starting, [entry])
    assert publish_pending() == 0
    entry.refresh_from_db()
    assert entry.published_at is None
    assert settings.CONSOLE_AUDIT_TOPIC not in client_for(starting).metadata(max_age_s=0).topics
