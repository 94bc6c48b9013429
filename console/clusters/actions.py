"""Writes about clusters: registering them in the console, and their brokers' dynamic configs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.conf import settings
from django.db.models import Max

from console.audit.recording import action
from console.clusters import provisioning
from console.clusters.client import client_for, forget
from console.clusters.models import Cluster, ManagedBroker
from console.errors import Conflict, Invalid, NotFound


def do_register_cluster(
    user: Any, *, name: str, bootstrap_servers: str, zookeeper_connect: str = "", source: str
) -> Cluster:
    params = {"name": name, "bootstrap_servers": bootstrap_servers, "zookeeper_connect": zookeeper_connect}
    with action(
        user, "cluster.register", source=source, resource_type="cluster", resource_name=name, params=params
    ) as act:
        cluster = Cluster(name=name, bootstrap_servers=bootstrap_servers, zookeeper_connect=zookeeper_connect)
        cluster.full_clean()
        cluster.save()
        act.cluster = cluster
    return cluster


def do_update_cluster(user: Any, cluster: Cluster, *, changes: dict[str, str], source: str) -> Cluster:
    with action(
        user,
        "cluster.update",
        source=source,
        cluster=cluster,
        resource_type="cluster",
        resource_name=cluster.name,
        params=changes,
    ):
        for key, value in changes.items():
            setattr(cluster, key, value)
        cluster.full_clean()
        cluster.save()
        forget(cluster)
    return cluster


def do_delete_cluster(user: Any, cluster: Cluster, *, source: str) -> None:
    """Forget a cluster (the console stops showing it; the cluster itself is untouched)."""
    with action(
        user,
        "cluster.delete",
        source=source,
        cluster=cluster,
        resource_type="cluster",
        resource_name=cluster.name,
        params={"bootstrap_servers": cluster.bootstrap_servers},
    ):
        forget(cluster)
        cluster.delete()


def do_alter_broker_configs(
    user: Any, cluster: Cluster, broker_id: int, *, changes: dict[str, str | None], source: str
) -> None:
    """Set (value) or delete (None) dynamic broker configs, one broker at a time, incrementally."""
    with action(
        user,
        "broker.alter_configs",
        source=source,
        cluster=cluster,
        resource_type="broker",
        resource_name=str(broker_id),
        params={"configs": changes},
    ):
        _check_config_changes(changes)
        client = client_for(cluster)
        client.broker_configs(broker_id)  # 404 for a broker that is not there
        client.alter_configs("broker", str(broker_id), changes)


def _check_config_changes(changes: dict[str, str | None]) -> None:
    if not changes:
        raise Invalid("no config changes given", field="configs")
    for key, value in changes.items():
        if not key or not isinstance(key, str) or key.strip() != key:
            raise Invalid(f"invalid config name {key!r}", field="configs")
        if value is not None and not isinstance(value, str):
            raise Invalid(f"{key}: value must be a string or null", field="configs")


def do_provision_cluster(
    user: Any,
    *,
    name: str,
    brokers: int = 3,
    base_port: int = 9092,
    host: str = "127.0.0.1",
    zookeeper: str = "",
    chroot: str = "",
    racks: list[str] | None = None,
    config_overrides: dict[str, Any] | None = None,
    failover_grace_s: int | None = None,
    metrics_base_port: int | None = None,
    source: str,
) -> Cluster:
    """A new managed cluster: its row and one broker spec per broker (ids 0..n-1, ports base_port.., racks
    round-robin; with `metrics_base_port`, each broker serves /metrics on metrics_base_port + id). The
    supervisor starts the brokers; nothing runs yet when this returns."""
    zookeeper = zookeeper or settings.CONSOLE_ZOOKEEPER
    chroot = chroot or f"/odradek-{name}"
    params = {
        "name": name,
        "brokers": brokers,
        "base_port": base_port,
        "zookeeper": zookeeper,
        "chroot": chroot,
        "racks": racks or [],
        "config_overrides": config_overrides or {},
        "failover_grace_s": failover_grace_s,
        "metrics_base_port": metrics_base_port,
    }
    with action(
        user, "cluster.provision", source=source, resource_type="cluster", resource_name=name, params=params
    ) as act:
        if not isinstance(brokers, int) or not 1 <= brokers <= provisioning.MAX_BROKERS:
            raise Invalid(f"brokers must be between 1 and {provisioning.MAX_BROKERS}", field="brokers")
        ports = list(range(base_port, base_port + brokers))
        _check_ports(ports, host)
        overrides = provisioning.check_overrides(config_overrides or {})
        provisioning.check_chroot(chroot)
        racks = [str(r) for r in racks or []]
        if Cluster.objects.filter(name=name).exists():
            raise Conflict(f"a cluster named {name!r} exists", field="name")
        data_dir = provisioning.cluster_dir(name)
        cluster = Cluster(
            name=name,
            bootstrap_servers=",".join(f"{host}:{p}" for p in ports),
            zookeeper_connect=zookeeper + chroot,
            managed=True,
            config_overrides=overrides,
            data_dir=str(data_dir),
            failover_grace_s=failover_grace_s,
        )
        cluster.full_clean()
        cluster.save()
        for broker_id, port in enumerate(ports):
            ManagedBroker.objects.create(
                cluster=cluster,
                broker_id=broker_id,
                host=host,
                port=port,
                log_dirs=provisioning.default_log_dirs(data_dir, broker_id),
                rack=racks[broker_id % len(racks)] if racks else "",
                config_overrides=(
                    {"odradek.metrics.listener": f"http://{host}:{metrics_base_port + broker_id}"}
                    if metrics_base_port
                    else {}
                ),
            )
        act.cluster = cluster
    return cluster


def do_add_broker(
    user: Any,
    cluster: Cluster,
    *,
    port: int | None = None,
    rack: str = "",
    config_overrides: dict[str, Any] | None = None,
    source: str,
) -> ManagedBroker:
    """One more broker in a managed cluster: the next unused id, the port after the highest (or `port`). It
    joins empty; a reassignment moves replicas onto it."""
    params = {"port": port, "rack": rack, "config_overrides": config_overrides or {}}
    with action(
        user, "broker.add", source=source, cluster=cluster, resource_type="cluster", resource_name=cluster.name,
        params=params,
    ) as act:  # fmt: skip
        if not cluster.managed or not cluster.data_dir:
            raise Invalid(f"cluster {cluster.name} is not managed by the console: add brokers where it runs")
        specs = ManagedBroker.objects.filter(cluster=cluster)
        top = specs.aggregate(broker_id=Max("broker_id"), port=Max("port"))
        broker_id = (top["broker_id"] if top["broker_id"] is not None else -1) + 1
        port = port or (top["port"] or 9091) + 1
        _check_ports([port], "127.0.0.1", field="port")
        first = specs.first()
        broker = ManagedBroker.objects.create(
            cluster=cluster,
            broker_id=broker_id,
            host=first.host if first else "127.0.0.1",
            port=port,
            log_dirs=provisioning.default_log_dirs(Path(cluster.data_dir), broker_id),
            rack=str(rack or ""),
            config_overrides=provisioning.check_overrides(config_overrides or {}),
        )
        cluster.bootstrap_servers = ",".join([*cluster.bootstrap_list, f"{broker.host}:{port}"])
        cluster.save(update_fields=["bootstrap_servers"])
        act.params["broker_id"] = broker_id
        act.detail = f"broker {broker_id} on port {port}"
    return broker


def _check_ports(ports: list[int], host: str, *, field: str = "base_port") -> None:
    from console.clusters.supervisor import answers

    for port in ports:
        if not isinstance(port, int) or not 1024 <= port <= 65535:
            raise Invalid(f"port {port!r} is outside 1024-65535", field=field)
        taken = (
            ManagedBroker.objects.filter(port=port, decommissioned=False).select_related("cluster").first()
        )
        if taken is not None:
            raise Conflict(f"port {port} belongs to {taken}", field=field)
        if answers(host, port):
            raise Conflict(f"something already listens on {host}:{port}", field=field)


def managed_broker(cluster: Cluster, broker_id: int) -> ManagedBroker:
    broker = ManagedBroker.objects.filter(cluster=cluster, broker_id=broker_id).first()
    if broker is None:
        raise NotFound(f"cluster {cluster.name} has no managed broker {broker_id}")
    return broker
