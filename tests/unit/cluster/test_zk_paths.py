"""ZooKeeper znode JSON: what Kafka 3.9 writes is read, and what we write has Kafka's shape (ZkData.scala)."""

from __future__ import annotations

import json
import uuid

import pytest

from broker_runtime.cluster import zk_paths as z


def test_broker_registration_reads_what_kafka_writes() -> None:
    kafka = (
        b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT","REPL":"SSL"},'
        b'"endpoints":["PLAINTEXT://10.0.0.5:9092","REPL://[::1]:9093"],"jmx_port":-1,"port":9092,'
        b'"host":"10.0.0.5","version":5,"timestamp":"1700000000000","rack":"eu-1a"}'
    )
    reg = z.decode_broker(3, kafka, epoch=4711)
    assert reg == z.BrokerRegistration(
        3,
        (z.Endpoint("PLAINTEXT", "10.0.0.5", 9092), z.Endpoint("REPL", "::1", 9093, "SSL")),
        rack="eu-1a",
        epoch=4711,
    )
    assert reg.endpoint("REPL").port == 9093
    # version 1 (host and port only) is still readable
    assert z.decode_broker(1, b'{"version":1,"host":"h","port":1,"jmx_port":-1}').endpoints == (
        z.Endpoint("PLAINTEXT", "h", 1),
    )


def test_broker_registration_written_in_kafka_shape() -> None:
    reg = z.BrokerRegistration(2, (z.Endpoint("PLAINTEXT", "127.0.0.1", 9092),), rack=None)
    obj = json.loads(z.encode_broker(reg))
    assert obj["version"] == 5
    assert obj["endpoints"] == ["PLAINTEXT://127.0.0.1:9092"]
    assert (obj["host"], obj["port"], obj["jmx_port"]) == ("127.0.0.1", 9092, -1)
    assert obj["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT"}
    assert obj["features"] == {} and obj["timestamp"].isdigit()
    assert "rack" not in obj
    assert z.decode_broker(2, z.encode_broker(reg)) == reg


def test_topic_assignment_with_topic_id_and_reassignment_state() -> None:
    topic_id = uuid.UUID("6a4f4a9f-0c8e-4b7f-9d1a-1f2e3d4c5b6a")
    encoded = z.encode_topic(
        topic_id,
        {1: z.ReplicaAssignment((3, 1, 2), adding=(3,), removing=(2,)), 0: z.ReplicaAssignment((1, 2))},
    )
    assert json.loads(encoded) == {
        "partitions": {"0": [1, 2], "1": [3, 1, 2]},
        "adding_replicas": {"1": [3]},
        "removing_replicas": {"1": [2]},
        "version": 3,
        "topic_id": "ak9KnwyOS3-dGh8uPUxbag",
    }
    decoded = z.decode_topic("t", encoded)
    assert decoded.topic_id == topic_id
    assert decoded.partitions[1].target_replicas == (3, 1)
    assert decoded.partitions[1].origin_replicas == (1, 2)
    # a Kafka 1.x znode: no topic id, no reassignment fields
    old = z.decode_topic("t", b'{"version":1,"partitions":{"0":[5]}}')
    assert old.topic_id is None and old.partitions == {0: z.ReplicaAssignment((5,))}


def test_topic_ids_use_kafka_base64() -> None:
    topic_id = uuid.uuid4()
    text = z.topic_id_to_str(topic_id)
    assert len(text) == 22 and "=" not in text
    assert z.topic_id_from_str(text) == topic_id


def test_reassign_to_orders_target_first() -> None:
    current = z.ReplicaAssignment((1, 2, 3))
    moving = current.reassign_to([3, 4, 2])
    assert moving == z.ReplicaAssignment((3, 4, 2, 1), adding=(4,), removing=(1,))
    assert moving.target_replicas == (3, 4, 2)
    # a second reassignment replaces the first; origin replicas keep their current order (as in Kafka)
    assert moving.reassign_to([5]) == z.ReplicaAssignment((5, 3, 2, 1), adding=(5,), removing=(3, 2, 1))


def test_partition_state() -> None:
    state = z.LeaderAndIsr(leader=2, leader_epoch=7, isr=(2, 3), controller_epoch=4)
    assert json.loads(z.encode_partition_state(state)) == {
        "controller_epoch": 4, "leader": 2, "version": 1, "leader_epoch": 7, "isr": [2, 3]
    }  # fmt: skip
    decoded = z.decode_partition_state("t", 0, z.encode_partition_state(state), zk_version=12)
    assert decoded == z.LeaderAndIsr(2, 7, (2, 3), 4, partition_epoch=12)
    recovering = z.LeaderAndIsr(1, 1, (1,), 4, leader_recovery_state=1)
    assert json.loads(z.encode_partition_state(recovering))["leader_recovery_state"] == 1
    with pytest.raises(z.ZkDataError, match="partitions/0/state"):
        z.decode_partition_state("t", 0, b'{"leader":1}', 0)


def test_small_znodes() -> None:
    assert json.loads(z.encode_cluster_id("abc")) == {"version": "1", "id": "abc"}
    assert z.decode_cluster_id(b'{"version":"1","id":"Zx9"}') == "Zx9"
    controller = json.loads(z.encode_controller(5))
    assert controller["brokerid"] == 5 and controller["version"] == 2
    assert z.decode_controller(z.encode_controller(5)) == 5
    assert z.decode_controller_epoch(b"17") == 17 and z.encode_controller_epoch(18) == b"18"
    assert json.loads(z.encode_config({"retention.ms": "1000"})) == {
        "version": 1,
        "config": {"retention.ms": "1000"},
    }
    assert z.decode_config("/config/topics/t", b'{"version":1,"config":{"a":"b"}}') == {"a": "b"}
    assert z.decode_config("/config/topics/t", b"") == {}
    assert json.loads(z.encode_config_change("topics", "t")) == {"version": 2, "entity_path": "topics/t"}
    assert z.decode_config_change(
        "/config/changes/x", b'{"version":2,"entity_path":"brokers/<default>"}'
    ) == (
        "brokers",
        "<default>",
    )
    assert z.broker_config_path("") == "/config/brokers/<default>"
    assert z.sorted_by_sequence(
        ["config_change_0000000010", "config_change_0000000002", "x"], "config_change_"
    ) == [
        "config_change_0000000002",
        "config_change_0000000010",
    ]


def test_admin_znodes() -> None:
    plan = {("foo", 1): (1, 2, 3), ("bar", 0): (4,)}
    encoded = z.encode_reassignment(plan)
    assert json.loads(encoded) == {
        "version": 1,
        "partitions": [
            {"topic": "bar", "partition": 0, "replicas": [4]},
            {"topic": "foo", "partition": 1, "replicas": [1, 2, 3]},
        ],
    }
    assert z.decode_reassignment(encoded) == plan
    election = z.encode_partition_set([("foo", 1), ("foo", 1), ("bar", 2)])
    assert json.loads(election)["partitions"] == [
        {"topic": "bar", "partition": 2},
        {"topic": "foo", "partition": 1},
    ]
    assert z.decode_partition_set(z.PREFERRED_REPLICA_ELECTION, election) == {("foo", 1), ("bar", 2)}
    with pytest.raises(z.ZkDataError, match="reassign_partitions"):
        z.decode_reassignment(b'{"version":1,"partitions":[{"topic":"foo"}]}')


def test_producer_id_block() -> None:
    block = z.ProducerIdBlock(broker_id=1, first=1000, size=1000)
    assert json.loads(z.encode_producer_id_block(block)) == {
        "version": 1, "broker": 1, "block_start": "1000", "block_end": "1999"
    }  # fmt: skip
    assert z.decode_producer_id_block(z.encode_producer_id_block(block)) == block
    assert z.decode_producer_id_block(b"") is None


@pytest.mark.parametrize("garbage", [b"", b"not json", b"[1,2]", b'{"version":5}'])
def test_garbage_names_the_path(garbage: bytes) -> None:
    with pytest.raises(z.ZkDataError, match="/brokers/ids/9"):
        z.decode_broker(9, garbage)
