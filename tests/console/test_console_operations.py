"""Operations as persisted state machines, end to end: a managed cluster of real broker processes (run by a
real supervisor over the session's ZooKeeper), real Celery workers of the test's own on Redis, the API.

Each test provisions its own cluster (the test database is flushed between tests) and its own worker queue."""

from __future__ import annotations

import html
import json
import os
import re
import signal
import uuid

from console.audit.models import AuditEntry
from console.clusters.client import client_for
from console.operations.models import Operation
from tests.console.conftest import wait_for
from tests.console.managed import broker_rows, events, live_brokers, managed_fixture, wait_brokers  # noqa: F401  (fixture)


def propose(api, persona: str, **body) -> dict:
    response = api(persona).post("/api/v1/operations/", body, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def wait_state(operation_id: int, *states: str, timeout: float = 120) -> Operation:
    def reached():
        op = Operation.objects.get(pk=operation_id)
        return op if op.state in states else None

    try:
        return wait_for(reached, timeout=timeout, interval=0.2, what=f"operation {operation_id} {states}")
    except AssertionError as exc:
        op = Operation.objects.get(pk=operation_id)
        client = client_for(op.cluster)
        ongoing = client.ongoing_reassignments()
        isr = {
            (p.topic, p.partition): (p.leader, p.replicas, p.isr)
            for p in client.metadata(max_age_s=0).partitions()
        }
        isr = {k: v for k, v in isr.items() if k in ongoing}
        raise AssertionError(
            f"{exc}: {op.state}, steps {op.steps}, result {op.result}, in Kafka {ongoing}, (leader, replicas, isr) {isr}"
        ) from None


def steps(operation: Operation) -> list[str]:
    return [s["step"] for s in operation.steps]


def logged_in(client, personas, persona: str):
    client.force_login(personas[persona])
    return client


def test_reassignment_with_throttle_then_preferred_leader_election(managed, api, client, personas):
    managed.worker()
    topic = managed.create_topic(f"r-{uuid.uuid4().hex[:6]}", [[0, 1], [1, 2]])
    plan = {"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [1]},
        {"topic": topic, "partition": 1, "replicas": [2, 1], "log_dirs": ["any", "any"]},
    ]}  # fmt: skip
    created = propose(
        api,
        "oscar",
        kind="reassignment",
        cluster=managed.cluster.pk,
        plan=plan,
        throttle_bytes_per_s=10_000_000,
    )
    assert (created["kind"], created["state"], created["progress"]) == ("reassignment", "proposed", 0)
    assert created["plan"] == {"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [1]}, {"topic": topic, "partition": 1, "replicas": [2, 1]},
    ]}  # fmt: skip
    rows = {r["partition"]: r for r in created["summary"]["partitions"]}
    assert (rows[0]["removing"], rows[1]["adding"]) == ([0], [])
    # the operator may take the plan under review as the start of another: the page links to the form, filled
    page = logged_in(client, personas, "oscar").get(f"/operations/{created['id']}/").content.decode()
    edit = re.search(r'id="edit-plan" href="([^"]+)"', page)
    assert edit, page
    form = client.get(html.unescape(edit.group(1))).content.decode()
    textarea = html.unescape(re.search(r'<textarea id="plan"[^>]*>(.*?)</textarea>', form, re.S).group(1))
    assert json.loads(textarea) == created["plan"]
    assert 'name="throttle_bytes_per_s" type="number" min="1" value="10000000"' in form
    assert api("victor").post(f"/api/v1/operations/{created['id']}/approve/").status_code == 403

    approved = api("oscar").post(f"/api/v1/operations/{created['id']}/approve/")
    assert approved.status_code == 200 and approved.json()["state"] in ("approved", "running", "done")
    op = wait_state(created["id"], "done", "failed")
    assert op.state == "done", op.error
    assert steps(op) == ["throttled", "submitted", "copied", "verified", "throttle removed"]
    assert managed.replicas(topic) == {0: [1], 1: [2, 1]}
    detail = api("victor").get(f"/api/v1/operations/{created['id']}/").json()
    assert detail["progress"] == 100 and [s["step"] for s in detail["steps"]] == steps(op)
    configs = {c.name: c.value for c in client_for(managed.cluster).topic_configs(topic)}
    assert not configs.get("leader.replication.throttled.replicas")  # the throttle is gone
    assert {a.action for a in AuditEntry.objects.filter(operation_id=created["id"])} >= {
        "operation.propose", "operation.approve",
    }  # fmt: skip

    # partition 1's preferred replica is now broker 2, but broker 1 still leads it; proposed from the web form
    bad = client.post("/operations/new/", {"cluster": managed.cluster.pk, "kind": "preferred_leader_election",
                                            "partitions": f"{topic}-first"})  # fmt: skip
    flashes = re.search(r'<div class="flashes">.*?</div>\s*</div>', bad.content.decode(), re.S)
    assert flashes and "is not a partition: write topic-partition" in flashes.group(0)
    proposed = client.post("/operations/new/", {"cluster": managed.cluster.pk, "kind": "preferred_leader_election",
                                                 "partitions": f"{topic}-1"})  # fmt: skip
    assert proposed.status_code == 302, proposed.content
    election = api("oscar").get(proposed["Location"].replace("/operations/", "/api/v1/operations/")).json()
    assert election["kind"] == "preferred_leader_election"
    assert election["summary"]["partitions"] == [
        {"topic": topic, "partition": 1, "leader": 1, "preferred": 2}
    ]
    api("oscar").post(f"/api/v1/operations/{election['id']}/approve/")
    op = wait_state(election["id"], "done", "failed")
    assert op.state == "done", op.error
    leader = {
        p.partition: p.leader
        for p in client_for(managed.cluster).metadata(max_age_s=0).topic(topic).partitions
    }
    assert leader[1] == 2


def test_bad_proposals_are_refused_with_the_reason(managed, api):
    topic = managed.create_topic(f"b-{uuid.uuid4().hex[:6]}", [[0]])
    c = managed.cluster.pk
    cases = [
        ({"kind": "reassignment", "plan": {"partitions": [{"topic": topic, "partition": 0, "replicas": [7]}]}},
         "plan", "[7] are not live"),
        ({"kind": "reassignment", "plan": {"partitions": [{"topic": "nope", "partition": 0, "replicas": [1]}]}},
         "plan", "nope-0 does not exist"),
        ({"kind": "replication_factor", "topic": topic, "replication_factor": 4}, "plan", "needs 4 replicas"),
        ({"kind": "failover", "broker": 1}, "broker", "broker 1 is alive"),
        ({"kind": "teleport"}, "kind", "not a valid choice"),
    ]  # fmt: skip
    for body, field, message in cases:
        response = api("oscar").post("/api/v1/operations/", {"cluster": c, **body}, format="json")
        assert response.status_code == 400, (body, response.content)
        assert message in str(response.json()[field]), response.json()
    assert not Operation.objects.exists()
    assert (
        api("oscar")
        .post("/api/v1/operations/", {"cluster": c, "kind": "decommission", "broker": 1})
        .status_code
        == 403
    )
    # A decommission never lowers a replication factor: with three replicas on three brokers, nowhere to go.
    wide = managed.create_topic(f"w-{uuid.uuid4().hex[:6]}", [[0, 1, 2]])
    response = api("alice").post("/api/v1/operations/", {"cluster": c, "kind": "decommission", "broker": 2})
    assert response.status_code == 400, response.content
    message = str(response.json()["broker"])
    assert "broker 2 cannot be decommissioned: " in message and f"{wide} (replication factor 3)" in message
    assert "2 other live brokers; add a broker first" in message, message
    assert not Operation.objects.exists()


def test_decommission_empties_stops_and_deregisters_a_broker(managed, api, client, personas):
    managed.worker()
    cluster = managed.cluster
    added = api("alice").post(f"/api/v1/clusters/{cluster.pk}/managed-brokers/", {}, format="json").json()
    wait_brokers(cluster, "running", ids=[3], supervisor=managed.supervisor)
    # the Brokers page offers admins a Decommission button per broker, which proposes it for review
    assert (
        "Decommission"
        not in logged_in(client, personas, "victor").get(f"/clusters/{cluster.pk}/brokers/").content.decode()
    )
    page = logged_in(client, personas, "alice").get(f"/clusters/{cluster.pk}/brokers/").content.decode()
    assert page.count("Decommission…") == 4
    proposed = client.post(
        "/operations/new/", {"cluster": cluster.pk, "kind": "decommission", "broker": added["broker_id"]}
    )
    assert proposed.status_code == 302, proposed.content
    operation_id = int(proposed["Location"].rstrip("/").rsplit("/", 1)[1])
    created = api("alice").get(f"/api/v1/operations/{operation_id}/").json()
    assert (created["kind"], created["state"]) == ("decommission", "proposed")
    assert created["plan"] == {"version": 1, "partitions": []}  # a new broker holds nothing
    assert api("oscar").post(f"/api/v1/operations/{created['id']}/approve/").status_code == 403
    api("alice").post(f"/api/v1/operations/{created['id']}/approve/")
    op = wait_state(created["id"], "done", "failed")
    assert op.state == "done", op.error
    assert steps(op) == ["stopping", "deregistered"]
    spec = broker_rows(cluster)[3]
    assert (spec.state, spec.decommissioned, spec.pid) == ("stopped", True, None)
    assert [k for k, _, _ in events(cluster, 3)][-2:] == ["stopping", "stopped"]
    _, _, live = client_for(cluster).describe_cluster()
    assert {b.id for b in live} == {0, 1, 2}
    cluster.refresh_from_db()
    assert f"127.0.0.1:{added['port']}" not in cluster.bootstrap_servers


def test_a_killed_worker_is_resumed_by_another_without_a_second_submission_then_cancelled(managed, api):
    """A move that cannot finish while the test looks (a replica to copy under a 1 byte/s throttle): the worker
    running it is killed, another takes it over once the lease runs out, and cancelling reverts Kafka."""
    first = managed.worker()
    topic = managed.create_topic(f"k-{uuid.uuid4().hex[:6]}", [[0]])
    producer_admin = client_for(managed.cluster).producer()
    for i in range(200):
        producer_admin.produce(topic, value=b"x" * 1000, key=str(i).encode())
    producer_admin.flush(30)
    created = propose(
        api, "oscar", kind="reassignment", cluster=managed.cluster.pk, throttle_bytes_per_s=1,
        plan={"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [1]}]},
    )  # fmt: skip
    assert created["summary"]["bytes_to_move"] > 0
    api("oscar").post(f"/api/v1/operations/{created['id']}/approve/")
    wait_for(
        lambda: "submitted" in steps(Operation.objects.get(pk=created["id"])), timeout=60, what="submitted"
    )
    first.kill()
    managed.worker()
    op = wait_for(
        lambda: (o := Operation.objects.get(pk=created["id"])) and "resumed" in steps(o) and o, timeout=60,
        what="resumed by the second worker",
    )  # fmt: skip
    assert op.state == "running"
    assert steps(op).count("submitted") == 1
    client = client_for(managed.cluster)
    assert list(client.ongoing_reassignments([(topic, 0)])) == [(topic, 0)]

    cancelled = api("oscar").post(f"/api/v1/operations/{created['id']}/cancel/")
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled", cancelled.content
    assert "reverted" in [s["step"] for s in cancelled.json()["steps"]]
    assert client.ongoing_reassignments([(topic, 0)]) == {}
    wait_for(lambda: managed.replicas(topic) == {0: [0]}, timeout=30, what="replicas back to [0]")
    assert api("oscar").post(f"/api/v1/operations/{created['id']}/cancel/").status_code == 409


def test_a_broker_dead_past_the_grace_period_gets_a_failover(managed, api, client, personas):
    """The failover watch (beat's `watch_brokers`, called here as beat calls it) sees broker 2 missing, and once
    the grace period has passed proposes and starts a failover whose plan gives every partition of broker 2 a
    replica elsewhere, keeping its replication factor."""
    from console.operations.tasks import watch_cluster

    managed.worker()
    cluster = managed.cluster
    patched = api("alice").patch(f"/api/v1/clusters/{cluster.pk}/", {"failover_grace_s": 2}, format="json")
    assert patched.status_code == 200 and patched.json()["failover_grace_s"] == 2
    topic = managed.create_topic(f"f-{uuid.uuid4().hex[:6]}", [[0, 2], [2, 1], [1, 0]])
    dead = broker_rows(cluster)[2]
    type(dead).objects.filter(pk=dead.pk).update(should_run=False)  # the supervisor must not restart it
    os.kill(dead.pid, signal.SIGKILL)
    wait_for(
        lambda: (live := live_brokers(cluster)) is not None and 2 not in live,
        timeout=60,
        what="broker 2 gone",
    )

    def failover_started():
        cluster.refresh_from_db()
        watch_cluster(cluster)
        return Operation.objects.filter(cluster=cluster, kind="failover").first()

    op = wait_for(failover_started, timeout=60, interval=0.5, what="a failover")
    assert op.created_by is None and op.params["broker"] == 2
    brokers_page = logged_in(client, personas, "victor").get(
        f"/clusters/{cluster.pk}/brokers/", HTTP_HX_REQUEST="true"
    )
    missing = re.search(r'id="missing-brokers".*?</ul>', brokers_page.content.decode(), re.S)
    assert missing and "broker 2</strong> missing since" in missing.group(0), brokers_page.content
    assert f"failover #{op.pk}" in missing.group(0)
    assert "2" in cluster.missing_brokers
    targets = {(p["topic"], p["partition"]): p["replicas"] for p in op.params["plan"]["partitions"]}
    assert set(targets) == {(topic, 0), (topic, 1)}  # partition 2 never lived on broker 2
    assert all(len(r) == 2 and 2 not in r for r in targets.values())
    op = wait_for(
        lambda: (o := Operation.objects.get(pk=op.pk)) and "submitted" in steps(o) and o, timeout=60,
        what="failover submitted",
    )  # fmt: skip
    assert steps(op)[:2] == ["confirmed dead", "submitted"]
    assert watch_cluster(cluster) is None  # one failover per missing broker
    assert AuditEntry.objects.filter(operation=op, action="operation.propose", username="anonymous").exists()
    # The new replicas copy from the surviving ones (replication between brokers); cancelling reverts them, unless
    # the copy (of an empty topic) finished first: then the operation is done and refuses to cancel (409).
    # (503 while the clients still look for the dead broker as the controller: nothing changed, ask again)
    cancel = lambda: api("oscar").post(f"/api/v1/operations/{op.pk}/cancel/").status_code  # noqa: E731
    code = wait_for(lambda: (code := cancel()) != 503 and code, timeout=60, what="cancelled")
    assert code == 200 or (code == 409 and Operation.objects.get(pk=op.pk).state == "done")


def test_a_failed_over_broker_that_returns_is_rebalanced_in_when_the_cluster_says_so(managed, api):
    """Broker 2 holds no partition of the test's topic: its failover moves nothing and ends at once; when it
    comes back, the watch proposes and starts a balanced reassignment that gives it replicas again."""
    from console.operations.tasks import watch_cluster

    managed.worker()
    cluster = managed.cluster
    api("alice").patch(
        f"/api/v1/clusters/{cluster.pk}/",
        {"failover_grace_s": 1, "failover_on_return": "rebalance"},
        format="json",
    )
    managed.create_topic(f"rb-{uuid.uuid4().hex[:6]}", [[0, 1], [1, 0], [0, 1], [1, 0]])
    spec = broker_rows(cluster)[2]
    type(spec).objects.filter(pk=spec.pk).update(should_run=False)
    wait_for(
        lambda: (live := live_brokers(cluster)) is not None and 2 not in live,
        timeout=60,
        what="broker 2 gone",
    )

    def watched(kind):
        cluster.refresh_from_db()
        watch_cluster(cluster)
        return Operation.objects.filter(cluster=cluster, kind=kind).first()

    failover = wait_for(lambda: watched("failover"), timeout=60, interval=0.5, what="a failover")
    failover = wait_state(failover.pk, "done", "failed")
    assert failover.state == "done", failover.error
    assert Operation.objects.filter(kind="reassignment").count() == 0  # not while broker 2 is away

    type(spec).objects.filter(pk=spec.pk).update(should_run=True)
    wait_brokers(cluster, "running", ids=[2], supervisor=managed.supervisor)
    wait_for(lambda: 2 in (live_brokers(cluster) or ()), timeout=60, what="broker 2 back")
    rebalance = wait_for(lambda: watched("reassignment"), timeout=60, interval=0.5, what="a rebalance")
    assert rebalance.created_by is None and "broker 2 returned" in rebalance.params["reason"]
    assert any(2 in p["replicas"] for p in rebalance.params["plan"]["partitions"])
    assert Operation.objects.get(pk=failover.pk).result["rebalance"] == rebalance.pk
    watched("reassignment")
    assert Operation.objects.filter(kind="reassignment").count() == 1  # started once
    assert api("oscar").post(f"/api/v1/operations/{rebalance.pk}/cancel/").status_code == 200
