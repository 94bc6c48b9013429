"""Helpers for the consumer-group tests: member processes, the group's history, and the invariants.

- `Member`: one consumer-group member in its own process (`group_member.py` for confluent-kafka, kafka-python
  and aiokafka, `js/group_member.js` for kafkajs), whose JSON-lines events are collected by a reader thread.
  `stop()` is a clean shutdown (SIGTERM: commit, LeaveGroup), `kill()` is a crash (SIGKILL).
- `group_history()`: what the coordinator wrote to `__consumer_offsets` for a group, read back over the Kafka
  protocol (manual assignment of the group's partition) and decoded with the broker's record codecs: every
  generation's members and assignments, every offset commit in log order.
- Invariant checks over both: no partition owned by two members in one generation (as written by the
  coordinator and as seen by the clients, over time), no committed offset lost (commits never go backwards,
  every produced record is consumed, the final commit is the log end).
"""

from __future__ import annotations

import json
import os
import queue
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from broker_runtime.group.records import (
    OFFSETS_TOPIC,
    GroupMetadataKey,
    OffsetCommitKey,
    decode_group_metadata_value,
    decode_key,
    decode_offset_commit_value,
    partition_for,
)

HERE = Path(__file__).resolve().parent
MEMBER_PY = HERE / "group_member.py"
MEMBER_JS = HERE / "js" / "group_member.js"
CLIENTS = ("confluent", "kafka-python", "aiokafka", "kafkajs")
#: The coordinator's own records can be read back only from Odradek (ODRADEK_TEST_TARGET=tansu validates the
#: client-side checks of these tests against another broker).
HISTORY_READABLE = (
    os.environ.get("ODRADEK_TEST_TARGET", "odradek").strip().lower() or "odradek"
) == "odradek"


@dataclass
class Member:
    client: str
    bootstrap: str
    group: str
    topic: str
    assignor: str = "range"
    instance_id: str | None = None
    session_timeout_ms: int | None = None
    pace_ms: int = 0
    name: str = ""
    events: list[dict] = field(default_factory=list)
    proc: subprocess.Popen | None = None
    killed_at: float | None = None
    stderr_path: Path | None = None

    def start(self, log_dir: Path) -> Member:
        request = {
            "client": self.client,
            "bootstrap": self.bootstrap,
            "group": self.group,
            "topic": self.topic,
            "assignor": self.assignor,
            "instance_id": self.instance_id,
            "session_timeout_ms": self.session_timeout_ms,
            "pace_ms": self.pace_ms,
        }
        if self.client == "kafkajs":
            cmd = ["node", str(MEMBER_JS), json.dumps(request)]
        else:
            cmd = [sys.executable, str(MEMBER_PY), json.dumps(request)]
        log_dir.mkdir(parents=True, exist_ok=True)
        self.stderr_path = log_dir / f"member-{self.name or self.client}-{os.getpid()}-{id(self)}.log"
        self._events: queue.Queue[dict] = queue.Queue()
        with open(self.stderr_path, "wb") as stderr:  # the child keeps its own copy of the descriptor
            self.proc = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=stderr, stdin=subprocess.DEVNULL, text=True
            )
        threading.Thread(target=self._read, daemon=True).start()
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.strip()
            if line.startswith("{"):
                event = json.loads(line)
                self.events.append(event)
                self._events.put(event)

    # --- waiting ------------------------------------------------------------------------------------------

    def wait_for(self, predicate: Callable[[Member], bool], timeout: float = 45.0, what: str = "") -> None:
        deadline = time.monotonic() + timeout
        while not predicate(self):
            if self.proc is not None and self.proc.poll() is not None and not predicate(self):
                raise AssertionError(
                    f"{self.label} exited ({self.proc.returncode}) before {what}\n{self.stderr()}"
                )
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{self.label}: no {what} within {timeout}s; events {self.events[-5:]}\n{self.stderr()}"
                )
            time.sleep(0.05)

    @property
    def label(self) -> str:
        return f"{self.name or self.client} ({self.client})"

    def assignment(self) -> list[int] | None:
        """The member's current assignment, or None before its first."""
        current = None
        for e in self.events:
            if e["event"] == "assigned":
                current = list(e["partitions"])
            elif e["event"] == "revoked" and current is not None:
                current = [p for p in current if p not in e["partitions"]]
        return current

    def member_ids(self) -> set[str]:
        return {e["member_id"] for e in self.events if e["event"] == "assigned" and e.get("member_id")}

    def consumed(self) -> set[tuple[int, int]]:
        return {(p, o) for e in self.events if e["event"] == "records" for p, o in e["records"]}

    def assignments_count(self) -> int:
        return sum(1 for e in self.events if e["event"] == "assigned")

    def stderr(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")[-6000:] if self.stderr_path else ""
        except OSError:
            return ""

    # --- ending -------------------------------------------------------------------------------------------

    def stop(self, timeout: float = 30.0) -> None:
        """A clean shutdown: the client commits and leaves the group."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"{self.label} did not stop within {timeout}s\n{self.stderr()}") from None
        assert code == 0, f"{self.label} exited with {code}\n{self.stderr()}"

    def kill(self) -> None:
        """A crash: no LeaveGroup, no final commit."""
        if self.proc is not None and self.proc.poll() is None:
            self.killed_at = time.time()
            self.proc.kill()
            self.proc.wait(timeout=10)


def stop_all(members: list[Member]) -> None:
    errors = []
    for m in members:
        try:
            m.stop()
        except AssertionError as exc:
            errors.append(str(exc))
    if errors:
        raise AssertionError("\n".join(errors))


def wait_until(condition: Callable[[], bool], timeout: float = 45.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout}s")
        time.sleep(0.05)


def settled(members: list[Member], partitions: int) -> bool:
    """Every member has an assignment, they are disjoint and together cover every partition."""
    owned = [m.assignment() for m in members]
    if any(a is None for a in owned):
        return False
    flat = [p for a in owned for p in a]
    return len(flat) == len(set(flat)) == partitions


# --- the coordinator's history in __consumer_offsets --------------------------------------------------------


@dataclass
class Generation:
    generation: int
    protocol: str | None
    leader: str | None
    assignments: dict[str, set[int]]  # member id -> partitions of the test topic
    instance_ids: dict[str, str | None]


@dataclass
class GroupHistory:
    generations: list[Generation]
    commits: list[tuple[int, int]]  # (partition of the test topic, committed offset) in log order
    final_offsets: dict[int, int]


def parse_assignment(data: bytes, topic: str) -> set[int]:
    """ConsumerProtocolAssignment (any version; the prefix is stable): version, [topic, [partition]]."""
    if not data:
        return set()
    pos = 2
    (n_topics,) = struct.unpack_from(">i", data, pos)
    pos += 4
    out: set[int] = set()
    for _ in range(n_topics):
        (n,) = struct.unpack_from(">h", data, pos)
        name = data[pos + 2 : pos + 2 + n].decode()
        pos += 2 + n
        (n_parts,) = struct.unpack_from(">i", data, pos)
        pos += 4
        parts = struct.unpack_from(f">{n_parts}i", data, pos)
        pos += 4 * n_parts
        if name == topic:
            out.update(parts)
    return out


def group_history(bootstrap: str, group: str, topic: str, offsets_partitions: int = 50) -> GroupHistory:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    partition = partition_for(group, offsets_partitions)
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "history-reader", "enable.auto.commit": False}
    )
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(OFFSETS_TOPIC, partition), timeout=10)
        consumer.assign([TopicPartition(OFFSETS_TOPIC, partition, OFFSET_BEGINNING)])
        generations: list[Generation] = []
        commits: list[tuple[int, int]] = []
        final: dict[int, int] = {}
        position = low
        deadline = time.monotonic() + 30
        while position < high:
            assert time.monotonic() < deadline, f"could not read {OFFSETS_TOPIC}-{partition} to {high}"
            m = consumer.poll(0.5)
            if m is None or m.error():
                continue
            position = m.offset() + 1
            key = decode_key(m.key())
            if isinstance(key, GroupMetadataKey) and key.group == group and m.value() is not None:
                value = decode_group_metadata_value(m.value())
                generations.append(
                    Generation(
                        value.generation,
                        value.protocol,
                        value.leader,
                        {mm.member_id: parse_assignment(mm.assignment, topic) for mm in value.members},
                        {mm.member_id: mm.group_instance_id for mm in value.members},
                    )
                )
            elif isinstance(key, OffsetCommitKey) and key.group == group and key.topic == topic:
                if m.value() is not None:
                    offset = decode_offset_commit_value(m.value()).offset
                    commits.append((key.partition, offset))
                    final[key.partition] = offset
                else:
                    final.pop(key.partition, None)
        return GroupHistory(generations, commits, final)
    finally:
        consumer.close()


# --- invariants --------------------------------------------------------------------------------------------


def assert_no_partition_owned_twice_per_generation(history: GroupHistory) -> None:
    for g in history.generations:
        seen: dict[int, str] = {}
        for member_id, parts in g.assignments.items():
            for p in parts:
                assert p not in seen, (
                    f"generation {g.generation}: partition {p} given to {seen[p]} and {member_id}"
                )
                seen[p] = member_id


def assert_no_overlapping_ownership(members: list[Member]) -> None:
    """Client-side, over time: a partition never belongs to two live members at once.

    A member owns a partition from its 'assigned' event to its 'revoked' event (or its kill, or its exit).
    The clients report revocations before they rejoin and assignments after they sync, so on one machine's
    clock a handover is ordered.
    """
    intervals: dict[int, list[tuple[float, float, str]]] = {}
    for m in members:
        start: dict[int, float] = {}
        end_of_life = m.killed_at or max((e["t"] for e in m.events), default=time.time())
        for e in m.events:
            if e["event"] == "assigned":
                for p in e["partitions"]:
                    start.setdefault(p, e["t"])
            elif e["event"] == "revoked":
                for p in e["partitions"]:
                    if p in start:
                        intervals.setdefault(p, []).append((start.pop(p), e["t"], m.label))
            elif e["event"] == "closed":
                for p, t in start.items():
                    intervals.setdefault(p, []).append((t, e["t"], m.label))
                start.clear()
        for p, t in start.items():
            intervals.setdefault(p, []).append((t, end_of_life, m.label))
    for p, spans in intervals.items():
        spans.sort()
        latest_end, holder = float("-inf"), ""
        for start, end, who in spans:
            assert start >= latest_end or who == holder, (
                f"partition {p} owned by {holder} until {latest_end:.3f} and by {who} from {start:.3f}"
            )
            if end > latest_end:
                latest_end, holder = end, who


def assert_commits_never_go_backwards(history: GroupHistory) -> None:
    last: dict[int, int] = {}
    for p, offset in history.commits:
        assert offset >= last.get(p, 0), f"partition {p}: commit went back from {last[p]} to {offset}"
        last[p] = offset


def assert_everything_consumed(members: list[Member], end_offsets: dict[int, int]) -> None:
    consumed = set().union(*(m.consumed() for m in members))
    missing = {(p, o) for p, end in end_offsets.items() for o in range(end)} - consumed
    assert not missing, f"{len(missing)} records never consumed, e.g. {sorted(missing)[:10]}"


# --- fixtures (imported by the test modules) --------------------------------------------------------------

#: Group brokers start the first rebalance at once, and keep __consumer_offsets small so it is created fast.
GROUP_BROKER_OVERRIDES = {
    "group.initial.rebalance.delay.ms": "0",
    "offsets.topic.num.partitions": "10",
    "offsets.topic.replication.factor": "1",
    "num.partitions": "4",
}
OFFSETS_PARTITIONS = int(GROUP_BROKER_OVERRIDES["offsets.topic.num.partitions"])


@pytest.fixture(scope="session", name="_group_broker_process")
def group_broker_process_fixture(broker_logs_dir, helpers):
    broker = helpers.new_broker(broker_logs_dir, "groups", GROUP_BROKER_OVERRIDES)
    broker.start()
    yield broker
    broker.stop()


@pytest.fixture(name="group_broker")
def group_broker_fixture(request, _group_broker_process, helpers):
    """A session-wide broker for group tests (see GROUP_BROKER_OVERRIDES); restarted if a test left it dead."""
    broker = _group_broker_process
    helpers.remember_broker(request, broker)
    if not broker.alive:
        broker.start()
    return broker


class MemberFactory:
    """``members(client, bootstrap, group, topic, **options) -> Member`` (started); ``members.started``."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.started: list[Member] = []

    def __call__(self, client: str, bootstrap: str, group: str, topic: str, **options) -> Member:
        m = Member(client, bootstrap, group, topic, **options)
        m.start(self.log_dir)
        self.started.append(m)
        return m


@pytest.fixture(name="members")
def members_fixture(broker_logs_dir):
    """Member processes for one test; whatever is still running at teardown is stopped (or killed)."""
    factory = MemberFactory(broker_logs_dir / "members")
    yield factory
    for m in factory.started:
        try:
            m.stop(timeout=20)
        except AssertionError:
            m.kill()


def produce_spread(bootstrap: str, topic: str, partitions: int, per_partition: int, tag: str = "m") -> None:
    """`per_partition` records into every partition of `topic` (acks=all); raises on any delivery error."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    errors: list = []
    for p in range(partitions):
        for i in range(per_partition):
            producer.produce(topic, value=f"{tag}-{p}-{i}".encode(), partition=p,
                             on_delivery=lambda err, _msg: errors.append(err) if err else None)  # fmt: skip
        producer.poll(0)
    assert producer.flush(30) == 0, "records not delivered in 30 s"
    assert not errors, errors[:3]


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "end-offsets-reader"})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        }
    finally:
        consumer.close()


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        result = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=15)
        return {tp.partition: tp.offset for tp in result}
    finally:
        consumer.close()
