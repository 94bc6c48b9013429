"""The controller's reads and writes of ZooKeeper. Every write is fenced: it runs in a multi-op together with a
check of `/controller_epoch` at the znode version this controller wrote when it was elected, so a controller that
lost its election (a paused process, an expired session) cannot change anything: it gets `ControllerMovedError`
and resigns. Partition states are additionally written with compare-and-set on their own znode version (the
partition epoch), so a concurrent AlterPartition from a leader is never overwritten blindly."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping

from broker_runtime.cluster import zk_paths as z
from broker_runtime.cluster.zk_client import (
    BadVersionError,
    CheckOp,
    CreateOp,
    DeleteOp,
    MultiError,
    NodeExistsError,
    NoNodeError,
    Op,
    SetOp,
    ZkClient,
    children_or_empty,
    get_or_none,
)
from broker_runtime.controller.context import ControllerContext, TopicPartition

log = logging.getLogger(__name__)


class ControllerMovedError(Exception):
    """Another broker is the controller now (or this one's election went away)."""


class ControllerZk:
    def __init__(self, zk: ZkClient, ctx: ControllerContext) -> None:
        self.zk = zk
        self.ctx = ctx

    # --- election -------------------------------------------------------------------------------------------

    async def controller_id(self) -> int | None:
        found = await get_or_none(self.zk, z.CONTROLLER)
        if found is None:
            return None
        try:
            return z.decode_controller(found[0])
        except z.ZkDataError:
            log.error("unreadable %s; treating the cluster as having no controller", z.CONTROLLER)
            return None

    async def register_controller(self, broker_id: int) -> tuple[int, int]:
        """Create /controller and bump /controller_epoch in one multi-op (Kafka's
        registerControllerAndIncrementControllerEpoch). Returns (epoch, epoch znode version)."""
        found = await get_or_none(self.zk, z.CONTROLLER_EPOCH)
        if found is None:
            try:
                await self.zk.create(z.CONTROLLER_EPOCH, z.encode_controller_epoch(0))
            except NodeExistsError:
                pass
            found = await self.zk.get(z.CONTROLLER_EPOCH)
        epoch, version = z.decode_controller_epoch(found[0]), found[1].version
        try:
            results = await self.zk.multi(
                [
                    CreateOp(z.CONTROLLER, z.encode_controller(broker_id), ephemeral=True),
                    SetOp(z.CONTROLLER_EPOCH, z.encode_controller_epoch(epoch + 1), version),
                ]
            )
        except MultiError as exc:
            raise ControllerMovedError(f"controller election lost ({exc.cause!r})") from None
        return epoch + 1, results[1].version

    async def release_stale_controller(self) -> None:
        """Delete /controller if this session created it (unfenced: we are not an active controller)."""
        found = await get_or_none(self.zk, z.CONTROLLER)
        if found is not None and found[1].ephemeral_owner == self.zk.session_id:
            try:
                await self.zk.delete(z.CONTROLLER, found[1].version)
            except (NoNodeError, BadVersionError):
                pass

    async def delete_controller(self) -> None:
        try:
            await self._fenced(DeleteOp(z.CONTROLLER))
        except MultiError:
            pass

    # --- fencing --------------------------------------------------------------------------------------------

    async def _fenced(self, *ops: Op) -> list:
        try:
            results = await self.zk.multi([CheckOp(z.CONTROLLER_EPOCH, self.ctx.epoch_zk_version), *ops])
        except MultiError as exc:
            if exc.index == 0:
                raise ControllerMovedError(
                    f"/controller_epoch moved past version {self.ctx.epoch_zk_version}"
                ) from None
            raise MultiError(exc.index - 1, exc.cause) from None
        return results[1:]

    # --- brokers --------------------------------------------------------------------------------------------

    async def brokers(self) -> dict[int, z.BrokerRegistration]:
        ids = sorted(int(i) for i in await children_or_empty(self.zk, z.BROKER_IDS) if i.isdigit())
        found = await asyncio.gather(*(self.broker(i) for i in ids))
        return {reg.broker_id: reg for reg in found if reg is not None}

    async def broker(self, broker_id: int) -> z.BrokerRegistration | None:
        found = await get_or_none(self.zk, z.broker_path(broker_id))
        if found is None:
            return None
        try:
            return z.decode_broker(broker_id, found[0], epoch=found[1].czxid)
        except z.ZkDataError as exc:
            log.error("ignoring broker %d: %s", broker_id, exc)
            return None

    # --- topics ---------------------------------------------------------------------------------------------

    async def topics(self) -> set[str]:
        return set(await children_or_empty(self.zk, z.TOPICS))

    async def topic_assignments(self, topics: Iterable[str]) -> dict[str, z.TopicAssignment]:
        async def one(topic: str) -> z.TopicAssignment | None:
            found = await get_or_none(self.zk, z.topic_path(topic))
            if found is None:
                return None
            try:
                return z.decode_topic(topic, found[0])
            except z.ZkDataError as exc:
                log.error("ignoring topic %s: %s", topic, exc)
                return None

        topics = sorted(topics)
        found = await asyncio.gather(*(one(t) for t in topics))
        return {t: a for t, a in zip(topics, found, strict=True) if a is not None}

    async def set_topic_assignment(self, topic: str, partitions: Mapping[int, z.ReplicaAssignment]) -> None:
        await self._fenced(
            SetOp(z.topic_path(topic), z.encode_topic(self.ctx.topic_ids.get(topic), partitions))
        )

    async def topic_config(self, topic: str) -> dict[str, str]:
        path = z.topic_config_path(topic)
        found = await get_or_none(self.zk, path)
        return {} if found is None else z.decode_config(path, found[0])

    async def delete_topic(self, topic: str) -> None:
        """Remove a deleted topic's znodes: partition states, the assignment, its config, the deletion marker."""
        partitions = await children_or_empty(self.zk, z.partitions_path(topic))
        for p in partitions:
            path = f"{z.partitions_path(topic)}/{p}"
            ops = [DeleteOp(f"{path}/{child}") for child in await children_or_empty(self.zk, path)]
            await self._delete_quietly(*ops, DeleteOp(path))
        await self._delete_quietly(DeleteOp(z.partitions_path(topic)))
        await self._delete_quietly(DeleteOp(z.topic_path(topic)))
        await self._delete_quietly(DeleteOp(z.topic_config_path(topic)))
        await self._delete_quietly(DeleteOp(z.delete_topic_path(topic)))

    async def _delete_quietly(self, *ops: DeleteOp) -> None:
        try:
            await self._fenced(*ops)
        except MultiError as exc:
            if not isinstance(exc.cause, NoNodeError):
                raise
            # Someone removed part of it already: delete what is left, one by one.
            for op in ops:
                try:
                    await self._fenced(op)
                except MultiError as inner:
                    if not isinstance(inner.cause, NoNodeError):
                        raise

    async def topic_deletions(self) -> set[str]:
        return set(await children_or_empty(self.zk, z.DELETE_TOPICS))

    async def remove_topic_deletions(self, topics: Iterable[str]) -> None:
        for topic in sorted(topics):
            await self._delete_quietly(DeleteOp(z.delete_topic_path(topic)))

    # --- partition states -----------------------------------------------------------------------------------

    async def partition_states(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, z.LeaderAndIsr]:
        async def one(tp: TopicPartition) -> z.LeaderAndIsr | None:
            found = await get_or_none(self.zk, z.partition_state_path(*tp))
            if found is None:
                return None
            try:
                return z.decode_partition_state(tp[0], tp[1], found[0], found[1].version)
            except z.ZkDataError as exc:
                log.error("ignoring partition state: %s", exc)
                return None

        partitions = sorted(partitions)
        found = await asyncio.gather(*(one(tp) for tp in partitions))
        return {tp: s for tp, s in zip(partitions, found, strict=True) if s is not None}

    async def create_partition_states(
        self, states: Mapping[TopicPartition, z.LeaderAndIsr]
    ) -> dict[TopicPartition, z.LeaderAndIsr | Exception]:
        async def one(tp: TopicPartition, state: z.LeaderAndIsr) -> z.LeaderAndIsr | Exception:
            parent = z.partition_path(*tp)
            for path in (z.partitions_path(tp[0]), parent):
                try:
                    await self.zk.create(path)
                except NodeExistsError:
                    pass
            try:
                await self._fenced(CreateOp(z.partition_state_path(*tp), z.encode_partition_state(state)))
            except MultiError as exc:
                return exc.cause
            return state

        items = sorted(states.items())
        results = await asyncio.gather(*(one(tp, s) for tp, s in items))
        return {tp: r for (tp, _), r in zip(items, results, strict=True)}

    async def update_leader_and_isr(
        self, states: Mapping[TopicPartition, z.LeaderAndIsr]
    ) -> tuple[dict[TopicPartition, z.LeaderAndIsr | Exception], list[TopicPartition]]:
        """Write each state with compare-and-set on its partition epoch. Returns (finished, to retry): a
        partition whose znode moved meanwhile (BADVERSION) is retried by the caller after reading it again."""

        async def one(tp: TopicPartition, state: z.LeaderAndIsr) -> z.LeaderAndIsr | Exception:
            written = z.LeaderAndIsr(
                state.leader, state.leader_epoch, state.isr, self.ctx.epoch, state.partition_epoch,
                state.leader_recovery_state,
            )  # fmt: skip
            try:
                (stat,) = await self._fenced(
                    SetOp(
                        z.partition_state_path(*tp), z.encode_partition_state(written), state.partition_epoch
                    )
                )
            except MultiError as exc:
                return exc.cause
            return z.LeaderAndIsr(
                written.leader, written.leader_epoch, written.isr, written.controller_epoch, stat.version,
                written.leader_recovery_state,
            )  # fmt: skip

        items = sorted(states.items())
        results = await asyncio.gather(*(one(tp, s) for tp, s in items))
        finished: dict[TopicPartition, z.LeaderAndIsr | Exception] = {}
        retry: list[TopicPartition] = []
        for (tp, _), result in zip(items, results, strict=True):
            if isinstance(result, BadVersionError):
                retry.append(tp)
            else:
                finished[tp] = result
        return finished, retry

    # --- admin znodes ---------------------------------------------------------------------------------------

    async def reassignment(self) -> dict[TopicPartition, tuple[int, ...]] | None:
        found = await get_or_none(self.zk, z.REASSIGN_PARTITIONS)
        if found is None:
            return None
        try:
            return z.decode_reassignment(found[0])
        except z.ZkDataError as exc:
            log.error("ignoring %s", exc)
            return {}

    async def write_reassignment(self, plan: Mapping[TopicPartition, tuple[int, ...]]) -> None:
        """Rewrite /admin/reassign_partitions, deleting it when nothing is left."""
        try:
            if plan:
                await self._fenced(SetOp(z.REASSIGN_PARTITIONS, z.encode_reassignment(plan)))
            else:
                await self._fenced(DeleteOp(z.REASSIGN_PARTITIONS))
        except MultiError as exc:
            if not isinstance(exc.cause, NoNodeError):
                raise

    async def preferred_election(self) -> set[TopicPartition] | None:
        found = await get_or_none(self.zk, z.PREFERRED_REPLICA_ELECTION)
        if found is None:
            return None
        try:
            return z.decode_partition_set(z.PREFERRED_REPLICA_ELECTION, found[0])
        except z.ZkDataError as exc:
            log.error("ignoring %s", exc)
            return set()

    async def delete_preferred_election(self) -> None:
        await self._delete_quietly(DeleteOp(z.PREFERRED_REPLICA_ELECTION))

    async def isr_change_notifications(self) -> tuple[list[str], set[TopicPartition]]:
        names = z.sorted_by_sequence(
            await children_or_empty(self.zk, z.ISR_CHANGE_NOTIFICATION), z.ISR_CHANGE_PREFIX
        )
        partitions: set[TopicPartition] = set()
        for name in names:
            path = f"{z.ISR_CHANGE_NOTIFICATION}/{name}"
            found = await get_or_none(self.zk, path)
            if found is not None:
                try:
                    partitions |= z.decode_partition_set(path, found[0])
                except z.ZkDataError as exc:
                    log.error("ignoring %s", exc)
        return names, partitions

    async def delete_isr_change_notifications(self, names: Iterable[str]) -> None:
        for name in names:
            await self._delete_quietly(DeleteOp(f"{z.ISR_CHANGE_NOTIFICATION}/{name}"))
