"""Every API endpoint x every role: who gets through, who gets 403 (or 401 without credentials).

Writes are sent with bodies that fail validation (or name something that does not exist), so a request that
gets past the role check answers 400 or 404 and changes nothing; the status it answers with proves which side
of the check it landed on."""

from __future__ import annotations

import uuid

import pytest

from console.access import Role, role_of
from console.audit.models import AuditEntry, Outcome
from console.clusters.client import client_for

ROLES = {
    "anonymous": None,
    "nora": Role.NONE,
    "victor": Role.VIEWER,
    "oscar": Role.OPERATOR,
    "alice": Role.ADMIN,
}

C = "/api/v1/clusters/{c}/"
T = C + "topics/{t}/"
G = C + "groups/{g}/"

#: (method, path, body, least role, status when allowed)
ENDPOINTS = [
    ("get", "/api/v1/me/", None, Role.NONE, 200),
    ("get", "/api/v1/clusters/", None, Role.VIEWER, 200),
    ("post", "/api/v1/clusters/", {}, Role.ADMIN, 400),
    ("post", "/api/v1/clusters/provision/", {"brokers": 0}, Role.ADMIN, 400),
    ("get", C, None, Role.VIEWER, 200),
    ("get", C + "managed-brokers/", None, Role.VIEWER, 200),
    ("post", C + "managed-brokers/", {"port": 1}, Role.ADMIN, 400),
    ("patch", C, {"name": "not a slug"}, Role.ADMIN, 400),
    ("delete", "/api/v1/clusters/99999/", None, Role.ADMIN, 404),
    ("get", C + "overview/", None, Role.VIEWER, 200),
    ("get", C + "brokers/", None, Role.VIEWER, 200),
    ("get", C + "brokers/0/", None, Role.VIEWER, 200),
    ("get", C + "brokers/0/configs/", None, Role.VIEWER, 200),
    ("patch", C + "brokers/0/configs/", {"configs": {}}, Role.ADMIN, 400),
    ("get", C + "topics/", None, Role.VIEWER, 200),
    ("post", C + "topics/", {"name": "x"}, Role.OPERATOR, 400),
    ("get", T, None, Role.VIEWER, 200),
    ("delete", T, None, Role.ADMIN, 400),
    ("get", T + "configs/", None, Role.VIEWER, 200),
    ("patch", T + "configs/", {"configs": {}}, Role.OPERATOR, 400),
    ("get", T + "partitions/", None, Role.VIEWER, 200),
    ("post", T + "partitions/", {"count": 1}, Role.OPERATOR, 400),
    ("post", T + "delete-records/", {"before": {"99": 0}}, Role.ADMIN, 400),
    ("get", T + "messages/", None, Role.VIEWER, 200),
    ("post", T + "messages/", {"value": "x", "partition": 99}, Role.OPERATOR, 400),
    ("get", C + "groups/", None, Role.VIEWER, 200),
    ("get", G, None, Role.VIEWER, 200),
    ("delete", C + "groups/{missing}/", None, Role.ADMIN, 404),
    ("post", G + "reset-offsets/", {"to": "nowhere"}, Role.OPERATOR, 400),
    ("get", "/api/v1/operations/", None, Role.VIEWER, 200),
    ("get", "/api/v1/operations/99999/", None, Role.VIEWER, 404),
    ("post", "/api/v1/operations/", {"kind": "teleport", "cluster": 1}, Role.OPERATOR, 400),
    ("post", "/api/v1/operations/99999/approve/", {}, Role.OPERATOR, 404),
    ("post", "/api/v1/operations/99999/cancel/", {}, Role.OPERATOR, 404),
    ("get", "/api/v1/audit/", None, Role.OPERATOR, 200),
    ("get", "/api/v1/alerts/", None, Role.VIEWER, 200),
    ("get", "/api/v1/alerts/rules/", None, Role.VIEWER, 200),
    ("post", "/api/v1/alerts/rules/", {"condition": "vibes"}, Role.OPERATOR, 400),
    ("get", "/api/v1/alerts/rules/99999/", None, Role.VIEWER, 404),
    ("patch", "/api/v1/alerts/rules/99999/", {}, Role.OPERATOR, 404),
    ("delete", "/api/v1/alerts/rules/99999/", None, Role.OPERATOR, 404),
    ("get", "/api/v1/alerts/silences/", None, Role.VIEWER, 200),
    ("post", "/api/v1/alerts/silences/", {}, Role.OPERATOR, 400),
    ("delete", "/api/v1/alerts/silences/99999/", None, Role.OPERATOR, 404),
    ("get", C + "sampler/", None, Role.VIEWER, 200),
    ("put", C + "sampler/", {"interval_s": 1}, Role.ADMIN, 400),
    ("get", C + "lag/{g}/", None, Role.VIEWER, 404),
    ("get", C + "reports/runs/", None, Role.VIEWER, 200),
    ("post", C + "reports/runs/", {"report": "nope"}, Role.OPERATOR, 400),
    ("get", C + "reports/runs/99999/", None, Role.VIEWER, 404),
    ("get", C + "reports/schedules/", None, Role.VIEWER, 200),
    ("put", C + "reports/schedules/nope/", {"crontab": "0 3 * * *"}, Role.OPERATOR, 400),
]


@pytest.fixture(scope="module")
def kafka_resources(_shared_broker_process):
    """A topic and a group with a committed offset, made once for the module (the requests change nothing)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from tests.console.conftest import wait_for
    from tests.console.test_console_groups import commit

    bootstrap = _shared_broker_process.bootstrap
    topic = f"perm-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    wait_for(lambda: topic in admin.list_topics(timeout=5).topics, what="topic in metadata")
    group = f"g-{uuid.uuid4().hex[:8]}"
    commit(bootstrap, group, {(topic, 0): 0})
    return {"t": topic, "g": group, "missing": f"missing-{uuid.uuid4().hex[:6]}"}


@pytest.fixture
def resources(cluster, kafka_resources):
    return {"c": cluster.pk, **kafka_resources}


@pytest.mark.parametrize("persona", list(ROLES))
@pytest.mark.parametrize(
    ("method", "path", "body", "needed", "allowed_status"), ENDPOINTS, ids=lambda v: str(v)
)
def test_endpoint_role(api, resources, persona, method, path, body, needed, allowed_status):
    client = api(None if persona == "anonymous" else persona)
    url = path.format(**resources)
    kwargs = {"format": "json"} if body is not None else {}
    response = (
        getattr(client, method)(url, body, **kwargs) if body is not None else getattr(client, method)(url)
    )
    role = ROLES[persona]
    if role is None:
        assert response.status_code in (401, 403), response.content
    elif role >= needed:
        assert response.status_code == allowed_status, (response.status_code, response.content[:300])
    else:
        assert response.status_code == 403, response.content[:300]
        assert needed.label in response.json()["detail"]


def test_every_api_route_is_in_the_matrix():
    from django.urls import get_resolver

    def routes(resolver, prefix=""):
        for pattern in resolver.url_patterns:
            if hasattr(pattern, "url_patterns"):
                yield from routes(pattern, prefix + str(pattern.pattern))
            else:
                yield prefix + str(pattern.pattern)

    api_routes = {
        r
        for r in routes(get_resolver())
        if r.startswith("api/v1/") and not r.endswith(("schema/", "docs/", "redoc/"))
    }
    covered = set()
    for _, path, *_ in ENDPOINTS:
        covered.add(
            path.replace("/api/v1/", "api/v1/")
            .replace("{c}", "<int:cluster_id>")
            .replace("{t}", "<str:topic>")
            .replace("{g}", "<path:group_id>")
            .replace("{missing}", "<path:group_id>")
            .replace("99999", "<int:cluster_id>", 1)
            .replace("brokers/0/", "brokers/<int:broker_id>/")
        )
    covered = {c.replace("operations/<int:cluster_id>/", "operations/<int:operation_id>/") for c in covered}
    covered = {c.replace("rules/<int:cluster_id>/", "rules/<int:rule_id>/") for c in covered}
    covered = {c.replace("silences/<int:cluster_id>/", "silences/<int:silence_id>/") for c in covered}
    covered = {c.replace("runs/<int:cluster_id>/", "runs/<int:run_id>/") for c in covered}
    covered = {c.replace("schedules/nope/", "schedules/<str:report>/") for c in covered}
    assert api_routes - covered == set()


def test_denied_writes_are_audited_with_the_role_needed(api, resources):
    api("oscar").delete(T.format(**resources) + f"?confirm={resources['t']}")
    entry = AuditEntry.objects.get(action="topic.delete")
    assert (entry.username, entry.outcome, entry.resource_name) == ("oscar", Outcome.DENIED, resources["t"])
    assert "admin role" in entry.detail
    assert resources["t"] in client_for(resources_cluster(resources)).metadata(max_age_s=0).topics


def resources_cluster(resources):
    from console.clusters.models import Cluster

    return Cluster.objects.get(pk=resources["c"])


def test_me_reports_role_and_actions(api, personas):
    body = api("oscar").get("/api/v1/me/").json()
    assert (
        body["role"] == "operator"
        and "topic.create" in body["actions"]
        and "topic.delete" not in body["actions"]
    )
    assert role_of(personas["oscar"]) is Role.OPERATOR
