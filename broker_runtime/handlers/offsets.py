"""ListOffsets, OffsetForLeaderEpoch and DeleteRecords: questions and changes about a partition's offsets."""

from __future__ import annotations

import datetime

from kio.schema.errors import ErrorCode

from broker_runtime.errors import KafkaError
from broker_runtime.handlers.context import RequestContext
from broker_runtime.protocol.messages import make
from broker_runtime.replication.partition import Partition

_ZERO = datetime.timedelta(0)
LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED = -1, -2, -3, -4, -5
# The ListOffsets version from which each special timestamp is understood (Kafka's KafkaApis).
SPECIAL_TIMESTAMP_SINCE = {LATEST: 1, EARLIEST: 1, MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8, LATEST_TIERED: 9}
NOT_FOUND = (-1, -1, -1)
READ_COMMITTED = 1


def _leader(ctx: RequestContext, topic: str, index: int) -> Partition:
    replica_manager = ctx.broker.replica_manager
    partition = replica_manager.get_partition(topic, index)
    if partition is None:
        info = ctx.broker.metadata.topics().get(topic)
        raise replica_manager.not_hosted_error(
            topic, index, exists=info is not None and index in info.partitions
        )
    partition.require_leader()
    return partition


def _epoch_of(partition: Partition, offset: int) -> int:
    """The leader epoch under which `offset` was written (the leader epoch cache), -1 if unknown."""
    epoch = -1
    for entry_epoch, start in partition.log.leader_epochs.entries:
        if start > offset:
            break
        epoch = entry_epoch
    return epoch


def _list_offset(partition: Partition, timestamp: int, read_committed: bool = False) -> tuple[int, int, int]:
    """(timestamp, offset, leader epoch) as Kafka answers a ListOffsets query; -1s when no record matches.
    The last fetchable offset is the high watermark, or the last stable offset at read_committed.

    Without tiered storage the local log start is the log start, and nothing is tiered (offset -1)."""
    plog = partition.log
    fetchable = partition.last_stable_offset if read_committed else partition.high_watermark
    if timestamp == LATEST:
        return -1, fetchable, partition.leader_epoch
    if timestamp in (EARLIEST, EARLIEST_LOCAL):
        epochs = plog.leader_epochs.entries
        first = epochs[0][0] if epochs and epochs[0][1] <= plog.log_start_offset else -1
        return -1, plog.log_start_offset, first
    if timestamp == LATEST_TIERED:
        return NOT_FOUND
    found = plog.max_timestamp() if timestamp == MAX_TIMESTAMP else plog.offset_for_timestamp(timestamp)
    if found is None or found[0] >= fetchable:
        return NOT_FOUND
    offset, found_timestamp = found
    return found_timestamp, offset, _epoch_of(partition, offset)


async def handle_list_offsets(ctx: RequestContext, request) -> object:
    types = ctx.response_types()
    topics = []
    read_committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
    requested = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]
    duplicated = {tp for tp in requested if requested.count(tp) > 1}
    for t in request.topics:
        parts = []
        for p in t.partitions:
            try:
                if (t.name, p.partition_index) in duplicated:
                    raise KafkaError(ErrorCode.invalid_request, "partition appears more than once")
                if p.timestamp < 0 and ctx.api_version < SPECIAL_TIMESTAMP_SINCE.get(p.timestamp, 2**15):
                    raise KafkaError(ErrorCode.unsupported_version)
                partition = _leader(ctx, t.name, p.partition_index)
                partition.check_leader_epoch(getattr(p, "current_leader_epoch", -1))
                timestamp, offset, epoch = _list_offset(partition, p.timestamp, read_committed)
                parts.append(make(
                    types.ListOffsetsPartitionResponse, partition_index=p.partition_index, error_code=ErrorCode.none,
                    timestamp=timestamp, offset=offset, leader_epoch=epoch,
                ))  # fmt: skip
            except KafkaError as exc:
                parts.append(make(
                    types.ListOffsetsPartitionResponse, partition_index=p.partition_index,
                    error_code=exc.error_code, timestamp=-1, offset=-1, leader_epoch=-1,
                ))  # fmt: skip
        topics.append(make(types.ListOffsetsTopicResponse, name=t.name, partitions=tuple(parts)))
    return make(types.ListOffsetsResponse, throttle_time=_ZERO, topics=tuple(topics))


async def handle_offset_for_leader_epoch(ctx: RequestContext, request) -> object:
    types = ctx.response_types()
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            try:
                partition = _leader(ctx, t.topic, p.partition)
                partition.check_leader_epoch(p.current_leader_epoch)
                epoch, end_offset = partition.log.end_offset_for_epoch(p.leader_epoch)
                parts.append(make(
                    types.EpochEndOffset, error_code=ErrorCode.none, partition=p.partition,
                    leader_epoch=epoch, end_offset=end_offset,
                ))  # fmt: skip
            except KafkaError as exc:
                parts.append(make(types.EpochEndOffset, error_code=exc.error_code, partition=p.partition))
        topics.append(make(types.OffsetForLeaderTopicResult, topic=t.topic, partitions=tuple(parts)))
    return make(types.OffsetForLeaderEpochResponse, throttle_time=_ZERO, topics=tuple(topics))


async def handle_delete_records(ctx: RequestContext, request) -> object:
    types = ctx.response_types()
    outcomes: dict[tuple[str, int], int | KafkaError] = {}
    for t in request.topics:
        for p in t.partitions:
            try:
                partition = _leader(ctx, t.name, p.partition_index)
                offset = partition.high_watermark if p.offset == -1 else p.offset
                if offset < 0 or offset > partition.high_watermark:
                    raise KafkaError(
                        ErrorCode.offset_out_of_range,
                        f"offset {offset} is outside [0, high watermark {partition.high_watermark}]",
                    )
                outcomes[(t.name, p.partition_index)] = partition.log.delete_records_before(offset)
            except KafkaError as exc:
                outcomes[(t.name, p.partition_index)] = exc
    # One checkpoint per log dir for the whole request, written off the event loop, before answering.
    moved = [key for key, outcome in outcomes.items() if not isinstance(outcome, KafkaError)]
    if moved:
        await ctx.broker.checkpoint_log_starts(moved)
        for key in moved:
            if ctx.broker.replica_manager.is_offline(*key):
                outcomes[key] = ctx.broker.replica_manager.not_hosted_error(*key, exists=True)
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            outcome = outcomes[(t.name, p.partition_index)]
            if isinstance(outcome, KafkaError):
                parts.append(make(
                    types.DeleteRecordsPartitionResult, partition_index=p.partition_index, low_watermark=-1,
                    error_code=outcome.error_code,
                ))  # fmt: skip
            else:
                parts.append(make(
                    types.DeleteRecordsPartitionResult, partition_index=p.partition_index, low_watermark=outcome,
                    error_code=ErrorCode.none,
                ))  # fmt: skip
        topics.append(make(types.DeleteRecordsTopicResult, name=t.name, partitions=tuple(parts)))
    return make(types.DeleteRecordsResponse, throttle_time=_ZERO, topics=tuple(topics))
