"""Writing transaction markers on the partitions this broker leads (contract C2; Kafka's
KafkaApis.handleWriteTxnMarkersRequest and appendRecords with AppendOrigin.COORDINATOR).

`write_txn_markers(broker, markers)` appends, for every marker and partition, the COMMIT or ABORT control batch
as leader with acks=-1 semantics (min.insync.replicas checked before, the high watermark awaited after, up to
request.timeout.ms). Producer state checks it first: an older producer epoch is INVALID_PRODUCER_EPOCH, an older
coordinator epoch than the partition last saw for the producer TRANSACTION_COORDINATOR_FENCED. The append ends
the producer's transaction, writes the `.txnindex` entry of an abort and lets the last stable offset move once
the high watermark passes the marker (partition_log.py).

`__consumer_offsets` partitions are the group coordinator's: their marker goes through its
`complete_transaction` (contract C1), which writes the marker with its own writer and makes the pending
transactional offsets visible or drops them.

The WriteTxnMarkers handler (handlers/txn_markers.py) maps the wire onto this; the transaction coordinator calls
it directly for partitions this broker leads.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from broker_runtime.errors import KafkaError
from broker_runtime.txn.control import marker_batch

if TYPE_CHECKING:
    from broker_runtime.broker import Broker

log = logging.getLogger(__name__)

GROUP_METADATA_TOPIC = "__consumer_offsets"
# What the group coordinator may answer that the transaction coordinator does not expect: it retries on
# NOT_LEADER_OR_FOLLOWER (Kafka's handleWriteTxnMarkersRequest translates these the same way).
_COORDINATOR_NOT_READY = (
    ErrorCode.coordinator_not_available,
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.not_coordinator,
)


@dataclass(frozen=True)
class TxnMarker:
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    committed: bool
    partitions: list[tuple[str, int]]


async def write_txn_markers(broker: Broker, markers: list[TxnMarker]) -> dict[tuple[str, int], ErrorCode]:
    """Write every marker on its partitions; the error of each (topic, partition). Markers of one call name
    disjoint partitions (the WriteTxnMarkers handler calls once per marker)."""
    jobs: list[tuple[tuple[str, int], asyncio.Future | asyncio.Task]] = []
    for marker in markers:
        for topic, index in marker.partitions:
            jobs.append(((topic, index), asyncio.ensure_future(_write_one(broker, marker, topic, index))))
    results: dict[tuple[str, int], ErrorCode] = {}
    for key, job in jobs:
        results[key] = await job
    return results


async def _write_one(broker: Broker, marker: TxnMarker, topic: str, index: int) -> ErrorCode:
    try:
        if topic == GROUP_METADATA_TOPIC:
            return await _complete_group_transaction(broker, marker, index)
        await _append_marker(broker, marker, topic, index)
        return ErrorCode.none
    except KafkaError as error:
        if error.error_code not in (ErrorCode.not_leader_or_follower, ErrorCode.unknown_topic_or_partition):
            log.info("marker of producer %d for %s-%d: %s %s", marker.producer_id, topic, index,
                     error.error_code.name, error.message or "")  # fmt: skip
        return error.error_code


async def _append_marker(broker: Broker, marker: TxnMarker, topic: str, index: int) -> None:
    """Append the control batch as leader (acks=-1), after any append to the partition still being validated
    off the event loop, so that the marker follows the data produced before it."""
    replica_manager = broker.replica_manager
    info = broker.metadata.topics().get(topic)
    if info is None or index not in info.partitions:
        raise KafkaError(ErrorCode.unknown_topic_or_partition, f"{topic}-{index} does not exist")
    partition = replica_manager.get_partition(topic, index)
    if partition is None:
        raise replica_manager.not_hosted_error(topic, index, exists=True)
    tail = partition.append_tail
    if tail is not None and not tail.done():
        await asyncio.wait((tail,))
    batch, header = marker_batch(
        marker.producer_id, marker.producer_epoch, marker.coordinator_epoch, marker.committed,
        broker.clock.time_ms(),
    )  # fmt: skip
    await replica_manager.append(
        topic, index, batch, header, acks=-1, timeout_ms=broker.config["request.timeout.ms"]
    )


async def _complete_group_transaction(broker: Broker, marker: TxnMarker, index: int) -> ErrorCode:
    """C1: the group coordinator writes the marker to its `__consumer_offsets` partition and applies it to the
    pending transactional offsets. A group runtime without `complete_transaction` has no transactional offsets
    to apply, so the marker is appended like any other."""
    runtime = broker.group_coordinator
    complete = getattr(runtime, "complete_transaction", None)
    if complete is None:
        await _append_marker(broker, marker, GROUP_METADATA_TOPIC, index)
        return ErrorCode.none
    error = await complete(
        index, marker.producer_id, marker.producer_epoch, marker.coordinator_epoch, marker.committed
    )
    return ErrorCode.not_leader_or_follower if error in _COORDINATOR_NOT_READY else error
