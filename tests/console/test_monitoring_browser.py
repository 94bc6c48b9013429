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
