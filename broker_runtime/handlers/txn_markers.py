"""WriteTxnMarkers (inter-broker, from transaction coordinators): a thin wire mapping over txn/markers.py.

Each marker of the request is written on its partitions concurrently; its result lists every partition it
named, with the error of each (Kafka's handleWriteTxnMarkersRequest). Versions: 1 (Kafka 3.9 serves 0-1; the
message specs behind kio start at 1, as Kafka 4.0 does).
"""

from __future__ import annotations

import asyncio

from broker_runtime.handlers.context import RequestContext
from broker_runtime.protocol.messages import make
from broker_runtime.txn.markers import TxnMarker, write_txn_markers


async def handle_write_txn_markers(ctx: RequestContext, request) -> object:
    types = ctx.response_types()
    markers = [
        TxnMarker(
            producer_id=m.producer_id,
            producer_epoch=m.producer_epoch,
            coordinator_epoch=m.coordinator_epoch,
            committed=m.transaction_result,
            partitions=[(t.name, int(p)) for t in m.topics for p in t.partition_indexes],
        )
        for m in request.markers
    ]
    outcomes = await asyncio.gather(*(write_txn_markers(ctx.broker, [marker]) for marker in markers))
    results = []
    for wire, errors in zip(request.markers, outcomes, strict=True):
        topics = [
            make(
                types.WritableTxnMarkerTopicResult,
                name=t.name,
                partitions=tuple(
                    make(
                        types.WritableTxnMarkerPartitionResult,
                        partition_index=p,
                        error_code=errors[t.name, int(p)],
                    )
                    for p in t.partition_indexes
                ),
            )
            for t in wire.topics
        ]
        results.append(
            make(types.WritableTxnMarkerResult, producer_id=wire.producer_id, topics=tuple(topics))
        )
    return make(types.WriteTxnMarkersResponse, markers=tuple(results))
