"""Raw (kio-encoded) requests of the transactional offset tests: the group coordinator's side of a transaction,
spoken as the clients and the transaction coordinator speak it."""

from __future__ import annotations

import dataclasses
import time

from kio.index import load_entity_module
from kio.schema.errors import ErrorCode as E
from kio.static.constants import EntityType

from broker_runtime.group.records import OFFSETS_TOPIC
from broker_runtime.protocol.apis import ApiKey
from broker_runtime.tools.admin_client import build_request as build


def nested(api: str, version: int, cls_name: str, **values):
    """A nested request struct of `version`, keeping only the fields that version has."""
    cls = getattr(load_entity_module(api, version, EntityType.request), cls_name)
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names})


def wait_for_coordinator(client, group: str) -> None:
    """FindCoordinator until the group's coordinator serves (__consumer_offsets is created on first use)."""
    deadline = time.monotonic() + 30
    while True:
        found = client.call(build(ApiKey.FIND_COORDINATOR, 3, key=group, key_type=0))
        if found.error_code == E.none:
            fetched = fetch(client, group, "any-topic", require_stable=False)
            if fetched[0] != E.coordinator_load_in_progress:
                return
        assert time.monotonic() < deadline, f"no coordinator for {group}: {found}"
        time.sleep(0.05)


def commit(client, group: str, topic: str, offset: int) -> E:
    partition = nested("offset_commit", 8, "OffsetCommitRequestPartition", partition_index=0,
                       committed_offset=offset, committed_leader_epoch=-1, committed_metadata="")  # fmt: skip
    topics = (nested("offset_commit", 8, "OffsetCommitRequestTopic", name=topic, partitions=(partition,)),)
    response = client.call(build(ApiKey.OFFSET_COMMIT, 8, group_id=group, generation_id_or_member_epoch=-1,
                                 member_id="", group_instance_id=None, topics=topics))  # fmt: skip
    return response.topics[0].partitions[0].error_code


def txn_commit(client, version: int, group: str, producer_id: int, topic: str, offset: int) -> E:
    return txn_commit_as(client, version, group, f"tx-{producer_id}", producer_id, 0, topic, offset)


def txn_commit_as(
    client, version: int, group: str, transactional_id: str, producer_id: int, producer_epoch: int, topic: str,
    offset: int,
) -> E:  # fmt: skip
    api = "txn_offset_commit"
    partition = nested(api, version, "TxnOffsetCommitRequestPartition", partition_index=0, committed_offset=offset,
                       committed_leader_epoch=-1, committed_metadata=f"txn-v{version}")  # fmt: skip
    topics = (nested(api, version, "TxnOffsetCommitRequestTopic", name=topic, partitions=(partition,)),)
    response = client.call(build(
        ApiKey.TXN_OFFSET_COMMIT, version, transactional_id=transactional_id, group_id=group,
        producer_id=producer_id, producer_epoch=producer_epoch, generation_id=-1, member_id="", group_instance_id=None,
        topics=topics,
    ))  # fmt: skip
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in response.topics] == [(topic, [0])]
    return response.topics[0].partitions[0].error_code


def fetch(client, group: str, topic: str, *, require_stable: bool) -> tuple[E, int]:
    """OffsetFetch v7 (the last single-group version with require_stable): (error, offset) of partition 0."""
    wanted = (nested("offset_fetch", 7, "OffsetFetchRequestTopic", name=topic, partition_indexes=(0,)),)
    response = client.call(
        build(ApiKey.OFFSET_FETCH, 7, group_id=group, topics=wanted, require_stable=require_stable)
    )
    if response.error_code != E.none:
        return response.error_code, -1
    part = response.topics[0].partitions[0]
    return part.error_code, part.committed_offset


def write_marker(client, producer_id: int, committed: bool, partition: int, producer_epoch: int = 0) -> E:
    """WriteTxnMarkers v1, as a transaction coordinator sends it, for one `__consumer_offsets` partition."""
    topic = nested(
        "write_txn_markers", 1, "WritableTxnMarkerTopic", name=OFFSETS_TOPIC, partition_indexes=(partition,)
    )
    marker = nested("write_txn_markers", 1, "WritableTxnMarker", producer_id=producer_id, producer_epoch=producer_epoch,
                    transaction_result=committed, topics=(topic,), coordinator_epoch=0)  # fmt: skip
    response = client.call(build(ApiKey.WRITE_TXN_MARKERS, 1, markers=(marker,)))
    (result,) = response.markers
    assert result.producer_id == producer_id
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in result.topics] == [
        (OFFSETS_TOPIC, [partition])
    ]
    return result.topics[0].partitions[0].error_code
