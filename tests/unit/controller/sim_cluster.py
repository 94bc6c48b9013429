"""A cluster in one event loop for deterministic controller simulations (style.md practice 10).

Real `Controller`s, one per simulated broker, over the in-memory ZooKeeper of tests/fake_zookeeper.py; brokers are
small stand-ins that apply LeaderAndIsr, UpdateMetadata and StopReplica the way Kafka's ReplicaManager does
(leader epochs, controller epochs, broker epochs fenced) and report ISR changes with AlterPartition. There is no
clock and no socket: `settle()` runs the loop until nothing is left to do, and a seed fixes every interleaving.

Invariants are checked on every write of a partition state znode (`SimCluster.violations`) and on demand
(`check_converged()`): a state is written only by the controller of the current epoch; leader epochs never go
back; a new leader comes from the previous ISR unless unclean election is allowed; the leader is in the ISR.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from kazoo.exceptions import NodeExistsError
from kio.schema.alter_partition.v3 import request as ap
from kio.schema.errors import ErrorCode

from broker_runtime.cluster import zk_paths as z
from broker_runtime.cluster.metadata_cache import MetadataCache
from broker_runtime.controller.controller import Controller, ControllerConfig
from broker_runtime.errors import KafkaError
from broker_runtime.protocol import inter_broker as ib
from tests.fake_zookeeper import FakeZkClient, FakeZooKeeper

STATE_PATH = re.compile(r"^/brokers/topics/([^/]+)/partitions/(\d+)/state$")


@dataclass
class LocalReplica:
    """A broker's own view of one of its partitions (what its ReplicaManager would hold)."""

    leader: int
    leader_epoch: int
    isr: list[int]
    partition_epoch: int
    replicas: list[int]
    topic_id: uuid.UUID | None

    def is_leader(self, broker_id: int) -> bool:
        return self.leader == broker_id


class SimTransport:
    def __init__(self, cluster: SimCluster, owner: SimBroker) -> None:
        self.cluster = cluster
        self.owner = owner

    async def send(self, broker: z.BrokerRegistration, request: Any) -> Any:
        await self.owner.running.wait()  # a paused controller sends nothing
        target = self.cluster.brokers.get(broker.broker_id)
        # A dead broker (or an earlier incarnation) never answers: the request waits until the controller drops
        # the broker's queue, as a TCP connection to a dead host would.
        while target is None or target.dead or target.epoch != broker.epoch:
            await asyncio.Event().wait()
        await target.running.wait()  # a paused broker answers when it resumes
        for _ in range(self.cluster.zk.rng.randint(0, 2)):
            await asyncio.sleep(0)
        self.cluster.in_flight += 1
        try:
            return target.handle(request)
        finally:
            self.cluster.in_flight -= 1

    async def forget(self, broker_id: int) -> None:
        pass


class SimBroker:
    def __init__(self, cluster: SimCluster, broker_id: int, rack: str | None = None) -> None:
        self.cluster = cluster
        self.broker_id = broker_id
        self.rack = rack
        self.zk: FakeZkClient = cluster.zk.client(f"broker-{broker_id}")
        self.cache = MetadataCache(broker_id)
        self.replicas: dict[tuple[str, int], LocalReplica] = {}
        self.deleted: set[tuple[str, int]] = set()
        self.epoch = -1
        self.dead = False
        self.running = asyncio.Event()
        self.running.set()
        self.controller = Controller(
            ControllerConfig(
                broker_id,
                auto_leader_rebalance_enable=cluster.auto_rebalance,
                leader_imbalance_check_interval_s=300,
                unclean_leader_election_default=lambda: cluster.unclean_default,
            ),
            self.zk,
            SimTransport(cluster, self),
            register_broker=self.register,
            scheduler=cluster.schedule,
        )

    def __repr__(self) -> str:
        return f"<SimBroker {self.broker_id} epoch={self.epoch}{' dead' if self.dead else ''}>"

    async def start(self) -> None:
        await self.zk.start()
        await self.register()
        self.controller.start()

    async def register(self) -> None:
        reg = z.BrokerRegistration(
            self.broker_id, (z.Endpoint("PLAINTEXT", f"b{self.broker_id}", 9092),), self.rack
        )
        try:
            await self.zk.create(z.broker_path(self.broker_id), z.encode_broker(reg), ephemeral=True)
        except NodeExistsError:
            pass  # registered already in this session
        _, stat = await self.zk.get(z.broker_path(self.broker_id))
        self.epoch = stat.czxid

    # --- requests from the controller -----------------------------------------------------------------------

    def handle(self, request: Any) -> Any:
        if isinstance(request, ib.LeaderAndIsrRequest):
            return self._leader_and_isr(request)
        if isinstance(request, ib.UpdateMetadataRequest):
            error = self.cache.check_controller(
                request.controller_id, request.controller_epoch, request.broker_epoch, self.epoch
            )
            if error == ErrorCode.none:
                self.cache.update(request)  # replicas stay until StopReplica, as in Kafka
            return ib.UpdateMetadataResponse(error_code=error)
        if isinstance(request, ib.StopReplicaRequest):
            return self._stop_replica(request)
        raise AssertionError(f"unexpected {request!r}")

    def _leader_and_isr(self, request: ib.LeaderAndIsrRequest) -> ib.LeaderAndIsrResponse:
        error = self.cache.check_controller(
            request.controller_id, request.controller_epoch, request.broker_epoch, self.epoch
        )
        if error != ErrorCode.none:
            self.cluster.rejected.append((self.broker_id, type(request).__name__, error))
            return ib.LeaderAndIsrResponse(error_code=error, topics=())
        topics = []
        for topic in request.topic_states:
            errors = []
            for ps in topic.partition_states:
                tp = (topic.topic_name, ps.partition_index)
                current = self.replicas.get(tp)
                code = ErrorCode.none
                if current is not None and ps.leader_epoch <= current.leader_epoch:
                    code = ErrorCode.stale_controller_epoch  # Kafka ignores an epoch it has seen already
                elif self.broker_id not in ps.replicas:
                    code = ErrorCode.unknown_topic_or_partition
                else:
                    self.replicas[tp] = LocalReplica(
                        ps.leader,
                        ps.leader_epoch,
                        list(ps.isr),
                        ps.partition_epoch,
                        list(ps.replicas),
                        topic.topic_id,
                    )
                    self.deleted.discard(tp)
                errors.append(
                    ib.LeaderAndIsrPartitionError(partition_index=ps.partition_index, error_code=code)
                )
            topics.append(ib.LeaderAndIsrTopicError(topic_id=topic.topic_id, partition_errors=tuple(errors)))
        return ib.LeaderAndIsrResponse(error_code=ErrorCode.none, topics=tuple(topics))

    def _stop_replica(self, request: ib.StopReplicaRequest) -> ib.StopReplicaResponse:
        error = self.cache.check_controller(
            request.controller_id, request.controller_epoch, request.broker_epoch, self.epoch
        )
        if error != ErrorCode.none:
            return ib.StopReplicaResponse(error_code=error, partition_errors=())
        errors = []
        for topic in request.topic_states:
            for ps in topic.partition_states:
                tp = (topic.topic_name, ps.partition_index)
                current = self.replicas.get(tp)
                code = ErrorCode.none
                if current is not None and ps.leader_epoch >= 0 and ps.leader_epoch < current.leader_epoch:
                    code = ErrorCode.fenced_leader_epoch
                else:
                    self.replicas.pop(tp, None)
                    if ps.delete_partition:
                        self.deleted.add(tp)
                errors.append(
                    ib.StopReplicaPartitionError(topic_name=tp[0], partition_index=tp[1], error_code=code)
                )
        return ib.StopReplicaResponse(error_code=ErrorCode.none, partition_errors=tuple(errors))

    # --- what a leader does ---------------------------------------------------------------------------------

    async def alter_isr(self, tp: tuple[str, int], isr: list[int]) -> ErrorCode:
        """Ask the controller to change the ISR of a partition this broker leads."""
        local = self.replicas.get(tp)
        if local is None or not local.is_leader(self.broker_id):
            return ErrorCode.not_leader_or_follower
        controller = self.cluster.brokers.get(self.cache.controller_id)
        if controller is None or controller.dead:
            return ErrorCode.not_controller
        request = ap.AlterPartitionRequest(
            broker_id=self.broker_id, broker_epoch=self.epoch,
            topics=(ap.TopicData(topic_id=local.topic_id, partitions=(ap.PartitionData(
                partition_index=tp[1], leader_epoch=local.leader_epoch, partition_epoch=local.partition_epoch,
                new_isr_with_epochs=tuple(ap.BrokerState(broker_id=b) for b in isr),
            ),)),),
        )  # fmt: skip
        try:
            response = await controller.controller.alter_partition(request)
        except KafkaError as exc:
            return exc.error_code
        if response.error_code != ErrorCode.none:
            return response.error_code
        result = response.topics[0].partitions[0]
        if result.error_code == ErrorCode.none and self.replicas.get(tp) is local:
            local.isr, local.partition_epoch = list(result.isr), result.partition_epoch
        return result.error_code

    # --- faults ---------------------------------------------------------------------------------------------

    async def crash(self) -> None:
        """kill -9: the process stops at once; its ZooKeeper session lives on until it expires."""
        self.dead = True
        self.zk.disconnect()
        await self.controller.stop()

    def pause(self) -> None:
        """SIGSTOP: no requests answered, no ZooKeeper traffic; the session may expire meanwhile."""
        self.running.clear()
        self.zk.disconnect()

    def resume(self) -> None:
        self.running.set()
        self.zk.reconnect()


@dataclass
class Violation:
    path: str
    detail: str


@dataclass
class SimCluster:
    seed: int = 0
    auto_rebalance: bool = False
    unclean_default: bool = False
    zk: FakeZooKeeper = field(init=False)
    brokers: dict[int, SimBroker] = field(default_factory=dict)
    violations: list[Violation] = field(default_factory=list)
    rejected: list[tuple[int, str, ErrorCode]] = field(default_factory=list)
    timers: list[tuple[float, Any]] = field(default_factory=list)
    unclean_topics: set[str] = field(default_factory=set)
    in_flight: int = 0
    leader_changes: int = 0

    def __post_init__(self) -> None:
        self.zk = FakeZooKeeper(self.seed)
        self.zk.observers.append(self._check_write)

    # --- setup ----------------------------------------------------------------------------------------------

    async def start(self, count: int, racks: list[str | None] | None = None) -> None:
        admin = self.zk.client("admin")
        await admin.start()
        for path in z.PERSISTENT_PATHS:
            await admin.create(path, makepath=True)
        await admin.create(z.CLUSTER_ID, z.encode_cluster_id("sim-cluster"), makepath=True)
        self.admin = admin
        for i in range(count):
            await self.add_broker(i, racks[i] if racks else None)
        await self.settle()

    async def add_broker(self, broker_id: int, rack: str | None = None) -> SimBroker:
        old = self.brokers.get(broker_id)
        assert old is None or old.dead, f"broker {broker_id} is running"
        broker = SimBroker(self, broker_id, rack)
        self.brokers[broker_id] = broker
        await broker.start()
        return broker

    def schedule(self, delay_s: float, fn: Any) -> Any:
        """The controllers' timer seam: timers are kept and fired by the test (`fire_timers`)."""
        entry = [delay_s, fn, False]

        class Handle:
            def cancel(self_inner) -> None:
                entry[2] = True

        self.timers.append(entry)
        return Handle()

    def fire_timers(self) -> int:
        due, self.timers = self.timers, []
        fired = 0
        for _, fn, cancelled in due:
            if not cancelled:
                fn()
                fired += 1
        return fired

    # --- admin, as the broker-side admin path writes ZooKeeper ---------------------------------------------

    async def create_topic(
        self, name: str, assignment: dict[int, list[int]], configs: dict[str, str] | None = None
    ):
        await self.admin.create(z.topic_config_path(name), z.encode_config(configs or {}))
        await self.admin.create(
            z.topic_path(name),
            z.encode_topic(uuid.uuid4(), {p: z.ReplicaAssignment(tuple(r)) for p, r in assignment.items()}),
        )

    async def add_partitions(self, name: str, new: dict[int, list[int]]) -> None:
        data, stat = await self.admin.get(z.topic_path(name))
        current = z.decode_topic(name, data)
        partitions = dict(current.partitions)
        partitions.update({p: z.ReplicaAssignment(tuple(r)) for p, r in new.items()})
        await self.admin.set(z.topic_path(name), z.encode_topic(current.topic_id, partitions), stat.version)

    async def delete_topic(self, name: str) -> None:
        await self.admin.create(z.delete_topic_path(name))

    # --- running --------------------------------------------------------------------------------------------

    def controller(self) -> SimBroker | None:
        active = [b for b in self.brokers.values() if not b.dead and b.controller.is_active]
        return active[0] if len(active) == 1 else None

    def idle(self) -> bool:
        if self.in_flight:
            return False
        for b in self.brokers.values():
            c = b.controller
            if not c._queue.empty():
                return False
            if any(not q.queue.empty() for q in c.channel._brokers.values() if self._deliverable(q.reg)):
                return False
        return True

    def _deliverable(self, reg: z.BrokerRegistration) -> bool:
        target = self.brokers.get(reg.broker_id)
        return (
            target is not None and not target.dead and target.epoch == reg.epoch and target.running.is_set()
        )

    async def settle(self, max_steps: int = 200_000) -> None:
        quiet = 0
        for _ in range(max_steps):
            await asyncio.sleep(0)
            quiet = quiet + 1 if self.idle() else 0
            if quiet >= 200:
                return
        raise AssertionError("the cluster did not settle")

    # --- invariants -----------------------------------------------------------------------------------------

    def _check_write(self, path: str, old: bytes | None, new: bytes | None) -> None:
        m = STATE_PATH.match(path)
        if m is None or new is None:
            return
        topic, p = m.group(1), int(m.group(2))
        state = z.decode_partition_state(topic, p, new, 0)
        epoch = z.decode_controller_epoch(self.zk.data(z.CONTROLLER_EPOCH) or b"0")

        def bad(detail: str) -> None:
            self.violations.append(Violation(path, detail))

        if state.controller_epoch != epoch:
            bad(f"written at controller epoch {state.controller_epoch} while the epoch is {epoch}")
        if not state.isr:
            bad("empty ISR")
        if state.leader != z.NO_LEADER and state.leader not in state.isr:
            bad(f"leader {state.leader} not in ISR {state.isr}")
        if old is None:
            return
        before = z.decode_partition_state(topic, p, old, 0)
        if state.leader_epoch < before.leader_epoch:
            bad(f"leader epoch went back from {before.leader_epoch} to {state.leader_epoch}")
        if state.leader != before.leader:
            self.leader_changes += 1
            if state.leader_epoch <= before.leader_epoch:
                bad(f"leader changed {before.leader}->{state.leader} without a new epoch")
            unclean_ok = self.unclean_default or topic in self.unclean_topics
            if state.leader != z.NO_LEADER and state.leader not in before.isr and not unclean_ok:
                bad(f"unclean election of {state.leader}: previous ISR {before.isr}")

    def zk_state(self, topic: str, p: int) -> z.LeaderAndIsr | None:
        data = self.zk.data(z.partition_state_path(topic, p))
        version = self.zk.nodes[z.partition_state_path(topic, p)].version if data else 0
        return None if data is None else z.decode_partition_state(topic, p, data, version)

    def zk_assignment(self, topic: str) -> z.TopicAssignment | None:
        data = self.zk.data(z.topic_path(topic))
        return None if data is None else z.decode_topic(topic, data)

    def live(self) -> list[SimBroker]:
        return [b for b in self.brokers.values() if not b.dead]

    def check_converged(self) -> None:
        """After `settle()` with every broker healthy: one controller everyone knows, every partition led by a
        live replica, and every broker's view equal to ZooKeeper's."""
        assert not self.violations, self.violations
        controller = self.controller()
        assert controller is not None, [(b.broker_id, b.controller.active_controller_id) for b in self.live()]
        registered = {int(i) for i in self.zk.children(z.BROKER_IDS)}
        assert registered == {b.broker_id for b in self.live()}
        for topic in self.zk.children(z.TOPICS):
            assignment = self.zk_assignment(topic)
            for p, a in assignment.partitions.items():
                state = self.zk_state(topic, p)
                assert state is not None, f"{topic}-{p} has no state"
                live_replicas = [r for r in a.replicas if r in registered]
                if live_replicas:
                    assert state.leader in live_replicas, (
                        f"{topic}-{p}: leader {state.leader} of {a.replicas}"
                    )
                for b in self.live():
                    cached = b.cache.partition(topic, p)
                    assert cached is not None, f"broker {b.broker_id} does not know {topic}-{p}"
                    assert (cached.leader, cached.leader_epoch, cached.isr) == (
                        state.leader, state.leader_epoch, list(state.isr),
                    ), f"broker {b.broker_id} sees {topic}-{p} as {cached}, ZooKeeper has {state}"  # fmt: skip
                    assert cached.replicas == list(a.replicas)
                for r in live_replicas:
                    local = self.brokers[r].replicas.get((topic, p))
                    assert local is not None, f"broker {r} does not host {topic}-{p}"
                    assert (local.leader, local.leader_epoch) == (state.leader, state.leader_epoch), (
                        f"broker {r} thinks {topic}-{p} is led by {local.leader}@{local.leader_epoch}, "
                        f"ZooKeeper has {state.leader}@{state.leader_epoch}"
                    )
        for b in self.live():
            assert b.cache.controller_id == controller.broker_id
            assert set(b.cache.live_brokers) == registered
