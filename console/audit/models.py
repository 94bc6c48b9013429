"""The audit trail: who did what, when, with which parameters, and how it ended.

Entries are written by `console.audit.recording` only, never changed afterwards, and published as JSON to the
cluster's audit topic by a Celery task (`published_at` tells which are out).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models


class Outcome(models.TextChoices):
    OK = "ok", "ok"
    ACCEPTED = "accepted", "accepted"  # a long operation started; its outcome follows in a later entry
    DENIED = "denied", "denied"
    INVALID = "invalid", "invalid"  # refused for bad input or a conflict, nothing changed
    ERROR = "error", "error"


class AuditEntry(models.Model):
    at = models.DateTimeField(auto_now_add=True, db_index=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    username = models.CharField(max_length=150, db_index=True)
    source = models.CharField(max_length=16)  # web, api, worker, cli
    cluster = models.ForeignKey(
        "clusters.Cluster", null=True, blank=True, on_delete=models.SET_NULL, related_name="audit_entries"
    )
    cluster_name = models.CharField(max_length=64, blank=True, db_index=True)
    action = models.CharField(max_length=64, db_index=True)
    resource_type = models.CharField(max_length=32, blank=True)
    resource_name = models.CharField(max_length=500, blank=True, db_index=True)
    params = models.JSONField(default=dict, blank=True)
    outcome = models.CharField(max_length=16, choices=Outcome.choices, db_index=True)
    detail = models.TextField(blank=True)
    operation = models.ForeignKey(
        "operations.Operation", null=True, blank=True, on_delete=models.SET_NULL, related_name="audit_entries"
    )
    published_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["published_at", "id"], name="audit_unpublished")]

    def __str__(self) -> str:
        return (
            f"{self.at:%Y-%m-%d %H:%M:%S} {self.username} {self.action} {self.resource_name} {self.outcome}"
        )

    def as_record(self) -> dict[str, Any]:
        """The JSON document written to the audit topic (one record per entry, key = cluster name)."""
        return {
            "id": self.pk,
            "timestamp": self.at.isoformat(),
            "user": self.username,
            "source": self.source,
            "cluster": self.cluster_name,
            "action": self.action,
            "resource": {"type": self.resource_type, "name": self.resource_name},
            "params": self.params,
            "outcome": self.outcome,
            "detail": self.detail,
            "operation": self.operation_id,
        }
