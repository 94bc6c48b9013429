"""Consumer groups with real clients in separate processes: join, leave, crash, assignors, static members.

Members are confluent-kafka, kafka-python, aiokafka and kafkajs processes (`group_member.py`,
`js/group_member.js`); a crash is SIGKILL of the member. After each scenario the test reads what the
coordinator wrote to `__consumer_offsets` and checks: no partition owned by two members in one generation
(coordinator side) or at the same time (client side), commits never go backwards, every record was consumed,
and the group's final commits are the log end.
"""

from __future__ import annotations

import uuid

import pytest
from group_harness import (
    CLIENTS,
    HISTORY_READABLE,
    OFFSETS_PARTITIONS,
    assert_commits_never_go_backwards,
    assert_everything_consumed,
    assert_no_overlapping_ownership,
    assert_no_partition_owned_twice_per_generation,
    committed_offsets,
    end_offsets,
    group_broker_fixture,  # noqa: F401  (fixture "group_broker")
    group_broker_process_fixture,  # noqa: F401  (fixture)
    group_history,
    members_fixture,  # noqa: F401  (fixture "members")
    produce_spread,
    settled,
    stop_all,
    wait_until,
)

PARTITIONS = 6


def _group() -> str:
    return f"g-{uuid.uuid4().hex[:10]}"


def _check_history(bootstrap: str, group: str, topic: str, all_members, ends: dict[int, int]) -> None:
    assert_everything_consumed(all_members, ends)
    assert_no_overlapping_ownership(all_members)
    if not HISTORY_READABLE:
        return
    history = group_history(bootstrap, group, topic, OFFSETS_PARTITIONS)
    assert history.generations, "the coordinator wrote no generation"
    assert_no_partition_owned_twice_per_generation(history)
    assert_commits_never_go_backwards(history)
    assert history.final_offsets == ends, "the last commit of every partition is its log end"


@pytest.mark.parametrize("client", CLIENTS)
def test_a_member_consumes_commits_and_its_successor_resumes_where_it_stopped(
    client, group_broker, new_topic, members
) -> None:
    bootstrap = group_broker.bootstrap
    topic = new_topic(PARTITIONS, broker=group_broker)
    group = _group()
    assignor = "roundrobin" if client == "kafkajs" else "range"
    produce_spread(bootstrap, topic, PARTITIONS, 20, "first")
    first = members(client, bootstrap, group, topic, assignor=assignor)
    first.wait_for(lambda m: len(m.consumed()) >= PARTITIONS * 20, what="all first records")
    wait_until(lambda: committed_offsets(bootstrap, group, topic, PARTITIONS) == dict.fromkeys(range(PARTITIONS), 20),
               what="commits of the first records")  # fmt: skip
    first.stop()

    produce_spread(bootstrap, topic, PARTITIONS, 10, "second")
    second = members(client, bootstrap, group, topic, assignor=assignor)
    second.wait_for(lambda m: len(m.consumed()) >= PARTITIONS * 10, what="the new records")
    wait_until(lambda: committed_offsets(bootstrap, group, topic, PARTITIONS) == dict.fromkeys(range(PARTITIONS), 30),
               what="commits of the new records")  # fmt: skip
    second.stop()
    # A clean handover re-delivers nothing: the successor starts at the committed offsets.
    assert min(o for _, o in second.consumed()) == 20
    assert len(second.consumed()) == PARTITIONS * 10
    _check_history(bootstrap, group, topic, [first, second], end_offsets(bootstrap, topic, PARTITIONS))


def test_four_libraries_share_a_roundrobin_group_through_joins_and_leaves(
    group_broker, new_topic, members
) -> None:
    bootstrap = group_broker.bootstrap
    topic = new_topic(PARTITIONS, broker=group_broker)
    group = _group()
    produce_spread(bootstrap, topic, PARTITIONS, 10, "a")
    group_members = []
    for client in CLIENTS:  # join one by one: every join is a rebalance
        group_members.append(members(client, bootstrap, group, topic, assignor="roundrobin", name=client))
        wait_until(lambda: settled(group_members, PARTITIONS), what=f"a settled group after {client} joined")
    assert all(m.assignment() for m in group_members), "six partitions over four members: everyone gets some"
    produce_spread(bootstrap, topic, PARTITIONS, 10, "b")
    for leaving in list(group_members[:-1]):  # leave one by one: the rest take over
        leaving.stop()
        group_members.remove(leaving)
        wait_until(
            lambda: settled(group_members, PARTITIONS), what=f"a settled group after {leaving.label} left"
        )
    last = group_members[0]
    ends = end_offsets(bootstrap, topic, PARTITIONS)
    wait_until(lambda: committed_offsets(bootstrap, group, topic, PARTITIONS) == ends, what="final commits")
    last.stop()
    _check_history(bootstrap, group, topic, members.started, ends)


@pytest.mark.parametrize("assignor", ["range", "roundrobin"])
def test_eager_group_survives_a_crashed_member(assignor, group_broker, new_topic, members) -> None:
    bootstrap = group_broker.bootstrap
    topic = new_topic(PARTITIONS, broker=group_broker)
    group = _group()
    produce_spread(bootstrap, topic, PARTITIONS, 30, "x")
    # Slow members (10 records per 100 ms batch, commit after each) so that everyone is busy when b dies.
    options = {"session_timeout_ms": 6000, "pace_ms": 100}
    a = members("confluent", bootstrap, group, topic, assignor=assignor, name="a", **options)
    b = members("kafka-python", bootstrap, group, topic, assignor=assignor, name="b", **options)
    c = members("aiokafka", bootstrap, group, topic, assignor=assignor, name="c", **options)
    wait_until(lambda: settled([a, b, c], PARTITIONS), what="three members settled")
    produce_spread(bootstrap, topic, PARTITIONS, 60, "x2")  # work for everyone, whoever joined first
    b.wait_for(lambda m: any(e["event"] == "committed" for e in m.events), what="b committing")
    b.kill()  # no LeaveGroup, no last commit: the coordinator notices when b's session runs out
    wait_until(lambda: settled([a, c], PARTITIONS), timeout=30, what="a and c taking over b's partitions")
    produce_spread(bootstrap, topic, PARTITIONS, 10, "y")
    a.stop()
    wait_until(lambda: settled([c], PARTITIONS), what="c alone")
    ends = end_offsets(bootstrap, topic, PARTITIONS)
    wait_until(lambda: committed_offsets(bootstrap, group, topic, PARTITIONS) == ends, what="final commits")
    c.stop()
    _check_history(bootstrap, group, topic, [a, b, c], ends)
    # b's uncommitted work is consumed again by its successors: at-least-once, nothing lost.


def test_cooperative_sticky_moves_only_the_partitions_that_change_owner(
    group_broker, new_topic, members
) -> None:
    bootstrap = group_broker.bootstrap
    topic = new_topic(PARTITIONS, broker=group_broker)
    group = _group()
    produce_spread(bootstrap, topic, PARTITIONS, 10, "c")
    a = members("confluent", bootstrap, group, topic, assignor="cooperative-sticky", name="a")
    wait_until(lambda: settled([a], PARTITIONS), what="a alone")
    b = members("kafka-python", bootstrap, group, topic, assignor="cooperative-sticky", name="b")
    wait_until(lambda: settled([a, b], PARTITIONS), what="a and b settled")
    a_revoked = {p for e in a.events if e["event"] == "revoked" for p in e["partitions"]}
    # Incremental: a gave up exactly what b now owns, never its whole assignment.
    assert a_revoked == set(b.assignment())
    assert set(a.assignment()) | a_revoked == set(range(PARTITIONS))
    assert len(b.assignment()) == PARTITIONS // 2
    ends = end_offsets(bootstrap, topic, PARTITIONS)
    wait_until(lambda: committed_offsets(bootstrap, group, topic, PARTITIONS) == ends, what="final commits")
    stop_all([a, b])
    _check_history(bootstrap, group, topic, [a, b], ends)


@pytest.mark.odradek_only  # reads the generation from __consumer_offsets
def test_a_static_member_restarted_within_its_session_gets_its_partitions_back_without_a_rebalance(
    group_broker, new_topic, members
) -> None:
    bootstrap = group_broker.bootstrap
    topic = new_topic(PARTITIONS, broker=group_broker)
    group = _group()
    produce_spread(bootstrap, topic, PARTITIONS, 10, "s")
    session = {"session_timeout_ms": 30000}
    a = members("confluent", bootstrap, group, topic, instance_id="static-a", name="a", **session)
    b = members("confluent", bootstrap, group, topic, instance_id="static-b", name="b", **session)
    wait_until(lambda: settled([a, b], PARTITIONS), what="a and b settled")
    before = group_history(bootstrap, group, topic, OFFSETS_PARTITIONS)
    generation = before.generations[-1].generation
    b_partitions = b.assignment()
    a_assignments = a.assignments_count()
    a_revocations = sum(1 for e in a.events if e["event"] == "revoked")

    b.kill()
    b2 = members("confluent", bootstrap, group, topic, instance_id="static-b", name="b-restarted", **session)
    b2.wait_for(lambda m: m.assignment() is not None, what="an assignment for the restarted member")
    assert b2.assignment() == b_partitions
    assert a.assignments_count() == a_assignments, "a saw a rebalance"
    assert sum(1 for e in a.events if e["event"] == "revoked") == a_revocations, "a gave up partitions"

    after = group_history(bootstrap, group, topic, OFFSETS_PARTITIONS)
    assert after.generations[-1].generation == generation, "the restart started a new generation"
    new_ids = {mid for mid, iid in after.generations[-1].instance_ids.items() if iid == "static-b"}
    assert new_ids == b2.member_ids(), "the coordinator recorded the restarted member's new id"
    stop_all([a, b2])
