"""Lag monitoring in a real browser: a slow consumer's firing alert on the alerts page and the cluster
overview, and the lag chart on the group's page."""

from __future__ import annotations

import uuid

import pytest

from console.monitoring.models import AlertRule
from console.monitoring.tasks import sample_and_evaluate
from tests.console.test_console_browser import browser, log_in, page  # noqa: F401  (fixtures)
from tests.console.test_monitoring import STEP, T0, SlowConsumer, produce

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_firing_alert_and_the_lag_chart(page, personas, cluster, shared_broker, new_topic):  # noqa: F811
    topic = new_topic(partitions=1)
    group = f"shown-{uuid.uuid4().hex[:8]}"
    AlertRule.objects.create(
        name="shown lag", cluster=cluster, group_pattern=group, condition="offset_lag", threshold=3
    )
    consumer = SlowConsumer(shared_broker.bootstrap, topic, group)
    try:
        produce(cluster, topic, 10)
        consumer.consume(2)
        sample_and_evaluate(cluster, T0)
        produce(cluster, topic, 5)
        consumer.consume(2)
        sample_and_evaluate(cluster, T0 + STEP)
    finally:
        consumer.close()

    log_in(page, "victor")
    page.goto(f"/clusters/{cluster.pk}/")
    overview_row = page.locator("#cluster-alerts tr.alert-firing", has_text=group)
    overview_row.wait_for()
    page.goto("/alerts/")
    row = page.locator("#open-alerts tr.alert-firing", has_text=f"group:{group}")
    assert "shown lag" in row.inner_text()
    page.goto(f"/clusters/{cluster.pk}/groups/{group}/")
    chart = page.locator("#chart-group-lag polyline.series")
    chart.wait_for()
    points = chart.get_attribute("points").split()
    assert len(points) == 2  # one point per round
    assert page.locator("#group-status").inner_text() == "WARN"  # offsets move, lag grows (8 -> 11)


def test_an_operator_edits_a_rule_in_place(page, personas, cluster):  # noqa: F811
    rule = AlertRule.objects.create(
        name="edited in place",
        cluster=cluster,
        group_pattern="billing-*",
        condition="lag_seconds",
        threshold=30,
    )
    AlertRule.objects.create(name="taken", condition="status")
    log_in(page, "oscar")
    page.goto("/alerts/")
    row = page.locator(f"#rule-{rule.pk}")
    row.get_by_role("link", name="Edit").click()
    form = page.locator(f"#rule-edit-form-{rule.pk}")
    form.wait_for()
    assert page.url.endswith("/alerts/")  # swapped into the page, not a navigation
    assert form.locator("#id_group_pattern").input_value() == "billing-*"

    form.locator("#id_name").fill("taken")  # another rule's name
    form.get_by_role("button", name="Save").click()
    error = page.locator(f"#rule-edit-form-{rule.pk} .errorlist")
    error.wait_for()  # the form again, with the server's error
    assert "already exists" in error.inner_text()
    form.locator("#id_name").fill("edited in place")

    form.locator("#id_for_s").fill("90")
    form.locator("#id_threshold").fill("45")
    form.get_by_role("button", name="Save").click()
    saved = page.locator(f"#rule-{rule.pk} .rule-saved")
    saved.wait_for()
    assert "(N = 45)" in row.inner_text() and "90 s" in row.inner_text()
    rule.refresh_from_db()
    assert (rule.threshold, rule.for_s) == (45, 90)

    row.get_by_role("link", name="Edit").click()
    form.wait_for()
    form.get_by_role("link", name="Cancel").click()
    page.locator(f"#rule-{rule.pk}.rule-row").wait_for()
    assert page.locator(f"#rule-edit-form-{rule.pk}").count() == 0


def _sampled(cluster, round_ms: int) -> bool:
    from console.errors import ConsoleError
    from console.monitoring.sampler import sample_cluster

    try:
        sample_cluster(cluster, round_ms, publish=False)
    except ConsoleError:
        return False
    return True


def test_the_topic_page_charts_bytes_in_and_out(page, personas, broker_factory, topic_name):  # noqa: F811
    from confluent_kafka import Consumer, TopicPartition

    from console.clusters.client import client_for
    from console.clusters.models import Cluster
    from tests.conftest import free_port
    from tests.console.conftest import wait_for

    broker = broker_factory(
        overrides={
            "odradek.metrics.listener": f"http://127.0.0.1:{free_port()}",
            "offsets.topic.num.partitions": "1",
        }
    )
    metered = Cluster.objects.create(name="metered", bootstrap_servers=broker.bootstrap)
    client_for(metered).create_topic(topic_name, 1, 1, {}, validate_only=False)
    reader = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}"})
    try:
        reader.assign([TopicPartition(topic_name, 0, 0)])
        for round_ms in (T0, T0 + STEP, T0 + 2 * STEP):
            produce(metered, topic_name, 10)
            for _ in range(10):
                assert wait_for(lambda: reader.poll(0.2), timeout=20, what="a record").error() is None
            # The reader's group has the broker create __consumer_offsets; a round taken while that partition
            # is not served yet fails whole (nothing stored), as a beat round would, and is taken again.
            wait_for(lambda r=round_ms: _sampled(metered, r), timeout=30, what="a sampling round")
    finally:
        reader.close()

    log_in(page, "victor")
    page.goto(f"/clusters/{metered.pk}/topics/{topic_name}/")
    for series in ("in", "out"):
        line = page.locator(f'#chart-topic-bytes polyline.series[data-series="{series}"]')
        line.wait_for(state="attached")  # a steady rate is a flat line, which has no height
        assert len(line.get_attribute("points").split()) == 2  # a rate per pair of rounds
    assert page.locator("#bytes-out-source").count() == 0
