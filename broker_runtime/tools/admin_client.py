"""A small synchronous Kafka admin client for the command-line tools: the Kafka protocol over plain sockets, with
requests and responses encoded by kio (`broker_runtime.protocol.client` frames them).

Why its own client rather than confluent-kafka: the tools ship with the broker, and the broker's dependencies
are small and pure-Python friendly (kio already speaks every API); confluent-kafka is a C library the broker
does not otherwise need, and its admin client lacks APIs the cluster tools need (partition reassignments,
OffsetDelete). Any Kafka API is one `request()` away here. It talks to Kafka 3.0 and later as well as to
Odradek: each API is sent at one version that every such broker serves (`VERSIONS`).

Errors the cluster reports raise `AdminError` carrying Kafka's error code; a closed or unreachable broker
raises `OSError`.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import socket
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kio.index import load_entity_module, load_request_schema
from kio.schema.consumer_protocol_assignment.v3.data import ConsumerProtocolAssignment
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader
from kio.static.constants import EntityType

from broker_runtime.protocol.apis import ApiKey
from broker_runtime.protocol.client import decode_response, encode_request, response_correlation_id

# The version of each API this client speaks: the newest that Kafka 3.0 and later and Odradek all serve.
VERSIONS = {
    ApiKey.API_VERSIONS: 3,
    ApiKey.METADATA: 11,
    ApiKey.FIND_COORDINATOR: 4,
    ApiKey.LIST_GROUPS: 4,
    ApiKey.DESCRIBE_GROUPS: 5,
    ApiKey.OFFSET_FETCH: 8,
    ApiKey.OFFSET_COMMIT: 8,
    ApiKey.LIST_OFFSETS: 7,
    ApiKey.DELETE_GROUPS: 2,
    ApiKey.OFFSET_DELETE: 0,
    ApiKey.CREATE_TOPICS: 7,
    ApiKey.DELETE_TOPICS: 6,
    ApiKey.CREATE_PARTITIONS: 3,
    ApiKey.DESCRIBE_CONFIGS: 4,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: 1,
    ApiKey.ELECT_LEADERS: 2,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: 0,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: 0,
}
TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
SET, DELETE = 0, 1  # IncrementalAlterConfigs operations
CONTROLLER_RETRIES = 5
GROUP_KEY_TYPE = 0
EARLIEST, LATEST = -2, -1
_SIZE = struct.Struct(">i")
_ASSIGNMENT_VERSION = struct.Struct(">h")
_read_assignment = entity_reader(ConsumerProtocolAssignment)


class AdminError(Exception):
    """An error the cluster answered: Kafka's error code, and its message when it sent one."""

    def __init__(self, error: ErrorCode, message: str | None = None) -> None:
        self.error = error
        self.message = message
        super().__init__(f"{error.name.upper()}" + (f": {message}" if message else ""))


@dataclass(frozen=True)
class Node:
    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: tuple[tuple[str, int], ...]  # (topic, partition) of a consumer; () for other protocol types


@dataclass(frozen=True)
class Group:
    group_id: str
    state: str  # Kafka's names: Stable, Empty, Dead, PreparingRebalance, CompletingRebalance
    protocol_type: str
    protocol: str  # the assignor of a consumer group
    coordinator: Node
    members: tuple[Member, ...]


class _Connection:
    """One request at a time on one socket."""

    def __init__(self, address: tuple[str, int], client_id: str, timeout_s: float) -> None:
        self.address = address
        self.sock = socket.create_connection(address, timeout=timeout_s)
        self.sock.settimeout(timeout_s)
        self.client_id = client_id
        self.versions: dict[int, tuple[int, int]] = {}  # what the broker serves (ApiVersions)
        self._correlation_id = 0

    def call(self, request: Any) -> Any:
        self._correlation_id += 1
        self.sock.sendall(encode_request(request, self._correlation_id, self.client_id))
        frame = self._exact(_SIZE.unpack(self._exact(4))[0])
        if response_correlation_id(frame) != self._correlation_id:
            raise OSError("the broker answered out of order")
        return decode_response(frame, int(request.__api_key__), int(request.__version__))

    def _exact(self, n: int) -> bytes:
        buf = io.BytesIO()
        while buf.tell() < n:
            chunk = self.sock.recv(n - buf.tell())
            if not chunk:
                raise OSError("the broker closed the connection")
            buf.write(chunk)
        return buf.getvalue()

    def close(self) -> None:
        self.sock.close()


def build_request(api_key: int, version: int, **values: Any) -> Any:
    """A request of one API version from field values, keeping the fields that version has; a nested value may be
    a callable taking the version's module (to build its nested classes)."""
    cls = load_request_schema(api_key, version)
    module = load_entity_module(_api_name(cls), version, EntityType.request)
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v(module) if callable(v) else v for k, v in values.items() if k in names})


def _api_name(cls: type) -> str:
    return cls.__module__.split(".")[-3]  # kio.schema.<api>.v<N>.request


def _check(error: ErrorCode, message: str | None = None) -> None:
    if error != ErrorCode.none:
        raise AdminError(error, message)


class AdminClient:
    def __init__(
        self, bootstrap_servers: str, *, client_id: str = "odradek-admin", timeout_ms: int = 30000
    ) -> None:
        self.bootstrap = [_host_port(a) for a in bootstrap_servers.split(",") if a.strip()]
        if not self.bootstrap:
            raise ValueError("no bootstrap server given")
        self.client_id = client_id
        self.timeout_s = timeout_ms / 1000
        self._connections: dict[tuple[str, int], _Connection] = {}

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for connection in self._connections.values():
            connection.close()
        self._connections.clear()

    # --- plumbing ---------------------------------------------------------------------------------------------

    def _connection(self, node: Node | None) -> _Connection:
        addresses = [(node.host, node.port)] if node is not None else self.bootstrap
        last: OSError | None = None
        for address in addresses:
            if address in self._connections:
                return self._connections[address]
            try:
                connection = _Connection(address, self.client_id, self.timeout_s)
            except OSError as exc:
                last = exc
                continue
            self._connections[address] = connection
            self._negotiate(connection)
            return connection
        raise OSError(f"cannot connect to {', '.join(f'{h}:{p}' for h, p in addresses)}: {last}")

    def _negotiate(self, connection: _Connection) -> None:
        response = connection.call(build_request(
            ApiKey.API_VERSIONS, VERSIONS[ApiKey.API_VERSIONS], client_software_name="odradek-admin",
            client_software_version="1",
        ))  # fmt: skip
        _check(response.error_code)
        connection.versions = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}

    def request(self, api_key: int, node: Node | None = None, **values: Any) -> Any:
        """Send one request at this client's version of `api_key` to `node` (any bootstrap broker by default)."""
        connection = self._connection(node)
        version = VERSIONS[api_key]
        low, high = connection.versions.get(api_key, (0, -1))
        if not low <= version <= high:
            raise AdminError(
                ErrorCode.unsupported_version,
                f"the broker serves {ApiKey(api_key).name} v{low}-{high}, this client speaks v{version}",
            )
        try:
            return connection.call(build_request(api_key, version, **values))
        except OSError:
            self._connections.pop(connection.address, None)
            connection.close()
            raise

    # --- the cluster ------------------------------------------------------------------------------------------

    def metadata(self, topics: Iterable[str] | None = None, node: Node | None = None) -> Any:
        """Brokers and topics (every topic with None), as `node` (any bootstrap broker by default) knows them;
        never creates a topic."""
        return self.request(
            ApiKey.METADATA,
            node,
            topics=None if topics is None else (
                lambda m: tuple(m.MetadataRequestTopic(name=t, topic_id=None) for t in topics)
            ),
            allow_auto_topic_creation=False, include_cluster_authorized_operations=False,
            include_topic_authorized_operations=False,
        )  # fmt: skip

    def nodes(self) -> list[Node]:
        return [Node(b.node_id, b.host, b.port, b.rack) for b in self.metadata(()).brokers]

    def topic_partitions(self, topic: str) -> list[int]:
        (described,) = self.metadata([topic]).topics
        _check(described.error_code, f"topic '{topic}'")
        return sorted(p.partition_index for p in described.partitions)

    def leaders(self, topics: Iterable[str]) -> dict[tuple[str, int], Node]:
        response = self.metadata(sorted(set(topics)))
        nodes = {b.node_id: Node(b.node_id, b.host, b.port, b.rack) for b in response.brokers}
        leaders = {}
        for t in response.topics:
            _check(t.error_code, f"topic '{t.name}'")
            for p in t.partitions:
                if p.leader_id not in nodes:
                    raise AdminError(
                        ErrorCode.leader_not_available, f"{t.name}-{p.partition_index} has no leader"
                    )
                leaders[(t.name, p.partition_index)] = nodes[p.leader_id]
        return leaders

    def list_offsets(
        self, partitions: Iterable[tuple[str, int]], timestamp: int
    ) -> dict[tuple[str, int], int]:
        """The offset of each partition for a timestamp (EARLIEST, LATEST or ms); -1 when no record matches."""
        partitions = list(partitions)
        by_leader: dict[Node, list[tuple[str, int]]] = {}
        leaders = self.leaders(t for t, _ in partitions)
        for tp in partitions:
            if tp not in leaders:
                raise AdminError(ErrorCode.unknown_topic_or_partition, f"{tp[0]}-{tp[1]}")
            by_leader.setdefault(leaders[tp], []).append(tp)
        out = {}
        for leader, tps in by_leader.items():
            topics = _by_topic(tps)
            response = self.request(
                ApiKey.LIST_OFFSETS, leader, replica_id=-1, isolation_level=0,
                topics=lambda m, topics=topics: tuple(
                    m.ListOffsetsTopic(name=t, partitions=tuple(
                        m.ListOffsetsPartition(partition_index=p, timestamp=timestamp) for p in ps))
                    for t, ps in topics.items()
                ),
            )  # fmt: skip
            for t in response.topics:
                for p in t.partitions:
                    _check(p.error_code, f"{t.name}-{p.partition_index}")
                    out[(t.name, p.partition_index)] = p.offset
        return out

    # --- groups -----------------------------------------------------------------------------------------------

    def coordinator(self, group_id: str) -> Node:
        response = self.request(
            ApiKey.FIND_COORDINATOR, key_type=GROUP_KEY_TYPE, coordinator_keys=(group_id,)
        )
        (found,) = response.coordinators
        _check(found.error_code, found.error_message)
        return Node(found.node_id, found.host, found.port)

    def list_groups(self, states: Iterable[str] = ()) -> list[tuple[str, str, str]]:
        """(group id, state, protocol type) of the groups of every broker, sorted."""
        out = set()
        for node in self.nodes():
            response = self.request(ApiKey.LIST_GROUPS, node, states_filter=tuple(states))
            _check(response.error_code)
            out |= {(g.group_id, g.group_state, g.protocol_type) for g in response.groups}
        return sorted(out)

    def describe_groups(self, group_ids: Iterable[str]) -> dict[str, Group]:
        out = {}
        for group_id in group_ids:
            coordinator = self.coordinator(group_id)
            response = self.request(ApiKey.DESCRIBE_GROUPS, coordinator, groups=(group_id,),
                                    include_authorized_operations=False)  # fmt: skip
            (g,) = response.groups
            _check(g.error_code, f"group '{group_id}'")
            members = tuple(
                Member(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                       _assigned(m.member_assignment) if g.protocol_type == "consumer" else ())
                for m in g.members
            )  # fmt: skip
            out[group_id] = Group(
                group_id, g.group_state, g.protocol_type, g.protocol_data, coordinator, members
            )
        return out

    def list_group_offsets(self, group_id: str) -> dict[tuple[str, int], int]:
        """The committed offset of every partition of the group."""
        response = self.request(
            ApiKey.OFFSET_FETCH,
            self.coordinator(group_id),
            require_stable=False,
            groups=lambda m: (m.OffsetFetchRequestGroup(group_id=group_id, topics=None),),
        )
        (g,) = response.groups
        _check(g.error_code, f"group '{group_id}'")
        return {
            (t.name, p.partition_index): p.committed_offset
            for t in g.topics
            for p in t.partitions
            if p.error_code == ErrorCode.none and p.committed_offset >= 0
        }

    def alter_group_offsets(
        self, group_id: str, offsets: Mapping[tuple[str, int], int]
    ) -> dict[tuple[str, int], ErrorCode]:
        """Commit offsets for a group with no active members (as Kafka's admin client does)."""
        topics: dict[str, list[tuple[int, int]]] = {}
        for (t, p), offset in offsets.items():
            topics.setdefault(t, []).append((p, offset))
        response = self.request(
            ApiKey.OFFSET_COMMIT, self.coordinator(group_id), group_id=group_id, generation_id_or_member_epoch=-1,
            member_id="", group_instance_id=None,
            topics=lambda m: tuple(
                m.OffsetCommitRequestTopic(name=t, partitions=tuple(
                    m.OffsetCommitRequestPartition(partition_index=p, committed_offset=o, committed_metadata="")
                    for p, o in ps))
                for t, ps in topics.items()
            ),
        )  # fmt: skip
        return {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}

    def delete_groups(self, group_ids: Iterable[str]) -> dict[str, ErrorCode]:
        out = {}
        for group_id in group_ids:
            response = self.request(
                ApiKey.DELETE_GROUPS, self.coordinator(group_id), groups_names=(group_id,)
            )
            out.update({r.group_id: r.error_code for r in response.results})
        return out

    def delete_group_offsets(
        self, group_id: str, partitions: Iterable[tuple[str, int]]
    ) -> tuple[ErrorCode, dict[tuple[str, int], ErrorCode]]:
        """OffsetDelete: (the group's error, the error of each partition)."""
        topics = _by_topic(partitions)
        response = self.request(
            ApiKey.OFFSET_DELETE, self.coordinator(group_id), group_id=group_id,
            topics=lambda m: tuple(
                m.OffsetDeleteRequestTopic(name=t, partitions=tuple(
                    m.OffsetDeleteRequestPartition(partition_index=p) for p in ps))
                for t, ps in topics.items()
            ),
        )  # fmt: skip
        results = {(t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions}
        return response.error_code, results

    # --- topics, configs and the controller's APIs (sent to the controller, as Kafka's admin client does) -----

    def controller(self) -> Node:
        response = self.metadata(())
        nodes = {b.node_id: Node(b.node_id, b.host, b.port, b.rack) for b in response.brokers}
        if response.controller_id not in nodes:
            raise AdminError(ErrorCode.not_controller, "the cluster has no controller right now")
        return nodes[response.controller_id]

    def _to_controller(self, api_key: int, error_of: Any, **values: Any) -> Any:
        """Send to the controller; when it moved meanwhile (NOT_CONTROLLER), ask again."""
        for _ in range(CONTROLLER_RETRIES):
            response = self.request(api_key, self.controller(), **values)
            if error_of(response) != ErrorCode.not_controller:
                return response
        raise AdminError(ErrorCode.not_controller, "the controller kept moving")

    def create_topic(
        self, name: str, partitions: int = -1, replication_factor: int = -1, configs: Mapping[str, str] = (),
        assignments: Mapping[int, list[int]] | None = None,
    ) -> None:  # fmt: skip
        configs = dict(configs)
        response = self._to_controller(
            ApiKey.CREATE_TOPICS, lambda r: r.topics[0].error_code, validate_only=False,
            timeout=_timedelta(self.timeout_s),
            topics=lambda m: (m.CreatableTopic(
                name=name, num_partitions=partitions, replication_factor=replication_factor,
                assignments=tuple(m.CreatableReplicaAssignment(partition_index=p, broker_ids=tuple(r))
                                  for p, r in sorted((assignments or {}).items())),
                configs=tuple(m.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()),
            ),),
        )  # fmt: skip
        (result,) = response.topics
        _check(result.error_code, result.error_message)

    def delete_topics(self, names: Iterable[str]) -> dict[str, tuple[ErrorCode, str | None]]:
        response = self._to_controller(
            ApiKey.DELETE_TOPICS, lambda r: r.responses[0].error_code if r.responses else ErrorCode.none,
            timeout=_timedelta(self.timeout_s),
            topics=lambda m: tuple(m.DeleteTopicState(name=n, topic_id=None) for n in names),
        )  # fmt: skip
        return {r.name: (r.error_code, r.error_message) for r in response.responses}

    def create_partitions(self, name: str, count: int, assignments: list[list[int]] | None = None) -> None:
        response = self._to_controller(
            ApiKey.CREATE_PARTITIONS, lambda r: r.results[0].error_code, validate_only=False,
            timeout=_timedelta(self.timeout_s),
            topics=lambda m: (m.CreatePartitionsTopic(
                name=name, count=count,
                assignments=None if assignments is None else tuple(
                    m.CreatePartitionsAssignment(broker_ids=tuple(r)) for r in assignments),
            ),),
        )  # fmt: skip
        (result,) = response.results
        _check(result.error_code, result.error_message)

    def describe_configs(
        self, resource_type: int, names: Iterable[str], node: Node | None = None
    ) -> dict[str, Any]:
        """Every config of each resource: {name: [entries with name, value, config_source, read_only, ...]}."""
        response = self.request(
            ApiKey.DESCRIBE_CONFIGS, node, include_synonyms=False, include_documentation=False,
            resources=lambda m: tuple(m.DescribeConfigsResource(resource_type=resource_type, resource_name=n,
                                                                configuration_keys=None) for n in names),
        )  # fmt: skip
        out = {}
        for r in response.results:
            _check(r.error_code, r.error_message)
            out[r.resource_name] = list(r.configs)
        return out

    def alter_configs(
        self, resource_type: int, name: str, set_configs: Mapping[str, str] = (), delete: Iterable[str] = (),
        node: Node | None = None,
    ) -> None:  # fmt: skip
        """IncrementalAlterConfigs (a broker's own configs go to that broker: pass its node)."""
        set_configs = dict(set_configs)
        response = self.request(
            ApiKey.INCREMENTAL_ALTER_CONFIGS, node, validate_only=False,
            resources=lambda m: (m.AlterConfigsResource(
                resource_type=resource_type, resource_name=name,
                configs=tuple(m.AlterableConfig(name=k, config_operation=SET, value=v) for k, v in set_configs.items())
                + tuple(m.AlterableConfig(name=k, config_operation=DELETE, value=None) for k in delete),
            ),),
        )  # fmt: skip
        for r in response.responses:
            _check(r.error_code, r.error_message)

    def elect_leaders(
        self, election_type: int, partitions: Iterable[tuple[str, int]] | None
    ) -> dict[tuple[str, int], tuple[ErrorCode, str | None]]:
        topics = None if partitions is None else _by_topic(partitions)
        response = self._to_controller(
            ApiKey.ELECT_LEADERS, lambda r: r.error_code, election_type=election_type,
            timeout=_timedelta(self.timeout_s),
            topic_partitions=None if topics is None else (
                lambda m: tuple(m.TopicPartitions(topic=t, partitions=tuple(ps)) for t, ps in topics.items())
            ),
        )  # fmt: skip
        _check(response.error_code)
        return {
            (r.topic, p.partition_id): (p.error_code, p.error_message)
            for r in response.replica_election_results
            for p in r.partition_result
        }

    def alter_partition_reassignments(
        self, reassignments: Mapping[tuple[str, int], list[int] | None]
    ) -> dict[tuple[str, int], tuple[ErrorCode, str | None]]:
        topics: dict[str, list[tuple[int, list[int] | None]]] = {}
        for (t, p), replicas in reassignments.items():
            topics.setdefault(t, []).append((p, replicas))
        response = self._to_controller(
            ApiKey.ALTER_PARTITION_REASSIGNMENTS, lambda r: r.error_code, timeout=_timedelta(self.timeout_s),
            topics=lambda m: tuple(
                m.ReassignableTopic(name=t, partitions=tuple(
                    m.ReassignablePartition(partition_index=p, replicas=None if r is None else tuple(r))
                    for p, r in ps))
                for t, ps in topics.items()
            ),
        )  # fmt: skip
        _check(response.error_code, response.error_message)
        return {
            (t.name, p.partition_index): (p.error_code, p.error_message)
            for t in response.responses
            for p in t.partitions
        }

    def list_partition_reassignments(
        self, partitions: Iterable[tuple[str, int]] | None = None
    ) -> dict[tuple[str, int], tuple[list[int], list[int], list[int]]]:
        """(replicas, adding, removing) of every partition being reassigned (of those given)."""
        topics = None if partitions is None else _by_topic(partitions)
        response = self._to_controller(
            ApiKey.LIST_PARTITION_REASSIGNMENTS, lambda r: r.error_code, timeout=_timedelta(self.timeout_s),
            topics=None if topics is None else (lambda m: tuple(
                m.ListPartitionReassignmentsTopics(name=t, partition_indexes=tuple(ps)) for t, ps in topics.items()
            )),
        )  # fmt: skip
        _check(response.error_code, response.error_message)
        return {
            (t.name, p.partition_index): (
                list(p.replicas),
                list(p.adding_replicas),
                list(p.removing_replicas),
            )
            for t in response.topics
            for p in t.partitions
        }


def _timedelta(seconds: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=seconds)


def load_properties(path: str | None) -> dict[str, str]:
    """A --command-config file: Java .properties (key=value or key: value; # and ! comments)."""
    out: dict[str, str] = {}
    if not path:
        return out
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith(("#", "!")) and ("=" in line or ":" in line):
                key, _, value = line.partition("=") if "=" in line else line.partition(":")
                out[key.strip()] = value.strip()
    return out


def _by_topic(partitions: Iterable[tuple[str, int]]) -> dict[str, list[int]]:
    topics: dict[str, list[int]] = {}
    for t, p in partitions:
        topics.setdefault(t, []).append(p)
    return topics


def _assigned(assignment: bytes | None) -> tuple[tuple[str, int], ...]:
    """The partitions of a consumer's assignment (Kafka's ConsumerProtocol; newer versions read as the newest
    known, as Kafka does)."""
    if not assignment:
        return ()
    data = bytes(assignment)
    result = _read_assignment(data, _ASSIGNMENT_VERSION.size)
    decoded = result[0] if isinstance(result, tuple) else result
    return tuple(sorted((tp.topic, p) for tp in decoded.assigned_partitions for p in tp.partitions))


def _host_port(address: str) -> tuple[str, int]:
    host, _, port = address.strip().rpartition(":")
    if not port.isdigit():
        raise ValueError(f"'{address}' is not host:port")
    return host.strip("[]") or "127.0.0.1", int(port)
