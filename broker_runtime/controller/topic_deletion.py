"""Topic deletion (Kafka's TopicDeletionManager). A topic marked in /admin/delete_topics is deleted in steps:
its partitions go offline (UpdateMetadata with leader -2 tells every broker to stop serving it), every replica is
told StopReplica(delete) and moves to DeletionStarted; when every replica reports success the topic's znodes are
removed. A replica on a dead broker makes the topic ineligible until that broker returns; a reassignment in
progress does the same until it completes."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from broker_runtime.controller.context import PartitionReplica
from broker_runtime.controller.state import PartitionState, ReplicaState

if TYPE_CHECKING:
    from broker_runtime.controller.controller import Controller

log = logging.getLogger(__name__)


class TopicDeletionManager:
    def __init__(self, controller: Controller) -> None:
        self.c = controller
        self.ctx = controller.ctx

    async def init(self, to_delete: set[str], ineligible: set[str]) -> None:
        if self.c.config.delete_topic_enable:
            self.ctx.topics_to_delete |= to_delete
            self.ctx.topics_ineligible_for_deletion |= ineligible & to_delete
        else:
            await self.c.store.remove_topic_deletions(to_delete)

    def queued(self, topic: str) -> bool:
        return topic in self.ctx.topics_to_delete

    async def enqueue(self, topics: set[str]) -> None:
        if self.c.config.delete_topic_enable:
            self.ctx.topics_to_delete |= topics
            await self.resume()

    async def resume_for(self, topics: Iterable[str]) -> None:
        topics = set(topics) & self.ctx.topics_to_delete
        if topics:
            self.ctx.topics_ineligible_for_deletion -= topics
            await self.resume()

    def mark_ineligible(self, topics: Iterable[str], reason: str) -> None:
        topics = set(topics) & self.ctx.topics_to_delete
        if topics:
            log.info("topics %s are not deleted for now: %s", sorted(topics), reason)
            self.ctx.topics_ineligible_for_deletion |= topics

    async def fail_replica_deletion(self, replicas: Iterable[PartitionReplica]) -> None:
        replicas = [r for r in replicas if self.queued(r.topic)]
        if replicas:
            failing = (ReplicaState.OFFLINE, ReplicaState.DELETION_STARTED)
            await self.c.rsm.handle(
                [r for r in replicas if self.ctx.replica_state(r) in failing],
                ReplicaState.DELETION_INELIGIBLE,
            )
            self.mark_ineligible({r.topic for r in replicas}, "a replica could not be deleted")
            await self.resume()

    async def complete_replica_deletion(self, replicas: Iterable[PartitionReplica]) -> None:
        replicas = [
            r
            for r in replicas
            if self.queued(r.topic) and self.ctx.replica_state(r) is ReplicaState.DELETION_STARTED
        ]
        if replicas:
            await self.c.rsm.handle(replicas, ReplicaState.DELETION_SUCCESSFUL)
            await self.resume()

    def _in_state(self, topic: str, state: ReplicaState) -> list[PartitionReplica]:
        return [r for r in self.ctx.replicas_for_topic(topic) if self.ctx.replica_state(r) is state]

    async def resume(self) -> None:
        retry, eligible = set(), set()
        for topic in sorted(self.ctx.topics_to_delete):
            replicas = self.ctx.replicas_for_topic(topic)
            states = {self.ctx.replica_state(r) for r in replicas}
            if states <= {ReplicaState.DELETION_SUCCESSFUL}:
                await self._complete(topic)
                continue
            in_progress = ReplicaState.DELETION_STARTED in states
            if not in_progress and ReplicaState.DELETION_INELIGIBLE in states:
                retry.add(topic)
            reassigning = any(tp[0] == topic for tp in self.ctx.being_reassigned)
            if not in_progress and not reassigning and topic not in self.ctx.topics_ineligible_for_deletion:
                eligible.add(topic)
        if retry:
            failed = [r for t in retry for r in self._in_state(t, ReplicaState.DELETION_INELIGIBLE)]
            self.ctx.topics_ineligible_for_deletion -= retry
            await self.c.rsm.handle(failed, ReplicaState.OFFLINE)
        if eligible:
            await self._start(eligible)

    async def _start(self, topics: set[str]) -> None:
        partitions = [tp for t in sorted(topics) for tp in self.ctx.partitions_for_topic(t)]
        unseen = [tp for tp in partitions if tp[0] not in self.ctx.deletion_started]
        if unseen:
            await self.c.psm.handle(unseen, PartitionState.OFFLINE)
            await self.c.psm.handle(unseen, PartitionState.NON_EXISTENT)
            self.ctx.deletion_started |= {tp[0] for tp in unseen}
        # Brokers drop these partitions from their metadata (leader -2) and stop serving them.
        self.c.batch.add_update_metadata(self.ctx.live_or_shutting_down_ids, partitions)
        self.c.flush()
        replicas = self.ctx.replicas_for_partitions(partitions)
        dead = [r for r in replicas if not self.ctx.is_replica_online(r.replica, r.tp)]
        alive = [
            r
            for r in replicas
            if self.ctx.is_replica_online(r.replica, r.tp)
            and self.ctx.replica_state(r) is not ReplicaState.DELETION_SUCCESSFUL
        ]
        failing = (ReplicaState.OFFLINE, ReplicaState.DELETION_STARTED)
        await self.c.rsm.handle(
            [r for r in dead if self.ctx.replica_state(r) in failing], ReplicaState.DELETION_INELIGIBLE
        )
        if dead:
            self.mark_ineligible({r.topic for r in dead}, "a replica is on a broker that is down")
        await self.c.rsm.handle(alive, ReplicaState.OFFLINE)
        await self.c.rsm.handle(alive, ReplicaState.DELETION_STARTED)
        log.info("deleting topics %s: StopReplica(delete) sent to %d replicas", sorted(topics), len(alive))

    async def _complete(self, topic: str) -> None:
        self.c.unwatch_topic(topic)
        await self.c.rsm.handle(
            self._in_state(topic, ReplicaState.DELETION_SUCCESSFUL), ReplicaState.NON_EXISTENT
        )
        await self.c.store.delete_topic(topic)
        self.ctx.remove_topic(topic)
        log.info("deleted topic %s", topic)
