"""Every ZooKeeper path a cluster uses, with the JSON of its znode: Kafka's ZooKeeper-mode layout, byte for byte
in shape, so that an operator reads it with zkCli the way they read a Kafka cluster.

Paths are relative to the chroot of `zookeeper.connect`. Encoders write compact JSON as Kafka does; decoders
accept what Kafka writes (older versions included where Kafka still reads them) and raise `ZkDataError`, naming
the path, on anything else. Nothing here does I/O.

    /cluster/id                                   {"version":"1","id":"<cluster id>"}
    /controller                 (ephemeral)       {"version":2,"brokerid":1,"timestamp":"...","kraftControllerEpoch":-1}
    /controller_epoch                             "7" (a plain integer)
    /brokers/ids/<id>           (ephemeral)       broker registration, version 5; its czxid is the broker epoch
    /brokers/topics/<t>                           {"version":3,"partitions":{"0":[1,2]},"adding_replicas":{},
                                                   "removing_replicas":{},"topic_id":"<base64 uuid>"}
    /brokers/topics/<t>/partitions/<p>/state      {"version":1,"leader":1,"leader_epoch":0,"isr":[1,2],
                                                   "controller_epoch":7}; its znode version is the partition epoch
    /brokers/seqid
    /config/topics/<t>, /config/brokers/<id>, /config/brokers/<default>    {"version":1,"config":{...}}
    /config/changes/config_change_<seq>           {"version":2,"entity_path":"topics/<t>"}
    /admin/delete_topics/<t>                      (no data)
    /admin/reassign_partitions                    {"version":1,"partitions":[{"topic":..,"partition":..,"replicas":[..]}]}
    /admin/preferred_replica_election             {"version":1,"partitions":[{"topic":..,"partition":..}]}
    /isr_change_notification/isr_change_<seq>     {"version":1,"partitions":[{"topic":..,"partition":..}]}
    /log_dir_event_notification
    /latest_producer_id_block                     {"version":1,"broker":1,"block_start":"0","block_end":"999"}
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# Special leader ids, as in Kafka's LeaderAndIsr.
NO_LEADER = -1
LEADER_DURING_DELETE = -2

CLUSTER_ID = "/cluster/id"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
BROKERS = "/brokers"
BROKER_IDS = "/brokers/ids"
BROKER_SEQID = "/brokers/seqid"
TOPICS = "/brokers/topics"
CONFIG = "/config"
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = "config_change_"
ADMIN = "/admin"
DELETE_TOPICS = "/admin/delete_topics"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
ISR_CHANGE_PREFIX = "isr_change_"
LOG_DIR_EVENT_NOTIFICATION = "/log_dir_event_notification"
PRODUCER_ID_BLOCK = "/latest_producer_id_block"
CONSUMERS = "/consumers"

CONFIG_TYPES = ("topics", "clients", "users", "brokers", "ips")
DEFAULT_ENTITY = "<default>"

#: Created at start-up by every broker (Kafka's ZkData.PersistentZkPaths).
PERSISTENT_PATHS: tuple[str, ...] = (
    CONSUMERS,
    BROKER_IDS,
    TOPICS,
    CONFIG_CHANGES,
    DELETE_TOPICS,
    BROKER_SEQID,
    ISR_CHANGE_NOTIFICATION,
    PRODUCER_ID_BLOCK,
    LOG_DIR_EVENT_NOTIFICATION,
    *(f"{CONFIG}/{t}" for t in CONFIG_TYPES),
)


class ZkDataError(ValueError):
    """A znode holds data this cluster cannot read."""

    def __init__(self, path: str, detail: str, data: bytes | None = None) -> None:
        shown = "" if data is None else f": {data[:200]!r}"
        super().__init__(f"{path}: {detail}{shown}")
        self.path = path


def _encode(obj: Mapping[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _decode(path: str, data: bytes | None) -> dict[str, Any]:
    if not data:
        raise ZkDataError(path, "empty znode")
    try:
        obj = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ZkDataError(path, f"not JSON ({exc})", data) from None
    if not isinstance(obj, dict):
        raise ZkDataError(path, "not a JSON object", data)
    return obj


def _int_list(path: str, value: Any, what: str) -> list[int]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise ZkDataError(path, f"{what} must be a list of integers, got {value!r}")
    return list(value)


def _now_ms() -> str:
    return str(time.time_ns() // 1_000_000)


# --- topic ids: Kafka's Uuid.toString is URL-safe base64 without padding -----------------------------------


def topic_id_to_str(topic_id: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(topic_id.bytes).decode().rstrip("=")


def topic_id_from_str(text: str) -> uuid.UUID:
    try:
        raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        return uuid.UUID(bytes=raw)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{text!r} is not a topic id ({exc})") from None


# --- /cluster/id ---------------------------------------------------------------------------------------------


def encode_cluster_id(cluster_id: str) -> bytes:
    return _encode({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes) -> str:
    obj = _decode(CLUSTER_ID, data)
    cluster_id = obj.get("id")
    if not isinstance(cluster_id, str) or not cluster_id:
        raise ZkDataError(CLUSTER_ID, "no cluster id", data)
    return cluster_id


# --- /controller, /controller_epoch -------------------------------------------------------------------------


def encode_controller(broker_id: int) -> bytes:
    return _encode({"version": 2, "brokerid": broker_id, "timestamp": _now_ms(), "kraftControllerEpoch": -1})


def decode_controller(data: bytes) -> int:
    obj = _decode(CONTROLLER, data)
    broker_id = obj.get("brokerid")
    if not isinstance(broker_id, int):
        raise ZkDataError(CONTROLLER, "no brokerid", data)
    return broker_id


def encode_controller_epoch(epoch: int) -> bytes:
    return str(epoch).encode()


def decode_controller_epoch(data: bytes) -> int:
    try:
        return int(data.decode())
    except (UnicodeDecodeError, ValueError):
        raise ZkDataError(CONTROLLER_EPOCH, "not an integer", data) from None


# --- /brokers/ids/<id> --------------------------------------------------------------------------------------


def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{broker_id}"


@dataclass(frozen=True)
class Endpoint:
    listener: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    @property
    def connection_string(self) -> str:
        return f"{self.listener}://{self.host}:{self.port}"


@dataclass(frozen=True)
class BrokerRegistration:
    """What a broker writes to /brokers/ids/<id>; `epoch` is that znode's czxid (Kafka's broker epoch)."""

    broker_id: int
    endpoints: tuple[Endpoint, ...]
    rack: str | None = None
    epoch: int = -1

    def endpoint(self, listener: str) -> Endpoint | None:
        for e in self.endpoints:
            if e.listener == listener:
                return e
        return None


def encode_broker(reg: BrokerRegistration) -> bytes:
    plaintext = next((e for e in reg.endpoints if e.security_protocol == "PLAINTEXT"), None)
    obj: dict[str, Any] = {
        "features": {},
        "listener_security_protocol_map": {e.listener: e.security_protocol for e in reg.endpoints},
        "endpoints": [e.connection_string for e in reg.endpoints],
        "jmx_port": -1,
        "port": plaintext.port if plaintext else -1,
        "host": plaintext.host if plaintext else None,
        "version": 5,
        "timestamp": _now_ms(),
    }
    if reg.rack is not None:
        obj["rack"] = reg.rack
    return _encode(obj)


def _parse_endpoint(path: str, text: str, protocols: Mapping[str, str]) -> Endpoint:
    listener, sep, rest = text.partition("://")
    host, colon, port = rest.rpartition(":")
    if not sep or not colon or not port.isdigit():
        raise ZkDataError(path, f"bad endpoint {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return Endpoint(listener, host, int(port), protocols.get(listener, listener))


def decode_broker(broker_id: int, data: bytes, epoch: int = -1) -> BrokerRegistration:
    path = broker_path(broker_id)
    obj = _decode(path, data)
    version = obj.get("version")
    if not isinstance(version, int) or version < 1:
        raise ZkDataError(path, "unsupported registration version", data)
    if version == 1:
        endpoints = (Endpoint("PLAINTEXT", obj["host"], int(obj["port"])),)
    else:
        protocols = obj.get("listener_security_protocol_map") or {}
        texts = obj.get("endpoints")
        if not isinstance(texts, list):
            raise ZkDataError(path, "no endpoints", data)
        endpoints = tuple(_parse_endpoint(path, t, protocols) for t in texts)
    rack = obj.get("rack")
    return BrokerRegistration(broker_id, endpoints, rack if isinstance(rack, str) else None, epoch)


# --- /brokers/topics/<t> and partition state ----------------------------------------------------------------


def topic_path(topic: str) -> str:
    return f"{TOPICS}/{topic}"


def partitions_path(topic: str) -> str:
    return f"{TOPICS}/{topic}/partitions"


def partition_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"{TOPICS}/{topic}/partitions/{partition}/state"


@dataclass(frozen=True)
class ReplicaAssignment:
    """A partition's replicas; during a reassignment `replicas` is target + origin, as in Kafka."""

    replicas: tuple[int, ...]
    adding: tuple[int, ...] = ()
    removing: tuple[int, ...] = ()

    @property
    def is_being_reassigned(self) -> bool:
        return bool(self.adding or self.removing)

    @property
    def target_replicas(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.removing)

    @property
    def origin_replicas(self) -> tuple[int, ...]:
        return tuple(r for r in self.replicas if r not in self.adding)

    def reassign_to(self, target: Iterable[int]) -> ReplicaAssignment:
        """Kafka's ReplicaAssignment.reassignTo: target first (its order is the new preference), then the
        origin replicas that are leaving."""
        target = tuple(target)
        origin = self.origin_replicas
        full = target + tuple(r for r in origin if r not in target)
        return ReplicaAssignment(
            replicas=full,
            adding=tuple(r for r in target if r not in origin),
            removing=tuple(r for r in origin if r not in target),
        )

    def without_replica(self, replica: int) -> ReplicaAssignment:
        return ReplicaAssignment(
            tuple(r for r in self.replicas if r != replica),
            tuple(r for r in self.adding if r != replica),
            tuple(r for r in self.removing if r != replica),
        )


@dataclass(frozen=True)
class TopicAssignment:
    topic: str
    topic_id: uuid.UUID | None
    partitions: dict[int, ReplicaAssignment]


def encode_topic(topic_id: uuid.UUID | None, partitions: Mapping[int, ReplicaAssignment]) -> bytes:
    ordered = sorted(partitions.items())
    obj: dict[str, Any] = {
        "partitions": {str(p): list(a.replicas) for p, a in ordered},
        "adding_replicas": {str(p): list(a.adding) for p, a in ordered if a.adding},
        "removing_replicas": {str(p): list(a.removing) for p, a in ordered if a.removing},
        "version": 3,
    }
    if topic_id is not None:
        obj["topic_id"] = topic_id_to_str(topic_id)
    return _encode(obj)


def decode_topic(topic: str, data: bytes) -> TopicAssignment:
    path = topic_path(topic)
    obj = _decode(path, data)
    topic_id = None
    if "topic_id" in obj:
        try:
            topic_id = topic_id_from_str(obj["topic_id"])
        except (ValueError, TypeError) as exc:
            raise ZkDataError(path, str(exc), data) from None
    raw = obj.get("partitions")
    if not isinstance(raw, dict):
        raise ZkDataError(path, "no partitions", data)
    adding = obj.get("adding_replicas") or {}
    removing = obj.get("removing_replicas") or {}
    partitions = {}
    for key, replicas in raw.items():
        if not key.isdigit():
            raise ZkDataError(path, f"partition {key!r} is not a number", data)
        partitions[int(key)] = ReplicaAssignment(
            tuple(_int_list(path, replicas, f"partition {key} replicas")),
            tuple(_int_list(path, adding.get(key, []), "adding_replicas")),
            tuple(_int_list(path, removing.get(key, []), "removing_replicas")),
        )
    return TopicAssignment(topic, topic_id, partitions)


@dataclass(frozen=True)
class LeaderAndIsr:
    """A partition's leadership, as stored in its state znode. `partition_epoch` is that znode's version
    (Kafka's zkVersion): every compare-and-set of the state checks it."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    partition_epoch: int = 0
    leader_recovery_state: int = 0  # 1 = recovering after an unclean election

    def with_leader(self, leader: int, isr: Iterable[int] | None = None) -> LeaderAndIsr:
        """A new leader (or the same one) at the next leader epoch."""
        return LeaderAndIsr(
            leader,
            self.leader_epoch + 1,
            tuple(self.isr if isr is None else isr),
            self.controller_epoch,
            self.partition_epoch,
            self.leader_recovery_state,
        )

    def with_isr(self, isr: Iterable[int]) -> LeaderAndIsr:
        return LeaderAndIsr(
            self.leader, self.leader_epoch, tuple(isr), self.controller_epoch, self.partition_epoch,
            self.leader_recovery_state,
        )  # fmt: skip


def encode_partition_state(state: LeaderAndIsr) -> bytes:
    obj: dict[str, Any] = {
        "controller_epoch": state.controller_epoch,
        "leader": state.leader,
        "version": 1,
        "leader_epoch": state.leader_epoch,
        "isr": list(state.isr),
    }
    if state.leader_recovery_state:
        obj["leader_recovery_state"] = state.leader_recovery_state
    return _encode(obj)


def decode_partition_state(topic: str, partition: int, data: bytes, zk_version: int) -> LeaderAndIsr:
    path = partition_state_path(topic, partition)
    obj = _decode(path, data)
    try:
        return LeaderAndIsr(
            leader=int(obj["leader"]),
            leader_epoch=int(obj["leader_epoch"]),
            isr=tuple(_int_list(path, obj["isr"], "isr")),
            controller_epoch=int(obj["controller_epoch"]),
            partition_epoch=zk_version,
            leader_recovery_state=int(obj.get("leader_recovery_state", 0)),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ZkDataError(path, f"missing or bad field ({exc!r})", data) from None


# --- /config ------------------------------------------------------------------------------------------------


def config_path(entity_type: str, entity: str) -> str:
    return f"{CONFIG}/{entity_type}/{entity}"


def topic_config_path(topic: str) -> str:
    return config_path("topics", topic)


def broker_config_path(entity: str) -> str:
    """entity: a broker id, or "" for the cluster-wide default (Kafka's <default>)."""
    return config_path("brokers", entity or DEFAULT_ENTITY)


def encode_config(configs: Mapping[str, str]) -> bytes:
    return _encode({"version": 1, "config": dict(configs)})


def decode_config(path: str, data: bytes | None) -> dict[str, str]:
    if not data:
        return {}
    obj = _decode(path, data)
    config = obj.get("config") or {}
    if not isinstance(config, dict):
        raise ZkDataError(path, "config is not an object", data)
    return {str(k): str(v) for k, v in config.items()}


def encode_config_change(entity_type: str, entity: str) -> bytes:
    return _encode({"version": 2, "entity_path": f"{entity_type}/{entity}"})


def decode_config_change(path: str, data: bytes) -> tuple[str, str]:
    """(entity type, entity name) of a /config/changes notification."""
    obj = _decode(path, data)
    entity_path = obj.get("entity_path")
    if obj.get("version") == 1:  # Kafka 0.9: {"version":1,"entity_type":..,"entity_name":..}
        return str(obj.get("entity_type")), str(obj.get("entity_name"))
    if not isinstance(entity_path, str) or "/" not in entity_path:
        raise ZkDataError(path, "no entity_path", data)
    entity_type, _, entity = entity_path.partition("/")
    return entity_type, entity


def sequence_number(name: str, prefix: str) -> int:
    """The number of a sequential znode (`config_change_0000000042` -> 42)."""
    return int(name[len(prefix) :])


# --- /admin -------------------------------------------------------------------------------------------------


def delete_topic_path(topic: str) -> str:
    return f"{DELETE_TOPICS}/{topic}"


def _encode_partition_list(entries: Iterable[dict[str, Any]]) -> bytes:
    return _encode({"version": 1, "partitions": list(entries)})


def _decode_partition_list(path: str, data: bytes) -> list[dict[str, Any]]:
    obj = _decode(path, data)
    entries = obj.get("partitions")
    if not isinstance(entries, list):
        raise ZkDataError(path, "no partitions list", data)
    for e in entries:
        if (
            not isinstance(e, dict)
            or not isinstance(e.get("topic"), str)
            or not isinstance(e.get("partition"), int)
        ):
            raise ZkDataError(path, f"bad entry {e!r}", data)
    return entries


def encode_reassignment(reassignment: Mapping[tuple[str, int], Iterable[int]]) -> bytes:
    return _encode_partition_list(
        {"topic": t, "partition": p, "replicas": list(r)} for (t, p), r in sorted(reassignment.items())
    )


def decode_reassignment(data: bytes) -> dict[tuple[str, int], tuple[int, ...]]:
    entries = _decode_partition_list(REASSIGN_PARTITIONS, data)
    return {
        (e["topic"], e["partition"]): tuple(_int_list(REASSIGN_PARTITIONS, e.get("replicas"), "replicas"))
        for e in entries
    }


def encode_partition_set(partitions: Iterable[tuple[str, int]]) -> bytes:
    """/admin/preferred_replica_election and /isr_change_notification/isr_change_<seq>."""
    return _encode_partition_list({"topic": t, "partition": p} for t, p in sorted(set(partitions)))


def decode_partition_set(path: str, data: bytes) -> set[tuple[str, int]]:
    return {(e["topic"], e["partition"]) for e in _decode_partition_list(path, data)}


# --- /latest_producer_id_block ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProducerIdBlock:
    broker_id: int
    first: int
    size: int

    @property
    def last(self) -> int:
        return self.first + self.size - 1


def encode_producer_id_block(block: ProducerIdBlock) -> bytes:
    return _encode(
        {
            "version": 1,
            "broker": block.broker_id,
            "block_start": str(block.first),
            "block_end": str(block.last),
        }
    )


def decode_producer_id_block(data: bytes) -> ProducerIdBlock | None:
    """None when the znode is still empty (no block handed out yet)."""
    if not data:
        return None
    obj = _decode(PRODUCER_ID_BLOCK, data)
    try:
        first, last = int(obj["block_start"]), int(obj["block_end"])
        return ProducerIdBlock(int(obj["broker"]), first, last - first + 1)
    except (KeyError, TypeError, ValueError) as exc:
        raise ZkDataError(PRODUCER_ID_BLOCK, f"missing or bad field ({exc!r})", data) from None


def sorted_by_sequence(names: Iterable[str], prefix: str) -> list[str]:
    """The children of a sequential-notification parent, oldest first."""
    return sorted((n for n in names if n.startswith(prefix)), key=lambda n: sequence_number(n, prefix))
