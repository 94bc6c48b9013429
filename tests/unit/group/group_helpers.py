"""A test driver for the coordinator shard: it plays the runtime's part with a ManualClock and an in-memory log.

`ShardDriver` applies every append the shard queues (or fails it, when told to), assigns log offsets, replays
the records and runs continuations, so a test reads as a conversation with the coordinator. `Consumer` is a
well-behaved classic consumer built on it (MEMBER_ID_REQUIRED round trip, leader assignment, SyncGroup).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from broker_runtime.clock import ManualClock
from broker_runtime.group.api import (
    CommitPartition,
    HeartbeatArgs,
    JoinGroupArgs,
    JoinGroupResult,
    LeavingMember,
    OffsetCommitArgs,
    Reply,
    SyncGroupArgs,
    SyncGroupResult,
    TopicPartition,
    TxnOffsetCommitArgs,
)
from broker_runtime.group.coordinator import GroupCoordinatorConfig, GroupCoordinatorShard

SESSION_MS = 10_000
REBALANCE_MS = 30_000


def subscription(*topics: str, user_data: bytes | None = None) -> bytes:
    """ConsumerProtocolSubscription v0: version, topics, user data."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    out += struct.pack(">i", -1) if user_data is None else struct.pack(">i", len(user_data)) + user_data
    return out


def assignment(*partitions: tuple[str, int]) -> bytes:
    """ConsumerProtocolAssignment v0: version, [topic, [partition]], user data."""
    by_topic: dict[str, list[int]] = {}
    for t, p in partitions:
        by_topic.setdefault(t, []).append(p)
    out = struct.pack(">hi", 0, len(by_topic))
    for t, ps in by_topic.items():
        out += struct.pack(">h", len(t)) + t.encode() + struct.pack(">i", len(ps))
        out += b"".join(struct.pack(">i", p) for p in ps)
    return out + struct.pack(">i", -1)


def parse_assignment(data: bytes) -> set[tuple[str, int]]:
    if not data:
        return set()
    pos = 2
    (n_topics,) = struct.unpack_from(">i", data, pos)
    pos += 4
    out = set()
    for _ in range(n_topics):
        (n,) = struct.unpack_from(">h", data, pos)
        topic = data[pos + 2 : pos + 2 + n].decode()
        pos += 2 + n
        (n_parts,) = struct.unpack_from(">i", data, pos)
        pos += 4
        for _ in range(n_parts):
            out.add((topic, struct.unpack_from(">i", data, pos)[0]))
            pos += 4
    return out


@dataclass
class LoggedRecord:
    key: bytes
    value: bytes | None
    offset: int
    producer_id: int = -1
    transactional: bool = False
    marker_committed: bool | None = None  # a transaction marker (COMMIT/ABORT control record) of producer_id


class ShardDriver:
    def __init__(
        self, config: GroupCoordinatorConfig | None = None, clock: ManualClock | None = None
    ) -> None:
        self.clock = clock or ManualClock()
        self.config = config or GroupCoordinatorConfig(initial_rebalance_delay_ms=0)
        self.shard = GroupCoordinatorShard(0, self.config, self.clock)
        self.shard.finish_load()
        self.log: list[LoggedRecord] = []
        # Set to an error code to fail the next append(s) the way ReplicaManager.append would.
        self.fail_appends_with: ErrorCode | None = None
        # While True, appends queue up in `held` instead of completing (an append still in flight).
        self.hold_appends = False
        self.held: list = []

    def flush(self) -> None:
        while True:
            appends = self.shard.take_appends()
            if not appends:
                return
            for append in appends:
                if self.hold_appends:
                    self.held.append(append)
                else:
                    self._complete(append)

    def release(self) -> None:
        held, self.held = self.held, []
        for append in held:
            self._complete(append)
        self.flush()

    def _complete(self, append) -> None:
        if self.fail_appends_with is not None:
            if append.on_done is not None:
                append.on_done(self.fail_appends_with)
            return
        for key, value in append.records:
            record = LoggedRecord(key, value, len(self.log), append.producer_id, append.is_transactional)
            self.log.append(record)
            self.shard.replay(
                key,
                value,
                record.offset,
                producer_id=append.producer_id,
                transactional=append.is_transactional,
            )
        if append.on_done is not None:
            append.on_done(None)

    def end_txn(self, producer_id: int, committed: bool) -> None:
        """A transaction marker written to the partition (what the runtime's complete_transaction does)."""
        record = LoggedRecord(b"", None, len(self.log), producer_id, True, committed)
        self.log.append(record)
        self.shard.replay_end_txn(producer_id, committed, record.offset)
        self.flush()

    def reload(self) -> GroupCoordinatorShard:
        """A new shard for the same partition, loaded from everything in the log (markers included)."""
        shard = GroupCoordinatorShard(0, self.config, self.clock)
        for r in self.log:
            if r.marker_committed is not None:
                shard.replay_end_txn(r.producer_id, r.marker_committed, r.offset)
            else:
                shard.replay(
                    r.key, r.value, r.offset, producer_id=r.producer_id, transactional=r.transactional
                )
        shard.finish_load()
        return shard

    def advance(self, ms: int) -> None:
        """Let time pass in small steps so that timers fire at their deadlines, in order."""
        target = self.clock.monotonic_ms() + ms
        while True:
            deadline = self.shard.next_deadline()
            if deadline is None or deadline > target:
                break
            step = max(deadline - self.clock.monotonic_ms(), 0)
            self.clock.advance(step)
            self.shard.poll_timers()
            self.flush()
        self.clock.advance(target - self.clock.monotonic_ms())
        self.shard.poll_timers()
        self.flush()

    # --- requests -------------------------------------------------------------------------------------------

    def join(self, group_id: str = "g", member_id: str = "", **kwargs) -> Reply[JoinGroupResult]:
        args = JoinGroupArgs(
            group_id=group_id,
            member_id=member_id,
            protocol_type=kwargs.pop("protocol_type", "consumer"),
            protocols=kwargs.pop("protocols", (("range", subscription("t")),)),
            session_timeout_ms=kwargs.pop("session_timeout_ms", SESSION_MS),
            rebalance_timeout_ms=kwargs.pop("rebalance_timeout_ms", REBALANCE_MS),
            client_id=kwargs.pop("client_id", "client"),
            client_host=kwargs.pop("client_host", "/127.0.0.1"),
            **kwargs,
        )
        reply = self.shard.join_group(args)
        self.flush()
        return reply

    def sync(self, group_id: str, member_id: str, generation: int, **kwargs) -> Reply[SyncGroupResult]:
        reply = self.shard.sync_group(SyncGroupArgs(group_id, generation, member_id, **kwargs))
        self.flush()
        return reply

    def heartbeat(
        self, group_id: str, member_id: str, generation: int, instance_id: str | None = None
    ) -> ErrorCode:
        result = self.shard.heartbeat(HeartbeatArgs(group_id, generation, member_id, instance_id))
        self.flush()
        return result

    def leave(self, group_id: str, *members: LeavingMember):
        result = self.shard.leave_group(group_id, members)
        self.flush()
        return result

    def commit(
        self,
        group_id: str,
        offsets: dict[tuple[str, int], int],
        generation: int = -1,
        member_id: str = "",
        **kw,
    ) -> dict[tuple[str, int], ErrorCode]:
        metadata = kw.pop("metadata", "")
        args = OffsetCommitArgs(
            group_id,
            tuple(CommitPartition(t, p, o, metadata=metadata) for (t, p), o in offsets.items()),
            generation_id=generation,
            member_id=member_id,
            **kw,
        )
        reply = self.shard.commit_offsets(args)
        self.flush()
        if not reply.done:
            return {}
        return {(e.topic, e.partition): e.error for e in reply.result()}

    def txn_commit(
        self,
        group_id: str,
        producer_id: int,
        offsets: dict[tuple[str, int], int],
        *,
        producer_epoch: int = 0,
        generation: int = -1,
        member_id: str = "",
        instance_id: str | None = None,
        metadata: str = "",
    ) -> dict[tuple[str, int], ErrorCode]:
        args = TxnOffsetCommitArgs(
            group_id, f"txn-{producer_id}", producer_id, producer_epoch,
            tuple(CommitPartition(t, p, o, metadata=metadata) for (t, p), o in offsets.items()),
            generation_id=generation, member_id=member_id, group_instance_id=instance_id,
        )  # fmt: skip
        reply = self.shard.commit_transactional_offsets(args)
        self.flush()
        if not reply.done:
            return {}
        return {(e.topic, e.partition): e.error for e in reply.result()}

    def fetch_stable(self, group_id: str, *partitions: tuple[str, int]) -> dict[tuple[str, int], object]:
        """OffsetFetch with require_stable: the offset, or the error (UNSTABLE_OFFSET_COMMIT) per partition."""
        wanted = [TopicPartition(t, p) for t, p in partitions] if partitions else None
        result = self.shard.fetch_offsets(group_id, wanted, require_stable=True)
        return {
            (o.topic, o.partition): o.offset if o.error is ErrorCode.none else o.error
            for o in result.partitions
        }

    def committed(self, group_id: str, *partitions: tuple[str, int]) -> dict[tuple[str, int], int]:
        wanted = [TopicPartition(t, p) for t, p in partitions] if partitions else None
        result = self.shard.fetch_offsets(group_id, wanted)
        return {(o.topic, o.partition): o.offset for o in result.partitions}

    def state(self, group_id: str = "g") -> str:
        return self.shard.describe_group(group_id).state


@dataclass
class Consumer:
    """A classic consumer that follows the protocol, assigning partitions round-robin when it leads."""

    driver: ShardDriver
    group_id: str = "g"
    topics: tuple[str, ...] = ("t",)
    partitions: int = 4
    instance_id: str | None = None
    session_timeout_ms: int = SESSION_MS
    protocols: tuple[tuple[str, bytes], ...] | None = None
    member_id: str = ""
    generation: int = -1
    assigned: set[tuple[str, int]] = field(default_factory=set)
    join_reply: Reply[JoinGroupResult] | None = None
    sync_reply: Reply[SyncGroupResult] | None = None

    def protocol_list(self) -> tuple[tuple[str, bytes], ...]:
        return self.protocols or (("range", subscription(*self.topics)),)

    def start_join(self) -> Reply[JoinGroupResult]:
        """Send JoinGroup, doing the MEMBER_ID_REQUIRED round trip if the coordinator asks for it."""

        def join() -> Reply[JoinGroupResult]:
            return self.driver.join(
                self.group_id,
                self.member_id,
                protocols=self.protocol_list(),
                group_instance_id=self.instance_id,
                session_timeout_ms=self.session_timeout_ms,
            )

        reply = join()
        if reply.done and reply.result().error is ErrorCode.member_id_required:
            self.member_id = reply.result().member_id
            reply = join()
        self.join_reply = reply
        return reply

    def on_joined(self) -> Reply[SyncGroupResult]:
        """Process the JoinGroup response (it must be complete) and send SyncGroup."""
        assert self.join_reply is not None and self.join_reply.done, "JoinGroup has not completed"
        result = self.join_reply.result()
        assert result.error is ErrorCode.none, result.error
        self.member_id, self.generation = result.member_id, result.generation_id
        assignments: dict[str, bytes] = {}
        if result.leader == self.member_id and not result.skip_assignment:
            members = sorted(m.member_id for m in result.members)
            everything = [(t, p) for t in self.topics for p in range(self.partitions)]
            split: dict[str, list[tuple[str, int]]] = {m: [] for m in members}
            for i, tp in enumerate(everything):
                split[members[i % len(members)]].append(tp)
            assignments = {m: assignment(*tps) for m, tps in split.items()}
        self.sync_reply = self.driver.sync(
            self.group_id,
            self.member_id,
            self.generation,
            group_instance_id=self.instance_id,
            assignments=assignments,
        )
        return self.sync_reply

    def on_synced(self) -> None:
        assert self.sync_reply is not None and self.sync_reply.done, "SyncGroup has not completed"
        result = self.sync_reply.result()
        assert result.error is ErrorCode.none, result.error
        self.assigned = parse_assignment(result.assignment)

    def heartbeat(self) -> ErrorCode:
        return self.driver.heartbeat(self.group_id, self.member_id, self.generation, self.instance_id)

    def commit(self, offsets: dict[tuple[str, int], int]) -> dict[tuple[str, int], ErrorCode]:
        return self.driver.commit(
            self.group_id, offsets, self.generation, self.member_id, group_instance_id=self.instance_id
        )

    def leave(self):
        return self.driver.leave(self.group_id, LeavingMember(self.member_id, self.instance_id))


def form_group(*consumers: Consumer) -> None:
    """Join all consumers, let the join phase complete, and sync everyone (leader first)."""
    driver = consumers[0].driver
    for c in consumers:
        c.start_join()
    driver.advance(0)
    for c in consumers:
        assert c.join_reply.done, f"{c.member_id} still waiting in JoinGroup"
    leader = next(c for c in consumers if c.join_reply.result().leader == c.join_reply.result().member_id)
    leader.on_joined()
    for c in consumers:
        if c is not leader:
            c.on_joined()
    for c in consumers:
        c.on_synced()
