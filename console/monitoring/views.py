"""Pages: the alerts page (rules, open and resolved alerts, silences), and the htmx fragments other pages load:
a group's lag over time, a topic's throughput over time, a cluster's open alerts; and the charts as SVG files."""

from __future__ import annotations

import datetime as dt

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.http import HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from console.access import Role, check_role
from console.clusters.models import Cluster
from console.monitoring import actions
from console.monitoring.charts import Chart
from console.monitoring.models import Alert, AlertRule, AlertState, BrokerTopicCounters, Notification, Silence
from console.monitoring.selectors import group_lag_history, lag_now, topic_throughput
from console.web import page, run_action

MAX_PARTITION_LINES = 8


class RuleForm(forms.ModelForm):
    webhook_url = forms.URLField(required=False, max_length=1000, assume_scheme="https")

    class Meta:
        model = AlertRule
        fields = list(actions.RULE_FIELDS)


class RuleEditForm(RuleForm):
    """A rule's fields as they are; the webhook secret is never sent back to the browser: left empty it stays,
    "clear" removes it."""

    webhook_secret = forms.CharField(
        required=False, max_length=255, widget=forms.PasswordInput(render_value=False),
        help_text="Leave empty to keep the current secret.",
    )  # fmt: skip
    clear_webhook_secret = forms.BooleanField(required=False, label="Clear the webhook secret")

    def changes(self) -> dict:
        """The fields the operator changed, as the action takes them."""
        changed = {
            name: self.cleaned_data[name]
            for name in self.changed_data
            if name in actions.RULE_FIELDS and name != "webhook_secret"
        }
        if self.cleaned_data.get("webhook_secret"):
            changed["webhook_secret"] = self.cleaned_data["webhook_secret"]
        elif self.cleaned_data.get("clear_webhook_secret"):
            changed["webhook_secret"] = ""
        return changed


class SilenceForm(forms.ModelForm):
    class Meta:
        model = Silence
        fields = ["cluster", "rule", "subject_pattern", "starts_at", "ends_at", "comment"]


def _form_errors(request, form) -> None:
    for field, errors in form.errors.items():
        for error in errors:
            messages.error(request, f"{field}: {error}" if field != "__all__" else error)


@page("monitoring/alerts.html")
def alerts_page(request):
    now = dt.datetime.now(tz=dt.UTC)
    return {
        "rules": AlertRule.objects.select_related("cluster"),
        "open_alerts": Alert.objects.exclude(state=AlertState.RESOLVED).select_related("rule", "cluster"),
        "resolved": Alert.objects.filter(state=AlertState.RESOLVED).select_related("rule", "cluster")[:50],
        "silences": Silence.objects.filter(ends_at__gt=now).select_related("rule", "cluster"),
        "notifications": Notification.objects.select_related("alert__rule")[:50],
        "rule_form": RuleForm(),
        "silence_form": SilenceForm(initial={"starts_at": now, "ends_at": now + dt.timedelta(hours=1)}),
        "nav": "alerts",
    }


def _back() -> HttpResponseRedirect:
    return HttpResponseRedirect(reverse("alerts"))


def _create_from_form(request, form, do, *, success: str, what: str) -> HttpResponseRedirect:
    """A create form's POST: the action with the cleaned data, or the form's errors on the page."""
    if form.is_valid():
        run_action(request, lambda: do(request.user, form.cleaned_data, source="web"), success=success)
    else:
        check_role(request.user, Role.OPERATOR, what)
        _form_errors(request, form)
    return _back()


@login_required
@require_POST
def rule_create(request):
    form = RuleForm(request.POST)
    name = request.POST.get("name", "")
    return _create_from_form(
        request, form, actions.do_create_rule, success=f"Rule {name!r} created.", what="Creating rules"
    )


@login_required
@require_POST
def rule_delete(request, rule_id: int):
    rule = get_object_or_404(AlertRule, pk=rule_id)
    run_action(
        request, lambda: actions.do_delete_rule(request.user, rule, source="web"), success="Rule deleted."
    )
    return _back()


def _rule_row(request, rule: AlertRule, **extra) -> HttpResponse:
    return render(request, "monitoring/_rule_row.html", {"r": rule, **extra})


@login_required
def rule_edit(request, rule_id: int):
    """The edit form of one rule, as a table row that htmx swaps in place of the rule's row (a page of its own
    without htmx); its POST changes the rule through the action and answers the updated row, or the form with
    its errors."""
    rule = get_object_or_404(AlertRule.objects.select_related("cluster"), pk=rule_id)
    if request.method != "POST":
        check_role(request.user, Role.OPERATOR, "Editing rules")
        form = RuleEditForm(instance=rule)
        template = "monitoring/_rule_edit.html" if request.htmx else "monitoring/rule_edit.html"
        return render(
            request, template, {"r": rule, "form": form, "nav": "alerts", "clusters": Cluster.objects.all()}
        )
    form = RuleEditForm(request.POST, instance=AlertRule.objects.get(pk=rule.pk))  # the form mutates its copy
    changes = form.changes() if form.is_valid() else {}
    if not changes:
        check_role(request.user, Role.OPERATOR, "Editing rules")  # the action checks (and audits) otherwise
    if form.is_valid():
        try:
            if changes:
                rule = actions.do_update_rule(request.user, rule, changes, source="web")
        except ValidationError as exc:
            rule.refresh_from_db()
            for message in exc.messages:
                form.add_error(None, message)
        else:
            summary = f"Rule {rule.name!r} saved." if changes else "Nothing changed."
            if request.htmx:
                return _rule_row(request, rule, saved=summary)
            messages.success(request, summary)
            return _back()
    if request.htmx:
        return render(request, "monitoring/_rule_edit.html", {"r": rule, "form": form})
    return render(
        request, "monitoring/rule_edit.html",
        {"r": rule, "form": form, "nav": "alerts", "clusters": Cluster.objects.all()},
    )  # fmt: skip


@login_required
def rule_row(request, rule_id: int):
    """One rule's row (what the edit form's Cancel swaps back)."""
    check_role(request.user, Role.VIEWER, "Alert rules")
    return _rule_row(request, get_object_or_404(AlertRule.objects.select_related("cluster"), pk=rule_id))


@login_required
@require_POST
def silence_create(request):
    form = SilenceForm(request.POST)
    return _create_from_form(
        request, form, actions.do_create_silence, success="Silence created.", what="Creating silences"
    )


@login_required
@require_POST
def silence_delete(request, silence_id: int):
    silence = get_object_or_404(Silence, pk=silence_id)
    run_action(
        request,
        lambda: actions.do_delete_silence(request.user, silence, source="web"),
        success="Silence ended.",
    )
    return _back()


def _group_charts(cluster: Cluster, group_id: str) -> dict[str, Chart]:
    history = group_lag_history(cluster, group_id)
    partitions = dict(sorted(history["partitions"].items())[:MAX_PARTITION_LINES])
    return {
        "lag": Chart({"lag": history["lag"]}, "Lag (offsets)", chart_id="chart-group-lag"),
        "lag_seconds": Chart(
            {"lag": history["lag_seconds"]}, "Lag (seconds)", unit="s", chart_id="chart-group-lag-seconds"
        ),
        "partitions": Chart(partitions, "Lag per partition (offsets)", chart_id="chart-partition-lag"),
    }


def _topic_charts(cluster: Cluster, topic: str) -> dict[str, Chart]:
    rates = topic_throughput(cluster, topic)
    return {
        "messages": Chart(
            {"in": rates["messages_in"], "out": rates["messages_out"]},
            "Messages per second",
            chart_id="chart-topic-messages",
        ),
        "bytes": Chart(
            {"in": rates["bytes_in"], "out": rates["bytes_out"]},
            "Bytes per second",
            unit="B",
            chart_id="chart-topic-bytes",
        ),
    }


@page("monitoring/_group_lag.html")
def group_lag(request, cluster, group_id):
    import time

    now_ms = int(time.time() * 1000)
    current = lag_now(cluster, now_ms, group=group_id).get(group_id)
    charts = {name: c.svg() for name, c in _group_charts(cluster, group_id).items()}
    return {"charts": charts, "current": current, "group_id": group_id}


@page("monitoring/_topic_rates.html")
def topic_rates(request, cluster, topic):
    from_metrics = BrokerTopicCounters.objects.filter(cluster=cluster, topic=topic).exists()
    return {
        "charts": {name: c.svg() for name, c in _topic_charts(cluster, topic).items()},
        "topic": topic,
        "from_broker_metrics": from_metrics,
    }


@page("monitoring/_open_alerts.html")
def cluster_alerts(request, cluster):
    return {
        "open_alerts": Alert.objects.filter(cluster=cluster)
        .exclude(state=AlertState.RESOLVED)
        .select_related("rule")
    }


def _image(charts: dict[str, Chart], chart: str, fmt: str, name: str) -> HttpResponse:
    if chart not in charts or fmt not in ("svg", "png"):
        return HttpResponse(f"no chart {chart}.{fmt}; one of {', '.join(charts)}, as svg or png", status=404)
    body, content_type = (
        (charts[chart].svg(), "image/svg+xml") if fmt == "svg" else (charts[chart].png(), "image/png")
    )
    response = HttpResponse(body, content_type=content_type)
    response["Content-Disposition"] = f'inline; filename="{name}-{chart}.{fmt}"'
    return response


@login_required
def group_lag_image(request, cluster_id: int, group_id: str, chart: str, fmt: str):
    check_role(request.user, Role.VIEWER, "This chart")
    cluster = get_object_or_404(Cluster, pk=cluster_id)
    return _image(_group_charts(cluster, group_id), chart, fmt, group_id)


@login_required
def topic_rates_image(request, cluster_id: int, topic: str, chart: str, fmt: str):
    check_role(request.user, Role.VIEWER, "This chart")
    return _image(_topic_charts(get_object_or_404(Cluster, pk=cluster_id), topic), chart, fmt, topic)
