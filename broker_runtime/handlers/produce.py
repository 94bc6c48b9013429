"""Produce: validate each partition's batch, append it as leader, answer per partition.

A batch is validated and appended at once, without awaiting, when that is cheap: uncompressed, or compressed
to at most INLINE_DECOMPRESSED_BYTES of records (handing a batch to a thread costs ~70 us of CPU, more than
decompressing that much). A larger compressed batch, and one the topic recompresses, is validated on a worker
thread; appends to one partition still happen in arrival order, because each partition keeps the task of its
latest deferred append and every later append waits for that task first.

Transactional batches, with `transaction.partition.verification.enable` on (KIP-890 part 1, Kafka's
ReplicaManager.handleProduceAppend): a batch of a producer with no transaction open in the partition takes a
verification guard from the partition's producer state and asks the producer's transaction coordinator
(`txn/verification.py`) whether the partition is in the transaction: at once when this broker is the coordinator
(a read of its shard), otherwise in one request for every such partition of the produce request, the append then
deferred like a worker-validated one so that appends to the partition keep their arrival order. The batch is
appended (with its guard, which the log checks) only if the coordinator confirms, and is answered
INVALID_TXN_STATE (TRANSACTION_ABORTABLE from Produce v11) otherwise.
"""

from __future__ import annotations

import asyncio
import logging
from functools import partial

from kio.schema.errors import ErrorCode

from broker_runtime.clock import Clock
from broker_runtime.config import LONG_MAX
from broker_runtime.errors import CloseConnection, KafkaError
from broker_runtime.handlers.context import RequestContext
from broker_runtime.protocol.compression import CODEC_NONE, CODEC_ZSTD
from broker_runtime.protocol.produce_response import PartitionResult, encode_produce_response
from broker_runtime.protocol.records import (
    INT64_MAX,
    INT64_MIN,
    NO_RULES,
    TRANSACTIONAL_FLAG,
    BatchHeader,
    InvalidRecords,
    RecordRules,
    check_records,
    read_header,
    recompress,
    validate_produce_batch,
)
from broker_runtime.txn.producer_state import NO_GUARD, VerificationGuard
from broker_runtime.txn.verification import produce_error

log = logging.getLogger(__name__)

INLINE_DECOMPRESSED_BYTES = 128 * 1024


async def handle_produce(ctx: RequestContext, request) -> object:
    broker = ctx.broker
    acks = request.acks
    timeout_ms = int(request.timeout.total_seconds() * 1000)
    has_txn_id = request.transactional_id is not None
    verification = None
    if has_txn_id and broker.txn_verifier is not None and broker.txn_verifier.enabled():
        verification = _TxnVerification(request.transactional_id, ctx.api_version > 10)
    refused = None  # what every partition of the request is answered when the request itself is refused
    if acks not in (0, 1, -1):
        refused = KafkaError(ErrorCode.invalid_required_acks, f"acks must be 0, 1 or -1, got {acks}")
    # (topic, index, bytes received, (Partition, AppendResult) | task appending | KafkaError | InvalidRecords)
    pending: list[tuple[str, int, int, object]] = []
    for topic_data in request.topic_data:
        name = topic_data.name
        for part in topic_data.partition_data:
            records = part.records
            if refused is not None:
                outcome: object = refused
            else:
                try:
                    outcome = _append(ctx, name, part.index, records, acks, has_txn_id, verification)
                except (InvalidRecords, KafkaError) as exc:
                    outcome = exc
            pending.append((name, part.index, len(records) if records is not None else 0, outcome))
    if verification is not None:
        verification.start(broker)

    results: dict[str, list[PartitionResult]] = {}
    failure = None  # the first partition that failed, for acks=0
    for name, index, size, outcome in pending:
        try:
            if isinstance(outcome, asyncio.Task):
                # Shielded: an append under way completes even if the client goes away, or a later append to
                # the partition, waiting for this one, could overtake an earlier one still validating.
                outcome = await asyncio.shield(outcome)
            if isinstance(outcome, tuple):
                partition, outcome = outcome
                if not outcome.duplicate:
                    broker.metrics.record_produce(name, outcome.last_offset - outcome.base_offset + 1, size)
                if acks == -1:
                    await broker.replica_manager.wait_for_replication(partition, outcome, timeout_ms)
        except (InvalidRecords, KafkaError) as exc:
            outcome = exc
        if failure is None and isinstance(outcome, InvalidRecords | KafkaError):
            failure = name, index, outcome
        parts = results.get(name)
        if parts is None:
            parts = results[name] = []
        parts.append(_partition_result(index, outcome))

    if acks == 0:
        if failure is not None:
            name, index, error = failure
            raise CloseConnection(
                f"acks=0 produce to {name}-{index} failed: {error.error_code.name} {error.message or ''}"
            )
        return None
    return encode_produce_response(ctx.api_version, list(results.items()))


def _append(ctx: RequestContext, name: str, index: int, records: bytes | None, acks: int, has_txn_id: bool,
            verification: _TxnVerification | None = None):  # fmt: skip
    """Validate and append one partition's batch: (Partition, AppendResult) at once, or the task that will.
    Producer state (partition_log.py) checks the epoch, sequence and transaction of an idempotent batch."""
    broker = ctx.broker
    topic = broker.metadata.topics().get(name)
    if topic is None or index not in topic.partitions:
        raise KafkaError(ErrorCode.unknown_topic_or_partition, f"{name}-{index} does not exist")
    partition = broker.replica_manager.get_partition(name, index)
    if partition is None:
        raise broker.replica_manager.not_hosted_error(name, index, exists=True)
    if topic.internal:
        raise KafkaError(ErrorCode.invalid_topic_exception, f"cannot append to internal topic {name}")
    if records is None:
        raise KafkaError(ErrorCode.invalid_record, "no records")
    batch = bytearray(records)
    max_bytes = partition.log.config.max_message_bytes
    header = validate_produce_batch(batch, max_bytes)
    if header.attributes & TRANSACTIONAL_FLAG and not has_txn_id:
        # Kafka answers a request with transactional records and no transactional id this way (no authorizer
        # would let it write to a transaction).
        raise KafkaError(
            ErrorCode.transactional_id_authorization_failed, "transactional records need a transactional id"
        )
    guard = verified = None
    if verification is not None and header.attributes & TRANSACTIONAL_FLAG:
        guard = broker.replica_manager.start_transaction_verification(
            name, index, header.producer_id, header.base_sequence, header.producer_epoch
        )
        if guard is not NO_GUARD:  # no transaction open here yet: ask its coordinator first
            verified = verification.ask(broker, name, index, header.producer_id, header.producer_epoch)
    codec = header.codec
    if codec == CODEC_ZSTD and ctx.api_version < 7:
        raise KafkaError(ErrorCode.unsupported_compression_type, "zstd needs Produce v7 or later")
    policy = broker.produce_policy(name)
    rules = _record_rules(policy, broker.clock)
    target_codec = codec if policy.codec is None else policy.codec
    previous = partition.append_tail
    validation = None
    if target_codec != codec:
        inline = False  # recompressed on a worker
    elif codec == CODEC_NONE:
        check_records(batch, header, rules)  # walked in place: nothing to decompress, nothing to bound
        inline = True
    else:
        inline = _checked_inline(broker, batch, header, rules)
    if inline:
        if verified is None and (previous is None or previous.done()):
            return broker.replica_manager.append_local(
                name, index, batch, header, acks=acks, verification_guard=guard
            )
    else:
        limit = broker.config["socket.request.max.bytes"]
        work = partial(_check_and_recompress, batch, header, rules, target_codec, max_bytes, limit)
        validation = asyncio.get_running_loop().run_in_executor(broker.record_workers, work)
    task = asyncio.get_running_loop().create_task(
        _append_after(ctx, name, index, batch, header, acks, previous, validation, guard, verified)
    )
    task.add_done_callback(_retrieve_exception)
    partition.append_tail = task
    return task


def _checked_inline(broker, batch: bytearray, header: BatchHeader, rules: RecordRules) -> bool:
    """Check a compressed batch's records on the event loop if it decompresses to at most
    INLINE_DECOMPRESSED_BYTES; False if it decompresses to more, for a worker to check against
    `socket.request.max.bytes`."""
    limit = broker.config["socket.request.max.bytes"]
    budget = min(limit, INLINE_DECOMPRESSED_BYTES)
    try:
        check_records(batch, header, rules, budget)
    except InvalidRecords as exc:
        if exc.error_code is ErrorCode.message_too_large and budget < limit:
            return False
        raise
    return True


def _retrieve_exception(task: asyncio.Task) -> None:
    """The handler that awaits the task may have been cancelled; its outcome is not an error of its own."""
    if not task.cancelled():
        task.exception()


async def _append_after(
    ctx: RequestContext,
    name: str,
    index: int,
    batch: bytearray,
    header: BatchHeader,
    acks: int,
    previous: asyncio.Task | None,
    validation: asyncio.Future | None,
    guard: VerificationGuard | None = None,
    verified: asyncio.Future | None = None,
):
    """Append once the batch is validated (and recompressed), its transaction verified, and the partition's
    previous append is done."""
    if validation is not None:
        batch, header = await validation
    if verified is not None:
        error = (await verified).get((name, index))
        if error is not None:
            raise produce_error(error)
    if previous is not None and not previous.done():
        await asyncio.wait((previous,))
    return ctx.broker.replica_manager.append_local(
        name, index, batch, header, acks=acks, verification_guard=guard
    )


class _TxnVerification:
    """The transactional partitions of one produce request that need their coordinator's word, asked at once."""

    def __init__(self, transactional_id: str, generic_errors: bool) -> None:
        self.transactional_id = transactional_id
        self.generic_errors = generic_errors  # Produce v11+: TRANSACTION_ABORTABLE is answered as such
        self.producer: tuple[int, int] | None = None
        self.partitions: list[tuple[str, int]] = []
        self.answer: asyncio.Future | None = None

    def ask(
        self, broker, name: str, index: int, producer_id: int, producer_epoch: int
    ) -> asyncio.Future | None:
        """None when the partition is verified already (the coordinator is this broker, which answers at once;
        raises KafkaError if it says no); otherwise the future of the request's answer from another broker."""
        answer = broker.txn_verifier.verify_in_process(
            self.transactional_id,
            producer_id,
            producer_epoch,
            [(name, index)],
            generic_errors=self.generic_errors,
        )
        if answer is not None:
            error = answer.get((name, index))
            if error is not None:
                raise produce_error(error)
            return None
        if self.producer is None:
            self.producer = (producer_id, producer_epoch)
        elif self.producer != (producer_id, producer_epoch):
            raise KafkaError(
                ErrorCode.invalid_producer_id_mapping, "transactional records of more than one producer"
            )
        if self.answer is None:
            self.answer = asyncio.get_running_loop().create_future()
        self.partitions.append((name, index))
        return self.answer

    def start(self, broker) -> None:
        if self.answer is None:
            return
        task = asyncio.get_running_loop().create_task(self._verify(broker))
        task.add_done_callback(_retrieve_exception)

    async def _verify(self, broker) -> None:
        assert self.answer is not None and self.producer is not None
        try:
            errors = await broker.txn_verifier.verify(
                self.transactional_id, *self.producer, self.partitions, generic_errors=self.generic_errors
            )
        except Exception:
            log.exception("verifying the transaction of %r failed", self.transactional_id)
            errors = dict.fromkeys(self.partitions, ErrorCode.unknown_server_error)
        if not self.answer.done():
            self.answer.set_result(errors)


def _check_and_recompress(
    batch: bytearray, header: BatchHeader, rules: RecordRules, codec: int, max_bytes: int, limit: int
) -> tuple[bytearray, BatchHeader]:
    """On a worker thread: decompress and walk the records; recompress if the topic wants another codec."""
    check_records(batch, header, rules, limit)
    if codec == header.codec:
        return batch, header
    batch = recompress(batch, header, codec, limit)
    header = read_header(batch)
    if header.size > max_bytes:
        raise InvalidRecords(
            ErrorCode.message_too_large,
            f"batch of {header.size} bytes after recompression exceeds max.message.bytes {max_bytes}",
        )
    return batch, header


def _record_rules(policy, clock: Clock) -> RecordRules:
    """Keys on compacted topics; CreateTime timestamps within [now - before.max.ms, now + after.max.ms]."""
    before, after = policy.timestamp_before_max_ms, policy.timestamp_after_max_ms
    if policy.log_append_time:
        before = after = LONG_MAX
    if before == LONG_MAX and after == LONG_MAX:
        return KEYS_REQUIRED if policy.compacted else NO_RULES
    now_ms = clock.time_ms()
    return RecordRules(
        keys_required=policy.compacted,
        min_timestamp=INT64_MIN if before == LONG_MAX else max(INT64_MIN, now_ms - before),
        max_timestamp=INT64_MAX if after == LONG_MAX else min(INT64_MAX, now_ms + after),
    )


KEYS_REQUIRED = RecordRules(keys_required=True)


def _partition_result(index: int, outcome) -> PartitionResult:
    if isinstance(outcome, InvalidRecords):
        return index, outcome.error_code, -1, -1, -1, outcome.record_errors, outcome.message
    if isinstance(outcome, KafkaError):
        return index, outcome.error_code, -1, -1, -1, (), outcome.message
    return index, 0, outcome.base_offset, outcome.log_append_time, outcome.log_start_offset, (), None
