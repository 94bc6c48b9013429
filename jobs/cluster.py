"""Cluster facts the jobs plan with, asked over the Kafka protocol: topics, offsets, configs, log-dir sizes.

Everything here runs on the Spark driver (or in a report's own process), never per record. confluent-kafka's
AdminClient answers Metadata, ListOffsets and DescribeConfigs; it has no DescribeLogDirs, so that one request
goes through kio's message types on a plain socket to each broker.
"""

from __future__ import annotations

import itertools
import socket
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, OffsetSpec

TopicPartitionKey = tuple[str, int]

DEFAULT_TIMEOUT_S = 30.0


class ClusterError(Exception):
    """The cluster could not answer (unreachable, unknown topic, a Kafka error); the message says which."""


def client_config(bootstrap_servers: str) -> dict[str, str]:
    return {"bootstrap.servers": bootstrap_servers, "client.id": "odradek-jobs"}


@dataclass(frozen=True)
class PartitionInfo:
    topic: str
    partition: int
    leader: int
    replicas: tuple[int, ...]


class ClusterClient:
    """Driver-side questions to one cluster. ``config`` is librdkafka configuration (bootstrap.servers, ...)."""

    def __init__(self, config: Mapping[str, str], timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self.config = dict(config)
        self.timeout_s = timeout_s
        self._admin = AdminClient(self.config)

    # -- metadata

    def partitions(self, include_internal: bool = True) -> dict[str, list[PartitionInfo]]:
        """Every topic's partitions (sorted), from a Metadata request."""
        try:
            md = self._admin.list_topics(timeout=self.timeout_s)
        except KafkaException as exc:
            raise ClusterError(
                f"cannot read metadata from {self.config['bootstrap.servers']}: {exc}"
            ) from exc
        out: dict[str, list[PartitionInfo]] = {}
        for name, topic in md.topics.items():
            if topic.error is not None or (not include_internal and name.startswith("__")):
                continue
            out[name] = [
                PartitionInfo(name, p.id, p.leader, tuple(p.replicas))
                for p in sorted(topic.partitions.values(), key=lambda p: p.id)
            ]
        return dict(sorted(out.items()))

    def brokers(self) -> dict[int, tuple[str, int]]:
        md = self._admin.list_topics(timeout=self.timeout_s)
        return {b.id: (b.host, b.port) for b in md.brokers.values()}

    # -- offsets

    def list_offsets(
        self, specs: Mapping[TopicPartitionKey, OffsetSpec]
    ) -> dict[TopicPartitionKey, tuple[int, int]]:
        """ListOffsets for many partitions in one call: {(topic, partition): (offset, timestamp)}.

        The offset is -1 where the broker has none (a timestamp later than every record)."""
        if not specs:
            return {}
        futures = self._admin.list_offsets(
            {TopicPartition(t, p): spec for (t, p), spec in specs.items()}, request_timeout=self.timeout_s
        )
        out = {}
        for tp, future in futures.items():
            try:
                info = future.result()
            except KafkaException as exc:
                raise ClusterError(f"ListOffsets for {tp.topic}-{tp.partition} failed: {exc}") from exc
            out[(tp.topic, tp.partition)] = (info.offset, info.timestamp)
        return out

    def earliest(self, tps: Iterable[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        return {tp: o for tp, (o, _) in self.list_offsets(dict.fromkeys(tps, OffsetSpec.earliest())).items()}

    def latest(self, tps: Iterable[TopicPartitionKey]) -> dict[TopicPartitionKey, int]:
        return {tp: o for tp, (o, _) in self.list_offsets(dict.fromkeys(tps, OffsetSpec.latest())).items()}

    def offsets_for_timestamps(
        self, timestamps: Mapping[TopicPartitionKey, int]
    ) -> dict[TopicPartitionKey, int]:
        """Per partition, the first offset whose record timestamp is >= its timestamp; -1 where there is none."""
        specs = {tp: OffsetSpec.for_timestamp(ts) for tp, ts in timestamps.items()}
        return {tp: o for tp, (o, _) in self.list_offsets(specs).items()}

    # -- configs

    def topic_configs(self, topics: Iterable[str]) -> dict[str, dict[str, str]]:
        """Each topic's effective configs (DescribeConfigs), as Kafka names to string values."""
        resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics]
        if not resources:
            return {}
        out = {}
        for resource, future in self._admin.describe_configs(
            resources, request_timeout=self.timeout_s
        ).items():
            try:
                entries = future.result()
            except KafkaException as exc:
                raise ClusterError(f"DescribeConfigs for topic {resource.name} failed: {exc}") from exc
            out[resource.name] = {name: e.value for name, e in entries.items() if e.value is not None}
        return out

    # -- log dirs

    def log_dir_sizes(self) -> dict[tuple[int, str, int], int]:
        """Bytes stored per (broker id, topic, partition), from DescribeLogDirs sent to every broker."""
        sizes: dict[tuple[int, str, int], int] = {}
        for broker_id, (host, port) in sorted(self.brokers().items()):
            for topic, partition, size in describe_log_dirs(host, port, self.timeout_s):
                sizes[(broker_id, topic, partition)] = sizes.get((broker_id, topic, partition), 0) + size
        return sizes


# ------------------------------------------------------------------------------------------------------------
# DescribeLogDirs over a plain socket (confluent-kafka has no API for it)

_DESCRIBE_LOG_DIRS_KEY = 35
_DESCRIBE_LOG_DIRS_VERSION = 1  # v1 is not flexible: request header v1, response header v0
_correlation_ids = itertools.count(1)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ClusterError(f"connection closed after {len(buf)} of {n} bytes")
        buf += chunk
    return bytes(buf)


def describe_log_dirs(host: str, port: int, timeout_s: float) -> list[tuple[str, int, int]]:
    """(topic, partition, size) for every replica on one broker, summed over its log dirs."""
    import io

    from kio.schema.describe_log_dirs.v1.request import DescribeLogDirsRequest
    from kio.schema.describe_log_dirs.v1.response import DescribeLogDirsResponse
    from kio.serial import entity_reader, entity_writer

    body = io.BytesIO()
    entity_writer(DescribeLogDirsRequest)(body, DescribeLogDirsRequest(topics=None))
    correlation_id = next(_correlation_ids)
    client_id = b"odradek-jobs"
    header = struct.pack(
        ">hhih", _DESCRIBE_LOG_DIRS_KEY, _DESCRIBE_LOG_DIRS_VERSION, correlation_id, len(client_id)
    )
    frame = header + client_id + body.getvalue()
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            sock.sendall(struct.pack(">i", len(frame)) + frame)
            (size,) = struct.unpack(">i", _recv_exact(sock, 4))
            payload = _recv_exact(sock, size)
    except OSError as exc:
        raise ClusterError(f"DescribeLogDirs to {host}:{port} failed: {exc}") from exc
    (got_id,) = struct.unpack_from(">i", payload)
    if got_id != correlation_id:
        raise ClusterError(f"DescribeLogDirs to {host}:{port}: correlation id {got_id} != {correlation_id}")
    response, _ = entity_reader(DescribeLogDirsResponse)(memoryview(payload), 4)
    out = []
    for result in response.results:
        if result.error_code.value != 0:
            continue  # an offline log dir holds nothing readable
        for topic in result.topics:
            out.extend(
                (str(topic.name), int(p.partition_index), int(p.partition_size)) for p in topic.partitions
            )
    return out
