"""The advertised API version table and feature levels, as data.

It reads as one real Kafka release: the maxima of a Kafka 3.9 broker in ZooKeeper mode (the message specs'
`validVersions` for the `zkBroker` listener, stable versions only), so kafka-python infers 3.9 and librdkafka
enables idempotence, zstd and the balanced consumer. The minimums are Kafka 4.0's (KIP-896) where the message
specs behind `kio` no longer carry the old versions. Produce keeps min 0 as Kafka 4.0 does (KAFKA-18659): older
librdkafka disables compression otherwise; versions 0-2 (magic 0/1) are refused at request time.

Deliberate differences from a 3.9 ZooKeeper-mode broker: APIs whose feature is not built are not advertised
(a 3.9 broker advertises ConsumerGroupHeartbeat and answers it UNSUPPORTED_VERSION; clients that see it not
advertised use the classic protocol at once), and DescribeTopicPartitions (KIP-966), which only KRaft brokers
serve, is advertised because newer admin clients use it for paginated topic descriptions.
Group APIs are merged in by the group handlers (handlers/groups.py), the transaction coordinator's by
handlers/transactions.py, the controller's by handlers/controller.py (handlers/table.py joins them).
"""

from __future__ import annotations

import enum


class ApiKey(enum.IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    DESCRIBE_LOG_DIRS = 35
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    DESCRIBE_TOPIC_PARTITIONS = 75


# api key -> (min, max) this broker implements outside the group package.
CORE_API_VERSIONS: dict[int, tuple[int, int]] = {
    ApiKey.PRODUCE: (0, 11),
    ApiKey.FETCH: (4, 17),
    ApiKey.LIST_OFFSETS: (1, 9),
    ApiKey.METADATA: (0, 12),
    ApiKey.API_VERSIONS: (0, 4),
    ApiKey.CREATE_TOPICS: (2, 7),
    ApiKey.DELETE_TOPICS: (1, 6),
    ApiKey.DELETE_RECORDS: (0, 2),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (2, 4),
    ApiKey.WRITE_TXN_MARKERS: (1, 1),
    ApiKey.DESCRIBE_CONFIGS: (1, 4),
    ApiKey.ALTER_CONFIGS: (0, 2),
    ApiKey.DESCRIBE_LOG_DIRS: (1, 4),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ApiKey.DESCRIBE_CLUSTER: (0, 1),
    ApiKey.DESCRIBE_PRODUCERS: (0, 0),
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: (0, 0),
}

# Versions inside an advertised range that the broker still refuses per request (see module docstring).
REFUSED_VERSIONS: dict[int, range] = {ApiKey.PRODUCE: range(0, 3)}

# ApiVersions v3+: the feature ranges a Kafka 3.9 ZooKeeper-mode broker supports (BrokerFeatures) and the
# levels a fresh 3.9 cluster finalizes in its /feature znode (each feature at its maximum, kraft.version at 0,
# which is not listed because level 0 means "off"). name -> (min, max) / level.
SUPPORTED_FEATURES: dict[str, tuple[int, int]] = {"metadata.version": (1, 21), "kraft.version": (0, 1)}
FINALIZED_FEATURES: dict[str, int] = {"metadata.version": 21}
FINALIZED_FEATURES_EPOCH = 0
