"""Consumer-group lag kept between page views, so that the group list can sort a thousand groups by lag
without asking the cluster for every group's offsets on each request. The cluster stays the source of truth:
rows are refreshed by a beat task and by every page that computes a group's lag live."""

from django.db import models


class GroupLag(models.Model):
    cluster = models.ForeignKey("clusters.Cluster", on_delete=models.CASCADE, related_name="group_lags")
    group_id = models.CharField(max_length=255)
    #: Sum over partitions of (end offset - committed offset); null when the group has no committed offsets.
    lag = models.BigIntegerField(null=True)
    partitions = models.IntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["cluster", "group_id"], name="one_lag_row_per_group")]
        indexes = [models.Index(fields=["cluster", "lag"], name="group_lag_by_lag")]
