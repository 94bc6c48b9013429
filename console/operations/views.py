"""Pages: operations (history) and one operation, whose progress the page polls while it runs."""

from __future__ import annotations

from django.shortcuts import get_object_or_404

from console.operations.models import Operation
from console.web import page, paginate


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
