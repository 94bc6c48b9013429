"""Transaction verification from partition leaders (KIP-890 part 1): Kafka's AddPartitionsToTxnManager.

Before a leader appends the first transactional batch of a producer's transaction to a partition (Produce), or
a group coordinator the first transactional offset commit (TxnOffsetCommit), it asks the producer's transaction
coordinator whether the partition is in the ongoing transaction: AddPartitionsToTxn v5 with verifyOnly. A
coordinator this broker hosts is asked in process; another broker gets the request over the inter-broker
connection, batched: per coordinator broker one request in flight, carrying every transactional id queued
meanwhile (at most one entry per id: a newer request of the same id replaces the queued one, which is answered
NETWORK_EXCEPTION, or INVALID_PRODUCER_EPOCH when the newer one has a higher epoch; an older epoch than the
queued one is answered INVALID_PRODUCER_EPOCH at once).

`verify` answers the partitions that were not verified and why (an empty dict: all verified), with Kafka's
mapping: PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH (what producers handle there), TRANSACTION_ABORTABLE
becomes INVALID_TXN_STATE for clients too old for it (`generic_errors` false), a refused request
(CLUSTER_AUTHORIZATION_FAILED) INVALID_TXN_STATE, and an unreachable coordinator NETWORK_EXCEPTION. The caller
maps what remains to its own API's errors (`produce_error`).
"""

from __future__ import annotations

import asyncio
import bisect
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kio.schema.add_partitions_to_txn.v5 import request as aptt_request
from kio.schema.errors import ErrorCode

from broker_runtime.cluster.broker_client import BrokerClient
from broker_runtime.errors import KafkaError
from broker_runtime.txn.records import TRANSACTION_STATE_TOPIC, transaction_partition

if TYPE_CHECKING:
    from broker_runtime.broker import Broker

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

# Coordinator answers a produce request maps to NOT_ENOUGH_REPLICAS: retriable for every client, and no metadata
# refresh (Kafka's ReplicaManager.handleProduceAppend).
_RETRIABLE_FOR_PRODUCE = frozenset(
    {
        ErrorCode.concurrent_transactions,
        ErrorCode.network_exception,
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.coordinator_not_available,
        ErrorCode.not_coordinator,
    }
)


def produce_error(error: ErrorCode) -> KafkaError:
    """What a produce request is answered for a partition whose verification failed with `error`."""
    if error is ErrorCode.invalid_txn_state:
        return KafkaError(error, "partition was not added to the transaction")
    if error in _RETRIABLE_FOR_PRODUCE:
        return KafkaError(
            ErrorCode.not_enough_replicas,
            f"unable to verify the partition has been added to the transaction: {error.name}",
        )
    return KafkaError(error, f"transaction verification failed: {error.name}")


def _partition_error(error: ErrorCode, generic_errors: bool) -> ErrorCode:
    if error is ErrorCode.producer_fenced:
        return ErrorCode.invalid_producer_epoch
    if error is ErrorCode.transaction_abortable and not generic_errors:
        return ErrorCode.invalid_txn_state
    return error


@dataclass(slots=True)
class _Queued:
    producer_id: int
    producer_epoch: int
    partitions: list[TopicPartition]
    generic_errors: bool
    answer: asyncio.Future  # -> dict[TopicPartition, ErrorCode] (the unverified ones)


# Upper bounds (ms) of the verification time histogram: from an answer in process to a request timeout.
VERIFICATION_MS_BUCKETS = (1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000)


class VerificationStats:
    """Kafka's AddPartitionsToTxnManager metrics: VerificationTimeMs (one sample per verification answered) and
    VerificationFailureRate (partitions not verified). Plain ints; the metrics collector reads them."""

    __slots__ = ("buckets", "count", "failures", "max_ms", "sum_ms")

    def __init__(self) -> None:
        self.buckets = [0] * (len(VERIFICATION_MS_BUCKETS) + 1)  # the last one is +Inf
        self.count = self.sum_ms = self.max_ms = self.failures = 0

    def record(self, took_ms: int, failed_partitions: int) -> None:
        self.count += 1
        self.sum_ms += took_ms
        self.max_ms = max(self.max_ms, took_ms)
        self.buckets[bisect.bisect_left(VERIFICATION_MS_BUCKETS, took_ms)] += 1
        self.failures += failed_partitions


class TransactionVerifier:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._client = BrokerClient(
            f"broker-{broker.broker_id}-txn-verifier",
            "",
            clock=broker.clock,
            request_timeout_ms=broker.config["request.timeout.ms"],
        )
        self._queued: dict[int, dict[str, _Queued]] = {}  # coordinator broker id -> transactional id -> entry
        self._senders: dict[int, asyncio.Task] = {}
        self.stats = VerificationStats()

    async def stop(self) -> None:
        for task in list(self._senders.values()):
            task.cancel()
        for queue in self._queued.values():
            for entry in queue.values():
                _answer(entry, ErrorCode.network_exception)
        self._queued.clear()
        await self._client.close()

    def enabled(self) -> bool:
        return bool(self.broker.config["transaction.partition.verification.enable"])

    async def verify(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Iterable[TopicPartition],
        *,
        generic_errors: bool,
    ) -> dict[TopicPartition, ErrorCode]:
        """The partitions the coordinator did not confirm as part of the producer's ongoing transaction."""
        partitions = list(partitions)
        answer = self.verify_in_process(
            transactional_id, producer_id, producer_epoch, partitions, generic_errors=generic_errors
        )
        if answer is not None:
            return answer
        coordinator = self._coordinator_of(transactional_id)
        if coordinator is None:
            self.stats.failures += len(partitions)  # never asked, so not timed (as Kafka)
            return dict.fromkeys(partitions, ErrorCode.coordinator_not_available)
        start = self.broker.clock.monotonic_ms()
        future = asyncio.get_running_loop().create_future()
        entry = _Queued(producer_id, producer_epoch, partitions, generic_errors, future)
        self._enqueue(coordinator, transactional_id, entry)
        unverified = await future
        self.stats.record(self.broker.clock.monotonic_ms() - start, len(unverified))
        return unverified

    def verify_in_process(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: list[TopicPartition],
        *,
        generic_errors: bool,
    ) -> dict[TopicPartition, ErrorCode] | None:
        """`verify`'s answer at once when this broker is the coordinator (a read of its shard: Produce can then
        append without deferring), or None when the coordinator is elsewhere (or unknown) and must be asked."""
        if self._coordinator_of(transactional_id) != self.broker.broker_id:
            return None
        runtime = self.broker.txn_coordinator
        if runtime is None:
            errors = dict.fromkeys(partitions, ErrorCode.coordinator_not_available)
        else:
            try:
                errors = runtime.verify_partitions_now(
                    transactional_id, producer_id, producer_epoch, partitions
                )
            except KafkaError as exc:
                errors = dict.fromkeys(partitions, exc.error_code)
        unverified = {tp: _partition_error(error, generic_errors) for tp, error in errors.items() if error}
        self.stats.record(0, len(unverified))  # answered from memory, within the request
        return unverified

    # --- where the coordinator is -------------------------------------------------------------------------

    def _coordinator_of(self, transactional_id: str) -> int | None:
        """The broker leading the transactional id's `__transaction_state` partition, if it is alive."""
        topic = self.broker.metadata.topics().get(TRANSACTION_STATE_TOPIC)
        if topic is None:
            return None
        runtime = self.broker.txn_coordinator
        count = runtime.num_partitions if runtime is not None else len(topic.partitions)
        info = topic.partitions.get(transaction_partition(transactional_id, count))
        if info is None or info.leader < 0:
            return None
        if info.leader == self.broker.broker_id:
            return info.leader
        if all(b.broker_id != info.leader for b in self.broker.metadata.brokers()):
            return None
        return info.leader

    # --- another broker -----------------------------------------------------------------------------------

    def _enqueue(self, coordinator: int, transactional_id: str, entry: _Queued) -> None:
        queue = self._queued.setdefault(coordinator, {})
        existing = queue.get(transactional_id)
        if existing is not None:
            if entry.producer_epoch < existing.producer_epoch:
                _answer(entry, ErrorCode.invalid_producer_epoch)  # fenced by the queued one
                return
            # The older request is most likely a retry the client gave up on (same epoch), or fenced.
            _answer(
                existing,
                ErrorCode.invalid_producer_epoch
                if existing.producer_epoch < entry.producer_epoch
                else ErrorCode.network_exception,
            )
        queue[transactional_id] = entry
        sender = self._senders.get(coordinator)
        if sender is None or sender.done():
            self._senders[coordinator] = asyncio.get_running_loop().create_task(
                self._send_loop(coordinator), name=f"txn-verifier-{coordinator}"
            )

    async def _send_loop(self, coordinator: int) -> None:
        """One request in flight per coordinator broker; what was queued meanwhile goes in the next."""
        while self._queued.get(coordinator):
            batch = self._queued.pop(coordinator)
            try:
                await self._send(coordinator, batch)
            except asyncio.CancelledError:
                for entry in batch.values():
                    _answer(entry, ErrorCode.network_exception)
                raise
            except Exception:
                log.exception("transaction verification with broker %d failed", coordinator)
                for entry in batch.values():
                    _answer(entry, ErrorCode.unknown_server_error)

    async def _send(self, coordinator: int, batch: dict[str, _Queued]) -> None:
        node = next((b for b in self.broker.metadata.brokers() if b.broker_id == coordinator), None)
        if node is None:
            for entry in batch.values():
                _answer(entry, ErrorCode.coordinator_not_available)
            return
        request = aptt_request.AddPartitionsToTxnRequest(
            transactions=tuple(
                aptt_request.AddPartitionsToTxnTransaction(
                    transactional_id=tid,
                    producer_id=entry.producer_id,
                    producer_epoch=entry.producer_epoch,
                    verify_only=True,
                    topics=tuple(
                        aptt_request.AddPartitionsToTxnTopic(name=topic, partitions=tuple(indexes))
                        for topic, indexes in _by_topic(entry.partitions).items()
                    ),
                )
                for tid, entry in batch.items()
            )
        )
        try:
            response = await self._client.send_to(coordinator, node.host, node.port, request)
        except (ConnectionError, TimeoutError) as exc:
            log.warning("transaction verification with broker %d: %s", coordinator, exc)
            for entry in batch.values():
                _answer(entry, ErrorCode.network_exception)
            return
        if response.error_code != ErrorCode.none:
            error = (
                ErrorCode.invalid_txn_state
                if response.error_code == ErrorCode.cluster_authorization_failed
                else ErrorCode(response.error_code)
            )
            for entry in batch.values():
                _answer(entry, error)
            return
        for result in response.results_by_transaction:
            entry = batch.get(result.transactional_id)
            if entry is None or entry.answer.done():
                continue
            unverified = {
                (topic.name, p.partition_index): _partition_error(
                    ErrorCode(p.partition_error_code), entry.generic_errors
                )
                for topic in result.topic_results
                for p in topic.results_by_partition
                if p.partition_error_code != ErrorCode.none
            }
            entry.answer.set_result(unverified)
        for entry in batch.values():  # a transaction the answer left out was not verified
            _answer(entry, ErrorCode.invalid_txn_state)


def _answer(entry: _Queued, error: ErrorCode) -> None:
    if not entry.answer.done():
        entry.answer.set_result(dict.fromkeys(entry.partitions, error))


def _by_topic(partitions: list[TopicPartition]) -> dict[str, list[int]]:
    by_topic: dict[str, list[int]] = {}
    for topic, index in partitions:
        by_topic.setdefault(topic, []).append(index)
    return by_topic
