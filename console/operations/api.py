"""/api/v1/operations/: long operations, their state, progress and steps."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from console.api import paginate
from console.operations.models import Operation


class OperationOut(serializers.ModelSerializer):
    created_by = serializers.SerializerMethodField()

    class Meta:
        model = Operation
        fields = [
            "id",
            "kind",
            "cluster",
            "state",
            "params",
            "progress",
            "steps",
            "result",
            "error",
            "created_by",
            "created_at",
            "updated_at",
            "finished_at",
        ]

    def get_created_by(self, op) -> str | None:
        return op.created_by.get_username() if op.created_by else None


class OperationListView(APIView):
    @extend_schema(
        parameters=[
            OpenApiParameter("state", str),
            OpenApiParameter("kind", str),
            OpenApiParameter("cluster", int),
        ],
        responses=OperationOut(many=True),
    )
    def get(self, request):
        operations = Operation.objects.select_related("created_by")
        for key in ("state", "kind", "cluster"):
            if request.query_params.get(key):
                operations = operations.filter(**{key: request.query_params[key]})
        return paginate(self, request, operations, OperationOut)


class OperationDetailView(APIView):
    @extend_schema(responses=OperationOut)
    def get(self, request, operation_id: int):
        return Response(
            OperationOut(
                get_object_or_404(Operation.objects.select_related("created_by"), pk=operation_id)
            ).data
        )
