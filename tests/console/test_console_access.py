"""Roles: the groups they come from, their order, and the action table."""

from __future__ import annotations

from console.access import ACTIONS, Role, can, role_of, set_role


def test_personas_have_their_roles(personas):
    assert role_of(personas["alice"]) is Role.ADMIN
    assert role_of(personas["oscar"]) is Role.OPERATOR
    assert role_of(personas["victor"]) is Role.VIEWER
    assert role_of(personas["nora"]) is Role.NONE


def test_superuser_is_admin_and_inactive_user_has_no_role(django_user_model):
    root = django_user_model.objects.create_superuser("root", "r@example.com", "pw")
    assert role_of(root) is Role.ADMIN
    root.is_active = False
    root.__dict__.pop("_console_role", None)
    assert role_of(root) is Role.NONE


def test_set_role_replaces_the_previous_one(personas):
    oscar = personas["oscar"]
    set_role(oscar, Role.VIEWER)
    assert list(oscar.groups.values_list("name", flat=True)) == ["viewer"]
    assert role_of(oscar) is Role.VIEWER
    assert not can(oscar, "topic.create")


def test_roles_are_ordered_and_every_action_needs_at_least_an_operator():
    assert Role.NONE < Role.VIEWER < Role.OPERATOR < Role.ADMIN
    assert all(role >= Role.OPERATOR for role in ACTIONS.values())
