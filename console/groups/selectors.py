"""Reads about consumer groups: the list (lag from the GroupLag table, refreshed for the rows shown) and one
group's members and per-partition offsets and lag."""

from __future__ import annotations

from dataclasses import dataclass

from console.clusters.client import GroupDescription, client_for
from console.clusters.models import Cluster
from console.errors import NotFound
from console.groups.models import GroupLag


@dataclass
class GroupRow:
    group_id: str
    state: str
    members: int | None = None
    lag: int | None = None
    partitions: int | None = None
    protocol: str = ""


@dataclass
class PartitionLag:
    topic: str
    partition: int
    committed: int | None
    end: int | None
    member: str = ""
    host: str = ""
    client_id: str = ""

    @property
    def lag(self) -> int | None:
        if self.committed is None or self.end is None:
            return None
        return max(0, self.end - self.committed)


def group_list(
    cluster: Cluster, *, query: str = "", state: str = "", sort: str = "group_id"
) -> list[GroupRow]:
    groups = client_for(cluster).list_groups()
    needle = query.strip().lower()
    rows = [
        GroupRow(g.group_id, g.state)
        for g in groups
        if (not needle or needle in g.group_id.lower()) and (not state or g.state == state.upper())
    ]
    key = sort.lstrip("-")
    if key == "lag":
        known = dict(GroupLag.objects.filter(cluster=cluster).values_list("group_id", "lag"))
        for row in rows:
            row.lag = known.get(row.group_id)
        # groups whose lag is unknown sort last in both directions
        rows.sort(
            key=lambda r: (r.lag is None, -(r.lag or 0) if sort.startswith("-") else (r.lag or 0), r.group_id)
        )
        return rows
    rows.sort(
        key=(lambda r: (r.state, r.group_id)) if key == "state" else (lambda r: r.group_id),
        reverse=sort.startswith("-"),
    )
    return rows


def fill_rows(cluster: Cluster, rows: list[GroupRow]) -> None:
    """Members and live lag for the rows of one page (and store the lag for sorting)."""
    if not rows:
        return
    client = client_for(cluster)
    ids = [r.group_id for r in rows]
    descriptions = client.describe_groups(ids)
    lags = compute_lag(cluster, ids)
    for row in rows:
        d = descriptions.get(row.group_id)
        if d is not None:
            row.members, row.state, row.protocol = len(d.members), d.state, d.protocol
        row.lag, row.partitions = lags.get(row.group_id, (None, 0))


def compute_lag(cluster: Cluster, group_ids: list[str]) -> dict[str, tuple[int | None, int]]:
    """{group: (total lag, partitions with a committed offset)}, stored in GroupLag as a side effect."""
    client = client_for(cluster)
    committed = client.committed_offsets(group_ids)
    ends = client.offsets({tp for offsets in committed.values() for tp in offsets}, "latest")
    out = {}
    for group_id, offsets in committed.items():
        lag = sum(max(0, ends.get(tp, o) - o) for tp, o in offsets.items()) if offsets else None
        out[group_id] = (lag, len(offsets))
    for group_id, (lag, partitions) in out.items():
        GroupLag.objects.update_or_create(
            cluster=cluster, group_id=group_id, defaults={"lag": lag, "partitions": partitions}
        )
    return out


def group_detail(cluster: Cluster, group_id: str) -> tuple[GroupDescription, list[PartitionLag]]:
    client = client_for(cluster)
    description = client.describe_groups([group_id])[group_id]
    committed = client.committed_offsets([group_id])[group_id]
    if description.state in ("DEAD", "UNKNOWN") and not committed and not description.members:
        raise NotFound(f"consumer group {group_id!r} does not exist")
    owners = {tp: m for m in description.members for tp in m.assignment}
    keys = set(committed) | set(owners)
    ends = client.offsets(keys, "latest")
    rows = []
    for tp in sorted(keys):
        member = owners.get(tp)
        rows.append(
            PartitionLag(
                tp[0],
                tp[1],
                committed.get(tp),
                ends.get(tp),
                member=member.member_id if member else "",
                host=member.host if member else "",
                client_id=member.client_id if member else "",
            )
        )
    total = sum(r.lag or 0 for r in rows) if committed else None
    GroupLag.objects.update_or_create(
        cluster=cluster, group_id=group_id, defaults={"lag": total, "partitions": len(committed)}
    )
    return description, rows
