"""Provisioning: the desired state of a managed cluster's brokers, and the properties file each one runs with.

A managed cluster is a `Cluster` row with `managed=True` and one `ManagedBroker` per broker. The supervisor
(`supervise.py`) writes each broker's properties from `broker_properties` and starts
`python -m broker_runtime --config <that file>`; nothing here starts or stops a process.

A broker's properties are deploy/cluster.properties, then the cluster's `config_overrides`, then the broker's,
then the keys the console owns (broker.id, listeners, log.dirs, zookeeper.connect, broker.rack), which no
override may set.
"""

from __future__ import annotations

import os
from pathlib import Path

from django.conf import settings

from console.errors import Invalid

BASE_PROPERTIES = Path(settings.BASE_DIR) / "deploy" / "cluster.properties"

#: Keys set from the broker's spec; overrides may not set them.
OWNED_KEYS = frozenset(
    {
        "broker.id",
        "listeners",
        "advertised.listeners",
        "log.dirs",
        "log.dir",
        "zookeeper.connect",
        "broker.rack",
    }
)
MAX_BROKERS = 32


def check_overrides(overrides: object, *, field: str = "config_overrides") -> dict[str, str]:
    """Config overrides as {key: value} strings; keys the console sets itself are refused by name."""
    if not isinstance(overrides, dict):
        raise Invalid("config overrides must be an object of key: value strings", field=field)
    out = {}
    for key, value in overrides.items():
        if not isinstance(key, str) or not key or key.strip() != key or "=" in key:
            raise Invalid(f"invalid config name {key!r}", field=field)
        if key in OWNED_KEYS:
            raise Invalid(
                f"{key} is set by the console from the broker's spec, not by an override", field=field
            )
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise Invalid(f"{key}: value must be a string or a number", field=field)
        if "\n" in str(value):
            raise Invalid(f"{key}: value must be one line", field=field)
        out[key] = str(value)
    return out


def check_chroot(chroot: str) -> str:
    if not chroot.startswith("/") or chroot == "/" or "//" in chroot or chroot.endswith("/"):
        raise Invalid("a ZooKeeper chroot looks like /name (or /a/b)", field="chroot")
    return chroot


def cluster_dir(name: str) -> Path:
    return Path(settings.CONSOLE_CLUSTERS_DIR).resolve() / name


def broker_dir(broker) -> Path:
    return Path(broker.cluster.data_dir) / f"broker-{broker.broker_id}"


def default_log_dirs(data_dir: Path, broker_id: int) -> str:
    return str(data_dir / f"broker-{broker_id}" / "logs")


def _read_properties(path: Path) -> dict[str, str]:
    """A Java properties file of `key=value` lines (the subset deploy/ uses: no continuations)."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line[0] in "#!":
            continue
        key, _, value = line.partition("=")
        out[key.strip()] = value.strip()
    return out


def broker_properties(broker) -> dict[str, str]:
    cluster = broker.cluster
    props = _read_properties(BASE_PROPERTIES)
    props.update(cluster.config_overrides or {})
    props.update(broker.config_overrides or {})
    props.update(
        {
            "broker.id": str(broker.broker_id),
            "listeners": broker.listener,
            "advertised.listeners": broker.listener,
            "log.dirs": broker.log_dirs,
            "zookeeper.connect": cluster.zookeeper_connect,
        }
    )
    if broker.rack:
        props["broker.rack"] = broker.rack
    else:
        props.pop("broker.rack", None)
    return props


def write_properties(broker) -> Path:
    """Write the broker's properties file (atomically: a half-written file is never started)."""
    directory = broker_dir(broker)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "server.properties"
    text = "# Written by the console's supervisor from the broker's spec; edits here are overwritten.\n"
    text += "".join(f"{key}={value}\n" for key, value in sorted(broker_properties(broker).items()))
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path
