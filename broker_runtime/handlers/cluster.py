"""DescribeCluster, DescribeLogDirs and InitProducerId."""

from __future__ import annotations

import datetime

from kio.schema.errors import ErrorCode

from broker_runtime.handlers.context import RequestContext
from broker_runtime.protocol.messages import make

_ZERO = datetime.timedelta(0)
_NO_OPERATIONS = -(2**31)


async def handle_describe_cluster(ctx: RequestContext, request) -> object:
    broker = ctx.broker
    types = ctx.response_types()
    return make(
        types.DescribeClusterResponse, throttle_time=_ZERO, error_code=ErrorCode.none, error_message=None,
        cluster_id=broker.metadata.cluster_id, controller_id=broker.metadata.controller_id(),
        brokers=tuple(
            make(types.DescribeClusterBroker, broker_id=b.broker_id, host=b.host, port=b.port, rack=b.rack)
            for b in broker.metadata.brokers()
        ),
        cluster_authorized_operations=_NO_OPERATIONS, endpoint_type=1,
    )  # fmt: skip


async def handle_describe_log_dirs(ctx: RequestContext, request) -> object:
    broker = ctx.broker
    types = ctx.response_types()
    wanted = None
    if request.topics is not None:
        wanted = {(t.topic, p) for t in request.topics for p in t.partitions}
    results = []
    for log_dir, sizes in broker.log_manager.dir_sizes().items():
        by_topic: dict[str, list] = {}
        for (topic, index), size in sorted(sizes.items()):
            if wanted is not None and (topic, index) not in wanted:
                continue
            by_topic.setdefault(topic, []).append(make(
                types.DescribeLogDirsPartition, partition_index=index, partition_size=size, offset_lag=0,
                is_future_key=False,
            ))  # fmt: skip
        results.append(make(
            types.DescribeLogDirsResult, error_code=ErrorCode.none, log_dir=log_dir,
            topics=tuple(make(types.DescribeLogDirsTopic, name=n, partitions=tuple(ps)) for n, ps in by_topic.items()),
        ))  # fmt: skip
    for log_dir in sorted(
        broker.log_manager.offline_dirs
    ):  # as Kafka: the dir, with its error, and no topics
        results.append(make(
            types.DescribeLogDirsResult, error_code=ErrorCode.kafka_storage_error, log_dir=str(log_dir), topics=(),
        ))  # fmt: skip
    return make(types.DescribeLogDirsResponse, throttle_time=_ZERO, results=tuple(results))


async def handle_init_producer_id(ctx: RequestContext, request) -> object:
    """Idempotent producers get a fresh id at epoch 0, as Kafka does whenever there is no transactional id."""
    types = ctx.response_types()
    if request.transactional_id is not None:
        # Transactions arrive with the transaction coordinator; until then say so with Kafka's closest error.
        return make(
            types.InitProducerIdResponse, throttle_time=_ZERO, error_code=ErrorCode.coordinator_not_available,
            producer_id=-1, producer_epoch=-1,
        )  # fmt: skip
    return make(
        types.InitProducerIdResponse, throttle_time=_ZERO, error_code=ErrorCode.none,
        producer_id=await ctx.broker.next_producer_id(), producer_epoch=0,
    )  # fmt: skip
