"""Operations that copy replicas between brokers, end to end: reassignment under producer load, failover back to
the replication factor, decommission of a broker holding replicas, raising a replication factor. A managed
cluster of real broker processes, its supervisor, real Celery workers, real clients."""

from __future__ import annotations

import os
import signal
import threading
import uuid

from confluent_kafka import Consumer, Producer, TopicPartition

from console.clusters.client import client_for
from console.operations.models import Operation
from console.operations.tasks import watch_cluster
from tests.console.conftest import wait_for
from tests.console.managed import broker_rows, live_brokers, managed_fixture, wait_brokers  # noqa: F401  (fixture)
from tests.console.test_console_operations import propose, steps, wait_state

TIMEOUT_S = 240


class LoadedProducer:
    """An idempotent acks=all producer writing numbered records until stopped; remembers what was acknowledged."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.acked: list[bytes] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._producer = Producer(
            {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5}
        )
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _delivered(self, err, msg) -> None:
        if err is None:
            self.acked.append(msg.value())
        else:
            self.errors.append(str(err))

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            try:
                self._producer.produce(self.topic, value=f"{n:08d}".encode(), key=str(n % 97).encode(),
                                       on_delivery=self._delivered)  # fmt: skip
                n += 1
            except BufferError:
                self._producer.poll(0.05)
            self._producer.poll(0)
            if n % 200 == 0:
                self._producer.poll(0.01)

    def __enter__(self) -> LoadedProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(30)
        assert self._producer.flush(60) == 0


def read_all(bootstrap: str, topic: str, partitions: int) -> list[bytes]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"check-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})  # fmt: skip
    ends = {
        p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)
    }
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values, positions = [], dict.fromkeys(range(partitions), 0)
    while any(positions[p] < ends[p] for p in positions):
        msg = consumer.poll(5)
        if msg is None or msg.error():
            continue
        values.append(msg.value())
        positions[msg.partition()] = msg.offset() + 1
    consumer.close()
    return values


def in_sync(cluster, topic: str) -> dict[int, tuple[list[int], list[int]]]:
    md = client_for(cluster).metadata(max_age_s=0)
    return {p.partition: (list(p.replicas), sorted(p.isr)) for p in md.topic(topic).partitions}


def test_the_audit_topic_takes_the_clusters_default_replication_factor(managed):
    """Not the brokers visible at the time (one, while a cluster starts): the topic's creation asks for the
    cluster's default.replication.factor, three here (OPERATIONS_TEST_DEFAULTS), on every broker."""
    from django.conf import settings

    from console.audit.models import AuditEntry
    from console.audit.tasks import publish

    cluster = managed.cluster
    assert AuditEntry.objects.filter(cluster=cluster).exists(), "provisioning the cluster was audited"
    # A Celery worker may have published the provisioning entries (and so created the topic) already.
    pending = list(AuditEntry.objects.filter(cluster=cluster, published_at__isnull=True))
    assert publish(cluster, pending) == len(pending)
    assert not AuditEntry.objects.filter(cluster=cluster, published_at__isnull=True).exists()
    audit = client_for(cluster).metadata(max_age_s=0).topic(settings.CONSOLE_AUDIT_TOPIC)
    assert [sorted(p.replicas) for p in audit.partitions] == [[0, 1, 2]]


def test_reassignment_under_producer_load_loses_and_duplicates_nothing(managed, api):
    managed.worker()
    cluster = managed.cluster
    topic = managed.create_topic(f"load-{uuid.uuid4().hex[:6]}", [[0, 1], [1, 2], [2, 0]])
    plan = {"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": [2, 1]},
        {"topic": topic, "partition": 1, "replicas": [0, 2]},
    ]}  # fmt: skip
    with LoadedProducer(cluster.bootstrap_servers, topic) as producer:
        wait_for(lambda: len(producer.acked) > 2000, timeout=60, what="records acknowledged before the move")
        created = propose(api, "oscar", kind="reassignment", cluster=cluster.pk, plan=plan)
        api("oscar").post(f"/api/v1/operations/{created['id']}/approve/")
        op = wait_state(created["id"], "done", "failed", timeout=TIMEOUT_S)
        assert op.state == "done", op.error
        acked_during = len(producer.acked)
    assert producer.errors == []
    state = in_sync(cluster, topic)
    assert {p: r for p, (r, _) in state.items()} == {0: [2, 1], 1: [0, 2], 2: [2, 0]}
    assert all(sorted(r) == isr for r, isr in state.values())
    consumed = read_all(cluster.bootstrap_servers, topic, 3)
    assert len(consumed) == len(set(consumed)), "a record was written twice"
    assert set(producer.acked) <= set(consumed), "an acknowledged record was lost"
    assert acked_during > 2000 and any(r["bytes_total"] > 0 for r in op.result["copy"])


def test_failover_after_the_grace_period_restores_the_replication_factor(managed, api):
    managed.worker()
    cluster = managed.cluster
    api("alice").patch(f"/api/v1/clusters/{cluster.pk}/", {"failover_grace_s": 2}, format="json")
    topic = managed.create_topic(f"fo-{uuid.uuid4().hex[:6]}", [[0, 2], [2, 1], [1, 0]])
    only_there = managed.create_topic(f"lost-{uuid.uuid4().hex[:6]}", [[2]])  # nothing left to copy it from
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "all"})
    for i in range(3000):
        producer.produce(topic, value=b"v" * 200, partition=i % 3)
    assert producer.flush(60) == 0
    dead = broker_rows(cluster)[2]
    type(dead).objects.filter(pk=dead.pk).update(should_run=False)
    os.kill(dead.pid, signal.SIGKILL)

    def failover():
        cluster.refresh_from_db()
        watch_cluster(cluster)
        return Operation.objects.filter(cluster=cluster, kind="failover").first()

    op = wait_for(failover, timeout=90, interval=0.5, what="a failover")
    op = wait_state(op.pk, "done", "failed", timeout=90)
    assert op.state == "done", op.error
    assert op.params["offline"] == [f"{only_there}-0"]
    assert f"{only_there}-0 had every in-sync replica there" in op.steps[0]["detail"]
    assert (only_there, 0) not in {(p["topic"], p["partition"]) for p in op.params["plan"]["partitions"]}
    state = in_sync(cluster, topic)
    assert all(len(r) == 2 and 2 not in r and sorted(r) == isr for r, isr in state.values()), state
    assert len(read_all(cluster.bootstrap_servers, topic, 3)) == 3000


def test_decommission_moves_every_replica_away_then_stops_the_broker(managed, api):
    """A fourth broker is added first, so that every partition on broker 2 has somewhere to go whatever the
    console made meanwhile (its audit topic takes three replicas; with three brokers the decommission is refused,
    see test_console_operations.py). Nothing is left on broker 2, not even what was created after the plan."""
    managed.worker()
    cluster = managed.cluster
    added = api("alice").post(f"/api/v1/clusters/{cluster.pk}/managed-brokers/", {}, format="json")
    assert added.status_code == 201, added.content
    wait_brokers(cluster, "running", ids=[3], supervisor=managed.supervisor)
    wait_for(lambda: live_brokers(cluster) == {0, 1, 2, 3}, timeout=60, what="broker 3 in the cluster")
    topic = managed.create_topic(f"dc-{uuid.uuid4().hex[:6]}", [[0, 2], [2, 1], [1, 0]])
    created = propose(api, "alice", kind="decommission", cluster=cluster.pk, broker=2)
    planned = {(p["topic"], p["partition"]): p["replicas"] for p in created["plan"]["partitions"]}
    assert {(topic, 0), (topic, 1)} <= set(planned) and all(2 not in r for r in planned.values())
    late = managed.create_topic(f"late-{uuid.uuid4().hex[:6]}", [[2, 0]])  # made after the plan
    api("alice").post(f"/api/v1/operations/{created['id']}/approve/")
    op = wait_state(created["id"], "done", "failed", timeout=TIMEOUT_S)
    assert op.state == "done", op.error
    assert steps(op)[-3:] == ["late replicas", "stopping", "deregistered"]
    assert late in op.steps[-3]["detail"]
    md = client_for(cluster).metadata(max_age_s=0)
    assert [(p.topic, p.partition) for p in md.partitions() if 2 in p.replicas] == []
    assert all(sorted(r) == isr for r, isr in in_sync(cluster, topic).values())
    assert broker_rows(cluster)[2].state == "stopped"
    assert live_brokers(cluster) == {0, 1, 3}


def test_raising_a_replication_factor(managed, api):
    managed.worker()
    cluster = managed.cluster
    topic = managed.create_topic(f"rf-{uuid.uuid4().hex[:6]}", [[0], [1]])
    created = propose(
        api, "oscar", kind="replication_factor", cluster=cluster.pk, topic=topic, replication_factor=3
    )
    api("oscar").post(f"/api/v1/operations/{created['id']}/approve/")
    op = wait_state(created["id"], "done", "failed", timeout=TIMEOUT_S)
    assert op.state == "done", op.error
    assert all(sorted(r) == [0, 1, 2] == isr for r, isr in in_sync(cluster, topic).values())


def test_the_console_client_finds_the_new_controller_after_an_answer_named_the_dead_one(managed):
    """A broker answering Metadata after the controller's broker died, before the new controller has told it, names
    the dead broker, and librdkafka then waits for that broker to come back (asking again only every 5 min). The
    console's client asks for Metadata again when a wait for the controller fails, so that the next call reaches the
    new controller: without it, a decommission of the controller's broker failed after 120 s of retries."""
    from broker_runtime.tools.admin_client import AdminClient
    from console.clusters.client import ClusterClient
    from console.errors import Unavailable

    cluster = managed.cluster
    client = ClusterClient(cluster.bootstrap_servers, timeout_s=1)
    old = client.describe_cluster(timeout_s=10)[1]
    spec = broker_rows(cluster)[old]
    os.kill(spec.pid, signal.SIGKILL)
    type(spec).objects.filter(pk=spec.pk).update(should_run=False)  # the supervisor leaves it down

    def metadata():  # the first tries may go to the dead broker, before librdkafka has seen it go
        try:
            return client.metadata(max_age_s=0)
        except Unavailable:
            return None

    # asked while the dead broker's session lasts (3 s): every live broker still names it
    assert wait_for(metadata, timeout=3, what="metadata").controller_id == old

    def every_live_broker_names_a_new_controller() -> bool:
        try:
            with AdminClient(cluster.bootstrap_servers) as admin:
                named = {
                    admin.metadata([], node).controller_id for node in admin.nodes() if node.node_id != old
                }
        except OSError:  # a connection refused or reset while the cluster changes
            return False
        return len(named) == 1 and old not in named and -1 not in named

    wait_for(
        every_live_broker_names_a_new_controller, timeout=60, what="a new controller known to every broker"
    )
    answers: list[int | str | None] = []
    for _ in range(2):
        try:
            answers.append(client.describe_cluster(timeout_s=10)[1])
            break
        except Unavailable as exc:  # the wait for the dead controller: the client asks for Metadata again
            answers.append(str(exc))
    assert isinstance(answers[-1], int) and answers[-1] != old, answers
