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
from console.clusters.models import Cluster, ManagedBroker


class ClusterOut(serializers.ModelSerializer):
    class Meta:
        model = Cluster
        fields = [
            "id", "name", "bootstrap_servers", "zookeeper_connect", "managed", "config_overrides",
            "failover_grace_s", "failover_on_return", "created_at",
        ]  # fmt: skip


class ClusterIn(serializers.Serializer):
    name = serializers.SlugField(max_length=64)
    bootstrap_servers = serializers.CharField(max_length=500)
    zookeeper_connect = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")


class ClusterPatch(serializers.Serializer):
    name = serializers.SlugField(max_length=64, required=False)
    bootstrap_servers = serializers.CharField(max_length=500, required=False)
    zookeeper_connect = serializers.CharField(max_length=500, required=False, allow_blank=True)
    failover_grace_s = serializers.IntegerField(
        min_value=1,
        required=False,
        allow_null=True,
        help_text="Seconds a broker may stay missing before a failover moves its replicas (null: never).",
    )
    failover_on_return = serializers.ChoiceField(choices=["empty", "rebalance"], required=False)


class BrokerEventOut(serializers.Serializer):
    at = serializers.DateTimeField()
    kind = serializers.CharField(
        help_text="started, adopted, healthy, unhealthy, exited, restarted, stopping, stopped"
    )
    pid = serializers.IntegerField(allow_null=True)
    exit_code = serializers.IntegerField(allow_null=True)
    detail = serializers.CharField()


class ProvisionIn(serializers.Serializer):
    name = serializers.SlugField(max_length=64)
    brokers = serializers.IntegerField(min_value=1, default=3)
    base_port = serializers.IntegerField(min_value=1024, max_value=65535, default=9092)
    zookeeper = serializers.CharField(required=False, default="", allow_blank=True, help_text="host:port")
    chroot = serializers.CharField(
        required=False, default="", allow_blank=True, help_text="default /odradek-<name>"
    )
    racks = serializers.ListField(child=serializers.CharField(max_length=64), required=False, default=list)
    config_overrides = serializers.DictField(required=False, default=dict)
    failover_grace_s = serializers.IntegerField(min_value=1, required=False, allow_null=True, default=None)


class AddBrokerIn(serializers.Serializer):
    port = serializers.IntegerField(
        min_value=1024, max_value=65535, required=False, allow_null=True, default=None
    )
    rack = serializers.CharField(max_length=64, required=False, allow_blank=True, default="")
    config_overrides = serializers.DictField(required=False, default=dict)


class ManagedBrokerOut(serializers.ModelSerializer):
    class Meta:
        model = ManagedBroker
        fields = [
            "broker_id", "host", "port", "log_dirs", "rack", "config_overrides", "should_run", "decommissioned",
            "state", "pid", "started_at", "restarts", "last_exit_code",
        ]  # fmt: skip


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
    process_state = serializers.CharField(
        allow_null=True,
        help_text="What the supervisor saw of a managed broker's process (null: not managed).",
    )
    started_at = serializers.DateTimeField(allow_null=True)
    uptime_s = serializers.FloatField(allow_null=True)
    restarts = serializers.IntegerField()
    events = BrokerEventOut(many=True, help_text="The supervisor's recent events, newest first.")


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


class ProvisionView(APIView):
    """A new managed cluster: the console writes its brokers' properties and the supervisor starts them."""

    write_actions = {"POST": "cluster.provision"}

    @extend_schema(request=ProvisionIn, responses={201: ClusterOut})
    def post(self, request):
        data = validated(ProvisionIn, request.data)
        cluster = actions.do_provision_cluster(request.user, source="api", **data)
        return Response(ClusterOut(cluster).data, status=status.HTTP_201_CREATED)


class ManagedBrokerListView(APIView):
    """The broker specs of a managed cluster (desired state and the supervisor's view); POST adds a broker."""

    write_actions = {"POST": "broker.add"}

    @extend_schema(responses=ManagedBrokerOut(many=True))
    def get(self, request, cluster_id: int):
        specs = ManagedBroker.objects.filter(cluster=cluster_or_404(cluster_id))
        return Response(ManagedBrokerOut(specs, many=True).data)

    @extend_schema(request=AddBrokerIn, responses={201: ManagedBrokerOut})
    def post(self, request, cluster_id: int):
        data = validated(AddBrokerIn, request.data)
        broker = actions.do_add_broker(request.user, cluster_or_404(cluster_id), source="api", **data)
        return Response(ManagedBrokerOut(broker).data, status=status.HTTP_201_CREATED)


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
