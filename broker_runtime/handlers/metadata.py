"""Metadata: brokers, controller, cluster id, topics and partition leadership; auto-creates topics.
DescribeTopicPartitions (KIP-966): the same topic descriptions, sorted by name and paginated by a cursor."""

from __future__ import annotations

import datetime
import uuid

from kio.schema.errors import ErrorCode

from broker_runtime.cluster.metadata_store import TopicInfo
from broker_runtime.cluster.topics import INTERNAL_TOPICS, validate_topic_name
from broker_runtime.errors import KafkaError
from broker_runtime.handlers.context import RequestContext
from broker_runtime.protocol.messages import make
from broker_runtime.protocol.operations import CLUSTER_OPERATIONS, OMITTED, TOPIC_OPERATIONS

_ZERO = datetime.timedelta(0)
ZERO_UUID = uuid.UUID(int=0)
TOPIC_IDS_SINCE = 12  # Metadata v10 and v11 carry the fields, but Kafka serves lookups by id from v12
AUTHORIZED_OPERATIONS_SINCE = 8
CLUSTER_OPERATIONS_UNTIL = 10  # v11 moved them to DescribeCluster (KIP-700)


def _missing_topic_error(name: str) -> ErrorCode:
    try:
        validate_topic_name(name)
    except KafkaError as exc:
        return exc.error_code
    return ErrorCode.unknown_topic_or_partition


def _partitions(cls, broker, info: TopicInfo, start: int = 0, limit: int | None = None) -> tuple:
    indexes = sorted(i for i in info.partitions if i >= start)
    if limit is not None:
        indexes = indexes[:limit]
    return tuple(_partition(cls, broker, info.name, index, info.partitions[index]) for index in indexes)


def _partition(cls, broker, topic: str, index: int, a) -> object:
    """A partition whose log dir failed has no leader until a restart, as Kafka's controller elects none when
    the only replica's dir is offline: LEADER_NOT_AVAILABLE, this broker listed as an offline replica."""
    if broker.replica_manager.is_offline(topic, index):
        return make(
            cls, error_code=ErrorCode.leader_not_available, partition_index=index, leader_id=-1,
            leader_epoch=a.leader_epoch, replica_nodes=tuple(a.replicas),
            isr_nodes=tuple(r for r in a.isr if r != broker.broker_id), offline_replicas=(broker.broker_id,),
            eligible_leader_replicas=(), last_known_elr=(),
        )  # fmt: skip
    # In a cluster a partition whose leader is down (or not elected yet) has none: LEADER_NOT_AVAILABLE.
    error = ErrorCode.none if a.leader >= 0 else ErrorCode.leader_not_available
    return make(
        cls, error_code=error, partition_index=index, leader_id=a.leader, leader_epoch=a.leader_epoch,
        replica_nodes=tuple(a.replicas), isr_nodes=tuple(a.isr), offline_replicas=tuple(a.offline_replicas),
        eligible_leader_replicas=(), last_known_elr=(),
    )  # fmt: skip


def _topic_ids(requested) -> list[uuid.UUID]:
    """The topic ids a request names; kio reads the zero UUID ("no id") as None."""
    return [i for t in requested if (i := getattr(t, "topic_id", None)) not in (None, ZERO_UUID)]


async def handle_metadata(ctx: RequestContext, request) -> object:
    broker = ctx.broker
    types = ctx.response_types()
    version = ctx.api_version
    topics = broker.metadata.topics()
    requested = request.topics
    all_topics = requested is None or (version == 0 and not requested)
    ids = [] if all_topics else _topic_ids(requested)
    if not all_topics and (
        (version < TOPIC_IDS_SINCE and ids) or (not ids and any(t.name is None for t in requested))
    ):
        return _error_response(types, requested, ErrorCode.invalid_request)

    by_id = {t.topic_id: t.name for t in topics.values()}
    topic_results = [
        make(types.MetadataResponseTopic, error_code=ErrorCode.unknown_topic_id, name=None, topic_id=topic_id,
             is_internal=False, partitions=())
        for topic_id in dict.fromkeys(ids)
        if topic_id not in by_id
    ]  # fmt: skip
    if all_topics:
        wanted = list(topics)
    elif ids:  # looked up by id: names given beside ids are ignored, as Kafka does
        wanted = list(dict.fromkeys(by_id[i] for i in ids if i in by_id))
    else:
        wanted = list(dict.fromkeys(t.name for t in requested))
    # (maybe_auto_create checks auto.create.topics.enable)
    auto_create = not all_topics and not ids and getattr(request, "allow_auto_topic_creation", True)
    with_operations = version >= AUTHORIZED_OPERATIONS_SINCE and request.include_topic_authorized_operations

    for name in wanted:
        info = topics.get(name)
        error = ErrorCode.none
        if info is None:
            error = _missing_topic_error(name)
            if auto_create and error == ErrorCode.unknown_topic_or_partition:
                try:
                    info = await broker.maybe_auto_create(name)
                    error = ErrorCode.none if info else error
                except KafkaError as exc:
                    error = exc.error_code
        topic_results.append(make(
            types.MetadataResponseTopic, error_code=error, name=name,
            topic_id=info.topic_id if info else ZERO_UUID, is_internal=info.internal if info else False,
            partitions=_partitions(types.MetadataResponsePartition, broker, info) if info else (),
            topic_authorized_operations=TOPIC_OPERATIONS if with_operations else OMITTED,
        ))  # fmt: skip

    cluster_operations = OMITTED
    if AUTHORIZED_OPERATIONS_SINCE <= version <= CLUSTER_OPERATIONS_UNTIL and getattr(
        request, "include_cluster_authorized_operations", False
    ):
        cluster_operations = CLUSTER_OPERATIONS
    return make(
        types.MetadataResponse,
        throttle_time=_ZERO,
        brokers=tuple(
            make(types.MetadataResponseBroker, node_id=b.broker_id, host=b.host, port=b.port, rack=b.rack)
            for b in broker.metadata.brokers()
        ),
        cluster_id=broker.metadata.cluster_id,
        controller_id=broker.metadata.controller_id(),
        topics=tuple(topic_results),
        cluster_authorized_operations=cluster_operations,
    )


def _error_response(types, requested, error: ErrorCode) -> object:
    """Kafka's answer to a request it refuses whole: every requested topic with the error."""
    return make(
        types.MetadataResponse, throttle_time=_ZERO, brokers=(), cluster_id=None, controller_id=-1,
        topics=tuple(
            make(types.MetadataResponseTopic, error_code=error, name=t.name or "",
                 topic_id=getattr(t, "topic_id", ZERO_UUID), is_internal=False, partitions=())
            for t in requested
        ),
        cluster_authorized_operations=OMITTED,
    )  # fmt: skip


async def handle_describe_topic_partitions(ctx: RequestContext, request) -> object:
    """Topics in name order from the cursor on, at most `response_partition_limit` partitions (capped by
    max.request.partition.size.limit); `next_cursor` says where the next page starts (Kafka's
    DescribeTopicPartitionsRequestHandler)."""
    broker = ctx.broker
    types = ctx.response_types()
    topics = broker.metadata.topics()
    cursor = request.cursor
    cursor_topic = cursor.topic_name if cursor is not None else ""
    list_all = not request.topics
    if list_all:
        names = sorted(n for n in topics if n >= cursor_topic)
    else:
        names = sorted({t.name for t in request.topics if t.name >= cursor_topic})
        if cursor is not None and cursor.topic_name not in names:
            return _describe_error(types, request)  # the cursor's topic must be one of those requested
    if cursor is not None and cursor.partition_index < 0:
        return _describe_error(types, request)

    remaining = max(
        min(broker.config["max.request.partition.size.limit"], request.response_partition_limit), 1
    )
    results = []
    next_cursor = None
    for name in names:
        if remaining == 0:
            next_cursor = make(types.Cursor, topic_name=name, partition_index=0)
            break
        info = topics.get(name)
        if info is None:
            if not list_all:
                results.append(make(
                    types.DescribeTopicPartitionsResponseTopic, error_code=_missing_topic_error(name), name=name,
                    topic_id=ZERO_UUID, is_internal=name in INTERNAL_TOPICS, partitions=(),
                    topic_authorized_operations=TOPIC_OPERATIONS,
                ))  # fmt: skip
            continue
        start = cursor.partition_index if cursor is not None and name == cursor_topic else 0
        end = min(len(info.partitions), start + remaining)
        partitions = _partitions(
            types.DescribeTopicPartitionsResponsePartition, broker, info, start, max(end - start, 0)
        )
        results.append(make(
            types.DescribeTopicPartitionsResponseTopic, error_code=ErrorCode.none, name=name,
            topic_id=info.topic_id, is_internal=info.internal, partitions=partitions,
            topic_authorized_operations=TOPIC_OPERATIONS,
        ))  # fmt: skip
        if end < len(info.partitions):
            next_cursor = make(types.Cursor, topic_name=name, partition_index=end)
            break
        remaining -= len(partitions)
    return make(
        types.DescribeTopicPartitionsResponse,
        throttle_time=_ZERO,
        topics=tuple(results),
        next_cursor=next_cursor,
    )


def _describe_error(types, request) -> object:
    """An invalid request is answered with INVALID_REQUEST on every requested topic (Kafka's error response)."""
    return make(
        types.DescribeTopicPartitionsResponse, throttle_time=_ZERO, next_cursor=None,
        topics=tuple(
            make(types.DescribeTopicPartitionsResponseTopic, error_code=ErrorCode.invalid_request, name=t.name,
                 topic_id=ZERO_UUID, is_internal=False, partitions=(), topic_authorized_operations=OMITTED)
            for t in request.topics
        ),
    )  # fmt: skip
