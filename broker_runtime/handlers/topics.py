"""CreateTopics, DeleteTopics, CreatePartitions."""

from __future__ import annotations

import datetime
import uuid

from kio.schema.errors import ErrorCode

from broker_runtime.errors import KafkaError
from broker_runtime.handlers.context import RequestContext
from broker_runtime.protocol.messages import make

_ZERO = datetime.timedelta(0)
ZERO_UUID = uuid.UUID(int=0)


def _ms(timeout: datetime.timedelta) -> int:
    """How long a cluster broker waits for the controller to act on the request (0: not at all)."""
    return max(0, int(timeout.total_seconds() * 1000))


async def handle_create_topics(ctx: RequestContext, request) -> object:
    from broker_runtime.config import describe_topic_configs

    broker = ctx.broker
    types = ctx.response_types()
    names = [t.name for t in request.topics]
    duplicates = {n for n in names if names.count(n) > 1}
    results = []
    for t in request.topics:
        try:
            if t.name in duplicates:
                raise KafkaError(
                    ErrorCode.invalid_request, f"topic {t.name!r} appears more than once in the request"
                )
            assignments = {a.partition_index: list(a.broker_ids) for a in t.assignments} or None
            if assignments and (t.num_partitions != -1 or t.replication_factor != -1):
                raise KafkaError(
                    ErrorCode.invalid_request,
                    "both manual assignments and a partition count or replication factor were given",
                )
            info = await broker.create_topic(
                t.name, t.num_partitions, t.replication_factor, {c.name: c.value for c in t.configs},
                assignments=assignments, validate_only=request.validate_only, wait_ms=_ms(request.timeout),
            )  # fmt: skip
            entries = describe_topic_configs(
                broker.config, info.configs, include_synonyms=False, include_docs=False
            )
            results.append(make(
                types.CreatableTopicResult, name=t.name, topic_id=info.topic_id, error_code=ErrorCode.none,
                error_message=None, num_partitions=len(info.partitions),
                replication_factor=len(info.partitions[0].replicas),
                configs=tuple(
                    make(types.CreatableTopicConfigs, name=e.name, value=e.value, read_only=e.read_only,
                         config_source=e.source, is_sensitive=e.is_sensitive)
                    for e in entries
                ) if hasattr(types, "CreatableTopicConfigs") else (),
            ))  # fmt: skip
        except KafkaError as exc:
            results.append(make(
                types.CreatableTopicResult, name=t.name, topic_id=ZERO_UUID, error_code=exc.error_code,
                error_message=exc.message, num_partitions=-1, replication_factor=-1, configs=(),
            ))  # fmt: skip
    return make(types.CreateTopicsResponse, throttle_time=_ZERO, topics=tuple(results))


async def handle_delete_topics(ctx: RequestContext, request) -> object:
    broker = ctx.broker
    types = ctx.response_types()
    if hasattr(request, "topic_names"):
        targets = [(name, None) for name in request.topic_names]
    else:
        targets = [(t.name, t.topic_id) for t in request.topics]
    results = []
    for name, topic_id in targets:
        try:
            if name is None:
                by_id = {t.topic_id: t.name for t in broker.metadata.topics().values()}
                name = by_id.get(topic_id)
                if name is None:
                    raise KafkaError(ErrorCode.unknown_topic_id, f"no topic has id {topic_id}")
            info = broker.metadata.topics().get(name)
            resolved_id = info.topic_id if info else ZERO_UUID
            await broker.delete_topic(name, wait_ms=_ms(request.timeout))
            results.append(make(
                types.DeletableTopicResult, name=name, topic_id=resolved_id, error_code=ErrorCode.none,
                error_message=None,
            ))  # fmt: skip
        except KafkaError as exc:
            results.append(make(
                types.DeletableTopicResult, name=name, topic_id=topic_id or ZERO_UUID, error_code=exc.error_code,
                error_message=exc.message,
            ))  # fmt: skip
    return make(types.DeleteTopicsResponse, throttle_time=_ZERO, responses=tuple(results))


async def handle_create_partitions(ctx: RequestContext, request) -> object:
    broker = ctx.broker
    types = ctx.response_types()
    names = [t.name for t in request.topics]
    results = []
    for t in request.topics:
        try:
            if names.count(t.name) > 1:
                raise KafkaError(
                    ErrorCode.invalid_request, f"topic {t.name!r} appears more than once in the request"
                )
            assignments = None if t.assignments is None else [list(a.broker_ids) for a in t.assignments]
            await broker.create_partitions(
                t.name, t.count, assignments, request.validate_only, wait_ms=_ms(request.timeout)
            )
            results.append(make(types.CreatePartitionsTopicResult, name=t.name, error_code=ErrorCode.none))
        except KafkaError as exc:
            results.append(make(
                types.CreatePartitionsTopicResult, name=t.name, error_code=exc.error_code, error_message=exc.message,
            ))  # fmt: skip
    return make(types.CreatePartitionsResponse, throttle_time=_ZERO, results=tuple(results))
