"""Celery tasks about consumer groups."""

from __future__ import annotations

import logging

from celery import shared_task

from console.clusters.client import client_for
from console.clusters.models import Cluster
from console.errors import ConsoleError
from console.groups.models import GroupLag
from console.groups.selectors import compute_lag

log = logging.getLogger(__name__)
BATCH = 50


@shared_task(ignore_result=True)
def refresh_all_lag() -> int:
    """Recompute every group's lag (beat, every 30 s), so that the group list sorts by lag without asking the
    cluster for every group on each request; forget groups that no longer exist."""
    done = 0
    for cluster in Cluster.objects.all():
        try:
            ids = [g.group_id for g in client_for(cluster).list_groups()]
            for start in range(0, len(ids), BATCH):
                done += len(compute_lag(cluster, ids[start : start + BATCH]))
        except ConsoleError as exc:
            log.warning("group lag of cluster %s not refreshed: %s", cluster.name, exc.message)
            continue
        GroupLag.objects.filter(cluster=cluster).exclude(group_id__in=ids).delete()
    return done
