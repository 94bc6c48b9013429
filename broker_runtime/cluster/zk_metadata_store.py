"""The cluster side of the metadata store: the `MetadataStore` interface over ZooKeeper (Kafka's
AdminZkClient and the broker's ZkMetadataCache).

Reads come from what the controller told this broker (UpdateMetadata, applied by `apply_update_metadata`) and
from topic and broker configs read from ZooKeeper and refreshed through /config/changes. Writes go to ZooKeeper
the way Kafka's admin path writes them, and the controller acts on them: a new topic is its config znode then its
assignment znode (with the topic id); a deletion is a marker in /admin/delete_topics; new partitions extend the
assignment with compare-and-set; a config change rewrites the entity's znode and adds a sequential
/config/changes notification that every broker follows. Like the standalone store, a write is applied to what
this broker shows at once where it can be (configs) and the returned awaitable completes when ZooKeeper has it.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

from kio.schema.errors import ErrorCode

from broker_runtime.cluster import zk_paths as z
from broker_runtime.cluster.metadata_cache import MetadataCache
from broker_runtime.cluster.metadata_store import BrokerInfo, PartitionAssignment, TopicInfo, _new_cluster_id
from broker_runtime.cluster.topics import INTERNAL_TOPICS
from broker_runtime.cluster.zk_client import (
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
    ZkClient,
    children_or_empty,
    get_or_none,
)
from broker_runtime.errors import KafkaError

log = logging.getLogger(__name__)
T = TypeVar("T")


def _answered(write: Awaitable[T]) -> Awaitable[T]:
    """A write that fails in ZooKeeper (the session expired, the connection did not come back) answers the
    request with UNKNOWN_SERVER_ERROR, as Kafka's admin manager does, instead of failing its handler."""

    async def run() -> T:
        try:
            return await write
        except KazooException as exc:
            log.warning("ZooKeeper write failed: %r", exc)
            raise KafkaError(
                ErrorCode.unknown_server_error, f"ZooKeeper write failed ({type(exc).__name__}); try again"
            ) from None

    return asyncio.ensure_future(run())


class ZkMetadataStore:
    def __init__(self, zk: ZkClient, broker: BrokerInfo, listener: str) -> None:
        self.zk = zk
        self.broker_id = broker.broker_id
        self._self_info = broker
        self.listener = listener  # the listener clients are told about
        self.cache = MetadataCache(broker.broker_id)
        self.cluster_id = ""
        self._topics: dict[str, TopicInfo] = {}
        self._topic_configs: dict[str, dict[str, str]] = {}
        self._broker_configs: dict[str, dict[str, str]] = {}
        self._changed = asyncio.Event()  # set and replaced whenever the metadata changes

    async def load(self) -> None:
        """Cluster id (created by the first broker of a new cluster) and the dynamic broker configs."""
        found = await get_or_none(self.zk, z.CLUSTER_ID)
        if found is None:
            try:
                await self.zk.create(z.CLUSTER_ID, z.encode_cluster_id(_new_cluster_id()), makepath=True)
            except NodeExistsError:
                pass
            found = await self.zk.get(z.CLUSTER_ID)
        self.cluster_id = z.decode_cluster_id(found[0])
        for entity in ("", str(self.broker_id)):
            await self.reload_broker_configs(entity)

    # --- reads (MetadataStore) -------------------------------------------------------------------------------

    def brokers(self) -> list[BrokerInfo]:
        out = []
        for broker_id, reg in sorted(self.cache.live_brokers.items()):
            endpoint = reg.endpoint(self.listener)
            if endpoint is not None:
                out.append(BrokerInfo(broker_id, endpoint.host, endpoint.port, reg.rack))
        # Before the controller's first UpdateMetadata, this broker is all it knows.
        return out or [self._self_info]

    def broker_racks(self) -> dict[int, str | None]:
        return {b.broker_id: b.rack for b in self.brokers()}

    def controller_id(self) -> int:
        return self.cache.controller_id

    def topics(self) -> Mapping[str, TopicInfo]:
        return self._topics

    def broker_configs(self) -> dict[str, dict[str, str]]:
        return {k: dict(v) for k, v in self._broker_configs.items()}

    def deleting_topic_ids(self) -> set[uuid.UUID]:
        return (
            set()
        )  # the controller finishes deletions: StopReplica(delete) reaches a broker when it is back

    def topic_deleted(self, topic_id: uuid.UUID) -> None:
        pass

    # --- writes (MetadataStore) ------------------------------------------------------------------------------

    def create_topic(self, topic: TopicInfo) -> Awaitable[None]:
        async def write() -> None:
            # A topic that exists already keeps its config: this broker's metadata may lag the cluster's (an
            # auto-creation racing an explicit one), as Kafka's validateTopicCreate checks.
            if await self.zk.exists(z.topic_path(topic.name)) is not None:
                raise KafkaError(ErrorCode.topic_already_exists, f"topic {topic.name!r} already exists")
            # The config first, so the controller never sees a topic without one (Kafka's order).
            try:
                await self.zk.create(
                    z.topic_config_path(topic.name), z.encode_config(topic.configs), makepath=True
                )
            except NodeExistsError:
                await self.zk.set(z.topic_config_path(topic.name), z.encode_config(topic.configs))
            assignment = {p: z.ReplicaAssignment(tuple(a.replicas)) for p, a in topic.partitions.items()}
            try:
                await self.zk.create(z.topic_path(topic.name), z.encode_topic(topic.topic_id, assignment))
            except NodeExistsError:
                raise KafkaError(
                    ErrorCode.topic_already_exists, f"topic {topic.name!r} already exists"
                ) from None
            self._topic_configs[topic.name] = dict(topic.configs)

        return _answered(write())

    def delete_topic(self, name: str) -> Awaitable[None]:
        async def write() -> None:
            try:
                await self.zk.create(z.delete_topic_path(name), makepath=True)
            except NodeExistsError:
                pass  # already marked

        return _answered(write())

    def add_partitions(self, name: str, new: Mapping[int, PartitionAssignment]) -> Awaitable[None]:
        async def write() -> None:
            while True:
                try:
                    data, stat = await self.zk.get(z.topic_path(name))
                except NoNodeError:
                    raise KafkaError(
                        ErrorCode.unknown_topic_or_partition, f"topic {name!r} does not exist"
                    ) from None
                current = z.decode_topic(name, data)
                if any(p in current.partitions for p in new):
                    raise KafkaError(
                        ErrorCode.invalid_partitions, f"partitions of {name!r} were added meanwhile"
                    )
                partitions = dict(current.partitions)
                partitions.update({p: z.ReplicaAssignment(tuple(a.replicas)) for p, a in new.items()})
                try:
                    await self.zk.set(
                        z.topic_path(name), z.encode_topic(current.topic_id, partitions), stat.version
                    )
                    return
                except BadVersionError:
                    continue  # the controller changed the znode (a reassignment): read it again

        return _answered(write())

    def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> Awaitable[None]:
        self._topic_configs[name] = dict(configs)
        topic = self._topics.get(name)
        if topic is not None:
            topic.configs = dict(configs)
        return _answered(self._write_config("topics", name, configs))

    def set_broker_configs(self, entity: str, configs: Mapping[str, str]) -> Awaitable[None]:
        if configs:
            self._broker_configs[entity] = dict(configs)
        else:
            self._broker_configs.pop(entity, None)
        return _answered(self._write_config("brokers", entity or z.DEFAULT_ENTITY, configs))

    async def _write_config(self, entity_type: str, entity: str, configs: Mapping[str, str]) -> None:
        path = z.config_path(entity_type, entity)
        try:
            await self.zk.set(path, z.encode_config(configs))
        except NoNodeError:
            try:
                await self.zk.create(path, z.encode_config(configs), makepath=True)
            except NodeExistsError:
                await self.zk.set(path, z.encode_config(configs))
        await self.zk.create(
            f"{z.CONFIG_CHANGES}/{z.CONFIG_CHANGE_PREFIX}", z.encode_config_change(entity_type, entity),
            sequence=True, makepath=True,
        )  # fmt: skip

    def allocate_producer_id_block(self, size: int) -> Awaitable[int]:
        async def allocate() -> int:
            while True:
                data, stat = await self.zk.get(z.PRODUCER_ID_BLOCK)
                previous = z.decode_producer_id_block(data)
                first = 0 if previous is None else previous.last + 1
                block = z.ProducerIdBlock(self.broker_id, first, size)
                try:
                    await self.zk.set(z.PRODUCER_ID_BLOCK, z.encode_producer_id_block(block), stat.version)
                    return first
                except BadVersionError:
                    continue  # another broker took a block meanwhile

        return _answered(allocate())

    # --- configs -------------------------------------------------------------------------------------------

    def cached_topic_config(self, topic: str) -> dict[str, str] | None:
        return self._topic_configs.get(topic)

    async def load_topic_configs(self) -> None:
        """Every topic's configs, so that logs loaded at start-up get theirs (Kafka's LogManager does the same)."""
        topics = await children_or_empty(self.zk, f"{z.CONFIG}/topics")
        await asyncio.gather(*(self.reload_topic_config(t) for t in topics))

    async def topic_config(self, topic: str) -> dict[str, str]:
        configs = self._topic_configs.get(topic)
        if configs is None:
            configs = await self.reload_topic_config(topic)
        return configs

    async def reload_topic_config(self, topic: str) -> dict[str, str]:
        path = z.topic_config_path(topic)
        found = await get_or_none(self.zk, path)
        configs = {} if found is None else z.decode_config(path, found[0])
        self._topic_configs[topic] = configs
        if topic in self._topics:
            self._topics[topic].configs = dict(configs)
        return configs

    async def reload_broker_configs(self, entity: str) -> dict[str, str]:
        path = z.broker_config_path(entity)
        found = await get_or_none(self.zk, path)
        configs = {} if found is None else z.decode_config(path, found[0])
        if configs:
            self._broker_configs[entity] = configs
        else:
            self._broker_configs.pop(entity, None)
        return configs

    # --- what the controller says --------------------------------------------------------------------------

    async def apply_update_metadata(self, request) -> dict[str, list[int]]:
        """Apply a checked UpdateMetadata; returns the topics deleted, with their partitions. Configs of new
        topics are read first, so a topic is never visible without its configs."""
        for topic_state in request.topic_states:
            name = topic_state.topic_name
            if name not in self._topic_configs and any(
                p.leader != z.LEADER_DURING_DELETE for p in topic_state.partition_states
            ):
                await self.reload_topic_config(name)
        known = {name: list(t.partitions) for name, t in self._topics.items()}
        deleted = {name: known.get(name, []) for name in self.cache.update(request)}
        for name in deleted:
            self._topics.pop(name, None)
            self._topic_configs.pop(name, None)
        for topic_state in request.topic_states:
            name = topic_state.topic_name
            cached = self.cache.topics.get(name)
            if cached is None:
                self._topics.pop(name, None)
                continue
            self._topics[name] = TopicInfo(
                name=name,
                topic_id=cached.topic_id or uuid.UUID(int=0),
                partitions={
                    i: PartitionAssignment(
                        replicas=list(p.replicas),
                        leader=self._alive_leader(p.leader),
                        leader_epoch=p.leader_epoch,
                        isr=list(p.isr),
                        offline_replicas=list(p.offline_replicas),
                    )
                    for i, p in sorted(cached.partitions.items())
                },
                configs=dict(self._topic_configs.get(name, {})),
                internal=name in INTERNAL_TOPICS,
            )
        # Leaders of brokers that left (the broker list changed) show as "no leader" until the controller says.
        for topic in self._topics.values():
            for i, a in topic.partitions.items():
                cached = self.cache.partition(topic.name, i)
                if cached is not None:
                    a.leader = self._alive_leader(cached.leader)
        self._notify()
        return deleted

    def apply_leader_and_isr(self, topic: str, state) -> None:
        """A partition's state from a LeaderAndIsr this broker has just applied. The controller's UpdateMetadata
        with the same state follows it, but until then Metadata from here would name the leader that this broker
        has just answered NOT_LEADER_OR_FOLLOWER for (a broker handing leadership away in a controlled shutdown
        would send clients back to itself). Only a newer leader epoch is taken."""
        cached = self.cache.partition(topic, state.partition_index)
        info = self._topics.get(topic)
        if cached is None or info is None or state.leader_epoch <= cached.leader_epoch:
            return
        cached.leader, cached.leader_epoch = state.leader, state.leader_epoch
        cached.isr, cached.replicas = list(state.isr), list(state.replicas)
        cached.partition_epoch, cached.controller_epoch = state.partition_epoch, state.controller_epoch
        assignment = info.partitions.get(state.partition_index)
        if assignment is not None:
            assignment.leader = self._alive_leader(state.leader)
            assignment.leader_epoch, assignment.isr = state.leader_epoch, list(state.isr)
            assignment.replicas = list(state.replicas)
        self._notify()

    def _alive_leader(self, leader: int) -> int:
        return leader if leader in self.cache.live_brokers else z.NO_LEADER

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def wait_until(self, ready: Callable[[], bool], timeout_ms: int, clock) -> bool:
        """Wait until `ready()` holds for the metadata (re-checked on every UpdateMetadata), or the timeout."""
        deadline = clock.monotonic_ms() + timeout_ms
        while not ready():
            remaining = deadline - clock.monotonic_ms()
            if remaining <= 0:
                return False
            changed = asyncio.ensure_future(self._changed.wait())
            try:
                await clock.wait_ms(changed, remaining)
            finally:
                changed.cancel()
        return True
