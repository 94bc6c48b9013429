"""The write path's frame: `with action(user, "topic.create", ...) as act:` checks the user's role, runs the
body, and records one audit entry with the outcome (ok, accepted, denied, invalid or error).

Every change the console makes to a cluster or to its own records goes through `action`: the pages and the
API call the same `do_*` functions, which open it first thing.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction

from console.access import ACTIONS, check_role
from console.audit.models import AuditEntry, Outcome
from console.errors import ConsoleError

log = logging.getLogger(__name__)


@dataclass
class ActionRecord:
    """What the body of an action may add to its audit entry."""

    params: dict[str, Any]
    outcome: Outcome = Outcome.OK
    detail: str = ""
    operation: Any = None
    #: Set by an action that creates the cluster it is about (registering one).
    cluster: Any = None


def record(
    *,
    user: Any,
    source: str,
    action_name: str,
    cluster: Any = None,
    resource_type: str = "",
    resource_name: str = "",
    params: dict[str, Any] | None = None,
    outcome: Outcome,
    detail: str = "",
    operation: Any = None,
) -> AuditEntry:
    """Store one audit entry and, once committed, hand it to a worker for the cluster's audit topic."""
    authenticated = user is not None and getattr(user, "is_authenticated", False)
    cluster_name = cluster.name if cluster is not None else ""
    if cluster is not None and cluster.pk is None:  # the action deleted it
        cluster = None
    entry = AuditEntry.objects.create(
        user=user if authenticated else None,
        username=user.get_username() if authenticated else "anonymous",
        source=source,
        cluster=cluster,
        cluster_name=cluster_name,
        action=action_name,
        resource_type=resource_type,
        resource_name=resource_name,
        params=params or {},
        outcome=outcome,
        detail=detail[:4000],
        operation=operation,
    )
    if cluster is not None:
        transaction.on_commit(lambda: _enqueue_publish(entry.pk), robust=True)
    return entry


def _enqueue_publish(entry_id: int) -> None:
    from console.audit.tasks import publish_entry

    try:
        publish_entry.delay(entry_id)
    except Exception as exc:  # Redis down: the beat task publishes it later
        log.warning(
            "audit entry %s not queued for the audit topic (%s); the periodic sweep will", entry_id, exc
        )


@contextlib.contextmanager
def action(
    user: Any,
    action_name: str,
    *,
    source: str,
    cluster: Any = None,
    resource_type: str = "",
    resource_name: str = "",
    params: dict[str, Any] | None = None,
) -> Iterator[ActionRecord]:
    act = ActionRecord(params=dict(params or {}))
    common = dict(
        user=user,
        source=source,
        action_name=action_name,
        cluster=cluster,
        resource_type=resource_type,
        resource_name=resource_name,
    )
    try:
        check_role(user, ACTIONS[action_name], f"{action_name}")
    except PermissionDenied as exc:
        record(**common, params=act.params, outcome=Outcome.DENIED, detail=str(exc))
        raise
    try:
        with transaction.atomic():
            yield act
            if act.cluster is not None:
                common["cluster"] = act.cluster
            record(
                **common, params=act.params, outcome=act.outcome, detail=act.detail, operation=act.operation
            )
    except (ConsoleError, ValidationError) as exc:
        invalid = isinstance(exc, ValidationError) or exc.status < 500
        message = exc.message if isinstance(exc, ConsoleError) else "; ".join(exc.messages)
        record(
            **common, params=act.params, outcome=Outcome.INVALID if invalid else Outcome.ERROR, detail=message
        )
        raise
    except Exception as exc:
        record(**common, params=act.params, outcome=Outcome.ERROR, detail=f"{type(exc).__name__}: {exc}")
        raise
