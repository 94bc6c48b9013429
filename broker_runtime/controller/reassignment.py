"""Partition reassignment in the controller (Kafka's onPartitionReassignment and friends).

With RS the replica set, ORS the original one, TRS the target, AR = TRS - ORS (adding), RR = ORS - TRS (removing):
    A. start: write RS = TRS + ORS, AR, RR to /brokers/topics/<t>; bump the leader epoch and send LeaderAndIsr to
       ORS + TRS; the replicas in AR become New (they start following and catching up).
    B. when every replica of TRS is in the ISR (reported by the leader with AlterPartition): AR become Online;
       RS = TRS in memory; elect a new leader from TRS if the current one is leaving (or bump the epoch);
       RR go Offline (out of the ISR) and are deleted (StopReplica delete); write RS = TRS to ZooKeeper last,
       because it is the only place the original replicas are kept; drop the partition from
       /admin/reassign_partitions; UpdateMetadata to everyone.
A reassignment submitted again replaces the running one; submitting "no target" (AlterPartitionReassignments
with null replicas, or kafka-reassign-partitions --cancel) moves back to the original replicas. Reassignments
survive a controller fail-over: the adding/removing replicas are in the topic znode.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from broker_runtime.cluster.zk_paths import LeaderAndIsr, ReplicaAssignment
from broker_runtime.controller import events as ev
from broker_runtime.controller.context import PartitionReplica, TopicPartition
from broker_runtime.controller.election import Strategy
from broker_runtime.controller.state import PartitionState, ReplicaState
from broker_runtime.controller.state_machines import StateChangeFailed
from broker_runtime.controller.store import ControllerMovedError
from broker_runtime.errors import KafkaError

if TYPE_CHECKING:
    from broker_runtime.controller.controller import Controller

log = logging.getLogger(__name__)

Result = tuple[ErrorCode, str | None]


class Reassignments:
    def __init__(self, controller: Controller) -> None:
        self.c = controller
        self.ctx = controller.ctx

    # --- entry points ---------------------------------------------------------------------------------------

    async def initialize(self) -> None:
        """At fail-over: reassignments submitted through ZooKeeper, then those in progress in topic znodes."""
        resumed = await self._process_zk()
        await self.resume_where(lambda tp, _: tp not in resumed)

    async def resume_where(self, predicate: Callable[[TopicPartition, ReplicaAssignment], bool]) -> None:
        for tp in sorted(self.ctx.being_reassigned):
            assignment = self.ctx.assignment(tp)
            if assignment is not None and predicate(tp, assignment):
                await self.on_partition_reassignment(tp, assignment)

    async def process_zk_reassignment(self, _: ev.ZkPartitionReassignment) -> None:
        if self.c.is_active:
            await self._process_zk()

    async def process_api_reassignment(self, event: ev.ApiPartitionReassignment) -> None:
        if not self.c.is_active:
            raise KafkaError(ErrorCode.not_controller)
        results: dict[TopicPartition, Result] = {}
        to_reassign: dict[TopicPartition, ReplicaAssignment] = {}
        for tp, target in event.reassignments.items():
            error = self._validate(tp, target)
            if error is not None:
                results[tp] = error
                continue
            built = self._build(tp, target)
            if built is None:
                results[tp] = (ErrorCode.no_reassignment_in_progress, None)
            else:
                to_reassign[tp] = built
        # The latest reassignment wins over one submitted through ZooKeeper.
        await self._remove_from_zk(lambda tp, _: tp in to_reassign)
        results.update(await self._trigger(to_reassign))
        event.reply.set_result(results)

    async def process_list(self, event: ev.ListPartitionReassignments) -> None:
        if not self.c.is_active:
            raise KafkaError(ErrorCode.not_controller)
        partitions = self.ctx.being_reassigned if event.partitions is None else event.partitions
        listed = {}
        for tp in partitions:
            assignment = self.ctx.assignment(tp)
            if assignment is not None and assignment.is_being_reassigned:
                listed[tp] = assignment
        event.reply.set_result(listed)

    async def maybe_complete(self, tp: TopicPartition) -> None:
        assignment = self.ctx.assignment(tp)
        if assignment is not None and await self._is_complete(tp, assignment):
            log.info("target replicas %s of %s-%d caught up", list(assignment.target_replicas), *tp)
            await self.on_partition_reassignment(tp, assignment)

    # --- validation -----------------------------------------------------------------------------------------

    def _validate(self, tp: TopicPartition, target: tuple[int, ...] | None) -> Result | None:
        current = self.ctx.assignment(tp)
        if current is None or self.c.deletion.queued(tp[0]):
            return (ErrorCode.unknown_topic_or_partition, "The partition does not exist.")
        if target is None:
            return None
        if not target:
            return (
                ErrorCode.invalid_replica_assignment,
                "Empty replica list specified in partition reassignment.",
            )
        if len(set(target)) != len(target):
            return (
                ErrorCode.invalid_replica_assignment,
                f"Duplicate replica ids in partition reassignment replica list: {list(target)}",
            )
        if any(r < 0 for r in target):
            return (
                ErrorCode.invalid_replica_assignment,
                f"Invalid broker id in replica list: {list(target)}",
            )
        adding = current.reassign_to(target).adding
        if not set(adding) <= self.ctx.live_broker_ids:
            return (
                ErrorCode.invalid_replica_assignment,
                f"Replica assignment has brokers that are not alive. Replica list: {list(adding)}, "
                f"live broker list: {sorted(self.ctx.live_broker_ids)}",
            )
        return None

    def _build(self, tp: TopicPartition, target: tuple[int, ...] | None) -> ReplicaAssignment | None:
        current = self.ctx.assignment(tp) or ReplicaAssignment(())
        if current.is_being_reassigned:
            return current.reassign_to(current.origin_replicas if target is None else target)
        return None if target is None else current.reassign_to(target)

    async def _trigger(
        self, reassignments: dict[TopicPartition, ReplicaAssignment]
    ) -> dict[TopicPartition, Result]:
        results: dict[TopicPartition, Result] = {}
        for tp, reassignment in sorted(reassignments.items()):
            if self.c.deletion.queued(tp[0]) or not self.ctx.replicas(tp):
                results[tp] = (ErrorCode.unknown_topic_or_partition, "The partition does not exist.")
                continue
            # Replicas a replaced reassignment was adding are stopped (and deleted) at once; Kafka would do so
            # even when they are all that is left in sync. Refuse instead of deleting the only good copies.
            unneeded = set(self.ctx.replicas(tp)) - set(reassignment.replicas)
            state = self.ctx.leadership.get(tp)
            if state is not None and state.isr and set(state.isr) <= unneeded:
                results[tp] = (
                    ErrorCode.invalid_replica_assignment,
                    f"this would remove every in-sync replica of {tp[0]}-{tp[1]} (ISR {list(state.isr)}); "
                    "wait until the other replicas are back in sync",
                )
                continue
            try:
                await self.on_partition_reassignment(tp, reassignment)
                results[tp] = (ErrorCode.none, None)
            except ControllerMovedError:
                raise
            except Exception as exc:
                log.exception("reassignment of %s-%d failed", *tp)
                results[tp] = (ErrorCode.unknown_server_error, repr(exc))
        return results

    async def _process_zk(self) -> set[TopicPartition]:
        plan = await self.c.store.reassignment()
        if plan is None:
            return set()
        results: dict[TopicPartition, Result] = {}
        to_reassign = {}
        for tp, target in plan.items():
            built = self._build(tp, target) if self.ctx.assignment(tp) is not None else None
            if built is None:
                results[tp] = (ErrorCode.no_reassignment_in_progress, None)
            else:
                to_reassign[tp] = built
        results.update(await self._trigger(to_reassign))
        failed = {tp for tp, (code, _) in results.items() if code != ErrorCode.none}
        if failed:
            log.warning(
                "reassignments from %s that cannot run: %s", "/admin/reassign_partitions", sorted(failed)
            )
            await self._remove_from_zk(lambda tp, _: tp in failed)
        return set(results) - failed

    # --- the steps ------------------------------------------------------------------------------------------

    async def on_partition_reassignment(self, tp: TopicPartition, reassignment: ReplicaAssignment) -> None:
        self.c.deletion.mark_ineligible({tp[0]}, "a reassignment is in progress")
        await self._update_current(tp, reassignment)
        if not await self._is_complete(tp, reassignment):
            await self._bump_epoch_and_send(tp, reassignment)  # A1
            adding = [PartitionReplica(tp[0], tp[1], r) for r in reassignment.adding]
            # A2 (replicas already started by an earlier round got the LeaderAndIsr of A1)
            await self.c.rsm.handle(
                [r for r in adding if self.ctx.replica_state(r) is ReplicaState.NON_EXISTENT],
                ReplicaState.NEW,
            )
            log.info("reassigning %s-%d: replicas %s, adding %s, removing %s", tp[0], tp[1],
                     list(reassignment.replicas), list(reassignment.adding), list(reassignment.removing))  # fmt: skip
            return
        await self.c.rsm.handle(  # B1
            [PartitionReplica(tp[0], tp[1], r) for r in reassignment.adding], ReplicaState.ONLINE
        )
        completed = ReplicaAssignment(reassignment.target_replicas)  # B2
        self.ctx.set_assignment(tp, completed)
        await self._move_leader_if_required(tp, completed)  # B3
        await self._stop_removed(tp, reassignment.removing)  # B4, B5
        await self._write_assignment(tp, completed)  # B6
        if tp in self.ctx.being_reassigned:  # B7
            await self._remove_from_zk(lambda t, replicas: t == tp and tuple(replicas) == completed.replicas)
            self.ctx.being_reassigned.discard(tp)
        self.c.send_update_metadata(self.ctx.live_or_shutting_down_ids, [tp])  # B8
        log.info("reassignment of %s-%d completed: replicas %s", tp[0], tp[1], list(completed.replicas))
        await self.c.deletion.resume_for({tp[0]})

    async def _update_current(self, tp: TopicPartition, reassignment: ReplicaAssignment) -> None:
        current = self.ctx.assignment(tp)
        if current != reassignment:
            await self._write_assignment(tp, reassignment)
            self.ctx.set_assignment(tp, reassignment)
            # Replicas added by a reassignment this one replaces are not needed any more.
            unneeded = [r for r in (current.replicas if current else ()) if r not in reassignment.replicas]
            if unneeded:
                await self._stop_removed(tp, unneeded)
        self.ctx.being_reassigned.add(tp)

    async def _write_assignment(self, tp: TopicPartition, assignment: ReplicaAssignment) -> None:
        partitions = dict(self.ctx.assignments.get(tp[0], {}))
        partitions[tp[1]] = assignment
        await self.c.store.set_topic_assignment(tp[0], partitions)

    async def _is_complete(self, tp: TopicPartition, assignment: ReplicaAssignment) -> bool:
        if not assignment.is_being_reassigned:
            return True
        state = (await self.c.store.partition_states([tp])).get(tp)
        return state is not None and set(assignment.target_replicas) <= set(state.isr)

    async def _move_leader_if_required(self, tp: TopicPartition, assignment: ReplicaAssignment) -> None:
        leader = self.ctx.leadership[tp].leader if tp in self.ctx.leadership else -1
        if leader in assignment.replicas and self.ctx.is_replica_online(leader, tp):
            await self._bump_epoch_and_send(tp, assignment)
        else:
            await self.c.psm.handle([tp], PartitionState.ONLINE, Strategy.REASSIGN)

    async def _stop_removed(self, tp: TopicPartition, removed: tuple[int, ...] | list[int]) -> None:
        replicas = [PartitionReplica(tp[0], tp[1], r) for r in removed]
        for state in (
            ReplicaState.OFFLINE,
            ReplicaState.DELETION_STARTED,
            ReplicaState.DELETION_SUCCESSFUL,
            ReplicaState.NON_EXISTENT,
        ):
            await self.c.rsm.handle(replicas, state)

    async def _bump_epoch_and_send(self, tp: TopicPartition, assignment: ReplicaAssignment) -> None:
        """A new leader epoch with the same leader and ISR, so that replicas take the new replica set."""
        updated = await self._bump_leader_epoch(tp)
        self.c.batch.add_leader_and_isr(assignment.origin_replicas, tp, updated)
        self.c.batch.add_leader_and_isr(assignment.adding, tp, updated, is_new=True)
        self.c.flush()

    async def _bump_leader_epoch(self, tp: TopicPartition) -> LeaderAndIsr:
        while True:
            state = (await self.c.store.partition_states([tp])).get(tp)
            if state is None:
                raise StateChangeFailed(f"partition {tp[0]}-{tp[1]} has no state to bump")
            if state.controller_epoch > self.ctx.epoch:
                raise StateChangeFailed(f"partition {tp[0]}-{tp[1]} was written by a newer controller")
            done, _ = await self.c.store.update_leader_and_isr({tp: state.with_leader(state.leader)})
            outcome = done.get(tp)
            if isinstance(outcome, Exception):
                raise outcome
            if outcome is not None:
                self.ctx.leadership[tp] = outcome
                return outcome

    async def _remove_from_zk(self, should_remove: Callable[[TopicPartition, tuple[int, ...]], bool]) -> None:
        plan = await self.c.store.reassignment()
        if plan is None:
            return
        kept = {tp: r for tp, r in plan.items() if not should_remove(tp, r)}
        if len(kept) != len(plan):
            await self.c.store.write_reassignment(kept)
