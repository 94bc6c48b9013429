"""Replica placement (Kafka's AdminUtils.assignReplicasToBrokers), with expectations computed by hand from
Kafka's algorithm and its documented examples."""

from __future__ import annotations

from collections import Counter

import pytest

from broker_runtime.cluster.topics import assign_replicas
from broker_runtime.errors import KafkaError


def test_rack_unaware_matches_kafka() -> None:
    # Kafka's javadoc example: 5 brokers, 10 partitions, RF 3, start index 0
    got = assign_replicas([0, 1, 2, 3, 4], 10, 3, start_index=0)
    assert [got[p][0] for p in range(10)] == [0, 1, 2, 3, 4, 0, 1, 2, 3, 4]
    assert got[0] == [0, 1, 2] and got[4] == [4, 0, 1]
    assert got[5] == [0, 2, 3] and got[9] == [4, 1, 2]  # the follower shift grows after a full round


def test_leaders_and_replicas_spread_evenly() -> None:
    got = assign_replicas([1, 2, 3], 6, 3, start_index=-1)
    assert Counter(r[0] for r in got.values()) == {1: 2, 2: 2, 3: 2}
    assert all(len(set(r)) == 3 for r in got.values())


def test_rack_aware_puts_replicas_in_different_racks() -> None:
    racks = {0: "a", 1: "a", 2: "b", 3: "b", 4: "c", 5: "c"}
    got = assign_replicas(list(racks), 12, 3, start_index=-1, racks=racks)
    for replicas in got.values():
        assert len({racks[b] for b in replicas}) == 3, replicas
    assert Counter(r[0] for r in got.values()) == dict.fromkeys(racks, 2)
    # two racks, RF 3: both racks used, no broker twice
    racks2 = {0: "a", 1: "a", 2: "b", 3: "b"}
    for replicas in assign_replicas(list(racks2), 8, 3, start_index=-1, racks=racks2).values():
        assert {racks2[b] for b in replicas} == {"a", "b"} and len(set(replicas)) == 3


def test_errors() -> None:
    with pytest.raises(KafkaError, match="larger than available brokers"):
        assign_replicas([0, 1], 1, 3)
    with pytest.raises(KafkaError, match="Not all brokers have rack information"):
        assign_replicas([0, 1], 1, 2, racks={0: "a", 1: None})
