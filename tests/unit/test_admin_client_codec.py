"""The pure parts of the tools' admin client: request building per version, consumer assignments, addresses."""

from __future__ import annotations

import io
import struct

import pytest
from kio.schema.consumer_protocol_assignment.v3 import data as assignment
from kio.serial import entity_writer

from broker_runtime.protocol.apis import ApiKey
from broker_runtime.tools.admin_client import VERSIONS, AdminClient, _assigned, build_request


def test_a_request_keeps_the_fields_of_its_version() -> None:
    old = build_request(ApiKey.METADATA, 3, topics=None, allow_auto_topic_creation=False)
    assert not hasattr(old, "allow_auto_topic_creation")
    new = build_request(ApiKey.METADATA, 9, allow_auto_topic_creation=False, include_topic_authorized_operations=False,
                        include_cluster_authorized_operations=False,
                        topics=lambda m: (m.MetadataRequestTopic(name="t"),))  # fmt: skip
    assert (new.__version__, new.topics[0].name, new.allow_auto_topic_creation) == (9, "t", False)


def test_every_version_spoken_exists_in_kio() -> None:
    from kio.index import load_request_schema, load_response_schema

    for api_key, version in VERSIONS.items():
        load_request_schema(api_key, version)
        load_response_schema(api_key, version)


@pytest.mark.parametrize("version", [0, 1, 3, 4])
def test_consumer_assignments_of_any_version_are_read(version: int) -> None:
    value = assignment.ConsumerProtocolAssignment(
        assigned_partitions=(
            assignment.TopicPartition(topic="b", partitions=(1,)),
            assignment.TopicPartition(topic="a", partitions=(2, 0)),
        ),
        user_data=b"\x01",
    )
    out = io.BytesIO()
    out.write(struct.pack(">h", version))
    entity_writer(type(value))(out, value)
    assert _assigned(out.getvalue()) == (("a", 0), ("a", 2), ("b", 1))
    assert _assigned(b"") == () and _assigned(None) == ()


def test_bootstrap_addresses_are_checked() -> None:
    assert AdminClient("h1:9092, [::1]:9093").bootstrap == [("h1", 9092), ("::1", 9093)]
    with pytest.raises(ValueError, match="is not host:port"):
        AdminClient("localhost")
    with pytest.raises(ValueError, match="no bootstrap server"):
        AdminClient(" ")
