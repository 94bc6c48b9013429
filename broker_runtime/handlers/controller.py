"""The controller's APIs. From the controller to brokers: LeaderAndIsr, UpdateMetadata, StopReplica. From brokers
to the controller: ControlledShutdown, AlterPartition. From admin clients to the controller: ElectLeaders,
AlterPartitionReassignments, ListPartitionReassignments (a broker that is not the controller answers
NOT_CONTROLLER, and clients ask the controller named in Metadata, as with Kafka in ZooKeeper mode).

A standalone broker is its own controller and the only replica of everything: elections are never needed,
there is nothing to reassign, and the inter-broker requests are refused."""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from typing import Any

from kio.schema.errors import ErrorCode

from broker_runtime.errors import KafkaError
from broker_runtime.handlers.context import RequestContext
from broker_runtime.protocol import inter_broker as ib
from broker_runtime.protocol.messages import make

_ZERO = datetime.timedelta(0)
PREFERRED = 0


def _member(ctx: RequestContext):
    return ctx.broker.member


# --- controller -> broker -------------------------------------------------------------------------------------


async def handle_leader_and_isr(ctx: RequestContext, request: ib.LeaderAndIsrRequest) -> Any:
    member = _member(ctx)
    if member is None:
        return ib.LeaderAndIsrResponse(error_code=ErrorCode.stale_controller_epoch, topics=())
    return await member.leader_and_isr(request)


async def handle_update_metadata(ctx: RequestContext, request: ib.UpdateMetadataRequest) -> Any:
    member = _member(ctx)
    if member is None:
        return ib.UpdateMetadataResponse(error_code=ErrorCode.stale_controller_epoch)
    return await member.update_metadata(request)


async def handle_stop_replica(ctx: RequestContext, request: ib.StopReplicaRequest) -> Any:
    member = _member(ctx)
    if member is None:
        return ib.StopReplicaResponse(error_code=ErrorCode.stale_controller_epoch, partition_errors=())
    return await member.stop_replica(request)


# --- broker -> controller -------------------------------------------------------------------------------------


async def handle_controlled_shutdown(ctx: RequestContext, request: ib.ControlledShutdownRequest) -> Any:
    member = _member(ctx)
    if member is None:
        return ib.ControlledShutdownResponse(error_code=ErrorCode.not_controller, remaining_partitions=())
    try:
        remaining = await member.controller.controlled_shutdown(request.broker_id, request.broker_epoch)
    except KafkaError as exc:
        return ib.ControlledShutdownResponse(error_code=exc.error_code, remaining_partitions=())
    return ib.ControlledShutdownResponse(
        error_code=ErrorCode.none,
        remaining_partitions=tuple(
            ib.RemainingPartition(topic_name=t, partition_index=p) for t, p in sorted(remaining)
        ),
    )


async def handle_alter_partition(ctx: RequestContext, request: Any) -> Any:
    member = _member(ctx)
    types = ctx.response_types()
    try:
        if member is None:
            raise KafkaError(ErrorCode.not_controller)
        return await member.controller.alter_partition(request)
    except KafkaError as exc:
        return make(types.AlterPartitionResponse, throttle_time=_ZERO, error_code=exc.error_code, topics=())


# --- admin clients -> controller ------------------------------------------------------------------------------


def _partitions(topics: Iterable[Any] | None, field: str) -> set[tuple[str, int]] | None:
    if topics is None:
        return None
    return {(t.topic if hasattr(t, "topic") else t.name, p) for t in topics for p in getattr(t, field)}


async def handle_elect_leaders(ctx: RequestContext, request: Any) -> Any:
    types = ctx.response_types()
    election_type = getattr(request, "election_type", PREFERRED)
    wanted = _partitions(request.topic_partitions, "partitions")
    member = _member(ctx)
    top_error = ErrorCode.none
    try:
        if member is None:
            results = _standalone_elections(ctx, wanted)
        else:
            results = await member.controller.elect_leaders(wanted, election_type)
    except KafkaError as exc:
        top_error = exc.error_code
        results = {tp: (exc.error_code, exc.message) for tp in wanted or ()}
    if top_error != ErrorCode.none and ctx.api_version >= 1:
        results = {}
    by_topic: dict[str, list[Any]] = {}
    for (topic, index), (code, message) in sorted(results.items()):
        by_topic.setdefault(topic, []).append(
            make(types.PartitionResult, partition_id=index, error_code=code, error_message=message)
        )
    return make(
        types.ElectLeadersResponse, throttle_time=_ZERO, error_code=top_error,
        replica_election_results=tuple(
            make(types.ReplicaElectionResult, topic=t, partition_result=tuple(ps)) for t, ps in by_topic.items()
        ),
    )  # fmt: skip


def _standalone_elections(
    ctx: RequestContext, wanted: set[tuple[str, int]] | None
) -> dict[tuple[str, int], tuple[ErrorCode, str | None]]:
    topics = ctx.broker.metadata.topics()
    if wanted is None:  # "all partitions": every one already has its only possible leader
        return {}
    results = {}
    for topic, index in wanted:
        info = topics.get(topic)
        if info is None or index not in info.partitions:
            results[(topic, index)] = (ErrorCode.unknown_topic_or_partition, "The partition does not exist.")
        else:
            results[(topic, index)] = (ErrorCode.election_not_needed, None)
    return results


async def handle_alter_partition_reassignments(ctx: RequestContext, request: Any) -> Any:
    types = ctx.response_types()
    member = _member(ctx)
    wanted = {
        (t.name, p.partition_index): (None if p.replicas is None else tuple(p.replicas))
        for t in request.topics
        for p in t.partitions
    }
    try:
        if member is None:
            results = _standalone_reassignments(ctx, wanted)
        else:
            results = await member.controller.alter_partition_reassignments(wanted)
    except KafkaError as exc:
        return make(
            types.AlterPartitionReassignmentsResponse, throttle_time=_ZERO, error_code=exc.error_code,
            error_message=exc.message, responses=(),
        )  # fmt: skip
    by_topic: dict[str, list[Any]] = {}
    for (topic, index), (code, message) in sorted(results.items()):
        by_topic.setdefault(topic, []).append(
            make(
                types.ReassignablePartitionResponse,
                partition_index=index,
                error_code=code,
                error_message=message,
            )
        )
    return make(
        types.AlterPartitionReassignmentsResponse, throttle_time=_ZERO, error_code=ErrorCode.none, error_message=None,
        responses=tuple(
            make(types.ReassignableTopicResponse, name=t, partitions=tuple(ps)) for t, ps in by_topic.items()
        ),
    )  # fmt: skip


def _standalone_reassignments(
    ctx: RequestContext, wanted: dict[tuple[str, int], tuple[int, ...] | None]
) -> dict[tuple[str, int], tuple[ErrorCode, str | None]]:
    broker = ctx.broker
    topics = broker.metadata.topics()
    results = {}
    for (topic, index), target in wanted.items():
        info = topics.get(topic)
        if info is None or index not in info.partitions:
            results[(topic, index)] = (ErrorCode.unknown_topic_or_partition, "The partition does not exist.")
        elif target is None:
            results[(topic, index)] = (ErrorCode.no_reassignment_in_progress, None)
        elif tuple(target) == (broker.broker_id,):
            results[(topic, index)] = (ErrorCode.none, None)  # already there: done at once
        else:
            results[(topic, index)] = (
                ErrorCode.invalid_replica_assignment,
                f"Replica assignment has brokers that are not alive. Replica list: {list(target)}, "
                f"live broker list: [{broker.broker_id}]",
            )
    return results


async def handle_list_partition_reassignments(ctx: RequestContext, request: Any) -> Any:
    types = ctx.response_types()
    member = _member(ctx)
    try:
        listed = {} if member is None else await member.controller.list_partition_reassignments(
            _partitions(request.topics, "partition_indexes")
        )  # fmt: skip
    except KafkaError as exc:
        return make(
            types.ListPartitionReassignmentsResponse, throttle_time=_ZERO, error_code=exc.error_code,
            error_message=exc.message, topics=(),
        )  # fmt: skip
    by_topic: dict[str, list[Any]] = {}
    for (topic, index), a in sorted(listed.items()):
        by_topic.setdefault(topic, []).append(
            make(types.OngoingPartitionReassignment, partition_index=index, replicas=a.replicas,
                 adding_replicas=a.adding, removing_replicas=a.removing)
        )  # fmt: skip
    return make(
        types.ListPartitionReassignmentsResponse, throttle_time=_ZERO, error_code=ErrorCode.none, error_message=None,
        topics=tuple(
            make(types.OngoingTopicReassignment, name=t, partitions=tuple(ps)) for t, ps in by_topic.items()
        ),
    )  # fmt: skip


CONTROLLER_HANDLERS = {
    ib.LEADER_AND_ISR: handle_leader_and_isr,
    ib.STOP_REPLICA: handle_stop_replica,
    ib.UPDATE_METADATA: handle_update_metadata,
    ib.CONTROLLED_SHUTDOWN: handle_controlled_shutdown,
    43: handle_elect_leaders,
    45: handle_alter_partition_reassignments,
    46: handle_list_partition_reassignments,
    56: handle_alter_partition,
}
CONTROLLER_API_VERSIONS = {
    **ib.API_VERSIONS,
    43: (0, 2),  # ElectLeaders
    45: (0, 0),  # AlterPartitionReassignments (Kafka 3.9's)
    46: (0, 0),  # ListPartitionReassignments
    56: (2, 3),  # AlterPartition (topic ids; kio has no older versions)
}
