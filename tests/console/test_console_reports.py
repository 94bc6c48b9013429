"""Reports in the console: runs and schedules through the API with roles and audit, and one real report run
by a real Celery worker (a local SparkSession in a subprocess) over the shared broker, opened in a browser."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from console.audit.models import AuditEntry, Outcome
from console.reports.models import ReportRun, Status
from tests.console.conftest import wait_for
from tests.console.test_console_browser import browser, log_in, page  # noqa: F401  (fixtures)

REPORT_TIMEOUT_S = 240


def runs_url(cluster) -> str:
    return f"/api/v1/clusters/{cluster.pk}/reports/runs/"


@pytest.mark.django_db
def test_a_viewer_reads_runs_but_may_not_run_one_and_the_refusal_is_audited(api, cluster):
    assert api("victor").get(runs_url(cluster)).json()["results"] == []
    assert api("nora").get(runs_url(cluster)).status_code == 403
    response = api("victor").post(runs_url(cluster), {"report": "throughput"}, format="json")
    assert response.status_code == 403
    assert "operator" in response.json()["detail"]
    entry = AuditEntry.objects.get(action="report.run")
    assert (entry.username, entry.outcome) == ("victor", Outcome.DENIED)
    assert not ReportRun.objects.exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"report": "nope"}, "report"),
        ({"report": "throughput", "since": "yesterday"}, "since"),
        ({"report": "retention", "topics": "(unclosed"}, "topics"),
    ],
)
@pytest.mark.django_db
def test_bad_run_parameters_are_refused_naming_the_field(api, cluster, body, field):
    response = api("oscar").post(runs_url(cluster), body, format="json")
    assert response.status_code == 400, response.json()
    assert field in response.json()
    assert not ReportRun.objects.exists()


@pytest.mark.django_db
def test_every_report_has_a_daily_schedule_an_operator_can_change(api, cluster):
    url = f"/api/v1/clusters/{cluster.pk}/reports/schedules/"
    schedules = api("victor").get(url).json()
    assert sorted(s["report"] for s in schedules) == ["lag", "retention", "throughput"]
    assert all(s["crontab"] == "0 3 * * *" and s["enabled"] for s in schedules)

    assert api("victor").put(url + "lag/", {"crontab": "0 * * * *"}, format="json").status_code == 403
    bad = api("oscar").put(url + "lag/", {"crontab": "every hour"}, format="json")
    assert bad.status_code == 400 and "crontab" in bad.json()
    changed = api("oscar").put(url + "lag/", {"crontab": "*/15 * * * *", "enabled": False}, format="json")
    assert changed.status_code == 200, changed.json()
    lag = {s["report"]: s for s in api("victor").get(url).json()}["lag"]
    assert (lag["crontab"], lag["enabled"]) == ("*/15 * * * *", False)
    outcomes = list(AuditEntry.objects.filter(action="report.schedule").values_list("username", "outcome"))
    assert sorted(outcomes) == sorted(
        [("victor", Outcome.DENIED), ("oscar", Outcome.INVALID), ("oscar", Outcome.OK)]
    )


@pytest.mark.django_db
def test_the_openapi_schema_has_the_report_endpoints(api):
    schema = api(None).get("/api/v1/schema/", HTTP_ACCEPT="application/json").json()
    paths = schema["paths"]
    assert "/api/v1/clusters/{cluster_id}/reports/runs/" in paths
    assert "post" in paths["/api/v1/clusters/{cluster_id}/reports/runs/"]
    assert "/api/v1/clusters/{cluster_id}/reports/runs/{run_id}/" in paths


@pytest.mark.django_db(transaction=True)  # committed, for the worker to see the run
def test_run_now_runs_a_real_report_on_the_worker_and_the_browser_sees_its_chart(
    api, client, personas, cluster, celery_worker, new_topic, page  # noqa: F811
):
    topic = new_topic(partitions=2)
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers})
    for i in range(30):
        producer.produce(topic, key=b"k%d" % (i % 10), value=b"v" * (10 + i % 3), partition=i % 2)
    assert producer.flush(30) == 0
    expected_bytes = sum(len(b"k%d" % (i % 10)) + 10 + i % 3 for i in range(30))

    response = api("oscar").post(
        runs_url(cluster), {"report": "throughput", "since": "1h", "topics": f"^{topic}$"}, format="json"
    )
    assert response.status_code == 202, response.json()
    run_id = response.json()["id"]

    def finished():
        run = ReportRun.objects.get(pk=run_id)
        return run if run.finished else None

    run = wait_for(finished, timeout=REPORT_TIMEOUT_S, interval=0.5, what="report run finished")
    assert run.status == Status.SUCCEEDED, run.error
    assert run.duration_s > 0 and run.rows_read == 30
    detail = api("victor").get(f"{runs_url(cluster)}{run_id}/").json()
    assert detail["summary"]["topics"][topic]["records"] == 30
    assert detail["summary"]["topics"][topic]["bytes"] == expected_bytes
    assert AuditEntry.objects.get(action="report.run").outcome == Outcome.OK

    chart_url = detail["charts"]["bytes_per_hour"]["svg"]
    assert client.get(chart_url).status_code == 302  # to the login page
    client.force_login(personas["nora"])
    assert client.get(chart_url).status_code == 403
    client.force_login(personas["victor"])
    chart = client.get(chart_url)
    assert chart.status_code == 200 and chart["Content-Type"] == "image/svg+xml"
    assert b"<svg" in b"".join(chart.streaming_content)
    reports_page = client.get(f"/clusters/{cluster.pk}/reports/").content.decode()
    assert chart_url in reports_page and topic in reports_page

    log_in(page, "victor")
    page.goto(f"/clusters/{cluster.pk}/reports/runs/{run_id}/")
    assert page.locator("#run-status").inner_text() == "succeeded"
    chart_img = page.locator("img[alt=bytes_per_hour]")
    chart_img.wait_for()
    page.wait_for_function("img => img.complete && img.naturalWidth > 0", arg=chart_img.element_handle())
    assert topic in page.locator("#run-summary").inner_text()
