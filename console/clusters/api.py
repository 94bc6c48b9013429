"""/api/v1/clusters/...: clusters, their overview, brokers and broker configs."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import NotAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from console.access import ACTIONS, Role, role_of
from console.api import cluster_or_404, validated
from console.clusters import actions, selectors
from console.clusters.client import client_for
from console.clusters.models import Cluster


class ClusterOut(serializers.ModelSerializer):
    class Meta:
        model = Cluster
        fields = ["id", "name", "bootstrap_servers", "zookeeper_connect", "managed", "created_at"]


class ClusterIn(serializers.Serializer):
    name = serializers.SlugField(max_length=64)
    bootstrap_servers = serializers.CharField(max_length=500)
    zookeeper_connect = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")


class ClusterPatch(serializers.Serializer):
    name = serializers.SlugField(max_length=64, required=False)
    bootstrap_servers = serializers.CharField(max_length=500, required=False)
    zookeeper_connect = serializers.CharField(max_length=500, required=False, allow_blank=True)


class BrokerOut(serializers.Serializer):
    id = serializers.IntegerField()
    host = serializers.CharField()
    port = serializers.IntegerField()
    rack = serializers.CharField(allow_null=True)
    state = serializers.CharField()
    is_controller = serializers.BooleanField()
    leaders = serializers.IntegerField()
    replicas = serializers.IntegerField()
    disk_bytes = serializers.IntegerField(allow_null=True)
    log_dirs = serializers.DictField()
    pid = serializers.IntegerField(allow_null=True)


class PartitionRef(serializers.Serializer):
    topic = serializers.CharField()
    partition = serializers.IntegerField()
    leader = serializers.IntegerField()
    replicas = serializers.ListField(child=serializers.IntegerField())
    isr = serializers.ListField(child=serializers.IntegerField())


class OverviewOut(serializers.Serializer):
    cluster_id = serializers.CharField(allow_null=True)
    controller_id = serializers.IntegerField(allow_null=True)
    brokers = BrokerOut(many=True)
    topics = serializers.IntegerField()
    internal_topics = serializers.IntegerField()
    partitions = serializers.IntegerField()
    replicas = serializers.IntegerField()
    in_sync_replicas = serializers.IntegerField()
    under_replicated = PartitionRef(many=True)
    under_min_isr = PartitionRef(many=True)
    offline = PartitionRef(many=True)
    disk_bytes = serializers.IntegerField(allow_null=True)


class ConfigOut(serializers.Serializer):
    name = serializers.CharField()
    value = serializers.CharField(allow_null=True)
    source = serializers.CharField()
    is_default = serializers.BooleanField()
    is_read_only = serializers.BooleanField()
    is_sensitive = serializers.BooleanField()
    synonyms = serializers.SerializerMethodField()

    def get_synonyms(self, row) -> list[dict]:
        return [{"name": n, "value": v, "source": s} for n, v, s in row.synonyms]


class ConfigsIn(serializers.Serializer):
    configs = serializers.DictField(
        child=serializers.CharField(allow_null=True, allow_blank=True),
        allow_empty=False,
        help_text="name -> new value; null removes the override (back to the default).",
    )


class ClusterListView(APIView):
    write_actions = {"POST": "cluster.register"}

    @extend_schema(responses=ClusterOut(many=True))
    def get(self, request):
        return Response(ClusterOut(Cluster.objects.all(), many=True).data)

    @extend_schema(request=ClusterIn, responses={201: ClusterOut})
    def post(self, request):
        data = validated(ClusterIn, request.data)
        cluster = actions.do_register_cluster(request.user, source="api", **data)
        return Response(ClusterOut(cluster).data, status=status.HTTP_201_CREATED)


class ClusterDetailView(APIView):
    write_actions = {"PATCH": "cluster.update", "DELETE": "cluster.delete"}

    @extend_schema(responses=ClusterOut)
    def get(self, request, cluster_id: int):
        return Response(ClusterOut(cluster_or_404(cluster_id)).data)

    @extend_schema(request=ClusterPatch, responses=ClusterOut)
    def patch(self, request, cluster_id: int):
        cluster = cluster_or_404(cluster_id)
        changes = validated(ClusterPatch, request.data)
        return Response(
            ClusterOut(actions.do_update_cluster(request.user, cluster, changes=changes, source="api")).data
        )

    @extend_schema(responses={204: None})
    def delete(self, request, cluster_id: int):
        actions.do_delete_cluster(request.user, cluster_or_404(cluster_id), source="api")
        return Response(status=status.HTTP_204_NO_CONTENT)


class OverviewView(APIView):
    @extend_schema(responses=OverviewOut)
    def get(self, request, cluster_id: int):
        return Response(OverviewOut(selectors.overview(cluster_or_404(cluster_id))).data)


class BrokerListView(APIView):
    @extend_schema(responses=BrokerOut(many=True))
    def get(self, request, cluster_id: int):
        rows, *_ = selectors.brokers(cluster_or_404(cluster_id))
        return Response(BrokerOut(rows, many=True).data)


class BrokerDetailView(APIView):
    @extend_schema(responses=BrokerOut)
    def get(self, request, cluster_id: int, broker_id: int):
        return Response(BrokerOut(selectors.broker(cluster_or_404(cluster_id), broker_id)).data)


class BrokerConfigsView(APIView):
    write_actions = {"PATCH": "broker.alter_configs"}

    @extend_schema(responses=ConfigOut(many=True))
    def get(self, request, cluster_id: int, broker_id: int):
        rows = client_for(cluster_or_404(cluster_id)).broker_configs(broker_id)
        return Response(ConfigOut(rows, many=True).data)

    @extend_schema(request=ConfigsIn, responses=ConfigOut(many=True))
    def patch(self, request, cluster_id: int, broker_id: int):
        cluster = cluster_or_404(cluster_id)
        data = validated(ConfigsIn, request.data)
        actions.do_alter_broker_configs(
            request.user, cluster, broker_id, changes=data["configs"], source="api"
        )
        return Response(ConfigOut(client_for(cluster).broker_configs(broker_id), many=True).data)


class MeOut(serializers.Serializer):
    username = serializers.CharField()
    role = serializers.CharField()
    actions = serializers.ListField(
        child=serializers.CharField(), help_text="The actions this user may perform."
    )


class MeView(APIView):
    """The caller's role and the actions it allows (what the pages use to show only usable controls)."""

    read_role = Role.NONE

    @extend_schema(responses=MeOut)
    def get(self, request):
        role = role_of(request.user)
        if not request.user.is_authenticated:
            raise NotAuthenticated()
        return Response(
            {
                "username": request.user.get_username(),
                "role": role.label,
                "actions": sorted(name for name, needed in ACTIONS.items() if role >= needed),
            }
        )
