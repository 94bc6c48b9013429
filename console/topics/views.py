"""Pages: topics (list, create), a topic's partitions, configs, messages (browse, tail, produce) and
its settings (add partitions, delete records, delete)."""

from __future__ import annotations

import datetime as dt
import json

from django.contrib import messages as flash
from django.http import HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone

from console.access import can
from console.clusters.client import client_for
from console.errors import ConsoleError, Invalid
from console.topics import actions, messages, selectors
from console.web import config_change, filter_configs, page, paginate, run_action


def _int(data, name: str, *, required: bool = True) -> int | None:
    raw = (data.get(name) or "").strip()
    if not raw:
        if required:
            raise Invalid(f"{name.replace('_', ' ')} is required", field=name)
        return None
    try:
        return int(raw)
    except ValueError:
        raise Invalid(f"{name.replace('_', ' ')} must be a whole number", field=name) from None


def parse_configs(text: str) -> dict[str, str]:
    """`key=value` lines (blank lines and # comments ignored)."""
    configs = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise Invalid(f"line {number}: expected key=value, got {line!r}", field="configs")
        configs[key.strip()] = value.strip()
    return configs


def parse_headers(text: str) -> list[tuple[str, bytes]]:
    headers = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        key, sep, value = line.partition(":")
        if not sep or not key.strip():
            raise Invalid(f"header line {number}: expected name: value", field="headers")
        headers.append((key.strip(), value.strip().encode()))
    return headers


@page("topics/list.html", fragment="topics/_list.html")
def topic_list(request, cluster):
    query = request.GET.get("q", "")
    internal = request.GET.get("internal") == "1"
    sort = request.GET.get("sort", "name")
    topics = selectors.topic_list(cluster, query=query, internal=internal, sort=sort)
    page_obj = paginate(request, topics)
    rows, sizes_error = selectors.rows_with_sizes(cluster, list(page_obj.object_list))
    return {
        "page_obj": page_obj,
        "rows": rows,
        "sizes_error": sizes_error,
        "q": query,
        "internal": internal,
        "default_sort": "name",
        "nav": "topics",
    }


@page("topics/create.html", fragment="topics/_create_form.html")
def topic_create(request, cluster):
    brokers = len(client_for(cluster).metadata().brokers)
    form = {"name": "", "partitions": "3", "replication_factor": str(min(3, brokers)), "configs": ""}
    errors: dict[str, str] = {}
    valid = False
    if request.method == "POST":
        form = {k: request.POST.get(k, "").strip() for k in form}
        try:
            params = {
                "name": form["name"],
                "partitions": _int(request.POST, "partitions"),
                "replication_factor": _int(request.POST, "replication_factor"),
                "configs": parse_configs(form["configs"]),
            }
            if request.POST.get("validate_only"):
                if not can(request.user, "topic.create"):
                    raise Invalid("creating topics needs the operator role")
                actions.check_create_topic(cluster, **params)
                valid = True
            else:
                operation = actions.do_create_topic(request.user, cluster, source="web", **params)
                return HttpResponseRedirect(reverse("operation", args=[operation.pk]))
        except ConsoleError as exc:
            errors[exc.field or "form"] = exc.message
    return {"form": form, "errors": errors, "valid": valid, "brokers": brokers, "nav": "topics"}


def _topic_context(cluster, topic: str, tab: str) -> dict:
    info = client_for(cluster).topic(topic)
    return {"topic": info, "tab": tab, "nav": "topics"}


@page("topics/detail.html")
def topic_detail(request, cluster, topic):
    context = _topic_context(cluster, topic, "partitions")
    rows, problem = selectors.partition_rows(cluster, context["topic"])
    context.update(partitions=rows, offsets_error=problem)
    return context


@page("topics/configs.html", fragment="clusters/_configs.html")
def topic_configs(request, cluster, topic):
    back = reverse("topic_configs", args=[cluster.pk, topic])
    if request.method == "POST":
        return config_change(
            request,
            lambda changes: actions.do_alter_topic_configs(
                request.user, cluster, topic, changes=changes, source="web"
            ),
            back,
        )
    context = _topic_context(cluster, topic, "configs")
    query = request.GET.get("q", "").strip()
    configs = filter_configs(client_for(cluster).topic_configs(topic), query)
    context.update(
        configs=configs,
        q=query,
        config_target=back,
        can_edit_configs=can(request.user, "topic.alter_configs"),
    )
    return context


def _browse_params(data) -> dict:
    mode = data.get("mode", "newest")
    params = {
        "mode": mode,
        "partition": _int(data, "partition", required=False),
        "limit": _int(data, "limit", required=False) or messages.DEFAULT_LIMIT,
    }
    if mode == "offset":
        params["offset"] = _int(data, "offset")
    if mode == "timestamp":
        raw = data.get("timestamp", "").strip()
        if not raw:
            raise Invalid("a time is required", field="timestamp")
        try:
            when = dt.datetime.fromisoformat(raw)
        except ValueError:
            raise Invalid("time must look like 2024-05-01T12:00", field="timestamp") from None
        if timezone.is_naive(when):
            when = when.replace(tzinfo=dt.UTC)
        params["timestamp_ms"] = int(when.timestamp() * 1000)
    if mode == "tail" and data.get("cursor"):
        try:
            params["cursor"] = {int(p): int(o) for p, o in json.loads(data["cursor"]).items()}
        except (ValueError, AttributeError):
            raise Invalid("bad tail cursor", field="cursor") from None
    return params


@page("topics/messages.html", fragment="topics/_messages.html")
def topic_messages(request, cluster, topic):
    context = _topic_context(cluster, topic, "messages")
    fmt = request.GET.get("format", "auto")
    context.update(
        fmt=fmt if fmt in messages.FORMATS else "auto",
        modes=messages.MODES,
        formats=messages.FORMATS,
        form=request.GET,
        can_produce=can(request.user, "message.produce"),
    )
    try:
        params = _browse_params(request.GET)
        result = messages.browse(
            cluster, topic, time_limit_s=1.5 if params["mode"] == "tail" else 5.0, **params
        )
    except Invalid as exc:
        context["browse_error"] = exc.message
        return context
    context.update(
        result=result,
        rows=[_display(m, context["fmt"]) for m in result.messages],
        cursor=json.dumps(result.next_offsets),
        mode=params["mode"],
    )
    if request.htmx and request.GET.get("poll"):
        return render(request, "topics/_tail_rows.html", {**context, "cluster": cluster})
    return context


def _display(message: messages.Message, fmt: str) -> dict:
    key, key_format = messages.render(message.key, fmt)
    value, value_format = messages.render(message.value, fmt)
    return {
        "m": message,
        "time": dt.datetime.fromtimestamp(message.timestamp / 1000, tz=dt.UTC) if message.timestamp else None,
        "key": key,
        "key_format": key_format,
        "value": value,
        "value_format": value_format,
        "headers": [(h, messages.render(v, fmt)[0]) for h, v in message.headers],
    }


@page("topics/produce.html")
def topic_produce(request, cluster, topic):
    context = _topic_context(cluster, topic, "messages")
    form = {
        "key": "",
        "value": "",
        "headers": "",
        "partition": "",
        "value_encoding": "text",
        "key_encoding": "text",
    }
    if request.method == "POST":
        form = {k: request.POST.get(k, form[k]) for k in form}

        def produce():
            key = (
                None
                if request.POST.get("null_key")
                else messages.encode(form["key"], form["key_encoding"], "key")
            )
            value = (
                None
                if request.POST.get("null_value")
                else messages.encode(form["value"], form["value_encoding"], "value")
            )
            return actions.do_produce(
                request.user,
                cluster,
                topic,
                key=key,
                value=value,
                headers=parse_headers(form["headers"]),
                partition=_int(request.POST, "partition", required=False),
                source="web",
            )

        ok, where = run_action(request, produce)
        if ok:
            flash.success(request, f"Produced to partition {where[0]} at offset {where[1]}.")
            return HttpResponseRedirect(
                reverse("topic_messages", args=[cluster.pk, topic]) + f"?mode=newest&partition={where[0]}"
            )
    context.update(form=form, encodings=messages.ENCODINGS)
    return context


@page("topics/settings.html")
def topic_settings(request, cluster, topic):
    context = _topic_context(cluster, topic, "settings")
    context["partition_count"] = len(context["topic"].partitions)
    return context


def _settings_post(request, cluster, topic, fn, success: str):
    ok, _ = run_action(request, fn, success=success)
    return ok, HttpResponseRedirect(reverse("topic_settings", args=[cluster.pk, topic]))


@page("topics/settings.html")
def topic_add_partitions(request, cluster, topic):
    def add():
        return actions.do_add_partitions(
            request.user, cluster, topic, count=_int(request.POST, "count"), source="web"
        )

    return _settings_post(request, cluster, topic, add, "Partitions added.")[1]


@page("topics/settings.html")
def topic_delete_records(request, cluster, topic):
    def delete():
        partition = _int(request.POST, "partition", required=False)
        before = None if partition is None else {partition: _int(request.POST, "offset")}
        return actions.do_delete_records(request.user, cluster, topic, before=before, source="web")

    return _settings_post(request, cluster, topic, delete, "Records deleted.")[1]


@page("topics/settings.html")
def topic_delete(request, cluster, topic):
    def delete():
        return actions.do_delete_topic(
            request.user, cluster, topic, confirm=request.POST.get("confirm"), source="web"
        )

    ok, back = _settings_post(request, cluster, topic, delete, f"Topic {topic} deleted.")
    return HttpResponseRedirect(reverse("topics", args=[cluster.pk])) if ok else back
