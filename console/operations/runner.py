"""Starting operations on a Celery worker, and the frame every operation task runs in.

`enqueue(operation)` queues the operation's task once the surrounding transaction commits (so the worker
never looks for a row that is not there yet). `run(operation_id, steps)` is what a task does: load the
operation, move it to running (or resume it if it already runs: the previous worker died), call the kind's
function, and end it done or failed, with an audit entry for the outcome.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from django.db import transaction

from console.audit.models import Outcome
from console.audit.recording import record
from console.operations.models import Operation
from console.operations.states import IllegalTransition, State

log = logging.getLogger(__name__)

#: Operation kind -> dotted name of its Celery task.
TASKS = {"create_topic": "console.topics.tasks.create_topic"}


class OperationFailed(Exception):
    """Raised by a step to end the operation as failed with this message."""


def enqueue(operation: Operation) -> None:
    def send() -> None:
        from console.celery import app

        try:
            app.send_task(TASKS[operation.kind], args=[operation.pk])
        except Exception as exc:  # Redis unreachable: the operation cannot start; say so on it
            log.error("operation %s not queued: %s", operation.pk, exc)
            operation.transition(State.FAILED, error=f"could not queue the task (is Redis running?): {exc}")

    transaction.on_commit(send)


def run(operation_id: int, body: Callable[[Operation], dict[str, Any]], *, audit_action: str) -> None:
    operation = Operation.objects.select_related("cluster", "created_by").filter(pk=operation_id).first()
    if operation is None or operation.is_final:
        return
    if operation.state == State.APPROVED:
        try:
            operation.transition(State.RUNNING)
        except IllegalTransition:
            return  # another worker took it, or it was cancelled
    elif operation.state != State.RUNNING:
        return
    else:
        operation.record_step("resumed", "the worker that ran it stopped; continuing from the steps recorded")
    try:
        result = body(operation)
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
            resource_type="topic",
            resource_name=operation.target,
            params=operation.params,
            outcome=Outcome.OK if state == State.DONE else Outcome.ERROR,
            detail=error or f"operation #{operation.pk} done",
            operation=operation,
        )
