"""A cluster broker's metadata between the controller's requests: what Metadata answers after a LeaderAndIsr and
before the UpdateMetadata that follows it."""

from __future__ import annotations

import asyncio
import uuid

from broker_runtime.cluster.metadata_store import BrokerInfo
from broker_runtime.cluster.zk_metadata_store import ZkMetadataStore
from broker_runtime.protocol import inter_broker as ib
from tests.fake_zookeeper import FakeZooKeeper

TOPIC_ID = uuid.uuid4()


def _broker(broker_id: int) -> ib.UpdateMetadataBroker:
    return ib.UpdateMetadataBroker(
        id=broker_id,
        endpoints=(
            ib.UpdateMetadataEndpoint(
                port=9092 + broker_id, host="127.0.0.1", listener="PLAINTEXT", security_protocol=0
            ),
        ),
    )


def _update_metadata(leader: int, leader_epoch: int, isr: tuple[int, ...]) -> ib.UpdateMetadataRequest:
    state = ib.UpdateMetadataPartitionState(
        partition_index=0, controller_epoch=1, leader=leader, leader_epoch=leader_epoch, isr=isr, zk_version=0,
        replicas=(0, 1, 2),
    )  # fmt: skip
    return ib.UpdateMetadataRequest(
        controller_id=0, controller_epoch=1,
        topic_states=(ib.UpdateMetadataTopicState(topic_name="orders", topic_id=TOPIC_ID, partition_states=(state,)),),
        live_brokers=tuple(_broker(b) for b in (0, 1, 2)),
    )  # fmt: skip


def _leader_and_isr(leader: int, leader_epoch: int, isr: tuple[int, ...]) -> ib.LeaderAndIsrPartitionState:
    return ib.LeaderAndIsrPartitionState(
        partition_index=0, controller_epoch=1, leader=leader, leader_epoch=leader_epoch, isr=isr,
        partition_epoch=1, replicas=(0, 1, 2),
    )  # fmt: skip


def _store_with_leader_2() -> ZkMetadataStore:
    async def build() -> ZkMetadataStore:
        zk = FakeZooKeeper().client()
        await zk.start()
        store = ZkMetadataStore(zk, BrokerInfo(2, "127.0.0.1", 9094), "PLAINTEXT")
        await store.apply_update_metadata(_update_metadata(leader=2, leader_epoch=0, isr=(2, 0, 1)))
        return store

    return asyncio.run(build())


def test_a_leader_and_isr_moves_the_leader_in_metadata_before_update_metadata_comes():
    """A leader that hands its partitions away (controlled shutdown) answers NOT_LEADER_OR_FOLLOWER at once; a
    client that then asks it for Metadata must be sent to the new leader, not back to it."""
    store = _store_with_leader_2()
    assert store.topics()["orders"].partitions[0].leader == 2

    store.apply_leader_and_isr("orders", _leader_and_isr(leader=1, leader_epoch=1, isr=(1, 0)))

    answered = store.topics()["orders"].partitions[0]
    assert (answered.leader, answered.leader_epoch, answered.isr) == (1, 1, [1, 0])
    cached = store.cache.partition("orders", 0)
    assert (cached.leader, cached.leader_epoch, cached.partition_epoch) == (1, 1, 1)


def test_a_leader_and_isr_at_an_epoch_already_known_changes_nothing():
    store = _store_with_leader_2()
    store.apply_leader_and_isr("orders", _leader_and_isr(leader=1, leader_epoch=1, isr=(1, 0)))
    asyncio.run(store.apply_update_metadata(_update_metadata(leader=0, leader_epoch=2, isr=(0, 1))))

    store.apply_leader_and_isr("orders", _leader_and_isr(leader=1, leader_epoch=1, isr=(1, 0)))
    store.apply_leader_and_isr("orders", _leader_and_isr(leader=1, leader_epoch=2, isr=(1,)))

    answered = store.topics()["orders"].partitions[0]
    assert (answered.leader, answered.leader_epoch, answered.isr) == (0, 2, [0, 1])


def test_a_leader_and_isr_for_a_topic_metadata_does_not_know_yet_waits_for_update_metadata():
    """A new topic becomes visible with its configs through UpdateMetadata only (never half-known)."""
    store = _store_with_leader_2()
    store.apply_leader_and_isr("payments", _leader_and_isr(leader=1, leader_epoch=0, isr=(1, 0, 2)))
    assert "payments" not in store.topics()
    assert store.cache.partition("payments", 0) is None
