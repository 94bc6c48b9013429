"""What the lag sampler keeps (a bounded window of offsets and of the brokers' topic counters, per round) and the
alerting records: rules, alerts (one row per rule and subject while it is pending, firing or silenced; resolved
rows are the history), silences (a maintenance window is a silence that starts later) and the notifications
sent."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class SamplerConfig(models.Model):
    """Per cluster: how often the sampler runs and what it saw last (the brokers, for "broker down")."""

    cluster = models.OneToOneField("clusters.Cluster", on_delete=models.CASCADE, related_name="sampler")
    interval_s = models.PositiveIntegerField(default=30)
    enabled = models.BooleanField(default=True)
    last_round_ms = models.BigIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    #: [[broker id, last seen (ms)], ...] for "broker down"
    known_brokers = models.JSONField(default=list, blank=True)


class OffsetSample(models.Model):
    """One group's offsets on one partition in one sampling round."""

    cluster = models.ForeignKey("clusters.Cluster", on_delete=models.CASCADE, related_name="+")
    round_ms = models.BigIntegerField()
    group_id = models.CharField(max_length=255)
    topic = models.CharField(max_length=255)
    partition = models.IntegerField()
    committed = models.BigIntegerField(null=True)
    end = models.BigIntegerField()
    stable = models.BigIntegerField()
    active_members = models.BooleanField(default=False)
    #: the member the partition was assigned to in this round, as DescribeGroups tells it (kafka-lag-exporter's
    #: labels); "unknown" when no member has it (a member-less group, or a partition nobody is assigned)
    member_host = models.CharField(max_length=255, default="unknown")
    consumer_id = models.CharField(max_length=255, default="unknown")
    client_id = models.CharField(max_length=255, default="unknown")
    #: the group commits offsets without the group protocol (ListGroups: no protocol type)
    simple_consumer = models.BooleanField(default=False)

    class Meta:
        indexes = [
            models.Index(fields=["cluster", "group_id", "round_ms"], name="sample_by_group"),
            models.Index(fields=["cluster", "round_ms"], name="sample_by_round"),
        ]


class TopicSample(models.Model):
    """One partition's end offset and size in one sampling round (topic throughput over time)."""

    cluster = models.ForeignKey("clusters.Cluster", on_delete=models.CASCADE, related_name="+")
    round_ms = models.BigIntegerField()
    topic = models.CharField(max_length=255)
    partition = models.IntegerField()
    end = models.BigIntegerField()
    size_bytes = models.BigIntegerField(null=True)
    under_replicated = models.BooleanField(default=False)
    offline = models.BooleanField(default=False)

    class Meta:
        indexes = [models.Index(fields=["cluster", "topic", "round_ms"], name="topic_sample_by_topic")]


class BrokerTopicCounters(models.Model):
    """One broker's per-topic counters in one sampling round, as its Prometheus endpoint (Odradek's
    `odradek.metrics.listener`) served them: the topic's bytes and messages in and bytes out since the broker
    started. Rates come from consecutive rounds of the same broker (a broker restart resets them)."""

    cluster = models.ForeignKey("clusters.Cluster", on_delete=models.CASCADE, related_name="+")
    round_ms = models.BigIntegerField()
    broker_id = models.IntegerField()
    topic = models.CharField(max_length=255)
    bytes_in = models.BigIntegerField()
    bytes_out = models.BigIntegerField()
    messages_in = models.BigIntegerField()

    class Meta:
        indexes = [models.Index(fields=["cluster", "topic", "round_ms"], name="counters_by_topic")]


class Condition(models.TextChoices):
    OFFSET_LAG = "offset_lag", "offset lag > N"
    LAG_SECONDS = "lag_seconds", "lag in seconds > N"
    STATUS = "status", "status at least WARN"
    UNDER_REPLICATED = "under_replicated", "under-replicated partitions > N"
    OFFLINE = "offline", "offline partitions > N"
    BROKER_DOWN = "broker_down", "brokers down > N"


class Severity(models.TextChoices):
    INFO = "info"
    WARNING = "warning"
    CRITICAL = "critical"


class AlertRule(models.Model):
    name = models.CharField(max_length=200, unique=True)
    #: null: every cluster
    cluster = models.ForeignKey("clusters.Cluster", on_delete=models.CASCADE, null=True, blank=True)
    #: shell-style patterns (fnmatch); empty matches everything
    group_pattern = models.CharField(max_length=255, blank=True, default="")
    topic_pattern = models.CharField(max_length=255, blank=True, default="")
    condition = models.CharField(max_length=32, choices=Condition.choices)
    threshold = models.FloatField(default=0)
    for_s = models.PositiveIntegerField(
        default=0, help_text="How long the condition must hold before firing."
    )
    severity = models.CharField(max_length=16, choices=Severity.choices, default=Severity.WARNING)
    email_to = models.CharField(
        max_length=1000, blank=True, default="", help_text="Comma-separated addresses."
    )
    webhook_url = models.URLField(max_length=1000, blank=True, default="")
    webhook_secret = models.CharField(max_length=255, blank=True, default="")
    enabled = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class AlertState(models.TextChoices):
    PENDING = "pending"
    FIRING = "firing"
    SILENCED = "silenced"
    RESOLVED = "resolved"


class Alert(models.Model):
    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="alerts")
    cluster = models.ForeignKey("clusters.Cluster", on_delete=models.CASCADE, related_name="+")
    #: what the alert is about: a group ("group:billing") or the cluster ("cluster")
    subject = models.CharField(max_length=300)
    state = models.CharField(max_length=16, choices=AlertState.choices)
    value = models.FloatField(default=0)
    since_ms = models.BigIntegerField(help_text="When the condition began to hold.")
    fired_ms = models.BigIntegerField(null=True)
    resolved_ms = models.BigIntegerField(null=True)
    notified_firing = models.BooleanField(default=False)

    class Meta:
        ordering = ["-since_ms"]
        indexes = [models.Index(fields=["rule", "subject", "state"], name="alert_by_subject")]


class Silence(models.Model):
    """Suppresses notifications of matching alerts between `starts_at` and `ends_at` (a maintenance window
    when it starts later). Empty fields match everything."""

    cluster = models.ForeignKey("clusters.Cluster", on_delete=models.CASCADE, null=True, blank=True)
    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, null=True, blank=True)
    subject_pattern = models.CharField(max_length=300, blank=True, default="")
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    comment = models.CharField(max_length=500, blank=True, default="")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True)

    class Meta:
        ordering = ["-starts_at"]


class Notification(models.Model):
    alert = models.ForeignKey(Alert, on_delete=models.CASCADE, related_name="notifications")
    channel = models.CharField(max_length=16)  # email, webhook
    kind = models.CharField(max_length=16)  # firing, resolved
    status = models.CharField(max_length=16, default="pending")  # pending, sent, failed, rate_limited
    attempts = models.IntegerField(default=0)
    detail = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
