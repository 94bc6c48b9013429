"""Writes about consumer groups: resetting committed offsets (with a dry-run preview) and deleting a group.

Both are refused while the group has active members, as Kafka's own tool refuses them: a live consumer would
overwrite the new offsets with its next commit."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from console.access import ACTIONS, check_role
from console.audit.recording import action
from console.clusters.client import client_for
from console.clusters.models import Cluster
from console.errors import Conflict, Invalid, NotFound

RESET_TARGETS = ("earliest", "latest", "timestamp", "offset", "shift")


@dataclass
class ResetRow:
    topic: str
    partition: int
    current: int | None
    new: int
    earliest: int
    latest: int

    @property
    def lag_after(self) -> int:
        return max(0, self.latest - self.new)


def plan_reset(
    cluster: Cluster,
    group_id: str,
    *,
    to: str,
    value: int | None = None,
    topic: str | None = None,
    partitions: list[int] | None = None,
) -> list[ResetRow]:
    """The new offset of every partition the reset covers: the group's committed partitions (of `topic`, if
    given), or every partition of `topic` (or the listed ones)."""
    if to not in RESET_TARGETS:
        raise Invalid(f"to must be one of {', '.join(RESET_TARGETS)}", field="to")
    if to in ("timestamp", "offset", "shift") and value is None:
        raise Invalid(f"resetting to {to} needs a value", field="value")
    client = client_for(cluster)
    description = client.describe_groups([group_id])[group_id]
    if description.active:
        raise Conflict(
            f"group {group_id!r} has {len(description.members)} active member(s) (state {description.state}); "
            "stop its consumers first"
        )
    committed = client.committed_offsets([group_id])[group_id]
    if topic:
        info = client.metadata(max_age_s=0).topic(topic)
        chosen = partitions if partitions else [p.partition for p in info.partitions]
        unknown = sorted(set(chosen) - {p.partition for p in info.partitions})
        if unknown:
            raise Invalid(f"topic {topic!r} has no partition {unknown[0]}", field="partitions")
        keys = [(topic, p) for p in chosen]
    else:
        keys = sorted(committed)
        if not keys:
            raise NotFound(f"group {group_id!r} has no committed offsets; name a topic to reset")
    earliest = client.offsets(keys, "earliest")
    latest = client.offsets(keys, "latest")
    at_time = client.offsets(keys, value) if to == "timestamp" else {}
    rows = []
    for key in sorted(keys):
        low, high, current = earliest[key], latest[key], committed.get(key)
        if to == "earliest":
            new = low
        elif to == "latest":
            new = high
        elif to == "timestamp":
            new = at_time[key] if at_time[key] >= 0 else high
        elif to == "offset":
            new = value
        else:
            new = (current if current is not None else low) + value
        rows.append(ResetRow(key[0], key[1], current, min(max(new, low), high), low, high))
    return rows


def do_reset_offsets(
    user: Any,
    cluster: Cluster,
    group_id: str,
    *,
    to: str,
    value: int | None = None,
    topic: str | None = None,
    partitions: list[int] | None = None,
    dry_run: bool,
    source: str,
) -> list[ResetRow]:
    """Compute the reset and, unless `dry_run`, commit it. A dry run changes nothing and is not audited, but
    needs the same role."""
    plan_args = dict(to=to, value=value, topic=topic, partitions=partitions)
    if dry_run:
        check_role(user, ACTIONS["group.reset_offsets"], "group.reset_offsets")
        return plan_reset(cluster, group_id, **plan_args)
    with action(
        user,
        "group.reset_offsets",
        source=source,
        cluster=cluster,
        resource_type="group",
        resource_name=group_id,
        params={k: v for k, v in plan_args.items() if v is not None},
    ) as act:
        rows = plan_reset(cluster, group_id, **plan_args)
        client_for(cluster).alter_group_offsets(group_id, {(r.topic, r.partition): r.new for r in rows})
        act.detail = "; ".join(f"{r.topic}-{r.partition}: {r.current} -> {r.new}" for r in rows)[:4000]
    return rows


def do_delete_group(user: Any, cluster: Cluster, group_id: str, *, source: str) -> None:
    with action(
        user,
        "group.delete",
        source=source,
        cluster=cluster,
        resource_type="group",
        resource_name=group_id,
        params={},
    ):
        client = client_for(cluster)
        description = client.describe_groups([group_id])[group_id]
        if description.active:
            raise Conflict(f"group {group_id!r} has active members; stop its consumers first")
        client.delete_group(group_id)
