"""Edges where Kafka-compatible brokers usually differ from Kafka, each pinned to Kafka's behaviour."""

from __future__ import annotations

import socket

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

pytestmark = pytest.mark.odradek_only


def _produce_one(bootstrap: str, topic: str, value: bytes, key: bytes | None = None, **config) -> KafkaError | None:
    errors: list = []
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, **config})
    producer.produce(topic, value, key=key, on_delivery=lambda err, msg: errors.append(err))
    producer.flush(15)
    assert len(errors) == 1, "no delivery report"
    return errors[0]


def test_confluent_consumer_resets_after_delete_records(bootstrap, new_topic, clients):
    """Out-of-range fetches must carry empty (not null) records, or librdkafka cannot parse the error."""
    topic = new_topic()
    clients.confluent_produce(bootstrap, topic, clients.numbered_records(10))
    admin = clients.confluent_admin(bootstrap)
    result = admin.delete_records([TopicPartition(topic, 0, 5)])
    assert next(iter(result.values())).result().low_watermark == 5
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    try:
        consumer.assign([TopicPartition(topic, 0, 2)])
        message = None
        for _ in range(20):
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                break
        assert message is not None and message.offset() == 5
    finally:
        consumer.close()


def test_compacted_topic_refuses_records_without_key(bootstrap, new_topic):
    topic = new_topic(config={"cleanup.policy": "compact"})
    assert _produce_one(bootstrap, topic, b"v", key=None).code() == KafkaError.INVALID_RECORD
    assert _produce_one(bootstrap, topic, b"v", key=b"k") is None


def test_size_is_checked_again_after_the_topic_recompresses(bootstrap, new_topic):
    """A small gzip batch that the topic stores uncompressed must fit max.message.bytes once expanded."""
    topic = new_topic(config={"compression.type": "uncompressed", "max.message.bytes": "2000"})
    error = _produce_one(bootstrap, topic, b"a" * 5000, **{"compression.type": "gzip"})
    assert error is not None and error.code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert _produce_one(bootstrap, topic, b"a" * 100, **{"compression.type": "gzip"}) is None


def test_metadata_for_an_illegal_name_is_invalid_topic(bootstrap, clients):
    admin = clients.confluent_admin(bootstrap)
    metadata = admin.list_topics("no spaces allowed", timeout=10)
    assert metadata.topics["no spaces allowed"].error.code() == KafkaError.TOPIC_EXCEPTION


def test_failed_acks_zero_produce_closes_the_connection(shared_broker, new_topic, raw, clients):
    """With acks=0 there is no response to carry an error, so Kafka closes the connection."""
    topic = new_topic()
    batch = raw.build_batch(clients.numbered_records(1))
    with raw.RawClient.to(shared_broker) as client:
        client.send(raw.produce(topic, 7, batch, acks=0))  # the topic has one partition
        with pytest.raises((ConnectionError, socket.timeout, OSError, AssertionError)):
            client.call(raw.api_versions())
    with raw.RawClient.to(shared_broker) as client:
        client.send(raw.produce(topic, 0, batch, acks=0))
        assert client.call(raw.api_versions()).error_code == 0  # a good acks=0 produce keeps it open


def test_a_commit_too_large_for_the_offsets_topic_is_refused_alone(bootstrap, new_topic):
    """Kafka answers INVALID_COMMIT_OFFSET_SIZE when the commit's records exceed max.message.bytes."""
    from confluent_kafka import KafkaException

    topic = new_topic(partitions=300)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"big-{topic}", "enable.auto.commit": False})
    try:
        huge = [TopicPartition(topic, p, 1, metadata="m" * 4000) for p in range(300)]
        with pytest.raises(KafkaException) as exc:
            consumer.commit(offsets=huge, asynchronous=False)
        assert exc.value.args[0].code() == KafkaError.INVALID_COMMIT_OFFSET_SIZE
        consumer.commit(offsets=[TopicPartition(topic, 0, 7, metadata="small")], asynchronous=False)
        (committed,) = consumer.committed([TopicPartition(topic, 0)], timeout=10)
        assert (committed.offset, committed.metadata) == (7, "small")
    finally:
        consumer.close()
