"""Starting operations on a Celery worker, and the frame every operation task runs in.

`enqueue(operation)` queues the operation's task once the surrounding transaction commits (so the worker
never looks for a row that is not there yet). `run(operation_id, steps)` is what a task does: load the
operation, move it to running (or take it over if it runs but its worker's heartbeat is older than the lease:
that worker died), call the kind's function, and end it done or failed, with an audit entry for the outcome.

A running operation's task calls `operation.heartbeat()` as it goes; a task delivered twice (Redis redelivers
late-acked tasks) finds a fresh heartbeat and leaves the operation to the worker that has it. `resume_stalled`
(at worker start and on a beat schedule) re-queues operations whose worker died.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from console.audit.models import Outcome
from console.audit.recording import record
from console.errors import Unavailable
from console.operations.models import Operation
from console.operations.states import IllegalTransition, State

log = logging.getLogger(__name__)

#: Operation kind -> dotted name of its Celery task.
TASKS = {
    "create_topic": "console.topics.tasks.create_topic",
    "reassignment": "console.operations.tasks.reassignment",
    "replication_factor": "console.operations.tasks.reassignment",
    "failover": "console.operations.tasks.reassignment",
    "decommission": "console.operations.tasks.reassignment",
    "preferred_leader_election": "console.operations.tasks.preferred_leader_election",
}

WORKER = f"{socket.gethostname()} {os.getpid()}"
#: How long an operation keeps retrying while its cluster does not answer before it fails.
UNAVAILABLE_RETRY_S = 120.0


class OperationFailed(Exception):
    """Raised by a step to end the operation as failed with this message."""


class Stop(Exception):
    """Raised by `Operation.heartbeat` when this worker must stop working on the operation."""


def send(operation_id: int, kind: str) -> None:
    from console.celery import app

    app.send_task(TASKS[kind], args=[operation_id], queue=settings.CONSOLE_OPERATIONS_QUEUE)


def enqueue(operation: Operation) -> None:
    def send_now() -> None:
        try:
            send(operation.pk, operation.kind)
        except Exception as exc:  # Redis unreachable: the operation cannot start; say so on it
            log.error("operation %s not queued: %s", operation.pk, exc)
            operation.transition(State.FAILED, error=f"could not queue the task (is Redis running?): {exc}")

    transaction.on_commit(send_now)


def lease_expired_before() -> dt.datetime:
    return timezone.now() - dt.timedelta(seconds=settings.CONSOLE_OPERATION_LEASE_S)


def resume_stalled() -> list[int]:
    """Re-queue running operations whose worker stopped heartbeating, and approved ones no worker took."""
    stale = Operation.objects.filter(state=State.RUNNING, heartbeat_at__lt=lease_expired_before())
    waiting = Operation.objects.filter(state=State.APPROVED, updated_at__lt=lease_expired_before())
    ids = []
    for operation in [*stale, *waiting]:
        if operation.kind in TASKS:
            send(operation.pk, operation.kind)
            ids.append(operation.pk)
    return ids


def run(operation_id: int, body: Callable[[Operation], dict[str, Any]], *, audit_action: str) -> None:
    operation = Operation.objects.select_related("cluster", "created_by").filter(pk=operation_id).first()
    if operation is None or operation.is_final:
        return
    now = timezone.now()
    if operation.state == State.APPROVED:
        try:
            operation.transition(State.RUNNING, worker=WORKER, heartbeat_at=now)
        except IllegalTransition:
            return  # another worker took it, or it was cancelled
    elif operation.state != State.RUNNING:
        return
    else:
        # Take it over only if its worker stopped heartbeating (compare-and-set on the heartbeat seen).
        taken = Operation.objects.filter(
            pk=operation.pk,
            state=State.RUNNING,
            heartbeat_at=operation.heartbeat_at,
            heartbeat_at__lt=lease_expired_before(),
        ).update(worker=WORKER, heartbeat_at=now)
        if not taken:
            return
        previous = operation.worker or "an earlier worker"
        operation.worker, operation.heartbeat_at = WORKER, now
        operation.record_step("resumed", f"{previous} stopped; continuing from the steps recorded")
    unavailable_since = None
    while True:
        try:
            result = body(operation)
            break
        except Stop:
            return
        except Unavailable as exc:
            # The cluster did not answer (a controller moving, a broker restarting): the steps are idempotent
            # and recorded, so the body runs again from where it got, for a while.
            unavailable_since = unavailable_since or time.monotonic()
            waited = time.monotonic() - unavailable_since
            if waited < UNAVAILABLE_RETRY_S:
                log.info("operation %s: %s; retrying", operation.pk, exc.message)
                time.sleep(1.0)
                try:
                    operation.heartbeat()
                except Stop:
                    return
                continue
            error = f"the cluster did not answer for {waited:.0f} s: {exc.message}"
            _end(operation, State.FAILED, audit_action, error=error)
            return
        except Exception as exc:
            message = str(exc) if isinstance(exc, OperationFailed) else f"{type(exc).__name__}: {exc}"
            log.warning("operation %s failed: %s", operation.pk, message)
            _end(operation, State.FAILED, audit_action, error=message)
            return
    _end(operation, State.DONE, audit_action, result=result)


def _end(
    operation: Operation, state: State, audit_action: str, *, result: dict | None = None, error: str = ""
) -> None:
    try:
        if state == State.DONE:
            operation.transition(State.DONE, progress=100, result=result or {})
        else:
            operation.transition(State.FAILED, error=error)
    except IllegalTransition:
        return  # cancelled meanwhile
    with transaction.atomic():
        record(
            user=operation.created_by,
            source="worker",
            action_name=audit_action,
            cluster=operation.cluster,
            resource_type="topic"
            if operation.kind in ("create_topic", "replication_factor")
            else "operation",
            resource_name=operation.target or f"#{operation.pk}",
            params=operation.params,
            outcome=Outcome.OK if state == State.DONE else Outcome.ERROR,
            detail=error or f"operation #{operation.pk} done",
            operation=operation,
        )
