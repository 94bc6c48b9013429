"""Writes about clusters: registering them in the console, and their brokers' dynamic configs."""

from __future__ import annotations

from typing import Any

from console.audit.recording import action
from console.clusters.client import client_for, forget
from console.clusters.models import Cluster
from console.errors import Invalid


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
