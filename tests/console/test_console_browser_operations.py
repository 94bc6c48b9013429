"""Operations and supervision in a real browser (Debian's chromium via Playwright): a reassignment proposed,
reviewed, approved and watched to completion; a broker killed from a shell seen dead and back on the Brokers
page. Against a managed cluster of real broker processes, its supervisor and a Celery worker of the test's own."""

from __future__ import annotations

import json
import os
import re
import signal
import uuid

import pytest

from tests.console.managed import broker_rows, managed_fixture  # noqa: F401  (fixture)
from tests.console.test_console_browser import browser, log_in, page, shot  # noqa: F401  (fixtures)

pytestmark = pytest.mark.django_db(transaction=True)


def test_run_a_reassignment_and_watch_a_killed_broker_come_back(page, managed):  # noqa: F811
    managed.worker()
    cluster = managed.cluster
    topic = managed.create_topic(f"web-{uuid.uuid4().hex[:6]}", [[0, 1], [1, 2]])
    log_in(page, "alice")

    page.goto("/operations/")
    page.click("#propose")
    page.select_option("#cluster", str(cluster.pk))
    page.select_option("#kind", "reassignment")
    plan = {"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [1]}]}
    page.fill("#plan", json.dumps(plan))
    page.click("#propose-form button[type=submit]")
    page.wait_for_url(re.compile(r"/operations/\d+/$"))
    assert "proposed" in page.inner_text("#operation-state")
    assert f"{topic}-0" in page.inner_text("#plan")
    shot(page, "operation-plan")
    page.click("#approve")
    page.locator("#operation-state", has_text="done").wait_for(timeout=120_000)
    assert "verified" in page.inner_text("#operation-progress")
    assert page.locator("#copy-progress").is_visible()
    shot(page, "operation-done")
    assert managed.replicas(topic)[0] == [1]

    page.goto(f"/clusters/{cluster.pk}/brokers/")
    row = page.locator("tr[data-broker='2']")
    assert "running" in row.locator(".process-state").inner_text()
    old_pid = broker_rows(cluster)[2].pid
    os.kill(old_pid, signal.SIGKILL)  # from a shell, as far as the console knows
    row.locator(".process-state", has_text=re.compile("exited|starting")).wait_for(timeout=30_000)
    row.locator(".process-state", has_text="running").wait_for(timeout=90_000)
    assert row.locator(".pid").inner_text() not in ("", str(old_pid))
    assert "broker 2 restarted" in page.inner_text("#broker-events")
    shot(page, "brokers-supervised")

    # failover is turned on from the same page, and each broker offers its decommission for review
    page.fill("#failover-grace", "45")
    page.select_option("#failover-return", "rebalance")
    page.click("#save-failover")
    page.wait_for_url(re.compile(rf"/clusters/{cluster.pk}/brokers/$"))
    assert "A broker missing for 45 s gets a failover" in page.inner_text("#self-healing")
    assert "is rebalanced in" in page.inner_text("#self-healing")
    # (a topic with three replicas on the three brokers: the decommission is refused, saying why)
    wide = managed.create_topic(f"wide-{uuid.uuid4().hex[:6]}", [[0, 1, 2]])
    page.locator("tr[data-broker='1'] button.decommission").click()
    page.wait_for_url(re.compile(r"/operations/new/$"))
    refusal = page.inner_text(".flash-error")
    assert "broker 1 cannot be decommissioned: " in refusal and f"{wide} (replication factor 3)" in refusal
    assert "add a broker first" in refusal
