"""Static membership (KIP-345): group.instance.id keeps a member's place across restarts."""

from __future__ import annotations

from group_helpers import REBALANCE_MS, Consumer, ShardDriver, form_group, subscription
from kio.schema.errors import ErrorCode

from broker_runtime.group.api import LeavingMember
from broker_runtime.group.records import decode_group_metadata_value

E = ErrorCode


def _group(d: ShardDriver):
    return d.shard.groups["g"]


def test_static_members_join_without_the_member_id_round_trip() -> None:
    d = ShardDriver()
    reply = d.join(group_instance_id="host-1")
    d.advance(0)
    assert reply.result().error is E.none
    assert reply.result().member_id.startswith("host-1-")


def test_restart_within_the_session_gets_the_old_assignment_without_a_rebalance() -> None:
    d = ShardDriver()
    a, b = Consumer(d, instance_id="a"), Consumer(d, instance_id="b")
    form_group(a, b)
    generation = _group(d).generation_id
    before = set(b.assigned)
    old_member_id = b.member_id

    # b's process restarts: it has lost its member id but not its instance id.
    restarted = Consumer(d, instance_id="b")
    reply = restarted.start_join()
    assert reply.result().error is E.none
    assert reply.result().generation_id == generation
    assert reply.result().member_id != old_member_id
    # The leader id is the old one, so the restarted member does not run an assignment a Stable group ignores.
    assert reply.result().leader != reply.result().member_id
    assert d.state() == "Stable"
    restarted.on_joined()
    restarted.on_synced()
    assert restarted.assigned == before
    assert a.heartbeat() is E.none  # nobody else noticed

    # The new member id is persisted; the old one is fenced everywhere.
    snapshot = decode_group_metadata_value(d.log[-1].value)
    assert restarted.member_id in {m.member_id for m in snapshot.members}
    assert d.heartbeat("g", old_member_id, generation, "b") is E.fenced_instance_id
    assert d.commit("g", {("t", 0): 1}, generation, old_member_id, group_instance_id="b") == {
        ("t", 0): E.fenced_instance_id
    }
    assert (
        d.sync("g", old_member_id, generation, group_instance_id="b").result().error is E.fenced_instance_id
    )


def test_restarted_static_leader_is_told_to_skip_assignment_on_v9() -> None:
    d = ShardDriver()
    a, b = Consumer(d, instance_id="a"), Consumer(d, instance_id="b")
    form_group(a, b)
    leader = a if _group(d).leader_id == a.member_id else b
    reply = d.join(group_instance_id=leader.instance_id, supports_skipping_assignment=True)
    result = reply.result()
    assert result.leader == result.member_id and result.skip_assignment
    assert len(result.members) == 2
    assert d.state() == "Stable"


def test_restart_that_changes_the_selected_protocol_rebalances() -> None:
    d = ShardDriver()
    a = Consumer(
        d, instance_id="a", protocols=(("range", subscription("t")), ("roundrobin", subscription("t")))
    )
    b = Consumer(
        d, instance_id="b", protocols=(("range", subscription("t")), ("roundrobin", subscription("t")))
    )
    form_group(a, b)
    assert _group(d).protocol_name == "range"
    d.join(group_instance_id="b", protocols=(("roundrobin", subscription("t")),))
    assert d.state() == "PreparingRebalance"


def test_static_member_that_misses_a_rebalance_keeps_its_place_until_it_fails_to_sync() -> None:
    d = ShardDriver()
    # Static members run with session timeouts longer than a rebalance, so a restart does not cost their place.
    a, b = Consumer(d), Consumer(d, instance_id="b", session_timeout_ms=60_000)
    form_group(a, b)
    newcomer = Consumer(d)
    newcomer.start_join()  # b (static) is down and does not rejoin
    a.start_join()
    d.advance(REBALANCE_MS)
    group = _group(d)
    assert a.join_reply.result().error is E.none
    assert b.member_id in group.members  # kept at the end of the join phase, unlike a dynamic member
    assert group.state.value == "CompletingRebalance"
    a.on_joined()
    newcomer.on_joined()
    for _ in range(REBALANCE_MS // 5000):  # b never sends SyncGroup for the new generation
        d.advance(5000)
        a.heartbeat()
        newcomer.heartbeat()
    assert b.member_id not in group.members
    assert group.state.value == "PreparingRebalance"


def test_a_second_instance_with_the_same_id_fences_the_first() -> None:
    d = ShardDriver()
    a = Consumer(d, instance_id="same")
    form_group(a)
    d.join(group_instance_id="same")  # a duplicate process with the same group.instance.id
    assert a.heartbeat() is E.fenced_instance_id
    assert d.join(member_id=a.member_id, group_instance_id="same").result().error is E.fenced_instance_id
    left = d.leave("g", LeavingMember(a.member_id, "same"))
    assert left.members[0].error is E.fenced_instance_id


def test_static_member_parked_in_join_is_fenced_when_replaced() -> None:
    d = ShardDriver()
    a, b = Consumer(d), Consumer(d, instance_id="b")
    form_group(a, b)
    Consumer(d).start_join()  # rebalance in progress
    parked = d.join(member_id=b.member_id, group_instance_id="b")
    assert not parked.done
    d.join(group_instance_id="b")  # b restarted meanwhile
    assert parked.result().error is E.fenced_instance_id


def test_unknown_instance_id_is_unknown_member() -> None:
    d = ShardDriver()
    a = Consumer(d)
    form_group(a)
    assert d.heartbeat("g", a.member_id, a.generation, "never-joined") is E.unknown_member_id
