"""The main flows in a real browser: Debian's chromium driven by Playwright, against the live console, the
shared broker and a real Celery worker. Any JavaScript error on a page fails the test.

With ODRADEK_SCREENSHOTS=DIR (`make screenshots`) the tests also save the main pages as PNGs in DIR."""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

import pytest

from tests.console.conftest import PASSWORD

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's sync API runs an event loop here

playwright_sync = pytest.importorskip("playwright.sync_api")
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = os.environ.get("ODRADEK_SCREENSHOTS")
TIMEOUT_MS = 30_000

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(scope="module")
def browser():
    """Module-scoped: Playwright's sync API keeps an event loop running in this thread until it stops, which
    would break every later test that calls asyncio.run()."""
    assert Path(CHROMIUM).exists(), "Debian's chromium is not installed (make install installs it)"
    with playwright_sync.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser, live_server):
    context = browser.new_context(viewport={"width": 1440, "height": 900}, base_url=live_server.url)
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(f"page error: {exc}"))
    page.on(
        "console",
        lambda msg: errors.append(f"console {msg.type}: {msg.text}") if msg.type == "error" else None,
    )
    yield page
    context.close()
    assert errors == [], "JavaScript errors on the pages"


def shot(page, name: str) -> None:
    if SCREENSHOTS:
        Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SCREENSHOTS) / f"{name}.png"), full_page=False)


def log_in(page, username: str) -> None:
    page.goto("/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(r"/clusters/\d+/$"))


def test_log_in_and_see_the_cluster(page, personas, cluster, shared_broker):
    page.goto("/clusters/")
    assert "/login/" in page.url
    shot(page, "login")
    page.fill("#id_username", "alice")
    page.fill("#id_password", "wrong")
    page.click("button[type=submit]")
    assert page.locator("[role=alert]").inner_text() == "Wrong username or password."
    log_in(page, "alice")
    assert page.locator("h1").inner_text() == "test"
    assert page.locator(".stat .value").first.inner_text() == "1"
    assert shared_broker.bootstrap in page.locator(".table").first.inner_text()
    assert page.locator(".role").inner_text() == "ADMIN"
    page.click("text=Brokers")
    page.click("a[href$='/brokers/0/']")
    page.fill("input[name=q]", "log.retention")
    page.wait_for_function("() => document.querySelectorAll('#configs tbody tr').length < 10")
    assert "log.retention.hours" in page.locator("#configs").inner_text()
    shot(page, "broker")


def test_create_a_topic_and_watch_it_become_ready(page, personas, cluster, celery_worker, topic_name):
    log_in(page, "oscar")
    page.click("nav >> text=Topics")
    page.click("text=+ Create topic")
    page.fill("#name", "bad name!")
    page.fill("#partitions", "3")
    page.fill("#replication_factor", "1")
    page.locator(".error", has_text="may contain only").wait_for()
    assert page.locator("button[type=submit]").is_disabled()
    page.fill("#name", topic_name)
    page.fill("#configs", "retention.ms=3600000")
    page.locator("#valid-mark").wait_for()
    shot(page, "topic-create")
    page.click("button:has-text('Create topic')")
    page.wait_for_url(re.compile(r"/operations/\d+/$"))
    page.locator("#operation-done").wait_for(timeout=60_000)
    assert page.locator("#operation-state").inner_text() == "done"
    page.click("#operation-done a")
    assert page.locator("#partitions-table tbody tr").count() == 3


def test_produce_and_browse_messages(page, personas, cluster, new_topic):
    name = new_topic(partitions=2)
    log_in(page, "oscar")
    page.goto(f"/clusters/{cluster.pk}/topics/{name}/")
    page.click("text=Produce a message")
    page.fill("#key", "order-42")
    page.fill("#value", '{"id": 42, "status": "paid"}')
    page.select_option("#value_encoding", "json")
    page.select_option("#partition", "1")
    page.fill("#headers", "source: console")
    page.click("#produce-form button[type=submit]")
    assert "Produced to partition 1 at offset 0" in page.locator(".flash-success").inner_text()
    rows = page.locator("#messages-table tbody tr.message-row")
    assert rows.count() == 1
    assert '"status": "paid"' in rows.first.inner_text() and "order-42" in rows.first.inner_text()
    for i in range(5):
        page.goto(f"/clusters/{cluster.pk}/topics/{name}/produce/")
        page.fill("#value", f"plain text {i}")
        page.select_option("#partition", "0")
        page.click("#produce-form button[type=submit]")
    page.select_option("#mode", "oldest")
    page.select_option("#partition", "")
    page.fill("#limit", "3")
    page.click("#browse-form button[type=submit]")
    page.locator("#browse-summary", has_text="stopped at the record limit").wait_for()
    texts = page.locator("#messages-table tbody tr.message-row").all_inner_texts()
    assert any("plain text 0" in t for t in texts)
    shot(page, "messages")
    # live tail: a record produced after the tail started appears without reloading
    page.select_option("#mode", "tail")
    page.click("#browse-form button[type=submit]")
    page.locator("#browse-summary", has_text="live").wait_for()
    from console.clusters.client import client_for

    producer = client_for(cluster).producer()
    producer.produce(name, value=b"arrived while tailing", partition=0)
    producer.flush(10)
    page.locator("#messages-table", has_text="arrived while tailing").wait_for()
    page.click("#browse-summary button")


def test_reset_a_groups_offsets_with_the_preview(page, personas, cluster, new_topic, shared_broker):
    from tests.console.test_console_groups import commit

    name = new_topic()
    from console.clusters.client import client_for

    producer = client_for(cluster).producer()
    for i in range(20):
        producer.produce(name, value=str(i).encode(), partition=0)
    producer.flush(10)
    group = f"billing-{uuid.uuid4().hex[:6]}"
    commit(shared_broker.bootstrap, group, {(name, 0): 15})
    log_in(page, "oscar")
    page.click("nav >> text=Consumer groups")
    page.fill("input[name=q]", group)
    page.locator("#groups-table a", has_text=group).wait_for()
    shot(page, "groups")
    page.click(f"#groups-table a:has-text('{group}')")
    assert page.locator("#total-lag").inner_text() == "5"
    page.click("text=Reset offsets")
    page.select_option("#to", "earliest")
    page.click("#preview-button")
    preview = page.locator("#reset-preview tbody tr")
    assert preview.count() == 1 and "15" in preview.inner_text() and "20" in preview.inner_text()
    shot(page, "group-reset")
    page.click("#apply-button")
    page.wait_for_url(re.compile(rf"/groups/{group}/$"))
    assert page.locator("#total-lag").inner_text() == "20"
    assert "reset" in page.locator(".flash-success").inner_text()


def test_delete_a_topic_with_typed_confirmation(page, personas, cluster, new_topic):
    name = new_topic()
    log_in(page, "alice")
    page.goto(f"/clusters/{cluster.pk}/topics/{name}/settings/")
    button = page.locator("#delete-topic button")
    assert button.is_disabled()
    page.fill("#confirm", name[:-1])
    assert button.is_disabled()
    page.fill("#confirm", name)
    assert button.is_enabled()
    button.click()
    page.wait_for_url(re.compile(r"/topics/$"))
    assert f"Topic {name} deleted." in page.locator(".flash-success").inner_text()
    page.goto("/audit/")
    assert "topic.delete" in page.locator("#audit-table").inner_text()
    shot(page, "audit")
    page.goto(f"/clusters/{cluster.pk}/topics/?internal=1")
    shot(page, "topics")
    page.goto(f"/clusters/{cluster.pk}/")
    page.locator(".stat").first.wait_for()
    shot(page, "overview")
