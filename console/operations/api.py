"""/api/v1/operations/: long operations, their state, progress and steps."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from console.api import cluster_or_404, paginate, validated
from console.operations import actions
from console.operations.models import Operation


class OperationOut(serializers.ModelSerializer):
    created_by = serializers.SerializerMethodField()
    plan = serializers.SerializerMethodField(
        help_text="For kinds that move replicas: the plan, in kafka-reassign-partitions JSON."
    )
    summary = serializers.SerializerMethodField(
        help_text="For review: per partition its replicas before and after and the bytes to copy."
    )

    class Meta:
        model = Operation
        fields = [
            "id",
            "kind",
            "cluster",
            "state",
            "plan",
            "summary",
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

    def get_plan(self, op) -> dict | None:
        return op.params.get("plan")

    def get_summary(self, op) -> dict | None:
        return op.params.get("summary")


class OperationIn(serializers.Serializer):
    kind = serializers.ChoiceField(choices=actions.PROPOSABLE)
    cluster = serializers.IntegerField()
    plan = serializers.JSONField(
        required=False,
        help_text="reassignment: a kafka-reassign-partitions plan; without it a balanced plan is proposed.",
    )
    topics = serializers.ListField(
        child=serializers.CharField(), required=False, help_text="reassignment: balance only these topics."
    )
    broker = serializers.IntegerField(required=False, help_text="failover, decommission: the broker.")
    topic = serializers.CharField(required=False, help_text="replication_factor: the topic.")
    replication_factor = serializers.IntegerField(
        required=False, help_text="replication_factor: the new one."
    )
    partitions = serializers.ListField(
        child=serializers.DictField(),
        required=False,
        help_text="preferred_leader_election: [{topic, partition}]; all partitions without it.",
    )
    throttle_bytes_per_s = serializers.IntegerField(
        required=False, min_value=1, help_text="Replication throttle while replicas are copied."
    )


class OperationListView(APIView):
    write_actions = {"POST": "operation.propose"}

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

    @extend_schema(request=OperationIn, responses={201: OperationOut})
    def post(self, request):
        data = dict(validated(OperationIn, request.data))
        cluster = cluster_or_404(data.pop("cluster"))
        kind = data.pop("kind")
        operation = actions.do_propose_operation(request.user, cluster, kind=kind, request=data, source="api")
        return Response(OperationOut(operation).data, status=status.HTTP_201_CREATED)


class OperationDetailView(APIView):
    @extend_schema(responses=OperationOut)
    def get(self, request, operation_id: int):
        return Response(
            OperationOut(
                get_object_or_404(Operation.objects.select_related("created_by"), pk=operation_id)
            ).data
        )


class OperationApproveView(APIView):
    write_actions = {"POST": "operation.approve"}

    @extend_schema(request=None, responses=OperationOut)
    def post(self, request, operation_id: int):
        operation = get_object_or_404(Operation.objects.select_related("cluster"), pk=operation_id)
        return Response(
            OperationOut(actions.do_approve_operation(request.user, operation, source="api")).data
        )


class OperationCancelView(APIView):
    write_actions = {"POST": "operation.cancel"}

    @extend_schema(request=None, responses=OperationOut)
    def post(self, request, operation_id: int):
        operation = get_object_or_404(Operation.objects.select_related("cluster"), pk=operation_id)
        return Response(OperationOut(actions.do_cancel_operation(request.user, operation, source="api")).data)
