"""The group coordinator on the shared coordinator runtime: a `GroupCoordinatorShard` per `__consumer_offsets`
partition that this broker leads (loads, appends, timers: `broker_runtime/coordinator/runtime.py`).

What is the group coordinator's own here: which partition a group lives on, the `__consumer_offsets` settings
(`offsets.*`), and dropping the offsets of deleted topics from every shard.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from broker_runtime.coordinator.runtime import CoordinatorRuntime, CoordinatorTopic, ShardHandle
from broker_runtime.coordinator.shard import Reply
from broker_runtime.group.api import TopicPartition
from broker_runtime.group.coordinator import GroupCoordinatorConfig, GroupCoordinatorShard
from broker_runtime.group.records import OFFSETS_TOPIC, partition_for

if TYPE_CHECKING:
    from broker_runtime.broker import Broker

T = TypeVar("T")


def offsets_topic(config) -> CoordinatorTopic:
    """`__consumer_offsets` as Kafka configures it (offsets.topic.*, offsets.load.buffer.size, ...)."""
    return CoordinatorTopic(
        name=OFFSETS_TOPIC,
        num_partitions=config["offsets.topic.num.partitions"],
        replication_factor=config["offsets.topic.replication.factor"],
        load_buffer_bytes=config["offsets.load.buffer.size"],
        commit_timeout_ms=config["offsets.commit.timeout.ms"],
        compression_codec=config["offsets.topic.compression.codec"],
        marker_timeout_ms=config["request.timeout.ms"],
        topic_configs={
            "cleanup.policy": "compact",
            "segment.bytes": str(config["offsets.topic.segment.bytes"]),
            "compression.type": "producer",
        },
    )


class GroupCoordinatorRuntime(CoordinatorRuntime[GroupCoordinatorShard]):
    def __init__(self, broker: Broker) -> None:
        self.config = GroupCoordinatorConfig.from_broker_config(broker.config)
        super().__init__(
            broker,
            offsets_topic(broker.config),
            lambda index: GroupCoordinatorShard(index, self.config, self.clock),
            name="group",
            describe=lambda shard: f"{len(shard.groups)} groups",
        )

    def partition_for(self, group_id: str) -> int:
        return partition_for(group_id, self.num_partitions)

    def shard_for(self, group_id: str) -> tuple[ShardHandle[GroupCoordinatorShard], GroupCoordinatorShard]:
        """The active shard of a group, or the KafkaError a client gets while there is none."""
        handle = self.active_handle(self.partition_for(group_id))
        return handle, handle.shard

    async def call(self, group_id: str, operation: Callable[[GroupCoordinatorShard], T | Reply[T]]) -> T:
        """Run `operation` on the group's shard; wait for its reply if it is deferred. Raises KafkaError."""
        return await self.call_on(self.partition_for(group_id), operation)

    def on_partitions_deleted(self, partitions: list[tuple[str, int]]) -> None:
        """Topics were deleted: every active shard tombstones the committed offsets of their partitions."""
        deleted = [TopicPartition(topic, index) for topic, index in partitions]
        self.for_each_active(lambda shard: shard.on_partitions_deleted(deleted))

    def ensure_offsets_topic(self) -> bool:
        """True when `__consumer_offsets` exists; otherwise start creating it and answer False (clients retry)."""
        return self.ensure_topic()
