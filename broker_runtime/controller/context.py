"""What the active controller knows about the cluster (Kafka's ControllerContext): plain data, read from
ZooKeeper at fail-over and kept current by the controller's events. Only the controller's event task touches it."""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from broker_runtime.cluster.zk_paths import BrokerRegistration, LeaderAndIsr, ReplicaAssignment
from broker_runtime.controller.state import PartitionState, ReplicaState

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class PartitionReplica:
    topic: str
    partition: int
    replica: int

    @property
    def tp(self) -> TopicPartition:
        return (self.topic, self.partition)


@dataclass
class ControllerContext:
    epoch: int = 0
    epoch_zk_version: int = 0
    live_brokers: dict[int, BrokerRegistration] = field(default_factory=dict)  # includes shutting-down ones
    shutting_down: set[int] = field(default_factory=set)
    topic_ids: dict[str, uuid.UUID] = field(default_factory=dict)
    assignments: dict[str, dict[int, ReplicaAssignment]] = field(default_factory=dict)
    leadership: dict[TopicPartition, LeaderAndIsr] = field(default_factory=dict)
    partition_states: dict[TopicPartition, PartitionState] = field(default_factory=dict)
    replica_states: dict[PartitionReplica, ReplicaState] = field(default_factory=dict)
    topics_to_delete: set[str] = field(default_factory=set)
    # Deletion started: partitions taken offline and replicas told to delete. A topic merely queued (waiting
    # for a reassignment or a dead replica) still gets leaders elected.
    deletion_started: set[str] = field(default_factory=set)
    topics_ineligible_for_deletion: set[str] = field(default_factory=set)
    being_reassigned: set[TopicPartition] = field(default_factory=set)
    offline_dirs: dict[int, set[TopicPartition]] = field(default_factory=lambda: defaultdict(set))

    # --- brokers ----------------------------------------------------------------------------------------------

    @property
    def live_or_shutting_down_ids(self) -> set[int]:
        return set(self.live_brokers)

    @property
    def live_broker_ids(self) -> set[int]:
        return set(self.live_brokers) - self.shutting_down

    def broker_epoch(self, broker_id: int) -> int | None:
        reg = self.live_brokers.get(broker_id)
        return None if reg is None else reg.epoch

    def is_replica_online(
        self, broker_id: int, tp: TopicPartition, *, include_shutting_down: bool = False
    ) -> bool:
        live = self.live_or_shutting_down_ids if include_shutting_down else self.live_broker_ids
        return broker_id in live and tp not in self.offline_dirs.get(broker_id, ())

    # --- topics and partitions --------------------------------------------------------------------------------

    @property
    def all_topics(self) -> set[str]:
        return set(self.assignments)

    def all_partitions(self) -> list[TopicPartition]:
        return [(t, p) for t, parts in self.assignments.items() for p in parts]

    def partitions_for_topic(self, topic: str) -> list[TopicPartition]:
        return [(topic, p) for p in self.assignments.get(topic, {})]

    def assignment(self, tp: TopicPartition) -> ReplicaAssignment | None:
        return self.assignments.get(tp[0], {}).get(tp[1])

    def replicas(self, tp: TopicPartition) -> tuple[int, ...]:
        a = self.assignment(tp)
        return a.replicas if a else ()

    def set_assignment(self, tp: TopicPartition, assignment: ReplicaAssignment) -> None:
        self.assignments.setdefault(tp[0], {})[tp[1]] = assignment

    def remove_topic(self, topic: str) -> None:
        for tp in self.partitions_for_topic(topic):
            self.leadership.pop(tp, None)
            self.partition_states.pop(tp, None)
            self.being_reassigned.discard(tp)
        for r in [r for r in self.replica_states if r.topic == topic]:
            del self.replica_states[r]
        self.assignments.pop(topic, None)
        self.topic_ids.pop(topic, None)
        self.topics_to_delete.discard(topic)
        self.deletion_started.discard(topic)
        self.topics_ineligible_for_deletion.discard(topic)

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        for name, tid in self.topic_ids.items():
            if tid == topic_id:
                return name
        return None

    def partitions_on_broker(self, broker_id: int) -> list[TopicPartition]:
        return [tp for tp in self.all_partitions() if broker_id in self.replicas(tp)]

    def replicas_on_brokers(self, broker_ids: set[int]) -> list[PartitionReplica]:
        return [
            PartitionReplica(t, p, r)
            for t, parts in self.assignments.items()
            for p, a in parts.items()
            for r in a.replicas
            if r in broker_ids
        ]

    def replicas_for_partitions(self, partitions: Iterable[TopicPartition]) -> list[PartitionReplica]:
        return [PartitionReplica(t, p, r) for t, p in partitions for r in self.replicas((t, p))]

    def replicas_for_topic(self, topic: str) -> list[PartitionReplica]:
        return self.replicas_for_partitions(self.partitions_for_topic(topic))

    def partitions_in_states(
        self, states: set[PartitionState], topic: str | None = None
    ) -> list[TopicPartition]:
        return [
            tp for tp, s in self.partition_states.items() if s in states and (topic is None or tp[0] == topic)
        ]

    def partitions_with_offline_leader(self) -> list[TopicPartition]:
        return [
            tp
            for tp, state in self.leadership.items()
            if not self.is_replica_online(state.leader, tp) and tp[0] not in self.deletion_started
        ]

    def partition_leaders_on_broker(self, broker_id: int) -> set[TopicPartition]:
        return {
            tp
            for tp, state in self.leadership.items()
            if state.leader == broker_id and tp[0] not in self.deletion_started
        }

    def offline_replicas(self, tp: TopicPartition) -> list[int]:
        return [r for r in self.replicas(tp) if not self.is_replica_online(r, tp, include_shutting_down=True)]

    def partition_state(self, tp: TopicPartition) -> PartitionState:
        return self.partition_states.get(tp, PartitionState.NON_EXISTENT)

    def replica_state(self, replica: PartitionReplica) -> ReplicaState:
        return self.replica_states.get(replica, ReplicaState.NON_EXISTENT)

    def reset(self) -> None:
        """Forget everything (on resignation); the next fail-over reads ZooKeeper afresh."""
        fresh = ControllerContext()
        self.__dict__.update(fresh.__dict__)
