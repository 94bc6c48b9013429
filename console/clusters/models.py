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
        default=False, help_text="The console started this cluster's brokers (the local cluster)."
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def bootstrap_list(self) -> list[str]:
        return [h.strip() for h in self.bootstrap_servers.split(",") if h.strip()]


class ManagedBroker(models.Model):
    """A broker process the console's launcher (or, later, its supervisor) started: where it listens and its
    pid. Unmanaged clusters have none."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="managed_brokers")
    broker_id = models.IntegerField()
    host = models.CharField(max_length=255)
    port = models.IntegerField()
    log_dirs = models.CharField(max_length=1000, blank=True, default="")
    pid = models.IntegerField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["cluster", "broker_id"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "broker_id"], name="one_spec_per_broker_id")
        ]

    def __str__(self) -> str:
        return f"{self.cluster.name}/broker {self.broker_id}"
