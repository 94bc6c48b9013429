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
import urllib.request
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
        #: statuses to answer with first (then 204)
        self.failures: list[int] = []
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.received.append((dict(self.headers), body))
                self.send_response(receiver.failures.pop(0) if receiver.failures else 204)
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


@pytest.fixture
def sampled_group(cluster, new_topic, slow_consumer):
    """A group with lag 6 on one partition, sampled in three rounds (T0, T0+30 s, T0+60 s)."""
    topic = new_topic(partitions=1)
    produce(cluster, topic, 10)
    group = f"g-{uuid.uuid4().hex[:8]}"
    slow_consumer(topic, group).consume(4)
    for i in range(3):
        sample_cluster(cluster, T0 + i * STEP, publish=False)
    return topic, group


def test_metrics_use_kafka_lag_exporters_names(client, cluster, sampled_group, settings):
    from prometheus_client.parser import text_string_to_metric_families

    topic, group = sampled_group
    response = client.get("/metrics")
    assert response.status_code == 200
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(response.content.decode())
        for s in family.samples
    }
    # the slow consumer assigns its partition itself: no member has it
    unknown = (("client_id", "unknown"), ("consumer_id", "unknown"), ("member_host", "unknown"))
    part = tuple(
        sorted((("cluster_name", "test"), ("group", group), ("partition", "0"), ("topic", topic), *unknown))
    )
    assert samples[("kafka_consumergroup_group_lag", part)] == 6
    assert samples[("kafka_consumergroup_group_offset", part)] == 4
    assert ("kafka_consumergroup_group_lag_seconds", part) in samples
    # the slow consumer commits without joining: a simple consumer group, as ListGroups says
    simple = (("cluster_name", "test"), ("group", group), ("is_simple_consumer", "true"))
    assert samples[("kafka_consumergroup_group_max_lag", simple)] == 6
    assert ("kafka_consumergroup_group_max_lag_seconds", simple) in samples
    assert samples[("kafka_consumergroup_group_sum_lag", (("cluster_name", "test"), ("group", group)))] == 6
    topic_labels = (("cluster_name", "test"), ("partition", "0"), ("topic", topic))
    assert samples[("kafka_partition_latest_offset", topic_labels)] == 10
    # three rounds, committed offset fixed, lag above 0, a member-less group, no new data: STALL -> ERR
    assert samples[("odradek_consumergroup_status", (("cluster_name", "test"), ("group", group)))] == 2

    settings.CONSOLE_METRICS_TOKEN = "scrape-me"
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers={"Authorization": "Bearer scrape-me"}).status_code == 200


def test_lag_metrics_name_the_member_that_has_the_partition(client, cluster, new_topic):
    """kafka-lag-exporter's member labels: a subscribed consumer's partitions carry its host, member id and
    client.id; a member-less group's carry "unknown"."""
    from prometheus_client.parser import text_string_to_metric_families

    topic = new_topic(partitions=2)
    produce(cluster, topic, 6, partition=0)
    group, idle = f"g-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": group,
            "client.id": "lag-labels-client",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.subscribe([topic])
        msg = wait_for(lambda: consumer.poll(0.2), timeout=30, what="a record through the group")
        consumer.commit(message=msg, asynchronous=False)
        client_for(cluster).alter_group_offsets(idle, {(topic, 0): 2})
        sample_cluster(cluster, T0, publish=False)
        described = client_for(cluster).describe_groups([group])[group]
        member = described.members[0]
        row = OffsetSample.objects.get(cluster=cluster, group_id=group, partition=0)
        assert (row.member_host, row.consumer_id, row.client_id) == (
            member.host, member.member_id, "lag-labels-client",
        )  # fmt: skip
        assert member.member_id.startswith("lag-labels-client")
        idle_row = OffsetSample.objects.get(cluster=cluster, group_id=idle)
        assert (idle_row.member_host, idle_row.consumer_id, idle_row.client_id) == ("unknown",) * 3

        text = client.get("/metrics").content.decode()
    finally:
        consumer.close()
    lags = {
        s.labels["group"]: s.labels
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "kafka_consumergroup_group_lag" and s.labels["topic"] == topic
    }
    assert lags[group]["client_id"] == "lag-labels-client"
    assert lags[group]["consumer_id"] == member.member_id
    assert lags[group]["member_host"] == member.host
    assert (lags[idle]["member_host"], lags[idle]["consumer_id"], lags[idle]["client_id"]) == ("unknown",) * 3
    maxima = {
        s.labels["group"]: s.labels["is_simple_consumer"]
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == "kafka_consumergroup_group_max_lag"
    }
    assert (maxima[group], maxima[idle]) == ("false", "true")  # a subscribed group; offsets committed alone


def test_topic_bytes_in_and_out_come_from_the_brokers_metrics(
    client, personas, broker_factory, cluster, topic_name
):
    """A broker serving metrics: each round stores its per-topic counters, and the topic's charts show bytes in
    and out per second from them. The shared broker serves none: its topic page says where bytes out come from."""
    from prometheus_client.parser import text_string_to_metric_families

    from console.clusters.models import Cluster
    from console.monitoring.models import BrokerTopicCounters
    from console.monitoring.selectors import topic_throughput
    from tests.conftest import free_port

    port = free_port()
    broker = broker_factory(overrides={"odradek.metrics.listener": f"http://0.0.0.0:{port}"})
    metered = Cluster.objects.create(name="metered", bootstrap_servers=broker.bootstrap)
    admin = client_for(metered)
    admin.create_topic(topic_name, 1, 1, {}, validate_only=False)
    wait_for(lambda: topic_name in admin.metadata(max_age_s=0).topics, what="the topic in metadata")
    produce(metered, topic_name, 20)
    sample_cluster(metered, T0, publish=False)
    produce(metered, topic_name, 10)
    reader = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}"})
    try:
        reader.assign([TopicPartition(topic_name, 0, 0)])
        read = 0
        while read < 30:
            msg = wait_for(lambda: reader.poll(0.2), timeout=20, what="a record")
            assert msg.error() is None, msg.error()
            read += 1
    finally:
        reader.close()
    sample_cluster(metered, T0 + STEP, publish=False)

    first, second = (
        BrokerTopicCounters.objects.get(cluster=metered, topic=topic_name, round_ms=r)
        for r in (T0, T0 + STEP)
    )
    assert first.broker_id == second.broker_id == 0
    assert (first.messages_in, second.messages_in) == (20, 30)
    assert first.bytes_out == 0 and second.bytes_out >= second.bytes_in > first.bytes_in > 0
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        scraped = {
            s.name: s.value
            for family in text_string_to_metric_families(response.read().decode())
            for s in family.samples
            if s.labels.get("topic") == topic_name
        }
    assert scraped["kafka_server_brokertopicmetrics_bytesout_total"] == second.bytes_out  # nobody read since

    rates = topic_throughput(metered, topic_name)
    assert rates["bytes_out"] == [(T0 + STEP, (second.bytes_out - first.bytes_out) / 30)]
    assert rates["bytes_in"] == [(T0 + STEP, (second.bytes_in - first.bytes_in) / 30)]
    client.force_login(personas["victor"])
    fragment = client.get(f"/clusters/{metered.pk}/rates/{topic_name}/").content.decode()
    chart = fragment[fragment.index('id="chart-topic-bytes"') :]
    chart = chart[: chart.index("</svg>")]
    assert 'data-series="in"' in chart and 'data-series="out"' in chart
    assert 'id="bytes-out-source"' not in fragment
    shared_topic = f"{topic_name}-shared"
    client_for(cluster).create_topic(shared_topic, 1, 1, {}, validate_only=False)
    assert (
        'id="bytes-out-source"'
        in client.get(f"/clusters/{cluster.pk}/rates/{shared_topic}/").content.decode()
    )


def test_rules_through_the_api_are_audited_and_checked(api, cluster):
    from console.audit.models import AuditEntry, Outcome

    body = {
        "name": "big lag",
        "cluster": cluster.pk,
        "group_pattern": "billing-*",
        "condition": "lag_seconds",
        "threshold": 120,
        "for_s": 300,
        "severity": "critical",
        "webhook_url": "http://127.0.0.1:9/hook",
        "webhook_secret": "k",
    }
    assert api("victor").post("/api/v1/alerts/rules/", body, format="json").status_code == 403
    response = api("oscar").post("/api/v1/alerts/rules/", body, format="json")
    assert response.status_code == 201, response.json()
    rule_id = response.json()["id"]
    assert "webhook_secret" not in response.json()
    entry = AuditEntry.objects.get(action="alert_rule.create", outcome=Outcome.OK)
    assert (entry.resource_name, entry.params["webhook_secret"]) == ("big lag", "***")

    bad = api("oscar").post(
        "/api/v1/alerts/rules/", {**body, "name": "x", "condition": "vibes"}, format="json"
    )
    assert bad.status_code == 400 and "condition" in bad.json()
    duplicate = api("oscar").post("/api/v1/alerts/rules/", body, format="json")
    assert duplicate.status_code == 400 and "name" in duplicate.json()

    changed = api("oscar").patch(f"/api/v1/alerts/rules/{rule_id}/", {"threshold": 60}, format="json")
    assert (changed.status_code, changed.json()["threshold"]) == (200, 60)
    assert api("oscar").delete(f"/api/v1/alerts/rules/{rule_id}/").status_code == 204
    assert list(
        AuditEntry.objects.filter(resource_type="alert_rule", outcome=Outcome.OK)
        .order_by("pk")
        .values_list("action", flat=True)
    ) == ["alert_rule.create", "alert_rule.update", "alert_rule.delete"]


def test_silences_and_sampler_interval_through_the_api(api, cluster):
    silence = {
        "cluster": cluster.pk,
        "subject_pattern": "group:*",
        "starts_at": "2030-01-01T00:00:00Z",
        "ends_at": "2030-01-01T02:00:00Z",
        "comment": "upgrade window",
    }
    response = api("oscar").post("/api/v1/alerts/silences/", silence, format="json")
    assert response.status_code == 201, response.json()
    backwards = api("oscar").post(
        "/api/v1/alerts/silences/", {**silence, "ends_at": "2029-12-31T00:00:00Z"}, format="json"
    )
    assert backwards.status_code == 400 and "ends_at" in backwards.json()
    assert api("oscar").put(f"/api/v1/clusters/{cluster.pk}/sampler/", {"interval_s": 10}).status_code == 403
    ok = api("alice").put(f"/api/v1/clusters/{cluster.pk}/sampler/", {"interval_s": 10}, format="json")
    assert (ok.status_code, ok.json()["interval_s"]) == (200, 10)


def test_sample_due_honours_each_clusters_interval(cluster, settings):
    from console.monitoring.models import SamplerConfig
    from console.monitoring.tasks import sample_due

    SamplerConfig.objects.create(cluster=cluster, interval_s=60)
    assert sample_due(T0) == 1
    assert sample_due(T0 + 30_000) == 0
    assert sample_due(T0 + 60_000) == 1


def test_group_lag_api_and_charts(api, client, personas, cluster, sampled_group):
    topic, group = sampled_group
    body = api("victor").get(f"/api/v1/clusters/{cluster.pk}/lag/{group}/").json()
    assert (body["lag"], body["status"], body["partitions"][0]["status"]) == (6, "ERR", "STALL")
    assert body["history"]["lag"] == [[T0, 6], [T0 + STEP, 6], [T0 + 2 * STEP, 6]]
    assert api("victor").get(f"/api/v1/clusters/{cluster.pk}/lag/nobody/").status_code == 404

    client.force_login(personas["victor"])
    fragment = client.get(f"/clusters/{cluster.pk}/lag/{group}/").content.decode()
    assert 'id="chart-group-lag"' in fragment and "<polyline" in fragment
    svg = client.get(f"/clusters/{cluster.pk}/lag/{group}/chart-lag.svg")
    assert svg["Content-Type"] == "image/svg+xml" and b"<polyline" in svg.content
    rates = client.get(f"/clusters/{cluster.pk}/rates/{topic}/").content.decode()
    assert 'id="chart-topic-messages"' in rates
    assert client.get(f"/clusters/{cluster.pk}/lag/{group}/chart-nope.svg").status_code == 404
    png = client.get(f"/clusters/{cluster.pk}/lag/{group}/chart-partitions.png")
    assert png["Content-Type"] == "image/png" and png.content.startswith(b"\x89PNG")
    assert client.get(f"/clusters/{cluster.pk}/rates/{topic}/chart-messages.png").content.startswith(
        b"\x89PNG"
    )


def test_rules_and_silences_from_the_alerts_page(client, personas, cluster):
    from console.audit.models import AuditEntry

    form = {
        "name": "page rule",
        "cluster": cluster.pk,
        "group_pattern": "orders-*",
        "topic_pattern": "",
        "condition": "status",
        "threshold": "0",
        "for_s": "120",
        "severity": "warning",
        "email_to": "",
        "webhook_url": "",
        "webhook_secret": "",
        "enabled": "on",
    }
    client.force_login(personas["victor"])
    assert client.post("/alerts/rules/new/", form).status_code == 403
    client.force_login(personas["oscar"])
    response = client.post("/alerts/rules/new/", form, follow=True)
    assert "Rule &#x27;page rule&#x27; created." in response.content.decode()
    rule = AlertRule.objects.get(name="page rule")
    assert (rule.condition, rule.for_s, rule.group_pattern) == ("status", 120, "orders-*")
    bad = client.post("/alerts/rules/new/", {**form, "name": "other", "for_s": "-1"}, follow=True)
    assert "for_s:" in bad.content.decode() and not AlertRule.objects.filter(name="other").exists()

    silence = {
        "cluster": cluster.pk,
        "rule": rule.pk,
        "subject_pattern": "group:orders-*",
        "starts_at": "2030-01-01 00:00",
        "ends_at": "2030-01-01 01:00",
        "comment": "deploy",
    }
    client.post("/alerts/silences/new/", silence)
    page = client.get("/alerts/").content.decode()
    assert "page rule" in page and "group:orders-*" in page
    client.post(f"/alerts/rules/{rule.pk}/delete/")
    assert not AlertRule.objects.exists()
    assert list(AuditEntry.objects.order_by("pk").values_list("action", "outcome")) == [
        ("alert_rule.create", "denied"),
        ("alert_rule.create", "ok"),
        ("silence.create", "ok"),
        ("alert_rule.delete", "ok"),
    ]


def rule_form(rule: AlertRule, **changes) -> dict:
    """The edit form as the browser posts it: the rule's current values (no secret), with `changes`."""
    form = {
        "name": rule.name,
        "cluster": rule.cluster_id or "",
        "group_pattern": rule.group_pattern,
        "topic_pattern": rule.topic_pattern,
        "condition": rule.condition,
        "threshold": str(rule.threshold),
        "for_s": str(rule.for_s),
        "severity": rule.severity,
        "email_to": rule.email_to,
        "webhook_url": rule.webhook_url,
        "webhook_secret": "",
        **({"enabled": "on"} if rule.enabled else {}),
    }
    return {**form, **changes}


def test_rules_are_edited_in_place_from_the_alerts_page(client, personas, cluster):
    from console.audit.models import AuditEntry

    rule = AlertRule.objects.create(
        name="lagging orders", cluster=cluster, group_pattern="orders-*", condition="offset_lag",
        threshold=100, for_s=60, webhook_url="https://hooks.example/x", webhook_secret="s3cret",
    )  # fmt: skip
    AlertRule.objects.create(name="other rule", condition="status")
    edit_url, htmx = f"/alerts/rules/{rule.pk}/edit/", {"HX-Request": "true"}

    client.force_login(personas["victor"])
    assert client.get(edit_url, headers=htmx).status_code == 403
    assert client.post(edit_url, rule_form(rule, threshold="5"), headers=htmx).status_code == 403
    assert f'hx-get="{edit_url}"' not in client.get("/alerts/").content.decode()

    client.force_login(personas["oscar"])
    page = client.get("/alerts/").content.decode()
    assert f'hx-get="{edit_url}"' in page and f'id="rule-{rule.pk}"' in page
    fragment = client.get(edit_url, headers=htmx).content.decode()
    assert fragment.lstrip().startswith(f'<tr id="rule-{rule.pk}"') and "<html" not in fragment
    assert 'value="orders-*"' in fragment and "s3cret" not in fragment  # the secret never goes back out

    # htmx: the changed fields through the action, answered with the rule's new row; the secret is kept
    row = client.post(edit_url, rule_form(rule, threshold="250", for_s="120"), headers=htmx).content.decode()
    assert row.lstrip().startswith(f'<tr id="rule-{rule.pk}"') and "(N = 250)" in row and "120 s" in row
    rule.refresh_from_db()
    assert (rule.threshold, rule.for_s, rule.webhook_secret, rule.group_pattern) == (
        250,
        120,
        "s3cret",
        "orders-*",
    )

    # errors come back in the form, and nothing changes
    bad = client.post(edit_url, rule_form(rule, for_s="-1"), headers=htmx).content.decode()
    assert 'class="rule-edit"' in bad and "errorlist" in bad
    taken = client.post(edit_url, rule_form(rule, name="other rule"), headers=htmx).content.decode()
    assert "already exists" in taken
    rule.refresh_from_db()
    assert (rule.name, rule.for_s) == ("lagging orders", 120)

    # a new secret replaces the old; "clear" removes it; without htmx the POST goes back to the alerts page
    client.post(edit_url, rule_form(rule, webhook_secret="n3w"), headers=htmx)
    rule.refresh_from_db()
    assert rule.webhook_secret == "n3w"
    response = client.post(edit_url, rule_form(rule, clear_webhook_secret="on"), follow=True)
    assert response.redirect_chain[-1][0] == "/alerts/"
    assert "Rule &#x27;lagging orders&#x27; saved." in response.content.decode()
    rule.refresh_from_db()
    assert rule.webhook_secret == ""
    unchanged = client.post(edit_url, rule_form(rule), headers=htmx).content.decode()
    assert "Nothing changed." in unchanged
    assert client.get(f"/alerts/rules/{rule.pk}/row/").content.decode().lstrip().startswith("<tr")
    assert client.get(edit_url).status_code == 200  # a page of its own without htmx

    updates = list(
        AuditEntry.objects.filter(action="alert_rule.update").order_by("pk").values_list("outcome", "params")
    )
    assert [outcome for outcome, _ in updates] == ["denied", "ok", "ok", "ok"]
    assert updates[1][1] == {"threshold": 250.0, "for_s": 120}  # only what changed
    assert updates[2][1] == {"webhook_secret": "***"} and updates[3][1] == {"webhook_secret": ""}


@pytest.mark.django_db(transaction=True)
def test_a_failed_webhook_is_retried_by_the_worker(cluster, new_topic, slow_consumer, webhook, celery_worker):
    webhook.failures = [503]
    topic = new_topic(partitions=1)
    group = f"retry-{uuid.uuid4().hex[:8]}"
    AlertRule.objects.create(
        name="retried",
        cluster=cluster,
        group_pattern=group,
        condition="offset_lag",
        threshold=0,
        webhook_url=webhook.url,
    )
    produce(cluster, topic, 2)
    slow_consumer(topic, group).consume(1)
    sample_and_evaluate(cluster, T0)
    wait_for(lambda: len(webhook.received) >= 2, timeout=60, what="the webhook retried after a 503")
    assert webhook.received[0][1] == webhook.received[1][1]
    note = wait_for(
        lambda: Notification.objects.filter(alert__rule__name="retried", status="sent").first(),
        timeout=30,
        what="the notification marked sent",
    )
    assert note.attempts == 2


def test_broker_down_fires_for_a_broker_that_was_seen_and_is_gone(cluster, settings):
    from console.monitoring.models import SamplerConfig

    rule = AlertRule.objects.create(name="down", cluster=cluster, condition="broker_down", threshold=0)
    sample_cluster(cluster, T0, publish=False)
    config = SamplerConfig.objects.get(cluster=cluster)
    assert [b for b, _ in config.known_brokers] == [0]
    evaluate_cluster(cluster, T0)
    assert not Alert.objects.filter(rule=rule).exists()
    # a broker seen a minute ago that the metadata no longer lists
    config.known_brokers = [*config.known_brokers, [7, T0 - 60_000]]
    config.save()
    evaluate_cluster(cluster, T0 + STEP)
    alert = Alert.objects.get(rule=rule)
    assert (alert.subject, alert.state, alert.value) == ("cluster", "firing", 1)
    # forgotten once unseen for the whole retention: the alert resolves
    settings.CONSOLE_LAG_RETENTION_S = 60
    sample_cluster(cluster, T0 + 2 * STEP, publish=False)
    evaluate_cluster(cluster, T0 + 2 * STEP)
    assert Alert.objects.get(pk=alert.pk).state == "resolved"
