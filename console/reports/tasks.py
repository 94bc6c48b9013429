"""Celery tasks: run a report (started by "run now" or by a beat schedule)."""

from __future__ import annotations

from celery import shared_task

from console.clusters.models import Cluster
from console.reports import runner
from console.reports.models import ReportRun, Status


@shared_task(name="console.reports.run_report")
def run_report(run_id: int) -> str:
    run = ReportRun.objects.select_related("cluster").get(pk=run_id)
    if run.status != Status.QUEUED:  # delivered twice: the first delivery ran it
        return run.status
    return runner.execute(run).status


@shared_task(name="console.reports.scheduled_report")
def scheduled_report(cluster_id: int, report: str, since: str = "24h") -> int | None:
    """A beat schedule's run: recorded like one started by hand, with no user."""
    cluster = Cluster.objects.filter(pk=cluster_id).first()
    if cluster is None:
        return None
    run = ReportRun.objects.create(
        cluster=cluster, report=report, parameters={"since": since, "scheduled": True}
    )
    runner.execute(run)
    return run.pk
