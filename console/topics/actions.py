"""Writes about topics: create (a Celery task that waits for leaders and a full ISR), configs, partitions,
deleting records, deleting the topic, and producing a message."""

from __future__ import annotations

import re
from typing import Any

from console.audit.models import Outcome
from console.audit.recording import action
from console.clusters.client import client_for
from console.clusters.models import Cluster
from console.errors import Conflict, Invalid
from console.operations.models import Kind, Operation
from console.operations.runner import enqueue
from console.operations.states import State
from console.topics import messages

MAX_TOPIC_NAME = 249
_LEGAL = re.compile(r"^[a-zA-Z0-9._-]+$")
MAX_PARTITIONS = 10_000


def check_topic_name(name: str) -> None:
    """Kafka's rules for topic names (Topic.validate)."""
    if not name:
        raise Invalid("a topic name is required", field="name")
    if name in (".", ".."):
        raise Invalid("'.' and '..' are not valid topic names", field="name")
    if len(name) > MAX_TOPIC_NAME:
        raise Invalid(f"a topic name has at most {MAX_TOPIC_NAME} characters", field="name")
    if not _LEGAL.match(name):
        raise Invalid("a topic name may contain only letters, digits, '.', '_' and '-'", field="name")


def check_create_topic(
    cluster: Cluster, *, name: str, partitions: int, replication_factor: int, configs: dict[str, str]
) -> None:
    """Everything a topic creation is checked for before anything is created: the name, counts within the
    cluster's brokers, and the broker's own validation of the configs (CreateTopics with validate_only)."""
    check_topic_name(name)
    if not isinstance(partitions, int) or not 1 <= partitions <= MAX_PARTITIONS:
        raise Invalid(f"partitions must be between 1 and {MAX_PARTITIONS}", field="partitions")
    client = client_for(cluster)
    brokers = len(client.metadata().brokers)
    if not isinstance(replication_factor, int) or not 1 <= replication_factor <= brokers:
        raise Invalid(
            f"replication factor must be between 1 and the number of brokers ({brokers})",
            field="replication_factor",
        )
    if name in client.metadata(max_age_s=0).topics:
        raise Conflict(f"topic {name!r} already exists")
    client.create_topic(name, partitions, replication_factor, configs, validate_only=True)


def do_create_topic(
    user: Any,
    cluster: Cluster,
    *,
    name: str,
    partitions: int,
    replication_factor: int,
    configs: dict[str, str] | None = None,
    source: str,
) -> Operation:
    configs = dict(configs or {})
    params = {
        "name": name,
        "partitions": partitions,
        "replication_factor": replication_factor,
        "configs": configs,
    }
    with action(
        user,
        "topic.create",
        source=source,
        cluster=cluster,
        resource_type="topic",
        resource_name=name,
        params=params,
    ) as act:
        check_create_topic(
            cluster, name=name, partitions=partitions, replication_factor=replication_factor, configs=configs
        )
        operation = Operation.objects.create(
            kind=Kind.CREATE_TOPIC, cluster=cluster, state=State.APPROVED, params=params, created_by=user
        )
        act.operation = operation
        act.outcome = Outcome.ACCEPTED
        enqueue(operation)
    return operation


def do_alter_topic_configs(
    user: Any, cluster: Cluster, topic: str, *, changes: dict[str, str | None], source: str
) -> None:
    with action(
        user,
        "topic.alter_configs",
        source=source,
        cluster=cluster,
        resource_type="topic",
        resource_name=topic,
        params={"configs": changes},
    ):
        if not changes:
            raise Invalid("no config changes given", field="configs")
        client = client_for(cluster)
        client.metadata(max_age_s=0).topic(topic)
        client.alter_configs("topic", topic, changes)


def do_add_partitions(user: Any, cluster: Cluster, topic: str, *, count: int, source: str) -> None:
    """Grow the topic to `count` partitions in all (Kafka cannot remove partitions)."""
    with action(
        user,
        "topic.add_partitions",
        source=source,
        cluster=cluster,
        resource_type="topic",
        resource_name=topic,
        params={"count": count},
    ):
        client = client_for(cluster)
        current = len(client.metadata(max_age_s=0).topic(topic).partitions)
        if not isinstance(count, int) or count <= current:
            raise Invalid(f"count must be more than the current {current} partitions", field="count")
        if count > MAX_PARTITIONS:
            raise Invalid(f"count must be at most {MAX_PARTITIONS}", field="count")
        client.create_partitions(topic, count)


def do_delete_records(
    user: Any, cluster: Cluster, topic: str, *, before: dict[int, int] | None, source: str
) -> dict[int, int]:
    """Delete records before the given offset per partition; `before=None` empties every partition."""
    with action(
        user,
        "topic.delete_records",
        source=source,
        cluster=cluster,
        resource_type="topic",
        resource_name=topic,
        params={"before": before if before is not None else "all"},
    ) as act:
        client = client_for(cluster)
        info = client.metadata(max_age_s=0).topic(topic)
        known = {p.partition for p in info.partitions}
        if before is None:
            before = {p: -1 for p in known}
        unknown = sorted(set(before) - known)
        if unknown:
            raise Invalid(f"topic {topic!r} has no partition {unknown[0]}", field="partitions")
        if any(o < -1 for o in before.values()):
            raise Invalid("offsets must be >= 0 (or -1 for the end)", field="partitions")
        result = client.delete_records(topic, before)
        act.detail = "new start offsets: " + ", ".join(f"{p}: {o}" for p, o in sorted(result.items()))
    return result


def do_delete_topic(user: Any, cluster: Cluster, topic: str, *, confirm: str | None, source: str) -> None:
    """Delete a topic; `confirm` must repeat its name (typed confirmation)."""
    with action(
        user,
        "topic.delete",
        source=source,
        cluster=cluster,
        resource_type="topic",
        resource_name=topic,
        params={},
    ):
        if confirm != topic:
            raise Invalid("type the topic's name to confirm its deletion", field="confirm")
        client = client_for(cluster)
        client.metadata(max_age_s=0).topic(topic)
        client.delete_topic(topic)


def do_produce(
    user: Any,
    cluster: Cluster,
    topic: str,
    *,
    key: bytes | None,
    value: bytes | None,
    headers: list[tuple[str, bytes]],
    partition: int | None,
    source: str,
) -> tuple[int, int]:
    params = {
        "partition": partition,
        "key_bytes": None if key is None else len(key),
        "value_bytes": None if value is None else len(value),
        "headers": [h for h, _ in headers],
    }
    with action(
        user,
        "message.produce",
        source=source,
        cluster=cluster,
        resource_type="topic",
        resource_name=topic,
        params=params,
    ) as act:
        where = messages.produce(cluster, topic, key=key, value=value, headers=headers, partition=partition)
        act.detail = f"partition {where[0]} offset {where[1]}"
    return where
