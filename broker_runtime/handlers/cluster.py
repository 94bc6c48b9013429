"""DescribeCluster and DescribeLogDirs."""

from __future__ import annotations

import datetime
import shutil

from kio.schema.errors import ErrorCode

from broker_runtime.handlers.context import RequestContext
from broker_runtime.protocol.messages import make
from broker_runtime.protocol.operations import CLUSTER_OPERATIONS, OMITTED

_ZERO = datetime.timedelta(0)
BROKER_ENDPOINT, CONTROLLER_ENDPOINT = 1, 2  # DescribeCluster v1 endpoint types (KIP-919)


async def handle_describe_cluster(ctx: RequestContext, request) -> object:
    broker = ctx.broker
    types = ctx.response_types()
    endpoint_type = getattr(request, "endpoint_type", BROKER_ENDPOINT)
    if endpoint_type != BROKER_ENDPOINT:
        # v0 knows no endpoint types, so Kafka answers INVALID_REQUEST there.
        if ctx.api_version == 0:
            error = ErrorCode.invalid_request
        elif endpoint_type == CONTROLLER_ENDPOINT:
            error = ErrorCode.mismatched_endpoint_type
        else:
            error = ErrorCode.unsupported_endpoint_type
        message = (
            f"The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type "
            f"{'CONTROLLER' if endpoint_type == CONTROLLER_ENDPOINT else endpoint_type}"
            if error == ErrorCode.mismatched_endpoint_type
            else f"Unsupported endpoint type {endpoint_type}"
        )
        return make(
            types.DescribeClusterResponse, throttle_time=_ZERO, error_code=error, error_message=message,
            cluster_id="", controller_id=-1, brokers=(), cluster_authorized_operations=OMITTED,
            endpoint_type=BROKER_ENDPOINT,
        )  # fmt: skip
    return make(
        types.DescribeClusterResponse, throttle_time=_ZERO, error_code=ErrorCode.none, error_message=None,
        cluster_id=broker.metadata.cluster_id, controller_id=broker.metadata.controller_id(),
        brokers=tuple(
            make(types.DescribeClusterBroker, broker_id=b.broker_id, host=b.host, port=b.port, rack=b.rack)
            for b in broker.metadata.brokers()
        ),
        cluster_authorized_operations=CLUSTER_OPERATIONS if request.include_cluster_authorized_operations else OMITTED,
        endpoint_type=BROKER_ENDPOINT,
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
        # v4: the file system's size and the space left to this process (Kafka's FileStore total/usable space).
        total, usable = _disk_space(log_dir)
        results.append(make(
            types.DescribeLogDirsResult, error_code=ErrorCode.none, log_dir=log_dir,
            topics=tuple(make(types.DescribeLogDirsTopic, name=n, partitions=tuple(ps)) for n, ps in by_topic.items()),
            total_bytes=total, usable_bytes=usable,
        ))  # fmt: skip
    for log_dir in sorted(
        broker.log_manager.offline_dirs
    ):  # as Kafka: the dir, with its error, and no topics
        results.append(make(
            types.DescribeLogDirsResult, error_code=ErrorCode.kafka_storage_error, log_dir=str(log_dir), topics=(),
            total_bytes=-1, usable_bytes=-1,
        ))  # fmt: skip
    return make(
        types.DescribeLogDirsResponse, throttle_time=_ZERO, error_code=ErrorCode.none, results=tuple(results)
    )


def _disk_space(log_dir: str) -> tuple[int, int]:
    """(total, usable) bytes of the file system holding `log_dir`; -1s when it cannot be read."""
    try:
        usage = shutil.disk_usage(log_dir)
    except OSError:
        return -1, -1
    return usage.total, usage.free
