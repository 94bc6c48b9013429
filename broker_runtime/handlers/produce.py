"""Produce: validate each partition's batch from its header, append it as leader, answer per partition."""

from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode

from broker_runtime.errors import CloseConnection, KafkaError
from broker_runtime.handlers.context import RequestContext
from broker_runtime.protocol.produce_response import PartitionResult, encode_produce_response
from broker_runtime.protocol.records import (
    CODEC_ZSTD,
    InvalidRecords,
    decode_records,
    read_header,
    recompress,
    validate_produce_batch,
)

log = logging.getLogger(__name__)


async def handle_produce(ctx: RequestContext, request) -> object:
    broker = ctx.broker
    acks = request.acks
    timeout_ms = int(request.timeout.total_seconds() * 1000)
    # (topic, index, AppendResult | KafkaError, coroutine waiting for replication | None)
    pending: list[tuple[str, int, object, object]] = []
    for topic_data in request.topic_data:
        name = topic_data.name
        for part in topic_data.partition_data:
            try:
                if acks not in (0, 1, -1):
                    raise KafkaError(ErrorCode.invalid_required_acks, f"acks must be 0, 1 or -1, got {acks}")
                if request.transactional_id is not None:
                    raise KafkaError(
                        ErrorCode.transactional_id_authorization_failed,
                        "transactions are not supported by this broker yet",
                    )
                batch, header = _validated_batch(ctx, name, part.index, part.records)
                partition, result = broker.replica_manager.append_local(
                    name, part.index, batch, header, acks=acks
                )
                wait = None
                if acks == -1:
                    wait = broker.replica_manager.wait_for_replication(partition, result, timeout_ms)
                pending.append((name, part.index, result, wait))
            except InvalidRecords as exc:
                pending.append((name, part.index, KafkaError(exc.error_code, exc.message), None))
            except KafkaError as exc:
                pending.append((name, part.index, exc, None))

    results = {}
    for name, index, outcome, wait in pending:
        if wait is not None:
            try:
                await wait
            except KafkaError as exc:
                outcome = exc
        results.setdefault(name, []).append((index, outcome))

    if acks == 0:
        failed = [
            (name, index, o)
            for name, parts in results.items()
            for index, o in parts
            if isinstance(o, KafkaError)
        ]
        if failed:
            name, index, error = failed[0]
            raise CloseConnection(
                f"acks=0 produce to {name}-{index} failed: {error.error_code.name} {error.message or ''}"
            )
        return None
    return encode_produce_response(
        ctx.api_version,
        [
            (name, [_partition_result(index, outcome) for index, outcome in parts])
            for name, parts in results.items()
        ],
    )


def _validated_batch(ctx: RequestContext, name: str, index: int, records: bytes | None):
    """The partition's batch, validated against the topic's configs (and recompressed if the topic says so)."""
    broker = ctx.broker
    topic = broker.metadata.topics().get(name)
    if topic is None or index not in topic.partitions:
        raise KafkaError(ErrorCode.unknown_topic_or_partition, f"{name}-{index} does not exist")
    partition = broker.replica_manager.get_partition(name, index)
    if partition is None:
        raise KafkaError(ErrorCode.not_leader_or_follower, f"{name}-{index} is not hosted here")
    if topic.internal:
        raise KafkaError(ErrorCode.invalid_topic_exception, f"cannot append to internal topic {name}")
    if records is None:
        raise KafkaError(ErrorCode.invalid_record, "no records")
    batch = bytearray(records)
    max_bytes = partition.log.config.max_message_bytes
    header = validate_produce_batch(batch, max_bytes)
    if header.codec == CODEC_ZSTD and ctx.api_version < 7:
        raise KafkaError(ErrorCode.unsupported_compression_type, "zstd needs Produce v7 or later")
    policy = broker.produce_policy(name)
    if not policy.log_append_time:
        _check_timestamps(header, policy, broker.clock.time_ms())
    if policy.compacted and any(r.key is None for r in decode_records(batch, header)):
        raise KafkaError(
            ErrorCode.invalid_record, f"compacted topic {name} cannot accept a record without a key"
        )
    if policy.codec is not None and policy.codec != header.codec:
        batch = recompress(batch, header, policy.codec)
        header = read_header(batch)
        if header.size > max_bytes:
            raise KafkaError(
                ErrorCode.message_too_large,
                f"batch of {header.size} bytes after recompression exceeds max.message.bytes {max_bytes}",
            )
    return batch, header


def _check_timestamps(header, policy, now_ms: int) -> None:
    """CreateTime bounds (message.timestamp.before/after.max.ms), checked on the batch's first and max
    timestamps rather than on every record."""
    earliest = min(header.base_timestamp, header.max_timestamp)
    if (
        now_ms - earliest > policy.timestamp_before_max_ms
        or header.max_timestamp - now_ms > policy.timestamp_after_max_ms
    ):
        raise KafkaError(
            ErrorCode.invalid_timestamp,
            f"timestamps {earliest}..{header.max_timestamp} are outside the allowed range around broker time {now_ms}",
        )


def _partition_result(index: int, outcome) -> PartitionResult:
    if isinstance(outcome, KafkaError):
        return index, outcome.error_code, -1, -1, -1, (), outcome.message
    return index, 0, outcome.base_offset, outcome.log_append_time, outcome.log_start_offset, (), None
