"""Transactional offset commits (TxnOffsetCommit) in the offsets half: pending per producer until the producer's
transaction marker, invisible to OffsetFetch meanwhile (UNSTABLE_OFFSET_COMMIT with require_stable), committed
or dropped by the marker, and rebuilt the same way when the partition is loaded from its log."""

from __future__ import annotations

from group_helpers import Consumer, ShardDriver, form_group
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from broker_runtime.group.api import TopicPartition
from broker_runtime.group.coordinator import GroupCoordinatorConfig, GroupCoordinatorShard
from broker_runtime.group.records import decode_key

E = ErrorCode
T0, T1 = ("t", 0), ("t", 1)


def pending_view(shard: GroupCoordinatorShard) -> dict:
    return {
        pid: {(g, tp.topic, tp.partition): (e.offset if e else None) for (g, tp), e in entries.items()}
        for pid, entries in shard.pending_txn_offsets.items()
        if entries
    }


def assert_reload_matches(d: ShardDriver) -> GroupCoordinatorShard:
    loaded = d.reload()
    assert loaded.persisted_state() == d.shard.persisted_state()
    assert pending_view(loaded) == pending_view(d.shard)
    # Groups only in memory (a simple group whose only commit was aborted) are not in the log, so not reloaded.
    assert (
        set(d.shard.offsets) | {g for p in pending_view(d.shard).values() for g, _, _ in p}
        <= set(loaded.groups)
        <= set(d.shard.groups)
    )
    return loaded


def test_offsets_committed_in_a_transaction_are_pending_until_the_commit_marker() -> None:
    d = ShardDriver()
    assert d.commit("g", {T0: 5}) == {T0: E.none}
    assert d.txn_commit("g", 7, {T0: 10, T1: 20}, producer_epoch=3) == {T0: E.none, T1: E.none}
    # Written as the producer's transactional records ...
    written = d.log[-2:]
    assert [(r.producer_id, r.transactional) for r in written] == [(7, True), (7, True)]
    assert {decode_key(r.key).partition for r in written} == {0, 1}
    # ... and not visible yet: a plain fetch sees the last committed offset, a stable fetch is told to retry.
    assert d.committed("g") == {T0: 5}
    assert d.committed("g", T0, T1) == {T0: 5, T1: -1}
    assert d.fetch_stable("g", T0, T1) == {T0: E.unstable_offset_commit, T1: E.unstable_offset_commit}
    assert d.fetch_stable("g") == {T0: E.unstable_offset_commit}  # all committed partitions
    assert d.fetch_stable("other-group", T0) == {T0: -1}
    assert_reload_matches(d)
    d.end_txn(7, committed=True)
    assert d.committed("g", T0, T1) == {T0: 10, T1: 20}
    assert d.fetch_stable("g", T0, T1) == {T0: 10, T1: 20}
    assert d.shard.pending_txn_offsets == {}
    assert_reload_matches(d)


def test_an_abort_marker_drops_the_transactions_offsets() -> None:
    d = ShardDriver()
    d.commit("g", {T0: 5})
    d.txn_commit("g", 7, {T0: 10, T1: 20})
    d.txn_commit("g", 8, {T1: 30})  # another producer's transaction, still open
    d.end_txn(7, committed=False)
    assert d.committed("g", T0, T1) == {T0: 5, T1: -1}
    assert d.fetch_stable("g", T0, T1) == {T0: 5, T1: E.unstable_offset_commit}
    loaded = assert_reload_matches(d)
    assert pending_view(loaded) == {8: {("g", "t", 1): 30}}
    # A marker for a producer without pending offsets here (its transaction touched other partitions) is a no-op.
    d.end_txn(99, committed=True)
    d.end_txn(8, committed=True)
    assert d.committed("g", T0, T1) == {T0: 5, T1: 30}
    assert_reload_matches(d)


def test_a_plain_commit_after_the_transactional_one_wins_when_the_transaction_commits() -> None:
    d = ShardDriver()
    d.txn_commit("g", 7, {T0: 10})
    assert d.commit("g", {T0: 50}) == {T0: E.none}
    d.end_txn(7, committed=True)
    assert d.committed("g", T0) == {T0: 50}  # the newer record stays, as compaction would keep it
    assert_reload_matches(d)


def test_a_partition_loaded_mid_transaction_keeps_it_pending_and_its_marker_completes_it() -> None:
    d = ShardDriver()
    d.txn_commit("g", 7, {T0: 10})
    loaded = assert_reload_matches(d)
    assert loaded.fetch_offsets("g", [TopicPartition(*T0)], require_stable=True).partitions[0].error is (
        E.unstable_offset_commit
    )
    d.shard = loaded  # the new coordinator serves; the transaction coordinator's marker arrives
    d.end_txn(7, committed=True)
    assert d.committed("g", T0) == {T0: 10}
    assert_reload_matches(d)


def test_transactional_commits_are_validated_as_kafka_validates_them() -> None:
    d = ShardDriver()
    assert d.txn_commit("", 7, {T0: 1}) == {T0: E.invalid_group_id}
    # A request without a producer is refused, never written as a plain commit.
    assert d.txn_commit("g", -1, {T0: 1}) == {T0: E.invalid_producer_id_mapping}
    assert d.txn_commit("g", 7, {T0: 1}, producer_epoch=-1) == {T0: E.invalid_producer_epoch}
    assert d.log == [] and "g" not in d.shard.groups
    assert d.txn_commit("unknown", 7, {T0: 1}, generation=3, member_id="m") == {T0: E.illegal_generation}
    a, b = Consumer(d), Consumer(d)
    form_group(a, b)
    # Versions before 3 carry no member: accepted even though the group has members.
    assert d.txn_commit("g", 7, {T0: 1}) == {T0: E.none}
    assert d.txn_commit("g", 7, {T0: 2}, generation=a.generation, member_id=a.member_id) == {T0: E.none}
    assert d.txn_commit("g", 7, {T0: 3}, generation=a.generation, member_id="ghost") == {
        T0: E.unknown_member_id
    }
    assert d.txn_commit("g", 7, {T0: 3}, generation=a.generation + 1, member_id=a.member_id) == {
        T0: E.illegal_generation
    }
    large = "x" * (GroupCoordinatorConfig().offset_metadata_max_bytes + 1)
    assert d.txn_commit("g", 7, {T0: 4}, metadata=large) == {T0: E.offset_metadata_too_large}
    # An unknown group with generation -1 is a simple group, created by the commit.
    assert d.txn_commit("simple", 8, {T1: 9}) == {T1: E.none}
    assert "simple" in d.shard.groups


def test_a_static_member_replaced_by_a_new_instance_is_fenced() -> None:
    d = ShardDriver()
    a = Consumer(d, instance_id="a")
    form_group(a)
    assert d.txn_commit("g", 7, {T0: 1}, generation=a.generation, member_id="old", instance_id="a") == {
        T0: E.fenced_instance_id
    }


def test_an_append_failure_answers_kafkas_mapped_error_and_leaves_nothing_pending() -> None:
    d = ShardDriver()
    d.fail_appends_with = E.not_enough_replicas
    assert d.txn_commit("g", 7, {T0: 1}) == {T0: E.coordinator_not_available}
    d.fail_appends_with = E.invalid_producer_epoch  # a fenced producer: its epoch is checked by the log
    assert d.txn_commit("g", 7, {T0: 1}) == {T0: E.invalid_producer_epoch}
    assert d.shard.pending_txn_offsets == {}


def test_pending_offsets_keep_an_empty_group_and_are_not_expired() -> None:
    config = GroupCoordinatorConfig(initial_rebalance_delay_ms=0, offsets_retention_ms=60_000)
    d = ShardDriver(config)
    d.commit("g", {T0: 1})
    d.txn_commit("g", 7, {T0: 2, T1: 3})
    d.advance(config.offsets_retention_check_interval_ms * 2)
    assert "g" in d.shard.groups  # the committed offset expired, the open transaction keeps the group
    assert d.shard.offsets.get("g", {}).get(TopicPartition(*T0)) is not None  # pending partition: not expired
    d.end_txn(7, committed=False)
    d.advance(config.offsets_retention_check_interval_ms)
    assert "g" not in d.shard.groups and "g" not in d.shard.offsets
    assert_reload_matches(d)


def test_deleting_offsets_or_the_group_removes_what_open_transactions_committed() -> None:
    d = ShardDriver()
    d.txn_commit("g", 7, {T0: 10, T1: 11})
    result = d.shard.delete_offsets("g", [TopicPartition(*T0)])
    d.flush()
    assert result.result().error is E.none
    assert pending_view(d.shard) == {7: {("g", "t", 1): 11}}
    assert_reload_matches(d)
    d.end_txn(7, committed=True)
    assert d.committed("g", T0, T1) == {T0: -1, T1: 11}  # the deleted one does not come back
    assert_reload_matches(d)
    d.txn_commit("h", 8, {T0: 5})
    deleted = d.shard.delete_groups(["h"])
    d.flush()
    assert deleted.result() == {"h": E.none}
    assert pending_view(d.shard) == {}
    d.end_txn(8, committed=True)
    assert d.committed("h", T0) == {T0: -1}
    assert_reload_matches(d)


operations = st.lists(
    st.one_of(
        st.tuples(
            st.just("commit"), st.sampled_from(["g", "h"]), st.sampled_from([T0, T1]), st.integers(0, 99)
        ),
        st.tuples(
            st.just("txn"),
            st.sampled_from(["g", "h"]),
            st.sampled_from([T0, T1]),
            st.integers(0, 99),
            st.sampled_from([7, 8]),
        ),
        st.tuples(st.just("marker"), st.sampled_from([7, 8]), st.booleans()),
        st.tuples(st.just("delete"), st.sampled_from(["g", "h"]), st.sampled_from([T0, T1])),
    ),
    max_size=25,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations)
def test_any_mix_of_plain_and_transactional_commits_reloads_to_the_same_state(ops) -> None:
    d = ShardDriver()
    for op in ops:
        if op[0] == "commit":
            d.commit(op[1], {op[2]: op[3]})
        elif op[0] == "txn":
            d.txn_commit(op[1], op[4], {op[2]: op[3]})
        elif op[0] == "marker":
            d.end_txn(op[1], committed=op[2])
        else:
            if op[1] in d.shard.groups:
                d.shard.delete_offsets(op[1], [TopicPartition(*op[2])])
                d.flush()
        assert_reload_matches(d)
