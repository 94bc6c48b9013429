"""Topic names and replica assignment: pure rules shared by auto-creation and the admin APIs."""

from __future__ import annotations

import re

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
    seed: int = 0,
) -> dict[int, list[int]]:
    """Round-robin assignment with shifted followers, like Kafka's rack-unaware AdminUtils.assignReplicasToBrokers."""
    if replication_factor > len(broker_ids):
        raise KafkaError(
            ErrorCode.invalid_replication_factor,
            f"replication factor {replication_factor} is larger than the {len(broker_ids)} available brokers",
        )
    brokers = sorted(broker_ids)
    n = len(brokers)
    start = seed % n
    shift = seed % n
    assignment = {}
    for p in range(start_partition, start_partition + num_partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        replicas = [brokers[first]]
        for j in range(replication_factor - 1):
            replicas.append(brokers[(first + 1 + (shift + j) % (n - 1)) % n] if n > 1 else brokers[first])
        assignment[p] = replicas
    return assignment
