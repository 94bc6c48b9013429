"""Managed clusters in tests: provisioned through the API into the test database, their brokers run by a real
`manage.py supervise` process over the session's real ZooKeeper.

    supervisor = Supervise(tmp_path)          # started on the test database
    cluster = provision(api("alice"), "m1", brokers=3)
    wait_brokers(cluster, "running")
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from broker_runtime.tools.admin_client import AdminClient
from tests.conftest import free_port_range
from tests.console.conftest import REPO, wait_for

#: The operations tests' clusters: three replicas by default (the audit topic's, as deploy/cluster.properties),
#: one for the consumer offsets (see `managed_fixture`), and no automatic preferred leader election (the
#: controller's first check runs 5 s after it starts, and would race the console's own).
OPERATIONS_TEST_DEFAULTS = {
    "default.replication.factor": "3", "offsets.topic.replication.factor": "1", "min.insync.replicas": "1",
    "auto.leader.rebalance.enable": "false",
}  # fmt: skip

#: Up to a broker's ZooKeeper session (3 s in deploy/cluster.properties) plus its start on a loaded machine.
BROKER_TIMEOUT_S = 90


class Supervise:
    """A `python manage.py supervise` process on the test database."""

    def __init__(self, log_path: Path) -> None:
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None

    def start(self) -> Supervise:
        from django.db import connection

        env = dict(
            os.environ,
            DATABASE_URL=f"sqlite:///{connection.settings_dict['NAME']}",
            DJANGO_SETTINGS_MODULE="console.settings",
            PYTHONUNBUFFERED="1",
        )
        log = open(self.log_path, "ab")  # noqa: SIM115  (closed when the process ends)
        self.proc = subprocess.Popen(
            [sys.executable, "manage.py", "supervise", "--health-interval", "0.5", "--stop-timeout", "30"],
            cwd=REPO,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:]

    def kill(self) -> None:
        """SIGKILL: the supervisor dies without touching its brokers."""
        assert self.proc is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> int:
        """Ctrl-C: the supervisor stops its brokers (controlled shutdown), then exits."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        return self.proc.wait(60)


def provision(client, name: str, *, brokers: int = 3, **extra) -> object:
    from console.clusters.models import Cluster

    response = client.post(
        "/api/v1/clusters/provision/",
        {"name": name, "brokers": brokers, "base_port": free_port_range(brokers), **extra},
        format="json",
    )
    assert response.status_code == 201, response.content
    return Cluster.objects.get(pk=response.json()["id"])


def broker_rows(cluster) -> dict[int, object]:
    from console.clusters.models import ManagedBroker

    return {b.broker_id: b for b in ManagedBroker.objects.filter(cluster=cluster)}


def wait_brokers(cluster, state: str, ids=None, timeout: float = BROKER_TIMEOUT_S, supervisor=None) -> dict:
    def reached():
        if supervisor is not None and supervisor.proc.poll() is not None:
            raise AssertionError(f"supervisor exited with {supervisor.proc.returncode}:\n{supervisor.log()}")
        rows = broker_rows(cluster)
        wanted = rows.keys() if ids is None else ids
        return rows if all(rows[i].state == state for i in wanted) else None

    return wait_for(reached, timeout=timeout, interval=0.1, what=f"brokers of {cluster.name} {state}")


def events(cluster, broker_id: int) -> list[tuple[str, int | None, int | None]]:
    """(kind, pid, exit code) of a broker's supervisor events, oldest first."""
    from console.clusters.models import BrokerEvent

    rows = BrokerEvent.objects.filter(broker__cluster=cluster, broker__broker_id=broker_id).order_by(
        "at", "id"
    )
    return [(e.kind, e.pid, e.exit_code) for e in rows]


def pid_alive(pid: int) -> bool:
    """A live process (a zombie left to a container's init that never reaps counts as dead)."""
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def stop_everything(supervisor: Supervise, clusters_dir: Path) -> None:
    """Teardown: stop the supervisor (it stops its brokers); then SIGKILL any broker a killed supervisor left."""
    if supervisor.proc is not None and supervisor.proc.poll() is None:
        try:
            supervisor.stop()
        except subprocess.TimeoutExpired:
            supervisor.kill()
    for pid_path in clusters_dir.glob("*/broker-*/broker.pid"):
        with contextlib.suppress(ValueError, ProcessLookupError, OSError):
            pid = int(pid_path.read_text())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if b"broker_runtime" in cmdline:
                os.kill(pid, signal.SIGKILL)


class Worker:
    """A `celery -A console worker` of the test's own, on its own queue (so killing it harms no other test)."""

    def __init__(self, log_path: Path, redis_url: str, queue: str, lease_s: float) -> None:
        self.log_path, self.redis_url, self.queue, self.lease_s = log_path, redis_url, queue, lease_s
        self.proc: subprocess.Popen | None = None

    def start(self) -> Worker:
        from django.db import connection

        env = dict(
            os.environ,
            DATABASE_URL=f"sqlite:///{connection.settings_dict['NAME']}",
            REDIS_URL=self.redis_url,
            DJANGO_SETTINGS_MODULE="console.settings",
            CONSOLE_OPERATIONS_QUEUE=self.queue,
            CONSOLE_OPERATION_LEASE_S=str(self.lease_s),
            PYTHONUNBUFFERED="1",
        )
        start = self.log_path.stat().st_size if self.log_path.exists() else 0
        log = open(self.log_path, "ab")  # noqa: SIM115  (closed when the process ends)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "console", "worker", "--pool", "threads", "--concurrency", "2",
             "-Q", self.queue, "--loglevel", "INFO", "--hostname", f"{self.queue}-{random.randrange(10**6)}@%h",
             "--without-gossip", "--without-mingle", "--without-heartbeat"],
            cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        log.close()

        def ready() -> bool:
            assert self.proc.poll() is None, f"worker exited:\n{self.log()}"
            return "ready." in self.log_path.read_text(errors="replace")[start:]

        wait_for(ready, timeout=60, interval=0.1, what="celery worker ready")
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-6000:]

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()


LEASE_S = 3.0


@pytest.fixture(name="managed")
def managed_fixture(settings, tmp_path, zookeeper, redis_url, transactional_db, api):
    """A provisioned cluster of three brokers run by its own supervisor, and `worker()` starting Celery workers
    on a queue of the test's own."""
    from console.celery import app
    from console.clusters.client import client_for, forget

    # An earlier test may have queued an audit entry before the session's Redis was known: drop the pools
    # bound to the default address, so that this test's operations reach its Redis.
    app.conf.broker_url = redis_url
    app._pool = None
    app.amqp._producer_pool = None
    clusters_dir = tmp_path / "clusters"
    settings.CONSOLE_CLUSTERS_DIR = clusters_dir
    settings.CONSOLE_ZOOKEEPER = zookeeper.address
    settings.CONSOLE_OPERATIONS_QUEUE = queue = f"ops-{uuid.uuid4().hex[:8]}"
    supervisor = Supervise(tmp_path / "supervise.log").start()
    workers: list[Worker] = []

    class Managed:
        def __init__(self):
            self.supervisor = supervisor
            # The operations' plans are checked partition by partition: the consumer offsets keep one replica,
            # the audit topic takes the default three (on every broker: a broker's failover leaves it waiting for
            # a third live broker, its decommission needs a fourth), and min.insync.replicas=1 lets acks=all
            # writes through with a broker down.
            self.cluster = provision(
                api("alice"),
                f"o-{uuid.uuid4().hex[:6]}",
                brokers=3,
                config_overrides=OPERATIONS_TEST_DEFAULTS,
            )
            wait_brokers(self.cluster, "running", supervisor=supervisor)

        def worker(self) -> Worker:
            worker = Worker(tmp_path / "worker.log", redis_url, queue, LEASE_S).start()
            workers.append(worker)
            return worker

        def create_topic(self, name: str, assignment: list[list[int]]) -> str:
            from kafka.admin import NewTopic

            client = client_for(self.cluster)
            topic = NewTopic(name, -1, -1, replica_assignments=dict(enumerate(assignment)))
            client._kafka_python_admin().create_topics([topic])

            def ready(admin: AdminClient) -> bool:
                # Every broker must know it: a proposal reads the metadata of whichever broker it asks, and
                # brokers learn of a topic from the controller one after another.
                for node in admin.nodes():
                    try:
                        (topic,) = admin.metadata([name], node).topics
                    except OSError:  # a broker that just stopped, still named by another
                        return False
                    if topic.error_code != ErrorCode.none or len(topic.partitions) != len(assignment):
                        return False
                    if any(p.leader_id < 0 for p in topic.partitions):
                        return False
                return True

            with AdminClient(self.cluster.bootstrap_servers) as admin:
                wait_for(lambda: ready(admin), timeout=60, what=f"topic {name} with leaders on every broker")
            return name

        def replicas(self, topic: str) -> dict[int, list[int]]:
            md = client_for(self.cluster).metadata(max_age_s=0)
            return {p.partition: list(p.replicas) for p in md.topic(topic).partitions}

    made = Managed()
    yield made
    forget(made.cluster)
    for worker in workers:
        worker.stop()
    stop_everything(supervisor, clusters_dir)


def live_brokers(cluster) -> set[int] | None:
    """The brokers the cluster lists, or None while it cannot say (its controller is moving)."""
    from console.clusters.client import client_for
    from console.errors import ConsoleError

    try:
        return {b.id for b in client_for(cluster).metadata(max_age_s=0).brokers}
    except ConsoleError:
        return None
