"""Clusters the console manages, and the broker processes it started itself (the local cluster).

The cluster is the source of truth for its own state (brokers, topics, groups): nothing of it is copied here.
"""

from __future__ import annotations

import re

from django.core.exceptions import ValidationError
from django.db import models

_HOST_PORT = re.compile(r"^[A-Za-z0-9_.\-\[\]:]+:\d{1,5}$")


def validate_host_ports(value: str) -> None:
    """A comma-separated list of host:port pairs, as Kafka's bootstrap.servers and zookeeper.connect take."""
    hosts = [part.strip() for part in value.split(",")]
    bad = [h for h in hosts if not _HOST_PORT.match(h) or not 0 < int(h.rsplit(":", 1)[1]) < 65536]
    if not hosts or bad:
        raise ValidationError(f"expected host:port[,host:port...], got {value!r}")


def validate_zookeeper_connect(value: str) -> None:
    """host:port[,host:port...][/chroot]."""
    hosts, _, chroot = value.partition("/")
    validate_host_ports(hosts)
    if chroot and not re.match(r"^[A-Za-z0-9_.\-/]+$", chroot):
        raise ValidationError(f"invalid ZooKeeper chroot {'/' + chroot!r}")


class Cluster(models.Model):
    name = models.SlugField(
        max_length=64, unique=True, help_text="Short name used in URLs and the audit trail."
    )
    bootstrap_servers = models.CharField(max_length=500, validators=[validate_host_ports])
    zookeeper_connect = models.CharField(
        max_length=500, blank=True, default="", validators=[validate_zookeeper_connect]
    )
    managed = models.BooleanField(
        default=False, help_text="The console provisions and supervises this cluster's brokers."
    )
    #: Broker configs every broker of a managed cluster gets (over deploy/cluster.properties).
    config_overrides = models.JSONField(default=dict, blank=True)
    #: Where a managed cluster's brokers keep their properties, pid files, logs and output.
    data_dir = models.CharField(max_length=1000, blank=True, default="")
    #: Seconds a broker may stay dead before a failover re-creates its replicas elsewhere (None: never).
    failover_grace_s = models.PositiveIntegerField(null=True, blank=True)
    #: After a failover, a returning broker stays empty ("empty") or gets a rebalance ("rebalance").
    failover_on_return = models.CharField(max_length=16, default="empty", blank=True)
    #: Brokers the failover watch saw missing, {broker id: ISO time first seen missing}.
    missing_brokers = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def bootstrap_list(self) -> list[str]:
        return [h.strip() for h in self.bootstrap_servers.split(",") if h.strip()]


class BrokerState(models.TextChoices):
    """What the supervisor last saw of a managed broker's process."""

    PENDING = "pending"  # not started yet
    STARTING = "starting"  # process up, not yet answering ApiVersions and registered in ZooKeeper
    RUNNING = "running"  # answers ApiVersions and is registered
    UNHEALTHY = "unhealthy"  # the process lives but stopped answering or lost its registration
    EXITED = "exited"  # the process ended; a restart is scheduled after the backoff
    STOPPING = "stopping"  # sent SIGTERM (controlled shutdown)
    STOPPED = "stopped"


class ManagedBroker(models.Model):
    """A broker of a cluster the console provisions: the desired state (its id, listener, log dirs, rack,
    config overrides, whether it should run) and what the supervisor (`manage.py supervise`) last saw of its
    process (state, pid, start time, restarts). Unmanaged clusters have none."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="managed_brokers")
    broker_id = models.IntegerField()
    host = models.CharField(max_length=255)
    port = models.IntegerField()
    log_dirs = models.CharField(max_length=1000, blank=True, default="")
    rack = models.CharField(max_length=64, blank=True, default="")
    #: Broker configs of this broker only, over the cluster's `config_overrides`.
    config_overrides = models.JSONField(default=dict, blank=True)
    #: Desired: the supervisor runs the broker while this is true, and stops it (SIGTERM) when it is not.
    should_run = models.BooleanField(default=True)
    #: Decommissioned: stopped for good, its replicas moved away; kept for the history of its events.
    decommissioned = models.BooleanField(default=False)
    state = models.CharField(max_length=16, choices=BrokerState.choices, default=BrokerState.PENDING)
    pid = models.IntegerField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    restarts = models.PositiveIntegerField(default=0)
    last_exit_code = models.IntegerField(null=True, blank=True)
    state_changed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["cluster", "broker_id"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "broker_id"], name="one_spec_per_broker_id")
        ]

    def __str__(self) -> str:
        return f"{self.cluster.name}/broker {self.broker_id}"

    @property
    def listener(self) -> str:
        return f"PLAINTEXT://{self.host}:{self.port}"


class BrokerEvent(models.Model):
    """One thing the supervisor saw or did to a managed broker: started, adopted, exited (with its code),
    restarted, unhealthy, healthy again, stopped."""

    broker = models.ForeignKey(ManagedBroker, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField(auto_now_add=True, db_index=True)
    kind = models.CharField(max_length=16)
    pid = models.IntegerField(null=True, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    detail = models.CharField(max_length=500, blank=True, default="")

    class Meta:
        ordering = ["-at", "-id"]

    def __str__(self) -> str:
        return f"{self.broker}: {self.kind} {self.detail}"
