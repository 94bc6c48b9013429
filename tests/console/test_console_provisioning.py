"""Provisioning's checks and properties, without processes: what is refused (and that it leaves nothing), and
what each broker's properties file holds."""

from __future__ import annotations

import pytest

from console.clusters import provisioning
from console.clusters.models import Cluster, ManagedBroker


@pytest.fixture
def clusters_dir(settings, tmp_path):
    settings.CONSOLE_CLUSTERS_DIR = tmp_path
    settings.CONSOLE_ZOOKEEPER = "127.0.0.1:2181"
    return tmp_path


def test_provision_creates_specs_and_properties(api, clusters_dir):
    response = api("alice").post(
        "/api/v1/clusters/provision/",
        {"name": "p1", "brokers": 3, "base_port": 31092, "racks": ["x", "y", "z"],
         "config_overrides": {"num.partitions": 6}},
        format="json",
    )  # fmt: skip
    assert response.status_code == 201, response.content
    body = response.json()
    assert body["bootstrap_servers"] == "127.0.0.1:31092,127.0.0.1:31093,127.0.0.1:31094"
    assert body["zookeeper_connect"] == "127.0.0.1:2181/odradek-p1"
    specs = list(ManagedBroker.objects.filter(cluster_id=body["id"]))
    assert [(b.broker_id, b.port, b.rack, b.state) for b in specs] == [
        (0, 31092, "x", "pending"), (1, 31093, "y", "pending"), (2, 31094, "z", "pending"),
    ]  # fmt: skip
    props = provisioning.broker_properties(specs[2])
    assert props["broker.id"] == "2"
    assert props["num.partitions"] == "6"  # the cluster's override over deploy/cluster.properties
    assert props["log.dirs"] == str(clusters_dir / "p1" / "broker-2" / "logs")
    assert props["broker.rack"] == "z"
    path = provisioning.write_properties(specs[2])
    assert "advertised.listeners=PLAINTEXT://127.0.0.1:31094\n" in path.read_text()


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"brokers": 0}, "brokers", "greater than or equal to 1"),
        ({"brokers": 40}, "brokers", "between 1 and 32"),
        ({"config_overrides": {"broker.id": "7"}}, "config_overrides", "broker.id is set by the console"),
        ({"config_overrides": {"a b\n": "1"}}, "config_overrides", "invalid config name"),
        ({"chroot": "odradek"}, "chroot", "chroot looks like /name"),
        ({"name": "not a slug"}, "name", "slug"),
    ],
)
def test_provision_refuses_bad_input_and_creates_nothing(api, clusters_dir, body, field, message):
    response = api("alice").post(
        "/api/v1/clusters/provision/", {"name": "p2", "base_port": 32092, **body}, format="json"
    )
    assert response.status_code == 400, response.content
    assert message in str(response.json()[field])
    assert not Cluster.objects.exists() and not ManagedBroker.objects.exists()


def test_provision_refuses_ports_of_another_cluster(api, clusters_dir):
    assert (
        api("alice").post("/api/v1/clusters/provision/", {"name": "a", "base_port": 33092}).status_code == 201
    )
    response = api("alice").post(
        "/api/v1/clusters/provision/", {"name": "b", "base_port": 33094, "brokers": 2}
    )
    assert response.status_code == 409
    assert "port 33094 belongs to a/broker 2" in str(response.json())
    assert list(Cluster.objects.values_list("name", flat=True)) == ["a"]


def test_only_admins_provision_and_add_brokers(api, clusters_dir):
    assert api("oscar").post("/api/v1/clusters/provision/", {"name": "c"}).status_code == 403
    cluster_id = (
        api("alice").post("/api/v1/clusters/provision/", {"name": "c", "base_port": 34092}).json()["id"]
    )
    assert api("oscar").post(f"/api/v1/clusters/{cluster_id}/managed-brokers/", {}).status_code == 403
    response = api("alice").post(f"/api/v1/clusters/{cluster_id}/managed-brokers/", {}, format="json")
    assert response.status_code == 201
    assert (response.json()["broker_id"], response.json()["port"]) == (3, 34095)


@pytest.mark.django_db
def test_the_local_cluster_of_make_up_serves_broker_metrics(clusters_dir):
    from django.contrib.auth import get_user_model

    from console.clusters.actions import do_provision_cluster
    from console.clusters.management.commands.up import LOCAL_CLUSTER

    admin = get_user_model().objects.create_superuser("root", password="x")
    cluster = do_provision_cluster(admin, source="cli", **{**LOCAL_CLUSTER, "base_port": 33092})
    specs = ManagedBroker.objects.filter(cluster=cluster).order_by("broker_id")
    assert [provisioning.broker_properties(b)["odradek.metrics.listener"] for b in specs] == [
        "http://127.0.0.1:9644", "http://127.0.0.1:9645", "http://127.0.0.1:9646",
    ]  # fmt: skip


def test_failover_settings_from_the_brokers_page(api, clusters_dir, client, personas):
    from django.contrib.messages import get_messages

    from console.audit.models import AuditEntry

    cluster_id = (
        api("alice").post("/api/v1/clusters/provision/", {"name": "h", "base_port": 35092}).json()["id"]
    )
    url = f"/clusters/{cluster_id}/brokers/self-healing/"
    client.force_login(personas["oscar"])
    assert client.post(url, {"failover_grace_s": "30"}).status_code == 403
    client.force_login(personas["alice"])
    saved = client.post(url, {"failover_grace_s": "30", "failover_on_return": "rebalance"})
    assert saved.status_code == 302 and saved["Location"] == f"/clusters/{cluster_id}/brokers/"
    cluster = Cluster.objects.get(pk=cluster_id)
    assert (cluster.failover_grace_s, cluster.failover_on_return) == (30, "rebalance")
    assert AuditEntry.objects.filter(action="cluster.update", outcome="ok", username="alice").exists()
    for form, message in [
        ({"failover_grace_s": "soon"}, "whole number of seconds"),
        ({"failover_grace_s": "0"}, "at least 1 second"),
        ({"failover_grace_s": "30", "failover_on_return": "reboot"}, "rejoins empty or is rebalanced in"),
    ]:
        response = client.post(url, form)
        shown = [str(m) for m in get_messages(response.wsgi_request)]
        assert any(message in m for m in shown), (form, shown)
        cluster.refresh_from_db()
        assert (cluster.failover_grace_s, cluster.failover_on_return) == (30, "rebalance")
    client.post(url, {"failover_grace_s": "", "failover_on_return": "empty"})  # empty: failover off
    cluster.refresh_from_db()
    assert (cluster.failover_grace_s, cluster.failover_on_return) == (None, "empty")
