"""Roles and the permission each action needs: the one table both the pages and the API enforce.

A user's role is the highest of the Django groups "viewer", "operator" and "admin" they belong to; superusers
are admins; a user in none of them has no role and sees nothing. Roles are ordered: an operator can do what a
viewer can, an admin what an operator can.
"""

from __future__ import annotations

import enum
from typing import Any

from django.contrib.auth.models import AnonymousUser, Group
from django.core.exceptions import PermissionDenied
from rest_framework.permissions import BasePermission


class Role(enum.IntEnum):
    NONE = 0
    VIEWER = 1
    OPERATOR = 2
    ADMIN = 3

    @property
    def label(self) -> str:
        return self.name.lower()


ROLE_GROUPS = {"viewer": Role.VIEWER, "operator": Role.OPERATOR, "admin": Role.ADMIN}

#: Every action (a write) and the least role that may perform it. Reads need Role.VIEWER.
ACTIONS: dict[str, Role] = {
    "cluster.register": Role.ADMIN,
    "cluster.update": Role.ADMIN,
    "cluster.delete": Role.ADMIN,
    "broker.alter_configs": Role.ADMIN,
    "cluster.provision": Role.ADMIN,
    "broker.add": Role.ADMIN,
    "broker.decommission": Role.ADMIN,
    "operation.propose": Role.OPERATOR,
    "operation.approve": Role.OPERATOR,
    "operation.cancel": Role.OPERATOR,
    "topic.create": Role.OPERATOR,
    "topic.alter_configs": Role.OPERATOR,
    "topic.add_partitions": Role.OPERATOR,
    "topic.delete_records": Role.ADMIN,
    "topic.delete": Role.ADMIN,
    "message.produce": Role.OPERATOR,
    "group.reset_offsets": Role.OPERATOR,
    "group.delete": Role.ADMIN,
    "alert_rule.create": Role.OPERATOR,
    "alert_rule.update": Role.OPERATOR,
    "alert_rule.delete": Role.OPERATOR,
    "silence.create": Role.OPERATOR,
    "silence.delete": Role.OPERATOR,
    "sampler.configure": Role.ADMIN,
    "report.run": Role.OPERATOR,
    "report.schedule": Role.OPERATOR,
}

#: What reading needs, per kind of page or endpoint.
READ_AUDIT = Role.OPERATOR


def ensure_role_groups() -> None:
    """The three role groups exist (created lazily: test databases are flushed, migrations' data is not kept)."""
    for name in ROLE_GROUPS:
        Group.objects.get_or_create(name=name)


def role_of(user: Any) -> Role:
    if user is None or isinstance(user, AnonymousUser) or not user.is_authenticated or not user.is_active:
        return Role.NONE
    cached = getattr(user, "_console_role", None)
    if cached is not None:
        return cached
    if user.is_superuser:
        role = Role.ADMIN
    else:
        names = user.groups.filter(name__in=ROLE_GROUPS).values_list("name", flat=True)
        role = max((ROLE_GROUPS[n] for n in names), default=Role.NONE)
    user._console_role = role
    return role


def set_role(user: Any, role: Role) -> None:
    """Put the user in exactly the group of `role` (Role.NONE removes every role)."""
    ensure_role_groups()
    user.groups.remove(*Group.objects.filter(name__in=ROLE_GROUPS))
    if role is not Role.NONE:
        user.groups.add(Group.objects.get(name=role.label))
    user.__dict__.pop("_console_role", None)


def can(user: Any, action: str) -> bool:
    return role_of(user) >= ACTIONS[action]


def check_role(user: Any, needed: Role, what: str) -> None:
    role = role_of(user)
    if role < needed:
        have = "no role" if role is Role.NONE else f"the {role.label} role"
        raise PermissionDenied(f"{what} needs the {needed.label} role; you have {have}")


def role_context(request) -> dict[str, Any]:
    """Template context: the user's role and a `can` map of every action, for showing only usable controls."""
    role = role_of(getattr(request, "user", None))
    return {
        "role": role,
        "can": {name.replace(".", "_"): role >= needed for name, needed in ACTIONS.items()},
        "can_read_audit": role >= READ_AUDIT,
    }


class RolePermission(BasePermission):
    """DRF: reads need the view's `read_role` (viewer by default); a write method needs the role of the action
    the view names for it in `write_actions` ({"POST": "topic.create"}). A write method the view does not
    name is refused, so that no endpoint can write without a role check."""

    message = "You do not have the role this request needs."

    def has_permission(self, request, view) -> bool:
        role = role_of(request.user)
        if request.method in ("GET", "HEAD", "OPTIONS"):
            needed = getattr(view, "read_role", Role.VIEWER)
        else:
            action = getattr(view, "write_actions", {}).get(request.method)
            if action is None:
                return False
            needed = ACTIONS[action]
        if role < needed:
            have = "no role" if role is Role.NONE else f"the {role.label} role"
            self.message = f"This request needs the {needed.label} role; you have {have}."
            if request.method not in ("GET", "HEAD", "OPTIONS") and role is not Role.NONE:
                _record_denied(request, view, action, self.message)
            return False
        return True


def _record_denied(request, view, action: str, message: str) -> None:
    """An API write refused for its role leaves an audit entry, as the same attempt from a page does."""
    from console.audit.models import Outcome
    from console.audit.recording import record
    from console.clusters.models import Cluster

    kwargs = getattr(view, "kwargs", {})
    cluster = Cluster.objects.filter(pk=kwargs.get("cluster_id")).first() if "cluster_id" in kwargs else None
    kind, name = next(
        ((k, str(kwargs[k])) for k in ("topic", "group_id", "broker_id") if k in kwargs),
        ("cluster", cluster.name if cluster else ""),
    )
    record(
        user=request.user,
        source="api",
        action_name=action,
        cluster=cluster,
        resource_type={"group_id": "group", "broker_id": "broker"}.get(kind, kind),
        resource_name=name,
        params={},
        outcome=Outcome.DENIED,
        detail=message,
    )
