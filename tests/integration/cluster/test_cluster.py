"""Three broker processes over a real ZooKeeper: the layout in ZooKeeper is Kafka's, every broker answers for the
whole cluster, topics and configs made through any broker reach all of them, and clients produce and consume
across brokers. The brokers stay up for the whole module (faults are in test_cluster_faults.py)."""

from __future__ import annotations

import base64
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import ConfigResource, ConfigSource, NewPartitions, NewTopic

pytestmark = pytest.mark.odradek_only


def test_zookeeper_holds_kafkas_layout(cluster) -> None:
    assert cluster.registered() == {0, 1, 2}
    reg = cluster.znode("/brokers/ids/1")
    assert reg["version"] == 5
    assert reg["endpoints"] == [f"PLAINTEXT://{cluster.brokers[1].bootstrap}"]
    assert (reg["host"], reg["port"]) == (cluster.brokers[1].host, cluster.brokers[1].port)
    controller = cluster.znode("/controller")
    assert controller["version"] == 2 and controller["brokerid"] in (0, 1, 2)
    assert int(cluster.znode("/controller_epoch")) >= 1
    cluster_id = cluster.znode("/cluster/id")["id"]
    md = cluster.metadata(2)
    assert md.cluster_id == cluster_id
    assert md.controller_id == controller["brokerid"]
    for path in (
        "/brokers/topics",
        "/config/topics",
        "/config/brokers",
        "/config/changes",
        "/admin/delete_topics",
        "/isr_change_notification",
        "/latest_producer_id_block",
        "/brokers/seqid",
    ):
        assert cluster.zk.exists(path) is not None, path


def test_every_broker_answers_for_the_whole_cluster(cluster) -> None:
    from kafka import KafkaAdminClient

    for broker_id in cluster.brokers:
        md = cluster.metadata(broker_id)
        assert {b.id: f"{b.host}:{b.port}" for b in md.brokers.values()} == {
            i: b.bootstrap for i, b in cluster.brokers.items()
        }
    admin = KafkaAdminClient(bootstrap_servers=cluster.brokers[0].bootstrap)
    try:
        described = admin.describe_cluster()
    finally:
        admin.close()
    assert described["controller_id"] == cluster.controller_id()
    assert {b.get("node_id", b.get("broker_id")) for b in described["brokers"]} == {0, 1, 2}


def test_topic_creation_places_replicas_and_elects_leaders(cluster, topic_name: str) -> None:
    cluster.create_topic(topic_name, 6, 3, {"retention.ms": "3600000"})
    view = cluster.wait_for_leaders(topic_name, 6)
    assert sorted(leader for leader, _, _ in view.values()) == [0, 0, 1, 1, 2, 2]  # spread evenly
    for leader, replicas, isr in view.values():
        assert sorted(replicas) == [0, 1, 2] and leader == replicas[0] and sorted(isr) == [0, 1, 2]
    assignment = cluster.znode(f"/brokers/topics/{topic_name}")
    assert assignment["version"] == 3
    assert {int(p): r for p, r in assignment["partitions"].items()} == {p: r for p, (_, r, _) in view.items()}
    topic_id = uuid.UUID(bytes=base64.urlsafe_b64decode(assignment["topic_id"] + "=="))
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        (described,) = admin.describe_topics([topic_name])
    finally:
        admin.close()
    assert described.get("topic_id") in (
        None,
        str(topic_id),
        topic_id,
    )  # kafka-python reports it in newer versions
    state = cluster.partition_state(topic_name, 0)
    assert state == {"controller_epoch": state["controller_epoch"], "leader": view[0][0], "version": 1,
                     "leader_epoch": 0, "isr": view[0][2]}  # fmt: skip
    assert cluster.znode(f"/config/topics/{topic_name}") == {
        "version": 1,
        "config": {"retention.ms": "3600000"},
    }


def test_replication_factor_above_the_live_brokers_is_refused(cluster, topic_name: str) -> None:
    admin = cluster.admin()
    futures = admin.create_topics([NewTopic(topic_name, 1, 4)], operation_timeout=10)
    with pytest.raises(KafkaException) as failed:
        futures[topic_name].result(30)
    assert failed.value.args[0].name() == "INVALID_REPLICATION_FACTOR"
    assert cluster.znode(f"/brokers/topics/{topic_name}") is None


def test_explicit_assignments_are_kept(cluster, topic_name: str) -> None:
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewTopic as PyNewTopic

    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        admin.create_topics([PyNewTopic(topic_name, -1, -1, replica_assignments={0: [2, 0], 1: [1, 2]})])
    finally:
        admin.close()
    view = cluster.wait_for_leaders(topic_name, 2)
    assert {p: r for p, (_, r, _) in view.items()} == {0: [2, 0], 1: [1, 2]}
    assert {p: leader for p, (leader, _, _) in view.items()} == {0: 2, 1: 1}


def test_produce_and_consume_across_brokers(cluster, topic_name: str) -> None:
    cluster.create_topic(topic_name, 3, 1)
    view = cluster.wait_for_leaders(topic_name, 3)
    assert {leader for leader, _, _ in view.values()} == {0, 1, 2}
    # bootstrap from one broker only: the client must find the others through Metadata
    producer = Producer({"bootstrap.servers": cluster.brokers[0].bootstrap, "enable.idempotence": True})
    for i in range(60):
        producer.produce(topic_name, key=str(i).encode(), value=f"v{i}".encode(), partition=i % 3)
    assert producer.flush(30) == 0
    consumer = Consumer({
        "bootstrap.servers": cluster.brokers[2].bootstrap, "group.id": f"g-{topic_name}",
        "auto.offset.reset": "earliest",
    })  # fmt: skip
    consumer.subscribe([topic_name])
    seen = {}
    deadline = time.monotonic() + 60
    while len(seen) < 60 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            seen[msg.key()] = (msg.partition(), msg.value())
    consumer.commit(asynchronous=False)
    consumer.close()
    assert seen == {str(i).encode(): (i % 3, f"v{i}".encode()) for i in range(60)}


@pytest.mark.parametrize("client", ["confluent", "kafka-python", "aiokafka", "kafkajs"])
def test_every_client_finds_the_leader_from_any_broker(
    cluster, clients, topic_name: str, client: str
) -> None:
    cluster.create_topic(topic_name, 3, 1)
    view = cluster.wait_for_leaders(topic_name, 3)
    records = clients.numbered_records(5)
    for partition, (leader, _, _) in view.items():
        elsewhere = cluster.brokers[
            (leader + 1) % 3
        ].bootstrap  # bootstrap from a broker that does not lead it
        offsets = clients.produce(client, elsewhere, topic_name, records, partition=partition)
        assert offsets == list(range(5))
        got = clients.consume(client, cluster.brokers[(leader + 2) % 3].bootstrap, topic_name, 5, partition)
        assert clients.contents(got) == clients.contents(records)


def test_topic_configs_propagate_to_every_broker(cluster, topic_name: str) -> None:
    cluster.create_topic(topic_name, 1, 3)
    cluster.wait_for_leaders(topic_name, 1)
    changes_before = len(cluster.children("/config/changes"))
    admin = cluster.admin()
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic_name, set_config={"retention.ms": "12345"})
    admin.alter_configs([resource])[resource].result(30)
    assert cluster.znode(f"/config/topics/{topic_name}")["config"]["retention.ms"] == "12345"
    assert len(cluster.children("/config/changes")) > changes_before

    def value_on(broker_id: int) -> str | None:
        from confluent_kafka.admin import AdminClient

        one = AdminClient({"bootstrap.servers": cluster.brokers[broker_id].bootstrap})
        r = ConfigResource(ConfigResource.Type.TOPIC, topic_name)
        return one.describe_configs([r])[r].result(30)["retention.ms"].value

    for broker_id in cluster.brokers:
        cluster.wait_for(
            lambda b=broker_id: value_on(b) == "12345", f"broker {broker_id} seeing the new config"
        )


DYNAMIC_BROKER = ConfigSource.DYNAMIC_BROKER_CONFIG.value
DYNAMIC_DEFAULT = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value


def _retention_on(cluster, broker_id: int) -> tuple[str, int]:
    from confluent_kafka.admin import AdminClient

    one = AdminClient({"bootstrap.servers": cluster.brokers[broker_id].bootstrap})
    r = ConfigResource(ConfigResource.Type.BROKER, str(broker_id))
    entry = one.describe_configs([r])[r].result(30)["log.retention.ms"]
    return entry.value, entry.source


def test_broker_configs_live_in_zookeeper(cluster) -> None:
    admin = cluster.admin()
    one = ConfigResource(ConfigResource.Type.BROKER, "1", set_config={"log.retention.ms": "7200000"})
    admin.alter_configs([one])[one].result(30)
    assert cluster.znode("/config/brokers/1") == {"version": 1, "config": {"log.retention.ms": "7200000"}}
    assert _retention_on(cluster, 1) == ("7200000", DYNAMIC_BROKER)
    assert _retention_on(cluster, 0)[0] != "7200000"
    # the cluster-wide default, written the way `kafka-configs --zookeeper --entity-default` writes it
    cluster.zk.create("/config/brokers/<default>", b'{"version":1,"config":{"log.retention.ms":"3600000"}}')
    cluster.zk.create("/config/changes/config_change_", b'{"version":2,"entity_path":"brokers/<default>"}',
                      sequence=True)  # fmt: skip
    for broker_id in (0, 2):
        cluster.wait_for(
            lambda b=broker_id: _retention_on(cluster, b) == ("3600000", DYNAMIC_DEFAULT),
            f"broker {broker_id}",
        )
    assert _retention_on(cluster, 1) == ("7200000", DYNAMIC_BROKER)  # its own override wins
    cluster.zk.set("/config/brokers/<default>", b'{"version":1,"config":{}}')
    cluster.zk.create("/config/changes/config_change_", b'{"version":2,"entity_path":"brokers/<default>"}',
                      sequence=True)  # fmt: skip
    reset = ConfigResource(ConfigResource.Type.BROKER, "1", set_config={})
    admin.alter_configs([reset])[reset].result(30)
    for broker_id in cluster.brokers:
        cluster.wait_for(lambda b=broker_id: _retention_on(cluster, b)[1] not in (DYNAMIC_BROKER, DYNAMIC_DEFAULT),
                         f"broker {broker_id} back to its static config")  # fmt: skip


def test_partitions_added_and_topics_deleted_everywhere(cluster, topic_name: str) -> None:
    cluster.create_topic(topic_name, 2, 2)
    cluster.wait_for_leaders(topic_name, 2)
    admin = cluster.admin()
    admin.create_partitions([NewPartitions(topic_name, 5)])[topic_name].result(30)
    view = cluster.wait_for_leaders(topic_name, 5)
    assert all(len(r) == 2 for _, r, _ in view.values())
    admin.delete_topics([topic_name], operation_timeout=30)[topic_name].result(60)
    for broker_id in cluster.brokers:
        cluster.wait_for(
            lambda b=broker_id: topic_name not in cluster.metadata(b).topics,
            f"broker {broker_id} forgetting it",
        )
    cluster.wait_for(
        lambda: cluster.znode(f"/brokers/topics/{topic_name}") is None, "the topic znode removed"
    )
    assert cluster.znode(f"/config/topics/{topic_name}") is None
    assert topic_name not in cluster.children("/admin/delete_topics")
    # the logs are renamed for deletion on every broker that had a replica
    for broker in cluster.brokers.values():
        live_dirs = [
            p
            for p in broker.log_dir.iterdir()
            if p.name.startswith(f"{topic_name}-") and "delete" not in p.name
        ]
        assert live_dirs == []


def test_producer_ids_come_from_zookeeper_blocks(cluster, topic_name: str) -> None:
    cluster.create_topic(topic_name, 1, 1)
    cluster.wait_for_leaders(topic_name, 1)
    for broker in cluster.brokers.values():
        producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
        producer.produce(topic_name, b"x")
        assert producer.flush(30) == 0
    block = cluster.znode("/latest_producer_id_block")
    assert block["version"] == 1 and block["broker"] in (0, 1, 2)
    assert int(block["block_end"]) - int(block["block_start"]) + 1 == 1000


def test_a_producer_auto_creates_a_topic_through_any_broker(cluster, clients, topic_name: str) -> None:
    # kafka-python and librdkafka retry LEADER_NOT_AVAILABLE while the controller elects the new topic's leaders
    records = clients.numbered_records(3)
    offsets = clients.produce("kafka-python", cluster.brokers[2].bootstrap, topic_name, records)
    assert offsets == [0, 1, 2]
    assert cluster.znode(f"/brokers/topics/{topic_name}") is not None
    got = clients.consume("confluent", cluster.brokers[0].bootstrap, topic_name, 3)
    assert clients.contents(got) == clients.contents(records)
