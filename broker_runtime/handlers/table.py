"""The one dispatch table: API key -> handler, and the versions advertised for it."""

from __future__ import annotations

from broker_runtime.handlers.api_versions import handle_api_versions
from broker_runtime.handlers.cluster import handle_describe_cluster, handle_describe_log_dirs
from broker_runtime.handlers.configs import (
    handle_alter_configs,
    handle_describe_configs,
    handle_incremental_alter_configs,
)
from broker_runtime.handlers.controller import CONTROLLER_API_VERSIONS, CONTROLLER_HANDLERS
from broker_runtime.handlers.fetch import handle_fetch
from broker_runtime.handlers.groups import GROUP_API_VERSIONS, GROUP_HANDLERS
from broker_runtime.handlers.metadata import handle_describe_topic_partitions, handle_metadata
from broker_runtime.handlers.offsets import (
    handle_delete_records,
    handle_list_offsets,
    handle_offset_for_leader_epoch,
)
from broker_runtime.handlers.produce import handle_produce
from broker_runtime.handlers.producers import handle_describe_producers
from broker_runtime.handlers.topics import (
    handle_create_partitions,
    handle_create_topics,
    handle_delete_topics,
)
from broker_runtime.handlers.transactions import TRANSACTION_API_VERSIONS, TRANSACTION_HANDLERS
from broker_runtime.handlers.txn_markers import handle_write_txn_markers
from broker_runtime.protocol.apis import CORE_API_VERSIONS, ApiKey

HANDLERS = {
    ApiKey.PRODUCE: handle_produce,
    ApiKey.FETCH: handle_fetch,
    ApiKey.LIST_OFFSETS: handle_list_offsets,
    ApiKey.METADATA: handle_metadata,
    ApiKey.API_VERSIONS: handle_api_versions,
    ApiKey.CREATE_TOPICS: handle_create_topics,
    ApiKey.DELETE_TOPICS: handle_delete_topics,
    ApiKey.DELETE_RECORDS: handle_delete_records,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: handle_offset_for_leader_epoch,
    ApiKey.DESCRIBE_CONFIGS: handle_describe_configs,
    ApiKey.ALTER_CONFIGS: handle_alter_configs,
    ApiKey.DESCRIBE_LOG_DIRS: handle_describe_log_dirs,
    ApiKey.CREATE_PARTITIONS: handle_create_partitions,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: handle_incremental_alter_configs,
    ApiKey.DESCRIBE_CLUSTER: handle_describe_cluster,
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: handle_describe_topic_partitions,
    ApiKey.WRITE_TXN_MARKERS: handle_write_txn_markers,
    ApiKey.DESCRIBE_PRODUCERS: handle_describe_producers,
    **GROUP_HANDLERS,
    **CONTROLLER_HANDLERS,
    **TRANSACTION_HANDLERS,
}
VERSIONS = {**CORE_API_VERSIONS, **GROUP_API_VERSIONS, **CONTROLLER_API_VERSIONS, **TRANSACTION_API_VERSIONS}

assert set(HANDLERS) == set(VERSIONS), "every advertised API needs a handler"
