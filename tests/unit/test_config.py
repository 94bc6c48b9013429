from pathlib import Path

import pytest

from broker_runtime.config import (
    BROKER_CONFIG_DEFS,
    LONG_MAX,
    TOPIC_CONFIG_DEFS,
    BrokerConfig,
    ConfigError,
    ConfigSource,
    ConfigSynonym,
    ConfigType,
    describe_broker_configs,
    describe_topic_configs,
    parse_properties,
    validate_topic_configs,
)

REPO = Path(__file__).resolve().parents[2]

# Kafka 3.x config/server.properties (comments trimmed), must load unchanged.
KAFKA_SAMPLE = """\
# Licensed to the Apache Software Foundation (ASF) under one or more
############################# Server Basics #############################
broker.id=0
#listeners=PLAINTEXT://:9092
#advertised.listeners=PLAINTEXT://your.host.name:9092
#listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
log.dirs=/tmp/kafka-logs
num.partitions=1
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
#log.flush.interval.messages=10000
#log.flush.interval.ms=1000
log.retention.hours=168
#log.retention.bytes=1073741824
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
zookeeper.connect=localhost:2181
zookeeper.connection.timeout.ms=18000
group.initial.rebalance.delay.ms=0
"""


def cfg(**kw: str) -> BrokerConfig:
    return BrokerConfig({k.replace("_", "."): v for k, v in kw.items()})


def load(text: str, tmp_path: Path, overrides: list[str] | None = None) -> BrokerConfig:
    p = tmp_path / "server.properties"
    p.write_text(text)
    return BrokerConfig.load(str(p), overrides or [])


# ---------------------------------------------------------------------------------------------- properties


def test_properties_syntax():
    text = (
        "# comment\n"
        "! also a comment\n"
        "   \n"
        "a=1\n"
        "b: 2\n"
        "c 3\n"
        "d = spaced value  \n"
        "  e=leading ws\n"
        "f=line one \\\n"
        "    continued\n"
        "g=tab\\there\\nnewline \\u0041\n"
        "h\\=x\\:y=escaped key\n"
        "i=\n"
        "j=path\\\\\n"
        "k=after\n"
        "a=overridden\n"
        "l=x=y:z\n"
    )
    props = parse_properties(text)
    assert props == {
        "a": "overridden",
        "b": "2",
        "c": "3",
        "d": "spaced value  ",
        "e": "leading ws",
        "f": "line one continued",
        "g": "tab\there\nnewline A",
        "h=x:y": "escaped key",
        "i": "",
        "j": "path\\",
        "k": "after",
        "l": "x=y:z",
    }


def test_properties_crlf_and_trailing_continuation():
    assert parse_properties("a=1\r\nb=2\r\nc=3\\") == {"a": "1", "b": "2", "c": "3"}


def test_bad_unicode_escape():
    with pytest.raises(ConfigError, match=r"uxxxx"):
        parse_properties("a=\\u12G4\n")


def test_kafka_sample_server_properties_loads(tmp_path):
    c = load(KAFKA_SAMPLE, tmp_path)
    assert c.broker_id == 0
    assert c.zookeeper_connect == "localhost:2181"
    assert not c.standalone
    assert c["num.network.threads"] == 3
    assert c["zookeeper.connection.timeout.ms"] == 18000
    assert c["log.retention.ms"] == 168 * 3600 * 1000
    assert c.log_dirs == ["/tmp/kafka-logs"]


def test_deploy_standalone_sample():
    c = BrokerConfig.load(str(REPO / "deploy" / "standalone.properties"), [])
    assert c.standalone
    assert c.broker_id == 0
    assert [str(x) for x in c.listeners] == ["PLAINTEXT://127.0.0.1:9092"]
    assert [(x.host, x.port) for x in c.advertised_listeners] == [("127.0.0.1", 9092)]
    assert c.log_dirs == ["var/standalone/logs"]
    assert c["num.partitions"] == 1
    assert c["offsets.topic.replication.factor"] == 1
    assert c["transaction.state.log.replication.factor"] == 1
    # Development values where Kafka's own sample has them, Kafka's defaults elsewhere (session timeouts).
    assert c["group.initial.rebalance.delay.ms"] == 0
    assert (c["group.min.session.timeout.ms"], c["group.max.session.timeout.ms"]) == (6000, 1800000)
    assert c["transaction.state.log.min.isr"] == 1
    assert c["group.initial.rebalance.delay.ms"] == 0


def test_overrides_win_over_file(tmp_path):
    c = load(
        "num.partitions=3\nlog.dirs=/a\n", tmp_path, ["num.partitions=7", "log.dirs=/b,/c", "broker.id=4"]
    )
    assert c["num.partitions"] == 7
    assert c.log_dirs == ["/b", "/c"]
    assert c.broker_id == 4


def test_override_syntax_errors():
    with pytest.raises(ConfigError, match=r"expected key=value"):
        BrokerConfig.load(None, ["num.partitions"])
    with pytest.raises(ConfigError, match=r"empty key"):
        BrokerConfig.load(None, ["=3"])


def test_missing_file():
    with pytest.raises(ConfigError, match=r"cannot read config file"):
        BrokerConfig.load("/nonexistent/server.properties", [])


# ---------------------------------------------------------------------------------------------- defaults/types


def test_defaults():
    c = BrokerConfig.load(None, [])
    expected = {
        "listeners": "PLAINTEXT://:9092",
        "zookeeper.connect": None,
        "zookeeper.session.timeout.ms": 18000,
        "num.partitions": 1,
        "default.replication.factor": 1,
        "min.insync.replicas": 1,
        "auto.create.topics.enable": True,
        "delete.topic.enable": True,
        "log.retention.bytes": -1,
        "log.segment.bytes": 1073741824,
        "log.retention.check.interval.ms": 300000,
        "log.flush.interval.messages": LONG_MAX,
        "log.index.interval.bytes": 4096,
        "log.index.size.max.bytes": 10485760,
        "log.cleanup.policy": ["delete"],
        "log.message.timestamp.type": "CreateTime",
        "message.max.bytes": 1048588,
        "socket.request.max.bytes": 104857600,
        "offsets.topic.replication.factor": 3,
        "offsets.topic.num.partitions": 50,
        "offsets.retention.minutes": 10080,
        "offset.metadata.max.bytes": 4096,
        "group.initial.rebalance.delay.ms": 3000,
        "group.min.session.timeout.ms": 6000,
        "group.max.session.timeout.ms": 1800000,
        "transaction.state.log.replication.factor": 3,
        "transaction.state.log.min.isr": 2,
        "transaction.state.log.num.partitions": 50,
        "transaction.max.timeout.ms": 900000,
        "replica.lag.time.max.ms": 30000,
        "replica.fetch.wait.max.ms": 500,
        "replica.fetch.min.bytes": 1,
        "unclean.leader.election.enable": False,
        "auto.leader.rebalance.enable": True,
        "controlled.shutdown.enable": True,
        "compression.type": "producer",
        "fetch.max.bytes": 57671680,
        "log.cleaner.min.cleanable.ratio": 0.5,
        "odradek.event.loop": "asyncio",
        "log.retention.ms": 604800000,
        "log.roll.ms": 604800000,
        "log.roll.jitter.ms": 0,
        "log.flush.interval.ms": LONG_MAX,
        "zookeeper.connection.timeout.ms": 18000,
        "advertised.listeners": "PLAINTEXT://:9092",
    }
    for key, value in expected.items():
        assert c[key] == value, key
    assert c.raw("log.retention.ms") is None
    assert c.log_dirs == ["/tmp/kafka-logs"]
    assert c.standalone
    assert c.broker_id == 0  # standalone and unset


def test_typed_values():
    c = cfg(
        auto_create_topics_enable="FALSE",
        log_cleanup_policy="compact, delete",
        log_cleaner_min_cleanable_ratio="0.25",
        num_partitions=" 12 ",
    )
    assert c["auto.create.topics.enable"] is False
    assert c["log.cleanup.policy"] == ["compact", "delete"]
    assert c["log.cleaner.min.cleanable.ratio"] == 0.25
    assert c["num.partitions"] == 12


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("num.partitions", "abc", "num.partitions: 'abc' is not an integer"),
        ("num.partitions", "0", "num.partitions: '0' must be at least 1"),
        ("num.partitions", "99999999999", "out of range"),
        ("log.retention.ms", "1.5", "log.retention.ms: '1.5' is not a long"),
        ("offsets.topic.replication.factor", "40000", "out of range for a short"),
        ("auto.create.topics.enable", "yes", "auto.create.topics.enable: 'yes' is not a boolean"),
        (
            "log.cleanup.policy",
            "compact,remove",
            "log.cleanup.policy: 'compact,remove' 'remove' is not one of",
        ),
        ("log.cleanup.policy", "", "must not be empty"),
        ("compression.type", "brotli", "compression.type: 'brotli' must be one of"),
        ("log.message.timestamp.type", "createtime", "must be one of CreateTime, LogAppendTime"),
        ("log.segment.bytes", "13", "log.segment.bytes: '13' must be at least 14"),
        ("log.cleaner.min.cleanable.ratio", "1.5", "must be between 0 and 1"),
        ("log.cleaner.min.cleanable.ratio", "half", "is not a number"),
        ("odradek.event.loop", "trio", "odradek.event.loop: 'trio' must be one of asyncio, uvloop"),
        ("listeners", "localhost:9092", "listeners: 'localhost:9092' is not a listener"),
        ("listeners", "FOO://:9092", "no security protocol defined for listener FOO"),
        ("listeners", "PLAINTEXT://:99999", "out of range"),
        ("advertised.listeners", "PLAINTEXT://0.0.0.0:9092", "0.0.0.0"),
        ("advertised.listeners", "SSL://h:9093", "listener SSL is not in listeners"),
        ("zookeeper.session.timeout.ms", "0", "must be at least 1"),
    ],
)
def test_invalid_values_name_the_key(key, value, message):
    with pytest.raises(ConfigError) as e:
        BrokerConfig.load(None, [f"{key}={value}"])
    assert message in str(e.value)
    assert e.value.key == key


def test_unknown_key_suggests_closest(tmp_path):
    with pytest.raises(ConfigError) as e:
        load("num.partitons=3\n", tmp_path)
    assert str(e.value) == "unknown configuration 'num.partitons' (did you mean 'num.partitions'?)"
    assert e.value.key == "num.partitons"
    with pytest.raises(ConfigError, match=r"^unknown configuration 'completely.different'$"):
        BrokerConfig.load(None, ["completely.different=1"])


def test_unknown_key_on_lookup():
    with pytest.raises(ConfigError, match=r"unknown configuration"):
        BrokerConfig.load(None, [])["nope"]


def test_listeners():
    c = cfg(
        listeners="PLAINTEXT://:9092,internal://[::1]:9093",
        listener_security_protocol_map="PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
        advertised_listeners="PLAINTEXT://10.0.0.5:9092,INTERNAL://[::1]:9093",
        inter_broker_listener_name="internal",
    )
    assert [(x.name, x.host, x.port) for x in c.listeners] == [
        ("PLAINTEXT", "", 9092),
        ("INTERNAL", "::1", 9093),
    ]
    assert str(c.listeners[1]) == "INTERNAL://[::1]:9093"
    assert c.advertised_listeners[0].host == "10.0.0.5"
    assert c.inter_broker_listener_name == "INTERNAL"
    assert cfg().inter_broker_listener_name == "PLAINTEXT"


def test_duplicate_listener_name():
    with pytest.raises(ConfigError, match=r"more than once"):
        cfg(listeners="PLAINTEXT://:9092,PLAINTEXT://:9093")


# ---------------------------------------------------------------------------------------------- identity, dirs


def test_broker_id_rules():
    assert cfg(broker_id="5").broker_id == 5
    assert cfg(node_id="6").broker_id == 6
    assert cfg(node_id="6")["broker.id"] == 6
    assert cfg(zookeeper_connect="zk:2181").broker_id == -1  # cluster layer must generate one
    assert cfg(zookeeper_connect="zk:2181", broker_id="2").broker_id == 2
    with pytest.raises(ConfigError, match=r"node.id: 3 differs from broker.id 2"):
        cfg(broker_id="2", node_id="3")
    with pytest.raises(ConfigError, match=r"reserved.broker.max.id"):
        cfg(zookeeper_connect="zk:2181", broker_id="1001")
    assert (
        cfg(zookeeper_connect="zk:2181", broker_id="1001", broker_id_generation_enable="false").broker_id
        == 1001
    )
    with pytest.raises(ConfigError, match=r"broker.id: '-2' must be at least -1"):
        cfg(broker_id="-2")


def test_log_dirs_wins_over_log_dir():
    assert cfg(log_dir="/x").log_dirs == ["/x"]
    assert cfg(log_dir="/x", log_dirs="/y, /z").log_dirs == ["/y", "/z"]
    assert cfg(log_dirs="/y")["log.dirs"] == ["/y"]
    with pytest.raises(ConfigError, match=r"log.dirs"):
        cfg(log_dirs=" , ")


def test_zookeeper_connect_empty_means_standalone():
    c = cfg(zookeeper_connect="")
    assert c.zookeeper_connect is None and c.standalone
    assert cfg(zookeeper_connect="a:2181,b:2181/odradek").zookeeper_connect == "a:2181,b:2181/odradek"


def test_zookeeper_connection_timeout_falls_back_to_session_timeout():
    assert cfg(zookeeper_session_timeout_ms="9000")["zookeeper.connection.timeout.ms"] == 9000
    assert cfg(zookeeper_connection_timeout_ms="100")["zookeeper.connection.timeout.ms"] == 100


def test_group_session_timeout_bounds():
    with pytest.raises(ConfigError, match=r"group.max.session.timeout.ms"):
        cfg(group_min_session_timeout_ms="10000", group_max_session_timeout_ms="5000")


# ---------------------------------------------------------------------------------------------- retention


@pytest.mark.parametrize(
    ("props", "expected"),
    [
        ({}, 168 * 3_600_000),
        ({"log.retention.hours": "1"}, 3_600_000),
        ({"log.retention.minutes": "5", "log.retention.hours": "1"}, 300_000),
        ({"log.retention.ms": "1234", "log.retention.minutes": "5", "log.retention.hours": "1"}, 1234),
        ({"log.retention.ms": "-1"}, -1),
        ({"log.retention.ms": "-5"}, -1),
        ({"log.retention.hours": "-1"}, -1),
    ],
)
def test_retention_priority(props, expected):
    c = BrokerConfig(props)
    assert c["log.retention.ms"] == expected
    assert c.effective_topic_config({})["retention.ms"] == str(expected)


def test_roll_and_jitter_and_flush_priority():
    c = cfg(log_roll_hours="2", log_roll_jitter_hours="1")
    assert c["log.roll.ms"] == 7_200_000
    assert c["log.roll.jitter.ms"] == 3_600_000
    eff = c.effective_topic_config({})
    assert eff["segment.ms"] == "7200000"
    assert eff["segment.jitter.ms"] == "3600000"
    c = cfg(log_roll_hours="2", log_roll_ms="500", log_flush_scheduler_interval_ms="3000")
    assert c["log.roll.ms"] == 500
    assert c["log.flush.interval.ms"] == 3000
    assert c.effective_topic_config({})["flush.ms"] == "3000"
    assert cfg(log_flush_interval_ms="10")["log.flush.interval.ms"] == 10


# ---------------------------------------------------------------------------------------------- topic configs


def test_effective_topic_config_defaults_cover_every_topic_key():
    eff = BrokerConfig.load(None, []).effective_topic_config({})
    assert set(eff) == set(TOPIC_CONFIG_DEFS)
    assert eff["cleanup.policy"] == "delete"
    assert eff["retention.ms"] == "604800000"
    assert eff["retention.bytes"] == "-1"
    assert eff["segment.bytes"] == "1073741824"
    assert eff["segment.ms"] == "604800000"
    assert eff["segment.index.bytes"] == "10485760"
    assert eff["max.message.bytes"] == "1048588"
    assert eff["min.insync.replicas"] == "1"
    assert eff["compression.type"] == "producer"
    assert eff["delete.retention.ms"] == "86400000"
    assert eff["min.cleanable.dirty.ratio"] == "0.5"
    assert eff["message.timestamp.type"] == "CreateTime"
    assert eff["unclean.leader.election.enable"] == "false"
    assert eff["file.delete.delay.ms"] == "60000"
    assert eff["flush.messages"] == str(LONG_MAX)
    assert eff["flush.ms"] == str(LONG_MAX)
    assert eff["index.interval.bytes"] == "4096"
    assert eff["max.compaction.lag.ms"] == str(LONG_MAX)
    assert eff["leader.replication.throttled.replicas"] == ""


def test_effective_topic_config_precedence():
    c = cfg(message_max_bytes="2000", log_segment_bytes="5000", log_retention_hours="1")
    eff = c.effective_topic_config({})
    assert eff["max.message.bytes"] == "2000"
    assert eff["segment.bytes"] == "5000"
    assert eff["retention.ms"] == "3600000"
    # dynamic cluster default beats static
    c.set_dynamic("log.segment.bytes", "6000", cluster_default=True)
    assert c.effective_topic_config({})["segment.bytes"] == "6000"
    # dynamic per-broker beats cluster default
    c.set_dynamic("log.segment.bytes", "7000")
    assert c.effective_topic_config({})["segment.bytes"] == "7000"
    # dynamic log.retention.ms beats static hours
    c.set_dynamic("log.retention.ms", "10")
    assert c.effective_topic_config({})["retention.ms"] == "10"
    # topic override beats everything
    eff = c.effective_topic_config({"segment.bytes": "8000", "retention.ms": "20"})
    assert eff["segment.bytes"] == "8000"
    assert eff["retention.ms"] == "20"
    # removing dynamic values falls back
    c.set_dynamic("log.segment.bytes", None)
    c.set_dynamic("log.retention.ms", None)
    eff = c.effective_topic_config({})
    assert eff["segment.bytes"] == "6000"
    assert eff["retention.ms"] == "3600000"


def test_effective_topic_config_normalises_overrides():
    eff = cfg().effective_topic_config(
        {"cleanup.policy": " compact , delete ", "preallocate": "TRUE", "min.cleanable.dirty.ratio": "1"}
    )
    assert eff["cleanup.policy"] == "compact,delete"
    assert eff["preallocate"] == "true"
    assert eff["min.cleanable.dirty.ratio"] == "1.0"


def test_effective_topic_config_rejects_bad_override():
    with pytest.raises(ConfigError, match=r"retention.ms"):
        cfg().effective_topic_config({"retention.ms": "soon"})


def test_every_topic_synonym_is_a_broker_key():
    for d in TOPIC_CONFIG_DEFS.values():
        for s in d.synonyms:
            assert s in BROKER_CONFIG_DEFS, (d.name, s)
            assert BROKER_CONFIG_DEFS[s].dynamic or s in (
                "log.retention.minutes",
                "log.retention.hours",
                "log.roll.hours",
                "log.roll.jitter.hours",
                "log.flush.scheduler.interval.ms",
                "log.message.format.version",  # Kafka's DynamicLogConfig.NonReconfigrableLogConfigs
            ), s


@pytest.mark.parametrize(
    ("configs", "message"),
    [
        (
            {"retention.msx": "1"},
            "unknown topic configuration 'retention.msx' (did you mean 'retention.ms'?)",
        ),
        ({"cleanup.policy": "compact,forever"}, "cleanup.policy: 'compact,forever' 'forever' is not one of"),
        ({"cleanup.policy": ""}, "cleanup.policy"),
        ({"min.insync.replicas": "0"}, "min.insync.replicas: '0' must be at least 1"),
        ({"segment.bytes": "13"}, "segment.bytes: '13' must be at least 14"),
        ({"retention.ms": "-2"}, "retention.ms: '-2' must be at least -1"),
        ({"retention.ms": "1h"}, "retention.ms: '1h' is not a long"),
        (
            {"message.timestamp.type": "Now"},
            "message.timestamp.type: 'Now' must be one of CreateTime, LogAppendTime",
        ),
        ({"compression.type": "brotli"}, "compression.type: 'brotli' must be one of"),
        ({"min.cleanable.dirty.ratio": "2"}, "min.cleanable.dirty.ratio"),
        ({"unclean.leader.election.enable": "1"}, "is not a boolean"),
        ({"max.message.bytes": "-1"}, "max.message.bytes"),
        ({"leader.replication.throttled.replicas": "0:1,x"}, "'x' is not '*'"),
        ({"remote.storage.enable": "true"}, "tiered storage"),
        (
            {"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"},
            "min.compaction.lag.ms: 10 is greater",
        ),
        ({"retention.ms": None}, "retention.ms: null value"),
    ],
)
def test_validate_topic_configs_errors(configs, message):
    with pytest.raises(ConfigError) as e:
        validate_topic_configs(configs)
    assert message in str(e.value)
    assert e.value.key == next(iter(configs))


def test_validate_topic_configs_ok_and_normalised():
    out = validate_topic_configs(
        {
            "cleanup.policy": "delete,compact",
            "retention.ms": "-1",
            "segment.bytes": "14",
            "leader.replication.throttled.replicas": "0:1, 1:2",
            "follower.replication.throttled.replicas": "*",
            "compression.type": "zstd",
            "message.timestamp.type": "LogAppendTime",
            "unclean.leader.election.enable": "True",
        }
    )
    assert out["cleanup.policy"] == "delete,compact"
    assert out["leader.replication.throttled.replicas"] == "0:1,1:2"
    assert out["unclean.leader.election.enable"] == "true"
    assert validate_topic_configs({"retention.ms": None, "segment.ms": "5"}, allow_null=True) == {
        "segment.ms": "5"
    }


def test_validate_topic_configs_cross_check_uses_broker_defaults():
    c = cfg(log_cleaner_max_compaction_lag_ms="100")
    validate_topic_configs({"min.compaction.lag.ms": "200"})  # no broker: only given values are compared
    with pytest.raises(ConfigError, match=r"min.compaction.lag.ms"):
        validate_topic_configs({"min.compaction.lag.ms": "200"}, broker_config=c)


# ---------------------------------------------------------------------------------------------- dynamic


def test_set_dynamic_and_unset():
    c = cfg(message_max_bytes="2000")
    seen: list[str] = []
    c.add_change_listener(seen.append)
    c.set_dynamic("message.max.bytes", "3000")
    assert c["message.max.bytes"] == 3000
    assert c.source("message.max.bytes") == ConfigSource.DYNAMIC_BROKER_CONFIG
    assert c.dynamic_configs() == {"message.max.bytes": "3000"}
    c.set_dynamic("message.max.bytes", None)
    assert c["message.max.bytes"] == 2000
    assert c.source("message.max.bytes") == ConfigSource.STATIC_BROKER_CONFIG
    assert seen == ["message.max.bytes", "message.max.bytes"]
    c.set_dynamic("unclean.leader.election.enable", "true", cluster_default=True)
    assert c["unclean.leader.election.enable"] is True
    assert c.dynamic_configs(cluster_default=True) == {"unclean.leader.election.enable": "true"}
    assert c.source("unclean.leader.election.enable") == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG


def test_set_dynamic_errors():
    c = cfg()
    with pytest.raises(ConfigError, match=r"num.partitions: cannot be updated dynamically"):
        c.set_dynamic("num.partitions", "3")
    with pytest.raises(ConfigError, match=r"log.retention.hours: cannot be updated dynamically"):
        c.set_dynamic("log.retention.hours", "3")
    with pytest.raises(ConfigError, match=r"unknown configuration 'log.retention.mss'"):
        c.set_dynamic("log.retention.mss", "3")
    with pytest.raises(ConfigError, match=r"log.segment.bytes: 'big' is not an integer"):
        c.set_dynamic("log.segment.bytes", "big")
    assert c.dynamic_configs() == {}


def test_set_dynamic_cross_check_rolls_back():
    c = cfg(log_cleaner_max_compaction_lag_ms="100")
    with pytest.raises(ConfigError):
        c.set_dynamic("log.cleaner.min.compaction.lag.ms", "200")
    assert c["log.cleaner.min.compaction.lag.ms"] == 0
    assert c.dynamic_configs() == {}


def test_replace_dynamic_is_all_or_nothing():
    c = cfg()
    c.set_dynamic("log.retention.ms", "5")
    with pytest.raises(ConfigError, match=r"num.partitions"):
        c.replace_dynamic({"message.max.bytes": "10", "num.partitions": "2"})
    assert c.dynamic_configs() == {"log.retention.ms": "5"}
    c.replace_dynamic({"message.max.bytes": "10"})
    assert c.dynamic_configs() == {"message.max.bytes": "10"}
    assert c["log.retention.ms"] == 604800000


# ---------------------------------------------------------------------------------------------- describe


def _by_name(entries):
    return {e.name: e for e in entries}


def test_describe_topic_defaults():
    entries = _by_name(describe_topic_configs(cfg(), {}, include_synonyms=True, include_docs=True))
    assert set(entries) == set(TOPIC_CONFIG_DEFS)
    e = entries["max.message.bytes"]
    assert e.value == "1048588"
    assert e.source == ConfigSource.DEFAULT_CONFIG
    assert e.read_only is False and e.is_sensitive is False
    assert e.config_type == ConfigType.INT
    assert e.synonyms == [ConfigSynonym("message.max.bytes", "1048588", ConfigSource.DEFAULT_CONFIG)]
    assert e.documentation
    assert entries["cleanup.policy"].config_type == ConfigType.LIST
    assert entries["min.cleanable.dirty.ratio"].config_type == ConfigType.DOUBLE
    assert entries["retention.ms"].config_type == ConfigType.LONG
    assert entries["preallocate"].config_type == ConfigType.BOOLEAN
    # Kafka quirk: retention.ms's synonym chain starts at log.retention.ms; entries before it are dropped.
    assert entries["retention.ms"].value == "604800000"
    assert entries["retention.ms"].synonyms == []
    assert entries["retention.ms"].source == ConfigSource.DEFAULT_CONFIG


def test_describe_topic_sources_and_synonym_order():
    c = cfg(message_max_bytes="2000")
    c.set_dynamic("message.max.bytes", "3000", cluster_default=True)
    c.set_dynamic("message.max.bytes", "4000")
    e = _by_name(describe_topic_configs(c, {"max.message.bytes": "5000"}, include_synonyms=True))[
        "max.message.bytes"
    ]
    assert e.value == "5000"
    assert e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert e.synonyms == [
        ConfigSynonym("max.message.bytes", "5000", ConfigSource.DYNAMIC_TOPIC_CONFIG),
        ConfigSynonym("message.max.bytes", "4000", ConfigSource.DYNAMIC_BROKER_CONFIG),
        ConfigSynonym("message.max.bytes", "3000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ConfigSynonym("message.max.bytes", "2000", ConfigSource.STATIC_BROKER_CONFIG),
        ConfigSynonym("message.max.bytes", "1048588", ConfigSource.DEFAULT_CONFIG),
    ]
    e = _by_name(describe_topic_configs(c, {}, include_synonyms=False))["max.message.bytes"]
    assert e.value == "4000" and e.source == ConfigSource.DYNAMIC_BROKER_CONFIG and e.synonyms == []
    assert e.documentation is None


def test_describe_topic_retention_with_static_ms():
    c = cfg(log_retention_ms="1000", log_retention_hours="2")
    e = _by_name(describe_topic_configs(c, {}, include_synonyms=True))["retention.ms"]
    assert e.value == "1000"
    assert e.source == ConfigSource.STATIC_BROKER_CONFIG
    assert e.synonyms == [
        ConfigSynonym("log.retention.ms", "1000", ConfigSource.STATIC_BROKER_CONFIG),
        ConfigSynonym("log.retention.hours", "2", ConfigSource.STATIC_BROKER_CONFIG),
        ConfigSynonym("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG),
    ]


def test_describe_topic_names_filter():
    entries = describe_topic_configs(cfg(), {}, names=["segment.bytes", "bogus"])
    assert [e.name for e in entries] == ["segment.bytes"]


def test_describe_broker():
    c = cfg(log_retention_hours="24", num_partitions="3")
    c.set_dynamic("log.retention.ms", "1000")
    entries = _by_name(describe_broker_configs(c, include_synonyms=True, include_docs=True))
    assert set(entries) == set(BROKER_CONFIG_DEFS)
    e = entries["num.partitions"]
    assert (e.value, e.source, e.read_only, e.config_type) == (
        "3",
        ConfigSource.STATIC_BROKER_CONFIG,
        True,
        ConfigType.INT,
    )
    assert e.synonyms == [
        ConfigSynonym("num.partitions", "3", ConfigSource.STATIC_BROKER_CONFIG),
        ConfigSynonym("num.partitions", "1", ConfigSource.DEFAULT_CONFIG),
    ]
    e = entries["log.retention.ms"]
    assert (e.value, e.source, e.read_only) == ("1000", ConfigSource.DYNAMIC_BROKER_CONFIG, False)
    assert e.synonyms == [
        ConfigSynonym("log.retention.ms", "1000", ConfigSource.DYNAMIC_BROKER_CONFIG),
        ConfigSynonym("log.retention.hours", "24", ConfigSource.STATIC_BROKER_CONFIG),
        ConfigSynonym("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG),
    ]
    e = entries["log.retention.hours"]
    assert (e.value, e.source, e.read_only) == ("24", ConfigSource.STATIC_BROKER_CONFIG, True)
    e = entries["log.retention.minutes"]
    assert (e.value, e.source, e.synonyms) == (None, ConfigSource.DEFAULT_CONFIG, [])
    assert entries["offsets.topic.replication.factor"].config_type == ConfigType.SHORT
    assert entries["log.cleaner.io.max.bytes.per.second"].value == "1.7976931348623157E308"
    assert entries["message.max.bytes"].read_only is False
    assert entries["listeners"].read_only is False  # dynamic per broker, as in Kafka 3.x


def test_describe_broker_cluster_default_resource():
    c = cfg(message_max_bytes="2000")
    assert describe_broker_configs(c, cluster_default=True) == []
    c.set_dynamic("message.max.bytes", "3000", cluster_default=True)
    c.set_dynamic("message.max.bytes", "4000")
    [e] = describe_broker_configs(c, include_synonyms=True, cluster_default=True)
    assert (e.name, e.value, e.source) == (
        "message.max.bytes",
        "3000",
        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
    )
    assert e.synonyms == [
        ConfigSynonym("message.max.bytes", "3000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    ]


def test_defs_are_consistent():
    for d in list(BROKER_CONFIG_DEFS.values()) + list(TOPIC_CONFIG_DEFS.values()):
        assert d.doc, d.name
        if d.default is not None:
            assert d.parse(d.format(d.default)) == d.default, d.name


# ---------------------------------------------------------------------------------------------- more checks


def test_key_without_value_and_latin1_file(tmp_path):
    assert parse_properties("lonely\nx:\n") == {"lonely": "", "x": ""}
    p = tmp_path / "latin1.properties"
    p.write_bytes("broker.rack=r\xe9gion\n".encode("latin-1"))
    assert BrokerConfig.load(str(p), [])["broker.rack"] == "r\xe9gion"


def test_kafka_sample_with_listeners_uncommented(tmp_path):
    text = KAFKA_SAMPLE.replace("#listeners=", "listeners=").replace(
        "#advertised.listeners=", "advertised.listeners="
    )
    c = load(text, tmp_path)
    assert [(x.host, x.port) for x in c.advertised_listeners] == [("your.host.name", 9092)]


@pytest.mark.parametrize(
    ("overrides", "key", "message"),
    [
        (["log.retention.ms=0"], "log.retention.ms", "0 is invalid"),
        (["log.retention.hours=0"], "log.retention.hours", "0 is invalid"),
        (["log.roll.ms=0"], "log.roll.ms", "must be at least 1"),
        (
            ["log.cleaner.dedupe.buffer.size=1048576"],
            "log.cleaner.dedupe.buffer.size",
            "1MB per cleaner thread",
        ),
        (["replica.fetch.wait.max.ms=40000"], "replica.fetch.wait.max.ms", "replica.socket.timeout.ms"),
        (
            ["replica.fetch.wait.max.ms=20000", "replica.lag.time.max.ms=10000"],
            "replica.fetch.wait.max.ms",
            "replica.lag.time.max.ms",
        ),
        (["queued.max.request.bytes=10"], "queued.max.request.bytes", "socket.request.max.bytes"),
        (["inter.broker.listener.name=OTHER"], "inter.broker.listener.name", "not one of the advertised"),
        (
            ["security.inter.broker.protocol=SSL"],
            "security.inter.broker.protocol",
            "no advertised listener uses SSL",
        ),
        (
            ["authorizer.class.name=kafka.security.authorizer.AclAuthorizer"],
            "authorizer.class.name",
            "no authorizer",
        ),
        (["inter.broker.protocol.version=three"], "inter.broker.protocol.version", "is not a Kafka version"),
        (["remote.log.storage.system.enable=true"], "remote.log.storage.system.enable", "tiered storage"),
        (
            ["log.cleaner.min.compaction.lag.ms=10", "log.cleaner.max.compaction.lag.ms=5"],
            "log.cleaner.min.compaction.lag.ms",
            "greater than",
        ),
    ],
)
def test_cross_key_checks(overrides, key, message):
    with pytest.raises(ConfigError) as e:
        BrokerConfig.load(None, overrides)
    assert message in str(e.value)
    assert e.value.key == key
    assert str(e.value).startswith(key)


def test_accepted_versions():
    c = BrokerConfig.load(
        None, ["inter.broker.protocol.version=2.8", "log.message.format.version=0.10.2-IV0"]
    )
    assert c["inter.broker.protocol.version"] == "2.8"


def test_validate_only_changes_nothing():
    c = cfg()
    seen: list[str] = []
    c.add_change_listener(seen.append)
    c.set_dynamic("message.max.bytes", "10", validate_only=True)
    c.replace_dynamic({"message.max.bytes": "10"}, validate_only=True)
    assert c.dynamic_configs() == {}
    assert c["message.max.bytes"] == 1048588
    assert seen == []
    with pytest.raises(ConfigError):
        c.set_dynamic("log.cleaner.dedupe.buffer.size", "1024", validate_only=True)
    c.replace_dynamic({"message.max.bytes": "10", "log.retention.ms": "5"})
    assert seen == ["log.retention.ms", "message.max.bytes"]
    c.set_dynamic("message.max.bytes", "10")  # unchanged: no notification
    assert seen == ["log.retention.ms", "message.max.bytes"]


def test_cluster_default_dynamic_cross_check():
    c = cfg()
    with pytest.raises(ConfigError, match=r"1MB per cleaner thread"):
        c.set_dynamic("log.cleaner.threads", "200", cluster_default=True)
    assert c.dynamic_configs(cluster_default=True) == {}


def test_message_timestamp_bounds():
    from broker_runtime.config import message_timestamp_bounds

    c = cfg()
    assert message_timestamp_bounds(c.effective_topic_config({})) == (LONG_MAX, LONG_MAX)
    eff = c.effective_topic_config({"message.timestamp.difference.max.ms": "1000"})
    assert message_timestamp_bounds(eff) == (1000, 1000)
    eff = c.effective_topic_config(
        {"message.timestamp.difference.max.ms": "1000", "message.timestamp.after.max.ms": "5"}
    )
    assert message_timestamp_bounds(eff) == (1000, 5)


def test_java_double_format():
    from broker_runtime.config import format_value

    cases = {
        0.5: "0.5",
        1.0: "1.0",
        0.0: "0.0",
        0.001: "0.001",
        1e-4: "1.0E-4",
        1e7: "1.0E7",
        123456789.5: "1.234567895E8",
        9999999.0: "9999999.0",
        1.7976931348623157e308: "1.7976931348623157E308",
    }
    for value, expected in cases.items():
        assert format_value(ConfigType.DOUBLE, value) == expected, value


def test_describe_orders_by_name():
    names = [e.name for e in describe_broker_configs(cfg())]
    assert names == sorted(names)
    names = [e.name for e in describe_topic_configs(cfg(), {})]
    assert names == sorted(names)


def test_describe_topic_override_of_key_without_broker_synonym():
    entries = _by_name(
        describe_topic_configs(cfg(), {"leader.replication.throttled.replicas": "0:1"}, include_synonyms=True)
    )
    e = entries["leader.replication.throttled.replicas"]
    assert (e.value, e.source) == ("0:1", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    assert e.synonyms == [
        ConfigSynonym("leader.replication.throttled.replicas", "0:1", ConfigSource.DYNAMIC_TOPIC_CONFIG)
    ]
    e = entries["follower.replication.throttled.replicas"]
    assert (e.value, e.source, e.synonyms) == ("", ConfigSource.DEFAULT_CONFIG, [])


@pytest.mark.parametrize(
    ("item", "reason"),
    [
        ("ssl.keystore.location=/x", "TLS is not built"),
        ("sasl.enabled.mechanisms=PLAIN", "SASL is not built"),
        ("listener.name.internal.ssl.keystore.location=/x", "per-listener overrides are not built"),
        ("process.roles=broker", "KRaft mode is not built"),
        ("controller.quorum.voters=1@h:9093", "KRaft mode is not built"),
        ("metric.reporters=x.Y", "metrics reporters"),
        ("group.share.enable=true", "share groups (KIP-932) are not built"),
        ("delegation.token.secret.key=k", "delegation tokens are not built"),
        ("quota.window.num=11", "quotas are not built"),
        ("remote.log.manager.thread.pool.size=2", "tiered storage is not built"),
    ],
)
def test_kafka_keys_odradek_does_not_support(item, reason):
    with pytest.raises(ConfigError) as e:
        BrokerConfig.load(None, [item])
    key = item.split("=")[0]
    assert str(e.value).startswith(f"{key}: Kafka setting not supported by Odradek")
    assert reason in str(e.value)
    assert e.value.key == key


def test_non_plaintext_listener_rejected():
    with pytest.raises(ConfigError, match=r"Odradek serves PLAINTEXT only") as e:
        BrokerConfig.load(None, ["listeners=PLAINTEXT://:9092,SSL://:9093"])
    assert e.value.key == "listeners"


def test_describe_topic_kafka_quirk_static_hours_only():
    # Kafka's ConfigHelper drops synonyms listed before the first synonym name (log.retention.ms), so a topic's
    # retention.ms reports DEFAULT_CONFIG even though its value comes from log.retention.hours.
    c = cfg(log_retention_hours="2")
    e = _by_name(describe_topic_configs(c, {}, include_synonyms=True))["retention.ms"]
    assert (e.value, e.source, e.synonyms) == ("7200000", ConfigSource.DEFAULT_CONFIG, [])
    e = _by_name(describe_broker_configs(c, include_synonyms=True))["log.retention.hours"]
    assert e.synonyms == [
        ConfigSynonym("log.retention.hours", "2", ConfigSource.STATIC_BROKER_CONFIG),
        ConfigSynonym("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG),
    ]


def test_uvloop_must_be_installed():
    import importlib.util

    if importlib.util.find_spec("uvloop") is not None:
        assert cfg(odradek_event_loop="uvloop")["odradek.event.loop"] == "uvloop"
    else:
        with pytest.raises(ConfigError, match=r"uvloop package is not installed"):
            cfg(odradek_event_loop="uvloop")
