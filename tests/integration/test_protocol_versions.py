"""The newest versions of the Kafka 3.9 table against a live broker: what real clients infer from it, and what each
version added (topic ids in Fetch and Metadata, ListOffsets' new special timestamps, feature levels in
ApiVersions, log-dir sizes, group types), spoken raw with kio and through the clients that use them."""

from __future__ import annotations

import dataclasses
import datetime
import logging
import re
import uuid

import pytest
from kio.schema.errors import ErrorCode as E

from broker_runtime.protocol.apis import ApiKey
from broker_runtime.protocol.operations import CLUSTER_OPERATIONS, OMITTED, TOPIC_OPERATIONS
from broker_runtime.tools.admin_client import build_request

pytestmark = pytest.mark.odradek_only


def nested(module, cls_name: str, **values):
    """A nested request class of one version, keeping the fields that version has."""
    cls = getattr(module, cls_name)
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names})


def request(api: str, version: int, **values):
    """A request of `version` keeping the fields that version has (nested values: callables of its module)."""
    return build_request(ApiKey[api.upper()], version, **values)


def ms(n: int):
    from kio.static.primitive import i32Timedelta

    return i32Timedelta.parse(datetime.timedelta(milliseconds=n))


@pytest.fixture
def client(shared_broker, raw):
    with raw.RawClient.to(shared_broker) as c:
        yield c


def topic_id(client, topic: str) -> uuid.UUID:
    response = client.call(request("metadata", 12, topics=lambda m: (m.MetadataRequestTopic(name=topic, topic_id=None),),
                                   allow_auto_topic_creation=False, include_topic_authorized_operations=False))  # fmt: skip
    (t,) = response.topics
    assert t.error_code == E.none
    return t.topic_id


# --- what clients infer ------------------------------------------------------------------------------------


def test_kafka_python_infers_kafka_3_9(bootstrap, clients) -> None:
    admin = clients.kafka_python_admin(bootstrap)
    try:
        assert admin._manager.broker_version == (3, 9)
        features = admin.describe_features()
    finally:
        admin.close()
    assert features["metadata.version"] == {"supported": (1, 21), "finalized": (21, 21), "finalized_epoch": 0}
    assert features["kraft.version"] == {"supported": (0, 1)}


def test_librdkafka_enables_every_feature_and_speaks_the_new_versions(bootstrap, new_topic) -> None:
    from confluent_kafka import Consumer, Producer

    topic = new_topic()
    lines: list[str] = []

    class Capture(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    logger = logging.getLogger(f"librdkafka-{topic}")
    logger.addHandler(Capture())
    logger.setLevel(logging.DEBUG)
    producer = Producer({"bootstrap.servers": bootstrap, "debug": "feature,protocol"}, logger=logger)
    producer.produce(topic, b"v")
    assert producer.flush(30) == 0
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "auto.offset.reset": "earliest",
         "debug": "protocol"},
        logger=logger,
    )  # fmt: skip
    try:
        consumer.subscribe([topic])
        message = None
        for _ in range(60):
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                break
        assert message is not None and message.value() == b"v"
    finally:
        consumer.close()
    enabled = {m.group(1) for line in lines if (m := re.search(r"Enabling feature (\w+)", line))}
    # Every feature but the SASL handshakes, which need the SASL APIs (not built).
    assert enabled >= {
        "MsgVer1", "ApiVersion", "BrokerBalancedConsumer", "ThrottleTime", "Sasl", "BrokerGroupCoordinator", "LZ4",
        "OffsetTime", "MsgVer2", "IdempotentProducer", "ZSTD",
    }  # fmt: skip
    sent = {
        m.group(1): int(m.group(2)) for line in lines if (m := re.search(r"Sent (\w+)Request \(v(\d+)", line))
    }
    # librdkafka 2.x's newest versions, none capped by the broker (Fetch v13+ names topics by id).
    assert sent["Produce"] >= 10 and sent["Fetch"] >= 16 and sent["Metadata"] >= 12, sent


def test_kafkajs_negotiates_its_newest_version_of_every_api(kafkajs, shared_broker, probe) -> None:
    result = kafkajs("apiVersions")
    advertised = {int(k): (v["minVersion"], v["maxVersion"]) for k, v in result["advertised"].items()}
    assert advertised == probe(shared_broker)
    for api, (chosen, best) in result["chosen"].items():
        assert chosen == best, f"{api}: kafkajs speaks v{chosen}, it implements v{best}"


# --- ApiVersions v3/v4 ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [3, 4])
def test_api_versions_reports_kafka_3_9_feature_levels(client, version) -> None:
    response = client.call(request("api_versions", version, client_software_name="odradek-test",
                                   client_software_version="1.0"))  # fmt: skip
    assert response.error_code == E.none
    supported = {f.name: (f.min_version, f.max_version) for f in response.supported_features}
    # Before v4 a feature with minimum 0 is left out (KAFKA-17011).
    assert supported == ({"metadata.version": (1, 21), "kraft.version": (0, 1)} if version >= 4 else
                         {"metadata.version": (1, 21)})  # fmt: skip
    finalized = {f.name: (f.min_version_level, f.max_version_level) for f in response.finalized_features}
    assert finalized == {"metadata.version": (21, 21)}
    assert response.finalized_features_epoch == 0
    assert {k.api_key: k.max_version for k in response.api_keys}[ApiKey.FETCH] == 17


# --- Fetch and Metadata by topic id -----------------------------------------------------------------------------


def _fetch_by_id(client, version: int, topic_id_value, offset: int = 0):
    return client.call(request(
        "fetch", version, max_wait=ms(0), min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,
        session_epoch=-1, forgotten_topics_data=(), rack_id="",
        topics=lambda m: (m.FetchTopic(topic_id=topic_id_value, partitions=(
            m.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=1 << 20),)),),
    ))  # fmt: skip


@pytest.mark.parametrize("version", [13, 16, 17])
def test_fetch_names_topics_by_id_from_v13(client, bootstrap, new_topic, clients, raw, version) -> None:
    topic = new_topic()
    records = clients.numbered_records(3)
    clients.confluent_produce(bootstrap, topic, records)
    tid = topic_id(client, topic)
    (t,) = _fetch_by_id(client, version, tid).responses
    assert t.topic_id == tid
    (p,) = t.partitions
    assert (p.error_code, p.high_watermark) == (E.none, 3)
    assert [r.value for b in raw.parse_batches(bytes(p.records)) for r in b["records"]] == [
        r.value for r in records
    ]

    unknown = uuid.uuid4()
    (t,) = _fetch_by_id(client, version, unknown).responses
    assert t.topic_id == unknown and t.partitions[0].error_code == E.unknown_topic_id


def test_metadata_v12_looks_topics_up_by_id(client, new_topic) -> None:
    topic = new_topic(partitions=2)
    tid = topic_id(client, topic)
    unknown = uuid.uuid4()
    response = client.call(request(
        "metadata", 12, allow_auto_topic_creation=False, include_topic_authorized_operations=False,
        topics=lambda m: (m.MetadataRequestTopic(name=None, topic_id=tid),
                          m.MetadataRequestTopic(name=None, topic_id=unknown)),
    ))  # fmt: skip
    by_id = {t.topic_id: t for t in response.topics}
    assert (by_id[tid].name, by_id[tid].error_code, len(by_id[tid].partitions)) == (topic, E.none, 2)
    assert (by_id[unknown].name, by_id[unknown].error_code) == (None, E.unknown_topic_id)


def test_metadata_before_v12_refuses_topic_ids(client, new_topic) -> None:
    topic = new_topic()
    tid = topic_id(client, topic)
    response = client.call(request(
        "metadata", 11, allow_auto_topic_creation=False, include_topic_authorized_operations=False,
        topics=lambda m: (m.MetadataRequestTopic(name=topic, topic_id=tid),),
    ))  # fmt: skip
    assert [t.error_code for t in response.topics] == [E.invalid_request]


# --- authorized operations (no authorizer: everything a resource supports) -------------------------------------


@pytest.mark.parametrize("version", [8, 10, 12])
def test_metadata_reports_every_operation_when_asked(client, new_topic, version) -> None:
    topic = new_topic()

    def metadata(asked: bool):
        return client.call(request(
            "metadata", version, allow_auto_topic_creation=False, include_topic_authorized_operations=asked,
            include_cluster_authorized_operations=asked,
            topics=lambda m: (nested(m, "MetadataRequestTopic", name=topic, topic_id=None),),
        ))  # fmt: skip

    asked = metadata(True)
    assert asked.topics[0].topic_authorized_operations == TOPIC_OPERATIONS
    if version <= 10:  # v11 moved cluster operations to DescribeCluster (KIP-700)
        assert asked.cluster_authorized_operations == CLUSTER_OPERATIONS
    assert metadata(False).topics[0].topic_authorized_operations == OMITTED


def test_admin_clients_see_every_operation(bootstrap, new_topic, clients) -> None:
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AclOperation

    topic = new_topic()
    admin = clients.confluent_admin(bootstrap)
    cluster = admin.describe_cluster(include_authorized_operations=True).result(30)
    assert set(cluster.authorized_operations) == {
        AclOperation.CREATE, AclOperation.CLUSTER_ACTION, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
        AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER, AclOperation.DESCRIBE,
    }  # fmt: skip
    topics = admin.describe_topics(TopicCollection([topic]), include_authorized_operations=True)
    described = topics[topic].result(30)
    assert set(described.authorized_operations) == {
        AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE, AclOperation.DESCRIBE, AclOperation.DELETE,
        AclOperation.ALTER, AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
    }  # fmt: skip
    assert admin.describe_cluster().result(30).authorized_operations is None


@pytest.mark.parametrize(("version", "endpoint_type", "error"), [
    (1, 2, E.mismatched_endpoint_type), (1, 7, E.unsupported_endpoint_type), (0, 2, E.invalid_request),
])  # fmt: skip
def test_describe_cluster_is_a_broker_endpoint(client, version, endpoint_type, error) -> None:
    from kio.static.primitive import i8

    response = client.call(request("describe_cluster", version, include_cluster_authorized_operations=False,
                                   endpoint_type=i8(endpoint_type)))  # fmt: skip
    if version == 0:
        # v0 has no endpoint type on the wire: it is always a broker request.
        assert response.error_code == E.none
    else:
        assert response.error_code == error and response.error_message


# --- ListOffsets v8/v9 ------------------------------------------------------------------------------------------


def _list(client, version: int, topic: str, timestamp: int):
    response = client.call(request(
        "list_offsets", version, replica_id=-1, isolation_level=0,
        topics=lambda m: (m.ListOffsetsTopic(name=topic, partitions=(
            m.ListOffsetsPartition(partition_index=0, timestamp=timestamp),)),),
    ))  # fmt: skip
    p = response.topics[0].partitions[0]
    return p.error_code, p.timestamp, p.offset, p.leader_epoch


def test_list_offsets_special_timestamps_by_version(client, bootstrap, new_topic, clients) -> None:
    from confluent_kafka import TopicPartition

    topic = new_topic()
    clients.confluent_produce(bootstrap, topic, clients.numbered_records(5))
    admin = clients.confluent_admin(bootstrap)
    deleted = admin.delete_records([TopicPartition(topic, 0, 2)])
    assert next(iter(deleted.values())).result(30).low_watermark == 2
    # Without tiered storage the local log start is the log start, and nothing is tiered.
    assert _list(client, 8, topic, -4) == (E.none, -1, 2, 0)
    assert _list(client, 9, topic, -5) == (E.none, -1, -1, -1)
    assert _list(client, 9, topic, -1) == (E.none, -1, 5, 0)
    assert _list(client, 9, topic, -2) == (E.none, -1, 2, 0)
    # Each special timestamp needs the version that introduced it; unknown ones are never understood.
    assert _list(client, 7, topic, -4)[0] == E.unsupported_version
    assert _list(client, 8, topic, -5)[0] == E.unsupported_version
    assert _list(client, 6, topic, -3)[0] == E.unsupported_version
    assert _list(client, 9, topic, -6)[0] == E.unsupported_version
    # A timestamp after every record matches nothing, and carries no leader epoch.
    assert _list(client, 9, topic, 2**62) == (E.none, -1, -1, -1)


# --- DescribeLogDirs v3/v4, ListGroups v5, FindCoordinator v5/v6 ---------------------------------------------


def test_describe_log_dirs_reports_disk_space(client) -> None:
    response = client.call(request("describe_log_dirs", 4, topics=None))
    assert response.error_code == E.none
    (result,) = response.results
    assert result.error_code == E.none and 0 < result.usable_bytes <= result.total_bytes


def test_list_groups_v5_filters_by_group_type(bootstrap, new_topic, client, clients) -> None:
    from confluent_kafka import Consumer, TopicPartition

    topic = new_topic()
    group = f"typed-{topic}"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    finally:
        consumer.close()

    def listed(types_filter: tuple[str, ...]) -> dict[str, str]:
        response = client.call(request("list_groups", 5, states_filter=(), types_filter=types_filter))
        assert response.error_code == E.none
        return {g.group_id: g.group_type for g in response.groups}

    assert listed(())[group] == "classic"
    assert listed(("Classic",))[group] == "classic"
    assert group not in listed(("consumer",))


def test_find_coordinator_knows_share_groups_from_v6(client) -> None:
    from kio.static.primitive import i8

    def find(version: int) -> E:
        response = client.call(
            request("find_coordinator", version, key_type=i8(2), coordinator_keys=("share-g",))
        )
        return response.coordinators[0].error_code

    assert find(5) == E.invalid_request
    assert find(6) == E.coordinator_not_available  # share groups are not built (nor served by Kafka 3.9)


def test_produce_v11_round_trip(client, new_topic, clients, raw) -> None:
    topic = new_topic()
    batch = raw.build_batch(clients.numbered_records(2))
    error, base = raw.produce_result(client.call(raw.produce(topic, 0, batch, version=11)))
    assert (error, base) == (E.none, 0)
    error, base = raw.produce_result(client.call(raw.produce(topic, 7, batch, version=11)))
    assert error == E.unknown_topic_or_partition


# --- DescribeTopicPartitions (KIP-966) --------------------------------------------------------------------------


def _describe(client, names: list[str], limit: int, cursor: tuple[str, int] | None = None):
    return client.call(request(
        "describe_topic_partitions", 0, response_partition_limit=limit,
        topics=lambda m: tuple(m.TopicRequest(name=n) for n in names),
        cursor=(lambda m: m.Cursor(topic_name=cursor[0], partition_index=cursor[1])) if cursor else None,
    ))  # fmt: skip


def test_describe_topic_partitions_pages_with_kafka_python(bootstrap, new_topic, clients) -> None:
    small, large = sorted([new_topic(partitions=3), new_topic(partitions=5)])
    sizes = {small: 3, large: 5}
    admin = clients.kafka_python_admin(bootstrap)
    pages = []
    try:
        cursor = None
        while True:
            page = admin.describe_topic_partitions([small, large, "missing-topic"], response_partition_limit=3,
                                                   cursor=cursor)  # fmt: skip
            pages.append(
                [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in page["topics"]]
            )
            cursor = page["next_cursor"]
            if cursor is None:
                break
            assert len(pages) < 10, pages
    finally:
        admin.close()
    seen = {}
    for page in pages:
        for name, indexes in page:
            seen.setdefault(name, []).extend(indexes)
    assert seen[small] == list(range(sizes[small])) and seen[large] == list(range(sizes[large]))
    assert all(sum(len(i) for n, i in page if n != "missing-topic") <= 3 for page in pages)


def test_describe_topic_partitions_cursor_and_errors(client, new_topic) -> None:
    a, b = sorted([new_topic(partitions=2), new_topic(partitions=4)])
    missing = "zz no such topic!"  # sorts after both
    page = _describe(client, [b, a, missing], limit=3)
    # Sorted by name; the limit cuts inside the second topic and the cursor points at the next partition.
    described = [(t.name, [p.partition_index for p in t.partitions]) for t in page.topics]
    assert described == [(a, [0, 1]), (b, [0])]
    assert (page.next_cursor.topic_name, page.next_cursor.partition_index) == (b, 1)
    assert all(t.topic_authorized_operations == TOPIC_OPERATIONS for t in page.topics)
    rest = _describe(client, [b, a, missing], limit=100, cursor=(b, 1))
    described = [(t.name, t.error_code, [p.partition_index for p in t.partitions]) for t in rest.topics]
    assert described == [(b, E.none, [1, 2, 3]), (missing, E.invalid_topic_exception, [])]
    assert rest.next_cursor is None
    # The cursor topic must be among the requested topics, and its partition must not be negative.
    for cursor in ((b, 0), (a, -1)):
        errors = {t.error_code for t in _describe(client, [a], limit=10, cursor=cursor).topics}
        assert errors == {E.invalid_request}, cursor


def test_describe_topic_partitions_of_every_topic(client, new_topic) -> None:
    topic = new_topic(partitions=2)
    names = []
    cursor = None
    for _ in range(1000):
        page = _describe(client, [], limit=50, cursor=cursor)
        names += [t.name for t in page.topics]
        if page.next_cursor is None:
            break
        cursor = (page.next_cursor.topic_name, page.next_cursor.partition_index)
    # A topic with more partitions than a page continues on the next page.
    names = list(dict.fromkeys(names))
    assert topic in names
    assert names == sorted(names)
