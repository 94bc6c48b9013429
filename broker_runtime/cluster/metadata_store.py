"""Cluster metadata behind one interface: topics, partition assignments, configs, brokers, producer ids.

`StandaloneMetadataStore` keeps a single broker's metadata in a JSON file in its first log dir, written
atomically (temp file, fsync, rename). A ZooKeeper-backed store with Kafka's znode layout implements the same
interface for clusters.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol


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
    def create_topic(self, topic: TopicInfo) -> None: ...
    def delete_topic(self, name: str) -> None: ...
    def add_partitions(self, name: str, new: Mapping[int, PartitionAssignment]) -> None: ...
    def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None: ...
    def broker_configs(self) -> dict[str, dict[str, str]]: ...
    def set_broker_configs(self, entity: str, configs: Mapping[str, str]) -> None: ...
    def allocate_producer_id_block(self, size: int) -> int: ...


class StandaloneMetadataStore:
    FILE_NAME = "odradek-metadata.json"

    def __init__(self, directory: Path, broker: BrokerInfo) -> None:
        self._path = Path(directory) / self.FILE_NAME
        self._broker = broker
        self._topics: dict[str, TopicInfo] = {}
        self._broker_configs: dict[str, dict[str, str]] = {}
        self._next_producer_id = 0
        if self._path.exists():
            self._load()
        else:
            self.cluster_id = _new_cluster_id()
            self._save()

    # --- reads --------------------------------------------------------------------------------------------

    def brokers(self) -> list[BrokerInfo]:
        return [self._broker]

    def controller_id(self) -> int:
        return self._broker.broker_id

    def topics(self) -> Mapping[str, TopicInfo]:
        return self._topics

    def broker_configs(self) -> dict[str, dict[str, str]]:
        return {k: dict(v) for k, v in self._broker_configs.items()}

    # --- writes -------------------------------------------------------------------------------------------

    def create_topic(self, topic: TopicInfo) -> None:
        self._topics[topic.name] = topic
        self._save()

    def delete_topic(self, name: str) -> None:
        del self._topics[name]
        self._save()

    def add_partitions(self, name: str, new: Mapping[int, PartitionAssignment]) -> None:
        self._topics[name].partitions.update(new)
        self._save()

    def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        self._topics[name].configs = dict(configs)
        self._save()

    def set_broker_configs(self, entity: str, configs: Mapping[str, str]) -> None:
        if configs:
            self._broker_configs[entity] = dict(configs)
        else:
            self._broker_configs.pop(entity, None)
        self._save()

    def allocate_producer_id_block(self, size: int) -> int:
        start = self._next_producer_id
        self._next_producer_id += size
        self._save()
        return start

    # --- persistence --------------------------------------------------------------------------------------

    def _load(self) -> None:
        data = json.loads(self._path.read_text())
        self.cluster_id = data["cluster_id"]
        self._next_producer_id = data.get("next_producer_id", 0)
        self._broker_configs = data.get("broker_configs", {})
        for t in data.get("topics", []):
            self._topics[t["name"]] = TopicInfo(
                name=t["name"],
                topic_id=uuid.UUID(t["topic_id"]),
                partitions={int(p): PartitionAssignment(**a) for p, a in t["partitions"].items()},
                configs=t.get("configs", {}),
                internal=t.get("internal", False),
            )

    def _save(self) -> None:
        data = {
            "version": 1,
            "cluster_id": self.cluster_id,
            "next_producer_id": self._next_producer_id,
            "broker_configs": self._broker_configs,
            "topics": [
                {
                    "name": t.name,
                    "topic_id": str(t.topic_id),
                    "internal": t.internal,
                    "configs": t.configs,
                    "partitions": {str(p): asdict(a) for p, a in sorted(t.partitions.items())},
                }
                for t in self._topics.values()
            ],
        }
        self._path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._path.with_suffix(".tmp")
        with open(tmp, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._path)


def _new_cluster_id() -> str:
    """Kafka's cluster ids are 16 random bytes in URL-safe base64 without padding (22 characters)."""
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
