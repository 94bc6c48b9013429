"""Pages: the cluster list (and registering one), a cluster's overview, its brokers and one broker."""

from __future__ import annotations

from django.http import HttpResponseRedirect
from django.shortcuts import redirect
from django.urls import reverse

from console.access import can
from console.clusters import actions, selectors
from console.clusters.client import client_for
from console.clusters.models import Cluster
from console.errors import Invalid
from console.web import config_change, filter_configs, page, run_action


def home(request):
    first = Cluster.objects.first()
    if first is None:
        return redirect("clusters")
    return redirect("overview", cluster_id=first.pk)


@page("clusters/list.html")
def cluster_list(request):
    form = {"name": "", "bootstrap_servers": "", "zookeeper_connect": ""}
    if request.method == "POST" and request.POST.get("form") == "provision":
        return _provision(request)
    if request.method == "POST":
        form = {k: request.POST.get(k, "").strip() for k in form}
        ok, cluster = run_action(
            request,
            lambda: actions.do_register_cluster(request.user, source="web", **form),
            success=f"Cluster {form['name']} registered.",
        )
        if ok:
            return HttpResponseRedirect(reverse("overview", args=[cluster.pk]))
    return {"form": form, "all_clusters": Cluster.objects.all()}


def _provision(request):
    def provision():
        try:
            brokers = int(request.POST.get("brokers") or 3)
            base_port = int(request.POST.get("base_port") or 0)
        except ValueError as exc:
            raise Invalid("brokers and base port must be numbers") from exc
        racks = [r.strip() for r in request.POST.get("racks", "").split(",") if r.strip()]
        return actions.do_provision_cluster(
            request.user,
            name=request.POST.get("name", "").strip(),
            brokers=brokers,
            base_port=base_port,
            racks=racks,
            source="web",
        )

    ok, cluster = run_action(
        request, provision, success="Cluster provisioned: the supervisor starts its brokers."
    )
    if ok:
        return HttpResponseRedirect(reverse("brokers", args=[cluster.pk]))
    return HttpResponseRedirect(reverse("clusters"))


@page("clusters/overview.html", fragment="clusters/_overview.html")
def overview(request, cluster):
    return {"overview": selectors.overview(cluster), "nav": "overview"}


@page("clusters/brokers.html", fragment="clusters/_brokers_live.html")
def broker_list(request, cluster):
    rows, _, controller_id, disk_error = selectors.brokers(cluster, with_disk=not request.htmx)
    return {
        "brokers": rows,
        "controller_id": controller_id,
        "disk_error": disk_error,
        "managed": cluster.managed,
        "missing": selectors.missing_brokers(cluster),
        "nav": "brokers",
    }


@page("clusters/brokers.html")
def broker_add(request, cluster):
    run_action(
        request,
        lambda: actions.do_add_broker(request.user, cluster, source="web"),
        success="Broker added: the supervisor starts it; a reassignment moves replicas onto it.",
    )
    return HttpResponseRedirect(reverse("brokers", args=[cluster.pk]))


def _self_healing_changes(form) -> dict:
    """The failover settings from the Brokers page's form: a grace period in seconds (empty: no failover) and
    what a failed-over broker gets when it returns."""
    grace = form.get("failover_grace_s", "").strip()
    try:
        grace_s = int(grace) if grace else None
    except ValueError as exc:
        raise Invalid("the grace period must be a whole number of seconds", field="failover_grace_s") from exc
    if grace_s is not None and grace_s < 1:
        raise Invalid("the grace period must be at least 1 second", field="failover_grace_s")
    on_return = form.get("failover_on_return", "empty")
    if on_return not in ("empty", "rebalance"):
        raise Invalid("a returning broker rejoins empty or is rebalanced in", field="failover_on_return")
    return {"failover_grace_s": grace_s, "failover_on_return": on_return}


@page("clusters/brokers.html")
def broker_self_healing(request, cluster):
    run_action(
        request,
        lambda: actions.do_update_cluster(
            request.user, cluster, changes=_self_healing_changes(request.POST), source="web"
        ),
        success="Failover settings saved.",
    )
    return HttpResponseRedirect(reverse("brokers", args=[cluster.pk]))


@page("clusters/broker.html", fragment="clusters/_configs.html")
def broker_detail(request, cluster, broker_id):
    back = reverse("broker", args=[cluster.pk, broker_id])
    if request.method == "POST":
        return config_change(
            request,
            lambda changes: actions.do_alter_broker_configs(
                request.user, cluster, broker_id, changes=changes, source="web"
            ),
            back,
        )
    query = request.GET.get("q", "").strip()
    configs = filter_configs(client_for(cluster).broker_configs(broker_id), query)
    return {
        "broker": selectors.broker(cluster, broker_id),
        "configs": configs,
        "q": query,
        "nav": "brokers",
        "config_target": back,
        "can_edit_configs": can(request.user, "broker.alter_configs"),
    }
