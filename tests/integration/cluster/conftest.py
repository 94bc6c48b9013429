"""Clusters of real broker processes over the session's real ZooKeeper (tests/conftest.py `zookeeper`).

Fixtures:
- ``cluster``: three brokers (ids 0-2) in a chroot of their own, started once per module; tests that take a
  broker down must bring it back (``Cluster.restart``) before they end.
- ``cluster_factory(size=3, per_broker=None, **overrides)``: a function-scoped cluster, for tests that kill, pause
  or stop brokers and leave the cluster in a state others should not inherit; ``per_broker`` maps a broker id to
  overrides of its own (``{0: {"broker.rack": "a"}}``).

`Cluster` helpers read ZooKeeper directly (kazoo, chrooted) and wait for conditions with a deadline; nothing sleeps
as synchronisation. A failing test gets the tail of every broker's log in its report.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient

SESSION_TIMEOUT_MS = 6000
DEADLINE_S = 60.0

_clusters = itertools.count(1)


class Cluster:
    def __init__(
        self, helpers, root: Path, connect: str, size: int, overrides: dict[str, str], name: str,
        per_broker: dict[int, dict[str, str]] | None = None,
    ) -> None:  # fmt: skip
        self.connect = connect
        self.hosts, _, chroot = connect.partition("/")
        self.chroot = "/" + chroot
        self.brokers = {}
        for broker_id in range(size):
            merged = {
                "broker.id": str(broker_id),
                "zookeeper.connect": connect,
                "zookeeper.session.timeout.ms": str(SESSION_TIMEOUT_MS),
                "controlled.shutdown.retry.backoff.ms": "500",
                **overrides,
                **(per_broker or {}).get(broker_id, {}),
            }
            self.brokers[broker_id] = helpers.new_broker(root, f"{name}-b{broker_id}", merged)
        self._zk: KazooClient | None = None

    # -- lifecycle

    def start(self) -> Cluster:
        for broker in self.brokers.values():
            broker.start()
        self.wait_for(lambda: self.registered() == set(self.brokers), "every broker registered")
        self.wait_for_metadata_agreement()
        return self

    def stop(self) -> None:
        for broker in self.brokers.values():
            if broker.alive:
                broker.stop()
        if self._zk is not None:
            self._zk.stop()
            self._zk.close()

    def restart(self, broker_id: int) -> None:
        """Start a broker that was stopped or killed, and wait until the cluster has it back."""
        broker = self.brokers[broker_id]
        if broker.alive:
            broker.stop()
        broker.start()
        self.wait_for(lambda: broker_id in self.registered(), f"broker {broker_id} registered again")
        self.wait_for_metadata_agreement()

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values() if b.alive)

    # -- ZooKeeper

    @property
    def zk(self) -> KazooClient:
        if self._zk is None:
            self._zk = KazooClient(hosts=self.connect)
            self._zk.start(30)
        return self._zk

    def znode(self, path: str) -> Any | None:
        """A znode's data, decoded as JSON when it is JSON."""
        try:
            data, _ = self.zk.get(path)
        except Exception:
            return None
        try:
            return json.loads(data)
        except (ValueError, UnicodeDecodeError):
            return data

    def children(self, path: str) -> list[str]:
        try:
            return sorted(self.zk.get_children(path))
        except Exception:
            return []

    def registered(self) -> set[int]:
        return {int(i) for i in self.children("/brokers/ids")}

    def controller_id(self) -> int | None:
        data = self.znode("/controller")
        return data["brokerid"] if isinstance(data, dict) else None

    def partition_state(self, topic: str, partition: int) -> dict | None:
        return self.znode(f"/brokers/topics/{topic}/partitions/{partition}/state")

    # -- waiting

    def wait_for(self, predicate: Callable[[], Any], what: str, timeout: float = DEADLINE_S) -> Any:
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                last = predicate()
            except Exception as exc:  # a broker restarting, a topic not there yet
                last = exc
            if last and not isinstance(last, Exception):
                return last
            time.sleep(0.1)
        raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")

    def metadata(self, broker_id: int | None = None, topics: list[str] | None = None):
        """Metadata as one broker answers it (confluent-kafka's admin client, that broker only)."""
        from confluent_kafka.admin import AdminClient

        target = (
            self.brokers[broker_id]
            if broker_id is not None
            else next(b for b in self.brokers.values() if b.alive)
        )
        admin = AdminClient({"bootstrap.servers": target.bootstrap, "enable.sparse.connections": False})
        if topics and len(topics) == 1:
            return admin.list_topics(topic=topics[0], timeout=20)
        return admin.list_topics(timeout=20)

    def wait_for_metadata_agreement(self) -> None:
        """Every live broker knows every live broker and the same controller."""
        live = {i for i, b in self.brokers.items() if b.alive}

        def agreed() -> bool:
            controller = self.controller_id()
            for i in live:
                md = self.metadata(i)
                if set(md.brokers) != live or md.controller_id != controller:
                    return False
            return controller in live

        self.wait_for(agreed, f"brokers {sorted(live)} agreeing on the cluster")

    def wait_for_leaders(
        self, topic: str, partitions: int, broker_ids: set[int] | None = None
    ) -> dict[int, Any]:
        """Until every live broker (or those given) shows a live leader for every partition; returns one view."""
        live = broker_ids or {i for i, b in self.brokers.items() if b.alive}

        def ready():
            views = []
            for i in live:
                md = self.metadata(i, [topic])
                t = md.topics.get(topic)
                if t is None or t.error is not None or len(t.partitions) != partitions:
                    return None
                if any(p.leader not in live for p in t.partitions.values()):
                    return None
                views.append({p.id: (p.leader, p.replicas, p.isrs) for p in t.partitions.values()})
            return views[0] if all(v == views[0] for v in views) else None

        return self.wait_for(ready, f"leaders of {topic} on brokers {sorted(live)}")

    def admin(self):
        from confluent_kafka.admin import AdminClient

        return AdminClient({"bootstrap.servers": self.bootstrap})

    def create_topic(self, name: str, partitions: int, replication: int, config: dict | None = None) -> None:
        from confluent_kafka.admin import NewTopic

        admin = self.admin()  # kept alive until the result is in
        futures = admin.create_topics(
            [NewTopic(name, partitions, replication, config=config or {})], operation_timeout=30
        )
        futures[name].result(60)


def _cluster(
    helpers, broker_logs_dir: Path, zookeeper, size: int, overrides: dict[str, str],
    per_broker: dict[int, dict[str, str]] | None = None,
) -> Cluster:  # fmt: skip
    n = next(_clusters)
    connect = zookeeper.connect_string(f"/cluster-{n}-{uuid.uuid4().hex[:6]}")
    return Cluster(helpers, broker_logs_dir / f"cluster-{n}", connect, size, overrides, f"c{n}", per_broker)


@pytest.fixture(scope="module")
def cluster(helpers, broker_logs_dir: Path, zookeeper) -> Iterator[Cluster]:
    c = _cluster(helpers, broker_logs_dir, zookeeper, 3, {})
    try:
        yield c.start()
    finally:
        c.stop()


@pytest.fixture(autouse=True)
def _show_cluster_logs(request: pytest.FixtureRequest) -> None:
    """Attach the logs of the module's cluster to a failing test's report."""
    if "cluster" in request.fixturenames:
        c = request.getfixturevalue("cluster")
        for broker in c.brokers.values():
            helpers = request.getfixturevalue("helpers")
            helpers.remember_broker(request, broker)


@pytest.fixture
def cluster_factory(request: pytest.FixtureRequest, helpers, broker_logs_dir: Path, zookeeper):
    made: list[Cluster] = []

    def factory(size: int = 3, per_broker: dict[int, dict[str, str]] | None = None, **overrides: str) -> Cluster:
        c = _cluster(
            helpers,
            broker_logs_dir,
            zookeeper,
            size,
            {k.replace("_", "."): str(v) for k, v in overrides.items()},
            per_broker,
        )
        made.append(c)
        for broker in c.brokers.values():
            helpers.remember_broker(request, broker)
        return c.start()

    yield factory
    for c in made:
        with contextlib.suppress(Exception):
            c.stop()
