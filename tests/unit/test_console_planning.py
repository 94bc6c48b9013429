"""Reassignment planning (console/operations/planning.py): pure functions, checked on small clusters."""

from __future__ import annotations

from collections import Counter

import pytest

from console.operations import planning


def _counts(assignment):
    replicas = Counter(b for rs in assignment.values() for b in rs)
    leaders = Counter(rs[0] for rs in assignment.values())
    return replicas, leaders


def _apply(assignment, targets):
    return {**assignment, **targets}


def test_rebalance_onto_a_new_empty_broker_moves_the_smallest_partitions():
    assignment = {("t", p): [p % 3, (p + 1) % 3] for p in range(6)}  # brokers 0-2 hold 4 replicas each
    sizes = {("t", p): (p + 1) * 100 for p in range(6)}
    targets = planning.plan(assignment, {0: None, 1: None, 2: None, 3: None}, sizes, rebalance=True)
    after = _apply(assignment, targets)
    replicas, leaders = _counts(after)
    assert sorted(replicas.values()) == [3, 3, 3, 3]
    assert max(leaders.values()) - min(leaders[b] for b in range(4)) <= 1
    moved = planning.summary(targets, assignment, sizes)
    assert moved["replicas_moved"] == 3  # exactly what balance needs, no more
    # the three partitions that got a replica on broker 3 are the smallest ones that could go
    assert sorted(r["bytes"] for r in moved["partitions"] if r["adding"]) == [100, 200, 300]


def test_excluded_broker_is_emptied_keeping_racks_apart():
    racks = {0: "a", 1: "a", 2: "b", 3: "b"}
    assignment = {("t", 0): [0, 2], ("t", 1): [2, 0], ("t", 2): [1, 3]}
    targets = planning.plan(assignment, racks, {}, exclude=[0])
    assert targets == {("t", 0): [2, 1], ("t", 1): [2, 1]}  # broker 1 is the other broker of rack a
    assert all(0 not in rs for rs in _apply(assignment, targets).values())


def test_replication_factor_up_and_down():
    racks = {0: None, 1: None, 2: None}
    assignment = {("t", 0): [0], ("t", 1): [1, 2, 0]}
    targets = planning.plan(assignment, racks, {}, replication_factor={("t", 0): 3, ("t", 1): 1})
    assert targets[("t", 0)][0] == 0 and sorted(targets[("t", 0)]) == [0, 1, 2]
    assert targets[("t", 1)] == [1]  # the preferred leader stays


def test_too_few_brokers_is_refused():
    with pytest.raises(planning.PlanError, match="needs 3 replicas but only 2 eligible"):
        planning.plan({("t", 0): [0, 1, 2]}, {0: None, 1: None, 2: None}, {}, exclude=[2])


def test_balanced_cluster_needs_no_plan():
    assignment = {("t", p): [p % 3, (p + 1) % 3] for p in range(3)}
    assert planning.plan(assignment, {0: None, 1: None, 2: None}, {}, rebalance=True) == {}


def test_plan_file_round_trip_and_errors():
    targets = {("a", 0): [1, 2], ("b", 3): [0]}
    assert planning.from_json(planning.to_json(targets)) == targets
    document = {
        "version": 1,
        "partitions": [{"topic": "a", "partition": 0, "replicas": [1], "log_dirs": ["any"]}],
    }
    assert planning.from_json(document) == {("a", 0): [1]}
    for bad, message in [
        ({"partitions": []}, "moves no partition"),
        ({"version": 2, "partitions": [{}]}, "version 2"),
        ({"partitions": [{"topic": "a", "partition": -1, "replicas": [1]}]}, "partition must be"),
        ({"partitions": [{"topic": "a", "partition": 0, "replicas": [1, 1]}]}, "lists a broker twice"),
        ({"partitions": [{"topic": "a", "partition": 0, "replicas": [1], "log_dirs": ["/d"]}]}, 'only "any"'),
        ([1], "a plan is"),
    ]:
        with pytest.raises(planning.PlanError, match=message):
            planning.from_json(bad)
    with pytest.raises(planning.PlanError, match=r"broker\(s\) \[7\] are not live"):
        planning.check_against({("a", 0): [7]}, {("a", 0): [1]}, [1, 2])
    with pytest.raises(planning.PlanError, match="a-9 does not exist"):
        planning.check_against({("a", 9): [1]}, {("a", 0): [1]}, [1, 2])
