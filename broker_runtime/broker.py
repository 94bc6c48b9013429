"""The broker: wires configuration, metadata, storage, partitions, coordinators and listeners together,
and owns the lifecycle (start, periodic housekeeping, controlled shutdown, halting when storage fails).

Slow disk work leaves the event loop: the log manager's `StorageJob`s and metadata saves run on one storage
thread, in the order they were asked for (so checkpoints and metadata files are written in order), and removing
deleted partition dirs on another. Admin operations (topic creation and deletion, ...) run to completion even if
the client that asked goes away, and `stop` waits for them. Appends and reads stay on the loop: they are short,
and pipelined produce requests must be appended in arrival order.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from broker_runtime.clock import Clock
from broker_runtime.cluster.metadata_store import (
    BrokerInfo,
    MetadataStore,
    PartitionAssignment,
    StandaloneMetadataStore,
    TopicInfo,
)
from broker_runtime.cluster.topics import INTERNAL_TOPICS, assign_replicas, collision_key, validate_topic_name
from broker_runtime.cluster.zk_member import ZkClusterMember
from broker_runtime.config import (
    BROKER_CONFIG_DEFS,
    TOPIC_CONFIG_DEFS,
    BrokerConfig,
    ConfigDef,
    ConfigError,
    message_timestamp_bounds,
    parse_metrics_listener,
    validate_topic_configs,
    without_effect,
)
from broker_runtime.errors import KafkaError
from broker_runtime.group.runtime import GroupCoordinatorRuntime
from broker_runtime.log.cleaner import CleanerConfig, LogCleaner
from broker_runtime.log.config import LogConfig
from broker_runtime.log.fs import FileSystem, RealFileSystem
from broker_runtime.log.log_manager import LogDirError, LogManager, NewLog, StorageJob
from broker_runtime.log.partition_log import PartitionLog
from broker_runtime.metrics import BrokerMetrics
from broker_runtime.protocol.records import record_scan_is_compiled, require_native_crc32c
from broker_runtime.replication.partition import Partition
from broker_runtime.replication.quota import ReplicationQuota
from broker_runtime.replication.replica_manager import ReplicaManager
from broker_runtime.server.dispatch import Dispatcher
from broker_runtime.server.listener import Listener
from broker_runtime.txn.producer_ids import ProducerIdManager
from broker_runtime.txn.runtime import TransactionCoordinatorRuntime
from broker_runtime.txn.verification import TransactionVerifier

log = logging.getLogger(__name__)

T = TypeVar("T")
TOPIC_CODECS = {"producer": None, "uncompressed": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


@dataclass(frozen=True)
class ProducePolicy:
    codec: int | None  # None = keep the producer's codec
    timestamp_before_max_ms: int
    timestamp_after_max_ms: int
    log_append_time: bool
    min_insync_replicas: int
    compacted: bool


class Broker:
    def __init__(
        self, config: BrokerConfig, clock: Clock | None = None, fs: FileSystem | None = None
    ) -> None:
        require_native_crc32c()
        if not record_scan_is_compiled():
            log.warning(
                "the compiled record scan is not built (run make install): produce validation walks records "
                "in Python, ~150 ns a record"
            )
        self.config = config
        self.clock = clock or Clock()
        self.fs: FileSystem = fs or RealFileSystem()
        self.broker_id = config.broker_id
        self.advertised = BrokerInfo(self.broker_id, "", 0, config["broker.rack"])
        self._set_advertised()
        self.log_dirs = [Path(d) for d in config.log_dirs]
        self._storage = ThreadPoolExecutor(1, thread_name_prefix="odradek-storage")
        self._deleter = ThreadPoolExecutor(1, thread_name_prefix="odradek-deleter")
        self._operations: set[asyncio.Task] = set()
        # With zookeeper.connect the broker is a member of a cluster: metadata in ZooKeeper, leadership decided
        # by the elected controller. Without it the broker is a complete single-node cluster.
        self.member: ZkClusterMember | None = None
        if config.zookeeper_connect is not None:
            self.member = ZkClusterMember(self)
            self.metadata: MetadataStore = self.member.store
        else:
            self.metadata = StandaloneMetadataStore(
                self.log_dirs[0], self.advertised, fs=self.fs, run_blocking=self._save_metadata
            )
            for entity, values in self.metadata.broker_configs().items():
                if entity in ("", str(self.broker_id)):
                    config.replace_dynamic(values, cluster_default=entity == "")
        # Dynamic listener settings are in the metadata: bind and advertise once they are loaded (in a cluster,
        # ZooKeeper's are applied at start).
        self.bind_address = config.listeners[0]
        self._set_advertised()
        config.add_check(self._check_bound_listener)
        config.add_change_listener(self._on_broker_config_change)
        _warn_without_effect("broker", config.set_keys(), BROKER_CONFIG_DEFS)
        self.log_manager = LogManager(
            self.log_dirs, self.clock, self.fs, config_for_topic=self._log_config_for
        )
        self.log_manager.on_dir_failure = self._on_log_dir_failure
        self.replica_manager = ReplicaManager(
            self.broker_id, self.clock, self._min_insync_replicas, lambda: config["replica.lag.time.max.ms"]
        )
        self.replication_quota = ReplicationQuota(self.broker_id, self.clock, config, self._topic_configs)
        self.dispatcher = Dispatcher(self, *_handler_table())
        self.metrics = BrokerMetrics(self)
        self._listener: Listener | None = None
        self._housekeeping: list[asyncio.Task] = []
        self.log_cleaner: LogCleaner | None = None
        self.producer_ids = ProducerIdManager(
            lambda size: self._detached(self.metadata.allocate_producer_id_block(size))
        )
        self.group_coordinator: GroupCoordinatorRuntime | None = None
        self.txn_coordinator: TransactionCoordinatorRuntime | None = None
        # Partition leaders asking transaction coordinators (KIP-890 verification); None before coordinators start.
        self.txn_verifier: TransactionVerifier | None = None
        self._produce_policies: dict[str, ProducePolicy] = {}
        self._log_configs: dict[str, LogConfig] = {}
        # Produce validation that must decompress (bounded, GIL released) runs here, off the event loop.
        self.record_workers = ThreadPoolExecutor(max_workers=2, thread_name_prefix="record-check")
        self.stopped = asyncio.Event()
        # Set when storage failed beyond what the broker can serve around: exit without a clean shutdown.
        self.halted = asyncio.Event()
        self.halt_reason: str | None = None

    # --- lifecycle ----------------------------------------------------------------------------------------

    async def start(self) -> None:
        if self.member is not None:
            await self.member.connect()  # the cluster id and the configs the logs load with
        self.log_manager.startup(self.broker_id, self.metadata.cluster_id)
        self._start_cleaner()
        if self.member is not None:
            await self._start_listening()
            await self.member.join()  # the controller tells this broker what to lead and follow
            return
        if self.log_dirs[0] in self.log_manager.offline_dirs:
            raise LogDirError(f"{self.log_dirs[0]}, which holds the cluster metadata, failed")
        self._sort_out_unknown_logs()
        topics = self.metadata.topics()
        hosted = [
            (t, i, a)
            for t in topics.values()
            for i, a in t.partitions.items()
            if self.broker_id in a.replicas
        ]
        # Logs missing for partitions that should exist (a crash came between saving a new topic and creating its
        # logs), created here unless a log dir is offline: the log may be there.
        self.log_manager.create_logs(
            [NewLog(t.name, i, self.topic_log_config(t), t.topic_id) for t, i, _ in hosted], is_new=False
        )()
        for topic, index, assignment in hosted:
            self._host_partition(topic, index, assignment, self.log_manager.get_log(topic.name, index))
        await self._start_listening()

    async def _start_listening(self) -> None:
        self._start_coordinators()
        self._listener = Listener(self.dispatcher, self.bind_address, self.config, self.clock)
        await self._listener.start()
        metrics_address = parse_metrics_listener(self.config["odradek.metrics.listener"])
        if metrics_address is not None:
            await self.metrics.start(*metrics_address)
        self._housekeeping = [
            asyncio.create_task(self._every("log.retention.check.interval.ms", self._run_retention)),
            asyncio.create_task(self._every("log.flush.scheduler.interval.ms", self._run_flush, cap_ms=1000)),
            asyncio.create_task(self._every("log.flush.offset.checkpoint.interval.ms", self._checkpoint)),
            asyncio.create_task(
                self._every("producer.id.expiration.check.interval.ms", self._expire_producers)
            ),
        ]
        log.info(
            "broker %d started: listening on %s:%d, advertising %s:%d, cluster %s",
            self.broker_id, self.bind_address.host or "0.0.0.0", self._listener.port,
            self.advertised.host, self.advertised.port, self.metadata.cluster_id,
        )  # fmt: skip

    @property
    def port(self) -> int:
        assert self._listener is not None
        return self._listener.port

    def _set_advertised(self) -> None:
        """The address clients are handed (Metadata, FindCoordinator, DescribeCluster), updated in place: the
        metadata store holds this BrokerInfo."""
        advertised = self.config.advertised_listeners[0]
        self.advertised.host = advertised.host or "127.0.0.1"
        self.advertised.port = advertised.port

    def _check_bound_listener(self, config: BrokerConfig) -> None:
        """Refuses a dynamic listener change that would move the listener this broker serves: Odradek serves
        one listener and rebinds only at start (Kafka adds and removes listeners by name)."""
        bound = self.bind_address
        if config.listeners[0] != bound:
            raise ConfigError(
                f"listeners: the broker serves {bound} and cannot move to {config.listeners[0]} while running; "
                "set listeners in the properties file and restart the broker",
                "listeners",
            )

    def _on_broker_config_change(self, key: str) -> None:
        if self.log_cleaner is not None and self._cleaner_config() != self.log_cleaner.config:
            # Kafka restarts its cleaner threads with the new settings; joining them must not block the loop.
            asyncio.get_running_loop().run_in_executor(
                None, self.log_cleaner.reconfigure, self._cleaner_config
            )
        if key in ("advertised.listeners", "listeners"):
            self._set_advertised()
            if self.member is not None:
                self.member.registration_changed()

    async def stop(self, *, clean: bool = True) -> None:
        """Controlled shutdown; `clean=False` after a halt: no flushes, checkpoints or clean-shutdown markers,
        so that the next start recovers every log."""
        log.info("broker %d shutting down", self.broker_id)
        if self.member is not None:
            await self.member.leave(controlled=clean)  # leadership moves away while we still answer
        if self._listener is not None:
            await self._listener.stop()
        await self.metrics.stop()
        for task in self._housekeeping:
            task.cancel()
        await asyncio.gather(*self._housekeeping, return_exceptions=True)
        await self._stop_coordinators()
        if self.log_cleaner is not None:  # its threads finish a swap on this loop, so they are joined off it
            await asyncio.get_running_loop().run_in_executor(None, self.log_cleaner.shutdown)
        await self.replica_manager.shutdown()
        await self.replica_manager.finish_appends()
        self.record_workers.shutdown()
        while self._operations:  # admin operations and storage jobs finish what they started
            await asyncio.gather(*self._operations, return_exceptions=True)
        self._storage.shutdown()
        self._deleter.shutdown(cancel_futures=True)
        if clean:
            self.log_manager.shutdown(self.replica_manager.high_watermarks())
            log.info("broker %d shut down cleanly", self.broker_id)
        self.stopped.set()

    # --- storage off the event loop, failures -------------------------------------------------------------

    async def run_storage(self, job: StorageJob[Any], *, deleter: bool = False) -> Any:
        """Run `job.run` on the storage thread (or the deleter's), then `job.finish` here; runs to completion
        even if the caller is cancelled."""
        loop = asyncio.get_running_loop()
        executor = self._deleter if deleter else self._storage

        async def run_then_finish() -> Any:
            return job.finish(await loop.run_in_executor(executor, job.run))

        return await self._detached(run_then_finish())

    async def _detached(self, operation: Awaitable[T]) -> T:
        """Await `operation` in a task of its own that finishes even when the request that started it goes away
        (a client that disconnects mid-way must not leave half a topic behind); `stop` waits for it."""
        task = asyncio.ensure_future(operation)
        self._operations.add(task)
        task.add_done_callback(self._operation_done)
        return await asyncio.shield(task)

    def _operation_done(self, task: asyncio.Task) -> None:
        self._operations.discard(task)
        if not task.cancelled() and not isinstance(task.exception(), (KafkaError, type(None))):
            log.error("storage operation failed", exc_info=task.exception())

    async def _save_metadata(self, write: Callable[[], None]) -> None:
        """The metadata store's writes, on the storage thread. A failure there takes its log dir offline, which
        halts the broker (as Kafka halts when its metadata log dir fails)."""
        try:
            await self._detached(asyncio.get_running_loop().run_in_executor(self._storage, write))
        except OSError as error:
            self.log_manager.handle_dir_failure(self.log_dirs[0], "saving the cluster metadata", error)
            raise KafkaError(
                ErrorCode.kafka_storage_error, f"cannot save the cluster metadata: {error}"
            ) from error

    def _on_log_dir_failure(self, log_dir: Path, partitions: list[tuple[str, int]]) -> None:
        """Kafka's ReplicaManager.handleLogDirFailure: the dir's partitions go offline; halt when no dir is left
        or the failed one holds the cluster metadata."""
        for topic, index in partitions:
            self.replica_manager.mark_offline(topic, index)
        if log_dir == self.log_dirs[0]:
            self.halt(f"the log dir holding the cluster metadata, {log_dir}, failed")
        elif not self.log_manager.live_dirs:
            self.halt(f"every log dir failed ({', '.join(map(str, self.log_dirs))})")

    # --- the log cleaner ----------------------------------------------------------------------------------------

    def _cleaner_config(self) -> CleanerConfig:
        return CleanerConfig.from_broker(lambda key: self.config[key])

    def _start_cleaner(self) -> None:
        """Cleaner threads compact the logs of compacted topics; they come to the event loop only to pick a log
        and to swap cleaned segments in (a few renames), see log/cleaner.py."""
        loop = asyncio.get_running_loop()

        def run_on_loop(fn: Callable[[], T]) -> T:
            done: concurrent.futures.Future[T] = concurrent.futures.Future()

            def call() -> None:
                try:
                    done.set_result(fn())
                except BaseException as error:  # handed to the cleaner thread
                    done.set_exception(error)

            loop.call_soon_threadsafe(call)
            return done.result()

        def high_watermark(key: tuple[str, int]) -> int | None:
            """Kafka cleans below the last stable offset: undecided transactions are never compacted."""
            partition = self.replica_manager.get_partition(*key)
            return partition.last_stable_offset if partition is not None else 0

        self.log_cleaner = LogCleaner(
            self.fs, self.clock, self._cleaner_config(), logs=self.log_manager.logs_with_dirs,
            high_watermark=high_watermark, run_on_owner=run_on_loop,
            on_io_error=self.log_manager.handle_dir_failure, log_dirs=self.log_manager.live_dirs,
        )  # fmt: skip
        self.log_manager.cleaning = self.log_cleaner.in_progress
        self.log_cleaner.start()

    def halt(self, reason: str) -> None:
        """Stop serving at once and exit without a clean shutdown (`python -m broker_runtime` exits 1)."""
        if self.halt_reason is None:
            self.halt_reason = reason
            log.critical("halting broker %d: %s", self.broker_id, reason)
            self.halted.set()

    def _start_coordinators(self) -> None:
        """The group coordinator (broker_runtime/group/runtime.py) and the transaction coordinator
        (broker_runtime/txn/runtime.py), each on the partitions of its internal topic this broker leads."""
        self.group_coordinator = GroupCoordinatorRuntime(self)
        self.group_coordinator.start()
        self.txn_coordinator = TransactionCoordinatorRuntime(self)
        self.txn_coordinator.start()
        self.txn_verifier = TransactionVerifier(self)

    async def _stop_coordinators(self) -> None:
        if self.txn_verifier is not None:
            await self.txn_verifier.stop()
        if self.txn_coordinator is not None:
            await self.txn_coordinator.stop()
        if self.group_coordinator is not None:
            await self.group_coordinator.stop()

    async def _every(
        self, key: str, action: Callable[[], Awaitable[None]], cap_ms: int | None = None
    ) -> None:
        while True:
            interval = self.config[key]
            if cap_ms is not None:
                interval = min(interval, cap_ms)
            await self.clock.sleep_ms(max(interval, 10))
            try:
                await action()
            except Exception:
                log.exception("periodic task %s failed", action.__name__)

    async def _run_retention(self) -> None:
        now = self.clock.time_ms()
        deleted = await self.run_storage(
            self.log_manager.retention_job(now, self.replica_manager.high_watermarks())
        )
        if deleted:
            log.info("retention deleted %d segments", deleted)
        await self.run_storage(self.log_manager.remove_deleted_job(now), deleter=True)

    async def _expire_producers(self) -> None:
        self.log_manager.expire_producers(self.clock.time_ms(), self.config["producer.id.expiration.ms"])

    async def _run_flush(self) -> None:
        await self.run_storage(self.log_manager.flush_job(self.clock.time_ms()))

    async def _checkpoint(self) -> None:
        await self.run_storage(self.log_manager.checkpoint_job(self.replica_manager.high_watermarks()))

    async def checkpoint_log_starts(self, partitions: Iterable[tuple[str, int]]) -> None:
        """Persist moved log start offsets (DeleteRecords): one checkpoint per log dir, off the event loop.
        Partitions whose dir fails are offline afterwards."""
        await self.run_storage(self.log_manager.log_start_checkpoint_job(partitions))

    # --- topics -------------------------------------------------------------------------------------------

    def _log_config_for(self, name: str) -> LogConfig:
        topic = self.metadata.topics().get(name)
        if topic is not None:
            return self.topic_log_config(topic)
        if self.member is not None:  # at start-up, before the controller's first word: configs from ZooKeeper
            return self.log_config_from(self.member.store.cached_topic_config(name) or {})
        return LogConfig()

    def log_config_from(self, configs: Mapping[str, str]) -> LogConfig:
        return LogConfig.from_topic_config(self.config.effective_topic_config(configs))

    def topic_log_config(self, topic: TopicInfo) -> LogConfig:
        """Cached: a topic of thousands of partitions resolves its configs once."""
        config = self._log_configs.get(topic.name)
        if config is None:
            config = self.log_config_from(topic.configs)
            self._log_configs[topic.name] = config
        return config

    def _forget_topic_configs(self, name: str | None = None) -> None:
        """Drop cached effective configs of a topic, or of every topic after a broker config change."""
        for cache in (self._produce_policies, self._log_configs):
            if name is None:
                cache.clear()
            else:
                cache.pop(name, None)

    def topic_configs_changed(self, name: str | None) -> None:
        """A topic's configs (or, for None, the broker's) changed elsewhere (cluster mode): apply them."""
        self._forget_topic_configs(name)
        topics = self.metadata.topics()
        for topic in [topics[name]] if name in topics else (topics.values() if name is None else ()):
            self.log_manager.update_config(topic.name, self.topic_log_config(topic))

    def forget_topic(self, name: str, partitions: Iterable[int]) -> None:
        """The controller deleted a topic (cluster mode): drop what this broker caches about it."""
        self._forget_topic_configs(name)
        if self.group_coordinator is not None:
            self.group_coordinator.on_partitions_deleted([(name, index) for index in partitions])

    async def delete_partitions(self, keys: list[tuple[str, int]]) -> None:
        """Delete the logs of partitions this broker no longer hosts (StopReplica with deletion)."""
        await self.run_storage(self.log_manager.delete_logs(keys))

    def _topic_configs(self, name: str) -> dict[str, str] | None:
        topic = self.metadata.topics().get(name)
        return topic.configs if topic is not None else None

    def _min_insync_replicas(self, topic: str) -> int:
        return self.produce_policy(topic).min_insync_replicas

    def produce_policy(self, topic: str) -> ProducePolicy:
        """The topic configs the produce path checks, cached until a topic or broker config changes."""
        policy = self._produce_policies.get(topic)
        if policy is None:
            info = self.metadata.topics().get(topic)
            effective = self.config.effective_topic_config(info.configs if info else {})
            before, after = message_timestamp_bounds(effective)
            policy = ProducePolicy(
                codec=TOPIC_CODECS[effective["compression.type"]],
                timestamp_before_max_ms=before,
                timestamp_after_max_ms=after,
                log_append_time=effective["message.timestamp.type"] == "LogAppendTime",
                min_insync_replicas=int(effective["min.insync.replicas"]),
                compacted="compact" in effective["cleanup.policy"].split(","),
            )
            self._produce_policies[topic] = policy
        return policy

    def _host_partition(
        self, topic: TopicInfo, index: int, assignment: PartitionAssignment, plog: PartitionLog | None
    ) -> None:
        """Serve a partition from its log; without one (its log dir is offline) it answers KAFKA_STORAGE_ERROR."""
        if plog is None:
            self.replica_manager.mark_offline(topic.name, index)
            return
        partition = Partition(
            topic=topic.name, index=index, topic_id=topic.topic_id, log=plog, leader_id=assignment.leader,
            leader_epoch=assignment.leader_epoch, replicas=list(assignment.replicas),
            isr=list(assignment.isr or assignment.replicas), broker_id=self.broker_id,
        )  # fmt: skip
        if partition.is_leader:
            try:
                plog.assign_epoch_start_offset(partition.leader_epoch)
            except KafkaError:  # its log dir failed just now: the partition is offline
                return
        self.replica_manager.add_partition(partition)

    async def _host_new_partitions(
        self, topic: TopicInfo, assignments: Mapping[int, PartitionAssignment]
    ) -> None:
        """Create the logs of new partitions off the event loop (with their first leader epoch), then serve them."""
        specs = [
            NewLog(topic.name, index, self.topic_log_config(topic), topic.topic_id,
                   a.leader_epoch if a.leader == self.broker_id else None)
            for index, a in assignments.items() if self.broker_id in a.replicas
        ]  # fmt: skip
        logs = await self.run_storage(self.log_manager.create_logs(specs))
        current = self.metadata.topics().get(topic.name)
        if current is None or current.topic_id != topic.topic_id:  # deleted while its logs were being made
            await self.run_storage(self.log_manager.delete_logs(logs))
            return
        for spec in specs:
            self._host_partition(topic, spec.partition, assignments[spec.partition], logs.get(spec.key))

    def _sort_out_unknown_logs(self) -> None:
        """At start-up, logs that the metadata does not assign here. A deleted topic's logs (a crash came before
        they were renamed) are deleted, as Kafka's controller resumes a deletion; any other log is kept aside
        as `<topic>-<p>.<uuid>-stray` with a warning, never deleted: the metadata may be what is wrong."""
        topics = self.metadata.topics()
        deleting = self.metadata.deleting_topic_ids()
        doomed, strays = [], []
        for key in self.log_manager.logs():
            topic = topics.get(key[0])
            known_id = self.log_manager.topic_ids.get(key)
            if topic is not None and key[1] in topic.partitions and known_id in (None, topic.topic_id):
                continue
            if known_id in deleting:
                log.info("deleting the log of %s-%d: its topic was deleted before the last shutdown", *key)
                doomed.append(key)
            else:
                strays.append(key)
        self.log_manager.delete_logs(doomed)()
        self.log_manager.set_aside_stray_logs(strays)
        if deleting and not self.log_manager.offline_dirs:
            for topic_id in deleting:
                self.metadata.topic_deleted(topic_id)
            self.metadata.save_now()

    def check_new_topic_name(self, name: str) -> None:
        validate_topic_name(name)
        topics = self.metadata.topics()
        if name in topics:
            raise KafkaError(ErrorCode.topic_already_exists, f"topic {name!r} already exists")
        key = collision_key(name)
        for existing in topics:
            if collision_key(existing) == key:
                raise KafkaError(
                    ErrorCode.invalid_topic_exception,
                    f"topic {name!r} collides with existing topic {existing!r} ('.' and '_' are interchangeable)",
                )

    async def create_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: Mapping[str, str | None] | None = None,
        *,
        assignments: Mapping[int, list[int]] | None = None,
        validate_only: bool = False,
        internal: bool = False,
        wait_ms: int = 30000,
    ) -> TopicInfo:
        """Validate everything first, then persist and host; nothing is created when any check fails. Returns
        once the metadata is durable and the logs exist (they are created off the event loop)."""
        self.check_new_topic_name(name)
        brokers = self.metadata.brokers()
        broker_ids = [b.broker_id for b in brokers]
        if assignments:
            replica_lists = _validate_assignments(assignments, broker_ids, start=0)
        else:
            if num_partitions == -1:
                num_partitions = self.config["num.partitions"]
            if replication_factor == -1:
                replication_factor = self.config["default.replication.factor"]
            if num_partitions <= 0:
                raise KafkaError(
                    ErrorCode.invalid_partitions,
                    f"number of partitions must be larger than 0, got {num_partitions}",
                )
            if replication_factor <= 0:
                raise KafkaError(
                    ErrorCode.invalid_replication_factor,
                    f"replication factor must be larger than 0, got {replication_factor}",
                )
            replica_lists = self._assign(brokers, num_partitions, replication_factor)
        try:
            clean_configs = validate_topic_configs(configs or {})
        except ConfigError as exc:
            raise KafkaError(ErrorCode.invalid_config, str(exc)) from None
        if not validate_only:
            _warn_without_effect(f"topic {name}", clean_configs, TOPIC_CONFIG_DEFS)
        topic = TopicInfo(
            name=name,
            topic_id=uuid.uuid4(),
            partitions={
                p: PartitionAssignment(replicas=r, leader=r[0], leader_epoch=0, isr=list(r))
                for p, r in replica_lists.items()
            },
            configs=clean_configs,
            internal=internal or name in INTERNAL_TOPICS,
        )
        if validate_only:
            return topic
        if self.member is not None:
            return await self._detached(self._create_in_cluster(topic, wait_ms))
        return await self._detached(self._persist_and_host(topic))

    def _assign(
        self, brokers: list[BrokerInfo], partitions: int, rf: int, start: int = 0
    ) -> dict[int, list[int]]:
        """Kafka's placement; in a cluster from a random first broker and across racks (broker.rack)."""
        if self.member is None:
            return assign_replicas([b.broker_id for b in brokers], partitions, rf, start_partition=start)
        racks = {b.broker_id: b.rack for b in brokers}
        return assign_replicas(
            list(racks), partitions, rf, start_partition=start, start_index=-1, racks=racks
        )

    async def _create_in_cluster(self, topic: TopicInfo, wait_ms: int) -> TopicInfo:
        """Write the topic to ZooKeeper; the controller elects leaders and tells the replicas. Answer once this
        broker's metadata shows a leader for every partition (Kafka's DelayedCreatePartitions)."""
        assert self.member is not None
        await self.metadata.create_topic(topic)
        log.info(
            "created topic %s with %d partitions, configs %s",
            topic.name,
            len(topic.partitions),
            topic.configs,
        )
        if wait_ms > 0 and not await self.member.wait_for_leaders(topic.name, topic.partitions, wait_ms):
            raise KafkaError(ErrorCode.request_timed_out, f"topic {topic.name!r} was created but its partitions "
                             f"have no leader yet after {wait_ms} ms")  # fmt: skip
        return self.metadata.topics().get(topic.name, topic)

    async def _persist_and_host(self, topic: TopicInfo) -> TopicInfo:
        await self.metadata.create_topic(topic)  # visible at once, durable when this returns
        await self._host_new_partitions(topic, topic.partitions)
        log.info(
            "created topic %s with %d partitions, configs %s",
            topic.name,
            len(topic.partitions),
            topic.configs,
        )
        return topic

    async def maybe_auto_create(self, name: str) -> TopicInfo | None:
        if not self.config["auto.create.topics.enable"] or name in INTERNAL_TOPICS:
            return None
        topic = None
        try:
            topic = await self.create_topic(
                name,
                -1,
                min(self.config["default.replication.factor"], len(self.metadata.brokers())),
                wait_ms=0,
            )
        except KafkaError as exc:
            if exc.error_code != ErrorCode.topic_already_exists:
                raise
        found = self.metadata.topics().get(name)
        if found is None and self.member is not None:
            # The controller elects the leaders a moment later; Kafka answers this meanwhile.
            raise KafkaError(ErrorCode.leader_not_available, f"topic {name!r} is being created")
        return found or topic

    async def delete_topic(self, name: str, wait_ms: int = 30000) -> None:
        if not self.config["delete.topic.enable"]:
            raise KafkaError(ErrorCode.topic_deletion_disabled, "delete.topic.enable is false")
        topic = self.metadata.topics().get(name)
        if topic is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist")
        if self.member is not None:
            await self._detached(self._delete_in_cluster(name, wait_ms))
            return
        await self._detached(self._delete_topic(topic))

    async def _delete_in_cluster(self, name: str, wait_ms: int) -> None:
        """Mark the topic for deletion; the controller deletes it. Answer once this broker's metadata no longer
        has it (Kafka's DelayedDeleteTopics)."""
        assert self.member is not None
        await self.metadata.delete_topic(name)
        if wait_ms > 0 and not await self.member.wait_for_deletion(name, wait_ms):
            raise KafkaError(ErrorCode.request_timed_out, f"topic {name!r} is marked for deletion; the deletion "
                             f"was not complete after {wait_ms} ms")  # fmt: skip

    async def _delete_topic(self, topic: TopicInfo) -> None:
        """Forget the topic everywhere now; then its metadata is saved (remembering the deletion until its logs
        are renamed) and every log dir is rewritten once, off the event loop. Kafka's order."""
        name = topic.name
        self._forget_topic_configs(name)
        keys = [(name, index) for index in topic.partitions]
        for key in keys:
            self.replica_manager.remove_partition(*key)
        if self.group_coordinator is not None:
            self.group_coordinator.on_partitions_deleted(keys)
        await self.metadata.delete_topic(name)
        await self.run_storage(self.log_manager.delete_logs(keys))
        self.metadata.topic_deleted(topic.topic_id)
        log.info("deleted topic %s", name)

    async def create_partitions(
        self,
        name: str,
        count: int,
        assignments: list[list[int]] | None,
        validate_only: bool,
        wait_ms: int = 30000,
    ) -> None:
        topic = self.metadata.topics().get(name)
        if topic is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist")
        current = len(topic.partitions)
        if count < current:
            raise KafkaError(
                ErrorCode.invalid_partitions,
                f"topic currently has {current} partitions, which is higher than the requested {count}",
            )
        if count == current:
            raise KafkaError(ErrorCode.invalid_partitions, f"topic already has {current} partitions")
        brokers = self.metadata.brokers()
        broker_ids = [b.broker_id for b in brokers]
        if assignments is not None:
            if len(assignments) != count - current:
                raise KafkaError(
                    ErrorCode.invalid_replica_assignment,
                    f"increasing the partition count by {count - current} needs that many assignments, got {len(assignments)}",
                )
            new = _validate_assignments(
                dict(zip(range(current, count), assignments, strict=True)), broker_ids, current
            )
        else:
            rf = len(topic.partitions[0].replicas)
            new = self._assign(brokers, count - current, rf, start=current)
        if validate_only:
            return
        added = {
            p: PartitionAssignment(replicas=r, leader=r[0], leader_epoch=0, isr=list(r))
            for p, r in new.items()
        }
        await self._detached(self._add_partitions(topic, added, wait_ms))

    async def _add_partitions(
        self, topic: TopicInfo, added: dict[int, PartitionAssignment], wait_ms: int
    ) -> None:
        await self.metadata.add_partitions(topic.name, added)
        if self.member is None:
            await self._host_new_partitions(topic, added)
        elif wait_ms > 0 and not await self.member.wait_for_leaders(topic.name, added, wait_ms):
            raise KafkaError(ErrorCode.request_timed_out, f"partitions of {topic.name!r} were added but have no "
                             f"leader yet after {wait_ms} ms")  # fmt: skip

    async def set_topic_configs(
        self, name: str, configs: Mapping[str, str], validate_only: bool = False
    ) -> None:
        topic = self.metadata.topics().get(name)
        if topic is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist")
        try:
            clean = validate_topic_configs(configs)
        except ConfigError as exc:
            raise KafkaError(ErrorCode.invalid_config, str(exc)) from None
        if validate_only:
            return
        _warn_without_effect(f"topic {name}", clean, TOPIC_CONFIG_DEFS)
        saved = self.metadata.set_topic_configs(name, clean)  # in memory now, durable once awaited
        self._forget_topic_configs(name)
        self.log_manager.update_config(name, self.topic_log_config(topic))
        await self._detached(saved)

    async def set_broker_configs(
        self, entity: str, configs: Mapping[str, str], validate_only: bool = False
    ) -> None:
        """Replace the dynamic configs of this broker (entity = its id) or the cluster default (entity = "")."""
        cluster_default = entity == ""
        try:
            for key, value in configs.items():
                self.config.validate_dynamic(key, value, cluster_default=cluster_default)
            if validate_only:
                self.config.replace_dynamic(configs, cluster_default=cluster_default, validate_only=True)
                return
            self.config.replace_dynamic(configs, cluster_default=cluster_default)
        except ConfigError as exc:
            raise KafkaError(ErrorCode.invalid_config, str(exc)) from None
        _warn_without_effect(f"broker {entity or '<default>'}", configs, BROKER_CONFIG_DEFS)
        saved = self.metadata.set_broker_configs(entity, configs)  # in memory now, durable once awaited
        self._forget_topic_configs()
        for topic in self.metadata.topics().values():
            self.log_manager.update_config(topic.name, self.topic_log_config(topic))
        await self._detached(saved)

    # --- producer ids -------------------------------------------------------------------------------------

    async def next_producer_id(self) -> int:
        return await self.producer_ids.next()


def _warn_without_effect(what: str, keys: Iterable[str], defs: Mapping[str, ConfigDef]) -> None:
    """Settings Odradek accepts but does not act on are never silent: one WARNING per reason."""
    for reason, names in without_effect(keys, defs).items():
        log.warning("%s: %s set but without effect: %s", what, ", ".join(sorted(names)), reason)


def _validate_assignments(
    assignments: Mapping[int, list[int]], broker_ids: list[int], start: int
) -> dict[int, list[int]]:
    expected = list(range(start, start + len(assignments)))
    if sorted(assignments) != expected:
        raise KafkaError(
            ErrorCode.invalid_replica_assignment, f"partitions must be numbered consecutively from {start}"
        )
    sizes = {len(r) for r in assignments.values()}
    if len(sizes) != 1:
        raise KafkaError(
            ErrorCode.invalid_replica_assignment, "all partitions must have the same number of replicas"
        )
    for p, replicas in assignments.items():
        if not replicas or len(set(replicas)) != len(replicas):
            raise KafkaError(
                ErrorCode.invalid_replica_assignment, f"partition {p} has duplicate or no replicas"
            )
        unknown = [b for b in replicas if b not in broker_ids]
        if unknown:
            raise KafkaError(
                ErrorCode.invalid_replica_assignment, f"partition {p} names unknown brokers {unknown}"
            )
    return {p: list(r) for p, r in assignments.items()}


def _handler_table():
    from broker_runtime.handlers.table import HANDLERS, VERSIONS

    return HANDLERS, VERSIONS
