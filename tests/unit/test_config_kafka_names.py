"""Config names, versions and dynamic flags as Kafka 3.9 knows them; settings accepted without effect say so."""

from __future__ import annotations

import pytest

from broker_runtime.config import (
    BROKER_CONFIG_DEFS,
    TOPIC_CONFIG_DEFS,
    UNBUILT_BROKER_CONFIGS,
    BrokerConfig,
    ConfigError,
    broker_config_def,
    describe_broker_configs,
    is_metadata_version,
    topic_config_def,
    validate_topic_configs,
    without_effect,
)

# Kafka 3.9's KafkaConfig defines 328 broker config names (AbstractKafkaConfig.CONFIG_DEF).
KAFKA_3_9_BROKER_CONFIG_COUNT = 328
# Broker keys Odradek defines that KafkaConfig does not: its own, and the replication throttles, which Kafka
# defines among the dynamic broker configs only (DynamicConfig.Broker).
NOT_IN_KAFKA_CONFIG = {
    "odradek.event.loop",
    "odradek.metrics.listener",
    "leader.replication.throttled.rate",
    "follower.replication.throttled.rate",
    "replica.alter.log.dirs.io.max.bytes.per.second",
}
# Kafka 3.9's DynamicBrokerConfig.AllDynamicConfigs among the keys Odradek defines, plus the replication throttles
# (dynamic through DynamicConfig.Broker).
KAFKA_DYNAMIC = {
    "listeners", "advertised.listeners", "listener.security.protocol.map", "num.network.threads", "num.io.threads",
    "background.threads", "num.recovery.threads.per.data.dir", "num.replica.fetchers", "max.connections",
    "max.connections.per.ip", "max.connections.per.ip.overrides", "max.connection.creation.rate",
    "producer.id.expiration.ms", "transaction.partition.verification.enable", "log.cleaner.threads",
    "log.cleaner.dedupe.buffer.size", "log.cleaner.io.buffer.load.factor", "log.cleaner.io.buffer.size",
    "log.cleaner.io.max.bytes.per.second", "log.cleaner.backoff.ms", "message.max.bytes", "log.segment.bytes",
    "log.roll.ms", "log.roll.jitter.ms", "log.index.size.max.bytes", "log.flush.interval.messages",
    "log.flush.interval.ms", "log.retention.bytes", "log.retention.ms", "log.index.interval.bytes",
    "log.cleaner.delete.retention.ms", "log.cleaner.min.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms",
    "log.segment.delete.delay.ms", "log.cleaner.min.cleanable.ratio", "log.cleanup.policy",
    "unclean.leader.election.enable", "min.insync.replicas", "compression.type", "compression.gzip.level",
    "compression.lz4.level", "compression.zstd.level", "log.preallocate", "log.message.timestamp.type",
    "log.message.timestamp.difference.max.ms", "log.message.timestamp.before.max.ms",
    "log.message.timestamp.after.max.ms", "log.message.downconversion.enable", "log.local.retention.ms",
    "log.local.retention.bytes", "leader.replication.throttled.rate", "follower.replication.throttled.rate",
    "replica.alter.log.dirs.io.max.bytes.per.second",
}  # fmt: skip


def test_every_kafka_broker_name_is_defined_or_refused_as_unbuilt() -> None:
    assert not set(UNBUILT_BROKER_CONFIGS) & set(BROKER_CONFIG_DEFS)
    known = (set(BROKER_CONFIG_DEFS) - NOT_IN_KAFKA_CONFIG) | set(UNBUILT_BROKER_CONFIGS)
    assert len(known) == KAFKA_3_9_BROKER_CONFIG_COUNT


@pytest.mark.parametrize("key", ["sasl.jaas.config", "ssl.client.auth", "group.consumer.assignors",
                                 "metadata.log.dir", "listener.name.plain.ssl.protocol"])  # fmt: skip
def test_unbuilt_kafka_names_say_the_feature_is_not_built(key: str) -> None:
    for lookup in (lambda: BrokerConfig.load(None, [f"{key}=x"]), lambda: broker_config_def(key)):
        with pytest.raises(
            ConfigError, match=rf"^{key}: Kafka setting not supported by Odradek: .* not built"
        ):
            lookup()


def test_unknown_names_are_unknown_with_a_suggestion() -> None:
    with pytest.raises(
        ConfigError, match=r"unknown configuration 'num.partition' \(did you mean 'num.partitions'"
    ):
        broker_config_def("num.partition")
    with pytest.raises(ConfigError, match=r"unknown topic configuration 'retention.mss'"):
        topic_config_def("retention.mss")


@pytest.mark.parametrize(
    "version",
    ["0.8.0", "0.8.2.2", "0.9.0.1", "0.10.0", "0.10.0.0", "0.10.0-IV1", "0.10.2-IV0", "0.11.0.3", "1.0", "2.8",
     "2.8.2", "3.0-IV1", "3.0.0.0", "3.7-IV4", "3.9", "3.9.1", "4.0-IV1"],
)  # fmt: skip
def test_versions_kafka_parses_are_accepted(version: str) -> None:
    assert is_metadata_version(version)
    BrokerConfig.load(
        None, [f"log.message.format.version={version}", f"inter.broker.protocol.version={version}"]
    )
    assert validate_topic_configs({"message.format.version": version}) == {"message.format.version": version}


@pytest.mark.parametrize(
    "version", ["0.10", "3", "3.10", "4.0", "3.0-IV9", "0.10.0-IV2", "", "latest", "3.x"]
)
def test_versions_kafka_refuses_are_refused(version: str) -> None:
    assert not is_metadata_version(version)
    with pytest.raises(ConfigError, match=r"message.format.version: .* is not a Kafka version"):
        validate_topic_configs({"message.format.version": version})


def test_dynamic_and_read_only_flags_follow_kafka() -> None:
    assert {d.name for d in BROKER_CONFIG_DEFS.values() if d.dynamic} == KAFKA_DYNAMIC
    per_broker = {d.name for d in BROKER_CONFIG_DEFS.values() if d.per_broker_only}
    assert per_broker == {"listeners", "advertised.listeners", "listener.security.protocol.map"}
    described = {e.name: e.read_only for e in describe_broker_configs(BrokerConfig())}
    assert described["advertised.listeners"] is False and described["listeners"] is False
    assert described["log.message.format.version"] is True and described["auto.create.topics.enable"] is True


def test_listeners_are_updated_per_broker_only() -> None:
    config = BrokerConfig.load(None, ["listeners=PLAINTEXT://127.0.0.1:9092"])
    config.set_dynamic("advertised.listeners", "PLAINTEXT://10.0.0.7:9092")
    assert config.advertised_listeners[0].host == "10.0.0.7"
    with pytest.raises(ConfigError, match="only be updated per broker"):
        config.set_dynamic("advertised.listeners", "PLAINTEXT://10.0.0.8:9092", cluster_default=True)
    with pytest.raises(ConfigError, match=r"advertised.listeners: listener SSL is not in listeners"):
        config.set_dynamic("advertised.listeners", "SSL://10.0.0.8:9093")
    assert config.advertised_listeners[0].host == "10.0.0.7"


def test_a_check_of_the_running_broker_can_refuse_a_change() -> None:
    config = BrokerConfig.load(None, ["listeners=PLAINTEXT://127.0.0.1:9092"])
    seen = []

    def refuse_moves(candidate: BrokerConfig) -> None:
        seen.append(candidate.listeners[0].port)
        if candidate.listeners[0].port != 9092:
            raise ConfigError("listeners: cannot move", "listeners")

    config.add_check(refuse_moves)
    config.set_dynamic("listeners", "PLAINTEXT://127.0.0.1:9092")
    with pytest.raises(ConfigError, match="cannot move"):
        config.replace_dynamic({"listeners": "PLAINTEXT://127.0.0.1:9093"})
    assert config.listeners[0].port == 9092 and seen == [9092, 9093]


@pytest.mark.parametrize(
    ("configs", "reason"),
    [
        ({"remote.storage.enable": "true"}, "tiered storage is not built"),
        ({"remote.log.copy.disable": "true"}, "tiered storage is not built"),
        ({"local.retention.ms": "1000"}, "tiered storage is not built"),
    ],
)
def test_topic_settings_of_unbuilt_features_are_refused(configs, reason) -> None:
    with pytest.raises(ConfigError, match=reason):
        validate_topic_configs(configs)
    validate_topic_configs({"local.retention.ms": "-2", "remote.storage.enable": "false"})


def test_settings_without_effect_carry_their_reason() -> None:
    assert without_effect(["num.io.threads", "num.partitions", "socket.send.buffer.bytes", "sasl.x"],
                          BROKER_CONFIG_DEFS) == {
        "one event loop serves every connection, request and log": ["num.io.threads"],
        "the listener uses the operating system's socket buffer sizes and its own backlog":
            ["socket.send.buffer.bytes"],
    }  # fmt: skip
    topic = without_effect(["min.compaction.lag.ms", "retention.ms", "preallocate"], TOPIC_CONFIG_DEFS)
    assert topic == {"segment files are not preallocated": ["preallocate"]}  # the cleaner settings act
    with pytest.raises(ConfigError, match="is not supported"):
        BrokerConfig.load(None, ["log.local.retention.bytes=100"])


def test_a_cluster_broker_without_an_id_and_without_generation_is_refused(capsys, tmp_path) -> None:
    from broker_runtime.__main__ import main

    code = main(["--override", f"log.dirs={tmp_path}", "--override", "zookeeper.connect=127.0.0.1:2181",
                 "--override", "broker.id.generation.enable=false"])  # fmt: skip
    assert code == 2
    assert "broker.id: set it, or broker.id.generation.enable=true" in capsys.readouterr().err


def test_no_setting_the_broker_reads_is_said_to_be_without_effect() -> None:
    """A key looked up by the broker's code (`config["key"]`) must not be logged as "set but without effect"
    (the cluster's settings were, after the cluster was built)."""
    import re
    from pathlib import Path

    import broker_runtime

    root = Path(broker_runtime.__file__).parent
    source = "\n".join(path.read_text() for path in root.rglob("*.py") if path.name != "config.py")
    read = set(re.findall(r"""config\[["']([a-z0-9.]+)["']\]""", source))
    flagged = {d.name for d in [*BROKER_CONFIG_DEFS.values(), *TOPIC_CONFIG_DEFS.values()] if d.no_effect}
    assert read, "the pattern finds no config lookups"
    assert sorted(read & flagged) == []
