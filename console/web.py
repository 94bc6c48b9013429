"""What every page shares: login and role checks, the cluster lookup, errors from the cluster shown on the
page, and htmx fragments (a page's view renders only its fragment template when htmx asks)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.utils.cache import patch_vary_headers

from console.access import Role, check_role
from console.clusters.models import Cluster
from console.errors import ConsoleError, NotFound

PAGE_SIZE = 25


def page(template: str, *, fragment: str | None = None, read_role: Role = Role.VIEWER) -> Callable:
    """Decorate a view returning a context dict: login and role required; `cluster_id` in the URL becomes
    `cluster` (404 if unknown); a ConsoleError from the cluster becomes an error panel on the same page (with
    the error's status); an htmx request gets `fragment` alone."""

    def decorate(view: Callable[..., dict[str, Any] | HttpResponse]) -> Callable:
        @login_required
        @functools.wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            check_role(request.user, read_role, "This page")
            context: dict[str, Any] = {"clusters": list(Cluster.objects.all())}
            if "cluster_id" in kwargs:
                cluster = get_object_or_404(Cluster, pk=kwargs.pop("cluster_id"))
                context["cluster"] = kwargs["cluster"] = cluster
            status = 200
            try:
                result = view(request, *args, **kwargs)
            except NotFound as exc:
                raise Http404(exc.message) from exc
            except ConsoleError as exc:
                result = {"page_error": exc.message, "cluster_unavailable": exc.status >= 500}
                status = exc.status
            if isinstance(result, HttpResponse):
                return result
            context.update(result)
            name = fragment if fragment and request.htmx and not request.htmx.boosted else template
            response = render(request, name, context, status=status)
            patch_vary_headers(response, ("HX-Request",))
            return response

        return wrapper

    return decorate


def paginate(request: HttpRequest, items: list | Any, per_page: int = PAGE_SIZE):
    paginator = Paginator(items, per_page)
    return paginator.get_page(request.GET.get("page"))


def run_action(
    request: HttpRequest, fn: Callable[[], Any], *, success: str | None = None
) -> tuple[bool, Any]:
    """Run an action from a form: (True, result) on success (with a flash message), (False, None) after
    putting the error on the page's messages. PermissionDenied propagates (403)."""
    try:
        result = fn()
    except ValidationError as exc:
        for message in exc.messages:
            messages.error(request, message)
        return False, exc
    except ConsoleError as exc:
        messages.error(request, exc.message)
        return False, exc
    if success:
        messages.success(request, success)
    return True, result


def config_change(
    request: HttpRequest, apply: Callable[[dict[str, str | None]], Any], back: str
) -> HttpResponse:
    """A config table's Set or Reset button: apply {name: value} (None resets it) and go back to the table,
    filtered on that config."""
    name = request.POST.get("name", "").strip()
    delete = request.POST.get("op") == "delete"
    value = None if delete else request.POST.get("value", "")
    run_action(
        request,
        lambda: apply({name: value}),
        success=f"{name} {'reset to its default' if delete else f'set to {value!r}'}.",
    )
    return HttpResponseRedirect(f"{back}?q={name}")


def filter_configs(rows: list, query: str) -> list:
    return [c for c in rows if query.lower() in c.name.lower()] if query else rows


def forbidden(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    return render(request, "403.html", {"message": str(exception or "")}, status=403)
