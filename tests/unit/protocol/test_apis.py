"""The advertised version table is a Kafka 3.9 ZooKeeper-mode broker's, and kio can encode all of it."""

from __future__ import annotations

import pytest
from kio.index import load_request_schema, load_response_schema

from broker_runtime.handlers.table import HANDLERS, VERSIONS
from broker_runtime.protocol import inter_broker
from broker_runtime.protocol.apis import REFUSED_VERSIONS, ApiKey

# What a Kafka 3.9 broker in ZooKeeper mode advertises for the client APIs Odradek serves: the maxima of
# the message specs' validVersions for the zkBroker listener (clients/src/main/resources/common/message).
KAFKA_3_9_ZK_MAXIMA = {
    ApiKey.PRODUCE: 11,
    ApiKey.FETCH: 17,
    ApiKey.LIST_OFFSETS: 9,
    ApiKey.METADATA: 12,
    ApiKey.OFFSET_COMMIT: 9,
    ApiKey.OFFSET_FETCH: 9,
    ApiKey.FIND_COORDINATOR: 6,
    ApiKey.JOIN_GROUP: 9,
    ApiKey.HEARTBEAT: 4,
    ApiKey.LEAVE_GROUP: 5,
    ApiKey.SYNC_GROUP: 5,
    ApiKey.DESCRIBE_GROUPS: 5,
    ApiKey.LIST_GROUPS: 5,
    ApiKey.API_VERSIONS: 4,
    ApiKey.CREATE_TOPICS: 7,
    ApiKey.DELETE_TOPICS: 6,
    ApiKey.DELETE_RECORDS: 2,
    ApiKey.INIT_PRODUCER_ID: 5,
    ApiKey.ADD_PARTITIONS_TO_TXN: 5,
    ApiKey.ADD_OFFSETS_TO_TXN: 4,
    ApiKey.END_TXN: 4,
    ApiKey.DESCRIBE_TRANSACTIONS: 0,
    ApiKey.LIST_TRANSACTIONS: 1,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: 4,
    ApiKey.DESCRIBE_CONFIGS: 4,
    ApiKey.ALTER_CONFIGS: 2,
    ApiKey.DESCRIBE_LOG_DIRS: 4,
    ApiKey.CREATE_PARTITIONS: 3,
    ApiKey.DELETE_GROUPS: 2,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: 1,
    ApiKey.OFFSET_DELETE: 0,
    ApiKey.DESCRIBE_CLUSTER: 1,
    ApiKey.WRITE_TXN_MARKERS: 1,
    ApiKey.DESCRIBE_PRODUCERS: 0,
    ApiKey.TXN_OFFSET_COMMIT: 4,
}
# Kafka 4.0's raised minimums (KIP-896), where kio no longer has the older schemas; Produce stays at 0.
KAFKA_4_0_MINIMA = {
    ApiKey.FETCH: 4,
    ApiKey.LIST_OFFSETS: 1,
    ApiKey.OFFSET_COMMIT: 2,
    ApiKey.OFFSET_FETCH: 1,
    ApiKey.CREATE_TOPICS: 2,
    ApiKey.DELETE_TOPICS: 1,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: 2,
    ApiKey.DESCRIBE_CONFIGS: 1,
    ApiKey.DESCRIBE_LOG_DIRS: 1,
    ApiKey.WRITE_TXN_MARKERS: 1,
}


# The controller's APIs. Kafka 3.9 advertises LeaderAndIsr 0-7, StopReplica 0-4, UpdateMetadata 0-8,
# ControlledShutdown 0-3 and AlterPartition 0-3; only Odradek brokers send them, so each is served at the one
# version Odradek speaks (AlterPartition: the topic-id versions kio has). The admin ones are Kafka 3.9's.
CONTROLLER_APIS = {
    4: (7, 7),  # LeaderAndIsr
    5: (4, 4),  # StopReplica
    6: (8, 8),  # UpdateMetadata
    7: (3, 3),  # ControlledShutdown
    43: (0, 2),  # ElectLeaders
    45: (0, 0),  # AlterPartitionReassignments
    46: (0, 0),  # ListPartitionReassignments
    56: (2, 3),  # AlterPartition
}


def test_the_table_is_kafka_3_9s_plus_describe_topic_partitions() -> None:
    expected = {key: (KAFKA_4_0_MINIMA.get(key, 0), high) for key, high in KAFKA_3_9_ZK_MAXIMA.items()}
    expected.update(CONTROLLER_APIS)
    # Served by KRaft brokers only in Kafka 3.9, advertised here for the admin clients that page with it.
    expected[ApiKey.DESCRIBE_TOPIC_PARTITIONS] = (0, 0)
    assert expected == VERSIONS
    assert set(HANDLERS) == set(VERSIONS)


@pytest.mark.parametrize("api_key", sorted(VERSIONS))
def test_kio_has_every_advertised_schema(api_key: int) -> None:
    low, high = VERSIONS[api_key]
    refused = REFUSED_VERSIONS.get(api_key, range(0))  # answered by closing the connection, never decoded
    for version in (v for v in range(low, high + 1) if v not in refused):
        if (api_key, version) in inter_broker.SCHEMAS:  # kio lacks them: written with its primitives
            request, response = inter_broker.SCHEMAS[(api_key, version)]
            assert request.__version__ == response.__version__ == version
            continue
        assert load_request_schema(api_key, version).__version__ == version
        assert load_response_schema(api_key, version).__version__ == version


def test_kafka_python_infers_kafka_3_9() -> None:
    from kafka.protocol.broker_version_data import infer_broker_version_from_api_versions

    assert infer_broker_version_from_api_versions(VERSIONS) == (3, 9)
