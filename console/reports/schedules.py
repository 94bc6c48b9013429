"""Each registered cluster has one django-celery-beat schedule per report, daily by default (created lazily)."""

from __future__ import annotations

import json

from django_celery_beat.models import CrontabSchedule, PeriodicTask

from console.clusters.models import Cluster
from console.reports.models import REPORTS

DEFAULT_CRONTAB = {"minute": "0", "hour": "3", "day_of_week": "*", "day_of_month": "*", "month_of_year": "*"}


def task_name(cluster: Cluster, report: str) -> str:
    return f"report {report} on cluster {cluster.pk}"


def schedule_for(cluster: Cluster, report: str) -> PeriodicTask:
    existing = PeriodicTask.objects.filter(name=task_name(cluster, report)).select_related("crontab").first()
    if existing is not None:
        return existing
    crontab, _ = CrontabSchedule.objects.get_or_create(**DEFAULT_CRONTAB, timezone="UTC")
    return PeriodicTask.objects.create(
        name=task_name(cluster, report),
        task="console.reports.scheduled_report",
        crontab=crontab,
        kwargs=json.dumps({"cluster_id": cluster.pk, "report": report}),
    )


def schedules_for(cluster: Cluster) -> list[PeriodicTask]:
    return [schedule_for(cluster, report) for report in REPORTS]


def crontab_text(task: PeriodicTask) -> str:
    c = task.crontab
    return f"{c.minute} {c.hour} {c.day_of_month} {c.month_of_year} {c.day_of_week}"
