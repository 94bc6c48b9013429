"""/api/v1/alerts/...: alert rules (create, change, delete: audited), alerts (open and resolved), silences;
/api/v1/clusters/{id}/lag/...: the sampled lag of a group over time and now, and the sampler's interval."""

from __future__ import annotations

import time

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from console.api import cluster_or_404, paginate, validated
from console.clusters.models import Cluster
from console.monitoring import actions
from console.monitoring.models import Alert, AlertRule, AlertState, SamplerConfig, Silence
from console.monitoring.selectors import group_lag_history, lag_now


class RuleSerializer(serializers.ModelSerializer):
    cluster = serializers.PrimaryKeyRelatedField(
        queryset=Cluster.objects.all(), allow_null=True, required=False
    )
    webhook_secret = serializers.CharField(write_only=True, required=False, allow_blank=True)

    class Meta:
        model = AlertRule
        fields = ["id", *actions.RULE_FIELDS, "created_at"]
        read_only_fields = ["id", "created_at"]
        # uniqueness is checked by the action's full_clean (the model's own message)
        extra_kwargs = {"name": {"validators": []}}


class AlertOut(serializers.ModelSerializer):
    rule = serializers.CharField(source="rule.name")
    cluster = serializers.CharField(source="cluster.name")
    severity = serializers.CharField(source="rule.severity")

    class Meta:
        model = Alert
        fields = [
            "id",
            "rule",
            "cluster",
            "subject",
            "state",
            "severity",
            "value",
            "since_ms",
            "fired_ms",
            "resolved_ms",
        ]


class SilenceSerializer(serializers.ModelSerializer):
    class Meta:
        model = Silence
        fields = ["id", "cluster", "rule", "subject_pattern", "starts_at", "ends_at", "comment"]
        read_only_fields = ["id"]


class RuleListView(APIView):
    write_actions = {"POST": "alert_rule.create"}

    @extend_schema(responses=RuleSerializer(many=True))
    def get(self, request):
        return paginate(self, request, AlertRule.objects.all(), RuleSerializer)

    @extend_schema(request=RuleSerializer, responses={201: RuleSerializer})
    def post(self, request):
        rule = actions.do_create_rule(request.user, validated(RuleSerializer, request.data), source="api")
        return Response(RuleSerializer(rule).data, status=status.HTTP_201_CREATED)


class RuleDetailView(APIView):
    write_actions = {"PATCH": "alert_rule.update", "DELETE": "alert_rule.delete"}

    @extend_schema(responses=RuleSerializer)
    def get(self, request, rule_id: int):
        return Response(RuleSerializer(get_object_or_404(AlertRule, pk=rule_id)).data)

    @extend_schema(request=RuleSerializer, responses=RuleSerializer)
    def patch(self, request, rule_id: int):
        rule = get_object_or_404(AlertRule, pk=rule_id)
        serializer = RuleSerializer(rule, data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        rule = actions.do_update_rule(request.user, rule, serializer.validated_data, source="api")
        return Response(RuleSerializer(rule).data)

    @extend_schema(responses={204: None})
    def delete(self, request, rule_id: int):
        actions.do_delete_rule(request.user, get_object_or_404(AlertRule, pk=rule_id), source="api")
        return Response(status=status.HTTP_204_NO_CONTENT)


class AlertListView(APIView):
    @extend_schema(
        parameters=[
            OpenApiParameter("state", str, description="pending, firing, silenced, resolved or open")
        ],
        responses=AlertOut(many=True),
    )
    def get(self, request):
        alerts = Alert.objects.select_related("rule", "cluster")
        state = request.query_params.get("state", "")
        if state == "open":
            alerts = alerts.exclude(state=AlertState.RESOLVED)
        elif state:
            if state not in AlertState.values:
                return Response(
                    {"state": [f"one of open, {', '.join(AlertState.values)}"]},
                    status=status.HTTP_400_BAD_REQUEST,
                )
            alerts = alerts.filter(state=state)
        return paginate(self, request, alerts, AlertOut)


class SilenceListView(APIView):
    write_actions = {"POST": "silence.create"}

    @extend_schema(responses=SilenceSerializer(many=True))
    def get(self, request):
        return paginate(self, request, Silence.objects.all(), SilenceSerializer)

    @extend_schema(request=SilenceSerializer, responses={201: SilenceSerializer})
    def post(self, request):
        silence = actions.do_create_silence(
            request.user, validated(SilenceSerializer, request.data), source="api"
        )
        return Response(SilenceSerializer(silence).data, status=status.HTTP_201_CREATED)


class SilenceDetailView(APIView):
    write_actions = {"DELETE": "silence.delete"}

    @extend_schema(responses={204: None})
    def delete(self, request, silence_id: int):
        actions.do_delete_silence(request.user, get_object_or_404(Silence, pk=silence_id), source="api")
        return Response(status=status.HTTP_204_NO_CONTENT)


class SampledPartitionLagOut(serializers.Serializer):
    topic = serializers.CharField()
    partition = serializers.IntegerField()
    committed = serializers.IntegerField(allow_null=True)
    end = serializers.IntegerField()
    lag = serializers.IntegerField(allow_null=True)
    lag_seconds = serializers.FloatField(allow_null=True)
    status = serializers.CharField(source="status.name")


class GroupLagOut(serializers.Serializer):
    group = serializers.CharField()
    status = serializers.CharField()
    lag = serializers.IntegerField()
    max_lag = serializers.IntegerField()
    max_lag_seconds = serializers.FloatField()
    partitions = SampledPartitionLagOut(many=True)
    history = serializers.DictField(
        help_text="lag and lag_seconds: [[round_ms, value], ...]; partitions: per partition"
    )


class GroupLagView(APIView):
    @extend_schema(responses=GroupLagOut)
    def get(self, request, cluster_id: int, group_id: str):
        cluster = cluster_or_404(cluster_id)
        current = lag_now(cluster, int(time.time() * 1000), group=group_id).get(group_id)
        if current is None:
            return Response({"detail": f"no samples of group {group_id!r} (status NOTFOUND)"}, status=404)
        body = {
            "group": group_id,
            "status": current.status.name,
            "lag": current.lag,
            "max_lag": current.max_lag,
            "max_lag_seconds": current.max_lag_seconds,
            "partitions": current.partitions,
            "history": group_lag_history(cluster, group_id),
        }
        return Response(GroupLagOut(body).data)


class SamplerIn(serializers.Serializer):
    interval_s = serializers.IntegerField(min_value=5, max_value=3600)
    enabled = serializers.BooleanField(default=True)


class SamplerOut(serializers.ModelSerializer):
    class Meta:
        model = SamplerConfig
        fields = ["interval_s", "enabled", "last_round_ms", "last_error", "known_brokers"]


class SamplerView(APIView):
    write_actions = {"PUT": "sampler.configure"}

    @extend_schema(responses=SamplerOut)
    def get(self, request, cluster_id: int):
        config, _ = SamplerConfig.objects.get_or_create(cluster=cluster_or_404(cluster_id))
        return Response(SamplerOut(config).data)

    @extend_schema(request=SamplerIn, responses=SamplerOut)
    def put(self, request, cluster_id: int):
        data = validated(SamplerIn, request.data)
        config = actions.do_configure_sampler(request.user, cluster_or_404(cluster_id), **data, source="api")
        return Response(SamplerOut(config).data)
