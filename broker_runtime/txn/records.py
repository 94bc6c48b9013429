"""The records of `__transaction_state`, byte for byte as Kafka writes them.

One record per transactional id, keyed by it; the latest value is the transaction's state, a null value (a
tombstone) removes an expired transactional id. Layouts (Kafka's
transaction-coordinator/src/main/resources/common/message/TransactionLog{Key,Value}.json):

    TransactionLogKey   version int16 = 0, transactionalId string
    TransactionLogValue version int16 (0, or 1 = flexible), producerId int64, producerEpoch int16,
                        transactionTimeoutMs int32, transactionStatus int8,
                        transactionPartitions [topic string, partitionIds [int32]] (nullable; null when Empty),
                        transactionLastUpdateTimestampMs int64, transactionStartTimestampMs int64

Version 0 uses classic encodings (int16-length strings, int32-length arrays); version 1 compact ones (unsigned
varint length+1) and a tagged-field section closing every struct. Like Kafka 3.9 without the
`transaction.version` feature, we write version 0 and read both.

The transactional id to partition mapping is Kafka's: `Utils.abs(transactionalId.hashCode) % partitions`.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker_runtime.coordinator.record_codec import RecordFormatError, RecordReader, RecordWriter
from broker_runtime.group.records import partition_for
from broker_runtime.txn.state import TransactionState

TRANSACTION_STATE_TOPIC = "__transaction_state"

KEY_VERSION = 0
VALUE_WRITE_VERSION = 0
MAX_VALUE_VERSION = 1


@dataclass(frozen=True, slots=True)
class TransactionKey:
    transactional_id: str


@dataclass(frozen=True, slots=True)
class UnknownKey:
    """A key version this broker does not know (Kafka skips these at load)."""

    version: int


@dataclass(frozen=True, slots=True)
class TransactionValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TransactionState
    # (topic, partition) pairs, sorted; empty when the transaction holds none.
    partitions: tuple[tuple[str, int], ...]
    last_update_ms: int
    start_ms: int


def encode_key(transactional_id: str) -> bytes:
    w = RecordWriter()
    w.int16(KEY_VERSION)
    w.string(transactional_id)
    return bytes(w.out)


def decode_key(data: bytes | memoryview) -> TransactionKey | UnknownKey:
    r = RecordReader(data)
    version = r.int16()
    if version != KEY_VERSION:
        return UnknownKey(version)
    return TransactionKey(r.string())


def encode_value(value: TransactionValue, version: int = VALUE_WRITE_VERSION) -> bytes:
    if not 0 <= version <= MAX_VALUE_VERSION:
        raise RecordFormatError(f"TransactionLogValue has no version {version}")
    if value.state is TransactionState.EMPTY and value.partitions:
        raise RecordFormatError("an Empty transaction holds no partitions")
    w = RecordWriter(flexible=version >= 1)
    w.int16(version)
    w.int64(value.producer_id)
    w.int16(value.producer_epoch)
    w.int32(value.timeout_ms)
    w.int8(value.state.id)
    if value.state is TransactionState.EMPTY:
        w.array_length(-1)  # Kafka writes null partitions for Empty
    else:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in value.partitions:
            by_topic.setdefault(topic, []).append(partition)
        w.array_length(len(by_topic))
        for topic, partitions in by_topic.items():
            w.string(topic)
            w.array_length(len(partitions))
            for partition in partitions:
                w.int32(partition)
            w.no_tagged_fields()
    w.int64(value.last_update_ms)
    w.int64(value.start_ms)
    w.no_tagged_fields()
    return bytes(w.out)


def decode_value(data: bytes | memoryview) -> TransactionValue:
    r = RecordReader(data)
    version = r.int16()
    if not 0 <= version <= MAX_VALUE_VERSION:
        raise RecordFormatError(f"unknown TransactionLogValue version {version}")
    r.flexible = version >= 1
    producer_id = r.int64()
    producer_epoch = r.int16()
    timeout_ms = r.int32()
    status = r.int8()
    state = TransactionState.from_id(status)
    if state is None:
        raise RecordFormatError(f"unknown transaction status {status}")
    partitions: list[tuple[str, int]] = []
    topics = r.nullable_array_length()
    for _ in range(max(topics, 0)):
        topic = r.string()
        count = r.array_length()
        partitions.extend((topic, r.int32()) for _ in range(count))
        r.skip_tagged_fields()
    last_update_ms = r.int64()
    start_ms = r.int64()
    r.skip_tagged_fields()
    # Kafka ignores the partitions of an Empty transaction when it reads one.
    held = () if state is TransactionState.EMPTY else tuple(sorted(set(partitions)))
    return TransactionValue(producer_id, producer_epoch, timeout_ms, state, held, last_update_ms, start_ms)


def transaction_partition(transactional_id: str, num_partitions: int) -> int:
    """The `__transaction_state` partition (and so the coordinator) of a transactional id."""
    return partition_for(transactional_id, num_partitions)
