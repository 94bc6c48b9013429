"""Alert evaluation: each enabled rule measures its subjects after a sampling round, and every (rule, subject)
steps one table-driven state machine; the transitions that notify queue one notification per channel.

States: (none) -> PENDING while the condition holds for less than the rule's `for_s`, -> FIRING once it held
long enough (notify "firing"), -> RESOLVED when it stops holding (notify "resolved" if "firing" was sent).
A matching silence (or maintenance window) turns FIRING into SILENCED, which notifies nothing; an alert that
stays silenced until it clears resolves without a notification. A PENDING alert that clears is dropped.

Deduplication: one open alert per (rule, subject); notifications happen on transitions only. Rate limit: at
most CONSOLE_ALERT_NOTIFICATIONS_PER_HOUR notifications per rule per hour; the rest are recorded as
"rate_limited" and not sent."""

from __future__ import annotations

import datetime as dt
import enum
import fnmatch
import logging

from django.conf import settings
from django.db import transaction
from django.db.models import Q

from console.clusters.client import client_for
from console.errors import ConsoleError
from console.monitoring.lag import GroupStatus
from console.monitoring.models import (
    Alert,
    AlertRule,
    AlertState,
    Condition,
    Notification,
    SamplerConfig,
    Silence,
    TopicSample,
)
from console.monitoring.selectors import lag_now

log = logging.getLogger(__name__)


class Event(enum.Enum):
    HOLDS = "holds"  # the condition holds, not yet for `for_s`
    SUSTAINED = "sustained"  # it held for at least `for_s`
    SUSTAINED_SILENCED = "sustained_silenced"  # ... and a silence matches
    CLEARS = "clears"  # it does not hold


P, F, S, R = AlertState.PENDING, AlertState.FIRING, AlertState.SILENCED, AlertState.RESOLVED
#: (state, event) -> (next state, notification kind or None); None as a state: no open alert
TRANSITIONS: dict[tuple[AlertState | None, Event], tuple[AlertState | None, str | None]] = {
    (None, Event.HOLDS): (P, None),
    (None, Event.SUSTAINED): (F, "firing"),
    (None, Event.SUSTAINED_SILENCED): (S, None),
    (None, Event.CLEARS): (None, None),
    (P, Event.HOLDS): (P, None),
    (P, Event.SUSTAINED): (F, "firing"),
    (P, Event.SUSTAINED_SILENCED): (S, None),
    (P, Event.CLEARS): (None, None),
    (F, Event.HOLDS): (F, None),
    (F, Event.SUSTAINED): (F, None),
    (F, Event.SUSTAINED_SILENCED): (S, None),
    (F, Event.CLEARS): (R, "resolved"),
    (S, Event.HOLDS): (S, None),
    (S, Event.SUSTAINED): (F, "firing"),
    (S, Event.SUSTAINED_SILENCED): (S, None),
    (S, Event.CLEARS): (R, None),
}


def step(
    state: AlertState | None, event: Event, *, notified_firing: bool
) -> tuple[AlertState | None, str | None]:
    """The next state and the notification to send: "firing" once per alert, "resolved" only after it."""
    next_state, kind = TRANSITIONS[(state, event)]
    if (kind == "resolved") != notified_firing:
        kind = None
    return next_state, kind


# -- measuring


def _matches(pattern: str, value: str) -> bool:
    return not pattern or fnmatch.fnmatchcase(value, pattern)


def measure(rule: AlertRule, cluster, now_ms: int, lags=None) -> dict[str, float]:
    """{subject: value} for the rule's scope in the newest round; the condition holds where value > threshold
    (for "status": the group status's number, WARN = 1, ERR = 2)."""
    if rule.condition in (Condition.OFFSET_LAG, Condition.LAG_SECONDS, Condition.STATUS):
        out = {}
        for group, g in (lags if lags is not None else lag_now(cluster, now_ms)).items():
            if not _matches(rule.group_pattern, group):
                continue
            parts = [p for p in g.partitions if _matches(rule.topic_pattern, p.topic)]
            if not parts:
                continue
            if rule.condition == Condition.OFFSET_LAG:
                value = float(sum(p.lag or 0 for p in parts))
            elif rule.condition == Condition.LAG_SECONDS:
                value = max(p.lag_seconds or 0.0 for p in parts)
            else:
                worst = max(p.status for p in parts)
                value = float(GroupStatus.ERR if worst >= 2 else worst)
            out[f"group:{group}"] = value
        return out
    if rule.condition in (Condition.UNDER_REPLICATED, Condition.OFFLINE):
        newest = (
            TopicSample.objects.filter(cluster=cluster)
            .order_by("-round_ms")
            .values_list("round_ms", flat=True)
            .first()
        )
        if newest is None:
            return {}
        flag = "under_replicated" if rule.condition == Condition.UNDER_REPLICATED else "offline"
        topics = TopicSample.objects.filter(cluster=cluster, round_ms=newest, **{flag: True}).values_list(
            "topic", flat=True
        )
        return {"cluster": float(sum(1 for t in topics if _matches(rule.topic_pattern, t)))}
    # broker down: brokers seen before that the cluster's metadata does not list now (all, if unreachable)
    config = SamplerConfig.objects.filter(cluster=cluster).first()
    known = {int(broker) for broker, _ in (config.known_brokers if config else [])}
    try:
        alive = {b.id for b in client_for(cluster).metadata(max_age_s=0).brokers}
    except ConsoleError:
        alive = set()
    return {"cluster": float(len(known - alive))}


def _threshold_holds(rule: AlertRule, value: float) -> bool:
    if rule.condition == Condition.STATUS:
        return value >= GroupStatus.WARN
    return value > rule.threshold


def silenced(rule: AlertRule, cluster, subject: str, now: dt.datetime) -> bool:
    silences = (
        Silence.objects.filter(starts_at__lte=now, ends_at__gt=now)
        .filter(Q(rule__isnull=True) | Q(rule=rule))
        .filter(Q(cluster__isnull=True) | Q(cluster=cluster))
    )
    return any(_matches(s.subject_pattern, subject) for s in silences)


# -- evaluating


def evaluate_cluster(cluster, now_ms: int) -> list[Notification]:
    """Step every (rule, subject) of the cluster at `now_ms`; returns the notifications queued."""
    now = dt.datetime.fromtimestamp(now_ms / 1000, tz=dt.UTC)
    rules = AlertRule.objects.filter(enabled=True).filter(Q(cluster__isnull=True) | Q(cluster=cluster))
    lags = None
    queued: list[Notification] = []
    for rule in rules:
        if rule.condition in (Condition.OFFSET_LAG, Condition.LAG_SECONDS, Condition.STATUS) and lags is None:
            lags = lag_now(cluster, now_ms)
        values = measure(rule, cluster, now_ms, lags)
        open_alerts = {
            a.subject: a
            for a in Alert.objects.filter(rule=rule, cluster=cluster).exclude(state=AlertState.RESOLVED)
        }
        for subject in sorted(set(values) | set(open_alerts)):
            value = values.get(subject, 0.0)
            alert = open_alerts.get(subject)
            holds = subject in values and _threshold_holds(rule, value)
            if not holds:
                event = Event.CLEARS
            else:
                since = alert.since_ms if alert else now_ms
                if now_ms - since < rule.for_s * 1000:
                    event = Event.HOLDS
                elif silenced(rule, cluster, subject, now):
                    event = Event.SUSTAINED_SILENCED
                else:
                    event = Event.SUSTAINED
            state = AlertState(alert.state) if alert else None
            next_state, kind = step(state, event, notified_firing=bool(alert and alert.notified_firing))
            with transaction.atomic():
                if next_state is None:
                    if alert is not None:
                        alert.delete()
                    continue
                if alert is None:
                    alert = Alert(rule=rule, cluster=cluster, subject=subject, since_ms=now_ms)
                alert.state = next_state
                alert.value = value if holds else alert.value
                if next_state == AlertState.FIRING and alert.fired_ms is None:
                    alert.fired_ms = now_ms
                if next_state == AlertState.RESOLVED:
                    alert.resolved_ms = now_ms
                if kind == "firing":
                    alert.notified_firing = True
                alert.save()
                if kind is not None:
                    queued += queue_notifications(alert, kind, now)
    return queued


def queue_notifications(alert: Alert, kind: str, now: dt.datetime) -> list[Notification]:
    rule = alert.rule
    channels = (["email"] if rule.email_to.strip() else []) + (["webhook"] if rule.webhook_url else [])
    recent = (
        Notification.objects.filter(alert__rule=rule, created_at__gte=now - dt.timedelta(hours=1))
        .exclude(status="rate_limited")
        .count()
    )
    out = []
    for channel in channels:
        limited = recent >= settings.CONSOLE_ALERT_NOTIFICATIONS_PER_HOUR
        note = Notification.objects.create(
            alert=alert, channel=channel, kind=kind, status="rate_limited" if limited else "pending"
        )
        recent += 1
        out.append(note)
        if not limited:
            transaction.on_commit(lambda pk=note.pk: _enqueue(pk), robust=True)
    return out


def _enqueue(notification_id: int) -> None:
    from console.monitoring.tasks import deliver

    try:
        deliver.delay(notification_id)
    except Exception as exc:  # Redis down: deliver in this process
        log.warning(
            "notification %s delivered inline, the task queue is unreachable: %s", notification_id, exc
        )
        deliver(notification_id)


def payload(note: Notification) -> dict:
    alert, rule = note.alert, note.alert.rule
    return {
        "kind": note.kind,
        "rule": rule.name,
        "severity": rule.severity,
        "condition": rule.condition,
        "threshold": rule.threshold,
        "cluster": alert.cluster.name,
        "subject": alert.subject,
        "state": alert.state,
        "value": alert.value,
        "since_ms": alert.since_ms,
        "fired_ms": alert.fired_ms,
        "resolved_ms": alert.resolved_ms,
        "alert_id": alert.pk,
    }
