"""AlterPartition in the controller: a leader asks to change its partition's ISR (Kafka's
tryProcessAlterPartition). The request names the leader epoch and the partition epoch (the state znode's version)
it is based on; the controller accepts it only if both are current, writes it with compare-and-set, answers with
the new state (its partition epoch), and tells every broker with UpdateMetadata."""

from __future__ import annotations

import datetime
import logging
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker_runtime.cluster.zk_paths import LeaderAndIsr
from broker_runtime.controller.context import TopicPartition
from broker_runtime.protocol.messages import make, response_module

if TYPE_CHECKING:
    from broker_runtime.controller.controller import Controller

log = logging.getLogger(__name__)

ALTER_PARTITION = 56
_ZERO = datetime.timedelta(0)


async def process_alter_partition(c: Controller, request: Any) -> tuple[Any, list[TopicPartition]]:
    """Returns the response and the partitions whose ISR changed."""
    version = int(request.__version__)
    types = response_module(ALTER_PARTITION, version)
    if not c.is_active:
        return make(
            types.AlterPartitionResponse, throttle_time=_ZERO, error_code=ErrorCode.not_controller, topics=()
        ), []
    known_epoch = c.ctx.broker_epoch(request.broker_id)
    if known_epoch is None or known_epoch != request.broker_epoch:
        log.info(
            "ignoring AlterPartition from broker %d at epoch %d (registered epoch %s)", request.broker_id,
            request.broker_epoch, known_epoch,
        )  # fmt: skip
        return make(
            types.AlterPartitionResponse,
            throttle_time=_ZERO,
            error_code=ErrorCode.stale_broker_epoch,
            topics=(),
        ), []

    outcomes: dict[TopicPartition, ErrorCode | LeaderAndIsr] = {}
    unknown_ids: list[tuple[Any, int]] = []
    requested: dict[TopicPartition, LeaderAndIsr] = {}
    for topic in request.topics:
        name = c.ctx.topic_name(topic.topic_id) if topic.topic_id else None
        for p in topic.partitions:
            if name is None:
                unknown_ids.append((topic.topic_id, p.partition_index))
                continue
            isr = (
                tuple(b.broker_id for b in p.new_isr_with_epochs)
                if hasattr(p, "new_isr_with_epochs")
                else tuple(p.new_isr)
            )
            requested[(name, p.partition_index)] = LeaderAndIsr(
                request.broker_id,
                p.leader_epoch,
                isr,
                c.ctx.epoch,
                p.partition_epoch,
                p.leader_recovery_state,
            )

    to_write: dict[TopicPartition, LeaderAndIsr] = {}
    for tp, new in requested.items():
        current = c.ctx.leadership.get(tp)
        if current is None:
            outcomes[tp] = ErrorCode.unknown_topic_or_partition
        elif new.partition_epoch > current.partition_epoch or new.leader_epoch > current.leader_epoch:
            # The leader knows a newer state than we do: we are probably not the controller any more.
            outcomes[tp] = ErrorCode.not_controller
        elif new.leader_epoch < current.leader_epoch:
            outcomes[tp] = ErrorCode.fenced_leader_epoch
        elif (new.leader, set(new.isr), new.leader_recovery_state) == (
            current.leader, set(current.isr), current.leader_recovery_state
        ):  # fmt: skip
            outcomes[tp] = current  # already so: answer the same (idempotent retries)
        elif new.partition_epoch < current.partition_epoch:
            outcomes[tp] = ErrorCode.invalid_update_version
        elif (new.leader_recovery_state == 1 and len(new.isr) > 1) or (
            current.leader_recovery_state == 0 and new.leader_recovery_state == 1
        ):
            outcomes[tp] = ErrorCode.invalid_request
        elif set(new.isr) - c.ctx.live_broker_ids:
            log.info(
                "rejecting AlterPartition for %s-%d: ISR %s names brokers that are not alive", tp[0], tp[1],
                list(new.isr),
            )  # fmt: skip
            outcomes[tp] = ErrorCode.ineligible_replica if version > 1 else ErrorCode.operation_not_attempted
        else:
            to_write[tp] = new

    changed = []
    if to_write:
        done, retry = await c.store.update_leader_and_isr(to_write)
        for tp in retry:
            outcomes[tp] = ErrorCode.invalid_update_version
        for tp, outcome in done.items():
            if isinstance(outcome, LeaderAndIsr):
                c.ctx.leadership[tp] = outcome
                outcomes[tp] = outcome
                changed.append(tp)
                log.info(
                    "ISR of %s-%d is now %s (by leader %d)", tp[0], tp[1], list(outcome.isr), outcome.leader
                )
            else:
                log.error("cannot write the ISR of %s-%d: %r", tp[0], tp[1], outcome)
                outcomes[tp] = ErrorCode.unknown_server_error
    if requested:
        c.send_update_metadata(c.ctx.live_or_shutting_down_ids, list(requested))

    by_topic: dict[Any, list[Any]] = {}
    for (topic, index), outcome in sorted(outcomes.items()):
        entries = by_topic.setdefault(c.ctx.topic_ids.get(topic), [])
        if isinstance(outcome, LeaderAndIsr):
            entries.append(make(
                types.PartitionData, partition_index=index, error_code=ErrorCode.none, leader_id=outcome.leader,
                leader_epoch=outcome.leader_epoch, isr=outcome.isr, leader_recovery_state=outcome.leader_recovery_state,
                partition_epoch=outcome.partition_epoch,
            ))  # fmt: skip
        else:
            entries.append(make(
                types.PartitionData, partition_index=index, error_code=outcome, leader_id=-1, leader_epoch=-1,
                isr=(), leader_recovery_state=0, partition_epoch=-1,
            ))  # fmt: skip
    for topic_id, index in unknown_ids:
        by_topic.setdefault(topic_id, []).append(make(
            types.PartitionData, partition_index=index, error_code=ErrorCode.unknown_topic_id, leader_id=-1,
            leader_epoch=-1, isr=(), leader_recovery_state=0, partition_epoch=-1,
        ))  # fmt: skip
    topics = tuple(make(types.TopicData, topic_id=tid, partitions=tuple(ps)) for tid, ps in by_topic.items())
    return make(
        types.AlterPartitionResponse, throttle_time=_ZERO, error_code=ErrorCode.none, topics=topics
    ), changed
