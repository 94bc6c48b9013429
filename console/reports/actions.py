"""Writes about reports: run one now (a Celery task), change a report's schedule. Both are audited."""

from __future__ import annotations

import argparse
import re
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction
from django_celery_beat.models import CrontabSchedule
from django_celery_beat.validators import crontab_validator

from console.audit.recording import action
from console.clusters.models import Cluster
from console.errors import Invalid
from console.reports import schedules
from console.reports.models import REPORTS, ReportRun
from jobs.report import parse_duration_ms


def _check_report(report: str) -> None:
    if report not in REPORTS:
        raise Invalid(f"unknown report {report!r} (one of {', '.join(REPORTS)})", field="report")


def _check_since(since: str) -> None:
    try:
        parse_duration_ms(since)
    except argparse.ArgumentTypeError as exc:
        raise Invalid(str(exc), field="since") from exc


def do_run_report(
    user: Any, cluster: Cluster, *, report: str, since: str = "24h", topics: str = "", source: str
) -> ReportRun:
    params = {"report": report, "since": since, "topics": topics}
    with action(
        user,
        "report.run",
        source=source,
        cluster=cluster,
        resource_type="report",
        resource_name=report,
        params=params,
    ):
        _check_report(report)
        _check_since(since)
        try:
            re.compile(topics)
        except re.error as exc:
            raise Invalid(f"not a regular expression: {exc}", field="topics") from exc
        run = ReportRun.objects.create(
            cluster=cluster, report=report, parameters={"since": since, "topics": topics}, created_by=user
        )
        from console.reports.tasks import run_report

        transaction.on_commit(lambda: run_report.delay(run.pk))
    return run


def do_set_schedule(user: Any, cluster: Cluster, *, report: str, crontab: str, enabled: bool, source: str):
    params = {"report": report, "crontab": crontab, "enabled": enabled}
    with action(
        user,
        "report.schedule",
        source=source,
        cluster=cluster,
        resource_type="report",
        resource_name=report,
        params=params,
    ):
        _check_report(report)
        fields = crontab.split()
        try:
            if len(fields) != 5:
                raise ValidationError("five fields are needed")
            crontab_validator(crontab)
        except ValidationError as exc:
            raise Invalid(
                f"not a crontab (minute hour day-of-month month day-of-week): {'; '.join(exc.messages)}",
                field="crontab",
            ) from exc
        minute, hour, day_of_month, month_of_year, day_of_week = fields
        task = schedules.schedule_for(cluster, report)
        task.crontab, _ = CrontabSchedule.objects.get_or_create(
            minute=minute,
            hour=hour,
            day_of_month=day_of_month,
            month_of_year=month_of_year,
            day_of_week=day_of_week,
            timezone="UTC",
        )
        task.enabled = enabled
        task.save()
    return task
