"""Cluster pages and /api/v1/clusters/ against the shared broker: overview, brokers, broker configs."""

from __future__ import annotations

import pytest

from console.audit.models import AuditEntry, Outcome
from console.clusters.client import forget
from console.clusters.models import Cluster


def login(client, personas, name):
    client.force_login(personas[name])
    return client


def test_anonymous_is_sent_to_the_login_page(client, cluster):
    response = client.get(f"/clusters/{cluster.pk}/")
    assert response.status_code == 302
    assert response["Location"].startswith("/login/?next=")


def test_login_page_logs_in_with_the_form(client, personas):
    page = client.get("/login/")
    assert b'name="username"' in page.content
    bad = client.post("/login/", {"username": "victor", "password": "nope"})
    assert bad.status_code == 200 and b"Wrong username or password" in bad.content
    response = client.post("/login/", {"username": "victor", "password": "correct horse battery staple"})
    assert response.status_code == 302
    assert client.get("/clusters/").status_code == 200
    assert client.post("/logout/").status_code == 302
    assert client.get("/clusters/").status_code == 302


def test_a_user_without_a_role_sees_nothing(client, personas, cluster):
    login(client, personas, "nora")
    response = client.get(f"/clusters/{cluster.pk}/")
    assert response.status_code == 403
    assert b"needs the viewer role" in response.content


def test_overview_shows_brokers_and_counts(client, personas, cluster, shared_broker, new_topic):
    new_topic(partitions=3)
    login(client, personas, "victor")
    response = client.get(f"/clusters/{cluster.pk}/")
    assert response.status_code == 200
    overview = response.context["overview"]
    assert [b.port for b in overview.brokers] == [shared_broker.port]
    assert overview.brokers[0].state == "online" and overview.brokers[0].is_controller
    assert overview.partitions >= 3 and not overview.offline and not overview.under_replicated
    assert overview.disk_bytes is not None
    assert f"{shared_broker.host}:{shared_broker.port}".encode() in response.content
    # htmx refreshes only the fragment
    fragment = client.get(f"/clusters/{cluster.pk}/", headers={"HX-Request": "true"})
    assert (
        fragment.status_code == 200
        and b"<html" not in fragment.content
        and b"Under-replicated" in fragment.content
    )


def test_unreachable_cluster_is_an_error_panel_not_a_crash(client, personas, db, settings):
    dead = Cluster.objects.create(name="dead", bootstrap_servers="127.0.0.1:1")
    settings.CONSOLE_KAFKA_TIMEOUT_S = 1.0
    login(client, personas, "victor")
    response = client.get(f"/clusters/{dead.pk}/")
    assert response.status_code == 503
    assert b"did not answer" in response.content
    forget(dead)


def test_broker_page_lists_configs_with_sources(client, personas, cluster, shared_broker):
    login(client, personas, "victor")
    response = client.get(f"/clusters/{cluster.pk}/brokers/0/?q=num.partitions")
    assert response.status_code == 200
    names = [c.name for c in response.context["configs"]]
    assert "num.partitions" in names and all("num.partitions" in n for n in names)
    row = next(c for c in response.context["configs"] if c.name == "num.partitions")
    assert row.value == "3" and row.source == "STATIC_BROKER_CONFIG"
    assert b"config-edit" not in response.content  # a viewer gets no edit controls
    assert client.get(f"/clusters/{cluster.pk}/brokers/42/").status_code == 404


def test_admin_registers_a_cluster_and_the_audit_trail_says_so(client, personas, db):
    login(client, personas, "alice")
    response = client.post(
        "/clusters/", {"name": "prod", "bootstrap_servers": "10.1.1.1:9092", "zookeeper_connect": ""}
    )
    prod = Cluster.objects.get(name="prod")
    assert response.status_code == 302 and response["Location"] == f"/clusters/{prod.pk}/"
    entry = AuditEntry.objects.get(action="cluster.register")
    assert (entry.username, entry.outcome, entry.cluster_id, entry.source) == (
        "alice",
        Outcome.OK,
        prod.pk,
        "web",
    )
    assert entry.params["bootstrap_servers"] == "10.1.1.1:9092"


def test_invalid_cluster_is_refused_with_the_reason(client, personas, db):
    login(client, personas, "alice")
    response = client.post("/clusters/", {"name": "x", "bootstrap_servers": "no-port"}, follow=True)
    assert not Cluster.objects.filter(name="x").exists()
    assert b"expected host:port" in response.content
    assert AuditEntry.objects.get(action="cluster.register").outcome == Outcome.INVALID


def test_operator_cannot_register_a_cluster_and_the_attempt_is_audited(client, personas, db):
    login(client, personas, "oscar")
    response = client.post("/clusters/", {"name": "x", "bootstrap_servers": "a:1"})
    assert response.status_code == 403
    entry = AuditEntry.objects.get(action="cluster.register")
    assert (entry.username, entry.outcome) == ("oscar", Outcome.DENIED)


# ---------------------------------------------------------------------------------------------- API


def test_api_lists_and_registers_clusters(api, cluster):
    response = api("victor").get("/api/v1/clusters/")
    assert response.status_code == 200
    assert response.json() == [
        {
            "id": cluster.pk,
            "name": "test",
            "bootstrap_servers": cluster.bootstrap_servers,
            "zookeeper_connect": "",
            "managed": False,
            "config_overrides": {},
            "failover_grace_s": None,
            "failover_on_return": "empty",
            "created_at": response.json()[0]["created_at"],
        }
    ]
    created = api("alice").post(
        "/api/v1/clusters/", {"name": "other", "bootstrap_servers": "h:9092"}, format="json"
    )
    assert created.status_code == 201 and created.json()["name"] == "other"
    duplicate = api("alice").post(
        "/api/v1/clusters/", {"name": "other", "bootstrap_servers": "h:9092"}, format="json"
    )
    assert duplicate.status_code == 400 and "name" in duplicate.json()
    bad = api("alice").post(
        "/api/v1/clusters/", {"name": "x y", "bootstrap_servers": "h:9092"}, format="json"
    )
    assert bad.status_code == 400 and list(bad.json()) == ["name"]


def test_api_patch_and_delete_cluster(api, cluster):
    other = Cluster.objects.create(name="old", bootstrap_servers="h:1")
    patched = api("alice").patch(f"/api/v1/clusters/{other.pk}/", {"bootstrap_servers": "h:2"}, format="json")
    assert patched.status_code == 200 and patched.json()["bootstrap_servers"] == "h:2"
    assert api("alice").delete(f"/api/v1/clusters/{other.pk}/").status_code == 204
    assert api("alice").get(f"/api/v1/clusters/{other.pk}/").status_code == 404
    deleted = AuditEntry.objects.get(action="cluster.delete")
    assert deleted.cluster is None and deleted.cluster_name == "old" and deleted.outcome == Outcome.OK


def test_api_brokers_and_overview(api, cluster, shared_broker):
    brokers = api("victor").get(f"/api/v1/clusters/{cluster.pk}/brokers/").json()
    assert len(brokers) == 1
    assert {k: brokers[0][k] for k in ("id", "state", "host", "port", "pid")} == {
        "id": 0,
        "state": "online",
        "host": shared_broker.host,
        "port": shared_broker.port,
        "pid": None,
    }
    overview = api("victor").get(f"/api/v1/clusters/{cluster.pk}/overview/").json()
    assert overview["controller_id"] == 0 and overview["offline"] == []
    assert api("victor").get(f"/api/v1/clusters/{cluster.pk}/brokers/7/").status_code == 404
    assert api("victor").get("/api/v1/clusters/999/brokers/").status_code == 404


def test_api_broker_config_alter_and_reset(api, cluster):
    url = f"/api/v1/clusters/{cluster.pk}/brokers/0/configs/"
    response = api("alice").patch(url, {"configs": {"log.cleaner.threads": "2"}}, format="json")
    assert response.status_code == 200, response.json()
    row = next(r for r in response.json() if r["name"] == "log.cleaner.threads")
    assert (row["value"], row["source"]) == ("2", "DYNAMIC_BROKER_CONFIG")
    reset = api("alice").patch(url, {"configs": {"log.cleaner.threads": None}}, format="json")
    row = next(r for r in reset.json() if r["name"] == "log.cleaner.threads")
    assert row["source"] != "DYNAMIC_BROKER_CONFIG"
    assert api("alice").patch(url, {"configs": {}}, format="json").status_code == 400
    entries = AuditEntry.objects.filter(action="broker.alter_configs").order_by("id")
    assert [e.outcome for e in entries] == [Outcome.OK, Outcome.OK]
    assert entries[0].params == {"configs": {"log.cleaner.threads": "2"}}


@pytest.mark.parametrize("persona", ["oscar", "victor", "nora"])
def test_api_broker_config_needs_admin(api, cluster, persona):
    response = api(persona).patch(
        f"/api/v1/clusters/{cluster.pk}/brokers/0/configs/",
        {"configs": {"log.cleaner.threads": "2"}},
        format="json",
    )
    assert response.status_code == 403
    assert "admin role" in response.json()["detail"]


def test_api_token_authentication(client, personas, db):
    from rest_framework.authtoken.models import Token

    token = Token.objects.create(user=personas["victor"])
    assert client.get("/api/v1/clusters/").status_code in (401, 403)
    response = client.get("/api/v1/clusters/", headers={"Authorization": f"Token {token.key}"})
    assert response.status_code == 200


def test_openapi_schema_and_docs(client, db):
    schema = client.get("/api/v1/schema/?format=json")
    assert schema.status_code == 200
    paths = schema.json()["paths"]
    assert "/api/v1/clusters/{cluster_id}/brokers/" in paths
    assert {"post", "get"} <= set(paths["/api/v1/operations/"])
    assert "post" in paths["/api/v1/operations/{operation_id}/approve/"]
    assert "post" in paths["/api/v1/clusters/provision/"]
    docs = client.get("/api/v1/docs/")
    assert docs.status_code == 200 and b"swagger" in docs.content.lower()
