"""/api/v1/clusters/{id}/groups/...: consumer groups, their lag, offset resets and deletion."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from console.api import cluster_or_404, paginate, validated
from console.groups import actions, selectors


class GroupOut(serializers.Serializer):
    group_id = serializers.CharField()
    state = serializers.CharField()
    members = serializers.IntegerField(allow_null=True)
    lag = serializers.IntegerField(
        allow_null=True, help_text="Sum of end - committed offsets; null if nothing is committed."
    )
    partitions = serializers.IntegerField(allow_null=True)


class MemberOut(serializers.Serializer):
    member_id = serializers.CharField()
    client_id = serializers.CharField()
    host = serializers.CharField()
    group_instance_id = serializers.CharField(allow_null=True)
    assignment = serializers.SerializerMethodField()

    def get_assignment(self, m) -> list[dict]:
        return [{"topic": t, "partition": p} for t, p in m.assignment]


class PartitionLagOut(serializers.Serializer):
    topic = serializers.CharField()
    partition = serializers.IntegerField()
    committed = serializers.IntegerField(allow_null=True)
    end = serializers.IntegerField(allow_null=True)
    lag = serializers.IntegerField(allow_null=True)
    member = serializers.CharField()
    client_id = serializers.CharField()
    host = serializers.CharField()


class GroupDetailOut(serializers.Serializer):
    group_id = serializers.CharField()
    state = serializers.CharField()
    protocol = serializers.CharField()
    coordinator = serializers.IntegerField(allow_null=True)
    lag = serializers.IntegerField(allow_null=True)
    members = MemberOut(many=True)
    partitions = PartitionLagOut(many=True)


class ResetIn(serializers.Serializer):
    to = serializers.ChoiceField(choices=actions.RESET_TARGETS)
    value = serializers.IntegerField(
        required=False,
        allow_null=True,
        default=None,
        help_text="timestamp: ms since the epoch; offset: the offset; shift: added to the committed offset.",
    )
    topic = serializers.CharField(required=False, allow_null=True, default=None)
    partitions = serializers.ListField(
        child=serializers.IntegerField(min_value=0), required=False, allow_null=True, default=None
    )
    dry_run = serializers.BooleanField(default=True, help_text="Preview only (the default).")


class ResetRowOut(serializers.Serializer):
    topic = serializers.CharField()
    partition = serializers.IntegerField()
    current = serializers.IntegerField(allow_null=True)
    new = serializers.IntegerField()
    earliest = serializers.IntegerField()
    latest = serializers.IntegerField()
    lag_after = serializers.IntegerField()


class ResetOut(serializers.Serializer):
    dry_run = serializers.BooleanField()
    partitions = ResetRowOut(many=True)


class GroupListView(APIView):
    @extend_schema(
        parameters=[
            OpenApiParameter("q", str),
            OpenApiParameter("state", str),
            OpenApiParameter("sort", str, description="group_id, state or lag; '-' descends"),
        ],
        responses=GroupOut(many=True),
    )
    def get(self, request, cluster_id: int):
        cluster = cluster_or_404(cluster_id)
        rows = selectors.group_list(
            cluster,
            query=request.query_params.get("q", ""),
            state=request.query_params.get("state", ""),
            sort=request.query_params.get("sort", "group_id"),
        )
        response = paginate(self, request, rows, GroupOut)
        page_ids = {r["group_id"] for r in response.data["results"]}
        page_rows = [r for r in rows if r.group_id in page_ids]
        selectors.fill_rows(cluster, page_rows)
        response.data["results"] = GroupOut(page_rows, many=True).data
        return response


class GroupDetailView(APIView):
    write_actions = {"DELETE": "group.delete"}

    @extend_schema(responses=GroupDetailOut)
    def get(self, request, cluster_id: int, group_id: str):
        description, rows = selectors.group_detail(cluster_or_404(cluster_id), group_id)
        committed = [r for r in rows if r.committed is not None]
        body = {
            "group_id": description.group_id,
            "state": description.state,
            "protocol": description.protocol,
            "coordinator": description.coordinator,
            "lag": sum(r.lag or 0 for r in committed) if committed else None,
            "members": description.members,
            "partitions": rows,
        }
        return Response(GroupDetailOut(body).data)

    @extend_schema(responses={204: None})
    def delete(self, request, cluster_id: int, group_id: str):
        actions.do_delete_group(request.user, cluster_or_404(cluster_id), group_id, source="api")
        return Response(status=status.HTTP_204_NO_CONTENT)


class ResetOffsetsView(APIView):
    write_actions = {"POST": "group.reset_offsets"}

    @extend_schema(request=ResetIn, responses=ResetOut)
    def post(self, request, cluster_id: int, group_id: str):
        """Reset committed offsets; `dry_run` (default true) only previews. 409 while the group has active
        members."""
        cluster = cluster_or_404(cluster_id)
        data = validated(ResetIn, request.data)
        rows = actions.do_reset_offsets(request.user, cluster, group_id, source="api", **data)
        return Response(
            ResetOut({"dry_run": data["dry_run"], "partitions": rows}).data, status=status.HTTP_200_OK
        )
