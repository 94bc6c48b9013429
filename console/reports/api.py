"""/api/v1/clusters/{id}/reports/...: report runs with their summaries, "run now", and the schedules."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from console.api import cluster_or_404, paginate, validated
from console.reports import actions, schedules, selectors
from console.reports.models import REPORTS, ReportRun


class ReportRunOut(serializers.ModelSerializer):
    created_by = serializers.CharField(source="created_by.username", default=None)
    charts = serializers.SerializerMethodField()

    class Meta:
        model = ReportRun
        fields = [
            "id",
            "report",
            "parameters",
            "status",
            "created_by",
            "created_at",
            "started_at",
            "finished_at",
            "duration_s",
            "rows_read",
            "output_dir",
            "charts",
            "error",
        ]

    def get_charts(self, run) -> dict[str, dict[str, str]]:
        """Chart name -> format -> the console URL serving it."""
        return {
            name: {
                fmt: f"/clusters/{run.cluster_id}/reports/runs/{run.pk}/charts/{name}.{fmt}" for fmt in files
            }
            for name, files in run.charts().items()
        }


class ReportRunDetailOut(ReportRunOut):
    class Meta(ReportRunOut.Meta):
        fields = [*ReportRunOut.Meta.fields, "summary"]


class RunIn(serializers.Serializer):
    report = serializers.ChoiceField(choices=REPORTS)
    since = serializers.CharField(default="24h", help_text="The window, e.g. 30m, 24h, 7d.")
    topics = serializers.CharField(
        default="", allow_blank=True, help_text="A regex of topics (throughput, retention); empty = all."
    )


class ScheduleOut(serializers.Serializer):
    report = serializers.SerializerMethodField()
    crontab = serializers.SerializerMethodField()
    enabled = serializers.BooleanField()
    last_run_at = serializers.DateTimeField(allow_null=True)

    def get_report(self, task) -> str:
        return task.name.split()[1]

    def get_crontab(self, task) -> str:
        return schedules.crontab_text(task)


class ScheduleIn(serializers.Serializer):
    crontab = serializers.CharField(help_text="minute hour day-of-month month day-of-week (UTC)")
    enabled = serializers.BooleanField(default=True)


class ReportRunListView(APIView):
    write_actions = {"POST": "report.run"}

    @extend_schema(responses=ReportRunOut(many=True))
    def get(self, request, cluster_id: int):
        cluster = cluster_or_404(cluster_id)
        report = request.query_params.get("report") or None
        return paginate(self, request, selectors.runs_of(cluster, report), ReportRunOut)

    @extend_schema(request=RunIn, responses={202: ReportRunOut})
    def post(self, request, cluster_id: int):
        cluster = cluster_or_404(cluster_id)
        data = validated(RunIn, request.data)
        run = actions.do_run_report(request.user, cluster, source="api", **data)
        return Response(ReportRunOut(run).data, status=status.HTTP_202_ACCEPTED)


class ReportRunDetailView(APIView):
    @extend_schema(responses=ReportRunDetailOut)
    def get(self, request, cluster_id: int, run_id: int):
        run = get_object_or_404(ReportRun, pk=run_id, cluster_id=cluster_id)
        return Response(ReportRunDetailOut(run).data)


class ScheduleListView(APIView):
    @extend_schema(responses=ScheduleOut(many=True))
    def get(self, request, cluster_id: int):
        cluster = cluster_or_404(cluster_id)
        return Response(ScheduleOut(schedules.schedules_for(cluster), many=True).data)


class ScheduleDetailView(APIView):
    write_actions = {"PUT": "report.schedule"}

    @extend_schema(request=ScheduleIn, responses=ScheduleOut)
    def put(self, request, cluster_id: int, report: str):
        cluster = cluster_or_404(cluster_id)
        data = validated(ScheduleIn, request.data)
        task = actions.do_set_schedule(request.user, cluster, report=report, source="api", **data)
        return Response(ScheduleOut(task).data)
