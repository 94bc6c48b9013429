"""Celery tasks of lag monitoring: sampling each cluster when its interval has passed (beat runs `sample_due`
every few seconds), evaluating the alert rules after each round, and delivering notifications (webhooks are
retried with exponential backoff)."""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
import urllib.error
import urllib.request

from celery import shared_task
from django.core.mail import send_mail

from console.clusters.models import Cluster
from console.errors import ConsoleError
from console.monitoring.alerting import evaluate_cluster, payload
from console.monitoring.models import Notification, SamplerConfig
from console.monitoring.sampler import sample_cluster

log = logging.getLogger(__name__)
SIGNATURE_HEADER = "X-Odradek-Signature"
WEBHOOK_TIMEOUT_S = 10


def _now_ms() -> int:
    return int(time.time() * 1000)


def sample_and_evaluate(cluster: Cluster, now_ms: int | None = None) -> None:
    """One round for one cluster, then its alert rules. A cluster that cannot be reached still has its rules
    evaluated (broker down fires; lag rules see the last round)."""
    now_ms = _now_ms() if now_ms is None else now_ms
    try:
        sample_cluster(cluster, now_ms)
    except ConsoleError as exc:
        log.warning("lag of cluster %s not sampled: %s", cluster.name, exc.message)
        SamplerConfig.objects.update_or_create(
            cluster=cluster, defaults={"last_error": exc.message[:2000], "last_round_ms": now_ms}
        )
    evaluate_cluster(cluster, now_ms)


@shared_task(ignore_result=True)
def sample_due(now_ms: int | None = None) -> int:
    """Sample every cluster whose interval has passed since its last round; returns how many were sampled."""
    now_ms = _now_ms() if now_ms is None else now_ms
    done = 0
    for cluster in Cluster.objects.all():
        config, _ = SamplerConfig.objects.get_or_create(cluster=cluster)
        if not config.enabled:
            continue
        if config.last_round_ms is not None and now_ms - config.last_round_ms < config.interval_s * 1000:
            continue
        # claim the round (compare-and-set): a slow round is not started again by the next beat's task
        claimed = SamplerConfig.objects.filter(pk=config.pk, last_round_ms=config.last_round_ms).update(
            last_round_ms=now_ms
        )
        if not claimed:
            continue
        sample_and_evaluate(cluster, now_ms)
        done += 1
    return done


def signature(secret: str, body: bytes) -> str:
    """The value of the X-Odradek-Signature header: "sha256=" and the hex HMAC-SHA256 of the body."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


@shared_task(
    bind=True,
    ignore_result=True,
    autoretry_for=(urllib.error.URLError, OSError),
    retry_backoff=2,
    retry_backoff_max=300,
    max_retries=6,
)
def deliver(self, notification_id: int) -> None:
    note = Notification.objects.select_related("alert__rule", "alert__cluster").get(pk=notification_id)
    if note.status == "sent":
        return
    rule = note.alert.rule
    data = payload(note)
    note.attempts += 1
    try:
        if note.channel == "email":
            subject = f"[{rule.severity}] {note.kind}: {rule.name} ({data['cluster']} {data['subject']})"
            body = "\n".join(f"{k}: {v}" for k, v in data.items())
            send_mail(subject, body, None, [a.strip() for a in rule.email_to.split(",") if a.strip()])
        else:
            body = json.dumps(data, sort_keys=True).encode()
            headers = {"Content-Type": "application/json", "User-Agent": "odradek-console"}
            if rule.webhook_secret:
                headers[SIGNATURE_HEADER] = signature(rule.webhook_secret, body)
            request = urllib.request.Request(rule.webhook_url, data=body, headers=headers, method="POST")
            with urllib.request.urlopen(request, timeout=WEBHOOK_TIMEOUT_S) as response:
                response.read()
    except Exception as exc:
        final = self.request.retries >= self.max_retries or not isinstance(
            exc, (urllib.error.URLError, OSError)
        )
        note.status = "failed" if final else "pending"
        note.detail = str(exc)[:2000]
        note.save(update_fields=["attempts", "status", "detail"])
        raise
    note.status, note.detail = "sent", ""
    note.save(update_fields=["attempts", "status", "detail"])
