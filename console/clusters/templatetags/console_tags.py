"""Template helpers: query strings that keep the current filters, config sources in words, state badges."""

from __future__ import annotations

from django import template
from django.utils.html import format_html

register = template.Library()

SOURCE_LABELS = {
    "DYNAMIC_TOPIC_CONFIG": "topic override",
    "DYNAMIC_BROKER_CONFIG": "dynamic (broker)",
    "DYNAMIC_DEFAULT_BROKER_CONFIG": "dynamic (cluster default)",
    "STATIC_BROKER_CONFIG": "broker properties",
    "DEFAULT_CONFIG": "default",
    "UNKNOWN_CONFIG": "unknown",
}

STATE_BADGES = {
    "STABLE": "badge-ok",
    "EMPTY": "",
    "DEAD": "badge-bad",
    "PREPARING_REBALANCING": "badge-warn",
    "COMPLETING_REBALANCING": "badge-warn",
    "online": "badge-ok",
    "offline": "badge-bad",
    "done": "badge-ok",
    "ok": "badge-ok",
    "running": "badge-info",
    "approved": "badge-info",
    "accepted": "badge-info",
    "proposed": "",
    "failed": "badge-bad",
    "error": "badge-bad",
    "denied": "badge-bad",
    "invalid": "badge-warn",
    "cancelled": "badge-warn",
}


@register.simple_tag(takes_context=True)
def qs(context, **changes) -> str:
    """The current query string with some parameters replaced (None or "" removes them); page resets to 1
    unless it is among the changes."""
    params = context["request"].GET.copy()
    if "page" not in changes:
        params.pop("page", None)
    for key, value in changes.items():
        if value is None or value == "":
            params.pop(key, None)
        else:
            params[key] = value
    encoded = params.urlencode()
    return f"?{encoded}" if encoded else "?"


@register.simple_tag(takes_context=True)
def sort_link(context, column: str, label: str) -> str:
    """A column header link: sorts by the column, toggling direction when it is already the sort."""
    current = context["request"].GET.get("sort", context.get("default_sort", ""))
    descending = current == f"-{column}"
    target = column if descending else f"-{column}" if current == column else column
    arrow = " ↓" if descending else " ↑" if current == column else ""
    css = "sorted" if current.lstrip("-") == column else ""
    return format_html('<a class="{}" href="{}">{}{}</a>', css, qs(context, sort=target), label, arrow)


@register.filter
def source_label(source: str) -> str:
    return SOURCE_LABELS.get(source, source.lower().replace("_", " "))


@register.filter
def state_badge(state: str) -> str:
    label = str(state).replace("_", " ").lower()
    return format_html('<span class="badge {}">{}</span>', STATE_BADGES.get(str(state), ""), label)


@register.filter
def pct(part: float, whole: float) -> int:
    return round(100 * part / whole) if whole else 0


@register.filter
def json_pretty(value) -> str:
    import json

    return json.dumps(value, indent=2, sort_keys=True)
