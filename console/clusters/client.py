"""The console's only way to a cluster: Kafka's admin protocol through real clients.

confluent-kafka (librdkafka) does almost everything; kafka-python adds DescribeLogDirs, which librdkafka's
admin API lacks. The console never imports the broker's code: any Kafka-compatible cluster works.

One `ClusterClient` per cluster and process (`client_for`), shared by threads: librdkafka's clients are
thread-safe. Metadata is cached for a couple of seconds so that a page rendering several fragments asks once;
every write through this client drops the cache.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ResourceType,
)
from django.conf import settings

from console.errors import Conflict, ConsoleError, Invalid, NotFound, Unavailable

METADATA_MAX_AGE_S = 2.0

_NOT_FOUND = {
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError.GROUP_ID_NOT_FOUND,
    KafkaError._UNKNOWN_TOPIC,
    KafkaError._UNKNOWN_PARTITION,
}
_CONFLICT = {KafkaError.TOPIC_ALREADY_EXISTS, KafkaError.NON_EMPTY_GROUP, KafkaError.REBALANCE_IN_PROGRESS}
_INVALID = {
    KafkaError.TOPIC_EXCEPTION,
    KafkaError.INVALID_PARTITIONS,
    KafkaError.INVALID_REPLICATION_FACTOR,
    KafkaError.INVALID_REPLICA_ASSIGNMENT,
    KafkaError.INVALID_CONFIG,
    KafkaError.INVALID_REQUEST,
    KafkaError.POLICY_VIOLATION,
    KafkaError.OFFSET_OUT_OF_RANGE,
    KafkaError.INVALID_GROUP_ID,
    KafkaError.MSG_SIZE_TOO_LARGE,
    KafkaError.RECORD_LIST_TOO_LARGE,
    KafkaError.INVALID_RECORD,
    KafkaError._INVALID_ARG,
}
_UNAVAILABLE = {
    KafkaError._TIMED_OUT,
    KafkaError._TRANSPORT,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError._RESOLVE,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.NOT_COORDINATOR,
    KafkaError._WAIT_COORD,
    KafkaError.NOT_CONTROLLER,
}


#: Which input of a topic creation a broker's refusal is about.
_CREATE_TOPIC_FIELDS = {
    KafkaError.TOPIC_EXCEPTION: "name",
    KafkaError.INVALID_PARTITIONS: "partitions",
    KafkaError.INVALID_REPLICATION_FACTOR: "replication_factor",
    KafkaError.INVALID_REPLICA_ASSIGNMENT: "replication_factor",
    KafkaError.INVALID_CONFIG: "configs",
    KafkaError.POLICY_VIOLATION: "configs",
}


def translate(exc: BaseException, *, what: str = "", field: str | None = None) -> ConsoleError:
    """A console error for a client exception: not found, conflict, invalid input, or cluster unavailable."""
    if isinstance(exc, ConsoleError):
        return exc
    error = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
    if isinstance(error, KafkaError):
        code, text = error.code(), error.str()
        message = f"{what}: {text}" if what else text
        if code in _NOT_FOUND:
            return NotFound(message)
        if code in _CONFLICT:
            return Conflict(message)
        if code in _INVALID:
            return Invalid(message, field=field)
        if code in _UNAVAILABLE:
            return Unavailable(message)
        return ConsoleError(message)
    if isinstance(exc, TimeoutError):
        return Unavailable(f"{what}: the cluster did not answer in time" if what else "timed out")
    return ConsoleError(f"{what}: {exc}" if what else str(exc))


# ----------------------------------------------------------------------------------------------------------
# plain data the pages and the API render


@dataclass(frozen=True)
class PartitionInfo:
    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)

    @property
    def offline(self) -> bool:
        return self.leader < 0


@dataclass(frozen=True)
class TopicInfo:
    name: str
    partitions: tuple[PartitionInfo, ...]

    @property
    def internal(self) -> bool:
        return self.name.startswith("__")

    @property
    def replication_factor(self) -> int:
        return max((len(p.replicas) for p in self.partitions), default=0)

    @property
    def under_replicated(self) -> int:
        return sum(p.under_replicated for p in self.partitions)

    @property
    def offline(self) -> int:
        return sum(p.offline for p in self.partitions)


@dataclass(frozen=True)
class BrokerInfo:
    id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True)
class Metadata:
    cluster_id: str | None
    controller_id: int
    brokers: tuple[BrokerInfo, ...]
    topics: dict[str, TopicInfo]
    fetched_at: float = field(default_factory=time.monotonic)

    def topic(self, name: str) -> TopicInfo:
        try:
            return self.topics[name]
        except KeyError:
            raise NotFound(f"topic {name!r} does not exist") from None

    def partitions(self) -> Iterable[PartitionInfo]:
        for topic in self.topics.values():
            yield from topic.partitions


@dataclass(frozen=True)
class ConfigRow:
    name: str
    value: str | None
    source: str
    is_default: bool
    is_read_only: bool
    is_sensitive: bool
    synonyms: tuple[tuple[str, str | None, str], ...] = ()

    @property
    def is_dynamic(self) -> bool:
        return self.source in (
            "DYNAMIC_TOPIC_CONFIG",
            "DYNAMIC_BROKER_CONFIG",
            "DYNAMIC_DEFAULT_BROKER_CONFIG",
        )


@dataclass(frozen=True)
class GroupListing:
    group_id: str
    state: str
    is_simple: bool


@dataclass(frozen=True)
class MemberInfo:
    member_id: str
    client_id: str
    host: str
    group_instance_id: str | None
    assignment: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    state: str
    protocol: str
    coordinator: int | None
    members: tuple[MemberInfo, ...]

    @property
    def active(self) -> bool:
        return bool(self.members) or self.state not in ("EMPTY", "DEAD", "UNKNOWN")


def _config_rows(entries: dict[str, ConfigEntry]) -> list[ConfigRow]:
    rows = []
    for entry in entries.values():
        synonyms = tuple((s.name, s.value, _source_name(s.source)) for s in (entry.synonyms or {}).values())
        rows.append(
            ConfigRow(
                name=entry.name,
                value=None if entry.is_sensitive else entry.value,
                source=_source_name(entry.source),
                is_default=bool(entry.is_default),
                is_read_only=bool(entry.is_read_only),
                is_sensitive=bool(entry.is_sensitive),
                synonyms=synonyms,
            )
        )
    return sorted(rows, key=lambda r: r.name)


def _source_name(source: Any) -> str:
    """librdkafka hands the config source as an int or as the enum."""
    try:
        return ConfigSource(int(getattr(source, "value", source))).name
    except (ValueError, TypeError):
        return str(source)


# ----------------------------------------------------------------------------------------------------------


class ClusterClient:
    def __init__(self, bootstrap_servers: str, *, timeout_s: float | None = None) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.timeout_s = timeout_s if timeout_s is not None else settings.CONSOLE_KAFKA_TIMEOUT_S
        self._base = {
            "bootstrap.servers": bootstrap_servers,
            "client.id": "odradek-console",
            "socket.timeout.ms": int(self.timeout_s * 1000),
            "log_level": 3,
        }
        self.admin = AdminClient(dict(self._base))
        self._lock = threading.Lock()
        self._metadata: Metadata | None = None
        self._producer: Producer | None = None
        self._log_dirs_admin: Any = None
        #: Each broker's rack as DescribeCluster last said (Metadata through librdkafka does not carry it).
        self.known_racks: dict[int, str | None] = {}

    def _result(self, future: Future, *, what: str, timeout: float, field: str | None = None) -> Any:
        try:
            return future.result(timeout=timeout)
        except Exception as exc:
            raise self._translate(exc, what=what, field=field, timeout=timeout) from exc

    def _translate(self, exc: BaseException, *, what: str, field: str | None, timeout: float) -> ConsoleError:
        """`translate`; after a failed wait for the controller, first ask for Metadata again. librdkafka keeps the
        controller a Metadata answer named and waits for that broker to come back, asking again only every
        topic.metadata.refresh.interval.ms (5 min): an answer given just after the controller's broker stopped,
        before the new controller had told every broker, names the stopped one. The caller's next attempt (it
        retries an Unavailable) then reaches the new controller."""
        if "waiting for controller" in str(exc):
            with contextlib.suppress(Exception):
                self.admin.list_topics(timeout=min(timeout, 5.0))
            self.invalidate()
        return translate(exc, what=what, field=field)

    # -- metadata

    def metadata(self, *, max_age_s: float = METADATA_MAX_AGE_S) -> Metadata:
        cached = self._metadata
        if cached is not None and time.monotonic() - cached.fetched_at < max_age_s:
            return cached
        try:
            md = self.admin.list_topics(timeout=self.timeout_s)
        except Exception as exc:
            raise translate(exc, what="reading cluster metadata") from exc
        topics = {}
        for name, tm in md.topics.items():
            parts = tuple(
                PartitionInfo(name, pm.id, pm.leader, tuple(pm.replicas), tuple(pm.isrs))
                for pm in sorted(tm.partitions.values(), key=lambda p: p.id)
            )
            topics[name] = TopicInfo(name, parts)
        brokers = tuple(
            BrokerInfo(b.id, b.host, b.port) for b in sorted(md.brokers.values(), key=lambda b: b.id)
        )
        self._metadata = Metadata(md.cluster_id, md.controller_id, brokers, topics)
        return self._metadata

    def topic(self, name: str) -> TopicInfo:
        """The topic from the cached metadata, fetched afresh once if the cache does not know it: a topic just
        created elsewhere (another client, another console process) is found rather than answered 404."""
        cached = self.metadata()
        if name in cached.topics:
            return cached.topics[name]
        return self.metadata(max_age_s=0).topic(name)

    def invalidate(self) -> None:
        self._metadata = None

    def describe_cluster(
        self, *, timeout_s: float | None = None
    ) -> tuple[str | None, int | None, list[BrokerInfo]]:
        """(cluster id, controller id, live brokers with their racks). `timeout_s` bounds the wait below the
        client's timeout, for pages that can do with Metadata while the controller is being replaced."""
        wait_s = timeout_s or self.timeout_s
        result = self._result(
            self.admin.describe_cluster(request_timeout=wait_s),
            what="describing the cluster",
            timeout=wait_s + (0.2 if timeout_s else 1),
        )
        brokers = [BrokerInfo(n.id, n.host, n.port, n.rack) for n in sorted(result.nodes, key=lambda n: n.id)]
        self.known_racks.update({b.id: b.rack for b in brokers})
        controller = result.controller.id if result.controller is not None else None
        return result.cluster_id, controller, brokers

    # -- configs

    def _describe_configs(self, resource: ConfigResource, what: str) -> list[ConfigRow]:
        futures = self.admin.describe_configs([resource], request_timeout=self.timeout_s)
        entries = self._result(next(iter(futures.values())), what=what, timeout=self.timeout_s + 1)
        return _config_rows(entries)

    def topic_configs(self, topic: str) -> list[ConfigRow]:
        self.topic(topic)
        return self._describe_configs(
            ConfigResource(ResourceType.TOPIC, topic), f"configs of topic {topic!r}"
        )

    def topic_configs_many(self, topics: list[str]) -> dict[str, dict[str, str | None]]:
        """{topic: {name: value}} for several topics in one request (for the overview's min-ISR check)."""
        if not topics:
            return {}
        futures = self.admin.describe_configs(
            [ConfigResource(ResourceType.TOPIC, t) for t in topics], request_timeout=self.timeout_s
        )
        out = {}
        for resource, future in futures.items():
            entries = self._result(future, what="topic configs", timeout=self.timeout_s + 1)
            out[resource.name] = {e.name: e.value for e in entries.values()}
        return out

    def broker_configs(self, broker_id: int) -> list[ConfigRow]:
        if broker_id not in {b.id for b in self.metadata().brokers}:
            raise NotFound(f"broker {broker_id} is not in the cluster")
        return self._describe_configs(
            ConfigResource(ResourceType.BROKER, str(broker_id)), f"configs of broker {broker_id}"
        )

    def alter_configs(self, resource_type: str, name: str, changes: dict[str, str | None]) -> None:
        """Incremental alter: a value sets the key, None deletes it (back to the default)."""
        kind = {"topic": ResourceType.TOPIC, "broker": ResourceType.BROKER}[resource_type]
        entries = [
            ConfigEntry(
                key,
                value,
                incremental_operation=AlterConfigOpType.DELETE if value is None else AlterConfigOpType.SET,
            )
            for key, value in changes.items()
        ]
        resource = ConfigResource(kind, name, incremental_configs=entries)
        futures = self.admin.incremental_alter_configs([resource], request_timeout=self.timeout_s)
        self._result(
            next(iter(futures.values())),
            what=f"altering {resource_type} {name}",
            timeout=self.timeout_s + 1,
            field="configs",
        )
        self.invalidate()

    # -- topics

    def create_topic(
        self,
        name: str,
        partitions: int,
        replication_factor: int,
        configs: dict[str, str],
        *,
        validate_only: bool,
    ) -> None:
        futures = self.admin.create_topics(
            [NewTopic(name, partitions, replication_factor, config=configs)],
            validate_only=validate_only,
            request_timeout=self.timeout_s,
            operation_timeout=self.timeout_s if not validate_only else 0,
        )
        try:
            futures[name].result(timeout=self.timeout_s + 1)
        except Exception as exc:
            error = exc.args[0] if isinstance(exc, KafkaException) and exc.args else None
            field = _CREATE_TOPIC_FIELDS.get(error.code()) if isinstance(error, KafkaError) else None
            raise self._translate(exc, what=f"topic {name!r}", field=field, timeout=self.timeout_s) from exc
        self.invalidate()

    def delete_topic(self, name: str) -> None:
        futures = self.admin.delete_topics(
            [name], request_timeout=self.timeout_s, operation_timeout=self.timeout_s
        )
        self._result(futures[name], what=f"deleting topic {name!r}", timeout=self.timeout_s + 1)
        self.invalidate()

    def create_partitions(self, name: str, total: int) -> None:
        futures = self.admin.create_partitions(
            [NewPartitions(name, total)], request_timeout=self.timeout_s, operation_timeout=self.timeout_s
        )
        self._result(
            futures[name], what=f"adding partitions to {name!r}", timeout=self.timeout_s + 1, field="count"
        )
        self.invalidate()

    def delete_records(self, name: str, before: dict[int, int]) -> dict[int, int]:
        """Delete records before the given offsets ({partition: offset}; -1 = the high watermark).

        Returns the new low watermark per partition."""
        futures = self.admin.delete_records(
            [TopicPartition(name, p, o) for p, o in before.items()], request_timeout=self.timeout_s
        )
        out = {}
        for tp, future in futures.items():
            deleted = self._result(
                future, what=f"deleting records of {name}-{tp.partition}", timeout=self.timeout_s + 1
            )
            out[tp.partition] = deleted.low_watermark
        return out

    def offsets(
        self, partitions: Iterable[tuple[str, int]], spec: str | int, *, read_committed: bool = False
    ) -> dict[tuple[str, int], int]:
        """Offsets per (topic, partition): spec "earliest", "latest", or a timestamp in ms (the first offset at
        or after it; -1 where there is none). `read_committed`: "latest" is the last stable offset."""
        if spec == "earliest":
            offset_spec = OffsetSpec.earliest()
        elif spec == "latest":
            offset_spec = OffsetSpec.latest()
        else:
            offset_spec = OffsetSpec.for_timestamp(int(spec))
        request = {TopicPartition(t, p): offset_spec for t, p in partitions}
        if not request:
            return {}
        isolation = IsolationLevel.READ_COMMITTED if read_committed else IsolationLevel.READ_UNCOMMITTED
        futures = self.admin.list_offsets(request, isolation_level=isolation, request_timeout=self.timeout_s)
        return {
            (tp.topic, tp.partition): self._result(
                f, what="listing offsets", timeout=self.timeout_s + 1
            ).offset
            for tp, f in futures.items()
        }

    def _kafka_python_admin(self) -> Any:
        """kafka-python's admin client, for what librdkafka's lacks (log dirs, reassignments, elections)."""
        from kafka.admin import KafkaAdminClient

        with self._lock:
            if self._log_dirs_admin is None:
                try:
                    self._log_dirs_admin = KafkaAdminClient(
                        bootstrap_servers=self.bootstrap_servers.split(","),
                        client_id="odradek-console",
                        request_timeout_ms=int(self.timeout_s * 1000),
                    )
                except Exception as exc:
                    raise Unavailable(f"connecting the admin client: {exc}") from exc
            return self._log_dirs_admin

    def _drop_kafka_python_admin(self) -> None:
        """After a failed call: kafka-python keeps the controller id it first found, so once the controller's
        broker is gone only a new client finds the new controller."""
        with self._lock:
            admin, self._log_dirs_admin = self._log_dirs_admin, None
        if admin is not None:
            with contextlib.suppress(Exception):
                admin.close()

    def replica_sizes(self, topics: list[str] | None = None) -> dict[tuple[int, str, int], int]:
        """Bytes of each replica: {(broker, topic, partition): size}, from every broker's DescribeLogDirs."""
        try:
            answers = self._kafka_python_admin().describe_log_dirs(topic_partitions=topics)
        except ConsoleError:
            raise
        except Exception as exc:
            self._drop_kafka_python_admin()
            raise Unavailable(f"describing log dirs: {exc}") from exc
        sizes: dict[tuple[int, str, int], int] = {}
        for answer in answers:
            broker = int(answer["broker"])
            for log_dir in answer["log_dirs"]:
                for topic in log_dir["topics"]:
                    for part in topic["partitions"]:
                        key = (broker, topic["name"], int(part["partition_index"]))
                        sizes[key] = sizes.get(key, 0) + int(part["partition_size"])
        return sizes

    def log_dir_sizes(
        self, topics: list[str] | None = None
    ) -> tuple[dict[int, dict], dict[tuple[str, int], int]]:
        """(per broker {log_dir: {"bytes": n, "error": code}}, per (topic, partition) the largest replica size).

        Through kafka-python's DescribeLogDirs (librdkafka has no admin call for it)."""
        try:
            answers = self._kafka_python_admin().describe_log_dirs(topic_partitions=topics)
        except ConsoleError:
            raise
        except Exception as exc:
            self._drop_kafka_python_admin()
            raise Unavailable(f"describing log dirs: {exc}") from exc
        per_broker: dict[int, dict] = {}
        per_partition: dict[tuple[str, int], int] = {}
        for answer in answers:
            dirs = per_broker.setdefault(int(answer["broker"]), {})
            for log_dir in answer["log_dirs"]:
                total = 0
                for topic in log_dir["topics"]:
                    for part in topic["partitions"]:
                        size = int(part["partition_size"])
                        total += size
                        key = (topic["name"], int(part["partition_index"]))
                        per_partition[key] = max(per_partition.get(key, 0), size)
                dirs[log_dir["log_dir"]] = {"bytes": total, "error": int(log_dir["error_code"])}
        return per_broker, per_partition

    # -- reassignments and elections (Kafka's AlterPartitionReassignments, ListPartitionReassignments and
    #    ElectLeaders, sent to the controller)

    def reassign(self, targets: dict[tuple[str, int], list[int] | None]) -> dict[tuple[str, int], str]:
        """Start (a replica list) or cancel (None) reassignments; {(topic, partition): error} for refusals."""
        from kafka import TopicPartition as KafkaTopicPartition

        request = {KafkaTopicPartition(t, p): replicas for (t, p), replicas in targets.items()}
        try:
            answers = self._kafka_python_admin().alter_partition_reassignments(
                request, timeout_ms=int(self.timeout_s * 1000)
            )
        except ConsoleError:
            raise
        except Exception as exc:
            self._drop_kafka_python_admin()
            raise Unavailable(f"reassigning partitions: {exc}") from exc
        self.invalidate()
        return {
            (tp.topic, tp.partition): error.__name__ for tp, error in answers.items() if error is not None
        }

    def ongoing_reassignments(
        self, partitions: list[tuple[str, int]] | None = None
    ) -> dict[tuple[str, int], dict[str, list[int]]]:
        from kafka import TopicPartition as KafkaTopicPartition

        request = None if partitions is None else [KafkaTopicPartition(t, p) for t, p in partitions]
        try:
            answers = self._kafka_python_admin().list_partition_reassignments(
                request, timeout_ms=int(self.timeout_s * 1000)
            )
        except ConsoleError:
            raise
        except Exception as exc:
            self._drop_kafka_python_admin()
            raise Unavailable(f"listing reassignments: {exc}") from exc
        return {(tp.topic, tp.partition): value for tp, value in answers.items()}

    def elect_preferred_leaders(self, partitions: list[tuple[str, int]] | None) -> dict[tuple[str, int], str]:
        """Preferred-replica election; {(topic, partition): error name} for the partitions that failed
        (ELECTION_NOT_NEEDED, the preferred replica already leads, is not a failure)."""
        topics: dict[str, list[int]] | None = None
        if partitions is not None:
            topics = {}
            for t, p in partitions:
                topics.setdefault(t, []).append(p)
        try:
            response = self._kafka_python_admin().elect_leaders(
                0, topics, timeout_ms=int(self.timeout_s * 1000), raise_errors=False
            )
        except ConsoleError:
            raise
        except Exception as exc:
            self._drop_kafka_python_admin()
            raise Unavailable(f"electing leaders: {exc}") from exc
        from kafka.errors import for_code

        failed = {}
        for result in response.replica_election_results:
            for part in result.partition_result:
                if part.error_code not in (0, 84):  # 84: ELECTION_NOT_NEEDED
                    failed[(result.topic, part.partition_id)] = for_code(part.error_code).__name__
        self.invalidate()
        return failed

    # -- groups

    def list_groups(self) -> list[GroupListing]:
        result = self._result(
            self.admin.list_consumer_groups(request_timeout=self.timeout_s),
            what="listing consumer groups",
            timeout=self.timeout_s + 1,
        )
        return [
            GroupListing(g.group_id, getattr(g.state, "name", str(g.state)), bool(g.is_simple_consumer_group))
            for g in result.valid
        ]

    def describe_groups(self, group_ids: list[str]) -> dict[str, GroupDescription]:
        if not group_ids:
            return {}
        futures = self.admin.describe_consumer_groups(group_ids, request_timeout=self.timeout_s)
        out = {}
        for group_id, future in futures.items():
            d = self._result(future, what=f"describing group {group_id!r}", timeout=self.timeout_s + 1)
            members = tuple(
                MemberInfo(
                    m.member_id,
                    m.client_id,
                    m.host,
                    m.group_instance_id,
                    tuple(
                        sorted(
                            (tp.topic, tp.partition)
                            for tp in (m.assignment.topic_partitions if m.assignment else [])
                        )
                    ),
                )
                for m in d.members
            )
            state = getattr(d.state, "name", str(d.state))
            out[group_id] = GroupDescription(
                group_id,
                state,
                d.partition_assignor or "",
                d.coordinator.id if d.coordinator else None,
                members,
            )
        return out

    def committed_offsets(self, group_ids: list[str]) -> dict[str, dict[tuple[str, int], int]]:
        """{group: {(topic, partition): committed offset}}; one request per group, all in flight at once."""
        futures = {}
        for group_id in group_ids:
            futures.update(
                self.admin.list_consumer_group_offsets(
                    [ConsumerGroupTopicPartitions(group_id)], request_timeout=self.timeout_s
                )
            )
        out = {}
        for group_id, future in futures.items():
            res = self._result(future, what=f"offsets of group {group_id!r}", timeout=self.timeout_s + 1)
            out[group_id] = {
                (tp.topic, tp.partition): tp.offset for tp in res.topic_partitions if tp.offset >= 0
            }
        return out

    def alter_group_offsets(self, group_id: str, offsets: dict[tuple[str, int], int]) -> None:
        request = ConsumerGroupTopicPartitions(
            group_id, [TopicPartition(t, p, o) for (t, p), o in sorted(offsets.items())]
        )
        futures = self.admin.alter_consumer_group_offsets([request], request_timeout=self.timeout_s)
        res = self._result(
            futures[group_id], what=f"resetting offsets of {group_id!r}", timeout=self.timeout_s + 1
        )
        failed = [tp for tp in res.topic_partitions if tp.error is not None]
        if failed:
            raise translate(
                KafkaException(failed[0].error), what=f"resetting {failed[0].topic}-{failed[0].partition}"
            )

    def delete_group(self, group_id: str) -> None:
        futures = self.admin.delete_consumer_groups([group_id], request_timeout=self.timeout_s)
        self._result(futures[group_id], what=f"deleting group {group_id!r}", timeout=self.timeout_s + 1)

    # -- producing

    def producer(self) -> Producer:
        with self._lock:
            if self._producer is None:
                self._producer = Producer(
                    {**self._base, "client.id": "odradek-console-producer", "linger.ms": 0, "acks": "all"}
                )
            return self._producer

    def consumer_config(self) -> dict[str, Any]:
        """For a short-lived browsing consumer: no group membership, no commits."""
        return {
            **self._base,
            "client.id": "odradek-console-browser",
            "group.id": f"odradek-console-browser-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 100,
            "fetch.queue.backoff.ms": 10,
            "queued.max.messages.kbytes": 8192,
        }

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(1)
        if self._log_dirs_admin is not None:
            self._log_dirs_admin.close()


_clients: dict[tuple[int, str], ClusterClient] = {}
_clients_lock = threading.Lock()


def client_for(cluster: Any) -> ClusterClient:
    """The process's client for a cluster (a `Cluster` row); a new one if its bootstrap address changed."""
    key = (cluster.pk, cluster.bootstrap_servers)
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = ClusterClient(cluster.bootstrap_servers)
        return client


def forget(cluster: Any) -> None:
    """Close and drop the process's client of a cluster (deleted, or its address changed)."""
    with _clients_lock:
        stale = [key for key in _clients if key[0] == cluster.pk]
        clients = [_clients.pop(key) for key in stale]
    for client in clients:
        client.close()


def close_all() -> None:
    """Close every client of this process (tests, and processes that shut down cleanly)."""
    with _clients_lock:
        clients = list(_clients.values())
        _clients.clear()
    for client in clients:
        client.close()
