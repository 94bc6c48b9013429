"""DescribeProducers (KIP-664): the active producers of partitions this broker leads, from producer state."""

from __future__ import annotations

import datetime

from kio.schema.errors import ErrorCode

from broker_runtime.errors import KafkaError
from broker_runtime.handlers.context import RequestContext
from broker_runtime.protocol.messages import make

_ZERO = datetime.timedelta(0)


async def handle_describe_producers(ctx: RequestContext, request) -> object:
    types = ctx.response_types()
    broker = ctx.broker
    replica_manager = broker.replica_manager
    topics_meta = broker.metadata.topics()
    topics = []
    for t in request.topics:
        parts = []
        for index in t.partition_indexes:
            try:
                partition = replica_manager.get_partition(t.name, index)
                if partition is None:
                    info = topics_meta.get(t.name)
                    raise replica_manager.not_hosted_error(
                        t.name, index, exists=info is not None and index in info.partitions
                    )
                partition.require_leader()
                producers = tuple(
                    make(
                        types.ProducerState,
                        producer_id=pid,
                        producer_epoch=entry.epoch,
                        last_sequence=entry.last_seq,
                        last_timestamp=entry.last_timestamp,
                        coordinator_epoch=entry.coordinator_epoch,
                        current_txn_start_offset=(
                            -1 if entry.current_txn_first_offset is None else entry.current_txn_first_offset
                        ),
                    )
                    for pid, entry in sorted(partition.log.producer_state.producers.items())
                )
                parts.append(make(
                    types.PartitionResponse, partition_index=index, error_code=ErrorCode.none, error_message=None,
                    active_producers=producers,
                ))  # fmt: skip
            except KafkaError as exc:
                parts.append(make(
                    types.PartitionResponse, partition_index=index, error_code=exc.error_code,
                    error_message=exc.message, active_producers=(),
                ))  # fmt: skip
        topics.append(make(types.TopicResponse, name=t.name, partitions=tuple(parts)))
    return make(types.DescribeProducersResponse, throttle_time=_ZERO, topics=tuple(topics))
