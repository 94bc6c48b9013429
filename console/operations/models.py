"""Operations: the persisted state of every long control-plane task (see `states.py` for the state table)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from console.operations.states import FINAL, VALID_PREVIOUS, IllegalTransition, State


class Kind(models.TextChoices):
    CREATE_TOPIC = "create_topic", "create topic"
    REASSIGNMENT = "reassignment", "partition reassignment"
    PREFERRED_LEADER_ELECTION = "preferred_leader_election", "preferred leader election"
    FAILOVER = "failover", "broker failover"
    DECOMMISSION = "decommission", "broker decommission"
    REPLICATION_FACTOR = "replication_factor", "replication factor change"


class Operation(models.Model):
    kind = models.CharField(max_length=32, choices=Kind.choices)
    cluster = models.ForeignKey("clusters.Cluster", on_delete=models.CASCADE, related_name="operations")
    state = models.CharField(
        max_length=16, choices=[(s.value, s.value) for s in State], default=State.PROPOSED, db_index=True
    )
    #: What was asked for (kind-specific: a topic's name, partitions and configs; a reassignment plan).
    params = models.JSONField(default=dict)
    #: 0-100.
    progress = models.PositiveSmallIntegerField(default=0)
    #: Steps done so far, oldest first: [{"at": iso time, "step": name, "detail": text}]. A resumed task reads
    #: them to skip what is done.
    steps = models.JSONField(default=list)
    result = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="operations"
    )
    #: The worker running it ("hostname pid") and when it last said it is alive: a worker finding a running
    #: operation whose heartbeat is older than the lease takes it over (its worker died); a fresh one it leaves.
    worker = models.CharField(max_length=200, blank=True, default="")
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"#{self.pk} {self.get_kind_display()} ({self.state})"

    @property
    def is_final(self) -> bool:
        return self.state in FINAL

    @property
    def target(self) -> str:
        """What the operation is about, for lists and the audit trail: a topic, a broker, or the cluster."""
        params = self.params
        if "name" in params or "topic" in params:
            return str(params.get("name") or params.get("topic"))
        if "broker" in params:
            return f"broker {params['broker']}"
        return ""

    def transition(self, new: State, **fields: Any) -> None:
        """Move to `new` if the row is still in a state `new` may follow; else raise IllegalTransition.

        A compare-and-set on the database row, so concurrent movers cannot both succeed."""
        fields["state"] = new
        fields["updated_at"] = timezone.now()
        if new in FINAL:
            fields["finished_at"] = fields["updated_at"]
        moved = Operation.objects.filter(pk=self.pk, state__in=[s.value for s in VALID_PREVIOUS[new]]).update(
            **fields
        )
        if not moved:
            self.refresh_from_db(fields=["state"])
            raise IllegalTransition(self.state, new)
        for name, value in fields.items():
            setattr(self, name, value)

    def record_step(self, step: str, detail: str = "", progress: int | None = None) -> None:
        """Append a step (and optionally set progress) without touching the state."""
        self.steps = [*self.steps, {"at": timezone.now().isoformat(), "step": step, "detail": detail}]
        update: dict[str, Any] = {"steps": self.steps, "updated_at": timezone.now()}
        if progress is not None:
            self.progress = update["progress"] = max(0, min(100, progress))
        Operation.objects.filter(pk=self.pk).update(**update)

    def heartbeat(self, **fields: Any) -> None:
        """Say this worker still runs the operation (and save `fields`, e.g. live progress). Raises
        runner.Stop if the operation was cancelled or another worker took it over."""
        from console.operations.runner import WORKER, Stop

        now = timezone.now()
        alive = Operation.objects.filter(pk=self.pk, state=State.RUNNING, worker=WORKER).update(
            heartbeat_at=now, updated_at=now, **fields
        )
        for name, value in fields.items():
            setattr(self, name, value)
        if not alive:
            self.refresh_from_db(fields=["state", "worker"])
            raise Stop(f"operation {self.pk} is {self.state}, worked on by {self.worker or 'nobody'}")

    def has_step(self, step: str) -> bool:
        return any(s["step"] == step for s in self.steps)
