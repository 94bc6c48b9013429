"""Group APIs on the wire: FindCoordinator, JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
OffsetFetch, OffsetDelete, DescribeGroups, ListGroups, DeleteGroups.

Each handler turns one wire version of a request into the coordinator shard's version-independent arguments
(`broker_runtime.group.api`), runs it through the group runtime, and builds that version's response. Errors a
group request can get before it reaches a shard (Kafka's validateGroupStatus) are applied here:
INVALID_GROUP_ID, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR, with Kafka's
per-API twists (a SyncGroup during a load answers REBALANCE_IN_PROGRESS, a Heartbeat answers NONE).
"""

from __future__ import annotations

import dataclasses
import datetime
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from kio.schema.errors import ErrorCode

from broker_runtime.errors import KafkaError
from broker_runtime.group.api import (
    CommitPartition,
    HeartbeatArgs,
    JoinGroupArgs,
    JoinGroupResult,
    LeavingMember,
    OffsetCommitArgs,
    OffsetFetchResult,
    SyncGroupArgs,
    SyncGroupResult,
    TopicPartition,
    TxnOffsetCommitArgs,
)
from broker_runtime.group.offset_metadata_manager import offset_append_error
from broker_runtime.group.records import OFFSETS_TOPIC, partition_for
from broker_runtime.handlers.context import RequestContext
from broker_runtime.protocol.apis import ApiKey
from broker_runtime.protocol.messages import make
from broker_runtime.protocol.operations import GROUP_OPERATIONS, OMITTED
from broker_runtime.txn.producer_state import NO_GUARD, NO_SEQUENCE, VerificationGuard

log = logging.getLogger(__name__)

_ZERO = datetime.timedelta(0)
_MS = datetime.timedelta(milliseconds=1)
TRANSACTION_STATE_TOPIC = "__transaction_state"
GROUP_KEY_TYPE, TRANSACTION_KEY_TYPE, SHARE_KEY_TYPE = 0, 1, 2
SHARE_KEY_TYPE_SINCE = 6  # FindCoordinator v6 knows share groups (KIP-932)
# Every group of the classic coordinator is a classic group (ListGroups v5 type filter and GroupType).
CLASSIC_GROUP_TYPE = "classic"

# Kafka's default texts (Errors.message()) for the errors FindCoordinator reports with a message.
_MESSAGES = {
    ErrorCode.coordinator_not_available: "The coordinator is not available.",
    ErrorCode.not_coordinator: "This is not the correct coordinator.",
    ErrorCode.coordinator_load_in_progress: "The coordinator is loading and hence can't process requests.",
    ErrorCode.invalid_request: "This most likely occurs because of a request being malformed by the client "
    "library or the message was sent to an incompatible broker. See the broker logs for more details.",
}


def _ms(value: Any) -> int:
    return round(value / _MS) if isinstance(value, datetime.timedelta) else int(value)


def _runtime(ctx: RequestContext):
    runtime = getattr(ctx.broker, "group_coordinator", None)
    if runtime is None:
        raise KafkaError(ErrorCode.coordinator_not_available, "group coordination is not running")
    return runtime


async def _run(ctx: RequestContext, group_id: str, operation: Callable[[Any], Any]) -> Any:
    """Run a shard operation for `group_id`; KafkaError for group-status errors, UNKNOWN_SERVER_ERROR on bugs."""
    runtime = _runtime(ctx)
    try:
        return await runtime.call(group_id, operation)
    except KafkaError:
        raise
    except Exception:
        log.exception("group coordinator failed on a request for group %r", group_id)
        raise KafkaError(ErrorCode.unknown_server_error) from None


# --- FindCoordinator ---------------------------------------------------------------------------------------


def _coordinator_for(ctx: RequestContext, key_type: int, key: str) -> tuple[ErrorCode, int, str, int]:
    broker = ctx.broker
    if key_type == GROUP_KEY_TYPE:
        runtime = getattr(broker, "group_coordinator", None)
        if runtime is None:
            return ErrorCode.coordinator_not_available, -1, "", -1
        if not runtime.ensure_offsets_topic():
            return ErrorCode.coordinator_not_available, -1, "", -1  # being created: the client retries
        topic_name = OFFSETS_TOPIC
    elif key_type == TRANSACTION_KEY_TYPE:
        txn_runtime = getattr(broker, "txn_coordinator", None)
        if txn_runtime is None or not txn_runtime.ensure_topic():
            return ErrorCode.coordinator_not_available, -1, "", -1  # being created: the client retries
        topic_name = TRANSACTION_STATE_TOPIC
    elif key_type == SHARE_KEY_TYPE and ctx.api_version >= SHARE_KEY_TYPE_SINCE:
        # Share groups (KIP-932) are not built, as in Kafka 3.9: no coordinator to find.
        return ErrorCode.coordinator_not_available, -1, "", -1
    else:
        return ErrorCode.invalid_request, -1, "", -1
    topic = broker.metadata.topics().get(topic_name)
    if topic is None:
        return ErrorCode.coordinator_not_available, -1, "", -1
    assignment = topic.partitions.get(partition_for(key, len(topic.partitions)))
    if assignment is None or assignment.leader < 0:
        return ErrorCode.coordinator_not_available, -1, "", -1
    node = next((b for b in broker.metadata.brokers() if b.broker_id == assignment.leader), None)
    if node is None:
        return ErrorCode.coordinator_not_available, -1, "", -1
    return ErrorCode.none, node.broker_id, node.host, node.port


async def handle_find_coordinator(ctx: RequestContext, request) -> object:
    types = ctx.response_types()
    key_type = getattr(request, "key_type", GROUP_KEY_TYPE)
    if ctx.api_version >= 4:
        coordinators = []
        for key in request.coordinator_keys:
            error, node_id, host, port = _coordinator_for(ctx, key_type, key)
            coordinators.append(
                make(
                    types.Coordinator, key=key, node_id=node_id, host=host, port=port, error_code=error,
                    error_message=None,
                )
            )  # fmt: skip
        return make(types.FindCoordinatorResponse, throttle_time=_ZERO, coordinators=tuple(coordinators))
    error, node_id, host, port = _coordinator_for(ctx, key_type, request.key)
    return make(
        types.FindCoordinatorResponse, throttle_time=_ZERO, error_code=error,
        error_message=_MESSAGES.get(error) if error is not ErrorCode.none else None,
        node_id=node_id, host=host, port=port,
    )  # fmt: skip


# --- JoinGroup, SyncGroup, Heartbeat, LeaveGroup -----------------------------------------------------------


async def handle_join_group(ctx: RequestContext, request) -> object:
    version = ctx.api_version
    session_ms = _ms(request.session_timeout)
    args = JoinGroupArgs(
        group_id=request.group_id,
        member_id=request.member_id,
        protocol_type=request.protocol_type,
        protocols=tuple((p.name, bytes(p.metadata)) for p in request.protocols),
        session_timeout_ms=session_ms,
        # v0 had one timeout for both.
        rebalance_timeout_ms=_ms(request.rebalance_timeout) if version >= 1 else session_ms,
        group_instance_id=getattr(request, "group_instance_id", None),
        client_id=ctx.header.client_id or "",
        client_host="/" + ctx.client_host,
        require_known_member_id=version >= 4,
        supports_skipping_assignment=version >= 9,
        reason=getattr(request, "reason", None),
    )
    try:
        result = await _run(ctx, args.group_id, lambda shard: shard.join_group(args))
    except KafkaError as exc:
        result = JoinGroupResult.failure(request.member_id, exc.error_code)
    return _join_response(ctx, result)


def _join_response(ctx: RequestContext, result: JoinGroupResult) -> object:
    types = ctx.response_types()
    members = tuple(
        make(types.JoinGroupResponseMember, member_id=m.member_id, group_instance_id=m.group_instance_id,
             metadata=m.metadata)
        for m in result.members
    )  # fmt: skip
    # Before v7 the protocol name is not nullable: Kafka sends "" when there is none.
    protocol_name = result.protocol_name if ctx.api_version >= 7 else (result.protocol_name or "")
    return make(
        types.JoinGroupResponse, throttle_time=_ZERO, error_code=result.error, generation_id=result.generation_id,
        protocol_type=result.protocol_type, protocol_name=protocol_name, leader=result.leader,
        skip_assignment=result.skip_assignment, member_id=result.member_id, members=members,
    )  # fmt: skip


async def handle_sync_group(ctx: RequestContext, request) -> object:
    types = ctx.response_types()
    protocol_type = getattr(request, "protocol_type", None)
    protocol_name = getattr(request, "protocol_name", None)
    if ctx.api_version >= 5 and (protocol_type is None or protocol_name is None):
        # From v5 both are mandatory (KafkaApis: areMandatoryProtocolTypeAndNamePresent).
        result = SyncGroupResult(ErrorCode.inconsistent_group_protocol)
    else:
        args = SyncGroupArgs(
            group_id=request.group_id,
            generation_id=request.generation_id,
            member_id=request.member_id,
            group_instance_id=getattr(request, "group_instance_id", None),
            protocol_type=protocol_type,
            protocol_name=protocol_name,
            assignments={a.member_id: bytes(a.assignment) for a in request.assignments},
        )
        try:
            result = await _run(ctx, args.group_id, lambda shard: shard.sync_group(args))
        except KafkaError as exc:
            error = exc.error_code
            if error is ErrorCode.coordinator_load_in_progress:
                # The rebalance in progress was lost with the old coordinator; older clients do not expect
                # COORDINATOR_LOAD_IN_PROGRESS here, and REBALANCE_IN_PROGRESS makes them rejoin.
                error = ErrorCode.rebalance_in_progress
            result = SyncGroupResult(error)
    return make(
        types.SyncGroupResponse, throttle_time=_ZERO, error_code=result.error, protocol_type=result.protocol_type,
        protocol_name=result.protocol_name, assignment=result.assignment,
    )  # fmt: skip


async def handle_heartbeat(ctx: RequestContext, request) -> object:
    types = ctx.response_types()
    args = HeartbeatArgs(
        request.group_id,
        request.generation_id,
        request.member_id,
        getattr(request, "group_instance_id", None),
    )
    try:
        error = await _run(ctx, args.group_id, lambda shard: shard.heartbeat(args))
    except KafkaError as exc:
        # While the coordinator loads, heartbeats succeed blindly (Kafka): members keep their sessions.
        error = ErrorCode.none if exc.error_code is ErrorCode.coordinator_load_in_progress else exc.error_code
    return make(types.HeartbeatResponse, throttle_time=_ZERO, error_code=error)


async def handle_leave_group(ctx: RequestContext, request) -> object:
    types = ctx.response_types()
    if ctx.api_version >= 3:
        leaving = [
            LeavingMember(m.member_id, m.group_instance_id, getattr(m, "reason", None))
            for m in request.members
        ]
    else:
        leaving = [LeavingMember(request.member_id)]
    try:
        result = await _run(ctx, request.group_id, lambda shard: shard.leave_group(request.group_id, leaving))
        top_error, members = result.error, result.members
    except KafkaError as exc:
        top_error, members = exc.error_code, ()
    if ctx.api_version < 3:
        # One member, one error: Kafka reports the member's error at the top level.
        error = top_error
        if error is ErrorCode.none:
            error = next((m.error for m in members if m.error is not ErrorCode.none), ErrorCode.none)
        return make(types.LeaveGroupResponse, throttle_time=_ZERO, error_code=error)
    return make(
        types.LeaveGroupResponse, throttle_time=_ZERO, error_code=top_error,
        members=tuple(
            make(types.MemberResponse, member_id=m.member_id, group_instance_id=m.group_instance_id,
                 error_code=m.error)
            for m in members
        ),
    )  # fmt: skip


# --- offsets -----------------------------------------------------------------------------------------------


def _partition_exists(ctx: RequestContext, topic: str, partition: int) -> bool:
    info = ctx.broker.metadata.topics().get(topic)
    return info is not None and partition in info.partitions


def _commit_partitions(
    ctx: RequestContext, request
) -> tuple[list[tuple[str, int]], dict[tuple[str, int], ErrorCode], list[CommitPartition]]:
    """The partitions an OffsetCommit or TxnOffsetCommit names, in request order; those of unknown topics or
    partitions get their error at once, the others are returned for the coordinator to commit."""
    errors: dict[tuple[str, int], ErrorCode] = {}
    order: list[tuple[str, int]] = []
    valid: list[CommitPartition] = []
    for t in request.topics:
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            order.append(tp)
            if not _partition_exists(ctx, t.name, p.partition_index):
                errors[tp] = ErrorCode.unknown_topic_or_partition
                continue
            valid.append(
                CommitPartition(
                    t.name, p.partition_index, p.committed_offset,
                    getattr(p, "committed_leader_epoch", -1), p.committed_metadata,
                )
            )  # fmt: skip
    return order, errors, valid


def _commit_response_topics(
    topic_type, partition_type, order: list[tuple[str, int]], errors: dict[tuple[str, int], ErrorCode]
) -> tuple:
    """One response topic a topic, its partitions in request order (a partition named twice answered once)."""
    by_topic: dict[str, list] = {}
    for topic, partition in dict.fromkeys(order):
        by_topic.setdefault(topic, []).append(
            make(partition_type, partition_index=partition, error_code=errors[(topic, partition)])
        )
    return tuple(make(topic_type, name=t, partitions=tuple(ps)) for t, ps in by_topic.items())


async def handle_offset_commit(ctx: RequestContext, request) -> object:
    types = ctx.response_types()
    order, errors, valid = _commit_partitions(ctx, request)
    if valid:
        retention = getattr(request, "retention_time", None)
        args = OffsetCommitArgs(
            group_id=request.group_id,
            offsets=tuple(valid),
            generation_id=request.generation_id_or_member_epoch,
            member_id=request.member_id,
            group_instance_id=getattr(request, "group_instance_id", None),
            retention_time_ms=_ms(retention) if retention is not None else -1,
        )
        try:
            results = await _run(ctx, args.group_id, lambda shard: shard.commit_offsets(args))
            errors.update(((r.topic, r.partition), r.error) for r in results)
        except KafkaError as exc:
            errors.update(((p.topic, p.partition), exc.error_code) for p in valid)
    return make(
        types.OffsetCommitResponse,
        throttle_time=_ZERO,
        topics=_commit_response_topics(
            types.OffsetCommitResponseTopic, types.OffsetCommitResponsePartition, order, errors
        ),
    )


async def handle_txn_offset_commit(ctx: RequestContext, request) -> object:
    """TxnOffsetCommit v0-4: offsets a transactional producer commits for a group, pending until its transaction
    ends (`OffsetMetadataManager.commit_transactional_offsets`). Member fields come with v3 (KIP-447)."""
    types = ctx.response_types()
    order, errors, valid = _commit_partitions(ctx, request)
    if valid:
        args = TxnOffsetCommitArgs(
            group_id=request.group_id,
            transactional_id=request.transactional_id,
            producer_id=request.producer_id,
            producer_epoch=request.producer_epoch,
            offsets=tuple(valid),
            generation_id=getattr(request, "generation_id", -1),
            member_id=getattr(request, "member_id", ""),
            group_instance_id=getattr(request, "group_instance_id", None),
        )
        try:
            guard = await _verify_txn_offset_commit(ctx, args)
            if guard is not None:
                args = dataclasses.replace(args, verification_guard=guard)
            results = await _run(ctx, args.group_id, lambda shard: shard.commit_transactional_offsets(args))
            errors.update(((r.topic, r.partition), r.error) for r in results)
        except KafkaError as exc:
            errors.update(((p.topic, p.partition), exc.error_code) for p in valid)
    return make(
        types.TxnOffsetCommitResponse,
        throttle_time=_ZERO,
        topics=_commit_response_topics(
            types.TxnOffsetCommitResponseTopic, types.TxnOffsetCommitResponsePartition, order, errors
        ),
    )


async def _verify_txn_offset_commit(
    ctx: RequestContext, args: TxnOffsetCommitArgs
) -> VerificationGuard | None:
    """With transaction verification on, the group's offsets partition must be in the producer's transaction
    before its offsets are written (Kafka 3.9's GroupCoordinator.handleTxnCommitOffsets): returns the guard the
    append presents, None when verification is off; raises KafkaError with the commit's error otherwise."""
    broker = ctx.broker
    verifier = broker.txn_verifier
    if verifier is None or not verifier.enabled() or args.producer_id < 0 or not args.group_id:
        return None
    runtime = _runtime(ctx)
    offsets_partition = (OFFSETS_TOPIC, runtime.partition_for(args.group_id))
    try:
        guard = broker.replica_manager.start_transaction_verification(
            *offsets_partition, args.producer_id, NO_SEQUENCE, args.producer_epoch
        )
    except KafkaError as exc:
        raise KafkaError(offset_append_error(exc.error_code), exc.message) from None
    if guard is NO_GUARD:
        return guard  # the transaction is already open in that partition
    unverified = await verifier.verify(
        args.transactional_id, args.producer_id, args.producer_epoch, [offsets_partition],
        generic_errors=ctx.api_version >= 4,
    )  # fmt: skip
    error = unverified.get(offsets_partition)
    if error is not None:
        raise KafkaError(offset_append_error(error), f"transaction verification failed: {error.name}")
    return guard


async def _fetch_group(
    ctx: RequestContext, group_id: str, topics, require_stable: bool
) -> tuple[ErrorCode, OffsetFetchResult | None, list[TopicPartition] | None]:
    wanted = (
        None if topics is None else [TopicPartition(t.name, p) for t in topics for p in t.partition_indexes]
    )
    try:
        result = await _run(
            ctx, group_id, lambda shard: shard.fetch_offsets(group_id, wanted, require_stable)
        )
        return ErrorCode.none, result, wanted
    except KafkaError as exc:
        return exc.error_code, None, wanted


def _fetch_topics(types, names: tuple[str, str, str], result, wanted, group_error: ErrorCode) -> tuple:
    topic_cls, partition_cls = getattr(types, names[0]), getattr(types, names[1])
    if result is not None:
        rows = [
            (o.topic, o.partition, o.offset, o.leader_epoch, o.metadata, o.error) for o in result.partitions
        ]
    else:
        # A group-level error: versions without a group error field carry it per partition (as Kafka does).
        rows = [(tp.topic, tp.partition, -1, -1, "", group_error) for tp in wanted or ()]
    by_topic: dict[str, list] = {}
    for topic, partition, offset, epoch, metadata, error in rows:
        by_topic.setdefault(topic, []).append(
            make(partition_cls, partition_index=partition, committed_offset=offset, committed_leader_epoch=epoch,
                 metadata=metadata, error_code=error)
        )  # fmt: skip
    return tuple(make(topic_cls, name=t, partitions=tuple(ps)) for t, ps in by_topic.items())


async def handle_offset_fetch(ctx: RequestContext, request) -> object:
    types = ctx.response_types()
    require_stable = bool(getattr(request, "require_stable", False))
    if ctx.api_version >= 8:
        groups = []
        for g in request.groups:
            error, result, wanted = await _fetch_group(ctx, g.group_id, g.topics, require_stable)
            topics = _fetch_topics(
                types,
                ("OffsetFetchResponseTopics", "OffsetFetchResponsePartitions", ""),
                result,
                wanted,
                error,
            )
            groups.append(
                make(types.OffsetFetchResponseGroup, group_id=g.group_id, topics=topics, error_code=error)
            )
        return make(types.OffsetFetchResponse, throttle_time=_ZERO, groups=tuple(groups))
    error, result, wanted = await _fetch_group(ctx, request.group_id, request.topics, require_stable)
    topics = _fetch_topics(
        types, ("OffsetFetchResponseTopic", "OffsetFetchResponsePartition", ""), result, wanted, error
    )
    if ctx.api_version >= 2 and result is None:
        topics = ()  # the error goes in the top-level field
    return make(types.OffsetFetchResponse, throttle_time=_ZERO, topics=topics, error_code=error)


async def handle_offset_delete(ctx: RequestContext, request) -> object:
    types = ctx.response_types()
    errors: dict[tuple[str, int], ErrorCode] = {}
    order: list[tuple[str, int]] = []
    valid: list[TopicPartition] = []
    for t in request.topics:
        for p in t.partitions:
            tp = (t.name, p.partition_index)
            order.append(tp)
            if _partition_exists(ctx, t.name, p.partition_index):
                valid.append(TopicPartition(*tp))
            else:
                errors[tp] = ErrorCode.unknown_topic_or_partition
    group_error = ErrorCode.none
    try:
        result = await _run(
            ctx, request.group_id, lambda shard: shard.delete_offsets(request.group_id, valid)
        )
        group_error = result.error
        for p in result.partitions:
            errors[(p.topic, p.partition)] = p.error
    except KafkaError as exc:
        group_error = exc.error_code
    if group_error is not ErrorCode.none:
        return make(types.OffsetDeleteResponse, error_code=group_error, throttle_time=_ZERO, topics=())
    by_topic: dict[str, list] = {}
    for topic, partition in dict.fromkeys(order):
        by_topic.setdefault(topic, []).append(
            make(
                types.OffsetDeleteResponsePartition,
                partition_index=partition,
                error_code=errors[(topic, partition)],
            )
        )
    return make(
        types.OffsetDeleteResponse, error_code=ErrorCode.none, throttle_time=_ZERO,
        topics=tuple(make(types.OffsetDeleteResponseTopic, name=t, partitions=tuple(ps)) for t, ps in by_topic.items()),
    )  # fmt: skip


# --- admin -------------------------------------------------------------------------------------------------


async def handle_describe_groups(ctx: RequestContext, request) -> object:
    types = ctx.response_types()
    include_operations = bool(getattr(request, "include_authorized_operations", False))
    described = []
    for group_id in request.groups:
        try:
            d = await _run(ctx, group_id, lambda shard, g=group_id: shard.describe_group(g))
            error, state, protocol_type, protocol, members = (
                d.error,
                d.state,
                d.protocol_type,
                d.protocol,
                d.members,
            )
        except KafkaError as exc:
            error, state, protocol_type, protocol, members = exc.error_code, "", "", "", ()
        described.append(
            make(
                types.DescribedGroup, error_code=error, group_id=group_id, group_state=state,
                protocol_type=protocol_type, protocol_data=protocol,
                members=tuple(
                    make(types.DescribedGroupMember, member_id=m.member_id, group_instance_id=m.group_instance_id,
                         client_id=m.client_id, client_host=m.client_host, member_metadata=m.metadata,
                         member_assignment=m.assignment)
                    for m in members
                ),
                authorized_operations=GROUP_OPERATIONS
                if include_operations and error is ErrorCode.none
                else OMITTED,
            )
        )  # fmt: skip
    return make(types.DescribeGroupsResponse, throttle_time=_ZERO, groups=tuple(described))


async def handle_list_groups(ctx: RequestContext, request) -> object:
    types = ctx.response_types()
    runtime = getattr(ctx.broker, "group_coordinator", None)
    if runtime is None:
        return make(types.ListGroupsResponse, throttle_time=_ZERO, error_code=ErrorCode.coordinator_not_available,
                     groups=())  # fmt: skip
    states = tuple(getattr(request, "states_filter", ()) or ())
    types_filter = {t.lower() for t in getattr(request, "types_filter", ()) or ()}
    overviews = [
        o for per_shard in runtime.call_all(lambda shard: shard.list_groups(states)) for o in per_shard
    ]
    if types_filter and CLASSIC_GROUP_TYPE not in types_filter:
        overviews = []
    # Kafka lists what it has and flags that some partitions are still loading.
    error = ErrorCode.coordinator_load_in_progress if runtime.is_loading() else ErrorCode.none
    return make(
        types.ListGroupsResponse, throttle_time=_ZERO, error_code=error,
        groups=tuple(
            make(types.ListedGroup, group_id=o.group_id, protocol_type=o.protocol_type, group_state=o.state,
                 group_type=CLASSIC_GROUP_TYPE)
            for o in sorted(overviews, key=lambda o: o.group_id)
        ),
    )  # fmt: skip


async def handle_delete_groups(ctx: RequestContext, request) -> object:
    types = ctx.response_types()
    results = []
    for group_id in dict.fromkeys(request.groups_names):
        try:
            outcome = await _run(ctx, group_id, lambda shard, g=group_id: shard.delete_groups([g]))
            error = outcome[group_id]
        except KafkaError as exc:
            error = exc.error_code
        results.append(make(types.DeletableGroupResult, group_id=group_id, error_code=error))
    return make(types.DeleteGroupsResponse, throttle_time=_ZERO, results=tuple(results))


Handler = Callable[[RequestContext, Any], Awaitable[object]]

GROUP_HANDLERS: dict[int, Handler] = {
    ApiKey.FIND_COORDINATOR: handle_find_coordinator,
    ApiKey.JOIN_GROUP: handle_join_group,
    ApiKey.SYNC_GROUP: handle_sync_group,
    ApiKey.HEARTBEAT: handle_heartbeat,
    ApiKey.LEAVE_GROUP: handle_leave_group,
    ApiKey.OFFSET_COMMIT: handle_offset_commit,
    ApiKey.OFFSET_FETCH: handle_offset_fetch,
    ApiKey.OFFSET_DELETE: handle_offset_delete,
    ApiKey.TXN_OFFSET_COMMIT: handle_txn_offset_commit,
    ApiKey.DESCRIBE_GROUPS: handle_describe_groups,
    ApiKey.LIST_GROUPS: handle_list_groups,
    ApiKey.DELETE_GROUPS: handle_delete_groups,
}

# Kafka 3.9's group API maxima, like the rest of the table (see protocol/apis.py), with Kafka 4.0's raised
# minimums where the message specs behind kio no longer carry older versions (OffsetCommit 2, OffsetFetch 1).
# OffsetCommit and OffsetFetch v9 behave as v8 for classic groups, as in Kafka's classic coordinator.
# KIP-848's ConsumerGroupHeartbeat is not implemented and not advertised.
GROUP_API_VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.FIND_COORDINATOR: (0, 6),
    ApiKey.JOIN_GROUP: (0, 9),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    ApiKey.OFFSET_COMMIT: (2, 9),
    ApiKey.OFFSET_FETCH: (1, 9),
    ApiKey.OFFSET_DELETE: (0, 0),
    ApiKey.TXN_OFFSET_COMMIT: (0, 4),
    ApiKey.DESCRIBE_GROUPS: (0, 5),
    ApiKey.LIST_GROUPS: (0, 5),
    ApiKey.DELETE_GROUPS: (0, 2),
}

assert set(GROUP_HANDLERS) == set(GROUP_API_VERSIONS)
