"""Pages: operations (history), proposing one, and one operation (its plan, approve and cancel buttons, and its
progress, which the page polls while it runs)."""

from __future__ import annotations

import json

from django.http import HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import reverse

from console.clusters.models import Cluster
from console.errors import Invalid
from console.operations import actions
from console.operations.models import Kind, Operation
from console.web import page, paginate, run_action


@page("operations/list.html", fragment="operations/_list.html")
def operation_list(request):
    operations = Operation.objects.select_related("cluster", "created_by")
    state = request.GET.get("state", "")
    if state:
        operations = operations.filter(state=state)
    return {"page_obj": paginate(request, operations), "state": state, "nav": "operations"}


@page("operations/detail.html", fragment="operations/_progress.html")
def operation_detail(request, operation_id: int):
    operation = get_object_or_404(Operation.objects.select_related("cluster", "created_by"), pk=operation_id)
    return {"operation": operation, "cluster": operation.cluster, "nav": "operations"}


FORM_FIELDS = (
    "cluster",
    "kind",
    "plan",
    "topics",
    "topic",
    "replication_factor",
    "broker",
    "throttle_bytes_per_s",
    "partitions",
)


def _partitions(text: str) -> list[dict]:
    """`orders-0, orders-3` as the API's [{"topic", "partition"}] (topic names may hold dashes)."""
    chosen = []
    for entry in (e.strip() for e in text.replace("\n", ",").split(",")):
        if not entry:
            continue
        topic, _, number = entry.rpartition("-")
        if not topic or not number.isdigit():
            raise Invalid(
                f"{entry!r} is not a partition: write topic-partition, as orders-0", field="partitions"
            )
        chosen.append({"topic": topic, "partition": int(number)})
    return chosen


def _proposal_request(form: dict[str, str]) -> dict:
    """The API's request body from the form's strings."""
    request: dict = {}
    try:
        for key in ("replication_factor", "broker", "throttle_bytes_per_s"):
            if form[key]:
                request[key] = int(form[key])
    except ValueError as exc:
        raise Invalid(f"{key.replace('_', ' ')} must be a whole number", field=key) from exc
    if form["plan"]:
        try:
            request["plan"] = json.loads(form["plan"])
        except json.JSONDecodeError as exc:
            raise Invalid(f"the plan is not JSON: {exc}", field="plan") from exc
    if form["topics"]:
        request["topics"] = [t.strip() for t in form["topics"].split(",") if t.strip()]
    if form["topic"]:
        request["topic"] = form["topic"]
    if form["partitions"] and form["kind"] == "preferred_leader_election":
        request["partitions"] = _partitions(form["partitions"])
    return request


@page("operations/new.html")
def operation_new(request):
    form = {key: request.POST.get(key, request.GET.get(key, "")).strip() for key in FORM_FIELDS}
    if request.method == "POST":
        cluster = get_object_or_404(Cluster, pk=form["cluster"] or 0)
        ok, operation = run_action(
            request,
            lambda: actions.do_propose_operation(
                request.user, cluster, kind=form["kind"], request=_proposal_request(form), source="web"
            ),
            success="Proposed: review the plan, then approve it.",
        )
        if ok:
            return HttpResponseRedirect(reverse("operation", args=[operation.pk]))
    kinds = [(k.value, k.label) for k in Kind if k.value in actions.PROPOSABLE]
    return {"form": form, "kinds": kinds, "nav": "operations"}


def _act(request, operation_id: int, do, success: str):
    operation = get_object_or_404(Operation.objects.select_related("cluster"), pk=operation_id)
    run_action(request, lambda: do(request.user, operation, source="web"), success=success)
    return HttpResponseRedirect(reverse("operation", args=[operation_id]))


@page("operations/detail.html")
def operation_approve(request, operation_id: int):
    return _act(request, operation_id, actions.do_approve_operation, "Approved: a worker runs it now.")


@page("operations/detail.html")
def operation_cancel(request, operation_id: int):
    return _act(request, operation_id, actions.do_cancel_operation, "Cancelled.")
