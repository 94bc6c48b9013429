"""Replay: what a shard holds is what its log says, whether it was built live or by loading the log."""

from __future__ import annotations

import random

import pytest
from group_helpers import SESSION_MS, Consumer, ShardDriver, form_group, parse_assignment, subscription
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from broker_runtime.clock import ManualClock
from broker_runtime.group.api import TopicPartition
from broker_runtime.group.coordinator import GroupCoordinatorConfig, GroupCoordinatorShard
from broker_runtime.group.records import (
    GroupMetadataValue,
    MemberMetadataValue,
    OffsetCommitValue,
    encode_group_metadata_key,
    encode_group_metadata_value,
    encode_offset_commit_key,
    encode_offset_commit_value,
)
from broker_runtime.group.state import GroupState

E = ErrorCode


def reload(d: ShardDriver) -> GroupCoordinatorShard:
    """A new shard for the same partition, loaded from everything the driver appended."""
    shard = GroupCoordinatorShard(0, d.config, d.clock)
    assert shard.loading
    for record in d.log:
        shard.replay(record.key, record.value, record.offset)
    shard.finish_load()
    return shard


def group_view(shard: GroupCoordinatorShard) -> dict:
    """The durable part of each group: what a reload must rebuild for Stable and Empty groups."""
    return {
        gid: (
            g.state,
            g.generation_id,
            g.protocol_type,
            g.protocol_name,
            g.leader_id,
            {
                m.member_id: (m.group_instance_id, m.assignment, m.session_timeout_ms)
                for m in g.members.values()
            },
        )
        for gid, g in shard.groups.items()
        if g.state in (GroupState.STABLE, GroupState.EMPTY)
    }


def assert_reload_matches(d: ShardDriver) -> GroupCoordinatorShard:
    loaded = reload(d)
    assert loaded.persisted_state() == d.shard.persisted_state()
    live, reloaded = group_view(d.shard), group_view(loaded)
    # Groups at rest (Stable, Empty) come back exactly; a group mid-rebalance comes back as its last written
    # generation, which is what its snapshot says.
    assert {g: reloaded.get(g) for g in live} == live
    for group_id in d.shard.groups:
        if group_id not in live and group_id in loaded.groups:
            snapshot, _ = d.shard.group_records[group_id]
            assert loaded.groups[group_id].generation_id == snapshot.generation
    # Groups that never wrote anything (a first join still in progress) are not in the log, so not reloaded.
    assert set(d.shard.group_records) | set(d.shard.offsets) <= set(loaded.groups) <= set(d.shard.groups)
    return loaded


def test_a_reload_rebuilds_groups_members_assignments_and_offsets() -> None:
    d = ShardDriver()
    a, b = Consumer(d, instance_id="a"), Consumer(d)
    form_group(a, b)
    a.commit({("t", 0): 11, ("t", 1): 12})
    d.commit("manual", {("x", 3): 99})
    Consumer(d, group_id="h").start_join()
    d.advance(0)  # group h stays in CompletingRebalance: no snapshot yet for its generation
    loaded = assert_reload_matches(d)
    group = loaded.groups["g"]
    assert group.state is GroupState.STABLE
    assert parse_assignment(group.members[a.member_id].assignment) == a.assigned
    assert loaded.fetch_offsets("manual", [TopicPartition("x", 3)]).partitions[0].offset == 99
    # h's only record is its empty generation-0 state, so it reloads as Empty
    assert "h" not in loaded.groups or loaded.groups["h"].state is GroupState.EMPTY


def test_members_of_a_reloaded_group_must_heartbeat_within_their_session() -> None:
    d = ShardDriver()
    a, b = Consumer(d), Consumer(d)
    form_group(a, b)
    d.shard = reload(d)  # the coordinator moved to another broker
    assert a.heartbeat() is E.none  # sessions restarted at load; the generation carried over
    d.advance(SESSION_MS - 1)
    assert a.heartbeat() is E.none
    d.advance(1)
    assert d.state() == "PreparingRebalance"  # b never heartbeat to the new coordinator


def test_load_keeps_only_the_latest_value_per_key_and_honours_tombstones() -> None:
    clock = ManualClock()
    shard = GroupCoordinatorShard(3, GroupCoordinatorConfig(), clock)
    key = encode_offset_commit_key("g", "t", 0)
    for i in range(1000):
        shard.replay(key, encode_offset_commit_value(OffsetCommitValue(i, "", 0)), i)
    gone = encode_offset_commit_key("g", "t", 1)
    shard.replay(gone, encode_offset_commit_value(OffsetCommitValue(5, "", 0)), 1000)
    shard.replay(gone, None, 1001)
    shard.finish_load()
    result = shard.fetch_offsets("g", [TopicPartition("t", 0), TopicPartition("t", 1)])
    assert [o.offset for o in result.partitions] == [999, -1]


def test_load_reads_records_written_by_kafka_in_older_and_newer_versions() -> None:
    member = MemberMetadataValue("m-1", None, "c", "/h", 45000, 45000, subscription("t"), b"\x00\x01")
    v0_group = encode_group_metadata_value(
        GroupMetadataValue("consumer", 4, "range", "m-1", -1, (member,)), version=0
    )
    v4_offset = encode_offset_commit_value(OffsetCommitValue(77, "meta", 1, 5), version=4)
    v1_offset = encode_offset_commit_value(
        OffsetCommitValue(3, "", 1, -1, expire_timestamp=10**15), version=1
    )
    shard = GroupCoordinatorShard(0, GroupCoordinatorConfig(), ManualClock())
    shard.replay(encode_group_metadata_key("old"), v0_group, 0)
    shard.replay(encode_offset_commit_key("old", "t", 0), v4_offset, 1)
    shard.replay(encode_offset_commit_key("old", "t", 1), v1_offset, 2)
    shard.replay(b"\x00\x05garbage", b"\x00\x00", 3)  # a record type from a newer Kafka: skipped
    shard.finish_load()
    group = shard.groups["old"]
    assert (group.state, group.generation_id, group.leader_id) == (GroupState.STABLE, 4, "m-1")
    assert group.members["m-1"].rebalance_timeout_ms == 45000
    fetched = shard.fetch_offsets("old", None).partitions
    assert [(o.partition, o.offset, o.leader_epoch, o.metadata) for o in fetched] == [
        (0, 77, 5, "meta"),
        (1, 3, -1, ""),
    ]


def test_committed_transaction_offsets_survive_a_reload_aborted_ones_do_not() -> None:
    shard = GroupCoordinatorShard(0, GroupCoordinatorConfig(), ManualClock())
    key = encode_offset_commit_key("g", "t", 0)
    shard.replay(key, encode_offset_commit_value(OffsetCommitValue(1, "", 0)), 0)
    shard.replay(
        key, encode_offset_commit_value(OffsetCommitValue(2, "", 0)), 1, producer_id=5, transactional=True
    )
    shard.replay_end_txn(5, committed=False, offset=2)
    shard.replay(
        key, encode_offset_commit_value(OffsetCommitValue(3, "", 0)), 3, producer_id=6, transactional=True
    )
    shard.replay_end_txn(6, committed=True, offset=4)
    other = encode_offset_commit_key("g", "t", 1)
    shard.replay(
        other, encode_offset_commit_value(OffsetCommitValue(8, "", 0)), 5, producer_id=9, transactional=True
    )
    shard.finish_load()
    assert shard.fetch_offsets("g", [TopicPartition("t", 0)]).partitions[0].offset == 3
    still_open = shard.fetch_offsets("g", [TopicPartition("t", 1)], require_stable=True).partitions[0]
    assert still_open.error is E.unstable_offset_commit


def test_reload_after_deletes_and_an_emptied_group() -> None:
    d = ShardDriver()
    a = Consumer(d)
    form_group(a)
    a.commit({("t", 0): 5})
    a.leave()
    d.advance(0)
    d.commit("gone", {("t", 0): 1})
    d.shard.delete_groups(["gone"])
    d.flush()
    loaded = assert_reload_matches(d)
    assert loaded.groups["g"].state is GroupState.EMPTY
    assert loaded.groups["g"].generation_id == 2
    assert "gone" not in loaded.groups


# --- randomised conversations --------------------------------------------------------------------------

ACTIONS = st.lists(
    st.tuples(
        st.sampled_from(
            ["join"] * 3
            + ["heartbeat"] * 6
            + ["commit"] * 4
            + ["tick"] * 4
            + ["leave", "stall", "crash", "manual", "delete"]
        ),
        st.integers(0, 3),  # which consumer
        st.integers(0, 6_000),  # how long a tick is, or the offset to commit
    ),
    max_size=80,
)


def progress(c: Consumer, owners: dict[int, dict[tuple[str, int], str]]) -> None:
    """What a client does with the responses it got: sync after joining, adopt the assignment, start over."""
    if c.join_reply is not None and c.join_reply.done:
        result = c.join_reply.result()
        if result.error is E.none:
            c.on_joined()
        elif result.error in (E.unknown_member_id, E.fenced_instance_id):
            c.member_id, c.generation = "", -1
        c.join_reply = None
    if c.sync_reply is not None and c.sync_reply.done:
        result = c.sync_reply.result()
        c.sync_reply = None
        if result.error is E.none:
            c.assigned = parse_assignment(result.assignment)
            # A restarted static member takes over its instance's assignment in the same generation (the old
            # process is fenced), so ownership is per instance for static members.
            me = c.instance_id or c.member_id
            for tp in c.assigned:
                owner = owners.setdefault(c.generation, {}).setdefault(tp, me)
                assert owner == me, f"{tp} owned by {owner} and {me} in generation {c.generation}"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ACTIONS)
def test_random_conversations_keep_invariants_and_replay_to_the_same_state(actions) -> None:
    run_conversation(actions)


@pytest.mark.parametrize("seed", range(20))
def test_long_seeded_conversations_keep_invariants_and_replay_to_the_same_state(seed: int) -> None:
    rng = random.Random(seed)
    kinds = (
        ["join"] * 3
        + ["heartbeat"] * 6
        + ["commit"] * 4
        + ["tick"] * 4
        + ["leave", "stall", "crash", "manual"]
    )
    actions = [(rng.choice(kinds), rng.randrange(4), rng.randrange(6000)) for _ in range(400)]
    d = run_conversation(actions)
    assert d.shard.groups["g"].generation_id >= 3  # the walk went through several rebalances


def run_conversation(actions) -> ShardDriver:
    d = ShardDriver(
        GroupCoordinatorConfig(initial_rebalance_delay_ms=0, offsets_retention_check_interval_ms=50_000)
    )
    consumers = [Consumer(d, instance_id="s0" if i == 0 else None) for i in range(4)]
    owners: dict[int, dict[tuple[str, int], str]] = {}  # generation -> partition -> member
    incarnation = None
    for action, who, n in actions:
        c = consumers[who]
        busy = c.join_reply is not None or c.sync_reply is not None
        if action == "join" and not busy:
            c.start_join()
        elif action == "heartbeat" and c.member_id and not busy:
            if c.heartbeat() in (E.rebalance_in_progress, E.illegal_generation):
                c.start_join()
        elif action == "commit" and c.member_id:
            c.commit({("t", who): n})
        elif action == "leave" and c.member_id:
            c.leave()
            consumers[who] = Consumer(d, instance_id=c.instance_id)
        elif action == "tick":
            d.advance(n)
        elif action == "stall":  # long enough for sessions and rebalances to time out
            d.advance(n * 10)
        elif action == "crash":
            consumers[who] = Consumer(d, instance_id=c.instance_id)
        elif action == "manual":
            d.commit("manual", {("m", who): n})
        elif action == "delete":
            d.shard.delete_groups(["manual", "g"])
            d.flush()
        d.advance(0)
        if d.shard.groups.get("g") is not incarnation:
            # Deleted, or retired when it was Empty without offsets: a recreated group counts from 1 again.
            incarnation = d.shard.groups.get("g")
            owners.clear()
        for x in consumers:
            progress(x, owners)
    assert_reload_matches(d)
    return d
