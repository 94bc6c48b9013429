"""Lag monitoring against the shared broker: the sampler's rounds (database window and the lag-samples topic),
and alert rules tripped by a real slow consumer, notified by webhook to a real HTTP server (HMAC-signed) and by
email, resolved when the consumer catches up, suppressed by a silence. Rounds are driven by calling the task
functions with explicit times instead of waiting for beat."""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import http.server
import json
import threading
import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition
from django.core import mail

from console.clusters.client import client_for
from console.monitoring.alerting import evaluate_cluster
from console.monitoring.lag import GroupStatus, PartitionStatus
from console.monitoring.models import Alert, AlertRule, Notification, OffsetSample, Silence
from console.monitoring.sampler import sample_cluster
from console.monitoring.selectors import lag_now
from console.monitoring.tasks import SIGNATURE_HEADER, deliver, sample_and_evaluate
from jobs.lag_samples import LAG_SAMPLES_TOPIC, LagSample
from tests.console.conftest import wait_for

T0 = 1_795_000_000_000
STEP = 30_000


def produce(cluster, topic: str, count: int, partition: int = 0) -> None:
    producer = client_for(cluster).producer()
    for i in range(count):
        producer.produce(topic, value=f"m{i}".encode(), partition=partition)
    assert producer.flush(10) == 0


class SlowConsumer:
    """A real group member that reads and commits only as many records as the test lets it."""

    def __init__(self, bootstrap: str, topic: str, group: str) -> None:
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 10000,
            }
        )
        self.consumer.assign([TopicPartition(topic, 0, 0)])
        self.topic = topic

    def consume(self, count: int) -> None:
        last = None
        for _ in range(count):
            msg = wait_for(lambda: self.consumer.poll(0.2), timeout=20, what="a record")
            assert msg.error() is None, msg.error()
            last = msg
        self.consumer.commit(message=last, asynchronous=False)

    def close(self) -> None:
        self.consumer.close()


@pytest.fixture
def slow_consumer(shared_broker):
    made = []

    def make(topic: str, group: str) -> SlowConsumer:
        made.append(SlowConsumer(shared_broker.bootstrap, topic, group))
        return made[-1]

    yield make
    for consumer in made:
        consumer.close()


class WebhookReceiver:
    """A real HTTP server on a free port that records every POST (headers and body)."""

    def __init__(self) -> None:
        self.received: list[tuple[dict, bytes]] = []
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.received.append((dict(self.headers), body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def bodies(self) -> list[dict]:
        return [json.loads(body) for _, body in self.received]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def webhook():
    receiver = WebhookReceiver()
    yield receiver
    receiver.close()


def test_a_round_stores_offsets_and_writes_the_contract_format(cluster, new_topic, slow_consumer):
    topic = new_topic(partitions=1)
    produce(cluster, topic, 10)
    group = f"g-{uuid.uuid4().hex[:8]}"
    slow_consumer(topic, group).consume(4)

    result = sample_cluster(cluster, T0)
    assert result.samples >= 1
    row = OffsetSample.objects.get(cluster=cluster, group_id=group, round_ms=T0)
    assert (row.topic, row.partition, row.committed, row.end, row.stable) == (topic, 0, 4, 10, 10)

    consumer = Consumer({**client_for(cluster).consumer_config()})
    try:
        consumer.assign([TopicPartition(LAG_SAMPLES_TOPIC, 0, 0)])
        found = []

        def read_ours():
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error() and msg.key() == group.encode():
                found.append((msg, LagSample.from_value(msg.value())))
            return found

        wait_for(read_ours, timeout=20, what="our sample in the lag-samples topic")
    finally:
        consumer.close()
    msg, sample = found[0]
    assert sample == LagSample(cluster.name, group, topic, 0, T0, 4, 10, 10)
    assert msg.timestamp()[1] == T0

    lags = lag_now(cluster, T0)[group]
    assert (lags.lag, lags.max_lag, lags.status) == (6, 6, GroupStatus.OK)


def test_the_window_is_bounded(cluster, new_topic, slow_consumer, settings):
    settings.CONSOLE_LAG_RETENTION_S = 60
    topic = new_topic(partitions=1)
    produce(cluster, topic, 3)
    group = f"g-{uuid.uuid4().hex[:8]}"
    slow_consumer(topic, group).consume(1)
    for i in range(5):
        sample_cluster(cluster, T0 + i * STEP, publish=False)
    rounds = set(
        OffsetSample.objects.filter(cluster=cluster, group_id=group).values_list("round_ms", flat=True)
    )
    assert rounds == {T0 + 2 * STEP, T0 + 3 * STEP, T0 + 4 * STEP}


@pytest.mark.django_db(transaction=True)
def test_slow_consumer_fires_a_signed_webhook_then_resolves(
    cluster, new_topic, slow_consumer, webhook, celery_worker
):
    topic = new_topic(partitions=1)
    group = f"slow-{uuid.uuid4().hex[:8]}"
    AlertRule.objects.create(
        name="slow consumers",
        cluster=cluster,
        group_pattern="slow-*",
        condition="offset_lag",
        threshold=5,
        for_s=60,
        webhook_url=webhook.url,
        webhook_secret="s3cret",
    )
    consumer = slow_consumer(topic, group)
    produce(cluster, topic, 10)
    consumer.consume(1)

    sample_and_evaluate(cluster, T0)
    alert = Alert.objects.get(subject=f"group:{group}")
    assert (alert.state, alert.value) == ("pending", 9)
    produce(cluster, topic, 10)
    consumer.consume(2)
    sample_and_evaluate(cluster, T0 + STEP)
    assert Alert.objects.get(pk=alert.pk).state == "pending"  # not yet for 60 s
    produce(cluster, topic, 10)
    consumer.consume(2)
    sample_and_evaluate(cluster, T0 + 2 * STEP)
    alert.refresh_from_db()
    assert (alert.state, alert.value, alert.fired_ms) == ("firing", 25, T0 + 2 * STEP)
    # the status over the window: offsets move, the lag never shrinks
    assert lag_now(cluster, T0 + 2 * STEP)[group].partitions[0].status == PartitionStatus.WARN

    wait_for(lambda: webhook.received, timeout=30, what="the firing webhook")
    headers, body = webhook.received[0]
    expected = "sha256=" + hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
    assert headers[SIGNATURE_HEADER] == expected
    first = json.loads(body)
    assert (first["kind"], first["rule"], first["subject"], first["value"]) == (
        "firing",
        "slow consumers",
        f"group:{group}",
        25,
    )

    sample_and_evaluate(cluster, T0 + 3 * STEP)  # still lagging: no second notification
    consumer.consume(25)
    sample_and_evaluate(cluster, T0 + 4 * STEP)
    alert.refresh_from_db()
    assert (alert.state, alert.resolved_ms) == ("resolved", T0 + 4 * STEP)
    wait_for(lambda: len(webhook.received) >= 2, timeout=30, what="the resolved webhook")
    assert [b["kind"] for b in webhook.bodies()] == ["firing", "resolved"]
    assert Notification.objects.filter(alert=alert, status="sent").count() == 2


@pytest.mark.django_db(transaction=True)
def test_a_silence_suppresses_the_notification(cluster, new_topic, slow_consumer, webhook):
    topic = new_topic(partitions=1)
    group = f"quiet-{uuid.uuid4().hex[:8]}"
    rule = AlertRule.objects.create(
        name="quiet",
        cluster=cluster,
        group_pattern=group,
        condition="offset_lag",
        threshold=0,
        for_s=0,
        webhook_url=webhook.url,
    )
    now = dt.datetime.fromtimestamp(T0 / 1000, tz=dt.UTC)
    Silence.objects.create(
        rule=rule,
        subject_pattern="group:quiet-*",
        starts_at=now - dt.timedelta(minutes=1),
        ends_at=now + dt.timedelta(minutes=1),
        comment="maintenance",
    )
    consumer = slow_consumer(topic, group)
    produce(cluster, topic, 3)
    consumer.consume(1)
    sample_and_evaluate(cluster, T0)
    alert = Alert.objects.get(rule=rule)
    assert alert.state == "silenced"
    assert not Notification.objects.filter(alert=alert).exists()
    # the silence ends while the lag remains: the alert fires and notifies
    sample_cluster(cluster, T0 + 2 * 60_000, publish=False)
    queued = evaluate_cluster(cluster, T0 + 2 * 60_000)
    assert [(n.channel, n.kind) for n in queued] == [("webhook", "firing")]
    assert Alert.objects.get(pk=alert.pk).state == "firing"


def test_email_through_the_django_backend(cluster, new_topic, slow_consumer):
    topic = new_topic(partitions=1)
    group = f"mail-{uuid.uuid4().hex[:8]}"
    AlertRule.objects.create(
        name="mail",
        cluster=cluster,
        group_pattern=group,
        condition="offset_lag",
        threshold=1,
        severity="critical",
        email_to="ops@example.com, oncall@example.com",
    )
    consumer = slow_consumer(topic, group)
    produce(cluster, topic, 5)
    consumer.consume(1)
    sample_cluster(cluster, T0, publish=False)
    (note,) = evaluate_cluster(cluster, T0)
    deliver(note.pk)
    (message,) = mail.outbox
    assert message.to == ["ops@example.com", "oncall@example.com"]
    assert message.subject.startswith("[critical] firing: mail")
    assert f"group:{group}" in message.body
    note.refresh_from_db()
    assert (note.status, note.attempts) == ("sent", 1)


def test_notifications_are_rate_limited(cluster, new_topic, slow_consumer, settings):
    settings.CONSOLE_ALERT_NOTIFICATIONS_PER_HOUR = 1
    topic = new_topic(partitions=1)
    groups = [f"rl-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    AlertRule.objects.create(
        name="rl",
        cluster=cluster,
        group_pattern="rl-*",
        condition="offset_lag",
        threshold=0,
        email_to="ops@example.com",
    )
    produce(cluster, topic, 3)
    for group in groups:
        slow_consumer(topic, group).consume(1)
    sample_cluster(cluster, T0, publish=False)
    queued = evaluate_cluster(cluster, T0)
    assert sorted(n.status for n in queued) == ["pending", "rate_limited"]
