"""Producer state of one partition: what the idempotent producer's sequence checks need.

Theory of operation (Kafka's ProducerStateManager / ProducerAppendInfo / ProducerStateEntry). Per producer id we
keep its current epoch and the metadata of its last 5 batches (first/last sequence, first/last offset,
timestamp). For a client append, in this order:

1. A batch with the producer's current epoch and exactly the sequence range of one of those 5 is a retry: the
   caller answers with that batch's original offsets and writes nothing (`check` returns the metadata).
2. An epoch lower than the current one -> INVALID_PRODUCER_EPOCH.
3. A new (higher) epoch must start at sequence 0, unless no epoch is known for the producer.
4. The same epoch must continue at last sequence + 1 (2**31 - 1 wraps to 0), unless the producer has no known
   epoch (its state was lost to retention, DeleteRecords or expiry: Kafka then accepts any sequence; it no
   longer answers UNKNOWN_PRODUCER_ID on produce since KIP-360 / 2.5). Otherwise OUT_OF_ORDER_SEQUENCE_NUMBER.

Appends from replication and replays of the log at load are not validated, only recorded (`update`).

Transactions (Kafka's ProducerAppendInfo.appendDataBatch / appendEndTxnMarker). A transactional batch from a
producer with no open transaction opens one at its first offset; a non-transactional batch while one is open is
INVALID_TXN_STATE. A marker (control batch) from the coordinator is checked first (`check_marker`: an older
producer epoch is INVALID_PRODUCER_EPOCH, an older coordinator epoch than the partition last saw from this
producer TRANSACTION_COORDINATOR_FENCED) and then ends the open transaction (`update_marker` returns it as a
`CompletedTxn`). A completed transaction stays "unreplicated" until the high watermark passes its marker; the
first unstable offset is the smallest first offset over open and unreplicated transactions, and the last stable
offset of the partition is min(high watermark, first unstable offset) (`first_unstable_offset`).

Transaction verification (KIP-890 part 1, Kafka's VerificationStateEntry / VerificationGuard). Before a leader
appends the first transactional batch of a producer that has no open transaction here, it asks the transaction
coordinator whether the partition is in the producer's transaction. `start_verification` hands out a guard unique
to that attempt (none when a transaction is already open: its first append was verified); the append must then
present that very guard (`check_verified`), or it is INVALID_TXN_STATE. Any transactional batch or marker of the
producer clears the entry, so a verification answered after a marker ended the transaction cannot let a stale
batch open a new one (the ABA case). The entry also keeps the lowest sequence seen while verifying: a higher one
is refused (OUT_OF_ORDER_SEQUENCE_NUMBER) until the lowest is written, so a retried earlier batch is not overtaken.
Entries are never snapshotted and expire with idle producers.

Snapshot format: Kafka's producer snapshot v1, byte for byte:
    version int16 (=1) | crc uint32 (CRC32C of everything after it) | count int32 | entries
    entry = producer_id int64 | epoch int16 | last_sequence int32 | last_offset int64 | offset_delta int32 |
            timestamp int64 | coordinator_epoch int32 | current_txn_first_offset int64 (-1 = none)
Kafka writes one entry per producer (its last batch). We write one entry per retained batch, oldest first: Kafka
loading our file keeps the last entry per producer id (the newest batch), and we get all 5 back.

Pure: no I/O, no asyncio; the partition log reads and writes the snapshot bytes.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from broker_runtime.errors import KafkaError

try:
    from crc32c import crc32c
except ImportError:  # pragma: no cover
    crc32c = None

NUM_BATCHES_TO_RETAIN = 5
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
SEQUENCE_MODULUS = 2**31
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000  # producer.id.expiration.ms

SNAPSHOT_VERSION = 1
_SNAPSHOT_HEAD = struct.Struct(">hI")
_COUNT = struct.Struct(">i")
_ENTRY = struct.Struct(">qhiqiqiq")


class CorruptSnapshotError(Exception):
    pass


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction ended by a marker at `last_offset` (Kafka's CompletedTxn)."""

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


@dataclass(slots=True)
class ProducerStateEntry:
    producer_id: int
    epoch: int = NO_PRODUCER_EPOCH
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    current_txn_first_offset: int | None = None

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.epoch:
            return None
        for batch in self.batches:
            if batch.first_seq == first_seq and batch.last_seq == last_seq:
                return batch
        return None

    def add_batch(self, epoch: int, batch: BatchMetadata) -> None:
        if epoch != self.epoch:  # a new epoch forgets the old epoch's batches
            self.batches.clear()
            self.epoch = epoch
        self.batches.append(batch)
        self.last_timestamp = batch.timestamp


class VerificationGuard:
    """One verification attempt; only its identity matters."""

    __slots__ = ()


# Kafka's VerificationGuard.SENTINEL: the guard of an append that was not verified; it verifies nothing.
NO_GUARD = VerificationGuard()


@dataclass(slots=True)
class VerificationStateEntry:
    timestamp: int
    lowest_sequence: int
    epoch: int
    guard: VerificationGuard = field(default_factory=VerificationGuard)

    def update_lowest_sequence(self, sequence: int, epoch: int) -> None:
        """A lower sequence of the same epoch lowers the bar; a higher epoch starts it again."""
        if epoch == self.epoch and sequence < self.lowest_sequence:
            self.lowest_sequence = sequence
        if epoch > self.epoch:
            self.epoch = epoch
            self.lowest_sequence = sequence


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == SEQUENCE_MODULUS - 1)


class ProducerStateManager:
    def __init__(self) -> None:
        self.producers: dict[int, ProducerStateEntry] = {}
        self.map_end_offset = 0  # state reflects every batch below this offset
        # Open transactions, first offset -> producer id. Transactions open in offset order, so the dict's order
        # is the offsets' order and its first key is the smallest.
        self.ongoing: dict[int, int] = {}
        # Transactions whose marker may be above the high watermark: first offset -> (producer id, marker offset).
        self.unreplicated: dict[int, tuple[int, int]] = {}
        self.verifications: dict[int, VerificationStateEntry] = {}

    # --- transaction verification ------------------------------------------------------------------------

    def has_ongoing_transaction(self, producer_id: int) -> bool:
        entry = self.producers.get(producer_id)
        return entry is not None and entry.current_txn_first_offset is not None

    def start_verification(
        self, producer_id: int, sequence: int, epoch: int, now_ms: int
    ) -> VerificationGuard:
        """The guard a transactional append must present; NO_GUARD if the producer's transaction is already
        open here (nothing to verify). Kafka's maybeStartTransactionVerification."""
        if self.has_ongoing_transaction(producer_id):
            return NO_GUARD
        entry = self.verifications.get(producer_id)
        if entry is None:
            entry = self.verifications[producer_id] = VerificationStateEntry(now_ms, sequence, epoch)
        entry.update_lowest_sequence(sequence, epoch)
        return entry.guard

    def check_verified(self, producer_id: int, guard: VerificationGuard, offset_hint: int = -1) -> None:
        """A transactional data batch with verification on: its transaction is open here, or `guard` is the
        producer's current verification (Kafka's batchMissingRequiredVerification)."""
        if self.has_ongoing_transaction(producer_id):
            return
        entry = self.verifications.get(producer_id)
        if guard is NO_GUARD or entry is None or entry.guard is not guard:
            raise KafkaError(
                ErrorCode.invalid_txn_state,
                f"record of producer {producer_id} at offset {offset_hint} was not part of an ongoing transaction",
            )

    # --- client appends ----------------------------------------------------------------------------------

    def check(self, producer_id: int, epoch: int, first_seq: int, last_seq: int, *, is_transactional: bool = False,
              offset_hint: int = -1) -> BatchMetadata | None:  # fmt: skip
        """Validate a client batch before it is written. Returns the original batch if this one is a retry
        of it; raises KafkaError if it must be rejected; returns None if it may be appended."""
        entry = self.producers.get(producer_id)
        if entry is None:
            if is_transactional and self.verifications:
                self._check_lowest_sequence(producer_id, first_seq, offset_hint)
            return None  # no state: any sequence is accepted (see module docstring)
        duplicate = entry.find_duplicate(epoch, first_seq, last_seq)
        if duplicate is not None:
            return duplicate
        where = f"producer {producer_id} at offset {offset_hint}"
        _fence_epoch(entry, epoch, where)
        if is_transactional and self.verifications:
            self._check_lowest_sequence(producer_id, first_seq, offset_hint)
        if epoch != entry.epoch:
            if first_seq != 0 and entry.epoch != NO_PRODUCER_EPOCH:
                raise KafkaError(
                    ErrorCode.out_of_order_sequence_number,
                    f"invalid sequence number for new epoch of {where}: {epoch} (request epoch), {first_seq} "
                    f"(seq. number), {entry.epoch} (current producer epoch)",
                )
        elif entry.epoch != NO_PRODUCER_EPOCH and not _in_sequence(entry.last_seq, first_seq):
            raise KafkaError(
                ErrorCode.out_of_order_sequence_number,
                f"out of order sequence number for {where}: {first_seq} (incoming seq. number), "
                f"{entry.last_seq} (current end sequence number)",
            )
        _refuse_plain_write_in_txn(entry, is_transactional, where)
        return None

    def _check_lowest_sequence(self, producer_id: int, first_seq: int, offset_hint: int) -> None:
        verifying = self.verifications.get(producer_id)
        if verifying is not None and first_seq > verifying.lowest_sequence:
            raise KafkaError(
                ErrorCode.out_of_order_sequence_number,
                f"out of order sequence number for producer {producer_id} at offset {offset_hint}: {first_seq} "
                f"(incoming seq. number), {verifying.lowest_sequence} (earliest seen sequence)",
            )

    def check_epoch(
        self, producer_id: int, epoch: int, is_transactional: bool, offset_hint: int = -1
    ) -> None:
        """Validate a coordinator's producer batch (Kafka's AppendOrigin.COORDINATOR: transactional offset
        commits): the epoch is fenced, sequences are not checked."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        _fence_epoch(entry, epoch, f"producer {producer_id} at offset {offset_hint}")
        _refuse_plain_write_in_txn(entry, is_transactional, f"producer {producer_id}")

    # --- recording ---------------------------------------------------------------------------------------

    def update(self, producer_id: int, epoch: int, first_seq: int, last_seq: int, first_offset: int,
               last_offset: int, timestamp: int, *, is_transactional: bool = False) -> None:  # fmt: skip
        """Record a data batch that is now in the log (after `check`, from replication, or from a replay)."""
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerStateEntry(producer_id)
        entry.add_batch(epoch, BatchMetadata(first_seq, last_seq, first_offset, last_offset, timestamp))
        if is_transactional:
            if self.verifications:
                self.verifications.pop(producer_id, None)  # the open transaction takes over
            if entry.current_txn_first_offset is None:
                entry.current_txn_first_offset = first_offset
                self.ongoing[first_offset] = producer_id
        self.map_end_offset = max(self.map_end_offset, last_offset + 1)

    def check_marker(self, producer_id: int, epoch: int, coordinator_epoch: int) -> None:
        """Validate a marker the transaction coordinator asks to write (Kafka's appendEndTxnMarker checks)."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if epoch < entry.epoch:
            raise KafkaError(
                ErrorCode.invalid_producer_epoch,
                f"marker epoch {epoch} of producer {producer_id} is older than its last epoch {entry.epoch}",
            )
        if entry.coordinator_epoch > coordinator_epoch:
            raise KafkaError(
                ErrorCode.transaction_coordinator_fenced,
                f"coordinator epoch {coordinator_epoch} for producer {producer_id} is older than "
                f"{entry.coordinator_epoch}, the partition's last",
            )

    def update_marker(self, producer_id: int, epoch: int, offset: int, timestamp: int,
                      coordinator_epoch: int = -1, *, aborted: bool = False) -> CompletedTxn | None:  # fmt: skip
        """Record a transaction marker (control batch) at `offset`: the open transaction, if any, has ended and
        is returned; the caller writes the `.txnindex` entry of an aborted one, then calls `complete_txn`."""
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerStateEntry(producer_id)
        if self.verifications:
            self.verifications.pop(
                producer_id, None
            )  # a verification from before the marker verifies nothing
        if epoch != entry.epoch:
            entry.batches.clear()
            entry.epoch = epoch
        completed = None
        if entry.current_txn_first_offset is not None:
            completed = CompletedTxn(producer_id, entry.current_txn_first_offset, offset, aborted)
        entry.current_txn_first_offset = None
        entry.last_timestamp = timestamp
        if coordinator_epoch >= 0:
            entry.coordinator_epoch = coordinator_epoch
        self.map_end_offset = max(self.map_end_offset, offset + 1)
        return completed

    def last_stable_offset_of(self, completed: CompletedTxn) -> int:
        """The LSO recorded with an aborted transaction in `.txnindex`: the first offset of the earliest other
        open transaction, else the offset after the marker (Kafka's lastStableOffset(CompletedTxn))."""
        for first_offset, producer_id in self.ongoing.items():
            if producer_id != completed.producer_id:
                return first_offset
        return completed.last_offset + 1

    def complete_txn(self, completed: CompletedTxn) -> None:
        """The transaction is decided; it stays unstable until the high watermark passes its marker."""
        self.ongoing.pop(completed.first_offset, None)
        self.unreplicated[completed.first_offset] = (completed.producer_id, completed.last_offset)

    def first_unstable_offset(self, high_watermark: int) -> int | None:
        """The first offset of the earliest transaction that is open, or decided by a marker the high watermark
        has not passed; None when there is none (Kafka's firstUnstableOffset after onHighWatermarkUpdated)."""
        if self.unreplicated:
            replicated = [f for f, (_, marker) in self.unreplicated.items() if marker < high_watermark]
            for first_offset in replicated:
                del self.unreplicated[first_offset]
        first = next(iter(self.ongoing), None)
        if self.unreplicated:
            lowest = min(self.unreplicated)
            first = lowest if first is None else min(first, lowest)
        return first

    def open_transactions(self) -> int:
        return len(self.ongoing)

    def remove_expired(self, now_ms: int, expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS) -> int:
        """Forget producers idle for longer than producer.id.expiration.ms with no open transaction."""
        expired = [
            pid for pid, e in self.producers.items()
            if e.current_txn_first_offset is None and now_ms - e.last_timestamp >= expiration_ms
        ]  # fmt: skip
        for pid in expired:
            del self.producers[pid]
        # Verifications that never led to an append (Kafka expires them on the same schedule).
        stale = [pid for pid, v in self.verifications.items() if now_ms - v.timestamp >= expiration_ms]
        for pid in stale:
            del self.verifications[pid]
        return len(expired)

    def clear(self) -> None:
        self.producers.clear()
        self.ongoing.clear()
        self.unreplicated.clear()
        self.verifications.clear()
        self.map_end_offset = 0

    # --- snapshots ---------------------------------------------------------------------------------------

    def to_snapshot(self) -> bytes:
        entries = bytearray()
        count = 0
        for pid in sorted(self.producers):
            e = self.producers[pid]
            txn = -1 if e.current_txn_first_offset is None else e.current_txn_first_offset
            if not e.batches:
                entries += _ENTRY.pack(
                    pid, e.epoch, NO_SEQUENCE, -1, 0, e.last_timestamp, e.coordinator_epoch, txn
                )
                count += 1
            for b in e.batches:
                entries += _ENTRY.pack(
                    pid, e.epoch, b.last_seq, b.last_offset, b.last_offset - b.first_offset, b.timestamp,
                    e.coordinator_epoch, txn,
                )  # fmt: skip
                count += 1
        body = _COUNT.pack(count) + bytes(entries)
        return _SNAPSHOT_HEAD.pack(SNAPSHOT_VERSION, crc32c(body)) + body

    def load_snapshot(self, data: bytes, end_offset: int) -> None:
        """Replace the state with a snapshot taken when the log ended at `end_offset`."""
        self.producers = {e.producer_id: e for e in parse_snapshot(data)}
        self.ongoing = {
            first: pid
            for first, pid in sorted(
                (e.current_txn_first_offset, e.producer_id)
                for e in self.producers.values()
                if e.current_txn_first_offset is not None
            )
        }
        self.unreplicated = {}
        self.map_end_offset = end_offset


def parse_snapshot(data: bytes) -> Iterable[ProducerStateEntry]:
    if len(data) < _SNAPSHOT_HEAD.size + _COUNT.size:
        raise CorruptSnapshotError("snapshot shorter than its header")
    version, crc = _SNAPSHOT_HEAD.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"unsupported snapshot version {version}")
    body = memoryview(data)[_SNAPSHOT_HEAD.size :]
    if crc32c(body) != crc:
        raise CorruptSnapshotError("snapshot CRC mismatch")
    (count,) = _COUNT.unpack_from(body, 0)
    if count < 0 or _COUNT.size + count * _ENTRY.size != len(body):
        raise CorruptSnapshotError(f"snapshot says {count} entries but holds {len(body)} bytes")
    entries: dict[int, ProducerStateEntry] = {}
    for n in range(count):
        pid, epoch, last_seq, last_offset, delta, timestamp, coordinator_epoch, txn = _ENTRY.unpack_from(
            body, _COUNT.size + n * _ENTRY.size
        )
        entry = entries.get(pid)
        if entry is None:
            entry = entries[pid] = ProducerStateEntry(pid, epoch)
        entry.epoch = epoch
        entry.coordinator_epoch = coordinator_epoch
        entry.last_timestamp = timestamp
        entry.current_txn_first_offset = None if txn < 0 else txn
        if last_offset >= 0:
            first_seq = (last_seq - delta) % SEQUENCE_MODULUS if last_seq >= 0 else NO_SEQUENCE
            entry.batches.append(
                BatchMetadata(first_seq, last_seq, last_offset - delta, last_offset, timestamp)
            )
    return entries.values()


def _fence_epoch(entry: ProducerStateEntry, epoch: int, where: str) -> None:
    if epoch < entry.epoch:
        raise KafkaError(
            ErrorCode.invalid_producer_epoch,
            f"epoch of {where} is {epoch}, which is smaller than the last seen epoch {entry.epoch}",
        )


def _refuse_plain_write_in_txn(entry: ProducerStateEntry, is_transactional: bool, where: str) -> None:
    if entry.current_txn_first_offset is not None and not is_transactional:
        raise KafkaError(
            ErrorCode.invalid_txn_state,
            f"expected a transactional write from {where}: a transaction is ongoing",
        )
