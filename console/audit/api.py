"""/api/v1/audit/: the audit trail, filtered like the page (user, cluster, action prefix, outcome, q)."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.views import APIView

from console.access import READ_AUDIT
from console.api import paginate
from console.audit.models import AuditEntry
from console.audit.views import FILTERS, filtered


class AuditEntryOut(serializers.ModelSerializer):
    class Meta:
        model = AuditEntry
        fields = [
            "id",
            "at",
            "username",
            "source",
            "cluster_name",
            "action",
            "resource_type",
            "resource_name",
            "params",
            "outcome",
            "detail",
            "operation",
            "published_at",
        ]


class AuditListView(APIView):
    read_role = READ_AUDIT

    @extend_schema(parameters=[OpenApiParameter(f, str) for f in FILTERS], responses=AuditEntryOut(many=True))
    def get(self, request):
        entries, _ = filtered(request.query_params)
        return paginate(self, request, entries, AuditEntryOut)
