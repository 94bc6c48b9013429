"""OffsetCommit, OffsetFetch, OffsetDelete, DeleteGroups and offset expiry on one shard."""

from __future__ import annotations

from group_helpers import Consumer, ShardDriver, form_group, subscription
from kio.schema.errors import ErrorCode

from broker_runtime.group.api import CommitPartition, OffsetCommitArgs, TopicPartition
from broker_runtime.group.coordinator import GroupCoordinatorConfig
from broker_runtime.group.records import (
    GroupMetadataKey,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_key,
    encode_offset_commit_key,
    encode_offset_commit_value,
)

E = ErrorCode
DAY = 24 * 3600 * 1000
WEEK = 7 * DAY


def test_member_commits_and_fetches_offsets_with_metadata_and_leader_epoch() -> None:
    d = ShardDriver()
    c = Consumer(d)
    form_group(c)
    reply = d.shard.commit_offsets(
        OffsetCommitArgs(
            "g",
            (
                CommitPartition("t", 0, 42, leader_epoch=3, metadata="checkpoint-7"),
                CommitPartition("t", 1, 9),
            ),
            generation_id=c.generation,
            member_id=c.member_id,
        )
    )
    assert not reply.done  # answered only once the records are appended
    d.flush()
    assert {e.error for e in reply.result()} == {E.none}
    fetched = d.shard.fetch_offsets(
        "g", [TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2)]
    )
    assert [(o.partition, o.offset, o.leader_epoch, o.metadata) for o in fetched.partitions] == [
        (0, 42, 3, "checkpoint-7"),
        (1, 9, -1, ""),
        (2, -1, -1, ""),
    ]
    everything = d.shard.fetch_offsets("g", None)
    assert {(o.topic, o.partition): o.offset for o in everything.partitions} == {("t", 0): 42, ("t", 1): 9}


def test_manual_assignment_commits_create_an_offsets_only_group() -> None:
    d = ShardDriver()
    assert d.commit("manual", {("t", 0): 5}) == {("t", 0): E.none}
    assert d.committed("manual", ("t", 0)) == {("t", 0): 5}
    assert d.state("manual") == "Empty"
    assert d.shard.describe_group("manual").protocol_type == ""
    # A generation this coordinator never issued is refused for an unknown group.
    assert d.commit("ghost", {("t", 0): 1}, generation=3, member_id="m") == {("t", 0): E.illegal_generation}


def test_commit_checks_generation_and_member() -> None:
    d = ShardDriver()
    a, b = Consumer(d), Consumer(d)
    form_group(a, b)
    assert a.commit({("t", 0): 1}) == {("t", 0): E.none}
    assert d.commit("g", {("t", 0): 2}, a.generation - 1, a.member_id) == {("t", 0): E.illegal_generation}
    assert d.commit("g", {("t", 0): 2}, a.generation, "intruder") == {("t", 0): E.unknown_member_id}
    # A group with members accepts no anonymous commits.
    assert d.commit("g", {("t", 0): 2}) == {("t", 0): E.unknown_member_id}
    assert d.committed("g", ("t", 0)) == {("t", 0): 1}


def test_commits_during_a_rebalance() -> None:
    d = ShardDriver()
    a, b = Consumer(d), Consumer(d)
    form_group(a, b)
    if d.shard.groups["g"].leader_id == a.member_id:
        a, b = b, a
    old_generation = a.generation
    b.start_join()  # the leader rejoins: PreparingRebalance; the old generation may still commit
    assert d.state() == "PreparingRebalance"
    assert a.commit({("t", 0): 7}) == {("t", 0): E.none}
    a.start_join()
    d.advance(0)
    assert d.state() == "CompletingRebalance"
    assert a.join_reply.result().generation_id == old_generation + 1
    a.generation = a.join_reply.result().generation_id
    assert a.commit({("t", 0): 8}) == {("t", 0): E.rebalance_in_progress}
    assert d.committed("g", ("t", 0)) == {("t", 0): 7}


def test_oversized_metadata_is_refused_per_partition() -> None:
    d = ShardDriver(GroupCoordinatorConfig(initial_rebalance_delay_ms=0, offset_metadata_max_bytes=10))
    reply = d.shard.commit_offsets(
        OffsetCommitArgs(
            "m", (CommitPartition("t", 0, 1, metadata="x" * 11), CommitPartition("t", 1, 2, metadata="ok"))
        )
    )
    d.flush()
    assert {(e.partition, e.error) for e in reply.result()} == {(0, E.offset_metadata_too_large), (1, E.none)}
    assert d.committed("m", ("t", 0), ("t", 1)) == {("t", 0): -1, ("t", 1): 2}
    only_bad = d.commit("m", {("t", 2): 3}, metadata="y" * 11)
    assert only_bad == {("t", 2): E.offset_metadata_too_large}
    # A non-BMP character is two UTF-16 units, which is what Kafka's String.length() counts.
    assert d.commit("m", {("t", 3): 4}, metadata="𝄞" * 5) == {("t", 3): E.none}
    assert d.commit("m", {("t", 3): 4}, metadata="a" + "𝄞" * 5) == {("t", 3): E.offset_metadata_too_large}


def test_failed_commit_append_maps_errors_like_kafka_and_stores_nothing() -> None:
    d = ShardDriver()
    d.fail_appends_with = E.not_leader_or_follower
    assert d.commit("m", {("t", 0): 1}) == {("t", 0): E.not_coordinator}
    d.fail_appends_with = E.not_enough_replicas
    assert d.commit("m", {("t", 0): 1}) == {("t", 0): E.coordinator_not_available}
    d.fail_appends_with = E.message_too_large
    assert d.commit("m", {("t", 0): 1}) == {("t", 0): E.invalid_commit_offset_size}
    d.fail_appends_with = None
    assert d.committed("m", ("t", 0)) == {("t", 0): -1}


def test_require_stable_reports_offsets_of_open_transactions() -> None:
    d = ShardDriver()
    d.commit("g", {("t", 0): 1})
    key = encode_offset_commit_key("g", "t", 0)
    value = encode_offset_commit_value(OffsetCommitValue(5, "", 0))
    d.shard.replay(key, value, 100, producer_id=7, transactional=True)
    stable = d.shard.fetch_offsets("g", [TopicPartition("t", 0)], require_stable=True)
    assert stable.partitions[0].error is E.unstable_offset_commit
    relaxed = d.shard.fetch_offsets("g", [TopicPartition("t", 0)], require_stable=False)
    assert relaxed.partitions[0].offset == 1
    d.shard.replay_end_txn(7, committed=True, offset=101)
    assert d.committed("g", ("t", 0)) == {("t", 0): 5}
    d.shard.replay(
        key, encode_offset_commit_value(OffsetCommitValue(9, "", 0)), 102, producer_id=8, transactional=True
    )
    d.shard.replay_end_txn(8, committed=False, offset=103)
    assert d.committed("g", ("t", 0)) == {("t", 0): 5}


def test_offset_delete_rules() -> None:
    d = ShardDriver()
    c = Consumer(d, topics=("t",))
    form_group(c)
    assert c.commit({("t", 0): 1}) == {("t", 0): E.none}
    assert d.commit("g", {("old", 0): 3}, c.generation, c.member_id) == {("old", 0): E.none}
    reply = d.shard.delete_offsets("g", [TopicPartition("t", 0), TopicPartition("old", 0)])
    d.flush()
    result = reply.result()
    assert result.error is E.none
    assert {(p.topic, p.error) for p in result.partitions} == {
        ("t", E.group_subscribed_to_topic),
        ("old", E.none),
    }
    assert d.committed("g") == {("t", 0): 1}
    missing = d.shard.delete_offsets("nope", [TopicPartition("t", 0)])
    assert missing.result().error is E.group_id_not_found
    assert d.shard.delete_offsets("", [TopicPartition("t", 0)]).result().error is E.invalid_group_id


def test_offset_delete_of_a_non_consumer_group_with_members_is_refused() -> None:
    d = ShardDriver()
    d.join(protocol_type="connect", require_known_member_id=False, protocols=(("default", b""),))
    d.advance(0)
    assert d.shard.delete_offsets("g", [TopicPartition("t", 0)]).result().error is E.non_empty_group


def test_deleting_the_last_offset_of_an_empty_group_removes_the_group() -> None:
    d = ShardDriver()
    d.commit("m", {("t", 0): 1})
    reply = d.shard.delete_offsets("m", [TopicPartition("t", 0)])
    d.flush()
    assert reply.result().partitions[0].error is E.none
    assert d.state("m") == "Dead"
    assert decode_key(d.log[-1].key) == OffsetCommitKey("m", "t", 0) and d.log[-1].value is None


def test_delete_groups() -> None:
    d = ShardDriver()
    c = Consumer(d)
    form_group(c)
    c.commit({("t", 0): 4})
    d.commit("idle", {("t", 0): 2})
    reply = d.shard.delete_groups(["g", "idle", "missing"])
    d.flush()
    assert reply.result() == {"g": E.non_empty_group, "idle": E.none, "missing": E.group_id_not_found}
    assert d.state("idle") == "Dead"
    assert d.committed("idle", ("t", 0)) == {("t", 0): -1}
    assert d.state("g") == "Stable"

    c.leave()
    d.advance(0)
    assert d.state("g") == "Empty"
    reply = d.shard.delete_groups(["g"])
    d.flush()
    assert reply.result() == {"g": E.none}
    tombstones = {decode_key(r.key) for r in d.log[-2:] if r.value is None}
    assert tombstones == {OffsetCommitKey("g", "t", 0), GroupMetadataKey("g")}
    assert d.shard.list_groups() == []


def test_offsets_of_an_empty_group_expire_a_retention_period_after_it_became_empty() -> None:
    config = GroupCoordinatorConfig(initial_rebalance_delay_ms=0, offsets_retention_check_interval_ms=60_000)
    d = ShardDriver(config)
    c = Consumer(d, session_timeout_ms=1_800_000)
    form_group(c)
    c.commit({("t", 0): 10})
    for _ in range(3 * DAY // 1_200_000):  # committed long ago, but the group is active: nothing expires
        d.advance(1_200_000)
        assert c.heartbeat() is E.none
    assert d.committed("g", ("t", 0)) == {("t", 0): 10}
    c.leave()
    d.advance(0)
    assert d.state() == "Empty"
    d.advance(WEEK - 120_000)
    assert d.committed("g", ("t", 0)) == {("t", 0): 10}
    d.advance(120_000)
    assert d.committed("g", ("t", 0)) == {("t", 0): -1}
    assert d.state() == "Dead"  # and the group itself went with its last offset
    assert GroupMetadataKey("g") in {decode_key(r.key) for r in d.log if r.value is None}


def test_manual_offsets_expire_a_retention_period_after_their_commit() -> None:
    config = GroupCoordinatorConfig(initial_rebalance_delay_ms=0, offsets_retention_check_interval_ms=60_000)
    d = ShardDriver(config)
    d.commit("m", {("t", 0): 1})
    d.advance(DAY)
    d.commit("m", {("t", 1): 2})
    d.advance(WEEK - DAY + 60_000)
    assert d.committed("m") == {("t", 1): 2}
    d.advance(DAY)
    assert d.committed("m") == {}
    assert d.state("m") == "Dead"


def test_a_stable_consumer_group_keeps_subscribed_offsets_and_expires_the_rest() -> None:
    config = GroupCoordinatorConfig(initial_rebalance_delay_ms=0, offsets_retention_check_interval_ms=60_000)
    d = ShardDriver(config)
    c = Consumer(d, protocols=(("range", subscription("t")),))
    form_group(c)
    assert d.commit("g", {("t", 0): 1, ("gone", 0): 2}, c.generation, c.member_id) == {
        ("t", 0): E.none,
        ("gone", 0): E.none,
    }
    for _ in range(WEEK // 5000 + 20):
        d.clock.advance(5000)
        d.shard.poll_timers()
        d.flush()
        c.heartbeat()
    assert d.committed("g") == {("t", 0): 1}


def test_explicit_retention_from_old_commit_versions_is_honoured() -> None:
    config = GroupCoordinatorConfig(initial_rebalance_delay_ms=0, offsets_retention_check_interval_ms=1000)
    d = ShardDriver(config)
    d.commit("m", {("t", 0): 1}, retention_time_ms=5000)
    d.advance(4000)
    assert d.committed("m") == {("t", 0): 1}
    d.advance(2000)
    assert d.committed("m") == {}


def test_deleted_topics_lose_their_offsets() -> None:
    d = ShardDriver()
    d.commit("m", {("t", 0): 1, ("u", 0): 2})
    d.shard.on_partitions_deleted([TopicPartition("t", 0)])
    d.flush()
    assert d.committed("m") == {("u", 0): 2}
