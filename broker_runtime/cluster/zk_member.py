"""A broker's membership of a ZooKeeper cluster: its session, its registration, its controller, and what it does
with the controller's requests. `Broker` composes it when `zookeeper.connect` is set.

- Session and registration: one ZooKeeper session per broker (`zookeeper.session.timeout.ms`); the broker
  registers `/brokers/ids/<id>` (ephemeral) with its advertised listeners and rack once its listener is up; the
  znode's czxid is its broker epoch. After `kill -9` the old registration lives until its session expires: a
  restarted broker waits for it. When the session expires the broker stops acting as leader at once (no
  produce is accepted where another leader may already be elected); it registers again in a new session, and
  the controller, seeing a new broker epoch, makes it leader or follower again with new leader epochs.
- Requests from the controller: LeaderAndIsr makes this broker leader or follower of partitions (logs created
  as needed, off the event loop) and its partitions' new leaders go into this broker's metadata at once, so that
  Metadata from here agrees with the NOT_LEADER_OR_FOLLOWER it now answers; UpdateMetadata refreshes what
  Metadata and DescribeCluster answer; StopReplica
  stops serving partitions and, for deletions and reassignments, deletes their logs. All are fenced: an older
  controller epoch, an earlier registration of this broker, or an older leader epoch is refused.
- Configs: topic and broker configs live in ZooKeeper; every broker follows `/config/changes` and applies what
  changed.
- Controlled shutdown (SIGTERM): ask the controller to move leadership away (ControlledShutdown) before leaving.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kio.schema.alter_partition.v3 import request as alter_partition_v3
from kio.schema.errors import ErrorCode

from broker_runtime.cluster import zk_paths as z
from broker_runtime.cluster.broker_client import BrokerClient
from broker_runtime.cluster.zk_client import (
    KazooZkClient,
    NodeExistsError,
    NoNodeError,
    SessionExpiredError,
    SessionState,
    WatchKind,
    children_or_empty,
    delete_if_exists,
    ensure_path,
    get_or_none,
)
from broker_runtime.cluster.zk_metadata_store import ZkMetadataStore
from broker_runtime.controller.controller import Controller, ControllerConfig
from broker_runtime.errors import KafkaError
from broker_runtime.log.log_manager import NewLog
from broker_runtime.protocol import inter_broker as ib
from broker_runtime.replication.fetcher import ReplicaFetcherManager
from broker_runtime.replication.partition import Partition

if TYPE_CHECKING:
    from broker_runtime.broker import Broker

log = logging.getLogger(__name__)

CONFIG_CHANGE_EXPIRATION_MS = 15 * 60 * 1000  # Kafka's: notifications older than this are purged


async def resolve_broker_id(config) -> int:
    """`broker.id` unset in a cluster: the id in the log dirs' meta.properties (a broker keeps its id across
    restarts), else a new one from ZooKeeper's /brokers/seqid above `reserved.broker.max.id` (Kafka's)."""
    for log_dir in config.log_dirs:
        path = Path(log_dir) / "meta.properties"
        if path.exists():
            for line in path.read_text().splitlines():
                key, _, value = line.partition("=")
                if key.strip() == "broker.id" and value.strip().lstrip("-").isdigit() and int(value) >= 0:
                    return int(value)
    zk = KazooZkClient(
        config.zookeeper_connect,
        session_timeout_ms=config["zookeeper.session.timeout.ms"],
        connection_timeout_ms=config["zookeeper.connection.timeout.ms"],
    )
    await zk.start()
    try:
        await ensure_path(zk, z.BROKER_SEQID)
        stat = await zk.set(z.BROKER_SEQID, b"")
        broker_id = stat.version + config["reserved.broker.max.id"]
    finally:
        await zk.close()
    log.info("generated broker.id %d (broker.id.generation.enable)", broker_id)
    return broker_id


class ZkClusterMember:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        config = broker.config
        self.broker_id = broker.broker_id
        self.zk = KazooZkClient(
            config.zookeeper_connect,
            session_timeout_ms=config["zookeeper.session.timeout.ms"],
            connection_timeout_ms=config["zookeeper.connection.timeout.ms"],
        )
        self.store = ZkMetadataStore(self.zk, broker.advertised, config.advertised_listeners[0].name)
        self.listener = config.inter_broker_listener_name
        self.client = BrokerClient(
            f"broker-{self.broker_id}",
            self.listener,
            clock=self.broker.clock,
            request_timeout_ms=config["controller.socket.timeout.ms"],
        )
        self.controller = Controller(
            ControllerConfig(
                broker_id=self.broker_id,
                listener=self.listener,
                delete_topic_enable=config["delete.topic.enable"],
                auto_leader_rebalance_enable=config["auto.leader.rebalance.enable"],
                leader_imbalance_check_interval_s=config["leader.imbalance.check.interval.seconds"],
                leader_imbalance_per_broker_percentage=config["leader.imbalance.per.broker.percentage"],
                unclean_leader_election_default=lambda: bool(config["unclean.leader.election.enable"]),
            ),
            self.zk,
            self.client,
            register_broker=self.register,
            scheduler=lambda delay_s, fn: broker.clock.call_later_ms(delay_s * 1000, fn),
        )
        self.broker_epoch = -1
        self._last_config_change = -1
        self._config_lock = asyncio.Lock()
        # One request of the controller at a time, start to end (Kafka's replicaStateChangeLock): requests on a
        # connection run concurrently, and one that waits (for a log, a config) must not be overtaken.
        self._state_change = asyncio.Lock()
        self._config_watch = None
        self._tasks: set[asyncio.Task] = set()

    # --- lifecycle ------------------------------------------------------------------------------------------

    async def connect(self) -> None:
        """Before the logs are loaded: the session, Kafka's persistent paths, the cluster id, dynamic broker
        configs (so that logs load with them)."""
        await self.zk.start()
        for path in z.PERSISTENT_PATHS:
            await ensure_path(self.zk, path)
        await self.store.load()
        await self.store.load_topic_configs()
        for entity, values in self.store.broker_configs().items():
            self.broker.config.replace_dynamic(values, cluster_default=entity == "")
        # Notifications already there are older than the configs just read.
        names = z.sorted_by_sequence(
            await children_or_empty(self.zk, z.CONFIG_CHANGES), z.CONFIG_CHANGE_PREFIX
        )
        if names:
            self._last_config_change = z.sequence_number(names[-1], z.CONFIG_CHANGE_PREFIX)

    async def join(self) -> None:
        """Once the listener is up: register, take part in controller elections, follow config changes."""
        rm = self.broker.replica_manager
        rm.fetchers = ReplicaFetcherManager(
            self.broker_id, self.broker.clock, self.broker.config, self.listener, self._endpoint,
            self.broker.replication_quota,
        )  # fmt: skip
        rm.isr_sender = self._send_isr
        rm.start_isr_checks()
        self.zk.add_session_listener(self._on_session)
        await self.register()
        self.controller.start()
        self._config_watch = self.zk.watch(
            z.CONFIG_CHANGES, WatchKind.CHILDREN, lambda: self._spawn(self._process_config_changes())
        )

    async def leave(self, *, controlled: bool = True) -> None:
        """Controlled shutdown (when enabled), then stop the controller and close the session: the registration
        and, if this broker was the controller, /controller go at once."""
        if controlled and self.broker.config["controlled.shutdown.enable"] and self.broker_epoch != -1:
            await self._controlled_shutdown()
        if self._config_watch is not None:
            self._config_watch.cancel()
        await self.controller.stop()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.client.close()
        await self.zk.close()

    def _spawn(self, coro) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("cluster task failed", exc_info=task.exception())

    # --- registration and session ---------------------------------------------------------------------------

    def registration(self) -> z.BrokerRegistration:
        endpoints = []
        for i, listener in enumerate(self.broker.config.advertised_listeners):
            port = self.broker.port if i == 0 and listener.port == 0 else listener.port
            endpoints.append(
                z.Endpoint(listener.name, listener.host or "127.0.0.1", port, listener.security_protocol)
            )
        return z.BrokerRegistration(self.broker_id, tuple(endpoints), self.broker.config["broker.rack"])

    async def register(self) -> None:
        """Create /brokers/ids/<id>. A registration left by an earlier process (kill -9) lives until its session
        expires: wait for that, as long as twice the session timeout, then give up with a clear error."""
        path = z.broker_path(self.broker_id)
        data = z.encode_broker(self.registration())
        timeout_ms = 2 * self.broker.config["zookeeper.session.timeout.ms"] + 5000
        deadline_ms = self.broker.clock.monotonic_ms() + timeout_ms
        waiting_logged = False
        while True:
            try:
                await self.zk.create(path, data, ephemeral=True)
            except NodeExistsError:
                found = await get_or_none(self.zk, path)
                if found is None:
                    continue
                if found[1].ephemeral_owner != self.zk.session_id:
                    if self.broker.clock.monotonic_ms() > deadline_ms:
                        raise KafkaError(
                            ErrorCode.broker_id_not_registered,
                            f"broker.id {self.broker_id} is registered in ZooKeeper by another live session: "
                            f"is another broker running with broker.id={self.broker_id}?",
                        ) from None
                    if not waiting_logged:
                        log.warning(
                            "broker %d is still registered by an earlier session; waiting for it to expire "
                            "(zookeeper.session.timeout.ms=%d)", self.broker_id,
                            self.broker.config["zookeeper.session.timeout.ms"],
                        )  # fmt: skip
                        waiting_logged = True
                    await self.broker.clock.sleep_ms(200)
                    continue
            _, stat = await self.zk.get(path)
            self.broker_epoch = stat.czxid
            log.info("broker %d registered in ZooKeeper at epoch %d", self.broker_id, self.broker_epoch)
            return

    def registration_changed(self) -> None:
        """The advertised listeners changed: rewrite the registration; the controller tells every broker."""
        if self.broker_epoch != -1:
            data = z.encode_broker(self.registration())
            self._spawn(self.zk.set(z.broker_path(self.broker_id), data))

    def _on_session(self, state: SessionState) -> None:
        if state is SessionState.EXPIRED:
            fenced = self.broker.replica_manager.fence_leaders()
            self.broker_epoch = -1
            log.warning(
                "ZooKeeper session expired: broker %d stops leading %d partitions until the controller "
                "says again", self.broker_id, len(fenced),
            )  # fmt: skip
        elif state is SessionState.NEW_SESSION:
            # The controller registers the broker again (ordered with its own election); configs may have
            # changed while we were away.
            self._spawn(self._reload_all_configs())

    # --- requests from the controller -----------------------------------------------------------------------

    def _check(self, request: Any) -> ErrorCode:
        error = self.store.cache.check_controller(
            request.controller_id, request.controller_epoch, request.broker_epoch, self.broker_epoch
        )
        if error != ErrorCode.none:
            log.warning(
                "refusing %s from controller %d at epoch %d: %s", type(request).__name__, request.controller_id,
                request.controller_epoch, error.name,
            )  # fmt: skip
        return error

    async def update_metadata(self, request: ib.UpdateMetadataRequest) -> ib.UpdateMetadataResponse:
        async with self._state_change:
            return await self._update_metadata(request)

    async def _update_metadata(self, request: ib.UpdateMetadataRequest) -> ib.UpdateMetadataResponse:
        error = self._check(request)
        if error == ErrorCode.none:
            for topic, partitions in (await self.store.apply_update_metadata(request)).items():
                self.broker.forget_topic(topic, partitions)
        return ib.UpdateMetadataResponse(error_code=error)

    async def leader_and_isr(self, request: ib.LeaderAndIsrRequest) -> ib.LeaderAndIsrResponse:
        async with self._state_change:
            return await self._leader_and_isr(request)

    async def _leader_and_isr(self, request: ib.LeaderAndIsrRequest) -> ib.LeaderAndIsrResponse:
        error = self._check(request)
        if error != ErrorCode.none:
            return ib.LeaderAndIsrResponse(error_code=error, topics=())
        rm = self.broker.replica_manager
        errors: dict[tuple[str, int], ErrorCode] = {}
        todo: list[tuple[ib.LeaderAndIsrTopicState, ib.LeaderAndIsrPartitionState]] = []
        for topic in request.topic_states:
            for ps in topic.partition_states:
                key = (topic.topic_name, ps.partition_index)
                current = rm.get_partition(*key)
                known_id = current.topic_id if current else self.broker.log_manager.topic_ids.get(key)
                if rm.is_offline(*key):
                    errors[key] = ErrorCode.kafka_storage_error
                elif topic.topic_id and known_id not in (None, topic.topic_id):
                    errors[key] = ErrorCode.inconsistent_topic_id
                elif current is None or ps.leader_epoch > current.leader_epoch:
                    if self.broker_id in ps.replicas:
                        todo.append((topic, ps))
                        errors[key] = ErrorCode.none
                    else:
                        errors[key] = ErrorCode.unknown_topic_or_partition
                elif ps.leader_epoch < current.leader_epoch:
                    errors[key] = ErrorCode.stale_controller_epoch
                else:
                    errors[key] = ErrorCode.none  # seen already (a new controller repeats the current state)
        if todo:
            await self._apply(todo, errors)
        by_topic: dict[Any, list[ib.LeaderAndIsrPartitionError]] = {}
        ids = {t.topic_name: t.topic_id for t in request.topic_states}
        for (name, index), code in errors.items():
            by_topic.setdefault(ids[name], []).append(
                ib.LeaderAndIsrPartitionError(partition_index=index, error_code=code)
            )
        return ib.LeaderAndIsrResponse(
            error_code=ErrorCode.none,
            topics=tuple(
                ib.LeaderAndIsrTopicError(topic_id=t, partition_errors=tuple(e)) for t, e in by_topic.items()
            ),
        )

    async def _apply(self, todo, errors: dict[tuple[str, int], ErrorCode]) -> None:
        broker = self.broker
        rm = broker.replica_manager
        missing = [(t, ps) for t, ps in todo if rm.get_partition(t.topic_name, ps.partition_index) is None]
        logs = {}
        for is_new in (True, False):
            specs = []
            for t, ps in missing:
                if bool(ps.is_new) == is_new:
                    config = broker.log_config_from(await self.store.topic_config(t.topic_name))
                    epoch = ps.leader_epoch if ps.leader == self.broker_id else None
                    specs.append(NewLog(t.topic_name, ps.partition_index, config, t.topic_id, epoch))
            if specs:
                try:
                    logs.update(
                        await broker.run_storage(broker.log_manager.create_logs(specs, is_new=is_new))
                    )
                except KafkaError as exc:
                    for spec in specs:
                        errors[spec.key] = exc.error_code
        checkpointed = broker.log_manager.initial_high_watermarks() if missing else {}
        for t, ps in todo:
            key = (t.topic_name, ps.partition_index)
            if errors[key] != ErrorCode.none:
                continue
            partition = rm.get_partition(*key)
            if partition is None:
                plog = logs.get(key)
                if plog is None:
                    rm.mark_offline(*key)
                    errors[key] = ErrorCode.kafka_storage_error
                    continue
                partition = Partition(
                    topic=key[0], index=key[1], topic_id=t.topic_id, log=plog, leader_id=-1, leader_epoch=-1,
                    replicas=list(ps.replicas), isr=list(ps.isr), broker_id=self.broker_id,
                    high_watermark=min(checkpointed.get(key, 0), plog.log_end_offset),
                )  # fmt: skip
            try:
                rm.apply_leadership(
                    partition, leader=ps.leader, leader_epoch=ps.leader_epoch, isr=list(ps.isr),
                    replicas=list(ps.replicas), partition_epoch=ps.partition_epoch,
                    leader_recovery_state=ps.leader_recovery_state,
                )  # fmt: skip
            except KafkaError as exc:  # its log dir failed just now
                errors[key] = exc.error_code
                continue
            self.store.apply_leader_and_isr(t.topic_name, ps)

    async def stop_replica(self, request: ib.StopReplicaRequest) -> ib.StopReplicaResponse:
        async with self._state_change:
            return await self._stop_replica(request)

    async def _stop_replica(self, request: ib.StopReplicaRequest) -> ib.StopReplicaResponse:
        error = self._check(request)
        if error != ErrorCode.none:
            return ib.StopReplicaResponse(error_code=error, partition_errors=())
        rm = self.broker.replica_manager
        results, deleted = [], []
        for topic in request.topic_states:
            for ps in topic.partition_states:
                key = (topic.topic_name, ps.partition_index)
                current = rm.get_partition(*key)
                code = ErrorCode.none
                if current is not None and 0 <= ps.leader_epoch < current.leader_epoch:
                    code = ErrorCode.fenced_leader_epoch
                else:
                    rm.remove_partition(*key)
                    if ps.delete_partition:
                        deleted.append(key)
                results.append(
                    ib.StopReplicaPartitionError(topic_name=key[0], partition_index=key[1], error_code=code)
                )
        if deleted:
            await self.broker.delete_partitions(deleted)
        return ib.StopReplicaResponse(error_code=ErrorCode.none, partition_errors=tuple(results))

    # --- requests to the controller -------------------------------------------------------------------------

    def _endpoint(self, broker_id: int) -> tuple[str, int] | None:
        endpoint = self.store.cache.endpoint(broker_id, self.listener)
        return (endpoint.host, endpoint.port) if endpoint is not None else None

    async def _send_isr(
        self, partition: Partition, isr: tuple[int, ...]
    ) -> tuple[ErrorCode, int, tuple[int, ...], int]:
        """An ISR change of a partition led here, by AlterPartition (v3: topic ids, broker epochs unknown)."""
        request = alter_partition_v3.AlterPartitionRequest(
            broker_id=self.broker_id,
            broker_epoch=self.broker_epoch,
            topics=(alter_partition_v3.TopicData(topic_id=partition.topic_id, partitions=(
                alter_partition_v3.PartitionData(
                    partition_index=partition.index, leader_epoch=partition.leader_epoch,
                    new_isr_with_epochs=tuple(alter_partition_v3.BrokerState(broker_id=b) for b in isr),
                    leader_recovery_state=partition.leader_recovery_state, partition_epoch=partition.partition_epoch,
                ),
            )),),
        )  # fmt: skip
        response = await self.send_to_controller(request)
        if response.error_code != ErrorCode.none:
            return response.error_code, -1, (), -1
        for topic in response.topics:
            for p in topic.partitions:
                if p.partition_index == partition.index:
                    return p.error_code, p.leader_epoch, tuple(p.isr), p.partition_epoch
        return ErrorCode.unknown_server_error, -1, (), -1

    async def send_to_controller(self, request: Any) -> Any:
        """Send to the controller this broker knows of; raises KafkaError(NOT_CONTROLLER) when there is none."""
        controller_id = self.store.cache.controller_id
        endpoint = self.store.cache.endpoint(controller_id, self.listener)
        if endpoint is None:
            raise KafkaError(ErrorCode.not_controller, "no controller known")
        try:
            return await self.client.send_to(controller_id, endpoint.host, endpoint.port, request)
        except (ConnectionError, TimeoutError) as exc:
            raise KafkaError(
                ErrorCode.not_controller, f"controller {controller_id} unreachable: {exc}"
            ) from exc

    async def _controlled_shutdown(self) -> None:
        config = self.broker.config
        attempts = config["controlled.shutdown.max.retries"]
        for attempt in range(1, attempts + 1):
            try:
                response = await self.send_to_controller(
                    ib.ControlledShutdownRequest(broker_id=self.broker_id, broker_epoch=self.broker_epoch)
                )
                if response.error_code == ErrorCode.none and not response.remaining_partitions:
                    log.info("controlled shutdown of broker %d succeeded", self.broker_id)
                    return
                reason = response.error_code.name if response.error_code != ErrorCode.none else (
                    f"{len(response.remaining_partitions)} partitions still led here"
                )  # fmt: skip
            except KafkaError as exc:
                reason = exc.message or exc.error_code.name
            log.warning("controlled shutdown attempt %d of %d failed: %s", attempt, attempts, reason)
            if attempt < attempts:
                await self.broker.clock.sleep_ms(config["controlled.shutdown.retry.backoff.ms"])
        log.warning("proceeding to an uncontrolled shutdown of broker %d", self.broker_id)

    # --- configs --------------------------------------------------------------------------------------------

    async def _process_config_changes(self) -> None:
        async with self._config_lock:
            names = z.sorted_by_sequence(
                await children_or_empty(self.zk, z.CONFIG_CHANGES), z.CONFIG_CHANGE_PREFIX
            )
            now_ms = self.broker.clock.time_ms()
            for name in names:
                path = f"{z.CONFIG_CHANGES}/{name}"
                seq = z.sequence_number(name, z.CONFIG_CHANGE_PREFIX)
                found = await get_or_none(self.zk, path)
                if found is None:
                    continue
                if seq > self._last_config_change:
                    self._last_config_change = seq
                    try:
                        entity_type, entity = z.decode_config_change(path, found[0])
                        await self._apply_config_change(entity_type, entity)
                    except z.ZkDataError as exc:
                        log.error("ignoring config change: %s", exc)
                elif found[1].ctime and now_ms - found[1].ctime > CONFIG_CHANGE_EXPIRATION_MS:
                    await delete_if_exists(self.zk, path)

    async def _apply_config_change(self, entity_type: str, entity: str) -> None:
        if entity_type == "topics":
            configs = await self.store.reload_topic_config(entity)
            self.broker.topic_configs_changed(entity)
            if configs.get("unclean.leader.election.enable", "").lower() == "true":
                self.controller.on_unclean_leader_election_enabled(entity)
        elif entity_type == "brokers" and entity in (z.DEFAULT_ENTITY, str(self.broker_id)):
            key = "" if entity == z.DEFAULT_ENTITY else entity
            before = bool(self.broker.config["unclean.leader.election.enable"])
            configs = await self.store.reload_broker_configs(key)
            self.broker.config.replace_dynamic(configs, cluster_default=key == "")
            self.broker.topic_configs_changed(None)
            if not before and self.broker.config["unclean.leader.election.enable"]:
                self.controller.on_unclean_leader_election_enabled(None)
            log.info("dynamic broker configs of %s changed: %s", entity, configs)

    async def _reload_all_configs(self) -> None:
        try:
            for entity in ("", str(self.broker_id)):
                configs = await self.store.reload_broker_configs(entity)
                self.broker.config.replace_dynamic(configs, cluster_default=entity == "")
            for topic in list(self.store.topics()):
                await self.store.reload_topic_config(topic)
            self.broker.topic_configs_changed(None)
        except (SessionExpiredError, NoNodeError) as exc:
            log.warning("could not reload configs: %r", exc)

    # --- waiting for the controller -------------------------------------------------------------------------

    async def wait_for_leaders(self, topic: str, partitions: Iterable[int], timeout_ms: int) -> bool:
        """Until every partition has a leader in this broker's metadata (Kafka's DelayedCreatePartitions)."""
        wanted = list(partitions)

        def ready() -> bool:
            info = self.store.topics().get(topic)
            return info is not None and all(
                p in info.partitions and info.partitions[p].leader >= 0 for p in wanted
            )

        return await self.store.wait_until(ready, timeout_ms, self.broker.clock)

    async def wait_for_deletion(self, topic: str, timeout_ms: int) -> bool:
        return await self.store.wait_until(
            lambda: topic not in self.store.topics(), timeout_ms, self.broker.clock
        )
