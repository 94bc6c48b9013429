"""The transaction coordinator on the shared coordinator runtime: a `TransactionCoordinatorShard` per
`__transaction_state` partition this broker leads, producer ids, and the marker sender.

What is the transaction coordinator's own here: the `__transaction_state` settings (`transaction.state.log.*`),
which partition a transactional id lives on, the coordinator epoch each shard is created with (its partition's
leader epoch), and where markers go: partitions this broker leads are written in process (txnlog's
`write_txn_markers`, which hands `__consumer_offsets` partitions to the group coordinator), the others get a
WriteTxnMarkers request. A shard's marker jobs reach the sender once the shard serves; the sender calls back into
the same shard object, so a shard that was unloaded (or reloaded) never completes another's transaction.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from kio.schema.errors import ErrorCode
from kio.schema.write_txn_markers.v1 import request as wtm_request

from broker_runtime.cluster.broker_client import BrokerClient
from broker_runtime.coordinator.runtime import CoordinatorRuntime, CoordinatorTopic
from broker_runtime.coordinator.shard import Reply
from broker_runtime.errors import KafkaError
from broker_runtime.txn.coordinator import (
    InitProducerIdResult,
    MarkerJob,
    TransactionCoordinatorConfig,
    TransactionCoordinatorShard,
    TransactionDescription,
    TransactionListing,
)
from broker_runtime.txn.marker_sender import LEADER_UNKNOWN, TransactionMarkerSender
from broker_runtime.txn.markers import TxnMarker, write_txn_markers
from broker_runtime.txn.records import TRANSACTION_STATE_TOPIC, transaction_partition
from broker_runtime.txn.state import TransactionState

if TYPE_CHECKING:
    from broker_runtime.broker import Broker

log = logging.getLogger(__name__)

T = TypeVar("T")

# How long a `__transaction_state` append waits for the ISR (Kafka waits for the transaction's own timeout; one
# bound for every append keeps the runtime simple and answers clients well within their request timeout).
APPEND_TIMEOUT_MS = 30_000
MARKER_REQUEST_TIMEOUT_MS = 30_000


def transaction_state_topic(config) -> CoordinatorTopic:
    """`__transaction_state` as Kafka configures it: compacted, uncompressed, no unclean elections."""
    return CoordinatorTopic(
        name=TRANSACTION_STATE_TOPIC,
        num_partitions=config["transaction.state.log.num.partitions"],
        replication_factor=config["transaction.state.log.replication.factor"],
        load_buffer_bytes=config["transaction.state.log.load.buffer.size"],
        commit_timeout_ms=APPEND_TIMEOUT_MS,
        topic_configs={
            "cleanup.policy": "compact",
            "compression.type": "uncompressed",
            "unclean.leader.election.enable": "false",
            "min.insync.replicas": str(config["transaction.state.log.min.isr"]),
            "segment.bytes": str(config["transaction.state.log.segment.bytes"]),
        },
    )


class TransactionCoordinatorRuntime(CoordinatorRuntime[TransactionCoordinatorShard]):
    def __init__(self, broker: Broker) -> None:
        self.config = TransactionCoordinatorConfig.from_broker_config(broker.config)
        super().__init__(
            broker,
            transaction_state_topic(broker.config),
            self._make_shard,
            name="transaction",
            describe=lambda shard: f"{len(shard.transactions)} transactional ids",
        )
        self.markers = TransactionMarkerSender(broker.clock, self._leader_of, self._write_markers)
        self._client = BrokerClient(
            f"broker-{broker.broker_id}-txn-marker-sender",
            "",
            clock=broker.clock,
            request_timeout_ms=MARKER_REQUEST_TIMEOUT_MS,
        )

    async def stop(self) -> None:
        await super().stop()
        await self.markers.stop()
        await self._client.close()

    # --- shards -------------------------------------------------------------------------------------------

    def _make_shard(self, index: int) -> TransactionCoordinatorShard:
        partition = self.broker.replica_manager.get_partition(TRANSACTION_STATE_TOPIC, index)
        coordinator_epoch = partition.leader_epoch if partition is not None else 0
        shard = TransactionCoordinatorShard(index, coordinator_epoch, self.config, self.clock)

        def send_markers(job: MarkerJob) -> None:
            # Jobs queued while the shard loads are sent once it serves (the same turn of the loop).
            asyncio.get_running_loop().call_soon(self._send_markers, index, shard, job)

        shard.marker_listener = send_markers
        return shard

    def _send_markers(self, index: int, shard: TransactionCoordinatorShard, job: MarkerJob) -> None:
        def is_current(job: MarkerJob) -> bool:
            return self._serving(index, shard) and shard.is_current(job)

        def on_written(job: MarkerJob) -> None:
            if not self._serving(index, shard):
                return
            shard.markers_written(job)
            self.after_call(self.active_handle(index))

        self.markers.add(job, is_current=is_current, on_written=on_written)

    def _serving(self, index: int, shard: TransactionCoordinatorShard) -> bool:
        return self.is_active(index) and self.active_handle(index).shard is shard

    def partition_for(self, transactional_id: str) -> int:
        return transaction_partition(transactional_id, self.num_partitions)

    # --- requests -----------------------------------------------------------------------------------------

    async def call(
        self, transactional_id: str, operation: Callable[[TransactionCoordinatorShard], T | Reply[T]]
    ) -> T:
        """Run `operation` on the shard of `transactional_id`. Raises KafkaError (NOT_COORDINATOR, ...)."""
        return await self.call_on(self.partition_for(transactional_id), operation)

    async def init_producer_id(
        self, transactional_id: str, timeout_ms: int, producer_id: int, producer_epoch: int
    ) -> InitProducerIdResult:
        self.active_handle(self.partition_for(transactional_id))  # NOT_COORDINATOR before waiting for ids
        try:
            await self.broker.producer_ids.ready()
        except Exception:
            log.exception("no producer id block for transactional id %r", transactional_id)
            return InitProducerIdResult(ErrorCode.coordinator_not_available)
        return await self.call(
            transactional_id,
            lambda shard: shard.init_producer_id(
                transactional_id, timeout_ms, self.broker.producer_ids.generate, producer_id, producer_epoch
            ),
        )

    async def add_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: list[tuple[str, int]]
    ) -> ErrorCode:
        return await self.call(
            transactional_id,
            lambda s: s.add_partitions(transactional_id, producer_id, producer_epoch, partitions),
        )

    async def verify_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: list[tuple[str, int]]
    ) -> dict[tuple[str, int], ErrorCode]:
        return await self.call(
            transactional_id,
            lambda s: s.verify_partitions(transactional_id, producer_id, producer_epoch, partitions),
        )

    def verify_partitions_now(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: list[tuple[str, int]]
    ) -> dict[tuple[str, int], ErrorCode]:
        """`verify_partitions` without a turn of the event loop: a read of the shard, which never waits.
        Raises KafkaError (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, ...)."""
        handle = self.active_handle(self.partition_for(transactional_id))
        return handle.shard.verify_partitions(transactional_id, producer_id, producer_epoch, partitions)

    async def end_transaction(
        self, transactional_id: str, producer_id: int, producer_epoch: int, committed: bool
    ) -> ErrorCode:
        return await self.call(
            transactional_id,
            lambda s: s.end_transaction(transactional_id, producer_id, producer_epoch, committed),
        )

    def describe(self, transactional_id: str) -> TransactionDescription:
        try:
            handle = self.active_handle(self.partition_for(transactional_id))
        except KafkaError as exc:
            return TransactionDescription(exc.error_code, transactional_id)
        described = handle.shard.describe(transactional_id)
        job = handle.shard.pending_markers(transactional_id)
        outstanding = self.markers.outstanding(job) if job is not None else None
        if outstanding is not None:
            # As Kafka: a transaction being completed lists only the partitions still without their marker.
            described = dataclasses.replace(described, partitions=tuple(sorted(outstanding)))
        return described

    def list_transactions(
        self, state_names: list[str], producer_ids: list[int], min_duration_ms: int
    ) -> tuple[ErrorCode, list[str], list[TransactionListing]]:
        """(error, unknown state filters, transactions) over every shard this broker serves."""
        if self.is_loading():
            return ErrorCode.coordinator_load_in_progress, [], []
        states, unknown = [], []
        for name in state_names:
            state = TransactionState.from_name(name)
            if state is None:
                unknown.append(name)
            else:
                states.append(state)
        if state_names and not states:
            return ErrorCode.none, unknown, []  # only unknown states asked for: nothing matches
        listings = [
            listing
            for per_shard in self.call_all(
                lambda s: s.list_transactions(states, producer_ids, min_duration_ms)
            )
            for listing in per_shard
        ]
        return ErrorCode.none, unknown, listings

    # --- markers ------------------------------------------------------------------------------------------

    def _leader_of(self, topic: str, partition: int) -> int | None:
        info = self.broker.metadata.topics().get(topic)
        if info is None or partition not in info.partitions:
            return None
        leader = info.partitions[partition].leader
        if leader < 0 or all(b.broker_id != leader for b in self.broker.metadata.brokers()):
            return LEADER_UNKNOWN
        return leader

    async def _write_markers(
        self, broker_id: int, markers: list[TxnMarker]
    ) -> list[dict[tuple[str, int], ErrorCode]]:
        if broker_id == self.broker.broker_id:
            # One call per marker (C2): it answers per partition, and two producers' markers may share one.
            return list(
                await asyncio.gather(*(write_txn_markers(self.broker, [marker]) for marker in markers))
            )
        node = next((b for b in self.broker.metadata.brokers() if b.broker_id == broker_id), None)
        if node is None:
            raise ConnectionError(f"broker {broker_id} is not alive")
        request = wtm_request.WriteTxnMarkersRequest(
            markers=tuple(
                wtm_request.WritableTxnMarker(
                    producer_id=m.producer_id,
                    producer_epoch=m.producer_epoch,
                    transaction_result=m.committed,
                    topics=tuple(
                        wtm_request.WritableTxnMarkerTopic(name=topic, partition_indexes=tuple(indexes))
                        for topic, indexes in _by_topic(m.partitions).items()
                    ),
                    coordinator_epoch=m.coordinator_epoch,
                )
                for m in markers
            )
        )
        response = await self._client.send_to(broker_id, node.host, node.port, request)
        by_producer: dict[int, dict[tuple[str, int], ErrorCode]] = {}
        for result in response.markers:
            errors = by_producer.setdefault(result.producer_id, {})
            for topic in result.topics:
                for p in topic.partitions:
                    errors[(topic.name, p.partition_index)] = p.error_code
        return [by_producer.get(m.producer_id, {}) for m in markers]


def _by_topic(partitions: list[tuple[str, int]]) -> dict[str, list[int]]:
    by_topic: dict[str, list[int]] = {}
    for topic, index in partitions:
        by_topic.setdefault(topic, []).append(index)
    return by_topic
