"""Cluster metadata behind one interface: topics, partition assignments, configs, brokers, producer ids.

`StandaloneMetadataStore` keeps a single broker's metadata in a JSON file in its first log dir, through the log's
filesystem seam: written to a temp file, fsynced, renamed over the old one, and the directory fsynced, so that a
power cut leaves the old or the new file, never a lost rename. Reads are in memory. A change is applied in memory
when the method is called (so concurrent requests see it), and the write of the whole file starts then too; the
returned awaitable completes once it is durable. Writes run through `run_blocking` (the broker passes its storage
thread), in the order of the changes. `zk_metadata_store.ZkMetadataStore` implements the same interface for
clusters over ZooKeeper.
"""

from __future__ import annotations

import asyncio
import base64
import json
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from broker_runtime.log.fs import FileSystem, RealFileSystem, read_whole, write_atomically

RunBlocking = Callable[[Callable[[], None]], Awaitable[None]]


class MetadataFileError(Exception):
    """The metadata file exists but cannot be read; the message names it."""


@dataclass
class BrokerInfo:
    broker_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass
class PartitionAssignment:
    replicas: list[int]
    leader: int
    leader_epoch: int = 0
    isr: list[int] = field(default_factory=list)
    offline_replicas: list[int] = field(default_factory=list)  # on brokers that are down (cluster mode)


@dataclass
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: dict[int, PartitionAssignment]
    configs: dict[str, str] = field(default_factory=dict)
    internal: bool = False


class MetadataStore(Protocol):
    cluster_id: str

    def brokers(self) -> list[BrokerInfo]: ...
    def controller_id(self) -> int: ...
    def topics(self) -> Mapping[str, TopicInfo]: ...
    def broker_configs(self) -> dict[str, dict[str, str]]: ...
    def deleting_topic_ids(self) -> set[uuid.UUID]: ...
    def create_topic(self, topic: TopicInfo) -> Awaitable[None]: ...
    def delete_topic(self, name: str) -> Awaitable[None]: ...
    def topic_deleted(self, topic_id: uuid.UUID) -> None: ...
    def add_partitions(self, name: str, new: Mapping[int, PartitionAssignment]) -> Awaitable[None]: ...
    def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> Awaitable[None]: ...
    def set_broker_configs(self, entity: str, configs: Mapping[str, str]) -> Awaitable[None]: ...
    def allocate_producer_id_block(self, size: int) -> Awaitable[int]: ...


async def _run_inline(write: Callable[[], None]) -> None:
    write()


class StandaloneMetadataStore:
    FILE_NAME = "odradek-metadata.json"

    def __init__(self, directory: Path, broker: BrokerInfo, *, fs: FileSystem | None = None,
                 run_blocking: RunBlocking = _run_inline) -> None:  # fmt: skip
        self._fs: FileSystem = fs if fs is not None else RealFileSystem()
        self._dir = Path(directory)
        self._path = self._dir / self.FILE_NAME
        self._broker = broker
        self._run_blocking = run_blocking
        self._topics: dict[str, TopicInfo] = {}
        self._broker_configs: dict[str, dict[str, str]] = {}
        self._deleting: set[uuid.UUID] = set()  # deleted topics whose logs may still be on disk
        self._topic_json: dict[str, str] = {}  # each topic's part of the file, made again when it changes
        self._next_producer_id = 0
        self._fs.mkdir(self._dir)
        if self._fs.exists(self._path):
            self._load()
        else:
            self.cluster_id = _new_cluster_id()
            self.save_now()

    # --- reads --------------------------------------------------------------------------------------------

    def brokers(self) -> list[BrokerInfo]:
        return [self._broker]

    def controller_id(self) -> int:
        return self._broker.broker_id

    def topics(self) -> Mapping[str, TopicInfo]:
        return self._topics

    def broker_configs(self) -> dict[str, dict[str, str]]:
        return {k: dict(v) for k, v in self._broker_configs.items()}

    def deleting_topic_ids(self) -> set[uuid.UUID]:
        """Topics deleted from metadata whose logs may not all be renamed for deletion yet (a crash came
        between): the start-up deletes their logs, as Kafka's controller resumes /admin/delete_topics."""
        return set(self._deleting)

    # --- writes -------------------------------------------------------------------------------------------

    def create_topic(self, topic: TopicInfo) -> Awaitable[None]:
        self._topics[topic.name] = topic
        return self._save(topic.name)

    def delete_topic(self, name: str) -> Awaitable[None]:
        topic = self._topics.pop(name)
        self._deleting.add(topic.topic_id)
        return self._save(name)

    def topic_deleted(self, topic_id: uuid.UUID) -> None:
        """The topic's logs are renamed for deletion; the next save forgets it."""
        self._deleting.discard(topic_id)

    def add_partitions(self, name: str, new: Mapping[int, PartitionAssignment]) -> Awaitable[None]:
        self._topics[name].partitions.update(new)
        return self._save(name)

    def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> Awaitable[None]:
        self._topics[name].configs = dict(configs)
        return self._save(name)

    def set_broker_configs(self, entity: str, configs: Mapping[str, str]) -> Awaitable[None]:
        if configs:
            self._broker_configs[entity] = dict(configs)
        else:
            self._broker_configs.pop(entity, None)
        return self._save()

    def allocate_producer_id_block(self, size: int) -> Awaitable[int]:
        start = self._next_producer_id
        self._next_producer_id += size
        saved = self._save()

        async def durable() -> int:
            await saved
            return start

        return asyncio.ensure_future(durable())

    # --- persistence --------------------------------------------------------------------------------------

    def _load(self) -> None:
        try:
            data = json.loads(read_whole(self._fs, self._path))
            self.cluster_id = data["cluster_id"]
            self._next_producer_id = data.get("next_producer_id", 0)
            self._broker_configs = data.get("broker_configs", {})
            self._deleting = {uuid.UUID(t) for t in data.get("deleting_topic_ids", [])}
            for t in data.get("topics", []):
                self._topics[t["name"]] = TopicInfo(
                    name=t["name"],
                    topic_id=uuid.UUID(t["topic_id"]),
                    partitions={int(p): PartitionAssignment(**a) for p, a in t["partitions"].items()},
                    configs=t.get("configs", {}),
                    internal=t.get("internal", False),
                )
        except (ValueError, KeyError, TypeError) as error:
            raise MetadataFileError(f"{self._path}: cannot read the cluster metadata: {error!r}") from None

    def _serialize(self) -> bytes:
        """The whole file; a topic's part is encoded again only when it changed, so that saving a change to a
        cluster of thousands of partitions costs the event loop little."""
        head = {
            "version": 1,
            "cluster_id": self.cluster_id,
            "next_producer_id": self._next_producer_id,
            "broker_configs": self._broker_configs,
            "deleting_topic_ids": sorted(str(t) for t in self._deleting),
        }
        topics = ",\n".join(self._encoded_topic(name) for name in sorted(self._topics))
        head_without_closing_brace = json.dumps(head, indent=1, sort_keys=True).removesuffix("\n}")
        return f'{head_without_closing_brace},\n "topics": [\n{topics}\n ]\n}}\n'.encode()

    def _encoded_topic(self, name: str) -> str:
        encoded = self._topic_json.get(name)
        if encoded is None:
            t = self._topics[name]
            partitions = {
                str(p): {
                    "replicas": a.replicas,
                    "leader": a.leader,
                    "leader_epoch": a.leader_epoch,
                    "isr": a.isr,
                }
                for p, a in sorted(t.partitions.items())
            }
            encoded = json.dumps(
                {"name": t.name, "topic_id": str(t.topic_id), "internal": t.internal, "configs": t.configs,
                 "partitions": partitions},
                sort_keys=True,
            )  # fmt: skip
            self._topic_json[name] = encoded
        return encoded

    def save_now(self) -> None:
        """Write the file in place (start-up)."""
        write_atomically(self._fs, self._path, self._serialize())

    def _save(self, changed_topic: str | None = None) -> asyncio.Future[None]:
        # Serialized now; the tasks start in creation order, so the writes are queued in the order of the changes.
        if changed_topic is not None:
            self._topic_json.pop(changed_topic, None)
        data = self._serialize()
        return asyncio.ensure_future(self._run_blocking(lambda: write_atomically(self._fs, self._path, data)))


def _new_cluster_id() -> str:
    """Kafka's cluster ids are 16 random bytes in URL-safe base64 without padding (22 characters)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
