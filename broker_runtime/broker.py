"""The broker: wires configuration, metadata, storage, partitions, coordinators and listeners together,
and owns the lifecycle (start, periodic housekeeping, controlled shutdown)."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from kio.schema.errors import ErrorCode

from broker_runtime.clock import Clock
from broker_runtime.cluster.metadata_store import (
    BrokerInfo,
    PartitionAssignment,
    StandaloneMetadataStore,
    TopicInfo,
)
from broker_runtime.cluster.topics import INTERNAL_TOPICS, assign_replicas, collision_key, validate_topic_name
from broker_runtime.config import BrokerConfig, ConfigError, message_timestamp_bounds, validate_topic_configs
from broker_runtime.errors import KafkaError
from broker_runtime.group.runtime import GroupCoordinatorRuntime
from broker_runtime.log.config import LogConfig
from broker_runtime.log.log_manager import LogManager
from broker_runtime.protocol.records import record_scan_is_compiled, require_native_crc32c
from broker_runtime.replication.partition import Partition
from broker_runtime.replication.replica_manager import ReplicaManager
from broker_runtime.server.dispatch import Dispatcher
from broker_runtime.server.listener import Listener

log = logging.getLogger(__name__)

PRODUCER_ID_BLOCK = 1000
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
    def __init__(self, config: BrokerConfig, clock: Clock | None = None) -> None:
        require_native_crc32c()
        if not record_scan_is_compiled():
            log.warning(
                "the compiled record scan is not built (run make install): produce validation walks records "
                "in Python, ~150 ns a record"
            )
        self.config = config
        self.clock = clock or Clock()
        self.broker_id = config.broker_id
        self.bind_address = config.listeners[0]
        advertised = config.advertised_listeners[0]
        self.advertised = BrokerInfo(self.broker_id, advertised.host or "127.0.0.1", advertised.port)
        self.log_dirs = [Path(d) for d in config.log_dirs]
        self.metadata = StandaloneMetadataStore(self.log_dirs[0], self.advertised)
        for entity, values in self.metadata.broker_configs().items():
            if entity in ("", str(self.broker_id)):
                config.replace_dynamic(values, cluster_default=entity == "")
        self.log_manager = LogManager(self.log_dirs, self.clock, config_for_topic=self._log_config_for)
        self.replica_manager = ReplicaManager(self.broker_id, self.clock, self._min_insync_replicas)
        self.dispatcher = Dispatcher(self, *_handler_table())
        self._listener: Listener | None = None
        self._housekeeping: list[asyncio.Task] = []
        self._producer_ids = iter(())
        self.group_coordinator = None
        self._produce_policies: dict[str, ProducePolicy] = {}
        # Produce validation that must decompress (bounded, GIL released) runs here, off the event loop.
        self.record_workers = ThreadPoolExecutor(max_workers=2, thread_name_prefix="record-check")
        self.stopped = asyncio.Event()

    # --- lifecycle ----------------------------------------------------------------------------------------

    async def start(self) -> None:
        self.log_manager.startup(self.broker_id, self.metadata.cluster_id)
        topics = self.metadata.topics()
        for name, index in list(self.log_manager.logs()):
            topic = topics.get(name)
            known_id = self.log_manager.topic_ids.get((name, index))
            if topic is None or index not in topic.partitions or (known_id and known_id != topic.topic_id):
                # A crash between deleting a topic from metadata and deleting its logs leaves strays.
                log.warning("deleting stray log %s-%d: its topic no longer exists", name, index)
                self.log_manager.delete_log(name, index)
        for topic in topics.values():
            for index, assignment in topic.partitions.items():
                if self.broker_id in assignment.replicas:
                    self._host_partition(topic, index, assignment)
        self._start_coordinators()
        self._listener = Listener(self.dispatcher, self.bind_address, self.config["socket.request.max.bytes"])
        await self._listener.start()
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

    async def stop(self) -> None:
        log.info("broker %d shutting down", self.broker_id)
        if self._listener is not None:
            await self._listener.stop()
        for task in self._housekeeping:
            task.cancel()
        await self._stop_coordinators()
        await self.replica_manager.finish_appends()
        self.record_workers.shutdown()
        self.log_manager.shutdown(self.replica_manager.high_watermarks())
        log.info("broker %d shut down cleanly", self.broker_id)
        self.stopped.set()

    def _start_coordinators(self) -> None:
        """Group coordination arrives with the group package; see broker_runtime/group/runtime.py."""
        self.group_coordinator = GroupCoordinatorRuntime(self)
        self.group_coordinator.start()

    async def _stop_coordinators(self) -> None:
        if self.group_coordinator is not None:
            await self.group_coordinator.stop()

    async def _every(self, key: str, action, cap_ms: int | None = None) -> None:
        while True:
            interval = self.config[key]
            if cap_ms is not None:
                interval = min(interval, cap_ms)
            await asyncio.sleep(max(interval, 10) / 1000)
            try:
                action()
            except Exception:
                log.exception("periodic task %s failed", action.__name__)

    def _run_retention(self) -> None:
        deleted = self.log_manager.run_retention(self.clock.time_ms(), self.replica_manager.high_watermarks())
        if deleted:
            log.info("retention deleted %d segments", deleted)

    def _expire_producers(self) -> None:
        self.log_manager.expire_producers(self.clock.time_ms(), self.config["producer.id.expiration.ms"])

    def _run_flush(self) -> None:
        self.log_manager.run_flush(self.clock.time_ms())

    def _checkpoint(self) -> None:
        self.log_manager.checkpoint(self.replica_manager.high_watermarks())

    # --- topics -------------------------------------------------------------------------------------------

    def _log_config_for(self, name: str) -> LogConfig:
        topic = self.metadata.topics().get(name)
        return self.topic_log_config(topic) if topic else LogConfig()

    def topic_log_config(self, topic: TopicInfo) -> LogConfig:
        return LogConfig.from_topic_config(self.config.effective_topic_config(topic.configs))

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

    def _host_partition(self, topic: TopicInfo, index: int, assignment: PartitionAssignment) -> Partition:
        plog = self.log_manager.get_log(topic.name, index)
        if plog is None:
            plog = self.log_manager.create_log(
                topic.name, index, self.topic_log_config(topic), topic.topic_id
            )
        partition = Partition(
            topic=topic.name, index=index, topic_id=topic.topic_id, log=plog, leader_id=assignment.leader,
            leader_epoch=assignment.leader_epoch, replicas=list(assignment.replicas),
            isr=list(assignment.isr or assignment.replicas), broker_id=self.broker_id,
        )  # fmt: skip
        if partition.is_leader:
            plog.assign_epoch_start_offset(partition.leader_epoch)
        self.replica_manager.add_partition(partition)
        return partition

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

    def create_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: Mapping[str, str | None] | None = None,
        *,
        assignments: Mapping[int, list[int]] | None = None,
        validate_only: bool = False,
        internal: bool = False,
    ) -> TopicInfo:
        """Validate everything first, then persist and host; nothing is created when any check fails."""
        self.check_new_topic_name(name)
        broker_ids = [b.broker_id for b in self.metadata.brokers()]
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
            replica_lists = assign_replicas(broker_ids, num_partitions, replication_factor)
        try:
            clean_configs = validate_topic_configs(configs or {})
        except ConfigError as exc:
            raise KafkaError(ErrorCode.invalid_config, str(exc)) from None
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
        self.metadata.create_topic(topic)
        for index, assignment in topic.partitions.items():
            if self.broker_id in assignment.replicas:
                self._host_partition(topic, index, assignment)
        log.info(
            "created topic %s with %d partitions, configs %s", name, len(topic.partitions), clean_configs
        )
        return topic

    def maybe_auto_create(self, name: str) -> TopicInfo | None:
        if not self.config["auto.create.topics.enable"] or name in INTERNAL_TOPICS:
            return None
        try:
            return self.create_topic(
                name, -1, min(self.config["default.replication.factor"], len(self.metadata.brokers()))
            )
        except KafkaError as exc:
            if exc.error_code == ErrorCode.topic_already_exists:
                return self.metadata.topics().get(name)
            raise

    def delete_topic(self, name: str) -> None:
        if not self.config["delete.topic.enable"]:
            raise KafkaError(ErrorCode.topic_deletion_disabled, "delete.topic.enable is false")
        topic = self.metadata.topics().get(name)
        if topic is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist")
        self.metadata.delete_topic(name)
        self._produce_policies.pop(name, None)
        for index in topic.partitions:
            if self.replica_manager.remove_partition(name, index) is not None:
                self.log_manager.delete_log(name, index)
        if self.group_coordinator is not None:
            self.group_coordinator.on_partitions_deleted([(name, index) for index in topic.partitions])
        log.info("deleted topic %s", name)

    def create_partitions(
        self, name: str, count: int, assignments: list[list[int]] | None, validate_only: bool
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
        broker_ids = [b.broker_id for b in self.metadata.brokers()]
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
            new = assign_replicas(broker_ids, count - current, rf, start_partition=current)
        if validate_only:
            return
        added = {
            p: PartitionAssignment(replicas=r, leader=r[0], leader_epoch=0, isr=list(r))
            for p, r in new.items()
        }
        self.metadata.add_partitions(name, added)
        for index, assignment in added.items():
            if self.broker_id in assignment.replicas:
                self._host_partition(topic, index, assignment)

    def set_topic_configs(self, name: str, configs: Mapping[str, str], validate_only: bool = False) -> None:
        topic = self.metadata.topics().get(name)
        if topic is None:
            raise KafkaError(ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist")
        try:
            clean = validate_topic_configs(configs)
        except ConfigError as exc:
            raise KafkaError(ErrorCode.invalid_config, str(exc)) from None
        if validate_only:
            return
        self.metadata.set_topic_configs(name, clean)
        self._produce_policies.pop(name, None)
        self.log_manager.update_config(name, self.topic_log_config(topic))

    def set_broker_configs(
        self, entity: str, configs: Mapping[str, str], validate_only: bool = False
    ) -> None:
        """Replace the dynamic configs of this broker (entity = its id) or the cluster default (entity = "")."""
        cluster_default = entity == ""
        try:
            for key, value in configs.items():
                self.config.validate_dynamic(key, value, cluster_default=cluster_default)
            if validate_only:
                return
            self.config.replace_dynamic(configs, cluster_default=cluster_default)
        except ConfigError as exc:
            raise KafkaError(ErrorCode.invalid_config, str(exc)) from None
        self.metadata.set_broker_configs(entity, configs)
        self._produce_policies.clear()
        for topic in self.metadata.topics().values():
            self.log_manager.update_config(topic.name, self.topic_log_config(topic))

    # --- producer ids -------------------------------------------------------------------------------------

    def next_producer_id(self) -> int:
        for pid in self._producer_ids:
            return pid
        start = self.metadata.allocate_producer_id_block(PRODUCER_ID_BLOCK)
        self._producer_ids = iter(range(start + 1, start + PRODUCER_ID_BLOCK))
        return start


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
