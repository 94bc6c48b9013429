"""The partition and replica state machines of the controller (Kafka's ZkPartitionStateMachine and
ZkReplicaStateMachine): each moves a set of partitions or replicas to a target state, checking every move
against the tables of state.py, writing leadership to ZooKeeper (fenced, compare-and-set) and adding the
resulting requests to the batch, which is flushed to the brokers at the end of each call.

    partition  New -> Online          first live replica leads, live replicas form the ISR; state znode created
               Online/Offline -> Online   elect by strategy (election.py); state znode compare-and-set
               * -> Offline/NonExistent   bookkeeping only
    replica    NonExistent -> New      LeaderAndIsr (is_new) to the replica when the partition has a leader
               -> Online               LeaderAndIsr with the current state to the replica
               -> Offline              StopReplica (keep the log); remove it from the ISR (new leader epoch)
               -> DeletionStarted      StopReplica (delete the log)
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import replace

from broker_runtime.cluster.zk_paths import NO_LEADER, LeaderAndIsr
from broker_runtime.controller.batch import RequestBatch
from broker_runtime.controller.context import ControllerContext, PartitionReplica, TopicPartition
from broker_runtime.controller.election import (
    ElectionResult,
    Strategy,
    elect_for_controlled_shutdown,
    elect_for_reassignment,
    elect_offline,
    elect_preferred,
)
from broker_runtime.controller.state import (
    PartitionState,
    ReplicaState,
    valid_partition_transition,
    valid_replica_transition,
)
from broker_runtime.controller.store import ControllerZk

log = logging.getLogger("broker_runtime.controller.state_change")

ElectionOutcome = LeaderAndIsr | Exception


class StateChangeFailed(Exception):
    pass


class PartitionStateMachine:
    def __init__(
        self,
        ctx: ControllerContext,
        store: ControllerZk,
        batch: RequestBatch,
        flush: Callable[[], None],
        unclean_enabled: Callable[[str], Awaitable[bool]],
    ) -> None:
        self.ctx = ctx
        self.store = store
        self.batch = batch
        self.flush = flush
        self.unclean_enabled = unclean_enabled

    def initialize(self) -> None:
        for tp in self.ctx.all_partitions():
            state = self.ctx.leadership.get(tp)
            if state is None:
                self.ctx.partition_states[tp] = PartitionState.NEW
            elif self.ctx.is_replica_online(state.leader, tp):
                self.ctx.partition_states[tp] = PartitionState.ONLINE
            else:
                self.ctx.partition_states[tp] = PartitionState.OFFLINE

    async def trigger_online_state_change(
        self, topic: str | None = None
    ) -> dict[TopicPartition, ElectionOutcome]:
        """Elect leaders for every New or Offline partition (not of topics whose deletion started)."""
        partitions = [
            tp
            for tp in self.ctx.partitions_in_states({PartitionState.OFFLINE, PartitionState.NEW}, topic)
            if tp[0] not in self.ctx.deletion_started
        ]
        return await self.handle(partitions, PartitionState.ONLINE, Strategy.OFFLINE)

    async def handle(
        self,
        partitions: Sequence[TopicPartition],
        target: PartitionState,
        strategy: Strategy | None = None,
        *,
        allow_unclean: bool = False,
    ) -> dict[TopicPartition, ElectionOutcome]:
        if not partitions:
            return {}
        partitions = sorted(set(partitions))  # a fixed order: logs, ZooKeeper traffic and simulations repeat
        try:
            return await self._handle(partitions, target, strategy, allow_unclean)
        finally:
            self.flush()

    async def _handle(
        self, partitions: Sequence[TopicPartition], target: PartitionState, strategy: Strategy | None,
        allow_unclean: bool,
    ) -> dict[TopicPartition, ElectionOutcome]:  # fmt: skip
        valid = []
        for tp in partitions:
            current = self.ctx.partition_state(tp)
            if valid_partition_transition(current, target):
                valid.append(tp)
            else:
                log.error(
                    "partition %s-%d cannot move from %s to %s", tp[0], tp[1], current.value, target.value
                )
        if target is not PartitionState.ONLINE:
            for tp in valid:
                self.ctx.partition_states[tp] = target
            return {}
        new = [tp for tp in valid if self.ctx.partition_state(tp) is PartitionState.NEW]
        existing = [tp for tp in valid if self.ctx.partition_state(tp) is not PartitionState.NEW]
        for tp in await self._initialize(new):
            self.ctx.partition_states[tp] = PartitionState.ONLINE
        if not existing:
            return {}
        if strategy is None:
            raise ValueError("an election strategy is needed to bring existing partitions online")
        results = await self._elect(existing, strategy, allow_unclean)
        for tp, outcome in results.items():
            if isinstance(outcome, LeaderAndIsr):
                self.ctx.partition_states[tp] = PartitionState.ONLINE
            else:
                log.warning("no new leader for %s-%d (%s): %s", tp[0], tp[1], strategy.value, outcome)
        return results

    async def _initialize(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        states = {}
        for tp in partitions:
            live = [r for r in self.ctx.replicas(tp) if self.ctx.is_replica_online(r, tp)]
            if not live:
                log.warning(
                    "partition %s-%d has no live replica among %s (live brokers %s): it stays without a leader",
                    tp[0], tp[1], list(self.ctx.replicas(tp)), sorted(self.ctx.live_broker_ids),
                )  # fmt: skip
                continue
            states[tp] = LeaderAndIsr(live[0], 0, tuple(live), self.ctx.epoch)
        if not states:
            return []
        done = []
        for tp, outcome in (await self.store.create_partition_states(states)).items():
            if isinstance(outcome, Exception):
                log.error("cannot create the state of partition %s-%d: %r", tp[0], tp[1], outcome)
                continue
            self.ctx.leadership[tp] = outcome
            self.batch.add_leader_and_isr(outcome.isr, tp, outcome, is_new=True)
            log.info(
                "partition %s-%d online: leader %d, isr %s", tp[0], tp[1], outcome.leader, list(outcome.isr)
            )
            done.append(tp)
        return done

    def _online(self, tp: TopicPartition, *, include_shutting_down: bool = False) -> set[int]:
        return {
            r
            for r in self.ctx.replicas(tp)
            if self.ctx.is_replica_online(r, tp, include_shutting_down=include_shutting_down)
        }

    async def _elect(
        self, partitions: list[TopicPartition], strategy: Strategy, allow_unclean: bool
    ) -> dict[TopicPartition, ElectionOutcome]:
        finished: dict[TopicPartition, ElectionOutcome] = {}
        remaining = partitions
        while remaining:
            current = await self.store.partition_states(remaining)
            elections: dict[TopicPartition, ElectionResult] = {}
            for tp in remaining:
                state = current.get(tp)
                if state is None:
                    finished[tp] = StateChangeFailed(
                        f"partition {tp[0]}-{tp[1]} has no leader and ISR in ZooKeeper"
                    )
                    continue
                if state.controller_epoch > self.ctx.epoch:
                    finished[tp] = StateChangeFailed(
                        f"partition {tp[0]}-{tp[1]} was written by a newer controller (epoch {state.controller_epoch})"
                    )
                    continue
                result = await self._elect_one(tp, state, strategy, allow_unclean)
                if result.leader_and_isr is None:
                    finished[tp] = StateChangeFailed(
                        f"no eligible leader for {tp[0]}-{tp[1]} ({strategy.value}): replicas "
                        f"{list(self.ctx.replicas(tp))}, isr {list(state.isr)}, live {sorted(self._online(tp))}"
                    )
                else:
                    elections[tp] = result
            if not elections:
                break
            done, remaining = await self.store.update_leader_and_isr(
                {tp: r.leader_and_isr for tp, r in elections.items() if r.leader_and_isr is not None}
            )
            for tp, outcome in done.items():
                finished[tp] = outcome
                if isinstance(outcome, LeaderAndIsr):
                    self.ctx.leadership[tp] = outcome
                    self.batch.add_leader_and_isr(elections[tp].recipients, tp, outcome)
                    log.info(
                        "partition %s-%d: leader %d at epoch %d, isr %s (%s election)", tp[0], tp[1],
                        outcome.leader, outcome.leader_epoch, list(outcome.isr), strategy.value,
                    )  # fmt: skip
        return finished

    async def _elect_one(
        self, tp: TopicPartition, state: LeaderAndIsr, strategy: Strategy, allow_unclean: bool
    ) -> ElectionResult:
        replicas = self.ctx.replicas(tp)
        if strategy is Strategy.OFFLINE:
            online = self._online(tp)
            unclean = allow_unclean
            if not unclean and not any(r in online for r in state.isr):
                unclean = await self.unclean_enabled(tp[0])
            return elect_offline(state, replicas, online, unclean)
        if strategy is Strategy.REASSIGN:
            assignment = self.ctx.assignment(tp)
            target = assignment.target_replicas if assignment else replicas
            return elect_for_reassignment(state, target, self._online(tp))
        if strategy is Strategy.PREFERRED:
            return elect_preferred(state, replicas, self._online(tp))
        return elect_for_controlled_shutdown(
            state, replicas, self._online(tp, include_shutting_down=True), self.ctx.shutting_down
        )


class ReplicaStateMachine:
    def __init__(
        self, ctx: ControllerContext, store: ControllerZk, batch: RequestBatch, flush: Callable[[], None]
    ) -> None:
        self.ctx = ctx
        self.store = store
        self.batch = batch
        self.flush = flush

    def initialize(self) -> None:
        for tp in self.ctx.all_partitions():
            for r in self.ctx.replicas(tp):
                online = self.ctx.is_replica_online(r, tp)
                state = ReplicaState.ONLINE if online else ReplicaState.DELETION_INELIGIBLE
                self.ctx.replica_states[PartitionReplica(tp[0], tp[1], r)] = state

    async def handle(self, replicas: Iterable[PartitionReplica], target: ReplicaState) -> None:
        replicas = sorted(set(replicas), key=lambda r: (r.replica, r.topic, r.partition))
        if not replicas:
            return
        try:
            by_broker: dict[int, list[PartitionReplica]] = {}
            for r in replicas:
                by_broker.setdefault(r.replica, []).append(r)
            for broker, rs in by_broker.items():
                await self._handle(broker, rs, target)
        finally:
            self.flush()

    async def _handle(self, broker: int, replicas: list[PartitionReplica], target: ReplicaState) -> None:
        valid = []
        for r in replicas:
            current = self.ctx.replica_state(r)
            if valid_replica_transition(current, target):
                valid.append(r)
            else:
                log.error(
                    "replica %d of %s-%d cannot move from %s to %s", r.replica, r.topic, r.partition,
                    current.value, target.value,
                )  # fmt: skip
        if target is ReplicaState.NEW:
            for r in valid:
                state = self.ctx.leadership.get(r.tp)
                if state is not None:
                    if state.leader == broker:
                        log.error("replica %d of %s-%d cannot be new: it leads", broker, r.topic, r.partition)
                        continue
                    self.batch.add_leader_and_isr([broker], r.tp, state, is_new=True)
                self.ctx.replica_states[r] = ReplicaState.NEW
        elif target is ReplicaState.ONLINE:
            for r in valid:
                if self.ctx.replica_state(r) is ReplicaState.NEW:
                    assignment = self.ctx.assignment(r.tp)
                    if assignment is not None and broker not in assignment.replicas:
                        self.ctx.set_assignment(
                            r.tp, replace(assignment, replicas=(*assignment.replicas, broker))
                        )
                else:
                    state = self.ctx.leadership.get(r.tp)
                    if state is not None:
                        self.batch.add_leader_and_isr([broker], r.tp, state)
                self.ctx.replica_states[r] = ReplicaState.ONLINE
        elif target is ReplicaState.OFFLINE:
            for r in valid:
                self.batch.add_stop_replica([broker], r.tp, delete=False)
            with_state = [r for r in valid if r.tp in self.ctx.leadership]
            updated = await self._remove_from_isr(broker, [r.tp for r in with_state])
            for tp, state in updated.items():
                if tp[0] not in self.ctx.deletion_started:
                    recipients = [b for b in self.ctx.replicas(tp) if b != broker]
                    self.batch.add_leader_and_isr(recipients, tp, state)
                self.ctx.replica_states[PartitionReplica(tp[0], tp[1], broker)] = ReplicaState.OFFLINE
            for r in valid:
                if r.tp not in self.ctx.leadership:
                    self.batch.add_update_metadata(self.ctx.live_or_shutting_down_ids, [r.tp])
                    self.ctx.replica_states[r] = ReplicaState.OFFLINE
        elif target is ReplicaState.DELETION_STARTED:
            for r in valid:
                self.ctx.replica_states[r] = ReplicaState.DELETION_STARTED
                self.batch.add_stop_replica([broker], r.tp, delete=True)
        elif target is ReplicaState.NON_EXISTENT:
            for r in valid:
                assignment = self.ctx.assignment(r.tp)
                if assignment is not None:
                    self.ctx.set_assignment(r.tp, assignment.without_replica(broker))
                self.ctx.replica_states.pop(r, None)
        else:  # DELETION_SUCCESSFUL, DELETION_INELIGIBLE: bookkeeping
            for r in valid:
                self.ctx.replica_states[r] = target

    async def _remove_from_isr(
        self, broker: int, partitions: list[TopicPartition]
    ) -> dict[TopicPartition, LeaderAndIsr]:
        """Take `broker` out of each partition's ISR (never emptying it, so a clean election stays possible
        later) and out of leadership, at a new leader epoch."""
        results: dict[TopicPartition, LeaderAndIsr] = {}
        remaining = partitions
        while remaining:
            current = await self.store.partition_states(remaining)
            adjusted = {}
            for tp in remaining:
                state = current.get(tp)
                if state is None:
                    continue
                if state.controller_epoch > self.ctx.epoch:
                    log.error(
                        "not removing %d from the ISR of %s-%d: a newer controller wrote it", broker, *tp
                    )
                    continue
                if broker not in state.isr:
                    self.ctx.leadership[tp] = state
                    results[tp] = state
                    continue
                leader = NO_LEADER if state.leader == broker else state.leader
                isr = state.isr if len(state.isr) == 1 else tuple(r for r in state.isr if r != broker)
                adjusted[tp] = state.with_leader(leader, isr)
            if not adjusted:
                break
            done, remaining = await self.store.update_leader_and_isr(adjusted)
            for tp, outcome in done.items():
                if isinstance(outcome, LeaderAndIsr):
                    self.ctx.leadership[tp] = outcome
                    results[tp] = outcome
                else:
                    log.error("cannot remove %d from the ISR of %s-%d: %r", broker, tp[0], tp[1], outcome)
        return results
