"""The transaction coordinator for one `__transaction_state` partition: a replayable, synchronous shard.

Theory of operation
-------------------
Each partition of `__transaction_state` owns the transactional ids that hash to it (`records.partition_for`);
the broker leading it runs one `TransactionCoordinatorShard`, created with the partition's leader epoch as its
coordinator epoch (what markers carry, so that partition leaders can refuse a deposed coordinator). The shard
does no I/O and never sleeps:

- **Handlers** (`init_producer_id`, `add_partitions`, `verify_partitions`, `end_transaction`, `describe`,
  `list_transactions`) answer at once or hand back a `Reply` completed when their record is written.
- **Appends**: a handler that changes a transaction does not change it. It prepares the transition (checked
  against `state.VALID_PREVIOUS`), marks the transaction's pending state (so racing requests get
  CONCURRENT_TRANSACTIONS), and queues an `Append` of one TransactionLogValue; the driver appends it, calls
  `replay()` for the record, then the continuation, which completes the transition's in-memory part (the last
  epoch, the pending state) and answers.
- **Replay** is the only code that sets what the log holds (producer id and epoch, timeout, state, partitions,
  timestamps), live and at load, so what a shard holds is what its log says.
- **Markers**: once PrepareCommit or PrepareAbort is written (or found at load), the shard queues a
  `MarkerJob`; the driver's marker sender writes the markers to every partition of the transaction and calls
  `markers_written()`, which writes CompleteCommit or CompleteAbort. Until then the transaction's pending state
  is that completion, so the producer's next request waits (CONCURRENT_TRANSACTIONS).
- **Timers** are data in a `TimerQueue`: the periodic abort of transactions open longer than their timeout
  (`transaction.abort.timed.out.transaction.cleanup.interval.ms`, comparing wall-clock timestamps as Kafka does),
  the periodic expiry of idle transactional ids (`transactional.id.expiration.ms`), and retries of completion
  records that could not be written.

The semantics are Kafka's TransactionCoordinator, TransactionStateManager and TransactionMetadata
(core/src/main/scala/kafka/coordinator/transaction, 3.9).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from broker_runtime.coordinator.shard import Append, Reply, ShardBase
from broker_runtime.coordinator.timers import Timer
from broker_runtime.errors import KafkaError
from broker_runtime.txn.records import (
    RecordFormatError,
    TransactionKey,
    TransactionValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from broker_runtime.txn.state import EXPIRATION_ALLOWED, TransactionState, transition

log = logging.getLogger(__name__)

S = TransactionState
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
SHORT_MAX = 32767
# The coordinator keeps the last epoch for itself, so that it can always fence a producer.
EPOCH_EXHAUSTED = SHORT_MAX - 1
# A completion record that could not be written (no ISR, a timeout) is tried again after this long.
COMPLETION_RETRY_MS = 100
# Expired ids are tombstoned in appends of at most this many key bytes (well under max.message.bytes); each
# record adds about this much framing.
MAX_TOMBSTONE_BYTES = 256 * 1024
TOMBSTONE_OVERHEAD = 16

TopicPartition = tuple[str, int]

# Timer kinds (first element of a timer key).
ABORT_TIMED_OUT = "abort-timed-out"  # (ABORT_TIMED_OUT,)
EXPIRE_IDS = "expire-transactional-ids"  # (EXPIRE_IDS,)
RETRY_COMPLETION = "retry-completion"  # (RETRY_COMPLETION, transactional_id), payload: MarkerJob

# EndTxn in a state with no transaction to end: (answer to a commit, answer to an abort), as Kafka 3.9's
# TransactionCoordinator.endTransaction (a retried EndTxn of a completed transaction succeeds).
_END_TXN_ANSWERS = {
    S.COMPLETE_COMMIT: (ErrorCode.none, ErrorCode.invalid_txn_state),
    S.COMPLETE_ABORT: (ErrorCode.invalid_txn_state, ErrorCode.none),
    S.PREPARE_COMMIT: (ErrorCode.concurrent_transactions, ErrorCode.invalid_txn_state),
    S.PREPARE_ABORT: (ErrorCode.invalid_txn_state, ErrorCode.concurrent_transactions),
    S.EMPTY: (ErrorCode.invalid_txn_state, ErrorCode.invalid_txn_state),
}


@dataclass(frozen=True, slots=True)
class TransactionCoordinatorConfig:
    """The broker settings the shard reads, with Kafka's defaults."""

    max_timeout_ms: int = 900_000  # transaction.max.timeout.ms
    transactional_id_expiration_ms: int = 604_800_000  # transactional.id.expiration.ms
    abort_timed_out_interval_ms: int = 10_000  # transaction.abort.timed.out.transaction.cleanup.interval.ms
    remove_expired_interval_ms: int = 3_600_000  # transaction.remove.expired.transaction.cleanup.interval.ms

    @classmethod
    def from_broker_config(cls, config) -> TransactionCoordinatorConfig:
        return cls(
            max_timeout_ms=config["transaction.max.timeout.ms"],
            transactional_id_expiration_ms=config["transactional.id.expiration.ms"],
            abort_timed_out_interval_ms=config["transaction.abort.timed.out.transaction.cleanup.interval.ms"],
            remove_expired_interval_ms=config["transaction.remove.expired.transaction.cleanup.interval.ms"],
        )


@dataclass(frozen=True, slots=True)
class MarkerJob:
    """Markers to write for a decided transaction: one control record per partition, then its completion."""

    transactional_id: str
    coordinator_epoch: int
    producer_id: int
    producer_epoch: int
    committed: bool
    partitions: frozenset[TopicPartition]


@dataclass(frozen=True, slots=True)
class InitProducerIdResult:
    error: ErrorCode
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    error: ErrorCode
    transactional_id: str
    state: str = ""
    timeout_ms: int = 0
    start_ms: int = -1
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    partitions: tuple[TopicPartition, ...] = ()


@dataclass(frozen=True, slots=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class _Transit:
    """A transition about to be written: Kafka's TxnTransitMetadata."""

    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    timeout_ms: int
    state: TransactionState
    partitions: frozenset[TopicPartition]
    start_ms: int
    last_update_ms: int

    def value(self) -> TransactionValue:
        return TransactionValue(
            self.producer_id, self.producer_epoch, self.timeout_ms, self.state, tuple(sorted(self.partitions)),
            self.last_update_ms, self.start_ms,
        )  # fmt: skip


@dataclass(slots=True)
class TransactionMetadata:
    transactional_id: str
    # --- what the log holds (set by replay) ---
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TransactionState
    partitions: set[TopicPartition] = field(default_factory=set)
    last_update_ms: int = -1
    start_ms: int = -1
    # --- in memory only ---
    last_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    pending_state: TransactionState | None = None
    # A fence whose record failed: the epoch was bumped in memory but never returned to anyone, so the next
    # fence reuses it rather than bumping again.
    has_failed_epoch_fence: bool = False

    @property
    def epoch_exhausted(self) -> bool:
        return self.producer_epoch >= EPOCH_EXHAUSTED

    def prepare(
        self,
        state: TransactionState,
        *,
        producer_id: int | None = None,
        producer_epoch: int | None = None,
        last_producer_epoch: int | None = None,
        timeout_ms: int | None = None,
        partitions: Iterable[TopicPartition] | None = None,
        start_ms: int | None = None,
        now_ms: int,
    ) -> _Transit:
        """Kafka's prepareTransitionTo: check the move, mark it pending, describe the record to write."""
        if self.pending_state is not None:
            raise RuntimeError(
                f"transactional id {self.transactional_id!r} prepares {state.display_name} while "
                f"{self.pending_state.display_name} is pending"
            )
        transition(self.transactional_id, self.state, state)
        self.pending_state = state
        return _Transit(
            producer_id=self.producer_id if producer_id is None else producer_id,
            last_producer_id=self.producer_id,
            producer_epoch=self.producer_epoch if producer_epoch is None else producer_epoch,
            last_producer_epoch=self.last_producer_epoch
            if last_producer_epoch is None
            else last_producer_epoch,
            timeout_ms=self.timeout_ms if timeout_ms is None else timeout_ms,
            state=state,
            partitions=frozenset(self.partitions if partitions is None else partitions),
            start_ms=self.start_ms if start_ms is None else start_ms,
            last_update_ms=now_ms,
        )


def _append_error(error: ErrorCode) -> ErrorCode:
    """Kafka's mapping of a failed `__transaction_state` append to what the client gets."""
    if error in (
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.not_enough_replicas,
        ErrorCode.not_enough_replicas_after_append,
        ErrorCode.request_timed_out,
    ):
        return ErrorCode.coordinator_not_available
    if error in (ErrorCode.not_leader_or_follower, ErrorCode.kafka_storage_error):
        return ErrorCode.not_coordinator
    if error in (ErrorCode.message_too_large, ErrorCode.record_list_too_large):
        return ErrorCode.unknown_server_error
    return error


class TransactionCoordinatorShard(ShardBase):
    def __init__(
        self, partition: int, coordinator_epoch: int, config: TransactionCoordinatorConfig, clock
    ) -> None:
        super().__init__(clock)
        self.partition = partition
        self.coordinator_epoch = coordinator_epoch
        self.config = config
        self.transactions: dict[str, TransactionMetadata] = {}
        self._marker_jobs: list[MarkerJob] = []
        # Called with each job as it is queued (the runtime's marker sender); without one, jobs wait in
        # take_marker_jobs().
        self.marker_listener: Callable[[MarkerJob], None] | None = None
        self._loading = True

    # ===================================================================================================
    # driver interface
    # ===================================================================================================

    @property
    def loading(self) -> bool:
        return self._loading

    def take_marker_jobs(self) -> list[MarkerJob]:
        jobs, self._marker_jobs = self._marker_jobs, []
        return jobs

    def replay(
        self,
        key: bytes,
        value: bytes | None,
        offset: int,
        *,
        producer_id: int = -1,
        transactional: bool = False,
    ) -> None:
        """Apply one record of the partition; the only code that sets what the log holds."""
        try:
            decoded = decode_key(key)
        except RecordFormatError as exc:
            log.error("%s: skipping record at %d with an unreadable key: %s", self._name, offset, exc)
            return
        if not isinstance(decoded, TransactionKey):
            log.warning("%s: skipping record at %d with unknown key version %d", self._name, offset,
                        decoded.version)  # fmt: skip
            return
        transactional_id = decoded.transactional_id
        if value is None:
            self.transactions.pop(transactional_id, None)
            return
        try:
            stored = decode_value(value)
        except RecordFormatError as exc:
            log.error("%s: skipping the record of %r at %d: %s", self._name, transactional_id, offset, exc)
            return
        metadata = self.transactions.get(transactional_id)
        if metadata is None:
            metadata = TransactionMetadata(
                transactional_id, stored.producer_id, stored.producer_epoch, stored.timeout_ms, stored.state
            )
            self.transactions[transactional_id] = metadata
        metadata.producer_id = stored.producer_id
        metadata.producer_epoch = stored.producer_epoch
        metadata.timeout_ms = stored.timeout_ms
        metadata.state = stored.state
        metadata.partitions = set(stored.partitions)
        metadata.last_update_ms = stored.last_update_ms
        metadata.start_ms = stored.start_ms

    def replay_end_txn(self, producer_id: int, committed: bool, offset: int) -> None:
        """`__transaction_state` holds no transactional records, so a marker there changes nothing."""

    def finish_load(self) -> None:
        """Serve from now on; transactions the log left deciding get their markers written."""
        self._loading = False
        now = self.clock.time_ms()
        for metadata in self.transactions.values():
            if metadata.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                self._complete_after_markers(metadata, now)
        mono = self.clock.monotonic_ms()
        self.timers.schedule((ABORT_TIMED_OUT,), mono + self.config.abort_timed_out_interval_ms)
        self.timers.schedule((EXPIRE_IDS,), mono + self.config.remove_expired_interval_ms)

    def unload(self) -> None:
        """This broker no longer coordinates the partition: queued work is answered NOT_COORDINATOR."""
        self.timers.clear()
        self._marker_jobs.clear()
        for append in self.take_appends():
            if append.on_done is not None:
                append.on_done(ErrorCode.not_coordinator)

    # ===================================================================================================
    # InitProducerId
    # ===================================================================================================

    def init_producer_id(
        self,
        transactional_id: str,
        timeout_ms: int,
        new_producer_id: Callable[[], int],
        expected_producer_id: int = NO_PRODUCER_ID,
        expected_epoch: int = NO_PRODUCER_EPOCH,
    ) -> Reply[InitProducerIdResult]:
        """`new_producer_id` hands out a fresh id or raises KafkaError (no id block available yet)."""
        if not transactional_id:
            return Reply.of(InitProducerIdResult(ErrorCode.invalid_request))
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            return Reply.of(InitProducerIdResult(ErrorCode.invalid_transaction_timeout))
        expected = (expected_producer_id, expected_epoch) if expected_producer_id != NO_PRODUCER_ID else None
        now = self.clock.time_ms()
        metadata = self.transactions.get(transactional_id)
        if metadata is None:
            try:
                producer_id = new_producer_id()
            except KafkaError as exc:
                return Reply.of(InitProducerIdResult(exc.error_code))
            metadata = TransactionMetadata(
                transactional_id, producer_id, NO_PRODUCER_EPOCH, timeout_ms, S.EMPTY, last_update_ms=now
            )
            self.transactions[transactional_id] = metadata

        if metadata.pending_state is not None:
            return Reply.of(InitProducerIdResult(ErrorCode.concurrent_transactions))
        if expected is not None and not self._is_valid_producer_id(metadata, *expected):
            return Reply.of(InitProducerIdResult(ErrorCode.producer_fenced))
        state = metadata.state
        if state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return Reply.of(InitProducerIdResult(ErrorCode.concurrent_transactions))
        if state is S.ONGOING:
            # Fence the current producer: abort its transaction at a bumped epoch that is never returned, and
            # let this one retry (CONCURRENT_TRANSACTIONS) until the abort completes; its retry bumps again.
            fence = self._prepare_fence(metadata)
            reply: Reply[InitProducerIdResult] = Reply()

            def after_fence(error: ErrorCode) -> None:
                # The abort is under way: this producer retries until it completes (Kafka answers the same).
                done = error is ErrorCode.none
                reply.complete(InitProducerIdResult(ErrorCode.concurrent_transactions if done else error))

            self._end_transaction(
                transactional_id, fence.producer_id, fence.producer_epoch, False, from_client=False,
                answer=after_fence,
            )  # fmt: skip
            return reply
        if state not in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            raise RuntimeError(f"transactional id {transactional_id!r} found in state {state.display_name}")

        if metadata.epoch_exhausted and (expected is None or expected[1] == metadata.producer_epoch):
            try:
                producer_id = new_producer_id()
            except KafkaError as exc:
                return Reply.of(InitProducerIdResult(exc.error_code))
            transit = metadata.prepare(
                S.EMPTY, producer_id=producer_id, producer_epoch=0,
                last_producer_epoch=metadata.producer_epoch if expected is not None else NO_PRODUCER_EPOCH,
                timeout_ms=timeout_ms, partitions=(), start_ms=-1, now_ms=now,
            )  # fmt: skip
        else:
            bumped = self._bumped_epochs(metadata, expected)
            if bumped is None:
                return Reply.of(InitProducerIdResult(ErrorCode.producer_fenced))
            epoch, last_epoch = bumped
            transit = metadata.prepare(
                S.EMPTY, producer_epoch=epoch, last_producer_epoch=last_epoch, timeout_ms=timeout_ms,
                partitions=(), start_ms=-1, now_ms=now,
            )  # fmt: skip

        reply = Reply()

        def answer(error: ErrorCode) -> None:
            if error is ErrorCode.none:
                log.info("initialized transactional id %r with producer id %d and epoch %d on %s",
                         transactional_id, transit.producer_id, transit.producer_epoch, self._name)  # fmt: skip
                reply.complete(
                    InitProducerIdResult(ErrorCode.none, transit.producer_id, transit.producer_epoch)
                )
            else:
                reply.complete(InitProducerIdResult(error))

        self._write(metadata, transit, answer)
        return reply

    @staticmethod
    def _is_valid_producer_id(metadata: TransactionMetadata, producer_id: int, epoch: int) -> bool:
        return (
            metadata.producer_epoch == NO_PRODUCER_EPOCH
            or producer_id == metadata.producer_id
            or (producer_id == metadata.last_producer_id and epoch >= EPOCH_EXHAUSTED)
        )

    @staticmethod
    def _bumped_epochs(
        metadata: TransactionMetadata, expected: tuple[int, int] | None
    ) -> tuple[int, int] | None:
        """(new epoch, last epoch) for InitProducerId, or None when the caller is fenced
        (Kafka's prepareIncrementProducerEpoch)."""
        bumped = metadata.producer_epoch + 1
        if expected is None:
            return bumped, NO_PRODUCER_EPOCH
        expected_epoch = expected[1]
        if metadata.producer_epoch == NO_PRODUCER_EPOCH or expected_epoch == metadata.producer_epoch:
            return bumped, metadata.producer_epoch
        if expected_epoch == metadata.last_producer_epoch:
            # A retry of a bump that succeeded but whose answer was lost: answer the same epoch again.
            return metadata.producer_epoch, metadata.last_producer_epoch
        return None

    def _prepare_fence(self, metadata: TransactionMetadata) -> _Transit:
        if metadata.producer_epoch == SHORT_MAX:
            raise RuntimeError(f"cannot fence {metadata.transactional_id!r}: its epoch would overflow")
        epoch = metadata.producer_epoch if metadata.has_failed_epoch_fence else metadata.producer_epoch + 1
        # Kafka keeps the last update time here: a fence is not activity of the producer.
        return metadata.prepare(
            S.PREPARE_EPOCH_FENCE,
            producer_epoch=epoch,
            last_producer_epoch=NO_PRODUCER_EPOCH,
            now_ms=metadata.last_update_ms,
        )

    # ===================================================================================================
    # AddPartitionsToTxn, AddOffsetsToTxn
    # ===================================================================================================

    def add_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> Reply[ErrorCode]:
        """Add partitions to the producer's transaction (AddOffsetsToTxn adds its group's offsets partition)."""
        if not transactional_id:
            return Reply.of(ErrorCode.invalid_request)
        wanted = frozenset(partitions)
        metadata = self.transactions.get(transactional_id)
        if metadata is None or metadata.producer_id != producer_id:
            return Reply.of(ErrorCode.invalid_producer_id_mapping)
        if metadata.producer_epoch != producer_epoch:
            return Reply.of(ErrorCode.producer_fenced)
        if metadata.pending_state is not None or metadata.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return Reply.of(ErrorCode.concurrent_transactions)
        if metadata.state is S.ONGOING and wanted <= metadata.partitions:
            return Reply.of(ErrorCode.none)
        now = self.clock.time_ms()
        starts = metadata.state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT)
        transit = metadata.prepare(
            S.ONGOING, partitions=metadata.partitions | wanted, start_ms=now if starts else metadata.start_ms,
            now_ms=now,
        )  # fmt: skip
        reply: Reply[ErrorCode] = Reply()
        self._write(metadata, transit, reply.complete)
        return reply

    def verify_partitions(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        """AddPartitionsToTxn's verifyOnly (from partition leaders): is each partition in the transaction?"""
        wanted = list(partitions)
        if not transactional_id:
            return dict.fromkeys(wanted, ErrorCode.invalid_request)
        metadata = self.transactions.get(transactional_id)
        if metadata is None or metadata.producer_id != producer_id:
            return dict.fromkeys(wanted, ErrorCode.invalid_producer_id_mapping)
        if metadata.producer_epoch != producer_epoch:
            return dict.fromkeys(wanted, ErrorCode.producer_fenced)
        if metadata.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            return dict.fromkeys(wanted, ErrorCode.concurrent_transactions)
        return {
            tp: ErrorCode.none if tp in metadata.partitions else ErrorCode.transaction_abortable
            for tp in wanted
        }

    # ===================================================================================================
    # EndTxn
    # ===================================================================================================

    def end_transaction(
        self, transactional_id: str, producer_id: int, producer_epoch: int, committed: bool
    ) -> Reply[ErrorCode]:
        reply: Reply[ErrorCode] = Reply()
        self._end_transaction(
            transactional_id, producer_id, producer_epoch, committed, from_client=True, answer=reply.complete
        )
        return reply

    def _end_transaction(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        committed: bool,
        *,
        from_client: bool,
        answer: Callable[[ErrorCode], None],
    ) -> None:
        if not transactional_id:
            answer(ErrorCode.invalid_request)
            return
        metadata = self.transactions.get(transactional_id)
        if metadata is None or metadata.producer_id != producer_id:
            answer(ErrorCode.invalid_producer_id_mapping)
            return
        # Clients must name the current epoch; the coordinator's own aborts may name a bumped one.
        if (
            from_client and producer_epoch != metadata.producer_epoch
        ) or producer_epoch < metadata.producer_epoch:
            answer(ErrorCode.producer_fenced)
            return
        pending = metadata.pending_state
        if pending is not None and pending is not S.PREPARE_EPOCH_FENCE:
            answer(ErrorCode.concurrent_transactions)
            return
        state = metadata.state
        is_fence = False
        if state is S.ONGOING:
            target = S.PREPARE_COMMIT if committed else S.PREPARE_ABORT
            if target is S.PREPARE_ABORT and pending is S.PREPARE_EPOCH_FENCE:
                # The fence's bumped epoch takes effect now, so the fenced producer is refused from here on.
                is_fence = True
                metadata.pending_state = None
                metadata.producer_epoch = producer_epoch
                metadata.last_producer_epoch = NO_PRODUCER_EPOCH
            elif pending is not None:
                answer(ErrorCode.concurrent_transactions)
                return
            transit = metadata.prepare(target, now_ms=self.clock.time_ms())
        elif state in _END_TXN_ANSWERS:
            answer(_END_TXN_ANSWERS[state][0 if committed else 1])
            return
        else:
            raise RuntimeError(f"transactional id {transactional_id!r} found in state {state.display_name}")

        def after_prepare(error: ErrorCode) -> None:
            if error is not ErrorCode.none:
                if is_fence:
                    metadata.has_failed_epoch_fence = True
                    log.warning("%s: the epoch fence of %r could not be written (%s); epoch %d was never returned",
                                self._name, transactional_id, error.name, transit.producer_epoch)  # fmt: skip
                answer(error)
                return
            if self.transactions.get(transactional_id) is not metadata or metadata.pending_state is not None:
                answer(ErrorCode.concurrent_transactions)
                return
            # The decision is in the log: the producer is answered now, the markers follow.
            answer(ErrorCode.none)
            self._complete_after_markers(metadata, self.clock.time_ms())

        self._write(metadata, transit, after_prepare)

    def _complete_after_markers(self, metadata: TransactionMetadata, now: int) -> None:
        """Mark the completion pending and queue the markers (Kafka's prepareComplete, addTxnMarkersToSend)."""
        committed = metadata.state is S.PREPARE_COMMIT
        metadata.has_failed_epoch_fence = False
        metadata.prepare(S.COMPLETE_COMMIT if committed else S.COMPLETE_ABORT, now_ms=now)
        job = MarkerJob(
            metadata.transactional_id, self.coordinator_epoch, metadata.producer_id, metadata.producer_epoch,
            committed, frozenset(metadata.partitions),
        )  # fmt: skip
        if self.marker_listener is not None:
            self.marker_listener(job)
        else:
            self._marker_jobs.append(job)

    def pending_markers(self, transactional_id: str) -> MarkerJob | None:
        """The markers a decided transaction waits for (the job its completion stands for), if any."""
        metadata = self.transactions.get(transactional_id)
        if metadata is None or metadata.pending_state not in (S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            return None
        return MarkerJob(
            transactional_id, self.coordinator_epoch, metadata.producer_id, metadata.producer_epoch,
            metadata.pending_state is S.COMPLETE_COMMIT, frozenset(metadata.partitions),
        )  # fmt: skip

    def is_current(self, job: MarkerJob) -> bool:
        """Whether the markers of `job` are still wanted: the same transaction, still waiting for them."""
        metadata = self.transactions.get(job.transactional_id)
        return (
            not self._loading
            and job.coordinator_epoch == self.coordinator_epoch
            and metadata is not None
            and metadata.producer_id == job.producer_id
            and metadata.producer_epoch == job.producer_epoch
            and metadata.pending_state is (S.COMPLETE_COMMIT if job.committed else S.COMPLETE_ABORT)
        )

    def markers_written(self, job: MarkerJob) -> None:
        """Every partition of the transaction has its marker: write CompleteCommit or CompleteAbort."""
        if not self.is_current(job):
            log.info("%s: markers of %r written, but the transaction moved on; nothing to complete",
                     self._name, job.transactional_id)  # fmt: skip
            return
        metadata = self.transactions[job.transactional_id]
        target = metadata.pending_state
        assert target is not None
        # The pending state was set when the markers were queued; write the record it stands for.
        metadata.pending_state = None
        transit = metadata.prepare(target, partitions=(), now_ms=self.clock.time_ms())

        def after_complete(error: ErrorCode) -> None:
            if error is ErrorCode.none:
                return
            if (
                error is ErrorCode.coordinator_not_available
                and self.transactions.get(job.transactional_id) is metadata
            ):
                # No ISR, or a timeout: keep the completion pending and write it again shortly (Kafka's
                # txnLogAppendRetryQueue).
                metadata.pending_state = target
                self.timers.schedule(
                    (RETRY_COMPLETION, job.transactional_id),
                    self.clock.monotonic_ms() + COMPLETION_RETRY_MS,
                    job,
                )
                return
            log.info("%s: completing %r failed with %s; a new coordinator will complete it",
                     self._name, job.transactional_id, error.name)  # fmt: skip

        self._write(metadata, transit, after_complete, keep_pending_on=ErrorCode.coordinator_not_available)

    # ===================================================================================================
    # DescribeTransactions, ListTransactions
    # ===================================================================================================

    def describe(self, transactional_id: str) -> TransactionDescription:
        if not transactional_id:
            return TransactionDescription(ErrorCode.invalid_request, transactional_id)
        metadata = self.transactions.get(transactional_id)
        if metadata is None or metadata.state is S.DEAD:
            return TransactionDescription(ErrorCode.transactional_id_not_found, transactional_id)
        return TransactionDescription(
            ErrorCode.none, transactional_id, metadata.state.display_name, metadata.timeout_ms, metadata.start_ms,
            metadata.producer_id, metadata.producer_epoch, tuple(sorted(metadata.partitions)),
        )  # fmt: skip

    def list_transactions(
        self, states: Iterable[TransactionState], producer_ids: Iterable[int], min_duration_ms: int = -1
    ) -> list[TransactionListing]:
        """Transactions matching every given filter (an empty filter matches all; Dead ones never show)."""
        wanted_states, wanted_ids = frozenset(states), frozenset(producer_ids)
        now = self.clock.time_ms()
        return [
            TransactionListing(m.transactional_id, m.producer_id, m.state.display_name)
            for m in self.transactions.values()
            if m.state is not S.DEAD
            and (not wanted_ids or m.producer_id in wanted_ids)
            and (not wanted_states or m.state in wanted_states)
            and not (min_duration_ms >= 0 and now - m.start_ms <= min_duration_ms)
        ]

    # ===================================================================================================
    # timers
    # ===================================================================================================

    def _on_timer(self, timer: Timer) -> None:
        kind = timer.key[0]
        mono = self.clock.monotonic_ms()
        if kind == ABORT_TIMED_OUT:
            self.abort_timed_out_transactions()
            self.timers.schedule((ABORT_TIMED_OUT,), mono + self.config.abort_timed_out_interval_ms)
        elif kind == EXPIRE_IDS:
            self.expire_transactional_ids()
            self.timers.schedule((EXPIRE_IDS,), mono + self.config.remove_expired_interval_ms)
        elif kind == RETRY_COMPLETION:
            job: MarkerJob = timer.payload
            metadata = self.transactions.get(job.transactional_id)
            if metadata is not None and metadata.pending_state is not None:
                self.markers_written(job)

    def abort_timed_out_transactions(self) -> int:
        """Fence and abort every transaction open longer than its timeout; returns how many were started."""
        now = self.clock.time_ms()
        timed_out = [
            m for m in self.transactions.values()
            if m.pending_state is None and m.state is S.ONGOING and m.start_ms + m.timeout_ms < now
        ]  # fmt: skip
        for metadata in timed_out:
            fence = self._prepare_fence(metadata)
            log.info("%s: aborting transaction of %r (producer id %d), open longer than its timeout of %d ms",
                     self._name, metadata.transactional_id, metadata.producer_id, metadata.timeout_ms)  # fmt: skip

            def report(error: ErrorCode, transactional_id: str = metadata.transactional_id) -> None:
                if error not in (
                    ErrorCode.none, ErrorCode.invalid_producer_id_mapping, ErrorCode.producer_fenced,
                    ErrorCode.concurrent_transactions,
                ):  # fmt: skip
                    log.warning("%s: rolling back the timed-out transaction of %r failed: %s",
                                self._name, transactional_id, error.name)  # fmt: skip

            self._end_transaction(
                metadata.transactional_id, fence.producer_id, fence.producer_epoch, False, from_client=False,
                answer=report,
            )  # fmt: skip
        return len(timed_out)

    def expire_transactional_ids(self) -> int:
        """Tombstone transactional ids idle longer than transactional.id.expiration.ms; returns how many."""
        cutoff = self.clock.time_ms() - self.config.transactional_id_expiration_ms
        expired = [
            m for m in self.transactions.values()
            if m.pending_state is None and m.state in EXPIRATION_ALLOWED and m.last_update_ms <= cutoff
        ]  # fmt: skip
        if not expired:
            return 0
        for metadata in expired:
            metadata.prepare(S.DEAD, now_ms=metadata.last_update_ms)
        # Tombstones go out in appends of bounded size (as Kafka fills batches up to max.message.bytes), so that
        # many ids expiring at once never make one batch the log refuses.
        chunk: list[TransactionMetadata] = []
        size = 0
        for metadata in expired:
            key = encode_key(metadata.transactional_id)
            if chunk and size + len(key) + TOMBSTONE_OVERHEAD > MAX_TOMBSTONE_BYTES:
                self._write_tombstones(chunk)
                chunk, size = [], 0
            chunk.append(metadata)
            size += len(key) + TOMBSTONE_OVERHEAD
        self._write_tombstones(chunk)
        return len(expired)

    def _write_tombstones(self, expired: list[TransactionMetadata]) -> None:
        def after_tombstones(error: ErrorCode | None) -> None:
            for metadata in expired:
                if error is not None:
                    log.warning(
                        "%s: expiring %r failed: %s", self._name, metadata.transactional_id, error.name
                    )
                    metadata.pending_state = None
                elif self.transactions.get(metadata.transactional_id) is metadata:
                    # Replay removed it unless the tombstone was not replayed (an unload in between).
                    metadata.pending_state = None

        self._appends.append(
            Append(
                [(encode_key(m.transactional_id), None) for m in expired],
                after_tombstones,
                self.clock.time_ms(),
            )
        )

    # ===================================================================================================
    # writing
    # ===================================================================================================

    def _write(
        self,
        metadata: TransactionMetadata,
        transit: _Transit,
        answer: Callable[[ErrorCode], None],
        keep_pending_on: ErrorCode | None = None,
    ) -> None:
        """Queue the record of `transit`; once appended (and replayed) complete the transition and answer."""

        def on_done(append_error: ErrorCode | None) -> None:
            if append_error is not None:
                error = _append_error(append_error)
                if (
                    self.transactions.get(metadata.transactional_id) is metadata
                    and error is not keep_pending_on
                ):
                    metadata.pending_state = None
                answer(error)
                return
            if self.transactions.get(metadata.transactional_id) is not metadata:
                answer(ErrorCode.not_coordinator)
                return
            # Replay set what the record holds; what it does not hold is completed here.
            metadata.pending_state = None
            metadata.last_producer_id = transit.last_producer_id
            metadata.last_producer_epoch = transit.last_producer_epoch
            answer(ErrorCode.none)

        timestamp = self.clock.time_ms()
        self._appends.append(
            Append(
                [(encode_key(metadata.transactional_id), encode_value(transit.value()))], on_done, timestamp
            )
        )

    @property
    def _name(self) -> str:
        return f"__transaction_state-{self.partition}"
