"""Writes of lag monitoring: alert rules, silences and a cluster's sampling interval. Every one is audited
(console.audit.recording.action); the pages and the API call these functions."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError

from console.audit.recording import action
from console.monitoring.models import AlertRule, SamplerConfig, Silence

RULE_FIELDS = (
    "name",
    "cluster",
    "group_pattern",
    "topic_pattern",
    "condition",
    "threshold",
    "for_s",
    "severity",
    "email_to",
    "webhook_url",
    "webhook_secret",
    "enabled",
)


def _audit_params(values: dict[str, Any]) -> dict[str, Any]:
    out = {k: (v.name if hasattr(v, "name") and k == "cluster" else v) for k, v in values.items()}
    if out.get("webhook_secret"):
        out["webhook_secret"] = "***"
    return out


def _save(obj) -> None:
    obj.full_clean()
    obj.save()


def do_create_rule(user: Any, values: dict[str, Any], *, source: str) -> AlertRule:
    values = {k: v for k, v in values.items() if k in RULE_FIELDS}
    with action(
        user,
        "alert_rule.create",
        source=source,
        cluster=values.get("cluster"),
        resource_type="alert_rule",
        resource_name=str(values.get("name", "")),
        params=_audit_params(values),
    ):
        rule = AlertRule(**values)
        _save(rule)
    return rule


def do_update_rule(user: Any, rule: AlertRule, changes: dict[str, Any], *, source: str) -> AlertRule:
    changes = {k: v for k, v in changes.items() if k in RULE_FIELDS}
    with action(
        user,
        "alert_rule.update",
        source=source,
        cluster=rule.cluster,
        resource_type="alert_rule",
        resource_name=rule.name,
        params=_audit_params(changes),
    ):
        for key, value in changes.items():
            setattr(rule, key, value)
        _save(rule)
    return rule


def do_delete_rule(user: Any, rule: AlertRule, *, source: str) -> None:
    with action(
        user,
        "alert_rule.delete",
        source=source,
        cluster=rule.cluster,
        resource_type="alert_rule",
        resource_name=rule.name,
        params={},
    ):
        rule.delete()


def do_create_silence(user: Any, values: dict[str, Any], *, source: str) -> Silence:
    with action(
        user,
        "silence.create",
        source=source,
        cluster=values.get("cluster"),
        resource_type="silence",
        resource_name=values.get("subject_pattern", "") or "*",
        params=_audit_params(
            {k: (str(v) if k in ("starts_at", "ends_at") else v) for k, v in values.items() if k != "rule"}
            | ({"rule": values["rule"].name} if values.get("rule") else {})
        ),
    ):
        silence = Silence(**values, created_by=user if getattr(user, "is_authenticated", False) else None)
        if silence.ends_at <= silence.starts_at:
            raise ValidationError({"ends_at": "ends_at must be after starts_at"})
        _save(silence)
    return silence


def do_delete_silence(user: Any, silence: Silence, *, source: str) -> None:
    with action(
        user,
        "silence.delete",
        source=source,
        cluster=silence.cluster,
        resource_type="silence",
        resource_name=silence.subject_pattern or "*",
        params={"id": silence.pk},
    ):
        silence.delete()


def do_configure_sampler(user: Any, cluster, *, interval_s: int, enabled: bool, source: str) -> SamplerConfig:
    with action(
        user,
        "sampler.configure",
        source=source,
        cluster=cluster,
        resource_type="cluster",
        resource_name=cluster.name,
        params={"interval_s": interval_s, "enabled": enabled},
    ):
        if not 5 <= interval_s <= 3600:
            raise ValidationError({"interval_s": "interval_s must be between 5 and 3600 seconds"})
        config, _ = SamplerConfig.objects.get_or_create(cluster=cluster)
        config.interval_s, config.enabled = interval_s, enabled
        config.save()
    return config
