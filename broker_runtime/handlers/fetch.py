"""Fetch: read whole batches up to the high watermark; long-poll until min bytes or max wait.

A consumer at isolation_level=1 (read_committed) reads up to the last stable offset instead, and gets the aborted
transactions overlapping the records it gets (from the `.txnindex` files), so that it can drop their records.

A fetch with a replica id (>= 0) is a follower's: it must be a replica of the partition, reads up to the log end
rather than the high watermark, tells the leader the follower's log end (its fetch offset), and waits for appends
rather than high-watermark moves. From v12 it names the epoch of its last batch; when our log disagrees with its
log there, the answer is at once the DivergingEpoch to truncate from, with no records, and the follower's position
is not recorded (Kafka 2.7+). Replication throttles hold back data of throttled replicas (quota.py).

Fetching from followers (KIP-392): a consumer's Fetch v11+ may go to any replica; a follower serves it up to its
own high watermark (which its fetches from the leader move, waking such waits). A leader with
`replica.selector.class` set to Kafka's RackAwareReplicaSelector answers a consumer whose client.rack has an
in-sync follower holding the offset, and no leader, with that follower as preferred read replica and no records.

The wait is event-driven: the request parks one future on every partition it reads, and an append (or a
high-watermark move) wakes it; nothing polls. Fetch sessions (KIP-227) are declined by answering session id 0,
which tells clients to keep sending full fetch requests.
"""

from __future__ import annotations

import datetime
import struct
import uuid

from kio.schema.errors import ErrorCode

from broker_runtime.config import RACK_AWARE_SELECTOR
from broker_runtime.errors import KafkaError
from broker_runtime.handlers.context import RequestContext
from broker_runtime.protocol.compression import CODEC_ZSTD
from broker_runtime.protocol.fetch_response import encode_fetch_response
from broker_runtime.protocol.messages import make

_ZERO = datetime.timedelta(0)
_BASE_AND_LENGTH = struct.Struct(">qi")
_LAST_OFFSET_DELTA = struct.Struct(">i")  # at byte 23 of a batch
_NO_TOPIC_ID = uuid.UUID(int=0)
READ_COMMITTED = 1
TOPIC_IDS_SINCE = 13  # Fetch v13+ names topics by id (KIP-516)
# Fetch v11+ from a consumer may be served by a follower, which reads to its own HW (KIP-392).
FROM_FOLLOWERS_SINCE = 11


async def handle_fetch(ctx: RequestContext, request) -> object:
    broker = ctx.broker
    clock = broker.clock
    deadline = clock.monotonic_ms() + max(request.max_wait.total_seconds() * 1000, 0.0)
    min_bytes = min(request.min_bytes, _max_bytes(ctx, request))
    replica_id = _replica_id(request)
    first = True
    while True:
        response, total_bytes, watched, had_error = _read_once(ctx, request, replica_id, record_fetch=first)
        first = False
        remaining_ms = deadline - clock.monotonic_ms()
        if total_bytes >= min_bytes or had_error or remaining_ms <= 0 or not watched:
            return _encoded(ctx, replica_id, response)
        await broker.replica_manager.wait_for_data(watched, remaining_ms, follower=replica_id >= 0)
        if clock.monotonic_ms() >= deadline:
            return _encoded(ctx, replica_id, _read_once(ctx, request, replica_id, record_fetch=False)[0])


def _encoded(ctx: RequestContext, replica_id: int, response):
    """A follower's answer (every append sends one to each follower) hand-encoded where the version allows."""
    if replica_id >= 0:
        return encode_fetch_response(ctx.api_version, response) or response
    return response


def _replica_id(request) -> int:
    """The follower's broker id, -1 for a consumer (Fetch v15+ moved it into replica_state)."""
    replica_state = getattr(request, "replica_state", None)
    if replica_state is not None and replica_state.replica_id >= 0:
        return replica_state.replica_id
    return getattr(request, "replica_id", -1)


def _preferred_read_replica(
    ctx: RequestContext, request, replica_id: int, partition, fetch_offset: int
) -> int | None:
    """KIP-392: as leader with the rack-aware replica.selector.class, the in-sync follower in the consumer's
    client.rack it should fetch from instead of us (None: read here)."""
    broker = ctx.broker
    if (
        replica_id >= 0
        or ctx.api_version < FROM_FOLLOWERS_SINCE
        or not partition.is_leader
        or broker.config["replica.selector.class"] != RACK_AWARE_SELECTOR
        or not getattr(request, "rack_id", "")
    ):
        return None
    racks = {b.broker_id: b.rack for b in broker.metadata.brokers()}
    preferred = partition.preferred_read_replica(request.rack_id, fetch_offset, racks)
    return None if preferred == partition.broker_id else preferred


def _max_bytes(ctx: RequestContext, request) -> int:
    """The response size limit: the request's, capped by the broker's fetch.max.bytes (as Kafka does)."""
    return min(request.max_bytes, ctx.broker.config["fetch.max.bytes"])


def _read_once(ctx: RequestContext, request, replica_id: int, *, record_fetch: bool):
    broker = ctx.broker
    types = ctx.response_types()
    rm = broker.replica_manager
    quota = broker.replication_quota
    topics_meta = broker.metadata.topics()
    remaining = _max_bytes(ctx, request)
    total = 0
    watched = []
    had_error = False
    read_committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
    by_id = {t.topic_id: t.name for t in topics_meta.values()} if ctx.api_version >= TOPIC_IDS_SINCE else {}
    topic_responses = []
    for fetch_topic in request.topics:
        if ctx.api_version >= TOPIC_IDS_SINCE:
            topic_id = fetch_topic.topic_id
            name = by_id.get(topic_id)
        else:
            name, topic_id = fetch_topic.topic, _NO_TOPIC_ID
        parts = []
        for fp in fetch_topic.partitions:
            partition = rm.get_partition(name, fp.partition) if name is not None else None
            try:
                if name is None:
                    raise KafkaError(ErrorCode.unknown_topic_id)
                if partition is None:
                    exists = name in topics_meta and fp.partition in topics_meta[name].partitions
                    raise rm.not_hosted_error(name, fp.partition, exists=exists)
                if replica_id >= 0 or ctx.api_version < FROM_FOLLOWERS_SINCE:
                    partition.require_leader()
                current_epoch = getattr(fp, "current_leader_epoch", -1)
                partition.check_leader_epoch(current_epoch)
                if ctx.api_version < 10 and broker.produce_policy(name).codec == CODEC_ZSTD:
                    raise KafkaError(
                        ErrorCode.unsupported_compression_type, "zstd topics need Fetch v10 or later"
                    )
                plog = partition.log
                records = b""
                diverging = (
                    partition.diverging_epoch(getattr(fp, "last_fetched_epoch", -1), fp.fetch_offset)
                    if replica_id >= 0
                    else None
                )
                if diverging is not None:
                    had_error = True  # answered at once, like an error
                    parts.append(make(
                        types.PartitionData, partition_index=fp.partition, error_code=ErrorCode.none,
                        high_watermark=partition.high_watermark, last_stable_offset=partition.high_watermark,
                        log_start_offset=plog.log_start_offset,
                        aborted_transactions=() if read_committed else None, preferred_read_replica=-1,
                        records=b"", diverging_epoch=types.EpochEndOffset(epoch=diverging[0], end_offset=diverging[1]),
                    ))  # fmt: skip
                    continue
                if fp.fetch_offset < plog.log_start_offset or fp.fetch_offset > plog.log_end_offset:
                    raise KafkaError(ErrorCode.offset_out_of_range)
                preferred = _preferred_read_replica(ctx, request, replica_id, partition, fp.fetch_offset)
                if preferred is not None:
                    had_error = True  # answered at once: the consumer goes to that replica
                    parts.append(make(
                        types.PartitionData, partition_index=fp.partition, error_code=ErrorCode.none,
                        high_watermark=partition.high_watermark, last_stable_offset=partition.high_watermark,
                        log_start_offset=plog.log_start_offset,
                        aborted_transactions=() if read_committed else None, preferred_read_replica=preferred,
                        records=b"",
                    ))  # fmt: skip
                    continue
                if replica_id >= 0 and record_fetch:
                    rm.record_follower_fetch(
                        partition, replica_id, fp.fetch_offset, getattr(fp, "log_start_offset", -1),
                        with_epoch=current_epoch >= 0,
                    )  # fmt: skip
                high_watermark = partition.high_watermark  # after the follower's fetch moved it
                last_stable = plog.last_stable_offset(high_watermark)
                # Followers read what the leader has; consumers what the ISR has (and decided, at read_committed).
                if replica_id >= 0:
                    readable_end = plog.log_end_offset
                else:
                    readable_end = last_stable if read_committed else high_watermark
                throttled = (
                    replica_id >= 0 and quota is not None and quota.throttles_leader(partition, replica_id)
                )
                if (
                    fp.fetch_offset < readable_end
                    and remaining > 0
                    and not (throttled and quota.leader.exceeded())
                ):
                    records = plog.read(
                        fp.fetch_offset,
                        min(fp.partition_max_bytes, remaining),
                        readable_end,
                        min_one_batch=total == 0,
                    )
                    remaining -= len(records)
                    total += len(records)
                    broker.metrics.record_fetch(name, len(records))
                    if throttled:
                        quota.leader.record(len(records))
                aborted = None
                if read_committed and replica_id < 0:
                    aborted = tuple(
                        make(types.AbortedTransaction, producer_id=txn.producer_id, first_offset=txn.first_offset)
                        for txn in plog.aborted_transactions(fp.fetch_offset, _end_offset(records))
                    ) if records else ()  # fmt: skip
                watched.append(partition)
                parts.append(make(
                    types.PartitionData, partition_index=fp.partition, error_code=ErrorCode.none,
                    high_watermark=high_watermark, last_stable_offset=last_stable,
                    log_start_offset=plog.log_start_offset, aborted_transactions=aborted,
                    preferred_read_replica=-1, records=records,
                ))  # fmt: skip
            except KafkaError as exc:
                had_error = True
                parts.append(make(
                    types.PartitionData, partition_index=fp.partition, error_code=exc.error_code,
                    high_watermark=-1, last_stable_offset=-1, log_start_offset=-1,
                    aborted_transactions=None, preferred_read_replica=-1, records=b"",
                ))  # fmt: skip
        topic_responses.append(
            make(types.FetchableTopicResponse, topic=name, topic_id=topic_id, partitions=tuple(parts))
        )
    response = make(
        types.FetchResponse, throttle_time=_ZERO, error_code=ErrorCode.none, session_id=0,
        responses=tuple(topic_responses),
    )  # fmt: skip
    return response, total, watched, had_error


def _end_offset(records: bytes) -> int:
    """The offset after the last batch of `records` (whole batches, as reads return them): the upper bound of
    the aborted transactions a read_committed fetch lists (Kafka bounds it by the offset index, a little past)."""
    position, end, size = 0, -1, len(records)
    unpack_base, unpack_delta = _BASE_AND_LENGTH.unpack_from, _LAST_OFFSET_DELTA.unpack_from
    while position + 61 <= size:
        base_offset, length = unpack_base(records, position)
        end = base_offset + unpack_delta(records, position + 23)[0] + 1
        position += 12 + length
    return end
