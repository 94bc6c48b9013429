"""Page: the audit trail, filtered by user, cluster, action, outcome and text."""

from __future__ import annotations

from console.access import READ_AUDIT
from console.audit.models import AuditEntry, Outcome
from console.web import page, paginate

FILTERS = ("user", "cluster", "action", "outcome", "q")


def filtered(params) -> tuple[object, dict[str, str]]:
    entries = AuditEntry.objects.select_related("operation")
    values = {k: (params.get(k) or "").strip() for k in FILTERS}
    if values["user"]:
        entries = entries.filter(username=values["user"])
    if values["cluster"]:
        entries = entries.filter(cluster_name=values["cluster"])
    if values["action"]:
        entries = entries.filter(action__startswith=values["action"])
    if values["outcome"]:
        entries = entries.filter(outcome=values["outcome"])
    if values["q"]:
        entries = entries.filter(resource_name__icontains=values["q"])
    return entries, values


@page("audit/list.html", fragment="audit/_list.html", read_role=READ_AUDIT)
def audit_list(request):
    entries, values = filtered(request.GET)
    return {
        "page_obj": paginate(request, entries, per_page=50),
        "filters": values,
        "outcomes": Outcome.values,
        "actions": sorted(set(AuditEntry.objects.values_list("action", flat=True).distinct())),
        "nav": "audit",
    }
