"""Report runs: one row per run of a Spark report job (jobs/<name>_report.py), its outcome and its outputs."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.db import models

REPORTS = ("throughput", "lag", "retention")


class Status(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"


class ReportRun(models.Model):
    cluster = models.ForeignKey("clusters.Cluster", on_delete=models.CASCADE, related_name="report_runs")
    report = models.CharField(max_length=20, choices=[(r, r) for r in REPORTS])
    parameters = models.JSONField(default=dict, blank=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.QUEUED)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    duration_s = models.FloatField(null=True, blank=True)
    rows_read = models.BigIntegerField(null=True, blank=True)
    #: The run's directory (docs/contracts.md, "Report jobs"); summary.json's paths are relative to it.
    output_dir = models.CharField(max_length=1000, blank=True)
    summary = models.JSONField(null=True, blank=True)
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.report} report #{self.pk} ({self.status})"

    @property
    def finished(self) -> bool:
        return self.status in (Status.SUCCEEDED, Status.FAILED)

    def charts(self) -> dict[str, dict[str, str]]:
        return dict((self.summary or {}).get("charts") or {})

    def output_file(self, relative: str) -> Path | None:
        """A file of the run's output named in its summary, or None (never a path outside the run's dir)."""
        if not self.output_dir:
            return None
        base = Path(self.output_dir).resolve()
        path = (base / relative).resolve()
        if base not in path.parents or not path.is_file():
            return None
        return path
