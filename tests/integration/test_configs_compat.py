"""Configs as Kafka 3.9 clients and operators meet them: names of features Odradek does not build refused alike by
AlterConfigs and IncrementalAlterConfigs, old message format versions, dynamic listeners, and settings that are
accepted without effect saying so in the broker log."""

from __future__ import annotations

import re

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic, ResourceType

pytestmark = pytest.mark.odradek_only
TIMEOUT = 30


def _error(future) -> KafkaError:
    with pytest.raises(KafkaException) as info:
        future.result(timeout=TIMEOUT)
    return info.value.args[0]


def _both_apis(admin, restype: ResourceType, name: str, key: str, value: str) -> list[KafkaError]:
    """The error of setting key=value with AlterConfigs, then with IncrementalAlterConfigs."""
    legacy = ConfigResource(restype, name, set_config={key: value})
    incremental = ConfigResource(restype, name, incremental_configs=[
        ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
    ])  # fmt: skip
    return [
        _error(admin.alter_configs([legacy], request_timeout=TIMEOUT)[legacy]),
        _error(admin.incremental_alter_configs([incremental], request_timeout=TIMEOUT)[incremental]),
    ]


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")
@pytest.mark.parametrize(
    ("restype", "key", "message"),
    [
        (ResourceType.BROKER, "sasl.enabled.mechanisms", "SASL is not built"),
        (ResourceType.BROKER, "ssl.keystore.location", "TLS is not built"),
        (ResourceType.BROKER, "group.share.enable", "share groups (KIP-932) are not built"),
        (ResourceType.BROKER, "no.such.config", "unknown configuration 'no.such.config'"),
        (ResourceType.TOPIC, "no.such.config", "unknown topic configuration 'no.such.config'"),
    ],
)
def test_both_alter_apis_refuse_a_name_the_same_way(bootstrap, clients, new_topic, restype, key, message):
    admin = clients.confluent_admin(bootstrap)
    name = "0" if restype == ResourceType.BROKER else new_topic()
    errors = _both_apis(admin, restype, name, key, "x")
    assert [e.code() for e in errors] == [KafkaError.INVALID_CONFIG] * 2
    assert errors[0].str() == errors[1].str()
    assert message in errors[0].str()


def test_old_message_format_versions_are_accepted(bootstrap, clients, helpers):
    admin = clients.confluent_admin(bootstrap)
    name = helpers.make_topic_name("mfv")
    topic = NewTopic(name, 1, 1, config={"message.format.version": "0.10.0.0"})
    admin.create_topics([topic], request_timeout=TIMEOUT)[name].result(timeout=TIMEOUT)
    resource = ConfigResource(ResourceType.TOPIC, name)
    described = admin.describe_configs([resource], request_timeout=TIMEOUT)[resource].result(timeout=TIMEOUT)
    assert described["message.format.version"].value == "0.10.0.0"
    bad = NewTopic(helpers.make_topic_name("mfv-bad"), 1, 1, config={"message.format.version": "0.10"})
    assert (
        _error(admin.create_topics([bad], request_timeout=TIMEOUT)[bad.topic]).code()
        == KafkaError.INVALID_CONFIG
    )


def test_listeners_are_dynamic_per_broker(broker_factory, clients, raw):
    broker = broker_factory()
    admin = clients.confluent_admin(broker.bootstrap)
    resource = ConfigResource(ResourceType.BROKER, "0")
    entries = admin.describe_configs([resource], request_timeout=TIMEOUT)[resource].result(timeout=TIMEOUT)
    assert [entries[k].is_read_only for k in ("listeners", "advertised.listeners", "log.message.format.version")] \
        == [False, False, True]  # fmt: skip

    def incremental(name: str, key: str, value: str) -> ConfigResource:
        return ConfigResource(ResourceType.BROKER, name, incremental_configs=[
            ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
        ])  # fmt: skip

    # Clients are handed the new advertised address at once.
    moved = incremental("0", "advertised.listeners", f"PLAINTEXT://localhost:{broker.port}")
    admin.incremental_alter_configs([moved], request_timeout=TIMEOUT)[moved].result(timeout=TIMEOUT)
    assert admin.describe_cluster(request_timeout=TIMEOUT).result(TIMEOUT).nodes[0].host == "localhost"
    # Not as a cluster-wide default (resource name "", which confluent-kafka cannot send)...
    from kio.schema.incremental_alter_configs.v1 import request as iac
    from kio.static.primitive import i8

    with raw.RawClient.to(broker) as client:
        response = client.call(iac.IncrementalAlterConfigsRequest(validate_only=False, resources=(
            iac.AlterConfigsResource(resource_type=i8(4), resource_name="", configs=(
                iac.AlterableConfig(name="advertised.listeners", config_operation=i8(0),
                                    value=f"PLAINTEXT://localhost:{broker.port}"),
            )),
        )))  # fmt: skip
    (result,) = response.responses
    assert result.error_code.value == KafkaError.INVALID_CONFIG and "per broker" in result.error_message
    # ...and not a move of the bound listener while running.
    rebind = incremental("0", "listeners", f"PLAINTEXT://127.0.0.1:{broker.port + 1}")
    error = _error(admin.incremental_alter_configs([rebind], request_timeout=TIMEOUT)[rebind])
    assert error.code() == KafkaError.INVALID_CONFIG and "restart" in error.str()
    same = incremental("0", "listeners", f"PLAINTEXT://127.0.0.1:{broker.port}")
    admin.incremental_alter_configs([same], request_timeout=TIMEOUT)[same].result(timeout=TIMEOUT)
    # The dynamic address survives a restart.
    broker.restart()
    admin = clients.confluent_admin(broker.bootstrap)
    assert admin.describe_cluster(request_timeout=TIMEOUT).result(TIMEOUT).nodes[0].host == "localhost"


def test_settings_without_effect_are_logged(broker_factory, clients, helpers):
    broker = broker_factory(overrides={"num.io.threads": "16", "socket.send.buffer.bytes": "65536"})
    text = broker.log_text()
    assert re.search(r"WARNING .*broker: num.io.threads set but without effect: one event loop", text), text
    assert "socket.send.buffer.bytes set but without effect" in text
    admin = clients.confluent_admin(broker.bootstrap)
    name = helpers.make_topic_name("no-effect")
    topic = NewTopic(name, 1, 1, config={"preallocate": "true", "retention.ms": "100000"})
    admin.create_topics([topic], request_timeout=TIMEOUT)[name].result(timeout=TIMEOUT)
    # Logged before the topic is created, so before the response (the broker's output is unbuffered).
    text = broker.log_text()
    assert f"topic {name}: preallocate set but without effect: segment files are not preallocated" in text
    assert "retention.ms set but without effect" not in text


def test_fetch_max_bytes_caps_a_fetch_response(broker_factory, clients, raw):
    broker = broker_factory(overrides={"fetch.max.bytes": "1024"})
    name = clients.create_topic(broker.bootstrap, "fetch-max-bytes", 1)
    with raw.RawClient.to(broker) as client:
        for i in range(5):
            batch = raw.build_batch([clients.Rec(b"k", bytes([i]) * 400)])
            assert raw.produce_result(client.call(raw.produce(name, 0, batch)))[0] == 0
        error, high_watermark, records = raw.fetch_result(
            client.call(raw.fetch(name, 0, 0, max_bytes=10 << 20))
        )
    assert (error, high_watermark) == (0, 5)
    assert 0 < len(raw.parse_batches(records)) < 5 and len(records) <= 1024


def test_broker_rack_is_advertised(broker_factory, clients):
    broker = broker_factory(overrides={"broker.rack": "rack-a"})
    admin = clients.confluent_admin(broker.bootstrap)
    assert admin.describe_cluster(request_timeout=TIMEOUT).result(TIMEOUT).nodes[0].rack == "rack-a"


def _join_error(bootstrap: str, topic: str, session_timeout_ms: int):
    """What a confluent-kafka consumer asking for `session_timeout_ms` sees: an error code, or None once it
    consumes the topic's record."""
    from confluent_kafka import Consumer

    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"s{session_timeout_ms}-{topic}", "auto.offset.reset": "earliest",
        "session.timeout.ms": session_timeout_ms, "heartbeat.interval.ms": 300,
    })  # fmt: skip
    try:
        consumer.subscribe([topic])
        for _ in range(120):
            message = consumer.poll(0.5)
            if message is None:
                continue
            return message.error().code() if message.error() else None
        raise AssertionError("the consumer neither consumed nor failed")
    finally:
        consumer.close()


def test_session_timeouts_below_the_minimum_are_refused_as_kafka_does(broker_factory, clients):
    # Kafka's default minimum (6000 ms), as deploy/standalone.properties keeps it.
    broker = broker_factory()
    topic = clients.create_topic(broker.bootstrap, "session-timeouts", 1)
    clients.confluent_produce(broker.bootstrap, topic, clients.numbered_records(1))
    assert _join_error(broker.bootstrap, topic, 3000) == KafkaError.INVALID_SESSION_TIMEOUT
    assert _join_error(broker.bootstrap, topic, 6000) is None
    # The development setting the sample documents for test suites with short session timeouts.
    broker.restart(**{"group.min.session.timeout.ms": "1000"})
    assert _join_error(broker.bootstrap, topic, 3000) is None
