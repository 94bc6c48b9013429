"""Metadata: brokers, controller, cluster id, topics and partition leadership; auto-creates topics."""

from __future__ import annotations

import datetime
import uuid

from kio.schema.errors import ErrorCode

from broker_runtime.cluster.topics import validate_topic_name
from broker_runtime.errors import KafkaError
from broker_runtime.handlers.context import RequestContext
from broker_runtime.protocol.messages import make

_ZERO = datetime.timedelta(0)
ZERO_UUID = uuid.UUID(int=0)


async def handle_metadata(ctx: RequestContext, request) -> object:
    broker = ctx.broker
    types = ctx.response_types()
    topics = broker.metadata.topics()
    requested = request.topics
    if requested is None or (ctx.api_version == 0 and not requested):
        wanted = [(name, None) for name in topics]
    else:
        by_id = {t.topic_id: t.name for t in topics.values()}
        wanted = []
        for t in requested:
            name = t.name
            topic_id = getattr(t, "topic_id", None)
            if name is None and topic_id not in (None, ZERO_UUID):
                name = by_id.get(topic_id)
                wanted.append((name, None if name else ErrorCode.unknown_topic_id))
            else:
                wanted.append((name, None))
    allow_auto_create = getattr(request, "allow_auto_topic_creation", True)

    topic_results = []
    for name, error in wanted:
        info = topics.get(name) if name else None
        if error is None and info is None:
            error = ErrorCode.unknown_topic_or_partition
            try:
                validate_topic_name(name)
            except KafkaError as exc:
                error = exc.error_code
            if allow_auto_create and error == ErrorCode.unknown_topic_or_partition:
                try:
                    info = await broker.maybe_auto_create(name)
                    error = None if info else ErrorCode.unknown_topic_or_partition
                except KafkaError as exc:
                    error = exc.error_code
        if info is None:
            topic_results.append(make(
                types.MetadataResponseTopic, error_code=error, name=name, topic_id=ZERO_UUID,
                is_internal=False, partitions=(),
            ))  # fmt: skip
            continue
        partitions = tuple(
            _partition(types, broker, info.name, index, a) for index, a in sorted(info.partitions.items())
        )
        topic_results.append(make(
            types.MetadataResponseTopic, error_code=ErrorCode.none, name=info.name, topic_id=info.topic_id,
            is_internal=info.internal, partitions=partitions,
        ))  # fmt: skip

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
    )


def _partition(types, broker, topic: str, index: int, a) -> object:
    """A partition whose log dir failed has no leader until a restart, as Kafka's controller elects none when
    the only replica's dir is offline: LEADER_NOT_AVAILABLE, this broker listed as an offline replica."""
    if broker.replica_manager.is_offline(topic, index):
        return make(
            types.MetadataResponsePartition, error_code=ErrorCode.leader_not_available, partition_index=index,
            leader_id=-1, leader_epoch=a.leader_epoch, replica_nodes=tuple(a.replicas),
            isr_nodes=tuple(r for r in a.isr if r != broker.broker_id), offline_replicas=(broker.broker_id,),
        )  # fmt: skip
    return make(
        types.MetadataResponsePartition, error_code=ErrorCode.none, partition_index=index,
        leader_id=a.leader, leader_epoch=a.leader_epoch, replica_nodes=tuple(a.replicas),
        isr_nodes=tuple(a.isr), offline_replicas=(),
    )  # fmt: skip
