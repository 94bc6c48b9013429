"""Pages: the cluster list (and registering one), a cluster's overview, its brokers and one broker."""

from __future__ import annotations

from django.http import HttpResponseRedirect
from django.shortcuts import redirect
from django.urls import reverse

from console.access import can
from console.clusters import actions, selectors
from console.clusters.client import client_for
from console.clusters.models import Cluster
from console.web import config_change, filter_configs, page, run_action


def home(request):
    first = Cluster.objects.first()
    if first is None:
        return redirect("clusters")
    return redirect("overview", cluster_id=first.pk)


@page("clusters/list.html")
def cluster_list(request):
    form = {"name": "", "bootstrap_servers": "", "zookeeper_connect": ""}
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


@page("clusters/overview.html", fragment="clusters/_overview.html")
def overview(request, cluster):
    return {"overview": selectors.overview(cluster), "nav": "overview"}


@page("clusters/brokers.html")
def broker_list(request, cluster):
    rows, _, controller_id, disk_error = selectors.brokers(cluster)
    return {"brokers": rows, "controller_id": controller_id, "disk_error": disk_error, "nav": "brokers"}


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
