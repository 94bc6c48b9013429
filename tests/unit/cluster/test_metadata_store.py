"""The standalone metadata file on the fault-injecting filesystem: power cuts, failed writes, damaged files."""

from __future__ import annotations

import asyncio
import errno
import uuid
from pathlib import Path

import pytest

from broker_runtime.cluster.metadata_store import (
    BrokerInfo,
    MetadataFileError,
    PartitionAssignment,
    StandaloneMetadataStore,
    TopicInfo,
)
from broker_runtime.log.fs import FaultInjectingFileSystem

LOG_DIR = Path("/data/logs")
BROKER = BrokerInfo(0, "127.0.0.1", 9092)


@pytest.fixture
def fs() -> FaultInjectingFileSystem:
    filesystem = FaultInjectingFileSystem()
    filesystem.mkdir(LOG_DIR)
    return filesystem


def _topic(name: str) -> TopicInfo:
    return TopicInfo(name, uuid.uuid4(), {0: PartitionAssignment([0], 0, 0, [0])})


def _run(awaitable) -> object:
    async def wait():
        return await awaitable()

    return asyncio.run(wait())


def test_a_power_cut_right_after_a_topic_creation_keeps_the_topic(fs):
    store = StandaloneMetadataStore(LOG_DIR, BROKER, fs=fs)
    topic = _topic("orders")
    _run(lambda: store.create_topic(topic))
    fs.crash(drop_unsynced_dir_entries=True)  # also loses every rename no directory fsync covered
    again = StandaloneMetadataStore(LOG_DIR, BROKER, fs=fs)
    assert again.cluster_id == store.cluster_id
    assert again.topics()["orders"].topic_id == topic.topic_id


def test_changes_are_visible_at_once_and_durable_when_awaited(fs):
    store = StandaloneMetadataStore(LOG_DIR, BROKER, fs=fs)
    topic = _topic("orders")

    async def scenario():
        saved = store.create_topic(topic)
        assert "orders" in store.topics()  # concurrent requests see the topic while it is being saved
        deleted = store.delete_topic("orders")
        await saved
        await deleted
        assert await store.allocate_producer_id_block(1000) == 0
        assert await store.allocate_producer_id_block(1000) == 1000

    asyncio.run(scenario())
    fs.crash(drop_unsynced_dir_entries=True)
    again = StandaloneMetadataStore(LOG_DIR, BROKER, fs=fs)
    assert "orders" not in again.topics()
    assert again.deleting_topic_ids() == {topic.topic_id}  # until its logs are known to be renamed
    assert _run(lambda: again.allocate_producer_id_block(1000)) == 2000


def test_a_failed_save_is_an_error_not_a_silent_loss(fs):
    store = StandaloneMetadataStore(LOG_DIR, BROKER, fs=fs)
    fs.fail_next("fsync_dir", OSError(errno.EIO, "I/O error"))
    with pytest.raises(OSError):
        _run(lambda: store.create_topic(_topic("orders")))


def test_a_damaged_metadata_file_stops_the_start_with_its_name(fs):
    StandaloneMetadataStore(LOG_DIR, BROKER, fs=fs)
    path = LOG_DIR / StandaloneMetadataStore.FILE_NAME
    fs.files[path].data[10:] = b"}"
    with pytest.raises(MetadataFileError, match=r"odradek-metadata\.json"):
        StandaloneMetadataStore(LOG_DIR, BROKER, fs=fs)


def test_a_zookeeper_write_that_loses_its_session_is_a_kafka_error():
    from kazoo.exceptions import SessionExpiredError
    from kio.schema.errors import ErrorCode

    from broker_runtime.cluster.zk_metadata_store import ZkMetadataStore
    from broker_runtime.errors import KafkaError
    from tests.fake_zookeeper import FakeZooKeeper

    class ExpiringClient(type(FakeZooKeeper().client())):
        async def exists(self, *args, **kwargs):
            return None

        async def create(self, *args, **kwargs):
            raise SessionExpiredError()

    async def scenario():
        store = ZkMetadataStore(ExpiringClient(FakeZooKeeper()), BROKER, "PLAINTEXT")
        with pytest.raises(KafkaError) as caught:
            await store.create_topic(_topic("orders"))
        return caught.value

    error = asyncio.run(scenario())
    assert error.error_code == ErrorCode.unknown_server_error
    assert "SessionExpiredError" in error.message
