"""Reads of cluster state for pages and the API: the overview and the brokers, computed from the admin
client's answers (never stored)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime

from django.utils import timezone

from console.clusters.client import BrokerInfo, PartitionInfo, client_for
from console.clusters.models import BrokerEvent, Cluster, ManagedBroker
from console.errors import ConsoleError, NotFound


@dataclass
class BrokerRow:
    id: int
    host: str
    port: int
    rack: str | None
    state: str  # online, offline (a managed broker that is not in the cluster's metadata)
    is_controller: bool = False
    leaders: int = 0
    replicas: int = 0
    disk_bytes: int | None = None
    log_dirs: dict[str, dict] = field(default_factory=dict)
    pid: int | None = None
    #: What the supervisor saw of a managed broker's process (None for brokers the console does not run).
    process_state: str | None = None
    started_at: datetime | None = None
    restarts: int = 0
    events: list[dict] = field(default_factory=list)

    @property
    def uptime_s(self) -> float | None:
        if self.started_at is None or self.process_state not in ("starting", "running", "unhealthy"):
            return None
        return max(0.0, (timezone.now() - self.started_at).total_seconds())


@dataclass
class Overview:
    cluster_id: str | None
    controller_id: int | None
    brokers: list[BrokerRow]
    topics: int
    internal_topics: int
    partitions: int
    replicas: int
    in_sync_replicas: int
    under_replicated: list[PartitionInfo]
    under_min_isr: list[PartitionInfo]
    offline: list[PartitionInfo]
    disk_bytes: int | None
    disk_error: str = ""


#: How long the Brokers page waits for DescribeCluster (answered in milliseconds unless the controller is gone).
DESCRIBE_TIMEOUT_S = 1.0


def brokers(
    cluster: Cluster, *, with_disk: bool = True
) -> tuple[list[BrokerRow], str | None, int | None, str]:
    """(broker rows, cluster id, controller id, disk error) for the cluster's live brokers, plus managed
    brokers that are down."""
    client = client_for(cluster)
    md = client.metadata()
    try:
        cluster_id, controller_id, live = client.describe_cluster(timeout_s=DESCRIBE_TIMEOUT_S)
    except ConsoleError:
        # No controller while one is elected (a killed controller's ZooKeeper session lasts seconds): the
        # page must still show at once what the supervisor saw, so Metadata's brokers, with the racks known.
        cluster_id, controller_id = md.cluster_id, md.controller_id
        live = [replace(b, rack=client.known_racks.get(b.id)) for b in md.brokers]
    rows = {b.id: _row(b, "online", controller_id) for b in live}
    for p in md.partitions():
        if p.leader in rows:
            rows[p.leader].leaders += 1
        for r in p.replicas:
            if r in rows:
                rows[r].replicas += 1
    for managed in ManagedBroker.objects.filter(cluster=cluster):
        row = rows.get(managed.broker_id)
        if row is None:
            if managed.decommissioned:
                continue
            row = rows[managed.broker_id] = BrokerRow(
                managed.broker_id, managed.host, managed.port, managed.rack or None, "offline"
            )
        row.pid = managed.pid
        row.process_state = managed.state
        row.started_at = managed.started_at
        row.restarts = managed.restarts
        row.events = recent_events(managed)
    disk_error = ""
    if with_disk:
        try:
            per_broker, _ = client.log_dir_sizes()
        except ConsoleError as exc:
            disk_error = exc.message
        else:
            for broker_id, dirs in per_broker.items():
                if broker_id in rows:
                    rows[broker_id].log_dirs = dirs
                    rows[broker_id].disk_bytes = sum(d["bytes"] for d in dirs.values())
    return sorted(rows.values(), key=lambda r: r.id), cluster_id, controller_id, disk_error


def missing_brokers(cluster: Cluster) -> list[dict]:
    """The brokers the failover watch last saw missing: since when, when the grace period ends (None when the
    cluster has no failover), and the failover it started, if any."""
    from datetime import timedelta

    from console.operations.models import Kind, Operation

    rows = []
    for broker, since_iso in sorted(cluster.missing_brokers.items(), key=lambda kv: int(kv[0])):
        since = datetime.fromisoformat(since_iso)
        grace = cluster.failover_grace_s
        failover = (
            Operation.objects.filter(
                cluster=cluster, kind=Kind.FAILOVER, params__broker=int(broker), created_at__gte=since
            )
            .order_by("-created_at")
            .first()
        )
        rows.append(
            {
                "broker": int(broker),
                "since": since,
                "failover_at": since + timedelta(seconds=grace) if grace else None,
                "failover": failover,
            }
        )
    return rows


def recent_events(managed: ManagedBroker, limit: int = 10) -> list[dict]:
    return [
        {"at": e.at, "kind": e.kind, "pid": e.pid, "exit_code": e.exit_code, "detail": e.detail}
        for e in BrokerEvent.objects.filter(broker=managed)[:limit]
    ]


def _row(b: BrokerInfo, state: str, controller_id: int | None) -> BrokerRow:
    return BrokerRow(b.id, b.host, b.port, b.rack, state, is_controller=b.id == controller_id)


def broker(cluster: Cluster, broker_id: int) -> BrokerRow:
    rows, *_ = brokers(cluster)
    for row in rows:
        if row.id == broker_id:
            return row
    raise NotFound(f"broker {broker_id} is not in cluster {cluster.name}")


def overview(cluster: Cluster) -> Overview:
    client = client_for(cluster)
    rows, cluster_id, controller_id, disk_error = brokers(cluster)
    md = client.metadata()
    parts = list(md.partitions())
    under = [p for p in parts if p.under_replicated and not p.offline]
    # min.insync.replicas only matters where the ISR shrank: ask for those topics' configs only.
    min_isr = {
        topic: int(configs.get("min.insync.replicas") or 1)
        for topic, configs in client.topic_configs_many(sorted({p.topic for p in under})).items()
    }
    return Overview(
        cluster_id=cluster_id,
        controller_id=controller_id,
        brokers=rows,
        topics=sum(1 for t in md.topics.values() if not t.internal),
        internal_topics=sum(1 for t in md.topics.values() if t.internal),
        partitions=len(parts),
        replicas=sum(len(p.replicas) for p in parts),
        in_sync_replicas=sum(len(p.isr) for p in parts),
        under_replicated=under,
        under_min_isr=[p for p in under if len(p.isr) < min_isr.get(p.topic, 1)],
        offline=[p for p in parts if p.offline],
        disk_bytes=None if disk_error else sum(r.disk_bytes or 0 for r in rows),
        disk_error=disk_error,
    )
