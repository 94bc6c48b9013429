"""The controller (Kafka's KafkaController in ZooKeeper mode), one per broker; at most one is active.

Theory of operation
- Election: every broker's controller watches /controller. When it is absent, each tries to create it (ephemeral)
  in a multi-op that also bumps /controller_epoch; the winner is active with that epoch and the epoch znode's
  version. Every ZooKeeper write of the active controller checks that version (store.py), so a deposed controller
  (paused process, expired session) cannot write; brokers reject its requests by the controller epoch.
- One task: kazoo watch callbacks and session changes only put events on a queue (events.py); requests from
  brokers and admin clients put events carrying a future; one asyncio task takes events one at a time and is
  the only code that reads or changes the controller's state (context.py). ZooKeeper calls are awaited without
  blocking the loop (cluster/zk_client.py).
- Fail-over: read brokers, topics, assignments and partition states from ZooKeeper, then drive every partition
  and replica through the state machines (state_machines.py), which elect leaders where needed and tell brokers.
- Brokers are told with batched requests (batch.py) sent per broker in order (channel.py): LeaderAndIsr to the
  replicas of changed partitions, UpdateMetadata to every live broker, StopReplica to replicas that must stop
  (or delete). Leaders report ISR changes back with AlterPartition, which this controller writes to the
  partition's state znode with compare-and-set on its version (the partition epoch).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from broker_runtime.clock import Clock
from broker_runtime.cluster import zk_paths as z
from broker_runtime.cluster.zk_client import SessionExpiredError, SessionState, Watch, WatchKind, ZkClient
from broker_runtime.controller import events as ev
from broker_runtime.controller.batch import RequestBatch
from broker_runtime.controller.channel import BrokerTransport, ControllerChannel
from broker_runtime.controller.context import ControllerContext, PartitionReplica, TopicPartition
from broker_runtime.controller.election import Strategy, elect_preferred
from broker_runtime.controller.reassignment import Reassignments
from broker_runtime.controller.state import PartitionState, ReplicaState
from broker_runtime.controller.state_machines import (
    PartitionStateMachine,
    ReplicaStateMachine,
    StateChangeFailed,
)
from broker_runtime.controller.store import ControllerMovedError, ControllerZk
from broker_runtime.controller.topic_deletion import TopicDeletionManager
from broker_runtime.errors import KafkaError
from broker_runtime.protocol import inter_broker as ib

log = logging.getLogger(__name__)

PREFERRED, UNCLEAN = 0, 1  # Kafka's ElectionType
AUTO_REBALANCE_FIRST_DELAY_S = 5.0


@dataclass
class ControllerConfig:
    broker_id: int
    listener: str = "PLAINTEXT"  # inter.broker.listener.name: the endpoint brokers reach each other on
    delete_topic_enable: bool = True
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_s: float = 300.0
    leader_imbalance_per_broker_percentage: int = 10
    unclean_leader_election_default: Callable[[], bool] = lambda: False


Scheduler = Callable[[float, Callable[[], None]], Any]  # (delay s, callback) -> handle with .cancel()


class Controller:
    def __init__(
        self,
        config: ControllerConfig,
        zk: ZkClient,
        transport: BrokerTransport,
        *,
        register_broker: Callable[[], Awaitable[None]] | None = None,
        scheduler: Scheduler | None = None,
    ) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.zk = zk
        self.register_broker = register_broker
        clock = Clock()
        self.scheduler = scheduler or (lambda delay, fn: clock.call_later_ms(delay * 1000, fn))
        self.ctx = ControllerContext()
        self.store = ControllerZk(zk, self.ctx)
        self.batch = RequestBatch(self.broker_id, self.ctx, config.listener)
        self.channel = ControllerChannel(transport, self._on_response, self.scheduler)
        self.psm = PartitionStateMachine(self.ctx, self.store, self.batch, self.flush, self._unclean_enabled)
        self.rsm = ReplicaStateMachine(self.ctx, self.store, self.batch, self.flush)
        self.deletion = TopicDeletionManager(self)
        self.reassignments = Reassignments(self)
        self.active_controller_id = -1
        self._queue: asyncio.Queue[ev.Event] = asyncio.Queue()
        self._task: asyncio.Task | None = None
        self._current: ev.Event | None = None
        self._controller_watch: Watch | None = None
        self._watches: dict[str, Watch] = {}
        self._rebalance_timer: Any = None
        self._stopped = False

    # --- lifecycle ------------------------------------------------------------------------------------------

    @property
    def is_active(self) -> bool:
        return self.active_controller_id == self.broker_id

    def start(self) -> None:
        self.zk.add_session_listener(self._on_session)
        self._controller_watch = self.zk.watch(
            z.CONTROLLER, WatchKind.DATA, lambda: self.put(ev.ControllerChange())
        )
        self._task = asyncio.create_task(self._run(), name=f"controller-{self.broker_id}")
        self.put(ev.Startup())

    async def stop(self) -> None:
        """Stop processing; resign if active (the /controller znode goes with the ZooKeeper session)."""
        self._stopped = True
        if self._controller_watch is not None:
            self._controller_watch.cancel()
        interrupted = self._current  # the task's finally clears it when cancelled
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        if self.is_active:
            await self._resign(delete_znode=False)
        pending = [interrupted] if interrupted is not None else []
        while not self._queue.empty():
            pending.append(self._queue.get_nowait())
        for event in pending:
            self._fail(event, KafkaError(ErrorCode.not_controller, "the controller is shutting down"))

    def put(self, event: ev.Event) -> None:
        if not self._stopped:
            self._queue.put_nowait(event)

    def _on_session(self, state: SessionState) -> None:
        if state is SessionState.EXPIRED:
            self.put(ev.Expire())
        elif state is SessionState.NEW_SESSION:
            self.put(ev.RegisterBrokerAndReelect())

    async def _run(self) -> None:
        handlers: dict[type, Callable[[Any], Awaitable[None]]] = {
            ev.Startup: self._process_startup,
            ev.ControllerChange: self._process_controller_change,
            ev.Expire: self._process_expire,
            ev.RegisterBrokerAndReelect: self._process_register_and_reelect,
            ev.BrokerChange: self._process_broker_change,
            ev.BrokerModification: self._process_broker_modification,
            ev.TopicChange: self._process_topic_change,
            ev.PartitionModifications: self._process_partition_modifications,
            ev.TopicDeletion: self._process_topic_deletion,
            ev.ZkPartitionReassignment: self.reassignments.process_zk_reassignment,
            ev.ZkPreferredReplicaElection: self._process_zk_preferred_election,
            ev.IsrChangeNotification: self._process_isr_change_notification,
            ev.AutoPreferredReplicaLeaderElection: self._process_auto_rebalance,
            ev.UncleanLeaderElectionEnable: self._process_unclean_enable,
            ev.ResponseReceived: self._process_response,
            ev.ControlledShutdown: self._process_controlled_shutdown,
            ev.AlterPartitionReceived: self._process_alter_partition,
            ev.ReplicaLeaderElection: self._process_replica_leader_election,
            ev.ApiPartitionReassignment: self.reassignments.process_api_reassignment,
            ev.ListPartitionReassignments: self.reassignments.process_list,
        }
        while True:
            event = self._current = await self._queue.get()
            try:
                await handlers[type(event)](event)
            except ControllerMovedError as exc:
                log.info("controller moved while processing %s: %s", type(event).__name__, exc)
                self._fail(event, KafkaError(ErrorCode.not_controller, str(exc)))
                await self._maybe_resign()
            except SessionExpiredError:
                log.warning("ZooKeeper session expired while processing %s", type(event).__name__)
                self._fail(
                    event, KafkaError(ErrorCode.not_controller, "the controller lost its ZooKeeper session")
                )
            except KafkaError as exc:
                self._fail(event, exc)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.exception("controller failed processing %s", type(event).__name__)
                self._fail(event, exc)
            finally:
                self._current = None
                self.flush()

    @staticmethod
    def _fail(event: ev.Event, exc: Exception) -> None:
        if isinstance(event, ev.ApiEvent) and not event.reply.done():
            event.reply.set_exception(exc)

    def flush(self) -> None:
        """Send what the batch collected."""
        for broker, requests in self.batch.build().items():
            for request in requests:
                self.channel.send(broker, request)

    def _on_response(self, broker_id: int, request: Any, response: Any) -> None:
        self.put(ev.ResponseReceived(broker_id, request, response))

    # --- API for request handlers (enqueue and wait) --------------------------------------------------------

    async def _call(self, event: ev.ApiEvent) -> Any:
        if not self.is_active:
            raise KafkaError(ErrorCode.not_controller, f"broker {self.broker_id} is not the controller")
        self.put(event)
        return await event.reply

    async def controlled_shutdown(self, broker_id: int, broker_epoch: int) -> set[TopicPartition]:
        """The partitions the broker still leads after leadership was moved away (empty when done)."""
        return await self._call(ev.ControlledShutdown(broker_id=broker_id, broker_epoch=broker_epoch))

    async def alter_partition(self, request: Any) -> Any:
        return await self._call(ev.AlterPartitionReceived(request=request))

    async def elect_leaders(
        self, partitions: set[TopicPartition] | None, election_type: int
    ) -> dict[TopicPartition, tuple[ErrorCode, str | None]]:
        return await self._call(ev.ReplicaLeaderElection(partitions=partitions, election_type=election_type))

    async def alter_partition_reassignments(
        self, reassignments: dict[TopicPartition, tuple[int, ...] | None]
    ) -> dict[TopicPartition, tuple[ErrorCode, str | None]]:
        return await self._call(ev.ApiPartitionReassignment(reassignments=reassignments))

    async def list_partition_reassignments(
        self, partitions: set[TopicPartition] | None
    ) -> dict[TopicPartition, z.ReplicaAssignment]:
        return await self._call(ev.ListPartitionReassignments(partitions=partitions))

    def on_unclean_leader_election_enabled(self, topic: str | None) -> None:
        """A topic's (or the broker default's) unclean.leader.election.enable became true."""
        if self.is_active:
            self.put(ev.UncleanLeaderElectionEnable(topic))

    # --- election -------------------------------------------------------------------------------------------

    async def _process_startup(self, _: ev.Startup) -> None:
        await self._elect()

    async def _process_controller_change(self, _: ev.ControllerChange) -> None:
        await self._maybe_resign()
        if self.active_controller_id == -1:
            await self._elect()

    async def _process_expire(self, _: ev.Expire) -> None:
        if self.is_active:
            log.warning("ZooKeeper session expired: broker %d stops acting as controller", self.broker_id)
            await self._resign(delete_znode=False)
        self.active_controller_id = -1

    async def _process_register_and_reelect(self, _: ev.RegisterBrokerAndReelect) -> None:
        if self.register_broker is not None:
            await self.register_broker()
        await self._maybe_resign()
        await self._elect()

    async def _elect(self) -> None:
        self.active_controller_id = await self._current_controller()
        if self.active_controller_id != -1:
            return
        try:
            epoch, version = await self.store.register_controller(self.broker_id)
        except ControllerMovedError:
            await self._maybe_resign()
            return
        self.ctx.epoch, self.ctx.epoch_zk_version = epoch, version
        self.active_controller_id = self.broker_id
        log.info("broker %d is the controller now, epoch %d", self.broker_id, epoch)
        try:
            await self._on_failover()
        except ControllerMovedError:
            raise
        except SessionExpiredError:
            log.warning("ZooKeeper session expired while broker %d was taking over", self.broker_id)
            await self._resign(delete_znode=False)
        except Exception:
            log.exception("becoming the controller failed; resigning so that another broker takes over")
            await self._resign(delete_znode=True)

    async def _current_controller(self) -> int:
        found = await self.store.controller_id()
        if found == self.broker_id and not self.is_active:
            # Elected in this session by an election whose fail-over was abandoned (a session expiry overtook
            # it): we hold /controller without the state to act on it. Give the election back.
            log.info("broker %d holds /controller without having taken over; releasing it", self.broker_id)
            await self.store.release_stale_controller()
            return -1
        return -1 if found is None else found

    async def _maybe_resign(self) -> None:
        was_active = self.is_active
        self.active_controller_id = await self._current_controller()
        if was_active and not self.is_active:
            log.info("broker %d is no longer the controller", self.broker_id)
            await self._resign(delete_znode=False)

    async def _resign(self, *, delete_znode: bool) -> None:
        if delete_znode:
            try:
                await self.store.delete_controller()
            except ControllerMovedError:
                pass
        self.active_controller_id = -1
        for w in self._watches.values():
            w.cancel()
        self._watches.clear()
        if self._rebalance_timer is not None:
            self._rebalance_timer.cancel()
            self._rebalance_timer = None
        self.batch.build()  # drop anything not sent
        await self.channel.close()
        self.ctx.reset()

    def _watch(self, path: str, kind: WatchKind, event: Callable[[], ev.Event]) -> None:
        if path not in self._watches:
            self._watches[path] = self.zk.watch(path, kind, lambda: self.put(event()))

    def _unwatch(self, path: str) -> None:
        w = self._watches.pop(path, None)
        if w is not None:
            w.cancel()

    def unwatch_topic(self, topic: str) -> None:
        self._unwatch(z.topic_path(topic))

    async def _on_failover(self) -> None:
        self._watch(z.BROKER_IDS, WatchKind.CHILDREN, ev.BrokerChange)
        self._watch(z.TOPICS, WatchKind.CHILDREN, ev.TopicChange)
        self._watch(z.DELETE_TOPICS, WatchKind.CHILDREN, ev.TopicDeletion)
        self._watch(z.ISR_CHANGE_NOTIFICATION, WatchKind.CHILDREN, ev.IsrChangeNotification)
        self._watch(z.PREFERRED_REPLICA_ELECTION, WatchKind.DATA, ev.ZkPreferredReplicaElection)
        self._watch(z.REASSIGN_PARTITIONS, WatchKind.DATA, ev.ZkPartitionReassignment)
        names, _ = await self.store.isr_change_notifications()
        await self.store.delete_isr_change_notifications(names)
        await self._initialize_context()
        to_delete = await self.store.topic_deletions()
        offline_topics = {
            t
            for t in self.ctx.all_topics
            if any(not self.ctx.is_replica_online(r.replica, r.tp) for r in self.ctx.replicas_for_topic(t))
        }
        reassigning = {tp[0] for tp in self.ctx.being_reassigned}
        await self.deletion.init(to_delete & self.ctx.all_topics, offline_topics | reassigning)
        # Brokers need the live brokers before the LeaderAndIsr requests the state machines send.
        self.batch.add_update_metadata(self.ctx.live_or_shutting_down_ids)
        self.flush()
        self.rsm.initialize()
        replicas = [
            PartitionReplica(t, p, r) for t, p in self.ctx.all_partitions() for r in self.ctx.replicas((t, p))
        ]
        online = [r for r in replicas if self.ctx.is_replica_online(r.replica, r.tp)]
        offline = [r for r in replicas if not self.ctx.is_replica_online(r.replica, r.tp)]
        await self.rsm.handle(online, ReplicaState.ONLINE)
        await self.rsm.handle(offline, ReplicaState.OFFLINE)
        self.psm.initialize()
        await self.psm.trigger_online_state_change()
        log.info("controller %d ready with epoch %d", self.broker_id, self.ctx.epoch)
        await self.reassignments.initialize()
        await self.deletion.resume()
        pending = await self.store.preferred_election()
        if pending:
            await self._on_replica_election(self._pending_preferred(pending), PREFERRED, trigger="zookeeper")
        if self.config.auto_leader_rebalance_enable:
            self._schedule_rebalance(AUTO_REBALANCE_FIRST_DELAY_S)

    async def _initialize_context(self) -> None:
        self.ctx.live_brokers = await self.store.brokers()
        log.info("live brokers: %s", sorted(self.ctx.live_brokers))
        topics = await self.store.topics()
        assignments = await self.store.topic_assignments(topics)
        await self._adopt_topics(assignments)
        self.ctx.leadership = await self.store.partition_states(self.ctx.all_partitions())
        self.ctx.shutting_down.clear()
        for broker_id, reg in self.ctx.live_brokers.items():
            self.channel.add_broker(reg)
            self._watch_broker(broker_id)

    async def _adopt_topics(self, assignments: dict[str, z.TopicAssignment]) -> None:
        """Take topics into the context; a topic without a topic id (written by an old tool) gets one."""
        for topic, assignment in sorted(assignments.items()):
            topic_id = assignment.topic_id
            if topic_id is None:
                topic_id = uuid.uuid4()
                self.ctx.topic_ids[topic] = topic_id
                await self.store.set_topic_assignment(topic, assignment.partitions)
            self.ctx.topic_ids[topic] = topic_id
            self.ctx.assignments[topic] = dict(assignment.partitions)
            for p, a in assignment.partitions.items():
                if a.is_being_reassigned:
                    self.ctx.being_reassigned.add((topic, p))
            self._watch(z.topic_path(topic), WatchKind.DATA, lambda t=topic: ev.PartitionModifications(t))

    def _watch_broker(self, broker_id: int) -> None:
        self._watch(z.broker_path(broker_id), WatchKind.DATA, lambda b=broker_id: ev.BrokerModification(b))

    def send_update_metadata(self, brokers, partitions=()) -> None:
        self.batch.add_update_metadata(brokers, partitions)
        self.flush()

    # --- brokers --------------------------------------------------------------------------------------------

    async def _process_broker_change(self, _: ev.BrokerChange) -> None:
        if not self.is_active:
            return
        current = await self.store.brokers()
        known = self.ctx.live_or_shutting_down_ids
        new = sorted(set(current) - known)
        dead = sorted(known - set(current))
        bounced = sorted(b for b in set(current) & known if current[b].epoch > self.ctx.live_brokers[b].epoch)
        if new or dead or bounced:
            log.info(
                "brokers joined %s, left %s, bounced %s; live now %s", new, dead, bounced, sorted(current)
            )
        for b in new:
            self.channel.add_broker(current[b])
        for b in bounced:
            self.channel.remove_broker(b)
            self.channel.add_broker(current[b])
        for b in dead:
            self.channel.remove_broker(b)
        if new:
            self.ctx.live_brokers.update({b: current[b] for b in new})
            await self._on_broker_startup(new)
        if bounced:
            for b in bounced:
                del self.ctx.live_brokers[b]
            await self._on_broker_failure(bounced)
            self.ctx.live_brokers.update({b: current[b] for b in bounced})
            await self._on_broker_startup(bounced)
        if dead:
            for b in dead:
                del self.ctx.live_brokers[b]
            await self._on_broker_failure(dead)

    async def _on_broker_startup(self, new: list[int]) -> None:
        for b in new:
            self.ctx.offline_dirs.pop(b, None)
        existing = self.ctx.live_or_shutting_down_ids - set(new)
        self.send_update_metadata(existing)
        self.send_update_metadata(new, list(self.ctx.leadership))
        await self.rsm.handle(
            [
                r
                for r in self.ctx.replicas_on_brokers(set(new))
                if self.ctx.replica_state(r) is not ReplicaState.DELETION_SUCCESSFUL
            ],
            ReplicaState.ONLINE,
        )
        await self.psm.trigger_online_state_change()
        await self.reassignments.resume_where(lambda tp, a: any(r in new for r in a.target_replicas))
        topics = {r.topic for r in self.ctx.replicas_on_brokers(set(new)) if self.deletion.queued(r.topic)}
        await self.deletion.resume_for(topics)
        for b in new:
            self._watch_broker(b)

    async def _on_broker_failure(self, dead: list[int]) -> None:
        for b in dead:
            self.ctx.offline_dirs.pop(b, None)
            self.ctx.shutting_down.discard(b)
        await self._on_replicas_offline(self.ctx.replicas_on_brokers(set(dead)))
        for b in dead:
            self._unwatch(z.broker_path(b))

    async def _on_replicas_offline(self, replicas: list[PartitionReplica]) -> None:
        for_deletion = [r for r in replicas if self.deletion.queued(r.topic)]
        others = [r for r in replicas if not self.deletion.queued(r.topic)]
        await self.psm.handle(self.ctx.partitions_with_offline_leader(), PartitionState.OFFLINE)
        results = await self.psm.trigger_online_state_change()
        await self.rsm.handle(others, ReplicaState.OFFLINE)
        if for_deletion:
            await self.deletion.fail_replica_deletion(for_deletion)
        if not others and not any(not isinstance(r, Exception) for r in results.values()):
            self.send_update_metadata(self.ctx.live_or_shutting_down_ids)

    async def _process_broker_modification(self, event: ev.BrokerModification) -> None:
        if not self.is_active:
            return
        new = await self.store.broker(event.broker_id)
        old = self.ctx.live_brokers.get(event.broker_id)
        if new is None or old is None or new.epoch != old.epoch:
            return
        if (new.endpoints, new.rack) != (old.endpoints, old.rack):
            log.info("broker %d changed its registration: %s -> %s", event.broker_id, old, new)
            self.ctx.live_brokers[event.broker_id] = new
            self.channel.remove_broker(event.broker_id)
            self.channel.add_broker(new)
            self.send_update_metadata(self.ctx.live_or_shutting_down_ids)

    # --- topics ---------------------------------------------------------------------------------------------

    async def _process_topic_change(self, _: ev.TopicChange) -> None:
        if not self.is_active:
            return
        topics = await self.store.topics()
        known = self.ctx.all_topics
        for topic in sorted(known - topics):
            self.unwatch_topic(topic)
            self.ctx.remove_topic(topic)
        new = topics - known
        if not new:
            return
        assignments = await self.store.topic_assignments(new)
        await self._adopt_topics(assignments)
        partitions = [(t, p) for t, a in sorted(assignments.items()) for p in sorted(a.partitions)]
        log.info("new topics %s with %d partitions", sorted(assignments), len(partitions))
        await self.on_new_partitions(partitions)

    async def on_new_partitions(self, partitions: list[TopicPartition]) -> None:
        await self.psm.handle(partitions, PartitionState.NEW)
        await self.rsm.handle(self.ctx.replicas_for_partitions(partitions), ReplicaState.NEW)
        await self.psm.handle(partitions, PartitionState.ONLINE, Strategy.OFFLINE)
        await self.rsm.handle(self.ctx.replicas_for_partitions(partitions), ReplicaState.ONLINE)

    async def _process_partition_modifications(self, event: ev.PartitionModifications) -> None:
        if not self.is_active:
            return
        topic = event.topic
        found = (await self.store.topic_assignments([topic])).get(topic)
        if found is None or topic not in self.ctx.assignments:
            return
        added = {p: a for p, a in found.partitions.items() if p not in self.ctx.assignments[topic]}
        if not added:
            return
        if self.deletion.queued(topic):
            log.warning("not adding partitions %s to %s: the topic is being deleted", sorted(added), topic)
            await self.store.set_topic_assignment(topic, self.ctx.assignments[topic])
            return
        for p, a in added.items():
            self.ctx.set_assignment((topic, p), a)
        log.info("topic %s gains partitions %s", topic, sorted(added))
        await self.on_new_partitions([(topic, p) for p in sorted(added)])

    async def _process_topic_deletion(self, _: ev.TopicDeletion) -> None:
        if not self.is_active:
            return
        requested = await self.store.topic_deletions()
        missing = requested - self.ctx.all_topics
        if missing:
            log.warning("ignoring deletion of topics that do not exist: %s", sorted(missing))
            await self.store.remove_topic_deletions(missing)
        requested -= missing
        if not requested:
            return
        if not self.config.delete_topic_enable:
            log.info("delete.topic.enable is false: not deleting %s", sorted(requested))
            await self.store.remove_topic_deletions(requested)
            return
        log.info("deleting topics %s", sorted(requested))
        self.deletion.mark_ineligible(
            {tp[0] for tp in self.ctx.being_reassigned} & requested, "a reassignment is in progress"
        )
        await self.deletion.enqueue(requested)

    # --- elections --------------------------------------------------------------------------------------------

    async def _unclean_enabled(self, topic: str) -> bool:
        configs = await self.store.topic_config(topic)
        value = configs.get("unclean.leader.election.enable")
        if value is None:
            return bool(self.config.unclean_leader_election_default())
        return value.strip().lower() == "true"

    async def _process_unclean_enable(self, event: ev.UncleanLeaderElectionEnable) -> None:
        if self.is_active:
            await self.psm.trigger_online_state_change(event.topic)

    def _pending_preferred(self, partitions: set[TopicPartition]) -> set[TopicPartition]:
        pending = set()
        for tp in partitions:
            replicas = self.ctx.replicas(tp)
            state = self.ctx.leadership.get(tp)
            if not replicas or state is None or state.leader == replicas[0] or self.deletion.queued(tp[0]):
                continue
            pending.add(tp)
        return pending

    async def _process_zk_preferred_election(self, _: ev.ZkPreferredReplicaElection) -> None:
        if not self.is_active:
            return
        partitions = await self.store.preferred_election()
        if partitions is None:
            return
        known = set(self.ctx.all_partitions())
        electable = {
            tp
            for tp in partitions & known
            if not self.deletion.queued(tp[0]) and self._leader(tp) != self.ctx.replicas(tp)[0]
        }
        try:
            await self._on_replica_election(electable, PREFERRED, trigger="zookeeper")
        finally:
            await self.store.delete_preferred_election()

    def _leader(self, tp: TopicPartition) -> int:
        state = self.ctx.leadership.get(tp)
        return z.NO_LEADER if state is None else state.leader

    async def _on_replica_election(
        self, partitions: set[TopicPartition], election_type: int, trigger: str
    ) -> dict[TopicPartition, Any]:
        if not partitions:
            return {}
        log.info("%s leader election for %d partitions (%s)", "preferred" if election_type == PREFERRED else
                 "unclean", len(partitions), trigger)  # fmt: skip
        strategy = Strategy.PREFERRED if election_type == PREFERRED else Strategy.OFFLINE
        return await self.psm.handle(
            sorted(partitions), PartitionState.ONLINE, strategy, allow_unclean=trigger == "admin"
        )

    async def _process_replica_leader_election(self, event: ev.ReplicaLeaderElection) -> None:
        if not self.is_active:
            raise KafkaError(ErrorCode.not_controller)
        known = set(self.ctx.all_partitions())
        requested = known if event.partitions is None else set(event.partitions)
        results: dict[TopicPartition, tuple[ErrorCode, str | None]] = {}
        electable = set()
        for tp in sorted(requested):
            if tp not in known:
                results[tp] = (ErrorCode.unknown_topic_or_partition, "The partition does not exist.")
            elif self.deletion.queued(tp[0]):
                results[tp] = (ErrorCode.invalid_topic_exception, "The topic is being deleted")
            elif (event.election_type == PREFERRED and self._leader(tp) == self.ctx.replicas(tp)[0]) or (
                event.election_type == UNCLEAN and self.ctx.is_replica_online(self._leader(tp), tp)
            ):
                results[tp] = (ErrorCode.election_not_needed, None)
            else:
                electable.add(tp)
        outcomes = await self._on_replica_election(electable, event.election_type, trigger="admin")
        for tp, outcome in outcomes.items():
            if isinstance(outcome, StateChangeFailed):
                code = (
                    ErrorCode.preferred_leader_not_available
                    if event.election_type == PREFERRED
                    else ErrorCode.eligible_leaders_not_available
                )
                results[tp] = (code, str(outcome))
            elif isinstance(outcome, Exception):
                results[tp] = (ErrorCode.unknown_server_error, repr(outcome))
            else:
                results[tp] = (ErrorCode.none, None)
        if event.partitions is None:  # "all partitions": only report what was done
            results = {tp: r for tp, r in results.items() if r[0] != ErrorCode.election_not_needed}
        event.reply.set_result(results)

    def _schedule_rebalance(self, delay_s: float) -> None:
        if self._rebalance_timer is not None:
            self._rebalance_timer.cancel()
        self._rebalance_timer = self.scheduler(
            delay_s, lambda: self.put(ev.AutoPreferredReplicaLeaderElection())
        )

    async def _process_auto_rebalance(self, _: ev.AutoPreferredReplicaLeaderElection) -> None:
        if not self.is_active:
            return
        try:
            await self.check_and_trigger_rebalance()
        finally:
            if self.is_active:
                self._schedule_rebalance(self.config.leader_imbalance_check_interval_s)

    async def check_and_trigger_rebalance(self) -> None:
        """Kafka's checkAndTriggerAutoLeaderRebalance: per preferred leader, if more than
        leader.imbalance.per.broker.percentage of its partitions are led by someone else, move them back."""
        by_preferred: dict[int, list[TopicPartition]] = {}
        for tp in self.ctx.all_partitions():
            if not self.deletion.queued(tp[0]) and self.ctx.replicas(tp):
                by_preferred.setdefault(self.ctx.replicas(tp)[0], []).append(tp)
        for preferred, partitions in sorted(by_preferred.items()):
            imbalanced = [
                tp for tp in partitions if tp in self.ctx.leadership and self._leader(tp) != preferred
            ]
            ratio = len(imbalanced) / len(partitions)
            if ratio > self.config.leader_imbalance_per_broker_percentage / 100:
                candidates = {
                    tp
                    for tp in imbalanced
                    if elect_preferred(
                        self.ctx.leadership[tp], self.ctx.replicas(tp), self._online(tp)
                    ).leader_and_isr
                }
                await self._on_replica_election(candidates, PREFERRED, trigger="auto")

    def _online(self, tp: TopicPartition) -> set[int]:
        return {r for r in self.ctx.replicas(tp) if self.ctx.is_replica_online(r, tp)}

    # --- requests from brokers ------------------------------------------------------------------------------

    async def _process_controlled_shutdown(self, event: ev.ControlledShutdown) -> None:
        if not self.is_active:
            raise KafkaError(ErrorCode.not_controller, "the controller moved")
        known_epoch = self.ctx.broker_epoch(event.broker_id)
        if known_epoch is None:
            raise KafkaError(ErrorCode.broker_not_available, f"broker {event.broker_id} is not registered")
        if event.broker_epoch != -1 and event.broker_epoch < known_epoch:
            raise KafkaError(
                ErrorCode.stale_broker_epoch, f"broker epoch {event.broker_epoch} is older than {known_epoch}"
            )
        broker = event.broker_id
        log.info("controlled shutdown of broker %d", broker)
        self.ctx.shutting_down.add(broker)
        partitions = [
            tp
            for tp in self.ctx.partitions_on_broker(broker)
            if len(self.ctx.replicas(tp)) > 1
            and tp in self.ctx.leadership
            and tp[0] not in self.ctx.deletion_started
        ]
        led = [tp for tp in partitions if self._leader(tp) == broker]
        followed = [tp for tp in partitions if self._leader(tp) != broker]
        await self.psm.handle(led, PartitionState.ONLINE, Strategy.CONTROLLED_SHUTDOWN)
        for tp in followed:
            self.batch.add_stop_replica([broker], tp, delete=False)
        self.flush()
        await self.rsm.handle([PartitionReplica(t, p, broker) for t, p in followed], ReplicaState.OFFLINE)
        # Still led here although another in-sync replica could lead: the broker tries again. Partitions
        # nobody else can lead (one replica, or every other in-sync replica down or leaving too) are not
        # reported, so a broker does not wait for what cannot happen (Kafka reports them and the broker
        # retries controlled.shutdown.max.retries times).
        live = self.ctx.live_broker_ids
        event.reply.set_result({
            tp
            for tp in self.ctx.partition_leaders_on_broker(broker)
            if tp in self.ctx.leadership and any(r in live and r != broker for r in self.ctx.leadership[tp].isr)
        })  # fmt: skip

    async def _process_alter_partition(self, event: ev.AlterPartitionReceived) -> None:
        from broker_runtime.controller.alter_partition import process_alter_partition

        response, changed = await process_alter_partition(self, event.request)
        event.reply.set_result(response)
        for tp in changed:
            if tp in self.ctx.being_reassigned:
                await self.reassignments.maybe_complete(tp)

    async def _process_isr_change_notification(self, _: ev.IsrChangeNotification) -> None:
        if not self.is_active:
            return
        names, partitions = await self.store.isr_change_notifications()
        try:
            partitions = {tp for tp in partitions if tp in set(self.ctx.all_partitions())}
            if partitions:
                self.ctx.leadership.update(await self.store.partition_states(partitions))
                self.send_update_metadata(self.ctx.live_or_shutting_down_ids, partitions)
                for tp in partitions & self.ctx.being_reassigned:
                    await self.reassignments.maybe_complete(tp)
        finally:
            await self.store.delete_isr_change_notifications(names)

    async def _process_response(self, event: ev.ResponseReceived) -> None:
        if not self.is_active:
            return
        if isinstance(event.response, ib.LeaderAndIsrResponse):
            await self._on_leader_and_isr_response(event.broker_id, event.response)
        elif isinstance(event.response, ib.StopReplicaResponse):
            await self._on_stop_replica_response(event.broker_id, event.request, event.response)
        elif getattr(event.response, "error_code", ErrorCode.none) != ErrorCode.none:
            log.warning(
                "broker %d answered %s with %s", event.broker_id, type(event.request).__name__,
                event.response.error_code.name,
            )  # fmt: skip

    async def _on_leader_and_isr_response(self, broker: int, response: ib.LeaderAndIsrResponse) -> None:
        if response.error_code != ErrorCode.none:
            log.warning("broker %d answered LeaderAndIsr with %s", broker, response.error_code.name)
            return
        offline, online = set(), set()
        for topic in response.topics:
            name = self.ctx.topic_name(topic.topic_id) if topic.topic_id else None
            if name is None:
                continue
            for p in topic.partition_errors:
                if p.error_code == ErrorCode.kafka_storage_error:
                    offline.add((name, p.partition_index))
                elif p.error_code == ErrorCode.none:
                    online.add((name, p.partition_index))
        previous = set(self.ctx.offline_dirs.get(broker, set()))
        current = (previous - online) | offline
        self.ctx.offline_dirs[broker] = current
        newly = current - previous
        if newly:
            log.warning("replicas on broker %d are offline (storage error): %s", broker, sorted(newly))
            await self._on_replicas_offline([PartitionReplica(t, p, broker) for t, p in sorted(newly)])

    async def _on_stop_replica_response(
        self, broker: int, request: Any, response: ib.StopReplicaResponse
    ) -> None:
        deleted = {
            (t.topic_name, p.partition_index)
            for t in request.topic_states
            for p in t.partition_states
            if p.delete_partition
        }
        if not deleted:
            return
        errors = {(e.topic_name, e.partition_index): e.error_code for e in response.partition_errors}
        failed = {
            tp for tp in deleted if response.error_code != ErrorCode.none or errors.get(tp, ErrorCode.none)
        }
        await self.deletion.fail_replica_deletion([PartitionReplica(t, p, broker) for t, p in sorted(failed)])
        await self.deletion.complete_replica_deletion(
            [PartitionReplica(t, p, broker) for t, p in sorted(deleted - failed)]
        )
