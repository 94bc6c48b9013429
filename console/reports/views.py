"""Pages: a cluster's reports (the latest run's charts and tables, history, run now, schedules), one run
(polled while it runs), and a run's chart files, served only to users who may read the cluster."""

from __future__ import annotations

import mimetypes

from django.contrib.auth.decorators import login_required
from django.http import FileResponse, Http404, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import reverse

from console.access import Role, check_role
from console.reports import actions, schedules, selectors
from console.reports.models import REPORTS, ReportRun
from console.web import page, paginate, run_action

#: The table shown under each report's charts.
MAIN_TABLE = {"throughput": "topics", "lag": "groups", "retention": "topics"}


@page("reports/list.html", fragment="reports/_history.html")
def report_list(request, cluster):
    latest = []
    for report, run in selectors.latest_by_report(cluster).items():
        columns, rows = selectors.table_rows(run, MAIN_TABLE[report]) if run else ([], [])
        latest.append({"report": report, "run": run, "columns": columns, "rows": rows})
    return {
        "latest": latest,
        "page_obj": paginate(request, selectors.runs_of(cluster)),
        "schedules": [
            (task.name.split()[1], schedules.crontab_text(task), task)
            for task in schedules.schedules_for(cluster)
        ],
        "reports": REPORTS,
        "nav": "reports",
    }


@page("reports/run.html", fragment="reports/_run.html")
def run_detail(request, cluster, run_id: int):
    run = get_object_or_404(ReportRun, pk=run_id, cluster=cluster)
    return {"run": run, "nav": "reports"}


@page("reports/list.html")
def run_now(request, cluster):
    ok, run = run_action(
        request,
        lambda: actions.do_run_report(
            request.user,
            cluster,
            report=request.POST.get("report", ""),
            since=request.POST.get("since") or "24h",
            source="web",
        ),
    )
    if ok:
        return HttpResponseRedirect(reverse("report_run", args=[cluster.pk, run.pk]))
    return HttpResponseRedirect(reverse("reports", args=[cluster.pk]))


@page("reports/list.html")
def schedule_update(request, cluster, report: str):
    run_action(
        request,
        lambda: actions.do_set_schedule(
            request.user,
            cluster,
            report=report,
            crontab=request.POST.get("crontab", ""),
            enabled=request.POST.get("enabled") == "on",
            source="web",
        ),
        success=f"Schedule of the {report} report saved.",
    )
    return HttpResponseRedirect(reverse("reports", args=[cluster.pk]))


@login_required
def chart(request, cluster_id: int, run_id: int, name: str, fmt: str):
    check_role(request.user, Role.VIEWER, "This chart")
    run = get_object_or_404(ReportRun, pk=run_id, cluster_id=cluster_id)
    relative = run.charts().get(name, {}).get(fmt)
    path = run.output_file(relative) if relative else None
    if path is None:
        raise Http404(f"the run has no {fmt} chart named {name!r}")
    return FileResponse(open(path, "rb"), content_type=mimetypes.guess_type(path.name)[0])
