"""Topic names and replica assignment: pure rules shared by auto-creation and the admin APIs."""

from __future__ import annotations

import random
import re
from collections.abc import Mapping

from kio.schema.errors import ErrorCode

from broker_runtime.errors import KafkaError

MAX_NAME_LENGTH = 249
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


def validate_topic_name(name: str | None) -> None:
    """Kafka's Topic.validate: the error a client sees for an unusable name."""
    if not name:
        raise KafkaError(ErrorCode.invalid_topic_exception, "topic name is empty")
    if name in (".", ".."):
        raise KafkaError(ErrorCode.invalid_topic_exception, f"topic name cannot be {name!r}")
    if len(name) > MAX_NAME_LENGTH:
        raise KafkaError(
            ErrorCode.invalid_topic_exception,
            f"topic name is {len(name)} characters long, above {MAX_NAME_LENGTH}",
        )
    if not _LEGAL.match(name):
        raise KafkaError(
            ErrorCode.invalid_topic_exception,
            f"topic name {name!r} is illegal: it may contain only ASCII alphanumerics, '.', '_' and '-'",
        )


def collision_key(name: str) -> str:
    """Metric names replace '.' with '_', so two topics differing only there would collide."""
    return name.replace(".", "_")


def assign_replicas(
    broker_ids: list[int],
    num_partitions: int,
    replication_factor: int,
    start_partition: int = 0,
    start_index: int = 0,
    racks: Mapping[int, str | None] | None = None,
) -> dict[int, list[int]]:
    """Kafka's AdminUtils.assignReplicasToBrokers: leaders round-robin from `start_index` (-1: random, as Kafka
    does for new topics), followers shifted so that replicas spread evenly; when every broker has a rack, the
    brokers are taken alternately by rack so that each partition's replicas span as many racks as possible."""
    if replication_factor > len(broker_ids):
        raise KafkaError(
            ErrorCode.invalid_replication_factor,
            f"Replication factor: {replication_factor} larger than available brokers: {len(broker_ids)}.",
        )
    racks = {b: r for b, r in (racks or {}).items() if b in broker_ids}
    with_rack = {b for b, r in racks.items() if r is not None}
    if with_rack and len(with_rack) != len(broker_ids):
        raise KafkaError(
            ErrorCode.invalid_replica_assignment,
            f"Not all brokers have rack information for replica rack aware assignment (without a rack: "
            f"{sorted(set(broker_ids) - with_rack)})",
        )
    brokers = _rack_alternated(racks) if with_rack else sorted(broker_ids)  # type: ignore[arg-type]
    n = len(brokers)
    if start_index < 0:
        start_index = random.randrange(n)
        shift = random.randrange(n)
    else:
        shift = start_index
    num_racks = len(set(racks.values())) if with_rack else 1
    assignment = {}
    for p in range(start_partition, start_partition + num_partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start_index) % n
        replicas = [brokers[first]]
        if not with_rack:
            replicas += [brokers[_replica_index(first, shift, j, n)] for j in range(replication_factor - 1)]
        else:
            used_racks, k = {racks[brokers[first]]}, 0
            while len(replicas) < replication_factor:
                broker = brokers[_replica_index(first, shift * num_racks, k, n)]
                k += 1
                # Skip a broker whose rack has a replica while some rack has none, or that has one already.
                if (
                    racks[broker] not in used_racks or len(used_racks) == num_racks
                ) and broker not in replicas:
                    replicas.append(broker)
                    used_racks.add(racks[broker])
        assignment[p] = replicas
    return assignment


def _replica_index(first: int, shift: int, j: int, n: int) -> int:
    return (first + 1 + (shift + j) % (n - 1)) % n if n > 1 else first


def _rack_alternated(racks: Mapping[int, str]) -> list[int]:
    """Brokers alternated by rack (racks sorted by name, brokers by id): rack1 [0,1], rack2 [2] -> 0, 2, 1."""
    by_rack: dict[str, list[int]] = {}
    for broker, rack in sorted(racks.items()):
        by_rack.setdefault(rack, []).append(broker)
    queues = [by_rack[r] for r in sorted(by_rack)]
    out: list[int] = []
    while len(out) < len(racks):
        for q in queues:
            if q:
                out.append(q.pop(0))
    return out
