"""JoinGroup / SyncGroup / Heartbeat / LeaveGroup flows on one shard, with a manual clock."""

from __future__ import annotations

from group_helpers import REBALANCE_MS, SESSION_MS, Consumer, ShardDriver, form_group, subscription
from kio.schema.errors import ErrorCode

from broker_runtime.group.api import LeavingMember
from broker_runtime.group.coordinator import GroupCoordinatorConfig
from broker_runtime.group.records import GroupMetadataKey, decode_group_metadata_value, decode_key

E = ErrorCode


def test_member_id_required_round_trip_then_a_one_member_generation() -> None:
    d = ShardDriver()
    first = d.join()
    assert first.result().error is E.member_id_required
    member_id = first.result().member_id
    assert member_id.startswith("client-")
    assert d.state() == "Empty"  # a pending member is not a member yet

    joined = d.join(member_id=member_id)
    d.advance(0)  # initial delay 0: the join phase completes on the next timer tick
    result = joined.result()
    assert result.error is E.none
    assert (result.generation_id, result.leader, result.protocol_name) == (1, member_id, "range")
    assert [m.member_id for m in result.members] == [member_id]
    assert d.state() == "CompletingRebalance"

    synced = d.sync("g", member_id, 1, assignments={member_id: b"A"})
    assert synced.result().error is E.none and synced.result().assignment == b"A"
    assert d.state() == "Stable"
    # The generation and its assignment are in the log.
    key, value = d.log[-1].key, d.log[-1].value
    assert decode_key(key) == GroupMetadataKey("g")
    snapshot = decode_group_metadata_value(value)
    assert snapshot.generation == 1 and snapshot.members[0].assignment == b"A"


def test_pre_v4_join_gets_a_member_id_without_the_round_trip() -> None:
    d = ShardDriver()
    reply = d.join(require_known_member_id=False)
    d.advance(0)
    assert reply.result().error is E.none and reply.result().generation_id == 1


def test_two_members_split_the_partitions_and_followers_wait_for_the_leader() -> None:
    d = ShardDriver()
    a, b = Consumer(d), Consumer(d)
    a.start_join()
    b.start_join()
    d.advance(0)
    leader, follower = (a, b) if a.join_reply.result().leader == a.member_id else (b, a)
    assert len(leader.join_reply.result().members) == 2
    assert follower.join_reply.result().members == ()

    follower.on_joined()
    assert not follower.sync_reply.done  # parked until the leader's assignment is written
    leader.on_joined()
    assert follower.sync_reply.done and leader.sync_reply.done
    a.on_synced()
    b.on_synced()
    assert a.assigned and b.assigned and not (a.assigned & b.assigned)
    assert a.assigned | b.assigned == {("t", p) for p in range(4)}


def test_initial_delay_waits_and_doubles_while_members_keep_arriving() -> None:
    config = GroupCoordinatorConfig(initial_rebalance_delay_ms=3000)
    d = ShardDriver(config)
    first = Consumer(d)
    first.start_join()  # t=0: delay 3000, remaining = rebalance timeout 10000 - 3000
    joins = [first]
    d.advance(1000)
    second = Consumer(d)
    second.start_join()  # t=1000: extends the delay
    joins.append(second)
    d.advance(1999)
    assert not first.join_reply.done
    d.advance(1)  # t=3000: a member arrived, so wait another 3000 (remaining 7000 - 3000 = 4000)
    assert not first.join_reply.done
    d.advance(2000)
    third = Consumer(d)
    third.start_join()  # t=5000
    joins.append(third)
    d.advance(999)  # t=5999
    assert not first.join_reply.done
    d.advance(1)  # t=6000: extend again by min(3000, 4000)
    assert not first.join_reply.done
    d.advance(2999)
    assert not first.join_reply.done
    d.advance(1)  # t=9000: nobody new, the join phase completes
    assert all(c.join_reply.done for c in joins)
    assert {len(c.join_reply.result().members) for c in joins} == {0, 3}


def test_initial_delay_without_newcomers_completes_after_one_delay() -> None:
    d = ShardDriver(GroupCoordinatorConfig(initial_rebalance_delay_ms=3000))
    c = Consumer(d)
    c.start_join()
    d.advance(2999)
    assert not c.join_reply.done
    d.advance(1)
    assert c.join_reply.result().error is E.none


def test_initial_delay_is_capped_by_the_rebalance_timeout() -> None:
    d = ShardDriver(GroupCoordinatorConfig(initial_rebalance_delay_ms=3000))
    replies = []
    for i in range(6):
        replies.append(d.join(member_id="", require_known_member_id=False, rebalance_timeout_ms=7000))
        d.advance(2500)  # a newcomer before every expiry
        if i == 0:
            assert not replies[0].done
    # Delays: 3000, then min(3000, 4000), then min(3000, 1000): done by 3000 + 3000 + 1000 = 7000.
    assert all(r.done for r in replies[:3])


def test_heartbeat_errors_follow_the_group_state() -> None:
    d = ShardDriver()
    c = Consumer(d)
    form_group(c)
    assert c.heartbeat() is E.none
    assert d.heartbeat("g", c.member_id, c.generation + 1) is E.illegal_generation
    assert d.heartbeat("g", "nobody", c.generation) is E.unknown_member_id
    assert d.heartbeat("other", c.member_id, c.generation) is E.unknown_member_id
    assert d.heartbeat("", c.member_id, c.generation) is E.invalid_group_id
    other = Consumer(d)
    other.start_join()  # a newcomer starts a rebalance
    assert d.state() == "PreparingRebalance"
    assert c.heartbeat() is E.rebalance_in_progress


def test_a_member_that_stops_heartbeating_is_removed_and_the_rest_rebalance() -> None:
    d = ShardDriver()
    a, b = Consumer(d), Consumer(d)
    form_group(a, b)
    d.advance(SESSION_MS - 1)
    assert a.heartbeat() is E.none  # b is silent
    assert d.state() == "Stable"
    d.advance(1)  # b's session ends exactly one session timeout after its last sign of life
    assert d.state() == "PreparingRebalance"
    assert a.heartbeat() is E.rebalance_in_progress
    a.start_join()
    d.advance(0)
    assert a.join_reply.result().generation_id == 2
    assert [m.member_id for m in a.join_reply.result().members] == [a.member_id]
    a.on_joined()
    a.on_synced()
    assert a.assigned == {("t", p) for p in range(4)}
    assert d.heartbeat("g", b.member_id, b.generation) is E.unknown_member_id


def test_members_that_do_not_rejoin_in_time_are_dropped_from_the_new_generation() -> None:
    d = ShardDriver()
    a, b = Consumer(d), Consumer(d)
    form_group(a, b)
    leader, follower = (a, b) if d.shard.groups["g"].leader_id == a.member_id else (b, a)
    leader.start_join()  # the leader rejoins; the follower keeps heartbeating but never rejoins
    assert d.state() == "PreparingRebalance"
    for _ in range(REBALANCE_MS // 5000 - 1):
        d.advance(5000)
        assert follower.heartbeat() is E.rebalance_in_progress
    assert not leader.join_reply.done
    d.advance(5000)
    result = leader.join_reply.result()
    assert result.generation_id == 2
    assert [m.member_id for m in result.members] == [leader.member_id]
    assert follower.heartbeat() is E.unknown_member_id


def test_leave_group_triggers_a_rebalance_and_an_emptied_group_records_it() -> None:
    d = ShardDriver()
    a, b = Consumer(d), Consumer(d)
    form_group(a, b)
    result = b.leave()
    assert result.error is E.none and result.members[0].error is E.none
    assert d.state() == "PreparingRebalance"
    a.leave()
    d.advance(0)
    assert d.state() == "Empty"
    snapshot = decode_group_metadata_value(d.log[-1].value)
    assert snapshot.members == () and snapshot.generation == 2 and snapshot.protocol is None


def test_batched_leave_reports_each_member() -> None:
    d = ShardDriver()
    a, b = Consumer(d), Consumer(d, instance_id="static-b")
    form_group(a, b)
    result = d.leave(
        "g",
        LeavingMember(a.member_id),
        LeavingMember("", "static-b"),  # by group.instance.id alone, as the admin client does
        LeavingMember("ghost"),
        LeavingMember("wrong-id", "static-b"),
    )
    assert [m.error for m in result.members] == [E.none, E.none, E.unknown_member_id, E.unknown_member_id]
    d.advance(0)
    assert d.state() == "Empty"
    assert d.leave("missing-group", LeavingMember("x")).members[0].error is E.unknown_member_id


def test_leader_rejoin_forces_a_rebalance_follower_rejoin_does_not() -> None:
    d = ShardDriver()
    a, b = Consumer(d), Consumer(d)
    form_group(a, b)
    leader, follower = (a, b) if d.shard.groups["g"].leader_id == a.member_id else (b, a)
    again = d.join(member_id=follower.member_id, protocols=follower.protocol_list())
    assert again.result().error is E.none and again.result().generation_id == 1
    assert d.state() == "Stable"
    d.join(member_id=leader.member_id, protocols=leader.protocol_list())
    assert d.state() == "PreparingRebalance"


def test_changed_subscription_forces_a_rebalance() -> None:
    d = ShardDriver()
    a, b = Consumer(d), Consumer(d)
    form_group(a, b)
    follower = a if d.shard.groups["g"].leader_id != a.member_id else b
    d.join(member_id=follower.member_id, protocols=(("range", subscription("t", "u")),))
    assert d.state() == "PreparingRebalance"


def test_protocol_selection_picks_the_common_protocol_most_members_prefer() -> None:
    d = ShardDriver()
    replies = [
        d.join(require_known_member_id=False, protocols=(("range", b""), ("roundrobin", b""))),
        d.join(require_known_member_id=False, protocols=(("roundrobin", b""), ("range", b""))),
        d.join(
            require_known_member_id=False, protocols=(("sticky", b""), ("roundrobin", b""), ("range", b""))
        ),
    ]
    d.advance(0)
    assert {r.result().protocol_name for r in replies} == {"roundrobin"}


def test_a_member_without_a_common_protocol_is_rejected_and_the_group_carries_on() -> None:
    d = ShardDriver()
    a = Consumer(d)
    form_group(a)
    rejected = d.join(require_known_member_id=False, protocols=(("cooperative-sticky", b""),))
    assert rejected.result().error is E.inconsistent_group_protocol
    wrong_type = d.join(require_known_member_id=False, protocol_type="connect")
    assert wrong_type.result().error is E.inconsistent_group_protocol
    assert d.state() == "Stable" and a.heartbeat() is E.none
    empty = d.join("fresh", require_known_member_id=False, protocols=())
    assert empty.result().error is E.inconsistent_group_protocol


def test_session_timeout_outside_the_broker_bounds_is_refused() -> None:
    d = ShardDriver()
    assert d.join(session_timeout_ms=5999).result().error is E.invalid_session_timeout
    assert d.join(session_timeout_ms=1_800_001).result().error is E.invalid_session_timeout
    assert d.join(group_id="").result().error is E.invalid_group_id
    assert d.join(member_id="never-issued").result().error is E.unknown_member_id


def test_group_max_size_turns_away_extra_members() -> None:
    d = ShardDriver(GroupCoordinatorConfig(initial_rebalance_delay_ms=0, max_group_size=2))
    a, b = Consumer(d), Consumer(d)
    form_group(a, b)
    third = d.join(member_id="", require_known_member_id=False)
    assert third.result().error is E.group_max_size_reached
    assert d.state() == "Stable" and a.heartbeat() is E.none


def test_sync_group_validation_errors() -> None:
    d = ShardDriver()
    a = Consumer(d)
    a.start_join()
    d.advance(0)
    gen = a.join_reply.result().generation_id
    member = a.join_reply.result().member_id
    assert d.sync("g", member, gen + 1).result().error is E.illegal_generation
    assert d.sync("g", "stranger", gen).result().error is E.unknown_member_id
    assert d.sync("nope", member, gen).result().error is E.unknown_member_id
    assert (
        d.sync("g", member, gen, protocol_name="roundrobin").result().error is E.inconsistent_group_protocol
    )
    assert d.sync("g", member, gen, protocol_type="connect").result().error is E.inconsistent_group_protocol
    assert d.sync("", member, gen).result().error is E.invalid_group_id
    # None of that disturbed the group: the right SyncGroup still works.
    assert (
        d.sync("g", member, gen, protocol_name="range", assignments={member: b"x"}).result().error is E.none
    )
    Consumer(d).start_join()
    assert d.sync("g", member, gen).result().error is E.rebalance_in_progress


def test_a_follower_that_never_syncs_is_removed_after_the_rebalance_timeout() -> None:
    d = ShardDriver()
    a, b = Consumer(d), Consumer(d)
    a.start_join()
    b.start_join()
    d.advance(0)
    leader = a if a.join_reply.result().leader == a.member_id else b
    follower = b if leader is a else a
    leader.on_joined()
    leader.on_synced()
    for _ in range(REBALANCE_MS // 5000):
        d.advance(5000)
        leader.heartbeat()
    assert d.state() == "PreparingRebalance"
    assert follower.member_id not in d.shard.groups["g"].members


def test_failed_assignment_write_fails_the_sync_and_restarts_the_rebalance() -> None:
    d = ShardDriver()
    a, b = Consumer(d), Consumer(d)
    a.start_join()
    b.start_join()
    d.advance(0)
    follower = a if a.join_reply.result().leader != a.member_id else b
    leader = b if follower is a else a
    follower.on_joined()
    d.fail_appends_with = E.not_leader_or_follower
    leader.on_joined()
    assert leader.sync_reply.result().error is E.not_coordinator
    assert follower.sync_reply.result().error is E.not_coordinator
    assert d.state() == "PreparingRebalance"


def test_a_superseded_join_is_answered_so_the_connection_keeps_flowing() -> None:
    d = ShardDriver(GroupCoordinatorConfig(initial_rebalance_delay_ms=3000))
    a = Consumer(d)
    first = a.start_join()
    second = d.join(member_id=a.member_id)
    assert first.result().error is E.rebalance_in_progress
    d.advance(3000)
    assert second.result().error is E.none
