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

import struct
from dataclasses import dataclass

from broker_runtime.group.records import partition_for
from broker_runtime.protocol.varint import VarintError, read_uvarint, write_uvarint
from broker_runtime.txn.state import TransactionState

TRANSACTION_STATE_TOPIC = "__transaction_state"

KEY_VERSION = 0
VALUE_WRITE_VERSION = 0
MAX_VALUE_VERSION = 1


class RecordFormatError(ValueError):
    """A key or value in `__transaction_state` that does not parse."""


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


_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class _Reader:
    __slots__ = ("buf", "flexible", "pos")

    def __init__(self, buf: bytes | memoryview) -> None:
        self.buf = buf
        self.pos = 0
        self.flexible = False

    def fixed(self, fmt: struct.Struct) -> int:
        if self.pos + fmt.size > len(self.buf):
            raise RecordFormatError(f"truncated: need {fmt.size} bytes at {self.pos}")
        (value,) = fmt.unpack_from(self.buf, self.pos)
        self.pos += fmt.size
        return value

    def uvarint(self) -> int:
        try:
            value, self.pos = read_uvarint(self.buf, self.pos)
        except VarintError as exc:
            raise RecordFormatError(str(exc)) from None
        return value

    def length(self, classic: struct.Struct) -> int:
        """A string or array length; -1 for null."""
        return self.uvarint() - 1 if self.flexible else self.fixed(classic)

    def string(self) -> str:
        n = self.length(_I16)
        if n < 0:
            raise RecordFormatError("null where a non-nullable string is required")
        end = self.pos + n
        if end > len(self.buf):
            raise RecordFormatError(f"truncated: string of {n} bytes at {self.pos}")
        try:
            text = bytes(self.buf[self.pos : end]).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RecordFormatError(f"string is not UTF-8: {exc}") from None
        self.pos = end
        return text

    def skip_tagged_fields(self) -> None:
        if not self.flexible:
            return
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            size = self.uvarint()
            if self.pos + size > len(self.buf):
                raise RecordFormatError("truncated tagged field")
            self.pos += size


class _Writer:
    __slots__ = ("flexible", "out")

    def __init__(self, flexible: bool) -> None:
        self.out = bytearray()
        self.flexible = flexible

    def fixed(self, fmt: struct.Struct, value: int) -> None:
        self.out += fmt.pack(value)

    def length(self, classic: struct.Struct, n: int) -> None:
        if self.flexible:
            write_uvarint(self.out, n + 1)
        else:
            self.out += classic.pack(n)

    def string(self, text: str) -> None:
        data = text.encode("utf-8")
        if len(data) > 0x7FFF and not self.flexible:
            raise RecordFormatError(f"string of {len(data)} bytes does not fit an int16 length")
        self.length(_I16, len(data))
        self.out += data

    def no_tagged_fields(self) -> None:
        if self.flexible:
            self.out.append(0)


def encode_key(transactional_id: str) -> bytes:
    w = _Writer(flexible=False)
    w.fixed(_I16, KEY_VERSION)
    w.string(transactional_id)
    return bytes(w.out)


def decode_key(data: bytes | memoryview) -> TransactionKey | UnknownKey:
    r = _Reader(data)
    version = r.fixed(_I16)
    if version != KEY_VERSION:
        return UnknownKey(version)
    return TransactionKey(r.string())


def encode_value(value: TransactionValue, version: int = VALUE_WRITE_VERSION) -> bytes:
    if not 0 <= version <= MAX_VALUE_VERSION:
        raise RecordFormatError(f"TransactionLogValue has no version {version}")
    if value.state is TransactionState.EMPTY and value.partitions:
        raise RecordFormatError("an Empty transaction holds no partitions")
    w = _Writer(flexible=version >= 1)
    w.fixed(_I16, version)
    w.fixed(_I64, value.producer_id)
    w.fixed(_I16, value.producer_epoch)
    w.fixed(_I32, value.timeout_ms)
    w.fixed(_I8, value.state.id)
    if value.state is TransactionState.EMPTY:
        w.length(_I32, -1)  # Kafka writes null partitions for Empty
    else:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in value.partitions:
            by_topic.setdefault(topic, []).append(partition)
        w.length(_I32, len(by_topic))
        for topic, partitions in by_topic.items():
            w.string(topic)
            w.length(_I32, len(partitions))
            for partition in partitions:
                w.fixed(_I32, partition)
            w.no_tagged_fields()
    w.fixed(_I64, value.last_update_ms)
    w.fixed(_I64, value.start_ms)
    w.no_tagged_fields()
    return bytes(w.out)


def decode_value(data: bytes | memoryview) -> TransactionValue:
    r = _Reader(data)
    version = r.fixed(_I16)
    if not 0 <= version <= MAX_VALUE_VERSION:
        raise RecordFormatError(f"unknown TransactionLogValue version {version}")
    r.flexible = version >= 1
    producer_id = r.fixed(_I64)
    producer_epoch = r.fixed(_I16)
    timeout_ms = r.fixed(_I32)
    status = r.fixed(_I8)
    state = TransactionState.from_id(status)
    if state is None:
        raise RecordFormatError(f"unknown transaction status {status}")
    partitions: list[tuple[str, int]] = []
    topics = r.length(_I32)
    for _ in range(max(topics, 0)):
        topic = r.string()
        count = r.length(_I32)
        if count < 0:
            raise RecordFormatError("null partition list")
        partitions.extend((topic, r.fixed(_I32)) for _ in range(count))
        r.skip_tagged_fields()
    last_update_ms = r.fixed(_I64)
    start_ms = r.fixed(_I64)
    r.skip_tagged_fields()
    # Kafka ignores the partitions of an Empty transaction when it reads one.
    held = () if state is TransactionState.EMPTY else tuple(sorted(set(partitions)))
    return TransactionValue(producer_id, producer_epoch, timeout_ms, state, held, last_update_ms, start_ms)


def transaction_partition(transactional_id: str, num_partitions: int) -> int:
    """The `__transaction_state` partition (and so the coordinator) of a transactional id."""
    return partition_for(transactional_id, num_partitions)
