"""Transaction coordinator APIs on the wire: InitProducerId (with a transactional id), AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn, DescribeTransactions, ListTransactions.

Each handler maps one wire version onto the transaction coordinator runtime (`broker_runtime/txn/runtime.py`)
and back, with Kafka's per-version twists (KafkaApis): clients older than PRODUCER_FENCED get
INVALID_PRODUCER_EPOCH instead, and AddPartitionsToTxn refuses partitions that do not exist
(UNKNOWN_TOPIC_OR_PARTITION) and, from clients, internal topics (TOPIC_AUTHORIZATION_FAILED) before it reaches the
coordinator (OPERATION_NOT_ATTEMPTED for the rest).
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from broker_runtime.cluster.topics import INTERNAL_TOPICS
from broker_runtime.errors import KafkaError
from broker_runtime.group.records import OFFSETS_TOPIC, partition_for
from broker_runtime.handlers.context import RequestContext
from broker_runtime.protocol.apis import ApiKey
from broker_runtime.protocol.messages import make
from broker_runtime.txn.coordinator import InitProducerIdResult

log = logging.getLogger(__name__)

T = TypeVar("T")
_ZERO = datetime.timedelta(0)
_MS = datetime.timedelta(milliseconds=1)

# The first version of each API that knows PRODUCER_FENCED; older clients get INVALID_PRODUCER_EPOCH.
_PRODUCER_FENCED_SINCE = {
    ApiKey.INIT_PRODUCER_ID: 4,
    ApiKey.ADD_PARTITIONS_TO_TXN: 2,
    ApiKey.ADD_OFFSETS_TO_TXN: 2,
    ApiKey.END_TXN: 2,
}


def _runtime(ctx: RequestContext):
    runtime = getattr(ctx.broker, "txn_coordinator", None)
    if runtime is None:
        raise KafkaError(ErrorCode.coordinator_not_available, "transaction coordination is not running")
    return runtime


def _for_version(ctx: RequestContext, error: ErrorCode) -> ErrorCode:
    if error is ErrorCode.producer_fenced and ctx.api_version < _PRODUCER_FENCED_SINCE[ctx.header.api_key]:
        return ErrorCode.invalid_producer_epoch
    return error


async def _run(ctx: RequestContext, what: str, call: Callable[[Any], Awaitable[T]]) -> T | ErrorCode:
    """Run a coordinator call; a KafkaError becomes its code, a bug UNKNOWN_SERVER_ERROR."""
    try:
        return await call(_runtime(ctx))
    except KafkaError as exc:
        return exc.error_code
    except Exception:
        log.exception("transaction coordinator failed on %s", what)
        return ErrorCode.unknown_server_error


# --- InitProducerId --------------------------------------------------------------------------------------------


async def handle_init_producer_id(ctx: RequestContext, request) -> object:
    types = ctx.response_types()
    producer_id = getattr(request, "producer_id", -1)
    producer_epoch = getattr(request, "producer_epoch", -1)
    if (producer_id == -1) != (producer_epoch == -1):
        # Half of an existing producer (KIP-360) is malformed (Kafka's KafkaApis): taken as a re-initialisation, a
        # producer id without an epoch would get the current epoch back without fencing the producer holding it.
        return make(
            types.InitProducerIdResponse, throttle_time=_ZERO, error_code=ErrorCode.invalid_request,
            producer_id=-1, producer_epoch=-1,
        )  # fmt: skip
    if request.transactional_id is None:
        # Idempotent producers get a fresh id at epoch 0, whichever broker they ask (Kafka does the same).
        try:
            idempotent_id = await ctx.broker.next_producer_id()
        except Exception:  # the metadata store could not allocate a block (logged where it failed)
            # Answered like the transactional path, so the client retries rather than reconnects.
            return make(
                types.InitProducerIdResponse, throttle_time=_ZERO, error_code=ErrorCode.coordinator_not_available,
                producer_id=-1, producer_epoch=-1,
            )  # fmt: skip
        return make(
            types.InitProducerIdResponse, throttle_time=_ZERO, error_code=ErrorCode.none,
            producer_id=idempotent_id, producer_epoch=0,
        )  # fmt: skip
    tid = request.transactional_id
    result = await _run(
        ctx,
        f"InitProducerId of {tid!r}",
        lambda runtime: runtime.init_producer_id(
            tid,
            _ms(request.transaction_timeout),
            producer_id,
            producer_epoch,
        ),
    )
    if isinstance(result, ErrorCode):
        result = InitProducerIdResult(result)
    return make(
        types.InitProducerIdResponse, throttle_time=_ZERO, error_code=_for_version(ctx, result.error),
        producer_id=result.producer_id, producer_epoch=result.producer_epoch,
    )  # fmt: skip


def _ms(value) -> int:
    return round(value / _MS) if isinstance(value, datetime.timedelta) else int(value)


# --- AddPartitionsToTxn ----------------------------------------------------------------------------------------


def _topic_results(types, errors: dict[tuple[str, int], ErrorCode]) -> tuple:
    by_topic: dict[str, list] = {}
    for (topic, index), error in errors.items():
        by_topic.setdefault(topic, []).append(
            make(types.AddPartitionsToTxnPartitionResult, partition_index=index, partition_error_code=error)
        )
    return tuple(
        make(types.AddPartitionsToTxnTopicResult, name=topic, results_by_partition=tuple(results))
        for topic, results in by_topic.items()
    )


def _partitions(topics) -> list[tuple[str, int]]:
    return [(t.name, p) for t in topics for p in t.partitions]


async def _add_partitions(
    ctx: RequestContext,
    tid: str,
    producer_id: int,
    producer_epoch: int,
    partitions: list[tuple[str, int]],
    *,
    from_client: bool = True,
) -> dict[tuple[str, int], ErrorCode]:
    topics = ctx.broker.metadata.topics()
    # Clients never write internal topics themselves (Kafka leaves them out of the WRITE authorization): a
    # group's offsets join a transaction through AddOffsetsToTxn.
    refused = {tp for tp in partitions if from_client and tp[0] in INTERNAL_TOPICS}
    missing = {
        tp for tp in partitions if tp[0] not in topics or tp[1] not in topics[tp[0]].partitions
    } - refused
    if refused or missing:
        return {
            tp: ErrorCode.topic_authorization_failed if tp in refused
            else ErrorCode.unknown_topic_or_partition if tp in missing
            else ErrorCode.operation_not_attempted
            for tp in partitions
        }  # fmt: skip
    result = await _run(
        ctx,
        f"AddPartitionsToTxn of {tid!r}",
        lambda runtime: runtime.add_partitions(tid, producer_id, producer_epoch, partitions),
    )
    return dict.fromkeys(partitions, _for_version(ctx, result))


async def handle_add_partitions_to_txn(ctx: RequestContext, request) -> object:
    types = ctx.response_types()
    if ctx.api_version < 4:
        errors = await _add_partitions(
            ctx,
            request.v3_and_below_transactional_id,
            request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch,
            _partitions(request.v3_and_below_topics),
        )
        return make(
            types.AddPartitionsToTxnResponse, throttle_time=_ZERO,
            results_by_topic_v3_and_below=_topic_results(types, errors),
        )  # fmt: skip
    # Version 4+: batches of transactions from partition leaders (verifyOnly checks membership).
    results = []
    for txn in request.transactions:
        partitions = _partitions(txn.topics)
        if txn.verify_only:
            verified = await _run(
                ctx,
                f"AddPartitionsToTxn verification of {txn.transactional_id!r}",
                lambda runtime, txn=txn, partitions=partitions: runtime.verify_partitions(
                    txn.transactional_id, txn.producer_id, txn.producer_epoch, partitions
                ),
            )
            errors = dict.fromkeys(partitions, verified) if isinstance(verified, ErrorCode) else verified
        else:
            errors = await _add_partitions(
                ctx, txn.transactional_id, txn.producer_id, txn.producer_epoch, partitions, from_client=False
            )
        results.append(
            make(
                types.AddPartitionsToTxnResult,
                transactional_id=txn.transactional_id,
                topic_results=_topic_results(types, errors),
            )
        )
    return make(
        types.AddPartitionsToTxnResponse, throttle_time=_ZERO, error_code=ErrorCode.none,
        results_by_transaction=tuple(results),
    )  # fmt: skip


# --- AddOffsetsToTxn, EndTxn -------------------------------------------------------------------------------------


async def handle_add_offsets_to_txn(ctx: RequestContext, request) -> object:
    types = ctx.response_types()
    group_runtime = getattr(ctx.broker, "group_coordinator", None)
    num_partitions = (
        group_runtime.num_partitions
        if group_runtime is not None
        else ctx.broker.config["offsets.topic.num.partitions"]
    )
    # The group's offsets partition joins the transaction: its marker makes the transactional offsets visible.
    offsets_partition = (OFFSETS_TOPIC, partition_for(request.group_id, num_partitions))
    tid = request.transactional_id
    result = await _run(
        ctx,
        f"AddOffsetsToTxn of {tid!r}",
        lambda runtime: runtime.add_partitions(
            tid, request.producer_id, request.producer_epoch, [offsets_partition]
        ),
    )
    return make(types.AddOffsetsToTxnResponse, throttle_time=_ZERO, error_code=_for_version(ctx, result))


async def handle_end_txn(ctx: RequestContext, request) -> object:
    types = ctx.response_types()
    tid = request.transactional_id
    result = await _run(
        ctx,
        f"EndTxn of {tid!r}",
        lambda runtime: runtime.end_transaction(
            tid, request.producer_id, request.producer_epoch, request.committed
        ),
    )
    return make(types.EndTxnResponse, throttle_time=_ZERO, error_code=_for_version(ctx, result))


# --- DescribeTransactions, ListTransactions ----------------------------------------------------------------------


async def handle_describe_transactions(ctx: RequestContext, request) -> object:
    types = ctx.response_types()
    runtime = getattr(ctx.broker, "txn_coordinator", None)
    states = []
    for tid in request.transactional_ids:
        if runtime is None:
            states.append(_describe_error(types, tid, ErrorCode.coordinator_not_available))
            continue
        if not tid:  # before asking which coordinator owns it, as Kafka does
            states.append(_describe_error(types, tid, ErrorCode.invalid_request))
            continue
        described = runtime.describe(tid)
        if described.error is not ErrorCode.none:
            states.append(_describe_error(types, tid, described.error))
            continue
        by_topic: dict[str, list[int]] = {}
        for topic, index in described.partitions:
            by_topic.setdefault(topic, []).append(index)
        states.append(
            make(
                types.TransactionState,
                error_code=ErrorCode.none,
                transactional_id=tid,
                transaction_state=described.state,
                transaction_timeout=datetime.timedelta(milliseconds=described.timeout_ms),
                transaction_start_time=_timestamp(described.start_ms),
                producer_id=described.producer_id,
                producer_epoch=described.producer_epoch,
                topics=tuple(
                    make(types.TopicData, topic=t, partitions=tuple(ps)) for t, ps in by_topic.items()
                ),
            )
        )
    return make(types.DescribeTransactionsResponse, throttle_time=_ZERO, transaction_states=tuple(states))


def _describe_error(types, tid: str, error: ErrorCode) -> object:
    return make(
        types.TransactionState, error_code=error, transactional_id=tid, transaction_state="",
        transaction_timeout=_ZERO, transaction_start_time=_timestamp(-1), producer_id=-1, producer_epoch=-1,
        topics=(),
    )  # fmt: skip


def _timestamp(ms: int) -> datetime.datetime:
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)


async def handle_list_transactions(ctx: RequestContext, request) -> object:
    types = ctx.response_types()
    runtime = getattr(ctx.broker, "txn_coordinator", None)
    if runtime is None:
        error, unknown, listings = ErrorCode.coordinator_not_available, [], []
    else:
        error, unknown, listings = runtime.list_transactions(
            list(request.state_filters),
            list(request.producer_id_filters),
            getattr(request, "duration_filter", -1),
        )
    return make(
        types.ListTransactionsResponse, throttle_time=_ZERO, error_code=error, unknown_state_filters=tuple(unknown),
        transaction_states=tuple(
            make(types.TransactionState, transactional_id=t.transactional_id, producer_id=t.producer_id,
                 transaction_state=t.state)
            for t in listings
        ),
    )  # fmt: skip


TRANSACTION_HANDLERS = {
    ApiKey.INIT_PRODUCER_ID: handle_init_producer_id,
    ApiKey.ADD_PARTITIONS_TO_TXN: handle_add_partitions_to_txn,
    ApiKey.ADD_OFFSETS_TO_TXN: handle_add_offsets_to_txn,
    ApiKey.END_TXN: handle_end_txn,
    ApiKey.DESCRIBE_TRANSACTIONS: handle_describe_transactions,
    ApiKey.LIST_TRANSACTIONS: handle_list_transactions,
}

# Kafka 3.9's ranges. AddPartitionsToTxn 4-5 come from partition leaders (batched, verifyOnly), not clients.
TRANSACTION_API_VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.INIT_PRODUCER_ID: (0, 5),
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 5),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 4),
    ApiKey.END_TXN: (0, 4),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKey.LIST_TRANSACTIONS: (0, 1),
}
