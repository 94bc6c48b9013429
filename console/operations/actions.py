"""Writes about operations: propose (with a plan to review), approve (a worker runs it), cancel.

Operators propose and approve reassignments, replication factor changes, failovers and elections; a
decommission needs an admin at both steps.
"""

from __future__ import annotations

from typing import Any

from console.audit.models import Outcome
from console.audit.recording import action
from console.clusters.models import Cluster
from console.errors import Conflict, Invalid
from console.operations import proposals, runner
from console.operations.models import Kind, Operation
from console.operations.states import IllegalTransition, State

PROPOSABLE = [k.value for k in Kind if k != Kind.CREATE_TOPIC]


def _action_name(kind: str, default: str) -> str:
    return "broker.decommission" if kind == Kind.DECOMMISSION else default


def do_propose_operation(
    user: Any, cluster: Cluster, *, kind: str, request: dict[str, Any], source: str
) -> Operation:
    with action(
        user,
        _action_name(kind, "operation.propose"),
        source=source,
        cluster=cluster,
        resource_type="operation",
        resource_name=kind,
        params={"kind": kind, **request},
    ) as act:
        if kind not in PROPOSABLE:
            raise Invalid(f"kind must be one of {', '.join(PROPOSABLE)}", field="kind")
        params = proposals.propose(cluster, kind, request)
        operation = Operation.objects.create(
            kind=kind, cluster=cluster, state=State.PROPOSED, params=params, created_by=user
        )
        act.operation = operation
        act.outcome = Outcome.ACCEPTED
        act.detail = f"operation #{operation.pk} proposed"
    return operation


def do_approve_operation(user: Any, operation: Operation, *, source: str) -> Operation:
    with action(
        user,
        _action_name(operation.kind, "operation.approve"),
        source=source,
        cluster=operation.cluster,
        resource_type="operation",
        resource_name=f"#{operation.pk}",
        params={"kind": operation.kind},
    ) as act:
        try:
            operation.transition(State.APPROVED)
        except IllegalTransition as exc:
            raise Conflict(str(exc)) from exc
        act.operation = operation
        act.outcome = Outcome.ACCEPTED
        runner.enqueue(operation)
    return operation


def do_cancel_operation(user: Any, operation: Operation, *, source: str) -> Operation:
    """Proposed or approved: cancelled at once. Running: the moves Kafka has not finished are cancelled
    (AlterPartitionReassignments with no replicas), those finished stay; an election cannot be cancelled."""
    with action(
        user,
        "operation.cancel",
        source=source,
        cluster=operation.cluster,
        resource_type="operation",
        resource_name=f"#{operation.pk}",
        params={"kind": operation.kind, "state": operation.state},
    ) as act:
        act.operation = operation
        if operation.state == State.RUNNING and operation.kind in (
            Kind.PREFERRED_LEADER_ELECTION,
            Kind.CREATE_TOPIC,
        ):
            raise Conflict(f"a running {operation.get_kind_display()} cannot be cancelled")
        was = operation.state
        try:
            operation.transition(State.CANCELLED)
        except IllegalTransition as exc:
            raise Conflict(str(exc)) from exc
        if (
            was == State.RUNNING
        ):  # the worker may be dead: revert here; a live one stops at its next heartbeat
            from console.operations.tasks import cancel_in_kafka

            operation.refresh_from_db()
            cancel_in_kafka(operation)
    return operation
