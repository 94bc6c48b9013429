"""The tools' admin client (broker_runtime/tools/admin_client.py) against a live broker, beside real clients."""

from __future__ import annotations

import subprocess
import sys

import pytest
from kio.schema.errors import ErrorCode

from broker_runtime.protocol.apis import ApiKey
from broker_runtime.tools import admin_client
from broker_runtime.tools.admin_client import EARLIEST, LATEST, AdminClient, AdminError


@pytest.fixture
def admin(bootstrap):
    with AdminClient(bootstrap, timeout_ms=30000) as client:
        yield client


def _consume(bootstrap: str, topic: str, group: str, count: int):
    """A confluent-kafka consumer in `group` reads `count` records and commits; returned still in the group."""
    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})  # fmt: skip
    consumer.subscribe([topic])
    got = 0
    for _ in range(120):
        message = consumer.poll(0.5)
        if message is not None and not message.error():
            got += 1
            if got == count:
                consumer.commit(asynchronous=False)
                return consumer
    consumer.close()
    raise AssertionError(f"consumed {got} of {count}")


def test_groups_described_listed_reset_and_deleted(admin, bootstrap, new_topic, clients):
    topic = new_topic(partitions=2)
    for partition in (0, 1):
        clients.confluent_produce(bootstrap, topic, clients.numbered_records(3), partition=partition)
    group = f"g-{topic}"
    consumer = _consume(bootstrap, topic, group, 6)
    try:
        (described,) = admin.describe_groups([group]).values()
        assert (described.state, described.protocol_type, described.protocol) == (
            "Stable",
            "consumer",
            "range",
        )
        (member,) = described.members
        assert sorted(member.assignment) == [(topic, 0), (topic, 1)]
        assert (group, "Stable", "consumer") in admin.list_groups()
        assert all(state == "Stable" for _, state, _ in admin.list_groups(["Stable"]))
    finally:
        consumer.close()
    committed = admin.list_group_offsets(group)
    assert committed == {(topic, 0): 3, (topic, 1): 3}
    assert admin.list_offsets(committed, EARLIEST) == {(topic, 0): 0, (topic, 1): 0}
    assert admin.list_offsets(committed, LATEST) == committed

    errors = admin.alter_group_offsets(group, {(topic, 0): 0})
    assert errors == {(topic, 0): ErrorCode.none}
    assert admin.list_group_offsets(group)[(topic, 0)] == 0
    assert admin.delete_group_offsets(group, [(topic, 1)]) == (ErrorCode.none, {(topic, 1): ErrorCode.none})
    assert admin.list_group_offsets(group) == {(topic, 0): 0}
    assert admin.delete_groups([group]) == {group: ErrorCode.none}
    assert admin.describe_groups([group])[group].state == "Dead"


def test_a_missing_topic_is_an_error_and_is_not_created(admin, bootstrap, helpers, clients):
    name = helpers.make_topic_name("missing")
    with pytest.raises(AdminError) as exc:
        admin.topic_partitions(name)
    assert exc.value.error == ErrorCode.unknown_topic_or_partition
    assert name not in clients.confluent_admin(bootstrap).list_topics(timeout=10).topics


def test_a_version_the_broker_does_not_serve_is_refused_before_sending(admin, monkeypatch):
    monkeypatch.setitem(admin_client.VERSIONS, ApiKey.OFFSET_DELETE, 7)
    with pytest.raises(AdminError) as exc:
        admin.delete_group_offsets("g", [("t", 0)])
    assert exc.value.error == ErrorCode.unsupported_version and "v7" in str(exc.value)


def test_an_unreachable_bootstrap_is_an_os_error(helpers):
    with AdminClient(f"127.0.0.1:{helpers.free_port()}", timeout_ms=2000) as client, pytest.raises(OSError):
        client.nodes()


def test_the_consumer_groups_tool_needs_no_confluent_kafka(bootstrap, new_topic, clients):
    topic = new_topic()
    clients.confluent_produce(bootstrap, topic, clients.numbered_records(1))
    _consume(bootstrap, topic, f"tool-{topic}", 1).close()
    # confluent-kafka is a development dependency only: the published tool must run without it.
    blocked = "import sys; sys.modules['confluent_kafka'] = None; from broker_runtime.tools.consumer_groups import main"
    run = subprocess.run(
        [sys.executable, "-c", f"{blocked}; sys.exit(main(['--bootstrap-server', '{bootstrap}', '--list']))"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert f"tool-{topic}" in run.stdout.split()
