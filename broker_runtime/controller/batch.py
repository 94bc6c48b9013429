"""Requests to brokers, collected while the controller handles one change and sent together: one LeaderAndIsr,
one UpdateMetadata and one StopReplica per broker at most (Kafka's ControllerBrokerRequestBatch), in that order,
so a broker learns a partition's new state before being told to stop serving it."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from broker_runtime.cluster.zk_paths import LEADER_DURING_DELETE, NO_LEADER, LeaderAndIsr
from broker_runtime.controller.context import ControllerContext, TopicPartition
from broker_runtime.protocol import inter_broker as ib

SECURITY_PROTOCOL_IDS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
EPOCH_DURING_DELETE = -2  # StopReplica leader epoch meaning "delete regardless of epoch" (Kafka's)
NO_EPOCH = -1


@dataclass(frozen=True)
class _LeaderAndIsrEntry:
    state: LeaderAndIsr
    is_new: bool


class RequestBatch:
    def __init__(self, controller_id: int, ctx: ControllerContext, listener: str) -> None:
        self.controller_id = controller_id
        self.ctx = ctx
        self.listener = listener
        self.leader_and_isr: dict[int, dict[TopicPartition, _LeaderAndIsrEntry]] = {}
        self.stop_replica: dict[int, dict[TopicPartition, bool]] = {}
        self.update_metadata_brokers: set[int] = set()
        self.update_metadata_partitions: set[TopicPartition] = set()

    def empty(self) -> bool:
        return not (self.leader_and_isr or self.stop_replica or self.update_metadata_brokers)

    def add_leader_and_isr(
        self, brokers: Iterable[int], tp: TopicPartition, state: LeaderAndIsr, *, is_new: bool = False
    ) -> None:
        for broker in brokers:
            if broker < 0:
                continue
            previous = self.leader_and_isr.setdefault(broker, {}).get(tp)
            self.leader_and_isr[broker][tp] = _LeaderAndIsrEntry(
                state, is_new or bool(previous and previous.is_new)
            )
        self.add_update_metadata(self.ctx.live_or_shutting_down_ids, [tp])

    def add_stop_replica(self, brokers: Iterable[int], tp: TopicPartition, *, delete: bool) -> None:
        for broker in brokers:
            if broker < 0:
                continue
            partitions = self.stop_replica.setdefault(broker, {})
            partitions[tp] = partitions.get(tp, False) or delete

    def add_update_metadata(self, brokers: Iterable[int], partitions: Iterable[TopicPartition] = ()) -> None:
        self.update_metadata_brokers.update(b for b in brokers if b >= 0)
        self.update_metadata_partitions.update(partitions)

    # --- building -------------------------------------------------------------------------------------------

    def build(self) -> dict[int, list[object]]:
        """The requests per broker, in sending order; the batch is empty afterwards."""
        out: dict[int, list[object]] = {}
        for broker, partitions in self.leader_and_isr.items():
            if broker in self.ctx.live_brokers:
                out.setdefault(broker, []).append(self._leader_and_isr_request(broker, partitions))
        if self.update_metadata_brokers:
            topic_states = self._update_metadata_topic_states()
            live = self._live_brokers()
            for broker in sorted(self.update_metadata_brokers):
                if broker in self.ctx.live_brokers:
                    out.setdefault(broker, []).append(
                        ib.UpdateMetadataRequest(
                            controller_id=self.controller_id,
                            controller_epoch=self.ctx.epoch,
                            broker_epoch=self.ctx.live_brokers[broker].epoch,
                            topic_states=topic_states,
                            live_brokers=live,
                        )
                    )
        for broker, partitions in self.stop_replica.items():
            if broker in self.ctx.live_brokers:
                out.setdefault(broker, []).append(self._stop_replica_request(broker, partitions))
        self.leader_and_isr, self.stop_replica = {}, {}
        self.update_metadata_brokers, self.update_metadata_partitions = set(), set()
        return out

    def _leader_and_isr_request(
        self, broker: int, partitions: dict[TopicPartition, _LeaderAndIsrEntry]
    ) -> ib.LeaderAndIsrRequest:
        by_topic: dict[str, list[ib.LeaderAndIsrPartitionState]] = {}
        leaders: set[int] = set()
        for (topic, index), entry in sorted(partitions.items()):
            assignment = self.ctx.assignment((topic, index))
            state = entry.state
            leaders.add(state.leader)
            by_topic.setdefault(topic, []).append(
                ib.LeaderAndIsrPartitionState(
                    partition_index=index,
                    controller_epoch=state.controller_epoch,
                    leader=state.leader,
                    leader_epoch=state.leader_epoch,
                    isr=state.isr,
                    partition_epoch=state.partition_epoch,
                    replicas=assignment.replicas if assignment else (),
                    adding_replicas=assignment.adding if assignment else (),
                    removing_replicas=assignment.removing if assignment else (),
                    is_new=entry.is_new,
                    leader_recovery_state=state.leader_recovery_state,
                )
            )
        live_leaders = []
        for leader in sorted(leaders):
            reg = self.ctx.live_brokers.get(leader)
            endpoint = reg.endpoint(self.listener) if reg else None
            if endpoint is not None:
                live_leaders.append(
                    ib.LeaderAndIsrLiveLeader(broker_id=leader, host_name=endpoint.host, port=endpoint.port)
                )
        return ib.LeaderAndIsrRequest(
            controller_id=self.controller_id, controller_epoch=self.ctx.epoch,
            broker_epoch=self.ctx.live_brokers[broker].epoch,
            topic_states=tuple(
                ib.LeaderAndIsrTopicState(topic_name=t, topic_id=self.ctx.topic_ids.get(t), partition_states=tuple(ps))
                for t, ps in by_topic.items()
            ),
            live_leaders=tuple(live_leaders),
        )  # fmt: skip

    def _update_metadata_topic_states(self) -> tuple[ib.UpdateMetadataTopicState, ...]:
        by_topic: dict[str, list[ib.UpdateMetadataPartitionState]] = {}
        for tp in sorted(self.update_metadata_partitions):
            state = self.ctx.leadership.get(tp)
            if state is None:
                continue
            leader = LEADER_DURING_DELETE if tp[0] in self.ctx.topics_to_delete else state.leader
            by_topic.setdefault(tp[0], []).append(
                ib.UpdateMetadataPartitionState(
                    partition_index=tp[1],
                    controller_epoch=state.controller_epoch,
                    leader=leader,
                    leader_epoch=state.leader_epoch,
                    isr=state.isr,
                    zk_version=state.partition_epoch,
                    replicas=self.ctx.replicas(tp),
                    offline_replicas=tuple(self.ctx.offline_replicas(tp)),
                )
            )
        return tuple(
            ib.UpdateMetadataTopicState(
                topic_name=t, topic_id=self.ctx.topic_ids.get(t), partition_states=tuple(ps)
            )
            for t, ps in by_topic.items()
        )

    def _live_brokers(self) -> tuple[ib.UpdateMetadataBroker, ...]:
        return tuple(
            ib.UpdateMetadataBroker(
                id=reg.broker_id,
                endpoints=tuple(
                    ib.UpdateMetadataEndpoint(
                        port=e.port,
                        host=e.host,
                        listener=e.listener,
                        security_protocol=SECURITY_PROTOCOL_IDS.get(e.security_protocol, 0),
                    )
                    for e in reg.endpoints
                ),
                rack=reg.rack,
            )
            for reg in sorted(self.ctx.live_brokers.values(), key=lambda r: r.broker_id)
        )

    def _stop_replica_request(
        self, broker: int, partitions: dict[TopicPartition, bool]
    ) -> ib.StopReplicaRequest:
        by_topic: dict[str, list[ib.StopReplicaPartitionState]] = {}
        for (topic, index), delete in sorted(partitions.items()):
            state = self.ctx.leadership.get((topic, index))
            if delete:
                epoch = EPOCH_DURING_DELETE
            else:
                epoch = state.leader_epoch if state and state.leader != NO_LEADER else NO_EPOCH
            by_topic.setdefault(topic, []).append(
                ib.StopReplicaPartitionState(
                    partition_index=index, leader_epoch=epoch, delete_partition=delete
                )
            )
        return ib.StopReplicaRequest(
            controller_id=self.controller_id, controller_epoch=self.ctx.epoch,
            broker_epoch=self.ctx.live_brokers[broker].epoch,
            topic_states=tuple(
                ib.StopReplicaTopicState(topic_name=t, partition_states=tuple(ps)) for t, ps in by_topic.items()
            ),
        )  # fmt: skip
