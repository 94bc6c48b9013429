"""Provisioning and supervision of managed clusters: a real `manage.py supervise` process running real broker
processes over the session's real ZooKeeper, the cluster provisioned through the API into the test database."""

from __future__ import annotations

import os
import signal
import uuid

import pytest
from kazoo.client import KazooClient

from console.clusters.models import BrokerEvent
from tests.console.conftest import wait_for
from tests.console.managed import (
    Supervise,
    broker_rows,
    events,
    pid_alive,
    provision,
    stop_everything,
    wait_brokers,
)


@pytest.fixture
def supervised(settings, tmp_path, zookeeper, transactional_db):
    clusters_dir = tmp_path / "clusters"
    settings.CONSOLE_CLUSTERS_DIR = clusters_dir
    settings.CONSOLE_ZOOKEEPER = zookeeper.address
    supervisor = Supervise(tmp_path / "supervise.log").start()
    yield supervisor
    stop_everything(supervisor, clusters_dir)


def _registered(zookeeper, cluster) -> set[int]:
    chroot = cluster.zookeeper_connect.partition("/")[2]
    zk = KazooClient(hosts=zookeeper.address)
    zk.start(timeout=10)
    try:
        path = f"/{chroot}/brokers/ids"
        return {int(i) for i in zk.get_children(path)} if zk.exists(path) else set()
    finally:
        zk.stop()
        zk.close()


def test_provisioned_cluster_runs_and_a_killed_broker_comes_back(supervised, api, zookeeper):
    cluster = provision(api("alice"), f"m-{uuid.uuid4().hex[:6]}", brokers=3, racks=["a", "b"])
    rows = wait_brokers(cluster, "running", supervisor=supervised)
    assert _registered(zookeeper, cluster) == {0, 1, 2}
    assert [rows[i].rack for i in range(3)] == ["a", "b", "a"]
    properties = (
        supervised.log_path.parent / "clusters" / cluster.name / "broker-1" / "server.properties"
    ).read_text()
    assert f"listeners=PLAINTEXT://127.0.0.1:{rows[1].port}\n" in properties
    assert "broker.rack=b\n" in properties
    assert f"zookeeper.connect={zookeeper.address}/odradek-{cluster.name}\n" in properties
    assert [k for k, _, _ in events(cluster, 1)] == ["started", "healthy"]

    old_pid = rows[1].pid
    os.kill(old_pid, signal.SIGKILL)
    wait_for(lambda: broker_rows(cluster)[1].state in ("exited", "starting"), what="the death seen")
    assert ("exited", old_pid, -signal.SIGKILL) in events(cluster, 1)
    rows = wait_brokers(cluster, "running", ids=[1], supervisor=supervised)
    assert rows[1].pid != old_pid and pid_alive(rows[1].pid)
    assert rows[1].restarts == 1
    kinds = [k for k, _, _ in events(cluster, 1)]
    assert kinds == ["started", "healthy", "exited", "restarted", "healthy"]
    assert _registered(zookeeper, cluster) == {0, 1, 2}


def test_a_restarted_supervisor_adopts_running_brokers_and_ctrl_c_stops_them(supervised, api, zookeeper):
    cluster = provision(api("alice"), f"m-{uuid.uuid4().hex[:6]}", brokers=2)
    pids = {i: b.pid for i, b in wait_brokers(cluster, "running", supervisor=supervised).items()}
    supervised.kill()
    assert all(pid_alive(pid) for pid in pids.values())

    supervised.start()
    wait_for(
        lambda: all(any(k == "adopted" for k, _, _ in events(cluster, i)) for i in pids),
        timeout=30,
        what="brokers adopted",
    )
    rows = wait_brokers(cluster, "running", supervisor=supervised)
    assert {i: b.pid for i, b in rows.items()} == pids  # the same processes: no duplicate started
    for i in pids:
        assert [k for k, _, _ in events(cluster, i)] == ["started", "healthy", "adopted", "healthy"]

    assert supervised.stop() == 0
    rows = broker_rows(cluster)
    assert all(rows[i].state == "stopped" and rows[i].pid is None for i in pids)
    assert not any(pid_alive(pid) for pid in pids.values())
    assert all(events(cluster, i)[-1][0] == "stopped" for i in pids)
    wait_for(lambda: _registered(zookeeper, cluster) == set(), timeout=30, what="registrations gone")


def test_adding_a_broker_starts_it(supervised, api, zookeeper):
    cluster = provision(api("alice"), f"m-{uuid.uuid4().hex[:6]}", brokers=1)
    wait_brokers(cluster, "running", supervisor=supervised)
    response = api("alice").post(
        f"/api/v1/clusters/{cluster.pk}/managed-brokers/", {"rack": "r2"}, format="json"
    )
    assert response.status_code == 201, response.content
    assert response.json()["broker_id"] == 1
    wait_brokers(cluster, "running", ids=[1], supervisor=supervised)
    assert _registered(zookeeper, cluster) == {0, 1}
    cluster.refresh_from_db()
    assert len(cluster.bootstrap_list) == 2
    listed = api("victor").get(f"/api/v1/clusters/{cluster.pk}/brokers/").json()
    assert {(b["id"], b["process_state"], b["rack"]) for b in listed} >= {(1, "running", "r2")}


def test_a_paused_broker_is_unhealthy_until_it_answers_again(supervised, api):
    cluster = provision(api("alice"), f"m-{uuid.uuid4().hex[:6]}", brokers=1)
    pid = wait_brokers(cluster, "running", supervisor=supervised)[0].pid
    os.kill(pid, signal.SIGSTOP)
    try:
        wait_brokers(cluster, "unhealthy", supervisor=supervised)
    finally:
        os.kill(pid, signal.SIGCONT)
    wait_brokers(cluster, "running", supervisor=supervised)
    kinds = [k for k, _, _ in events(cluster, 0)]
    assert kinds == ["started", "healthy", "unhealthy", "healthy"]
    unhealthy = BrokerEvent.objects.get(broker__cluster=cluster, kind="unhealthy")
    assert "does not answer ApiVersions" in unhealthy.detail and unhealthy.pid == pid
    assert broker_rows(cluster)[0].pid == pid  # paused, not restarted
