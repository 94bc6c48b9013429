"""A Jepsen-style run against a real cluster: idempotent acks=all producers and a consumer group committing
offsets, while a nemesis kills -9 leaders and restarts them, pauses a broker past its ZooKeeper session and
resumes it, and restarts ZooKeeper. Everything clients see is recorded for `tests.chaos.history.check`.

Used by the short fault test in `make test` (tests/integration/cluster/test_chaos.py) and by its long form
(`make chaos`: CHAOS_SECONDS, CHAOS_SEED, CHAOS_RESULT).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition

from broker_runtime.group.records import OFFSETS_TOPIC, partition_for
from tests.chaos.history import Commit, Record, value_of

FAULTS = ("kill-leader", "kill-coordinator", "pause", "zookeeper-restart")


@dataclass
class History:
    acked: list[Record] = field(default_factory=list)
    observed: list[Record] = field(default_factory=list)
    final: list[Record] = field(default_factory=list)
    commits: list[Commit] = field(default_factory=list)
    faults: list[dict] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class Workload:
    def __init__(self, bootstrap: str, topic: str, partitions: int, group: str, *, producers: int = 2,
                 consumers: int = 2, pace_s: float = 0.01) -> None:  # fmt: skip
        self.bootstrap, self.topic, self.partitions, self.group = bootstrap, topic, partitions, group
        self.history = History()
        self._stop = threading.Event()
        self._pace_s = pace_s  # between produces: a steady load, not synchronisation
        self._threads = [threading.Thread(target=self._produce, args=(f"p{i}",), daemon=True)
                         for i in range(producers)]  # fmt: skip
        self._threads += [threading.Thread(target=self._consume, daemon=True) for _ in range(consumers)]
        self._threads.append(threading.Thread(target=self._watch_commits, daemon=True))
        self.errors: list[str] = []

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def stop(self, timeout_s: float = 240.0) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout_s)
        stuck = [t.name for t in self._threads if t.is_alive()]
        assert not stuck, f"client threads did not finish: {stuck}"

    def _produce(self, name: str) -> None:
        h = self.history
        producer = Producer({
            "bootstrap.servers": self.bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
            "message.timeout.ms": 300000, "request.timeout.ms": 10000,
        })  # fmt: skip

        def delivered(err, msg) -> None:
            if err is None:
                with h.lock:
                    h.acked.append(Record(msg.partition(), msg.offset(), msg.value().decode()))

        sequence = 0
        while not self._stop.is_set():
            value = value_of(name, sequence)
            try:
                producer.produce(self.topic, value.encode(), partition=sequence % self.partitions,
                                 on_delivery=delivered)  # fmt: skip
            except BufferError:
                producer.poll(0.1)
                continue
            sequence += 1
            producer.poll(self._pace_s)
        remaining = producer.flush(280)
        if remaining:
            self.errors.append(f"{name}: {remaining} records neither acknowledged nor failed")

    def _consumer(self, group: str, **extra) -> Consumer:
        return Consumer({
            "bootstrap.servers": self.bootstrap, "group.id": group, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "session.timeout.ms": 10000, **extra,
        })  # fmt: skip

    def _consume(self) -> None:
        h = self.history
        consumer = self._consumer(self.group)
        consumer.subscribe([self.topic])
        try:
            while not self._stop.is_set():
                messages = consumer.consume(200, 0.5)
                seen = [
                    Record(m.partition(), m.offset(), m.value().decode())
                    for m in messages
                    if m.error() is None
                ]
                if not seen:
                    continue
                with h.lock:
                    h.observed.extend(seen)
                sent_at = time.monotonic()
                try:
                    committed = consumer.commit(asynchronous=False)
                except KafkaException:
                    continue  # a coordinator moving, a rebalance: the next batch commits again
                acked_at = time.monotonic()
                with h.lock:
                    h.commits.extend(Commit(tp.partition, tp.offset, "ack", sent_at, acked_at)
                                     for tp in committed or () if tp.error is None and tp.offset >= 0)  # fmt: skip
        finally:
            with contextlib.suppress(KafkaException, RuntimeError):
                consumer.close()

    def _watch_commits(self) -> None:
        """Reads the group's committed offsets back, over and over (a client outside the group)."""
        h = self.history
        watcher = self._consumer(self.group)
        wanted = [TopicPartition(self.topic, p) for p in range(self.partitions)]
        try:
            while not self._stop.wait(0.5):
                sent_at = time.monotonic()
                try:
                    committed = watcher.committed(wanted, timeout=10)
                except KafkaException:
                    continue
                answered_at = time.monotonic()
                with h.lock:
                    h.commits.extend(Commit(tp.partition, tp.offset, "read", sent_at, answered_at)
                                     for tp in committed if tp.error is None and tp.offset >= 0)  # fmt: skip
        finally:
            with contextlib.suppress(KafkaException, RuntimeError):
                watcher.close()

    def read_all(self, timeout_s: float = 120.0) -> list[Record]:
        """Every partition from its start to its high watermark, once, after the run."""
        reader = self._consumer(f"{self.group}-final")
        ends = {p: reader.get_watermark_offsets(TopicPartition(self.topic, p), timeout=30)[1]
                for p in range(self.partitions)}  # fmt: skip
        reader.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in range(self.partitions)])
        records: list[Record] = []
        positions = dict.fromkeys(ends, 0)
        deadline = time.monotonic() + timeout_s
        try:
            while any(positions[p] < ends[p] for p in ends) and time.monotonic() < deadline:
                for m in reader.consume(500, 0.5):
                    if m.error() is None:
                        records.append(Record(m.partition(), m.offset(), m.value().decode()))
                        positions[m.partition()] = m.offset() + 1
        finally:
            reader.close()
        short = {p: (positions[p], ends[p]) for p in ends if positions[p] < ends[p]}
        assert not short, f"the final read did not reach the high watermark (position, end): {short}"
        self.history.final = records
        return records


class Nemesis:
    """Faults against a `tests.integration.cluster.conftest.Cluster` and its `deploy.zookeeper.ZooKeeperServer`.
    Each fault is followed by the cluster healing (every broker back, every replica in sync) before the next."""

    def __init__(self, cluster, zookeeper, topic: str, partitions: int, group: str, rng: random.Random,
                 log: Callable[[str], None] = print) -> None:  # fmt: skip
        self.cluster, self.zookeeper, self.rng, self.log = cluster, zookeeper, rng, log
        self.topic, self.partitions, self.group = topic, partitions, group

    def run(self, fault: str) -> dict:
        started = time.monotonic()
        detail = getattr(self, "_" + fault.replace("-", "_"))()
        self.heal()
        event = {"fault": fault, **detail, "seconds": round(time.monotonic() - started, 1)}
        self.log(f"nemesis: {event}")
        return event

    def _kill(self, victim: int) -> dict:
        c = self.cluster
        c.brokers[victim].kill()
        survivors = set(c.brokers) - {victim}
        c.wait_for(lambda: all(c.partition_state(self.topic, p)["leader"] in survivors
                               for p in range(self.partitions)), "leaders on the survivors")  # fmt: skip
        c.restart(victim)
        return {"broker": victim}

    def _kill_leader(self) -> dict:
        return self._kill(
            self.cluster.partition_state(self.topic, self.rng.randrange(self.partitions))["leader"]
        )

    def _kill_coordinator(self) -> dict:
        offsets_partitions = len(self.cluster.children(f"/brokers/topics/{OFFSETS_TOPIC}/partitions"))
        if not offsets_partitions:
            return self._kill_leader()
        index = partition_for(self.group, offsets_partitions)
        return self._kill(self.cluster.partition_state(OFFSETS_TOPIC, index)["leader"])

    def _pause(self) -> dict:
        c = self.cluster
        victim = self.rng.choice(sorted(c.brokers))
        pid = c.brokers[victim].pid
        os.kill(pid, signal.SIGSTOP)
        try:
            c.wait_for(lambda: victim not in c.registered(), "the paused broker's session to expire")
        finally:
            os.kill(pid, signal.SIGCONT)
        c.wait_for(lambda: victim in c.registered(), "the paused broker to register again")
        return {"broker": victim}

    def _zookeeper_restart(self) -> dict:
        self.zookeeper.restart()
        self.cluster.wait_for(lambda: self.cluster.registered() == set(self.cluster.brokers),
                              "every broker registered after the ZooKeeper restart")  # fmt: skip
        return {}

    def heal(self, timeout_s: float = 120.0) -> None:
        c = self.cluster
        everyone = set(c.brokers)

        def healed() -> bool:
            if c.registered() != everyone:
                return False
            topics = [(self.topic, self.partitions)]
            offsets = len(c.children(f"/brokers/topics/{OFFSETS_TOPIC}/partitions"))
            if offsets:
                topics.append((OFFSETS_TOPIC, offsets))
            return all(set(c.partition_state(t, p)["isr"]) == everyone for t, n in topics for p in range(n))

        c.wait_for(healed, "every broker back in every ISR", timeout=timeout_s)
