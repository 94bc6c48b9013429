"""Pages: consumer groups (sortable by lag), one group, resetting its offsets with a preview, deleting it."""

from __future__ import annotations

import datetime as dt

from django.http import HttpResponseRedirect
from django.urls import reverse
from django.utils import timezone

from console.clusters.client import client_for
from console.errors import ConsoleError, Invalid
from console.groups import actions, selectors
from console.web import page, paginate, run_action

STATES = ("STABLE", "EMPTY", "PREPARING_REBALANCING", "COMPLETING_REBALANCING", "DEAD")


@page("groups/list.html", fragment="groups/_list.html")
def group_list(request, cluster):
    query, state = request.GET.get("q", ""), request.GET.get("state", "")
    sort = request.GET.get("sort", "group_id")
    rows = selectors.group_list(cluster, query=query, state=state, sort=sort)
    page_obj = paginate(request, rows)
    selectors.fill_rows(cluster, list(page_obj.object_list))
    return {
        "page_obj": page_obj,
        "q": query,
        "state": state,
        "states": STATES,
        "default_sort": "group_id",
        "nav": "groups",
    }


@page("groups/detail.html")
def group_detail(request, cluster, group_id):
    description, rows = selectors.group_detail(cluster, group_id)
    committed = [r for r in rows if r.committed is not None]
    return {
        "group": description,
        "rows": rows,
        "total_lag": sum(r.lag or 0 for r in committed) if committed else None,
        "group_id": group_id,
        "nav": "groups",
    }


def _reset_params(data) -> dict:
    to = data.get("to", "earliest")
    params: dict = {"to": to, "topic": data.get("topic") or None}
    raw_parts = (data.get("partitions") or "").strip()
    if raw_parts:
        try:
            params["partitions"] = sorted({int(p) for p in raw_parts.replace(" ", "").split(",") if p})
        except ValueError:
            raise Invalid("partitions: a comma-separated list of numbers", field="partitions") from None
        if not params["topic"]:
            raise Invalid("choose the topic the partitions belong to", field="topic")
    if to == "timestamp":
        raw = (data.get("timestamp") or "").strip()
        try:
            when = dt.datetime.fromisoformat(raw)
        except ValueError:
            raise Invalid("time must look like 2024-05-01T12:00", field="timestamp") from None
        if timezone.is_naive(when):
            when = when.replace(tzinfo=dt.UTC)
        params["value"] = int(when.timestamp() * 1000)
    elif to in ("offset", "shift"):
        try:
            params["value"] = int((data.get("value") or "").strip())
        except ValueError:
            raise Invalid(
                f"{'offset' if to == 'offset' else 'shift'} must be a whole number", field="value"
            ) from None
    return params


@page("groups/reset.html")
def group_reset(request, cluster, group_id):
    description, rows = selectors.group_detail(cluster, group_id)
    context = {
        "group": description,
        "group_id": group_id,
        "topics": sorted({r.topic for r in rows})
        or sorted(t for t in client_for(cluster).metadata().topics if not t.startswith("__")),
        "all_topics": sorted(client_for(cluster).metadata().topics),
        "form": request.POST if request.method == "POST" else request.GET,
        "targets": actions.RESET_TARGETS,
        "nav": "groups",
    }
    if request.method != "POST":
        return context
    execute = request.POST.get("execute") == "1"
    try:
        params = _reset_params(request.POST)
        if execute:
            ok, _result = run_action(
                request,
                lambda: actions.do_reset_offsets(
                    request.user, cluster, group_id, dry_run=False, source="web", **params
                ),
                success=f"Offsets of {group_id} reset.",
            )
            if ok:
                return HttpResponseRedirect(reverse("group", args=[cluster.pk, group_id]))
        else:
            context["preview"] = actions.do_reset_offsets(
                request.user, cluster, group_id, dry_run=True, source="web", **params
            )
    except ConsoleError as exc:
        context["reset_error"] = exc.message
    return context


@page("groups/detail.html")
def group_delete(request, cluster, group_id):
    ok, _ = run_action(
        request,
        lambda: actions.do_delete_group(request.user, cluster, group_id, source="web"),
        success=f"Group {group_id} deleted.",
    )
    if ok:
        return HttpResponseRedirect(reverse("groups", args=[cluster.pk]))
    return HttpResponseRedirect(reverse("group", args=[cluster.pk, group_id]))
