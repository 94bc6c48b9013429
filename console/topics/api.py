"""/api/v1/clusters/{id}/topics/...: topics, their partitions, configs and messages."""

from __future__ import annotations

import base64

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from console.api import cluster_or_404, paginate, validated
from console.clusters.api import ConfigOut, ConfigsIn
from console.clusters.client import client_for
from console.errors import Invalid
from console.operations.api import OperationOut
from console.topics import actions, messages, selectors


class TopicOut(serializers.Serializer):
    name = serializers.CharField()
    partitions = serializers.IntegerField()
    replication_factor = serializers.IntegerField()
    under_replicated = serializers.IntegerField()
    offline = serializers.IntegerField()
    internal = serializers.BooleanField()


class TopicIn(serializers.Serializer):
    name = serializers.CharField(max_length=249)
    partitions = serializers.IntegerField(min_value=1, max_value=actions.MAX_PARTITIONS)
    replication_factor = serializers.IntegerField(min_value=1)
    configs = serializers.DictField(
        child=serializers.CharField(allow_blank=True), required=False, default=dict
    )


class PartitionOut(serializers.Serializer):
    partition = serializers.IntegerField()
    leader = serializers.IntegerField()
    replicas = serializers.ListField(child=serializers.IntegerField())
    isr = serializers.ListField(child=serializers.IntegerField())
    start_offset = serializers.IntegerField(allow_null=True)
    end_offset = serializers.IntegerField(allow_null=True)
    messages = serializers.IntegerField(allow_null=True)
    size_bytes = serializers.IntegerField(allow_null=True)


class TopicDetailOut(TopicOut):
    partition_details = PartitionOut(many=True)


class AddPartitionsIn(serializers.Serializer):
    count = serializers.IntegerField(
        min_value=1, help_text="The number of partitions in all after the change."
    )


class DeleteRecordsIn(serializers.Serializer):
    before = serializers.DictField(
        child=serializers.IntegerField(min_value=-1),
        required=False,
        allow_null=True,
        default=None,
        help_text="partition -> offset before which records are deleted (-1 = the end); omitted = every partition.",
    )


class DeleteTopicIn(serializers.Serializer):
    confirm = serializers.CharField(help_text="The topic's name, repeated.")


def _encoded(data: bytes | None) -> tuple[str | None, str]:
    if data is None:
        return None, "null"
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(data).decode(), "base64"


class MessageOut(serializers.Serializer):
    partition = serializers.IntegerField()
    offset = serializers.IntegerField()
    timestamp = serializers.IntegerField(allow_null=True)
    timestamp_type = serializers.IntegerField()
    key = serializers.SerializerMethodField()
    key_encoding = serializers.SerializerMethodField()
    value = serializers.SerializerMethodField()
    value_encoding = serializers.SerializerMethodField()
    headers = serializers.SerializerMethodField()

    def get_key(self, m) -> str | None:
        return _encoded(m.key)[0]

    def get_key_encoding(self, m) -> str:
        return _encoded(m.key)[1]

    def get_value(self, m) -> str | None:
        return _encoded(m.value)[0]

    def get_value_encoding(self, m) -> str:
        return _encoded(m.value)[1]

    def get_headers(self, m) -> list[dict]:
        out = []
        for key, value in m.headers:
            text, encoding = _encoded(value)
            out.append({"key": key, "value": text, "encoding": encoding})
        return out


class BrowseOut(serializers.Serializer):
    messages = MessageOut(many=True)
    next_offsets = serializers.DictField(child=serializers.IntegerField())
    stopped_by = serializers.CharField()
    elapsed_ms = serializers.IntegerField()


class BrowseIn(serializers.Serializer):
    mode = serializers.ChoiceField(choices=messages.MODES, default="newest")
    partition = serializers.IntegerField(required=False, min_value=0)
    offset = serializers.IntegerField(required=False, min_value=0)
    timestamp = serializers.IntegerField(required=False, help_text="Milliseconds since the epoch.")
    limit = serializers.IntegerField(
        required=False, min_value=1, max_value=messages.MAX_LIMIT, default=messages.DEFAULT_LIMIT
    )
    time_limit_ms = serializers.IntegerField(required=False, min_value=100, max_value=10_000, default=5000)


class HeaderIn(serializers.Serializer):
    key = serializers.CharField()
    value = serializers.CharField(allow_blank=True)


class ProduceIn(serializers.Serializer):
    key = serializers.CharField(required=False, allow_null=True, allow_blank=True, default=None)
    value = serializers.CharField(required=False, allow_null=True, allow_blank=True, default=None)
    key_encoding = serializers.ChoiceField(choices=messages.ENCODINGS, default="text")
    value_encoding = serializers.ChoiceField(choices=messages.ENCODINGS, default="text")
    headers = HeaderIn(many=True, required=False, default=list)
    partition = serializers.IntegerField(required=False, allow_null=True, min_value=0, default=None)


class ProducedOut(serializers.Serializer):
    partition = serializers.IntegerField()
    offset = serializers.IntegerField()


class TopicListView(APIView):
    write_actions = {"POST": "topic.create"}

    @extend_schema(
        parameters=[
            OpenApiParameter("q", str, description="Substring of the name"),
            OpenApiParameter("internal", bool, description="Include internal topics"),
            OpenApiParameter(
                "sort", str, description="name, partitions, replication, under_replicated; '-' descends"
            ),
        ],
        responses=TopicOut(many=True),
    )
    def get(self, request, cluster_id: int):
        cluster = cluster_or_404(cluster_id)
        topics = selectors.topic_list(
            cluster,
            query=request.query_params.get("q", ""),
            internal=request.query_params.get("internal") in ("1", "true"),
            sort=request.query_params.get("sort", "name"),
        )
        rows = [
            selectors.TopicRow(
                t.name, len(t.partitions), t.replication_factor, t.under_replicated, t.offline, t.internal
            )
            for t in topics
        ]
        return paginate(self, request, rows, TopicOut)

    @extend_schema(request=TopicIn, responses={202: OperationOut})
    def post(self, request, cluster_id: int):
        """Create a topic: answers 202 with the operation that creates it and waits for every partition's leader
        and full ISR (poll /api/v1/operations/{id}/)."""
        cluster = cluster_or_404(cluster_id)
        data = validated(TopicIn, request.data)
        operation = actions.do_create_topic(request.user, cluster, source="api", **data)
        return Response(OperationOut(operation).data, status=status.HTTP_202_ACCEPTED)


class TopicDetailView(APIView):
    write_actions = {"DELETE": "topic.delete"}

    @extend_schema(responses=TopicDetailOut)
    def get(self, request, cluster_id: int, topic: str):
        cluster = cluster_or_404(cluster_id)
        info = client_for(cluster).topic(topic)
        rows, _ = selectors.partition_rows(cluster, info)
        body = TopicOut(
            selectors.TopicRow(
                info.name,
                len(info.partitions),
                info.replication_factor,
                info.under_replicated,
                info.offline,
                info.internal,
            )
        ).data
        body["partition_details"] = PartitionOut(rows, many=True).data
        return Response(body)

    @extend_schema(
        parameters=[
            OpenApiParameter("confirm", str, required=True, description="The topic's name, repeated")
        ],
        responses={204: None},
    )
    def delete(self, request, cluster_id: int, topic: str):
        cluster = cluster_or_404(cluster_id)
        confirm = request.query_params.get("confirm") or (request.data or {}).get("confirm")
        actions.do_delete_topic(request.user, cluster, topic, confirm=confirm, source="api")
        return Response(status=status.HTTP_204_NO_CONTENT)


class TopicConfigsView(APIView):
    write_actions = {"PATCH": "topic.alter_configs"}

    @extend_schema(responses=ConfigOut(many=True))
    def get(self, request, cluster_id: int, topic: str):
        return Response(
            ConfigOut(client_for(cluster_or_404(cluster_id)).topic_configs(topic), many=True).data
        )

    @extend_schema(request=ConfigsIn, responses=ConfigOut(many=True))
    def patch(self, request, cluster_id: int, topic: str):
        cluster = cluster_or_404(cluster_id)
        data = validated(ConfigsIn, request.data)
        actions.do_alter_topic_configs(request.user, cluster, topic, changes=data["configs"], source="api")
        return Response(ConfigOut(client_for(cluster).topic_configs(topic), many=True).data)


class TopicPartitionsView(APIView):
    write_actions = {"POST": "topic.add_partitions"}

    @extend_schema(responses=PartitionOut(many=True))
    def get(self, request, cluster_id: int, topic: str):
        cluster = cluster_or_404(cluster_id)
        rows, _ = selectors.partition_rows(cluster, client_for(cluster).topic(topic))
        return Response(PartitionOut(rows, many=True).data)

    @extend_schema(request=AddPartitionsIn, responses=PartitionOut(many=True))
    def post(self, request, cluster_id: int, topic: str):
        cluster = cluster_or_404(cluster_id)
        data = validated(AddPartitionsIn, request.data)
        actions.do_add_partitions(request.user, cluster, topic, count=data["count"], source="api")
        rows, _ = selectors.partition_rows(cluster, client_for(cluster).metadata(max_age_s=0).topic(topic))
        return Response(PartitionOut(rows, many=True).data)


class DeleteRecordsView(APIView):
    write_actions = {"POST": "topic.delete_records"}

    @extend_schema(request=DeleteRecordsIn, responses={200: OpenApiTypes.OBJECT})
    def post(self, request, cluster_id: int, topic: str):
        cluster = cluster_or_404(cluster_id)
        data = validated(DeleteRecordsIn, request.data)
        before = None
        if data["before"] is not None:
            try:
                before = {int(p): o for p, o in data["before"].items()}
            except ValueError:
                raise Invalid("partition numbers must be whole numbers", field="before") from None
        result = actions.do_delete_records(request.user, cluster, topic, before=before, source="api")
        return Response({"start_offsets": {str(p): o for p, o in result.items()}})


class MessagesView(APIView):
    write_actions = {"POST": "message.produce"}

    @extend_schema(parameters=[BrowseIn], responses=BrowseOut)
    def get(self, request, cluster_id: int, topic: str):
        """Browse records: newest, oldest, from an offset or a time (ms), or tail from `next_offsets`
        (pass `cursor` as JSON). Bounded by `limit` per partition and `time_limit_ms`."""
        cluster = cluster_or_404(cluster_id)
        params = validated(BrowseIn, request.query_params)
        cursor = None
        if request.query_params.get("cursor"):
            import json

            try:
                cursor = {int(p): int(o) for p, o in json.loads(request.query_params["cursor"]).items()}
            except (ValueError, AttributeError):
                raise Invalid("cursor must be a JSON object of partition -> offset", field="cursor") from None
        result = messages.browse(
            cluster,
            topic,
            mode=params["mode"],
            partition=params.get("partition"),
            offset=params.get("offset"),
            timestamp_ms=params.get("timestamp"),
            limit=params["limit"],
            time_limit_s=params["time_limit_ms"] / 1000,
            cursor=cursor,
        )
        body = BrowseOut(result).data
        body["next_offsets"] = {str(p): o for p, o in result.next_offsets.items()}
        return Response(body)

    @extend_schema(request=ProduceIn, responses={201: ProducedOut})
    def post(self, request, cluster_id: int, topic: str):
        cluster = cluster_or_404(cluster_id)
        data = validated(ProduceIn, request.data)
        partition, offset = actions.do_produce(
            request.user,
            cluster,
            topic,
            key=messages.encode(data["key"], data["key_encoding"], "key"),
            value=messages.encode(data["value"], data["value_encoding"], "value"),
            headers=[(h["key"], h["value"].encode()) for h in data["headers"]],
            partition=data["partition"],
            source="api",
        )
        return Response({"partition": partition, "offset": offset}, status=status.HTTP_201_CREATED)
