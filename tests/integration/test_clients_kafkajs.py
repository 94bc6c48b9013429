"""kafkajs 2.2.4 (node) against a real broker process, driven through js/kafkajs_cli.js.

Install once with ``npm ci --prefix tests/integration/js``. kafkajs ignores the broker's minimum versions and uses
min(its best, broker max), and a missing API key is fatal to it, so these tests also check the advertised table.
Its public consumer is always a group member (there is no manual assignment in kafkajs), so the group round trip
needs the group coordinator; the ``fetch`` op reads through kafkajs' own Fetch path without a group.
"""

from __future__ import annotations

import time

import pytest

NONE = 0


def test_round_trip_through_fetch(bootstrap, new_topic, clients, kafkajs):
    topic = new_topic()
    recs = clients.sample_records()
    res = kafkajs("produce", topic=topic, messages=[clients.rec_to_js(r) for r in recs])
    assert [(r["partition"], r["errorCode"], r["baseOffset"]) for r in res] == [(0, NONE, 0)]
    out = kafkajs("fetch", topic=topic, partition=0, offset=0, count=len(recs), timeoutMs=30000)
    got = [clients.rec_from_js(d) for d in out["records"]]
    assert clients.contents(got) == clients.contents(recs)
    assert [r.offset for r in got] == list(range(len(recs)))
    assert out["highWatermark"] == len(recs)
    # and the other clients read kafkajs' batch
    assert clients.contents(clients.confluent_consume(bootstrap, topic, len(recs))) == clients.contents(recs)


def test_round_trip_through_group_consumer(bootstrap, new_topic, clients, kafkajs):
    topic = new_topic(partitions=2)
    recs = clients.numbered_records(20, b"js-group")
    clients.confluent_produce(bootstrap, topic, recs[:10], partition=0)
    clients.confluent_produce(bootstrap, topic, recs[10:], partition=1)
    got = kafkajs("consume", topic=topic, groupId=f"js-{topic}", count=len(recs), timeoutMs=60000)
    assert sorted((d["partition"], d["offset"]) for d in got) == [(p, o) for p in (0, 1) for o in range(10)]
    assert sorted(clients.unb64(d["value"]) for d in got) == sorted(r.value for r in recs)


@pytest.mark.parametrize("acks", [-1, 1, 0])
def test_acks(bootstrap, new_topic, clients, kafkajs, acks):
    topic = new_topic()
    recs = clients.numbered_records(25, f"js-acks{acks}".encode())
    kafkajs("produce", topic=topic, acks=acks, messages=[clients.rec_to_js(r) for r in recs])
    got = clients.confluent_consume(bootstrap, topic, len(recs))
    assert clients.contents(got) == clients.contents(recs)


def test_idempotent_producer(bootstrap, new_topic, clients, kafkajs):
    topic = new_topic()
    recs = clients.numbered_records(200, b"js-idem")
    res = kafkajs("produce", topic=topic, idempotent=True, messages=[clients.rec_to_js(r) for r in recs])
    assert res[0]["errorCode"] == NONE and res[0]["baseOffset"] == 0
    got = clients.confluent_consume(bootstrap, topic, len(recs))
    assert clients.contents(got) == clients.contents(recs)
    assert clients.watermarks(bootstrap, topic) == (0, len(recs))


def test_auto_create_on_produce(bootstrap, clients, kafkajs, topic_name, helpers):
    res = kafkajs("produce", topic=topic_name, messages=[{"key": None, "value": clients.b64(b"auto")}])
    assert res[0]["errorCode"] == NONE
    t = clients.wait_for_topic(bootstrap, topic_name)
    assert len(t.partitions) == helpers.SHARED_AUTO_PARTITIONS


@pytest.mark.odradek_only
def test_unknown_topic_without_auto_create(no_autocreate_broker, clients, topic_name):
    with pytest.raises(clients.KafkaJSFailure) as info:
        clients.run_kafkajs("fetchTopicMetadata", no_autocreate_broker.bootstrap, topics=[topic_name])
    assert "UNKNOWN_TOPIC_OR_PARTITION" in info.value.types, info.value.error
    topics = clients.run_kafkajs("listTopics", no_autocreate_broker.bootstrap)
    assert topic_name not in topics


# --------------------------------------------------------------------------------------------------------------
# admin


def test_create_topics_and_fetch_metadata(kafkajs, helpers):
    name = helpers.make_topic_name("js-create")
    created = kafkajs(
        "createTopics",
        topics=[
            {
                "topic": name,
                "numPartitions": 3,
                "replicationFactor": 1,
                "configEntries": [{"name": "retention.ms", "value": "3600000"}],
            }
        ],
    )
    assert created is True
    md = kafkajs("fetchTopicMetadata", topics=[name])
    (topic,) = md["topics"]
    assert topic["name"] == name
    parts = sorted(topic["partitions"], key=lambda p: p["partitionId"])
    assert [p["partitionId"] for p in parts] == [0, 1, 2]
    assert all(p["partitionErrorCode"] == NONE and p["leader"] >= 0 for p in parts)
    assert all(p["replicas"] == [p["leader"]] and p["isr"] == [p["leader"]] for p in parts)
    # creating it again: kafkajs reports "already exists" as false, not as an error
    assert kafkajs("createTopics", topics=[{"topic": name, "numPartitions": 1}]) is False
    cfg = kafkajs(
        "describeConfigs", resources=[{"type": "TOPIC", "name": name, "configNames": ["retention.ms"]}]
    )
    (entry,) = cfg["resources"][0]["configEntries"]
    assert (entry["configName"], entry["configValue"], entry["isDefault"]) == (
        "retention.ms",
        "3600000",
        False,
    )


def test_create_topics_validate_only_and_rejections(kafkajs, helpers):
    name = helpers.make_topic_name("js-validate")
    assert kafkajs("createTopics", validateOnly=True, topics=[{"topic": name, "numPartitions": 2}]) is True
    assert name not in kafkajs("listTopics")
    cases = {
        "bad name": ({"topic": "no spaces allowed", "numPartitions": 1}, "INVALID_TOPIC_EXCEPTION"),
        "zero partitions": (
            {"topic": helpers.make_topic_name("js-zero"), "numPartitions": 0},
            "INVALID_PARTITIONS",
        ),
        "unknown config": (
            {
                "topic": helpers.make_topic_name("js-cfg"),
                "configEntries": [{"name": "nope.nope", "value": "1"}],
            },
            "INVALID_CONFIG",
        ),
    }
    seen = {}
    for label, (spec, _) in cases.items():
        try:
            kafkajs("createTopics", topics=[spec], waitForLeaders=False)
            seen[label] = "created"
        except Exception as e:  # KafkaJSFailure
            seen[label] = sorted(getattr(e, "types", {type(e).__name__}))
    assert seen == {label: [expected] for label, (_, expected) in cases.items()}
    listed = set(kafkajs("listTopics"))
    assert not {spec["topic"] for spec, _ in cases.values()} & listed


def test_offsets_and_offsets_by_timestamp(bootstrap, new_topic, clients, kafkajs):
    topic = new_topic(partitions=2)
    base = int(time.time() * 1000) - 1_800_000
    msgs = [clients.rec_to_js(clients.Rec(b"k", b"v%d" % i, (), base + 10 * i)) for i in range(8)]
    kafkajs("produce", topic=topic, messages=msgs[:4])
    kafkajs("produce", topic=topic, messages=msgs[4:])
    offsets = {
        p["partition"]: (int(p["low"]), int(p["high"])) for p in kafkajs("fetchTopicOffsets", topic=topic)
    }
    assert offsets == {0: (0, 8), 1: (0, 0)}

    def by_ts(ts):
        return {
            p["partition"]: int(p["offset"])
            for p in kafkajs("fetchTopicOffsetsByTimestamp", topic=topic, timestamp=ts)
        }

    assert by_ts(base + 35) == {0: 4, 1: 0}
    assert by_ts(base + 40) == {0: 4, 1: 0}
    assert by_ts(base - 100) == {0: 0, 1: 0}
    # kafkajs: no record at or after the timestamp -> the partition's high watermark
    assert by_ts(base + 71) == {0: 8, 1: 0}


def test_delete_topics_and_create_partitions(bootstrap, new_topic, clients, kafkajs):
    gone = new_topic()
    grows = new_topic(partitions=1)
    kafkajs("deleteTopics", topics=[gone])
    assert gone not in kafkajs("listTopics")
    kafkajs("createPartitions", topicPartitions=[{"topic": grows, "count": 3}])
    md = kafkajs("fetchTopicMetadata", topics=[grows])
    assert sorted(p["partitionId"] for p in md["topics"][0]["partitions"]) == [0, 1, 2]
    with pytest.raises(clients.KafkaJSFailure) as info:
        kafkajs("createPartitions", topicPartitions=[{"topic": grows, "count": 2}])
    assert "INVALID_PARTITIONS" in info.value.types


def test_describe_and_alter_configs(new_topic, kafkajs):
    topic = new_topic(config={"cleanup.policy": "compact"})
    res = kafkajs("describeConfigs", includeSynonyms=True, resources=[{"type": "TOPIC", "name": topic}])
    (resource,) = res["resources"]
    assert resource["errorCode"] == NONE
    entries = {e["configName"]: e for e in resource["configEntries"]}
    assert entries["cleanup.policy"]["configValue"] == "compact"
    assert entries["cleanup.policy"]["configSource"] == 1  # DYNAMIC_TOPIC_CONFIG
    # deploy/standalone.properties sets no log.roll.*: segment.ms is Kafka's default, marked as such
    assert entries["segment.ms"]["configValue"] == "604800000"
    assert entries["segment.ms"]["configSource"] == 5  # DEFAULT_CONFIG
    assert entries["segment.ms"]["isDefault"] is True
    assert entries["retention.ms"]["configValue"] == "604800000"
    assert entries["cleanup.policy"]["configSynonyms"][0]["configSource"] == 1

    kafkajs(
        "alterConfigs",
        resources=[
            {
                "type": "TOPIC",
                "name": topic,
                "configEntries": [{"name": "retention.ms", "value": "86400000"}],
            }
        ],
    )
    res = kafkajs(
        "describeConfigs",
        resources=[{"type": "TOPIC", "name": topic, "configNames": ["retention.ms", "cleanup.policy"]}],
    )
    entries = {e["configName"]: e["configValue"] for e in res["resources"][0]["configEntries"]}
    # AlterConfigs replaces the whole override set: cleanup.policy is back to its default
    assert entries == {"retention.ms": "86400000", "cleanup.policy": "delete"}


def test_describe_broker_configs_and_cluster(bootstrap, kafkajs):
    cluster = kafkajs("describeCluster")
    (broker,) = cluster["brokers"]
    assert f"{broker['host']}:{broker['port']}" == bootstrap
    assert cluster["controller"] == broker["nodeId"]
    assert cluster["clusterId"]
    res = kafkajs("describeConfigs", resources=[{"type": "BROKER", "name": str(broker["nodeId"])}])
    entries = {e["configName"]: e for e in res["resources"][0]["configEntries"]}
    assert entries["log.retention.hours"]["configValue"] == "168"
    assert "num.partitions" in entries


def test_delete_topic_records(bootstrap, new_topic, clients, kafkajs):
    topic = new_topic()
    clients.confluent_produce(bootstrap, topic, clients.numbered_records(10))
    kafkajs("deleteTopicRecords", topic=topic, partitions=[{"partition": 0, "offset": 7}])
    offsets = kafkajs("fetchTopicOffsets", topic=topic)
    assert [(int(p["low"]), int(p["high"])) for p in offsets] == [(7, 10)]
    out = kafkajs("fetch", topic=topic, partition=0, offset=7, count=3)
    assert [d["offset"] for d in out["records"]] == [7, 8, 9]
