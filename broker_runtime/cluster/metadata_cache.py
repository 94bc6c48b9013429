"""What a cluster broker knows about the whole cluster, as the controller last told it with UpdateMetadata
(Kafka's ZkMetadataCache): live brokers and their endpoints, the controller, every partition's leader, epochs,
replicas and ISR. Metadata and DescribeCluster answer from here. Requests from a controller older than the last
one seen are refused (STALE_CONTROLLER_EPOCH), as are requests meant for an earlier registration of this broker
(STALE_BROKER_EPOCH)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from broker_runtime.cluster.zk_paths import LEADER_DURING_DELETE, BrokerRegistration, Endpoint

SECURITY_PROTOCOL_NAMES = {0: "PLAINTEXT", 1: "SSL", 2: "SASL_PLAINTEXT", 3: "SASL_SSL"}


@dataclass
class PartitionMetadata:
    leader: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline_replicas: list[int] = field(default_factory=list)
    partition_epoch: int = 0
    controller_epoch: int = 0


@dataclass
class TopicMetadata:
    name: str
    topic_id: uuid.UUID | None
    partitions: dict[int, PartitionMetadata] = field(default_factory=dict)


class MetadataCache:
    def __init__(self, broker_id: int) -> None:
        self.broker_id = broker_id
        self.controller_id = -1
        self.controller_epoch = -1
        self.live_brokers: dict[int, BrokerRegistration] = {}
        self.topics: dict[str, TopicMetadata] = {}

    def check_controller(
        self, controller_id: int, controller_epoch: int, broker_epoch: int, own_epoch: int
    ) -> ErrorCode:
        """The error to answer a controller request with, or NONE; a newer controller epoch is remembered."""
        if controller_epoch < self.controller_epoch:
            return ErrorCode.stale_controller_epoch
        if broker_epoch != -1 and broker_epoch < own_epoch:
            return ErrorCode.stale_broker_epoch
        self.controller_epoch = controller_epoch
        self.controller_id = controller_id
        return ErrorCode.none

    def update(self, request) -> set[str]:
        """Apply an UpdateMetadata request (already checked); returns the topics that were deleted."""
        self.controller_id = request.controller_id
        self.live_brokers = {
            b.id: BrokerRegistration(
                b.id,
                tuple(
                    Endpoint(
                        e.listener,
                        e.host,
                        e.port,
                        SECURITY_PROTOCOL_NAMES.get(e.security_protocol, "PLAINTEXT"),
                    )
                    for e in b.endpoints
                ),
                b.rack,
            )
            for b in request.live_brokers
        }
        deleted = set()
        for topic_state in request.topic_states:
            name = topic_state.topic_name
            for p in topic_state.partition_states:
                if p.leader == LEADER_DURING_DELETE:
                    topic = self.topics.get(name)
                    if topic is not None:
                        topic.partitions.pop(p.partition_index, None)
                        if not topic.partitions:
                            del self.topics[name]
                            deleted.add(name)
                    continue
                topic = self.topics.get(name)
                if topic is None or (
                    topic_state.topic_id and topic.topic_id not in (None, topic_state.topic_id)
                ):
                    topic = self.topics[name] = TopicMetadata(name, topic_state.topic_id)
                topic.partitions[p.partition_index] = PartitionMetadata(
                    leader=p.leader, leader_epoch=p.leader_epoch, replicas=list(p.replicas), isr=list(p.isr),
                    offline_replicas=list(p.offline_replicas), partition_epoch=p.zk_version,
                    controller_epoch=p.controller_epoch,
                )  # fmt: skip
        return deleted

    def partition(self, topic: str, index: int) -> PartitionMetadata | None:
        t = self.topics.get(topic)
        return None if t is None else t.partitions.get(index)

    def endpoint(self, broker_id: int, listener: str) -> Endpoint | None:
        reg = self.live_brokers.get(broker_id)
        return None if reg is None else reg.endpoint(listener)
